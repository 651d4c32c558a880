"""STOMP over WebSocket: the ``/ws`` endpoint, a second transport beside TCP.

Browsers reach STOMP brokers over WebSocket (stomp.js, ``@stomp/stompjs``;
RabbitMQ's Web-STOMP, ActiveMQ's and Artemis' ws transports). A listener of
qm.toml with ``transport = "websocket"`` serves the path ``/ws`` with aiohttp
on the queue manager's loop; TLS, mutual TLS and the loopback rule are a
STOMP listener's (``listener.py``, ``tlsconfig.py``).

The client must offer one of the subprotocols ``v12.stomp``, ``v11.stomp``,
``v10.stomp`` (``Sec-WebSocket-Protocol``); the first it offers that is one
of these is chosen. A client that offers none of them, or does not ask for a
WebSocket at all, gets an HTTP error that says so (400, 426). The STOMP
version is then agreed by CONNECT's ``accept-version`` as on TCP.

A browser's handshake carries an ``Origin``; such a connection must log in
(or present a client certificate that maps to a user): its page may come from
any web site, and an anonymous loopback connection would act as the OS user
running the browser (cross-site WebSocket hijacking). A program that sends no
Origin is anonymous on a loopback listener exactly as over TCP.

The frames are handled by the same ``StompConnection`` as over TCP, so
authentication, limits, heart-beats, receipts, flow control and backpressure
are the same code: ``WebSocketTransport`` is the asyncio transport it writes
to, and every WebSocket message (text or binary, one frame, several, or part
of one) is fed to it as bytes arrive from a socket. What the server sends in
one loop turn goes as one message (one frame or more; a heart-beat is a
message holding one EOL): a text message when it is UTF-8, else binary.
While the connection does not read (the client is not taking its frames, a
SEND waits), no message is taken from the WebSocket, and aiohttp then stops
reading the socket; while more than the connection's write limit is waiting
to go out, the connection is told to pause, as a TCP transport tells it.

``serve_stomp_websocket`` is what an HTTP front end mounts at ``/ws`` (the
WebSocket listener here is one until it exists). Not here: the STOMP frames
and sessions (``transport.py``, ``connection.py``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import replace
from typing import TYPE_CHECKING

from aiohttp import WSMsgType, web

from ..config import Listener
from ..errors import ConfigError
from .connection import StompConnection

if TYPE_CHECKING:
    import ssl

    from .listener import StompService

#: the WebSocket subprotocols of STOMP, newest first
SUBPROTOCOLS = ("v12.stomp", "v11.stomp", "v10.stomp")
PATH = "/ws"
#: how long a closing WebSocket waits for the client's close frame
CLOSE_TIMEOUT_S = 5.0
#: how long a closing WebSocket may take in all (what is queued, then the close)
#: before its socket is cut: a client that reads nothing holds nothing for ever
LINGER_S = 2 * CLOSE_TIMEOUT_S


class WebSocketTransport(asyncio.Transport):
    """The asyncio transport a StompConnection writes to, over one WebSocket.

    Writes queue here and one task sends them in order, at the pace the
    socket takes them; the connection is paused while more than the write
    limit waits. ``close`` sends what is queued, then the close frame."""

    def __init__(self, ws: web.WebSocketResponse, raw: asyncio.BaseTransport | None,
                 protocol: StompConnection, loop: asyncio.AbstractEventLoop):
        super().__init__()
        self._ws = ws
        self._raw = raw                      # the socket's transport: addresses, TLS
        self._protocol = protocol
        self._outbox: deque[bytes] = deque()
        self._outbox_bytes = 0
        self._high, self._low = 256 * 1024, 64 * 1024
        self._protocol_paused = False
        self._readable = asyncio.Event()
        self._readable.set()
        self._wake = asyncio.Event()
        self._closing = False
        self._writer = loop.create_task(self._write_loop())

    # -- what StompConnection asks of a transport ---------------------------------------
    def get_extra_info(self, name, default=None):
        return self._raw.get_extra_info(name, default) if self._raw is not None else default

    def is_closing(self) -> bool:
        return self._closing

    def pause_reading(self) -> None:
        self._readable.clear()

    def resume_reading(self) -> None:
        self._readable.set()

    def is_reading(self) -> bool:
        return self._readable.is_set()

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        self._high = 256 * 1024 if high is None else high
        self._low = self._high // 4 if low is None else low

    def get_write_buffer_size(self) -> int:
        raw = self._raw.get_write_buffer_size() if self._raw is not None else 0
        return self._outbox_bytes + raw

    def write(self, data) -> None:
        if self._closing or not data:
            return
        self._outbox.append(bytes(data))
        self._outbox_bytes += len(data)
        self._wake.set()
        if not self._protocol_paused and self._outbox_bytes > self._high:
            self._protocol_paused = True
            self._protocol.pause_writing()

    def can_write_eof(self) -> bool:
        # no half-close: a close frame ends both ways (so callers close instead;
        # asyncio.Transport's write_eof refuses)
        return False

    def close(self) -> None:
        """Send what is queued, then close the WebSocket; nothing more is read.
        A client that takes none of it for LINGER_S is cut off."""
        if self._closing:
            return
        self._closing = True
        self._wake.set()
        self._readable.set()                 # the reader sees the close and ends
        self._writer.get_loop().call_later(LINGER_S, self._cut_off)

    def _cut_off(self) -> None:
        if not self._writer.done():
            self._writer.cancel()
            if self._raw is not None:
                self._raw.abort()

    def abort(self) -> None:
        self._outbox.clear()
        self.close()

    # -- the two halves --------------------------------------------------------------------
    async def readable(self) -> None:
        await self._readable.wait()

    async def _write_loop(self) -> None:
        ws = self._ws
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._outbox:
                    data = self._outbox.popleft()
                    await ws.send_frame(data, _message_type(data))
                    self._outbox_bytes -= len(data)
                    if self._protocol_paused and self._outbox_bytes <= self._low:
                        self._protocol_paused = False
                        self._protocol.resume_writing()
                if self._closing:
                    break
            await ws.close()
        except (ConnectionError, RuntimeError, asyncio.TimeoutError):
            pass                             # the client went: connection_lost follows
        finally:
            self._closing = True
            self._outbox.clear()
            self._readable.set()

    async def wait_closed(self) -> None:
        await asyncio.wait([self._writer])   # its end, cut off or not: never raises


def _message_type(data: bytes) -> WSMsgType:
    """A text message when the bytes are UTF-8 (a browser then gets a string),
    else binary."""
    try:
        data.decode()
    except UnicodeDecodeError:
        return WSMsgType.BINARY
    return WSMsgType.TEXT


async def serve_stomp_websocket(request: web.Request, service: "StompService",
                                listener: Listener, *, login_required: bool = False
                                ) -> web.StreamResponse:
    """One STOMP connection over the WebSocket ``request`` asks for, on
    ``listener``: the subprotocol agreed (or an HTTP error), then its messages
    fed to a StompConnection until either side closes. ``login_required``:
    every connection logs in (the HTTP listener's own connauth says so)."""
    refusal = _refusal(request)
    if refusal is not None:
        return refusal
    settings = service.settings
    # a message holds one frame at its limit; more is refused by aiohttp (close 1009)
    ws = web.WebSocketResponse(protocols=SUBPROTOCOLS, compress=False, autoping=True,
                               timeout=CLOSE_TIMEOUT_S, decode_text=False,
                               max_msg_size=settings.max_frame_bytes +
                               settings.max_header_bytes * 2 + 1024)
    await ws.prepare(request)
    conn = StompConnection(service, listener.name)
    if "Origin" in request.headers or login_required:
        # a browser: the page may be any web site's, and an anonymous connection
        # would act as the OS user running the browser; it logs in instead
        conn.settings = replace(settings, connauth="required")
    transport = WebSocketTransport(ws, request.transport, conn, asyncio.get_running_loop())
    conn.connection_made(transport)
    try:
        while not transport.is_closing():
            await transport.readable()
            if transport.is_closing():
                break
            msg = await ws.receive()
            if msg.type in (WSMsgType.TEXT, WSMsgType.BINARY):
                data = msg.data
                conn.data_received(data.encode() if isinstance(data, str) else data)
            else:                            # CLOSE, CLOSING, CLOSED, ERROR: the end
                break
    finally:
        transport.close()
        await transport.wait_closed()
        conn.connection_lost(None)
    return ws


def _refusal(request: web.Request) -> web.Response | None:
    """The HTTP error for a request that is not a STOMP WebSocket handshake."""
    if request.headers.get("Upgrade", "").lower() != "websocket":
        return web.Response(status=426, headers={"Upgrade": "websocket"},
                            text=f"{PATH} speaks STOMP over WebSocket only: ask for a "
                                 "WebSocket (Upgrade: websocket) with one of the "
                                 f"subprotocols {', '.join(SUBPROTOCOLS)}\n")
    offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",")
               if p.strip()]
    if not any(p in SUBPROTOCOLS for p in offered):
        what = f"offered {', '.join(offered)}" if offered else "offered no subprotocol"
        return web.Response(status=400, text=f"the client {what}: STOMP over WebSocket needs "
                                             f"one of the subprotocols "
                                             f"{', '.join(SUBPROTOCOLS)} "
                                             "(Sec-WebSocket-Protocol)\n")
    return None


class WebSocketListener:
    """One ``transport = "websocket"`` listener: an aiohttp server on the queue
    manager's loop serving ``/ws``."""

    def __init__(self, service: "StompService", listener: Listener):
        self.service = service
        self.listener = listener
        self.runner: web.AppRunner | None = None

    async def start(self, tls: "ssl.SSLContext | None") -> tuple[str, int]:
        """Listen; the address bound (host, port)."""
        app = web.Application()
        app.router.add_get(PATH, self._handle)
        # handle_signals: the server process has its own; access_log: one line per
        # request is not what an operator log is for
        self.runner = web.AppRunner(app, handle_signals=False, access_log=None,
                                    shutdown_timeout=CLOSE_TIMEOUT_S)
        await self.runner.setup()
        li = self.listener
        site = web.TCPSite(self.runner, li.host, li.port, ssl_context=tls,
                           reuse_address=True, backlog=512)
        try:
            await site.start()
        except OSError as exc:
            await self.runner.cleanup()
            raise ConfigError(f"listener {li.name} cannot listen on {li.host}:{li.port}: "
                              f"{exc.strerror or exc}", msgid="HMQ9506E") from None
        host, port = self.runner.addresses[0][:2]
        return host, port

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        return await serve_stomp_websocket(request, self.service, self.listener)

    async def stop_accepting(self) -> None:
        if self.runner is not None:
            for site in list(self.runner.sites):
                await site.stop()

    async def stop(self) -> None:
        """Stop accepting and end the WebSockets still open (their connections
        were failed by the service first)."""
        if self.runner is not None:
            await self.runner.cleanup()
