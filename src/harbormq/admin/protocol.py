"""The admin protocol, server side: what a running queue manager answers on
``qmgrs/<QM>/admin.sock`` (mode 0600: only the owning OS user administers the
queue manager locally). ``admin/client.py`` is the client side.

One JSON object per line each way:

    {"cmd": "ping"}                          -> {"ok": true, "pid": ...}
    {"cmd": "status"}                        -> {"ok": true, "status": {...}}
    {"cmd": "mqsc", "text": "...", "continue": false}
                                             -> {"ok": bool, "output": "...", "errors": n}
    {"cmd": "stop", "mode": "controlled"}    -> {"ok": true}, then the stop begins
    {"cmd": "image"|"recreate", "type": "all"|"qmgr"|"queue", "name": "APP.*"}
                                             -> {"progress": {...}} lines, then
                                                {"ok": true, "results": [...]}
    {"cmd": "recreate", ..., "dry_run": true} -> {"ok": true, "results": [plan, ...]}
    {"cmd": "log_need"}                      -> {"ok": true, "log_need": {...}}
    {"cmd": "load", "queue": "Q", "path": "/x/Q.hmqload"}
                                             -> {"ok": true, "result": {"loaded": n, ...}}
    {"cmd": "log_archive"}                   -> {"ok": true, "result": {"closed": "S..LOG",
                                                "current": ..., "archived": [...],
                                                "deleted": [...], "paths": [...]}}
    {"cmd": "log_archived", "extent": "S0000003.LOG"}
                                             -> {"ok": true, "result": {"extent": ...,
                                                "deleted": [...]}}
    {"cmd": "log_delete", "through": "S0000007.LOG" | null}
                                             -> {"ok": true, "result": {"deleted": [...],
                                                "never_archived": [...]}}

A refused request gets ``{"ok": false, "error": "..."}``. A request line may be
up to MAX_REQUEST_BYTES long (an MQSC script of any practical size); a longer
one is refused with HMQ8148E and the connection closed.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..errors import HarbormqError
from ..qmgr.lifecycle import STOP_MODES
from ..recovery.images import image_objects
from ..recovery.need import log_need_facts
from ..recovery.recreate import recreate_objects
from ..unload.loadfile import load_into_core
from .commands import archive_log, delete_log, handle_admin_mqsc, mark_log_archived

if TYPE_CHECKING:
    from ..config import QMConfig
    from ..core.engine import QueueManagerCore
    from ..security import Security


#: the longest request line the server reads (the stream reader's limit)
MAX_REQUEST_BYTES = 64 << 20


async def _close_politely(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                          timeout: float = 30.0) -> None:
    """Send what is written, end our side, and read the rest of the client's
    request away: closing with unread input would reset the connection, and the
    client would never see the reply that says why."""
    await writer.drain()
    if writer.can_write_eof():
        writer.write_eof()
    try:
        async with asyncio.timeout(timeout):
            while await reader.read(1 << 20):
                pass
    except (TimeoutError, ConnectionError):
        pass


class AdminProtocol:
    """Serves admin connections for one running queue manager. ``status`` and
    ``request_stop`` come from the server process, which owns both."""

    def __init__(self, core: "QueueManagerCore", config: "QMConfig", security: "Security", *,
                 status: Callable[[], dict], request_stop: Callable[[str], None]):
        self.core = core
        self.config = config
        self.security = security
        self.status = status
        self.request_stop = request_stop

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        def send(line: dict) -> None:
            writer.write(json.dumps(line).encode() + b"\n")
        try:
            while True:
                try:
                    line = await reader.readline()
                except ValueError:     # longer than the reader's limit: nothing sane follows
                    send({"ok": False, "error": f"HMQ8148E: the request is longer than "
                                                f"{MAX_REQUEST_BYTES >> 20} MiB"})
                    await _close_politely(reader, writer)
                    return
                if not line:
                    return
                try:
                    reply = await self.handle(json.loads(line), send)
                except (ValueError, HarbormqError) as exc:
                    reply = {"ok": False, "error": str(exc)}
                writer.write(json.dumps(reply, default=str).encode() + b"\n")
                await writer.drain()
        finally:
            writer.close()

    async def handle(self, req: dict, send: Callable[[dict], None]) -> dict:
        cmd = req.get("cmd")
        if cmd == "ping":
            return {"ok": True, "pid": os.getpid()}
        if cmd == "status":
            return {"ok": True, "status": self.status()}
        if cmd == "mqsc":
            return await handle_admin_mqsc(
                self.core, req, self.security,
                qm_info={"started_ns": self.core.started_ns,
                         "connauth": self.config.stomp.connauth})
        if cmd == "load":
            return {"ok": True, "result": await self._load(req)}
        if cmd == "log_need":
            return {"ok": True, "log_need": log_need_facts(
                self.core.log, self.core.last_checkpoint.get("media"))}
        if cmd == "log_archive":
            return {"ok": True, "result": await archive_log(self.core)}
        if cmd == "log_archived":
            return {"ok": True, "result": await mark_log_archived(self.core,
                                                                  req.get("extent"))}
        if cmd == "log_delete":
            return {"ok": True, "result": await delete_log(self.core, req.get("through"))}
        if cmd in ("image", "recreate"):
            return await self._media(req, send)
        if cmd == "stop":
            mode = req.get("mode", "controlled")
            if mode not in STOP_MODES:
                raise ValueError(f"unknown stop mode {mode!r}")
            self.request_stop(mode)
            return {"ok": True}
        raise ValueError(f"unknown admin command {cmd!r}")

    async def _load(self, req: dict) -> dict:
        if not req.get("queue") or not req.get("path"):
            raise ValueError("load needs 'queue' and 'path'")
        try:
            return await load_into_core(self.core, str(req["queue"]), Path(req["path"]))
        except OSError as exc:
            raise ValueError(f"cannot read load file {req['path']}: "
                             f"{exc.strerror or exc}") from None

    async def _media(self, req: dict, send: Callable[[dict], None]) -> dict:
        """Image and recreate send ``{"progress": {...}}`` lines (at most one per
        object and per 5 %) before their reply."""
        last: dict[str, int] = {}

        def progress(obj: str, done: int, total: int) -> None:
            pct = 100 * done // max(1, total)
            if obj not in last or pct >= last[obj] + 5 or done >= total:
                last[obj] = pct
                send({"progress": {"object": obj, "done": done, "total": total}})

        if req["cmd"] == "image":
            results = await image_objects(self.core, req.get("type", "all"), req.get("name"),
                                          progress)
        else:
            results = await recreate_objects(self.core, req.get("type", "all"),
                                             req.get("name"), progress,
                                             dry_run=bool(req.get("dry_run")))
        return {"ok": True, "results": results}
