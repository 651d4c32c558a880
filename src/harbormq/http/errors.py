"""MQ's REST error answers: their body, their status code, and the middleware
that turns any error of a handler into one.

Every refused request gets MQ's shape::

    {"error": [{"msgId": "MQWB0009E", "action": "...", "completionCode": 2,
                "reasonCode": 2085, "type": "rest", "message": "MQWB0009E: ...",
                "explanation": "..."}]}

``RestError`` is what the handlers raise; a ``HarbormqError`` of the queue
manager (an unknown queue, no authority, a full queue) becomes one by its
MQ reason code (``from_harbormq``). The message ids and their status codes
are listed in docs/http.md. Not here: who the caller is (``auth.py``).
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from ..errors import HarbormqError

#: MQCC_FAILED: every error answer's completion code
MQCC_FAILED = 2
#: reason code -> (HTTP status, msgId, explanation, action): the queue manager's
#: refusals as the REST API reports them
MQ_REASONS: dict[int, tuple[int, str, str, str]] = {
    2085: (404, "MQWB0009E", "The object named in the request does not exist.",
           "Give the name of an existing object."),
    2035: (403, "MQWB0035E", "The user is not authorized for the operation.",
           "Ask the queue manager's administrator for the authority (SET AUTHREC)."),
    2053: (503, "MQWB0053E", "The queue is full (MAXDEPTH).",
           "Retry once messages have been taken from the queue."),
    2051: (403, "MQWB0051E", "Puts are inhibited on the queue (PUT(DISABLED)).",
           "Enable puts on the queue, or put to another one."),
    2016: (403, "MQWB0016E", "Gets are inhibited on the queue (GET(DISABLED)).",
           "Enable gets on the queue."),
    2030: (413, "MQWB0030E", "The message is longer than the queue or the queue manager "
           "allows (MAXMSGL).", "Send a shorter message."),
    2048: (400, "MQWB0048E", "The queue does not take persistent messages.",
           "Send the message as nonPersistent."),
    2161: (503, "MQWB0161E", "The queue manager is stopping.", "Retry when it runs again."),
}
#: a queue manager error without a reason code of the table
DEFAULT_MQ = (500, "MQWB0000E", "The queue manager could not carry out the request.",
              "See the message, and the queue manager's operator log.")


class RestError(Exception):
    """A request refused with MQ's error body: ``status``, ``msg_id``, the
    reason code and the words of its ``message``, ``explanation``, ``action``."""

    def __init__(self, status: int, msg_id: str, message: str, *, reason: int = 0,
                 explanation: str = "", action: str = "",
                 headers: dict[str, str] | None = None):
        super().__init__(f"{msg_id}: {message}")
        self.status = status
        self.msg_id = msg_id
        self.message = message
        self.reason = reason
        self.explanation = explanation
        self.action = action
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": [{
            "msgId": self.msg_id, "action": self.action, "completionCode": MQCC_FAILED,
            "reasonCode": self.reason, "type": "rest", "message": f"{self.msg_id}: "
            f"{self.message}", "explanation": self.explanation}]}

    def response(self) -> web.Response:
        """The answer; ``Connection: close`` among the headers closes the
        connection after it (a body left unread is not drained)."""
        headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
        response = web.Response(status=self.status, text=json.dumps(self.body()),
                                content_type="application/json", headers=headers)
        if self.headers.get("Connection") == "close":
            response.force_close()
        return response

    @classmethod
    def from_harbormq(cls, exc: HarbormqError) -> "RestError":
        reason = exc.reason or 0
        status, msg_id, explanation, action = MQ_REASONS.get(reason, DEFAULT_MQ)
        return cls(status, msg_id, f"{exc.msgid}: {exc.message}", reason=reason,
                   explanation=explanation, action=action)


def bad_request(message: str, *, msg_id: str = "MQWB0002E",
                action: str = "Correct the request and send it again.") -> RestError:
    """400: the request cannot be read as the API asks (JSON, a field, a header)."""
    return RestError(400, msg_id, message, explanation="The request is not valid.",
                     action=action)


def error_middleware(emit):
    """The middleware that answers any error of a handler with MQ's error body;
    a failure of harbormq itself (500) is written to the operator log with
    ``emit`` as well."""

    @web.middleware
    async def middleware(request: web.Request, handler):
        try:
            return await handler(request)
        except RestError as exc:
            return exc.response()
        except HarbormqError as exc:
            return RestError.from_harbormq(exc).response()
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return RestError(exc.status, f"MQWB{exc.status:04d}E", exc.reason,
                             explanation=exc.text or exc.reason,
                             action="Correct the request and send it again.",
                             headers={k: v for k, v in exc.headers.items()
                                      if k.lower() in ("allow", "www-authenticate")}).response()
        except (asyncio.CancelledError, ConnectionError):
            raise                              # the client went: no one to answer
        except Exception as exc:  # noqa: BLE001 - a bug must not cost the answer
            emit("HMQ8152E", f"HTTP request {request.method} {request.path} failed: {exc!r}")
            return RestError(500, "MQWB0000E", f"the queue manager failed to process the "
                             f"request: {exc!r}", explanation=DEFAULT_MQ[2],
                             action=DEFAULT_MQ[3]).response()
    return middleware
