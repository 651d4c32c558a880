"""The queue manager as a process (``harbormq start``).

It runs the core on the main asyncio loop, runs the startup scripts
(``startup.py``) before the STOMP listeners open, serves STOMP on the listeners of
qm.toml (``stomp/``), runs the channels and their listeners (``channels/``),
and listens on the admin socket ``qmgrs/<QM>/admin.sock``
(mode 0600: only the owning OS user administers the queue manager locally).
The admin protocol (``admin/protocol.py``) is served on that socket.

With ``[web]``, the HTTP listener opens first, once the instance lock is held
and before restart recovery: until the queue manager runs it serves only the
start's status (``http/starting.py``), and when the start fails it says so
for ``FAILED_SHOWN_S`` before the process ends. STOMP, the channels and the
admin socket open after restart recovery and the startup scripts, as ever.

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
from ..errors import ConfigError, HarbormqError, QueueManagerRunning
from ..fsutil import atomic_write
from ..qmgr.lifecycle import InstanceLock, RunningQueueManager
from ..recovery.need import log_need_facts, replay_rate
from ..security import Security
from ..stomp.listener import StompService
from .startup import run_startup_scripts

#: how long the web listener shows a failed start before the process ends (the
#: console reads every 2 s)
FAILED_SHOWN_S = 3.0


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
        #: the start's status the web listener shows (http.starting.RestartStatus)
        self.restart_status = None

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
        web_early = self._open_web_early if self.config.web.enabled else None
        try:
            self.running = await RunningQueueManager.start(
                self.config, console=self.console, progress=self._progress,
                before_restart=web_early)
        except BaseException as exc:
            await self._start_failed(exc)
            raise
        if self.restart_status is not None:
            self.restart_status.restart_ended(self._restart_facts())
        pubsub = self.running.core.pubsub
        pubsub.security = self.security
        try:
            await pubsub.ready()     # the status queues exist before any client comes
            self.stomp = StompService(self.running.core, self.config, self.security)
            self.channels = ChannelInitiator(self.running.core, self.security)
            # the startup scripts after restart recovery, with the channel initiator
            # running (their START LISTENER works), before the STOMP listeners open
            await self.channels.start()
            await run_startup_scripts(self.running.core, self.config, self.security)
            await self.stomp.start()
            if self.config.web.enabled:
                await self._web_running()
        except BaseException as exc:
            try:
                if self.channels is not None:
                    await self.channels.stop()
                if self.stomp is not None:
                    await self.stomp.stop()
                await self.running.stop("immediate")
            finally:
                await self._start_failed(exc)
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
        self._record_sslkeyr()
        await self.running.stop(mode)
        return 0

    def _restart_facts(self) -> dict | None:
        report = self.running.report if self.running else None
        return report.as_dict() if report is not None else None

    def _progress(self, phase: str, done: int, total: int) -> None:
        """Restart's progress: to the web listener's status and the console's bars."""
        if self.restart_status is not None:
            self.restart_status.progress(phase, done, total)
        if self.progress is not None:
            self.progress(phase, done, total)

    async def _open_web_early(self, core) -> None:
        """The web listener before restart recovery (the instance lock held),
        serving the start's status only. When its certificate is the key
        repository's and the default one cannot be loaded (SSLKEYR, which
        restart recovers, names another), it opens after restart instead."""
        from ..http.starting import RestartStatus
        from ..http.tls import uses_key_repository, web_tls
        rate, measured = replay_rate(core.log)
        self.restart_status = RestartStatus(core.name, replay_rate=rate if measured else None)
        # the key repository is the one SSLKEYR named when this queue manager last
        # ran: never one it may have moved away from (restart recovers SSLKEYR)
        sslkeyr = self._last_sslkeyr() if uses_key_repository(self.config) else ""
        try:
            if sslkeyr is None:
                raise ConfigError("the key repository of the last start is not known")
            tls = web_tls(self.config, sslkeyr)
        except ConfigError as exc:
            if not uses_key_repository(self.config):
                raise
            core.oplog.emit("HMQ8023W", f"the HTTP listener WEB opens after restart "
                            f"recovery: {exc.message}; the key repository SSLKEYR names is "
                            "known once restart has recovered the queue manager object")
            return
        await self._open_web(core, tls)

    def _last_sslkeyr(self) -> str | None:
        """SSLKEYR as it was when the queue manager last ran (None: not known)."""
        try:
            return json.loads(self.config.web_sslkeyr_path.read_text())["sslkeyr"]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _record_sslkeyr(self) -> None:
        """Keep SSLKEYR for the next start's early web listener (``_last_sslkeyr``):
        when the listener runs, and again at the stop (an ALTER QMGR between)."""
        from ..http.tls import uses_key_repository
        if self.running is not None and self.config.web.enabled and \
                uses_key_repository(self.config):
            sslkeyr = self.running.core.qmgr_attrs.get("SSLKEYR", "")
            if self._last_sslkeyr() != sslkeyr:
                atomic_write(self.config.web_sslkeyr_path,
                             json.dumps({"sslkeyr": sslkeyr}).encode())

    async def _web_running(self) -> None:
        """Restart is over and STOMP listens: the web listener serves everything
        (opened now if it could not open before restart; its certificate
        taken from the key repository SSLKEYR names, when that is another)."""
        from ..http.tls import key_repository, load_web_certificate, uses_key_repository, web_tls
        core = self.running.core
        sslkeyr = core.qmgr_attrs.get("SSLKEYR", "")
        if self.web is None:
            if self.restart_status is None:
                from ..http.starting import RestartStatus
                self.restart_status = RestartStatus(core.name)
            await self._open_web(core, web_tls(self.config, sslkeyr))
        elif uses_key_repository(self.config) and \
                key_repository(self.config.qm_dir, sslkeyr) != \
                key_repository(self.config.qm_dir, ""):
            load_web_certificate(self.web.tls, self.config, sslkeyr)
        self._record_sslkeyr()
        self._write_listeners()
        self.restart_status.now_running()

    async def _start_failed(self, exc: BaseException) -> None:
        """The start failed: the web listener says so for FAILED_SHOWN_S (not
        when the start was interrupted), then closes. The queue manager has
        stopped and let its instance lock go; it is taken again meanwhile, so
        that another start waits for this process to end (it is told that one
        runs) rather than finding the web port taken."""
        if self.restart_status is not None:
            self.restart_status.start_failed(exc)
        if self.web is None:
            return
        lock: InstanceLock | None = None
        try:
            try:
                taken = InstanceLock(self.config)
                taken.acquire()
                lock = taken
            except QueueManagerRunning:
                pass                        # another start has it: say nothing more
            if lock is not None and isinstance(exc, Exception):
                await asyncio.sleep(FAILED_SHOWN_S)
        finally:                            # (whatever taking the lock raised)
            await self.web.stop()
            self.web = None
            if lock is not None:
                # (the web listener's entry, and the STOMP listeners' if they opened)
                self.config.listeners_path.unlink(missing_ok=True)
                lock.release()

    async def _open_web(self, core, tls) -> None:
        """The HTTP front end (``http/``), handed the MQSC runner and STOMP over
        WebSocket as the Protocols of ``http/context.py``, and the start's
        status; its address goes to listeners.json. aiohttp is imported only
        when it is on."""
        from ..http.auth import WebAuthenticator
        from ..http.context import WebContext
        from ..http.server import WebServer
        from ..stomp.websocket import serve_stomp_websocket
        web = self.config.web
        ws_listener = Listener(name="WEB", host=web.host, port=web.port,
                               transport="websocket")

        async def stomp_websocket(request):
            # the web listener's connauth holds for /ws too, as for its REST paths
            # (the listener's gate keeps /ws closed until STOMP runs)
            return await serve_stomp_websocket(request, self.stomp, ws_listener,
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
                             restart_report=self._restart_facts,
                             starting=self.restart_status)
        server = WebServer(context, tls)
        try:
            await server.start()
        except BaseException:
            authenticator.close()
            raise
        self.web = server
        self._write_listeners()

    def _write_listeners(self) -> None:
        """listeners.json: the STOMP listeners, then the web listener (while
        restart runs: the web listener alone)."""
        bound = (self.stomp.bound if self.stomp is not None else []) + [self.web.bound]
        atomic_write(self.config.listeners_path, json.dumps(bound, indent=1).encode())


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

