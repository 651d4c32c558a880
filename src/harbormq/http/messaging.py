"""MQ's messaging REST API: put, get and browse messages over HTTP.

On ``/ibmmq/rest/v2/messaging/qmgr/{qmgr}/queue/{queue}/message`` (v1 and v3
too):

* ``POST`` puts the body as one message (201, its id in
  ``ibm-mq-md-messageId``). Its descriptor comes from MQ's headers:
  ``ibm-mq-md-persistence`` (``persistent``/``nonPersistent``; absent: the
  queue's DEFPSIST), ``ibm-mq-md-priority`` (0-9; absent: DEFPRTY),
  ``ibm-mq-md-correlationId`` (hex, up to 24 bytes), ``ibm-mq-md-replyTo``
  (``queue`` or ``queue@qmgr``), ``ibm-mq-md-expiry`` (milliseconds or
  ``unlimited``), ``ibm-mq-usr`` (user properties, a JSON array of
  ``{"name", "value"}``); the Content-Type is the message's format. A
  persistent message is on disk before the 201.
* ``DELETE`` gets the first message destructively (``messageId``,
  ``correlationId`` select; ``wait`` in milliseconds waits for one): 200
  with the body and the ``ibm-mq-md-*`` headers, 204 when there is none.
  The get is under a unit of work committed once the answer is written: a
  client that goes before it leaves the message on the queue (backed out,
  its backout count raised), so a message is never lost between the queue
  and the client (at least once).
* ``GET`` browses: the first message (or the one ``messageId`` or
  ``correlationId`` names, or the one after ``afterMessageId``) without
  taking it; ``GET .../messagelist?limit=N&afterMessageId=ID`` lists up to
  N messages' descriptors (no bodies) and the link to the next page.

Messages are the ones STOMP sees: a STOMP ``correlation-id`` is the
correlation id's bytes (hex here), ``content-type`` the format, a STOMP
header not of STOMP's own a user property. Authority is checked as for
STOMP (+put, +get, +browse on the queue); a state-changing request needs
the CSRF header. Not here: the queue manager's message path (``core/``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from datetime import datetime, timezone

from aiohttp import web

from ..core.queue import MessageMatch
from ..log.records import Message
from .connections import owner_of, queue_handle, request_connection
from .context import WebContext
from .errors import RestError, bad_request
from .limits import read_body
from .server_support import check_qmgr

BASE = r"/ibmmq/rest/{version:v[123]}/messaging/qmgr/{qmgr}/queue/{queue}"
MD = "ibm-mq-md-"
USR = "ibm-mq-usr"
#: the longest message id or correlation id (MQ's MQBYTE24)
ID_BYTES = 24
#: a messagelist page: the default and the most
PAGE_DEFAULT, PAGE_MAX = 10, 1000
#: messages looked at per loop turn while a cursor's message is looked for
SCAN_CHUNK = 1000
#: message ids remembered with their place in their queue, for paging
CURSORS_MAX = 10_000
#: a got message's answer is written this much at a time (``_send``)
SEND_PIECE = 64 * 1024
#: the longest wait of a get (MQ's MQWI_UNLIMITED is not offered over HTTP)
MAX_WAIT_MS = 3_600_000


def add_routes(app: web.Application, context: WebContext) -> None:
    api = MessagingApi(context)
    app.router.add_post(BASE + "/message", api.put)
    app.router.add_delete(BASE + "/message", api.get)
    app.router.add_get(BASE + "/message", api.browse)
    app.router.add_get(BASE + "/messagelist", api.message_list)


def _hex_id(text: str, what: str) -> bytes:
    try:
        value = bytes.fromhex(text)
    except ValueError:
        raise bad_request(f"{what} {text!r} is not hexadecimal (two digits a byte)") from None
    if len(value) > ID_BYTES:
        raise bad_request(f"{what} is {len(value)} bytes; at most {ID_BYTES}")
    return value


def _int(text: str, what: str, lo: int, hi: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise bad_request(f"{what} {text!r} is not a whole number") from None
    if not lo <= value <= hi:
        raise bad_request(f"{what} {value} is out of range ({lo} to {hi})")
    return value


def message_headers(msg: Message, now_ns: int) -> dict[str, str]:
    """The ``ibm-mq-md-*`` headers (and ``ibm-mq-usr``) of a message got or browsed."""
    h = {MD + "messageId": msg.msg_id.hex(),
         MD + "persistence": "persistent" if msg.persistent else "nonPersistent",
         MD + "priority": str(msg.priority),
         MD + "expiry": ("unlimited" if not msg.expiry_ns else
                         str(max(0, (msg.expiry_ns - now_ns) // 1_000_000))),
         MD + "backoutCount": str(msg.backout_count),
         MD + "putDateTime": _iso(msg.put_time_ns)}
    if msg.correl_id:
        h[MD + "correlationId"] = msg.correl_id.hex()
    if msg.reply_to:
        h[MD + "replyTo"] = msg.reply_to
    if msg.properties:
        h[USR] = json.dumps([{"name": k, "value": v} for k, v in msg.properties.items()])
    return h


def message_summary(msg: Message, now_ns: int) -> dict:
    """A messagelist entry: the descriptor without the body."""
    out = {"messageId": msg.msg_id.hex(), "correlationId": msg.correl_id.hex(),
           "persistence": "persistent" if msg.persistent else "nonPersistent",
           "priority": msg.priority,
           "expiry": "unlimited" if not msg.expiry_ns else
           max(0, (msg.expiry_ns - now_ns) // 1_000_000),
           "replyTo": msg.reply_to, "format": msg.format, "backoutCount": msg.backout_count,
           "putDateTime": _iso(msg.put_time_ns), "size": len(msg.body)}
    if msg.properties:
        out["properties"] = dict(msg.properties)
    return out


def _iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, timezone.utc).isoformat(timespec="milliseconds")


class MessagingApi:
    """The handlers; ``cursors`` remembers where in its queue each message
    served lately was, so that the next page after it starts there at once."""

    def __init__(self, context: WebContext):
        self.context = context
        self.core = context.core
        self.cursors: OrderedDict[tuple[str, bytes], bytes] = OrderedDict()

    async def _caller(self, request: web.Request, authority: str):
        """The queue's name, after the URL's queue manager, who is asking, the
        CSRF rule and the authority on the queue are checked."""
        check_qmgr(request, self.context)
        auth = self.context.authenticator
        principal = await auth.principal(request)
        auth.check_csrf(request)
        queue = request.match_info["queue"]
        auth.require(principal, "QUEUE", queue, authority)
        return queue, principal

    # -- put ---------------------------------------------------------------------------
    async def put(self, request: web.Request) -> web.Response:
        queue, principal = await self._caller(request, "put")
        msg = self._message(request, queue, await read_body(request, self.context.settings))
        with queue_handle(request, queue, "output"):
            msg = await self.core.put(queue, msg)     # a persistent one: on disk on return
        if msg.seq:
            self._remember(queue, msg)
        return web.Response(status=201, headers={MD + "messageId": msg.msg_id.hex()})

    def _message(self, request: web.Request, queue: str, body: bytes) -> Message:
        h = request.headers
        persistent = None
        if MD + "persistence" in h:
            value = h[MD + "persistence"]
            if value not in ("persistent", "nonPersistent"):
                raise bad_request(f"{MD}persistence is {value!r}: persistent or nonPersistent")
            persistent = value == "persistent"
        priority = _int(h[MD + "priority"], MD + "priority", 0, 9) \
            if MD + "priority" in h else None
        # (an unknown queue is MQRC 2085 here, before anything is read of the message)
        priority, persistent = self.core.defaults_for_name(queue, priority, persistent)
        expiry_ns = 0
        expiry = h.get(MD + "expiry", "unlimited")
        if expiry != "unlimited":
            expiry_ns = time.time_ns() + _int(expiry, MD + "expiry", 1, 2**62 // 10**6) * \
                1_000_000
        correl = _hex_id(h[MD + "correlationId"], MD + "correlationId") \
            if MD + "correlationId" in h else b""
        return Message(body=body, correl_id=correl, priority=priority, persistent=persistent,
                       expiry_ns=expiry_ns, reply_to=h.get(MD + "replyTo", ""),
                       format=h.get("Content-Type", ""),
                       properties=_user_properties(h.get(USR)))

    # -- get ---------------------------------------------------------------------------
    async def get(self, request: web.Request) -> web.StreamResponse:
        queue, principal = await self._caller(request, "get")
        match = self._match(request)
        q = request.query
        wait_s = _int(q["wait"], "wait", 0, MAX_WAIT_MS) / 1000 if "wait" in q else 0
        core = self.core
        conn = request_connection(request)
        # DISPLAY CONN shows it under the request's connection while it is open
        uow = core.begin(owner=owner_of(conn) if conn is not None
                         else f"HTTP {principal.user} {queue}")
        try:
            with queue_handle(request, queue, "input"):
                msg = await core.get(queue, uow, wait=wait_s, match=match)
            if msg is None:
                core.discard_empty(uow)
                return web.Response(status=204)
            response = await self._send(request, msg)
            await core.commit(uow)
            return response
        except BaseException:
            if uow.state in ("active", "prepared"):
                # the client went, or the answer failed: the message goes back (not
                # awaited here: this task may be being cancelled)
                core.spawn(core.backout(uow))
            raise

    # -- browse ------------------------------------------------------------------------
    async def browse(self, request: web.Request) -> web.Response:
        queue, _principal = await self._caller(request, "browse")
        after = await self._after(request, queue)
        found = self.core.browse(queue, limit=1, after=after, match=self._match(request))
        if not found:
            return web.Response(status=204)
        self._remember(queue, found[0])
        return self._message_response(found[0])

    async def message_list(self, request: web.Request) -> web.Response:
        queue, _principal = await self._caller(request, "browse")
        q = request.query
        limit = _int(q["limit"], "limit", 1, PAGE_MAX) if "limit" in q else PAGE_DEFAULT
        after = await self._after(request, queue)
        page = self.core.browse(queue, limit=limit + 1, after=after, match=self._match(request))
        more = len(page) > limit
        page = page[:limit]
        now = time.time_ns()
        for msg in page:
            self._remember(queue, msg)
        next_page = None
        if more:
            query = dict(q)
            query.update(limit=str(limit), afterMessageId=page[-1].msg_id.hex())
            next_page = str(request.rel_url.with_query(query))
        return web.json_response({"messages": [message_summary(m, now) for m in page],
                                  "nextPage": next_page})

    # -- the parts ---------------------------------------------------------------------
    def _message_response(self, msg: Message) -> web.Response:
        response = web.Response(status=200, body=msg.body,
                                headers=message_headers(msg, time.time_ns()))
        _content_type(response, msg.format)
        return response

    async def _send(self, request: web.Request, msg: Message) -> web.StreamResponse:
        """Write a got message's answer a piece at a time, each once the
        connection has taken the one before: over TLS a single write is taken
        whole into the process's buffers whatever the client reads, and the
        get would be committed before the client had it."""
        response = web.StreamResponse(status=200,
                                      headers=message_headers(msg, time.time_ns()))
        _content_type(response, msg.format)
        response.content_length = len(msg.body)
        await response.prepare(request)
        body = memoryview(msg.body)
        for start in range(0, len(body), SEND_PIECE):
            await response.write(body[start:start + SEND_PIECE])
        await response.write_eof()
        return response

    @staticmethod
    def _match(request: web.Request) -> MessageMatch | None:
        q = request.query
        msg_id = _hex_id(q["messageId"], "messageId") if "messageId" in q else None
        correl = _hex_id(q["correlationId"], "correlationId") if "correlationId" in q else None
        return None if msg_id is None and correl is None else MessageMatch(msg_id, correl)

    def _remember(self, queue: str, msg: Message) -> None:
        self.cursors[(queue, msg.msg_id)] = msg.key
        self.cursors.move_to_end((queue, msg.msg_id))
        while len(self.cursors) > CURSORS_MAX:
            self.cursors.popitem(last=False)

    async def _after(self, request: web.Request, queue: str) -> bytes | None:
        """The place in the queue after ``afterMessageId``: remembered when this
        listener served that message lately, else looked for a chunk of the
        queue per loop turn (a deep queue never holds the loop); 404 when the
        message is not on the queue."""
        if "afterMessageId" not in request.query:
            return None
        msg_id = _hex_id(request.query["afterMessageId"], "afterMessageId")
        key = self.cursors.get((queue, msg_id))
        if key is not None:
            return key
        after = None
        while True:
            chunk = self.core.browse(queue, limit=SCAN_CHUNK, after=after)
            for msg in chunk:
                if msg.msg_id == msg_id:
                    self._remember(queue, msg)
                    return msg.key
            if len(chunk) < SCAN_CHUNK:
                raise RestError(404, "MQWB0033E", f"message {msg_id.hex()} "
                                f"(afterMessageId) is not on queue {queue}", reason=2033,
                                explanation="The message the page starts after is gone.",
                                action="Browse from the start of the queue again.")
            after = chunk[-1].key
            await asyncio.sleep(0)


def _content_type(response: web.StreamResponse, fmt: str) -> None:
    """The message's format as the answer's Content-Type (and charset)."""
    response.content_type = fmt.split(";")[0].strip() or "application/octet-stream"
    if "charset=" in fmt:
        response.charset = fmt.split("charset=", 1)[1].split(";")[0].strip()


def _user_properties(text: str | None) -> dict:
    """``ibm-mq-usr``: a JSON array of ``{"name", "value"}``. Values are kept as
    text (a number or a boolean as its JSON text), as STOMP headers carry them;
    a name is a STOMP header's (no ':', no line break)."""
    if not text:
        return {}
    try:
        items = json.loads(text)
    except ValueError:
        raise bad_request(f"{USR} is not JSON: give an array of {{\"name\", \"value\"}}") \
            from None
    if not isinstance(items, list) or not all(
            isinstance(i, dict) and isinstance(i.get("name"), str) and "value" in i
            for i in items):
        raise bad_request(f"{USR} must be an array of {{\"name\": ..., \"value\": ...}}")
    for i in items:
        if not i["name"] or any(c in i["name"] for c in ":\r\n") or i["name"].startswith(
                "ibm-mq-"):
            raise bad_request(f"{USR}: property name {i['name']!r} is not allowed (empty, "
                              "with ':' or a line break, or ibm-mq-*)")
    return {i["name"]: i["value"] if isinstance(i["value"], str) else json.dumps(i["value"])
            for i in items}
