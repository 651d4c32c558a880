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
  of its first byte, or whose body has not, is answered 408 and cut
  (``limits.py``): a client dribbling bytes holds one socket, never the
  loop; an idle kept-alive connection is closed after as long;
* a body longer than ``max_body_bytes`` is refused (413) from its
  Content-Length before any of it is read, or once that much has come.

It may open before restart recovery: until the queue manager runs, it
serves only the start's status (``starting.py``).

Not here: who a request is (``auth.py``), MQ's error bodies (``errors.py``).
"""

from __future__ import annotations

from typing import Callable

from aiohttp import web

from ..errors import ConfigError
from ..security import check_listener
from . import console, console_group, messaging, metrics, mqsc_api, openapi, starting
from .connections import connection_middleware
from .context import WebContext
from .errors import error_middleware
from .limits import DeadlineProtocol, DeadlineSite, body_limit, raw_answer, timeout_error

#: the features the listener serves: each adds its routes (metrics and the console
#: add one line each)
FEATURES: list[Callable[[web.Application, WebContext], None]] = [
    mqsc_api.add_routes,
    messaging.add_routes,
    openapi.add_routes,
    metrics.add_routes,
    console.add_routes,
    console_group.add_routes,
    starting.add_routes,
]
#: how long a stop lets requests under way finish
SHUTDOWN_S = 5.0
#: how long the rest of a refused body is read and thrown away before closing
LINGER_S = 1.0


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


class WebServer:
    """The HTTP front end of one queue manager (see the module)."""

    def __init__(self, context: WebContext, tls=None):
        self.context = context
        self.tls = tls
        self.runner: web.AppRunner | None = None
        self.bound: dict | None = None
        #: each open connection's DeadlineProtocol, by its transport
        self.deadlines: dict = {}

    def make_app(self) -> web.Application:
        settings = self.context.settings
        app = web.Application(middlewares=[self._deadline_middleware,
                                           error_middleware(self.context.core.oplog.emit),
                                           body_limit(settings),
                                           # while the queue manager starts: its status only
                                           starting.starting_gate(self.context),
                                           connection_middleware(self.context.core,
                                                                 self.context.starting)],
                              # read_body enforces the limit with MQ's answer; aiohttp's
                              # own (request.read) is a last guard
                              client_max_size=settings.max_body_bytes)
        for add_routes in FEATURES:
            add_routes(app, self.context)
        if self.context.stomp_websocket is not None:
            app.router.add_get("/ws", self._websocket)
        return app

    @web.middleware
    async def _deadline_middleware(self, request: web.Request, handler):
        """The request's headers have come: its connection's deadline stops."""
        deadline = self.deadlines.get(request.transport)
        if deadline is not None:
            deadline.request_started()
        try:
            return await handler(request)
        finally:
            if deadline is not None:
                deadline.request_finished()

    async def _websocket(self, request: web.Request) -> web.StreamResponse:
        return await self.context.stomp_websocket(request)

    async def start(self) -> dict:
        """Listen; ``{"name", "host", "port", "tls", "transport": "http"}``, the
        entry listeners.json gets."""
        settings = self.context.settings
        check_address(settings.host, self.tls is not None, settings.connauth)
        timeout_s = settings.request_timeout_ms / 1000
        # keepalive_timeout: an idle kept-alive connection is closed after twice the
        # request deadline (DeadlineProtocol times a request from its first byte);
        # handler_cancellation: a handler whose client went is cancelled (a
        # destructive get then puts its message back); lingering_time: after a
        # refusal of a body left unread, what still comes is thrown away for so
        # long (so the client reads the answer, not a reset), then the socket closes
        self.runner = web.AppRunner(self.make_app(), handle_signals=False, access_log=None,
                                    shutdown_timeout=SHUTDOWN_S,
                                    keepalive_timeout=2 * timeout_s,
                                    handler_cancellation=True, lingering_time=LINGER_S)
        await self.runner.setup()
        answer = raw_answer(timeout_error(settings, "headers"))
        site = DeadlineSite(self.runner, settings.host, settings.port, ssl_context=self.tls,
                            reuse_address=True, backlog=512,
                            handshake_timeout_s=timeout_s,
                            wrap=lambda inner: DeadlineProtocol(inner, timeout_s, answer,
                                                                self.deadlines))
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
