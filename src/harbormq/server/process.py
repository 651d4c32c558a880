"""The queue manager as a process (``harbormq start``).

It runs the core on the main asyncio loop, runs the startup scripts
(``startup.py``) before the STOMP listeners open, serves STOMP on the listeners of
qm.toml (``stomp/``), runs the channels and their listeners (``channels/``),
and listens on the admin socket ``qmgrs/<QM>/admin.sock``
(mode 0600: only the owning OS user administers the queue manager locally).
The admin protocol (``admin/protocol.py``) is served on that socket.

SIGTERM asks for a controlled stop, SIGINT for an immediate one. A stop first
closes the STOMP listeners and connections (their unfinished units of work are
backed out), then stops the queue manager.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

from ..admin.command_runner import CommandRunner
from ..admin.protocol import MAX_REQUEST_BYTES, AdminProtocol
from ..channels.initiator import ChannelInitiator
from ..config import Listener, QMConfig
from ..errors import HarbormqError
from ..fsutil import atomic_write
from ..qmgr.lifecycle import RunningQueueManager
from ..recovery.need import log_need_facts
from ..security import Security
from ..stomp.listener import StompService
from .startup import run_startup_scripts


class QueueManagerServer:
    def __init__(self, config: QMConfig, console=None, progress=None):
        self.config = config
        self.console = console
        self.progress = progress
        self.running: RunningQueueManager | None = None
        self.stop_mode: asyncio.Future | None = None
        self.security = Security.for_config(config)
        self.stomp: StompService | None = None
        self.channels: ChannelInitiator | None = None
        self.web = None                     # http.server.WebServer, when [web] is on

    def status(self) -> dict:
        core = self.running.core
        st = core.log.state
        restart = core.log.extent_of(st.restart_lsn)
        return {
            "name": core.name, "pid": os.getpid(), "state": "running",
            "log_type": st.log_type, "current_extent": f"S{st.active.number:07d}.LOG",
            "restart_extent": f"S{restart.number:07d}.LOG" if restart else None,
            "end_lsn": core.log.end_lsn, "checkpoint_lsn": st.checkpoint_lsn,
            "restart_lsn": st.restart_lsn, "queues": len(core.queues),
            "active_uows": sum(1 for u in core.uows.values() if u.state == "active"),
            "in_doubt": [u.id for u in core.in_doubt()],
            "restart": self.running.report.as_dict() if self.running.report else None,
            "listeners": self.stomp.bound if self.stomp else [],
            "web": self.web.bound if self.web else None,
            "connections": len(core.connections),
            "log_need": log_need_facts(core.log, core.last_checkpoint.get("media")),
        }

    def request_stop(self, mode: str) -> None:
        if self.stop_mode is not None and not self.stop_mode.done():
            self.stop_mode.set_result(mode)

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        self.stop_mode = loop.create_future()
        self.running = await RunningQueueManager.start(self.config, console=self.console,
                                                      progress=self.progress)
        pubsub = self.running.core.pubsub
        pubsub.security = self.security
        await pubsub.ready()     # the status queues exist before any client comes
        self.stomp = StompService(self.running.core, self.config, self.security)
        self.channels = ChannelInitiator(self.running.core, self.security)
        try:
            # the startup scripts after restart recovery, with the channel initiator
            # running (their START LISTENER works), before the STOMP listeners open
            await self.channels.start()
            await run_startup_scripts(self.running.core, self.config, self.security)
            await self.stomp.start()
            if self.config.web.enabled:
                await self._start_web()
        except BaseException:
            if self.web is not None:
                await self.web.stop()
            await self.channels.stop()
            await self.stomp.stop()
            await self.running.stop("immediate")
            raise
        # damage to the queue manager object: stop through the same path as a request
        self.running.core.on_fatal = lambda why: self.request_stop("preemptive")
        sock = self.config.admin_socket
        if sock.exists():
            sock.unlink()   # left by a process that died; we hold the instance lock
        old_umask = os.umask(0o177)
        try:
            admin = AdminProtocol(self.running.core, self.config, self.security,
                                  status=self.status, request_stop=self.request_stop)
            server = await asyncio.start_unix_server(admin.serve, path=str(sock),
                                                     limit=MAX_REQUEST_BYTES)
        finally:
            os.umask(old_umask)
        loop.add_signal_handler(signal.SIGTERM, self.request_stop, "controlled")
        loop.add_signal_handler(signal.SIGINT, self.request_stop, "immediate")
        mode = await self.stop_mode
        server.close()
        if self.web is not None:
            await self.web.stop_accepting()
        await self.channels.stop()
        await self.stomp.stop()       # (its connections over /ws too)
        if self.web is not None:
            await self.web.stop()
        try:
            sock.unlink()
        except FileNotFoundError:
            pass
        await self.running.stop(mode)
        return 0

    def _restart_facts(self) -> dict | None:
        report = self.running.report if self.running else None
        return report.as_dict() if report is not None else None

    async def _start_web(self) -> None:
        """The HTTP front end (``http/``), handed the MQSC runner and STOMP over
        WebSocket as the Protocols of ``http/context.py``; its address joins
        listeners.json. aiohttp is imported only when it is on."""
        from ..http.auth import WebAuthenticator
        from ..http.context import WebContext
        from ..http.server import WebServer
        from ..http.tls import web_tls
        from ..stomp.websocket import serve_stomp_websocket
        core, web = self.running.core, self.config.web
        stomp = self.stomp
        ws_listener = Listener(name="WEB", host=web.host, port=web.port,
                               transport="websocket")

        async def stomp_websocket(request):
            # the web listener's connauth holds for /ws too, as for its REST paths
            return await serve_stomp_websocket(request, stomp, ws_listener,
                                               login_required=web.connauth == "required")

        settings = self.config.stomp
        authenticator = WebAuthenticator(self.security, web, core.name, core.oplog.emit,
                                         failure_limit=settings.login_failure_limit,
                                         failure_window_s=settings.login_failure_window_ms /
                                         1000, threads=settings.auth_threads)
        context = WebContext(core=core, qmgr_name=core.name,
                             mqsc=CommandRunner(core, self.security,
                                                {"started_ns": core.started_ns,
                                                 "connauth": settings.connauth}),
                             authenticator=authenticator, settings=web,
                             stomp_websocket=stomp_websocket,
                             restart_report=self._restart_facts)
        self.web = WebServer(context, web_tls(self.config, core.qmgr_attrs.get("SSLKEYR", "")))
        bound = await self.web.start()
        atomic_write(self.config.listeners_path,
                     json.dumps(stomp.bound + [bound], indent=1).encode())


def run_event_loop(coro):
    """Run the queue manager's loop: uvloop when it is installed (it halves the
    cost of the loop's own bookkeeping per frame), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def main(argv: list[str] | None = None) -> int:
    """``python -m harbormq.server QM`` runs one queue manager in the foreground."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m harbormq.server QM", file=sys.stderr)
        return 2
    try:
        config = QMConfig.load(argv[0])
        return run_event_loop(QueueManagerServer(config).run())
    except HarbormqError as exc:
        print(str(exc), file=sys.stderr)
        return 1

