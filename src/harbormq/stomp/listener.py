"""STOMP listeners of a running queue manager.

One server per ``[[listeners]]`` entry of qm.toml: an asyncio server for STOMP
over TCP, or an aiohttp one for STOMP over WebSocket (``transport =
"websocket"``, ``websocket.py``; aiohttp is imported only then). TLS when the
entry names a certificate and key, client certificates when it says
``client_auth`` (``tlsconfig.py``). A listener that is not on a loopback
address is refused unless ``stomp.connauth = "required"`` or it requires a
client certificate: anonymous connections are only ever accepted from this
machine. The addresses actually bound (a port of 0 picks a free one) are
written to ``qmgrs/<QM>/listeners.json`` for clients and tests to find. The
service holds the connections' admission (``admission.py``: the budget of
sockets not yet connected, the password checks' threads) and, once a burst
has passed, gives the memory it left back to the system (``memory.py``).
"""

from __future__ import annotations

import asyncio
import json

from ..config import QMConfig
from ..core.engine import QueueManagerCore
from ..core.objects import SecurityCatalog
from ..errors import ConfigError
from ..fsutil import atomic_write
from ..security import CertificateMatch, ClientAdmission, check_listener, listener_channels
from .admission import Admission
from .connection import StompConnection
from .memory import MemoryReturn
from .tlsconfig import certificate_user, listener_tls


class StompService:
    def __init__(self, core: QueueManagerCore, config: QMConfig, security):
        self.core = core
        self.config = config
        self.settings = config.stomp
        self.security = security
        self.loop: asyncio.AbstractEventLoop | None = None
        self.connections: set[StompConnection] = set()
        self.servers: list[asyncio.base_events.Server] = []
        self.bound: list[dict] = []
        #: backouts of closed connections' units of work, awaited by stop()
        self.backouts: set[asyncio.Task] = set()
        #: durable subscription name -> the connection consuming it (topics.py)
        self.durable_in_use: dict[str, StompConnection] = {}
        #: who a connection is (its listener's SVRCONN channel, CHLAUTH, CONNAUTH),
        #: and the slots of sockets before and after CONNECT with the password
        #: checks' threads: made by start(), before the first connection
        self.clients: ClientAdmission
        self.admission: Admission
        self.memory: MemoryReturn | None = None
        #: the WebSocket listeners (websocket.WebSocketListener)
        self.ws_listeners: list = []

    def check_listeners(self) -> None:
        """Refuse a configuration that would accept anonymous remote clients (a
        listener that requires client certificates has none)."""
        for li in self.config.listeners:
            li.check_tls()
            if li.client_auth != "required":
                check_listener(li.host, self.settings.connauth)

    def certificate_user(self, listener_name: str,
                         transport) -> tuple[CertificateMatch | None, str | None]:
        """For a connection just made: the user its client certificate maps to,
        or why it is refused (``tlsconfig.certificate_user``; logged)."""
        li = next((li for li in self.config.listeners if li.name == listener_name), None)
        if li is None or li.client_auth == "none":
            return None, None
        match, refusal = certificate_user(li, self.config.security,
                                          transport.get_extra_info("peercert"))
        if refusal is not None:
            peer = transport.get_extra_info("peername")
            self.core.oplog.emit("HMQ5541E", f"STOMP connection from {peer} on listener "
                                 f"{listener_name} refused: {refusal}")
        return match, refusal

    async def start(self) -> list[dict]:
        self.check_listeners()
        self.loop = asyncio.get_running_loop()
        core, security = self.core, self.security
        self.clients = ClientAdmission(
            security, SecurityCatalog(core), listener_channels(self.config.listeners),
            # (a connection ended with an ERROR holds no instance while it drains)
            live=lambda: [c.info.conn_id for c in self.connections
                          if c.info is not None and not c._closing],
            connauth_floor=self.settings.connauth, emit=core.oplog.emit)
        self.admission = Admission(self.settings, security, core.oplog, self.clients)
        self.memory = MemoryReturn(self.loop, self.core.oplog.emit)
        self.memory.start()
        self.security.refresh_connauth(SecurityCatalog(self.core))
        for li in self.config.listeners:
            tls = listener_tls(li)
            if li.transport == "websocket":
                await self._start_websocket(li, tls)
                continue
            try:
                server = await self.loop.create_server(
                    lambda name=li.name: StompConnection(self, name), li.host, li.port,
                    ssl=tls, reuse_address=True, backlog=512)
            except OSError as exc:
                raise ConfigError(f"listener {li.name} cannot listen on {li.host}:{li.port}: "
                                  f"{exc.strerror or exc}", msgid="HMQ9506E") from None
            self.servers.append(server)
            host, port = server.sockets[0].getsockname()[:2]
            self.bound.append({"name": li.name, "host": host, "port": port, "tls": li.tls})
            self.core.oplog.emit("HMQ8021I", f"STOMP listener {li.name} started on "
                                 f"{host}:{port}{_tls_text(li)}")
        atomic_write(self.config.listeners_path, json.dumps(self.bound, indent=1).encode())
        return self.bound

    async def _start_websocket(self, li, tls) -> None:
        from .websocket import PATH, WebSocketListener  # aiohttp: only when used
        wsl = WebSocketListener(self, li)
        host, port = await wsl.start(tls)
        self.ws_listeners.append(wsl)
        self.bound.append({"name": li.name, "host": host, "port": port, "tls": li.tls,
                           "transport": "websocket", "path": PATH})
        scheme = "wss" if li.tls else "ws"
        shown = f"[{host}]" if ":" in host else host
        self.core.oplog.emit("HMQ8021I", f"STOMP over WebSocket listener {li.name} started "
                             f"on {scheme}://{shown}:{port}{PATH}{_tls_text(li)}")

    async def stop(self) -> None:
        """Stop accepting, then end every connection (their unfinished units of work
        are backed out before the queue manager stops)."""
        for server in self.servers:
            server.close()
        for wsl in self.ws_listeners:
            await wsl.stop_accepting()
        for conn in list(self.connections):
            conn.fail(f"queue manager {self.core.name} is stopping")
        for server in self.servers:
            await server.wait_closed()
        for wsl in self.ws_listeners:
            await wsl.stop()
        await asyncio.sleep(0)      # let connection_lost run: it starts the backouts
        if self.backouts:
            await asyncio.gather(*list(self.backouts), return_exceptions=True)
        if hasattr(self, "admission"):      # (not when start failed before making it)
            self.admission.close()
        if self.memory is not None:
            self.memory.stop()
        try:
            self.config.listeners_path.unlink()
        except FileNotFoundError:
            pass


def _tls_text(li) -> str:
    if not li.tls:
        return ""
    return " (TLS)" if li.client_auth == "none" else f" (TLS, client_auth {li.client_auth})"
