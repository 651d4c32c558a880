"""STOMP listeners of a running queue manager.

One asyncio server per ``[[listeners]]`` entry of qm.toml, TLS when the entry
names a certificate and key. A listener that is not on a loopback address is
refused unless ``stomp.connauth = "required"``: anonymous connections are only
ever accepted from this machine. The addresses actually bound (a port of 0
picks a free one) are written to ``qmgrs/<QM>/listeners.json`` for clients and
tests to find. The service holds the connections' admission (``admission.py``:
the budget of sockets not yet connected, the password checks' threads) and,
once a burst has passed, gives the memory it left back to the system
(``memory.py``).
"""

from __future__ import annotations

import asyncio
import json
import ssl

from ..config import QMConfig
from ..core.engine import QueueManagerCore
from ..errors import ConfigError
from ..fsutil import atomic_write
from ..security import check_listener
from .admission import Admission
from .connection import StompConnection
from .memory import MemoryReturn


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
        self.admission = Admission(self.settings, security, core.oplog)
        self.memory: MemoryReturn | None = None

    def check_listeners(self) -> None:
        """Refuse a configuration that would accept anonymous remote clients."""
        for li in self.config.listeners:
            check_listener(li.host, self.settings.connauth)

    async def start(self) -> list[dict]:
        self.check_listeners()
        self.loop = asyncio.get_running_loop()
        self.memory = MemoryReturn(self.loop, self.core.oplog.emit)
        self.memory.start()
        for li in self.config.listeners:
            tls = None
            if li.tls:
                tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
                try:
                    tls.load_cert_chain(li.tls_cert, li.tls_key)
                except (OSError, ssl.SSLError) as exc:
                    raise ConfigError(f"listener {li.name}: cannot load TLS certificate "
                                      f"{li.tls_cert} / key {li.tls_key}: {exc}",
                                      msgid="HMQ9505E") from None
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
                                 f"{host}:{port}{' (TLS)' if li.tls else ''}")
        atomic_write(self.config.listeners_path, json.dumps(self.bound, indent=1).encode())
        return self.bound

    async def stop(self) -> None:
        """Stop accepting, then end every connection (their unfinished units of work
        are backed out before the queue manager stops)."""
        for server in self.servers:
            server.close()
        for conn in list(self.connections):
            conn.fail(f"queue manager {self.core.name} is stopping")
        for server in self.servers:
            await server.wait_closed()
        await asyncio.sleep(0)      # let connection_lost run: it starts the backouts
        if self.backouts:
            await asyncio.gather(*list(self.backouts), return_exceptions=True)
        self.admission.close()
        if self.memory is not None:
            self.memory.stop()
        try:
            self.config.listeners_path.unlink()
        except FileNotFoundError:
            pass
