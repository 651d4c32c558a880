"""The queue manager as a process (``harbormq start``).

It runs the core on the main asyncio loop, serves STOMP on the listeners of
qm.toml (``stomp/``), and listens on the admin socket ``qmgrs/<QM>/admin.sock``
(mode 0600: only the owning OS user administers the queue manager locally).
The admin protocol is one JSON object per line:

    {"cmd": "ping"}                          -> {"ok": true, "pid": ...}
    {"cmd": "status"}                        -> {"ok": true, "status": {...}}
    {"cmd": "mqsc", "text": "...", "continue": false}
                                             -> {"ok": bool, "output": "...", "errors": n}
    {"cmd": "stop", "mode": "controlled"}    -> {"ok": true}, then the stop begins
    {"cmd": "image"|"recreate", "type": "all"|"qmgr"|"queue", "name": "APP.*"}
                                             -> {"progress": {...}} lines, then
                                                {"ok": true, "results": [...]}
    {"cmd": "log_need"}                      -> {"ok": true, "log_need": {...}}
    {"cmd": "load", "queue": "Q", "path": "/x/Q.hmqload"}
                                             -> {"ok": true, "result": {"loaded": n, ...}}

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
from pathlib import Path

from . import media
from .config import QMConfig
from .errors import HarbormqError
from .qmgr import STOP_MODES, RunningQueueManager
from .security import Security
from .stomp.listener import StompService


class QueueManagerServer:
    def __init__(self, config: QMConfig, console=None, progress=None):
        self.config = config
        self.console = console
        self.progress = progress
        self.running: RunningQueueManager | None = None
        self.stop_mode: asyncio.Future | None = None
        self.security = Security.for_config(config)
        self.stomp: StompService | None = None

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
            "connections": len(core.connections),
            "log_need": media.log_need_facts(core.log, core.last_checkpoint.get("media")),
        }

    async def _admin(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                try:
                    req = json.loads(line)
                    cmd = req.get("cmd")
                    if cmd == "ping":
                        reply = {"ok": True, "pid": os.getpid()}
                    elif cmd == "status":
                        reply = {"ok": True, "status": self.status()}
                    elif cmd == "mqsc":
                        from .admin.commands import handle_admin_mqsc
                        reply = await handle_admin_mqsc(
                            self.running.core, req, self.security,
                            qm_info={"started_ns": self.running.core.started_ns,
                                     "connauth": self.config.stomp.connauth})
                    elif cmd == "load":
                        from .pipeline.loadfile import load_into_core
                        if not req.get("queue") or not req.get("path"):
                            raise ValueError("load needs 'queue' and 'path'")
                        try:
                            result = await load_into_core(self.running.core, str(req["queue"]),
                                                          Path(req["path"]))
                        except OSError as exc:
                            raise ValueError(f"cannot read load file {req['path']}: "
                                             f"{exc.strerror or exc}") from None
                        reply = {"ok": True, "result": result}
                    elif cmd in media.ADMIN_COMMANDS:
                        reply = await media.admin_command(
                            self.running.core, req,
                            lambda line: writer.write(json.dumps(line).encode() + b"\n"))
                    elif cmd == "stop":
                        mode = req.get("mode", "controlled")
                        if mode not in STOP_MODES:
                            raise ValueError(f"unknown stop mode {mode!r}")
                        reply = {"ok": True}
                        self.request_stop(mode)
                    else:
                        raise ValueError(f"unknown admin command {cmd!r}")
                except (ValueError, HarbormqError) as exc:
                    reply = {"ok": False, "error": str(exc)}
                writer.write(json.dumps(reply, default=str).encode() + b"\n")
                await writer.drain()
        finally:
            writer.close()

    def request_stop(self, mode: str) -> None:
        if self.stop_mode is not None and not self.stop_mode.done():
            self.stop_mode.set_result(mode)

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        self.stop_mode = loop.create_future()
        self.running = await RunningQueueManager.start(self.config, console=self.console,
                                                      progress=self.progress)
        self.stomp = StompService(self.running.core, self.config, self.security)
        try:
            await self.stomp.start()
        except BaseException:
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
            server = await asyncio.start_unix_server(self._admin, path=str(sock))
        finally:
            os.umask(old_umask)
        loop.add_signal_handler(signal.SIGTERM, self.request_stop, "controlled")
        loop.add_signal_handler(signal.SIGINT, self.request_stop, "immediate")
        mode = await self.stop_mode
        server.close()
        await self.stomp.stop()
        try:
            sock.unlink()
        except FileNotFoundError:
            pass
        await self.running.stop(mode)
        return 0


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


if __name__ == "__main__":
    sys.exit(main())
