"""The HTTP listener of a running queue manager: ``WebServer``.

One aiohttp server on the queue manager's loop, started by ``server/`` when
qm.toml has a ``[web]`` table (``harbormq create --web-port``). It serves
every feature of ``FEATURES``: each is a module's ``add_routes(app,
context)`` (``context.py``), so a new feature is one line there. ``/ws``
is STOMP over WebSocket when ``server/`` hands that over.

What the listener itself enforces, before any feature runs:

* the loopback rule: another address only with TLS and ``connauth =
  "required"`` (anonymous requests are for loopback only, and passwords
  never cross a network in clear);
* a request whose headers have not all come within ``request_timeout_ms``
  is cut (aiohttp's keep-alive timer runs until a request's headers are
  complete), and a body not whole by then is refused (408): a client
  dribbling bytes holds one socket, never the loop;
* a body longer than ``max_body_bytes`` is refused (413) from its
  Content-Length before any of it is read, or once that much has come.

Not here: who a request is (``auth.py``), MQ's error bodies (``errors.py``).
"""

from __future__ import annotations

import asyncio
from typing import Callable

from aiohttp import web

from ..errors import ConfigError
from ..security import check_listener
from . import console, messaging, mqsc_api, openapi
from .context import WebContext
from .errors import RestError, error_middleware

#: the features the listener serves: each adds its routes (metrics and the console
#: add one line each)
FEATURES: list[Callable[[web.Application, WebContext], None]] = [
    mqsc_api.add_routes,
    messaging.add_routes,
    openapi.add_routes,
    console.add_routes,
]
#: the app key under which a handler finds the context
CONTEXT = web.AppKey("harbormq_web_context", WebContext)
#: how long a stop lets requests under way finish
SHUTDOWN_S = 5.0


def check_address(host: str, tls: bool, connauth: str) -> None:
    """Refuse a listener that would take anonymous requests from other machines,
    or passwords in clear across a network."""
    check_listener(host, connauth)           # another address: connauth "required"
    try:
        check_listener(host, "optional")
    except ConfigError:                      # not loopback: it needs TLS as well
        if not tls:
            raise ConfigError(f"web: host {host} is not a loopback address: set web.tls = "
                              "true (and web.connauth = \"required\") to serve it; HTTP "
                              "basic passwords never cross a network in clear") from None


@web.middleware
async def body_limit_middleware(request: web.Request, handler):
    """413 from the Content-Length, before a byte of the body is read; the
    connection is then closed (its unread body is not drained)."""
    limit = request.app[CONTEXT].settings.max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        error = RestError(413, "MQWB0108E", f"the request body is {request.content_length} "
                          f"bytes long; this listener takes at most {limit} (web."
                          "max_body_bytes)", explanation="The request body is too long.",
                          action="Send a shorter body.", headers={"Connection": "close"})
        response = error.response()
        response.force_close()
        return response
    return await handler(request)


async def read_body(request: web.Request) -> bytes:
    """The whole body, within the listener's limits: 413 past max_body_bytes
    (a chunked body has no Content-Length), 408 when it has not all come by
    request_timeout_ms."""
    settings = request.app[CONTEXT].settings
    limit = settings.max_body_bytes
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(settings.request_timeout_ms / 1000):
            while True:
                chunk = await request.content.readany()
                if not chunk:
                    break
                size += len(chunk)
                if size > limit:
                    raise RestError(413, "MQWB0108E", f"the request body is longer than "
                                    f"{limit} bytes (web.max_body_bytes)",
                                    explanation="The request body is too long.",
                                    action="Send a shorter body.",
                                    headers={"Connection": "close"})
                chunks.append(chunk)
    except TimeoutError:
        raise RestError(408, "MQWB0408E", f"the request body did not arrive within "
                        f"{settings.request_timeout_ms} ms (web.request_timeout_ms)",
                        explanation="The client sent the request too slowly.",
                        action="Send the whole request at once.",
                        headers={"Connection": "close"}) from None
    return b"".join(chunks)


class WebServer:
    """The HTTP front end of one queue manager (see the module)."""

    def __init__(self, context: WebContext, tls=None):
        self.context = context
        self.tls = tls
        self.runner: web.AppRunner | None = None
        self.bound: dict | None = None

    def make_app(self) -> web.Application:
        app = web.Application(middlewares=[error_middleware, body_limit_middleware],
                              # read_body enforces the limit with MQ's answer; aiohttp's
                              # own (request.read) is a last guard
                              client_max_size=self.context.settings.max_body_bytes)
        app[CONTEXT] = self.context
        for add_routes in FEATURES:
            add_routes(app, self.context)
        if self.context.stomp_websocket is not None:
            app.router.add_get("/ws", self._websocket)
        return app

    async def _websocket(self, request: web.Request) -> web.StreamResponse:
        return await self.context.stomp_websocket(request)

    async def start(self) -> dict:
        """Listen; ``{"name", "host", "port", "tls", "transport": "http"}``, the
        entry listeners.json gets."""
        settings = self.context.settings
        check_address(settings.host, self.tls is not None, settings.connauth)
        timeout_s = settings.request_timeout_ms / 1000
        # keepalive_timeout: aiohttp closes a connection whose next request's headers
        # have not all come by then; handler_cancellation: a handler whose client
        # went is cancelled (a destructive get then puts its message back)
        self.runner = web.AppRunner(self.make_app(), handle_signals=False, access_log=None,
                                    shutdown_timeout=SHUTDOWN_S, keepalive_timeout=timeout_s,
                                    handler_cancellation=True)
        await self.runner.setup()
        site = web.TCPSite(self.runner, settings.host, settings.port, ssl_context=self.tls,
                           reuse_address=True, backlog=512)
        try:
            await site.start()
        except OSError as exc:
            await self.runner.cleanup()
            self.runner = None
            raise ConfigError(f"web: cannot listen on {settings.host}:{settings.port}: "
                              f"{exc.strerror or exc}", msgid="HMQ9506E") from None
        host, port = self.runner.addresses[0][:2]
        self.bound = {"name": "WEB", "host": host, "port": port, "tls": self.tls is not None,
                      "transport": "http"}
        scheme = "https" if self.tls is not None else "http"
        shown = f"[{host}]" if ":" in host else host
        self.context.core.oplog.emit("HMQ8021I", f"HTTP listener WEB started on "
                                     f"{scheme}://{shown}:{port}/")
        return self.bound

    async def stop_accepting(self) -> None:
        if self.runner is not None:
            for site in list(self.runner.sites):
                await site.stop()

    async def stop(self) -> None:
        """Stop accepting; the requests under way get SHUTDOWN_S to finish."""
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None
        self.context.authenticator.close()
