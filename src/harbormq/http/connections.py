"""HTTP requests as connections of the queue manager: ``connection_middleware``.

In IBM MQ the mqweb server's REST and console requests reach the queue
manager as client connections, so DISPLAY CONN shows them with their user and
address. Here each authenticated request of MQ's REST API (admin and
messaging) and of the console's JSON is one ``Connection`` of the core's
registry (``core/connections.py``: the one STOMP and the embedded API use),
for as long as the request runs:

* it is added once the request's user is known (``auth.py`` calls the hook
  this module puts on the request), so a request refused at login never
  shows; it is removed when the answer is written, or the request fails or is
  cancelled (a messaging DELETE's unit of work is committed before that, so
  it shows under its connection while it is open);
* DISPLAY CONN shows APPLTYPE(HTTP), CHANNEL(WEB) (the listener's name in
  listeners.json), CONNAME the client's address, USERID the user, and an
  APPLTAG naming the part of the front end (``APPLTAGS``);
* its queue handles (a put until it is on disk, a waiting get) count in
  IPPROCS and OPPROCS and DISPLAY CONN TYPE(HANDLE) while the request uses
  them (``queue_handle``);
* STOP CONN cancels the request: a get under way backs its unit of work out
  and the message stays on the queue.

Not registered: ``/metrics`` (a scrape counted in the connection figures it
reads would never see them at rest), the console's own files and the OpenAPI
description (no login), and ``/ws``, whose STOMP connections register
themselves as STOMP connections on the listener WEB.
"""

from __future__ import annotations

import asyncio
import contextlib
import re

from aiohttp import web

from ..core.connections import Connection, new_conn_id
from ..core.engine import QueueManagerCore
from .auth import ON_PRINCIPAL_KEY

#: the request's key for its registered connection
CONNECTION_KEY = "harbormq.connection"
#: the kind of connection (DISPLAY CONN's APPLTYPE is it upper-cased)
KIND = "http"
#: DISPLAY CONN's CHANNEL: the HTTP listener's name in listeners.json
LISTENER = "WEB"
#: the paths whose requests are connections, and the APPLTAG each shows
APPLTAGS = (
    (re.compile(r"^/ibmmq/rest/v\d/admin/"), "HTTP REST admin"),
    (re.compile(r"^/ibmmq/rest/v\d/messaging/"), "HTTP REST messaging"),
    (re.compile(r"^/console/api/"), "HTTP console"),
)


def appltag_of(path: str) -> str | None:
    """The APPLTAG of a request to ``path``, or None when it is no connection."""
    return next((tag for pattern, tag in APPLTAGS if pattern.match(path)), None)


def owner_of(conn: Connection) -> str:
    """The owner of the units of work a request's connection begins (DISPLAY
    UOW's OWNER), as STOMP's ``STOMP <conn>``."""
    return f"HTTP {conn.conn_id}"


def request_connection(request: web.Request) -> Connection | None:
    """The request's connection once its user is known, else None."""
    return request.get(CONNECTION_KEY)


@contextlib.contextmanager
def queue_handle(request: web.Request, queue: str, mode: str):
    """``queue`` open for ``mode`` ("input" or "output") by the request's
    connection while the block runs (IPPROCS, OPPROCS, DISPLAY CONN TYPE(HANDLE))."""
    conn = request_connection(request)
    if conn is None:
        yield
        return
    conn.open(queue, mode)
    try:
        yield
    finally:
        conn.close(queue, mode)


def connection_middleware(core: QueueManagerCore, starting=None):
    """The middleware that makes each request of ``APPLTAGS`` a connection of
    ``core`` while it runs (see the module). ``starting`` is the start's status
    (``starting.py``): until the queue manager runs, nothing of the core is
    touched, so the status requests let through then are no connections."""

    @web.middleware
    async def connections(request: web.Request, handler):
        tag = appltag_of(request.path)
        if tag is None or (starting is not None and not starting.running):
            return await handler(request)
        task = asyncio.current_task()

        def stop(_reason: str) -> None:
            # STOP CONN: the request ends (a get under way is backed out); a
            # request stopping itself ends when it has answered
            if task is not None and task is not asyncio.current_task():
                task.cancel()

        def opened(principal) -> None:
            if CONNECTION_KEY in request:
                return
            peer = request.transport.get_extra_info("peername") if request.transport else None
            conn = Connection(new_conn_id(), KIND,
                              peer=f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "",
                              user=principal.user, app=tag, listener=LISTENER, stop=stop)
            owner = owner_of(conn)
            conn.uows = lambda: [u for u in core.uows.values() if u.owner == owner]
            request[CONNECTION_KEY] = core.connections.add(conn)

        request[ON_PRINCIPAL_KEY] = opened
        try:
            return await handler(request)
        finally:
            conn = request.get(CONNECTION_KEY)
            if conn is not None:
                core.connections.remove(conn)

    return connections
