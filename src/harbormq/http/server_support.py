"""What the REST handlers share: the queue manager of the URL, a JSON body.

Not here: the listener (``server.py``), who is asking (``auth.py``).
"""

from __future__ import annotations

import json

from aiohttp import web

from .context import WebContext
from .errors import RestError, bad_request
from .limits import read_body


def check_qmgr(request: web.Request, context: WebContext) -> None:
    """The URL's ``{qmgr}`` is this queue manager (404 otherwise)."""
    name = request.match_info["qmgr"]
    if name != context.qmgr_name:
        raise RestError(404, "MQWB0009E", f"could not find the queue manager {name!r}: this "
                        f"listener serves {context.qmgr_name}", reason=2058,
                        explanation="The queue manager named in the URL is not this one.",
                        action="Use the queue manager's name in the URL.")


async def body_json(request: web.Request, context: WebContext) -> dict:
    """The body as a JSON object (400 when it is not one)."""
    if request.content_type not in ("application/json", ""):
        raise RestError(415, "MQWB0415E", f"the body is {request.content_type}: send "
                        "application/json", explanation="The body's type is not JSON.",
                        action="Set Content-Type: application/json.")
    raw = await read_body(request, context.settings)
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise bad_request(f"the body is not UTF-8 JSON: {exc}") from None
    if not isinstance(body, dict):
        raise bad_request(f"the body is a JSON {type(body).__name__}, not an object")
    return body
