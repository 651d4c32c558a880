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
    {"cmd": "log_delete_plan", "through": ...}
                                             -> {"ok": true, "result": {"would_delete":
                                                [...], "never_archived": [...]}}
                                                (a request of its own, not a flag of
                                                log_delete: a server that does not know
                                                it refuses it instead of deleting)
    {"cmd": "backup_point", "checkpoint": true, "switch": false}
                                             -> {"ok": true, "result": {"checkpoint_lsn",
                                                "restart_lsn", "media_lsn", "closed":
                                                {"number", "first_lsn", "end_lsn"}, ...}}
                                                (a hot backup's two moments: docs/backup.md)

A refused request gets ``{"ok": false, "error": "HMQnnnnE: ..."}`` and the
connection serves on: HMQ8151E for a line that is not a request (not UTF-8
JSON, not an object, an unknown ``cmd``, a field of the wrong type), the
queue manager's own error otherwise, and HMQ8152E for a failure of the queue
manager itself (written to the operator log as well). A request line may be
up to MAX_REQUEST_BYTES long (an MQSC script of any practical size); a longer
one is refused with HMQ8148E and the connection closed.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..errors import AdminRequestError, HarbormqError
from ..qmgr.lifecycle import STOP_MODES
from ..recovery.images import image_objects
from ..recovery.need import log_need_facts
from ..recovery.recreate import recreate_objects
from ..unload.loadfile import load_into_core, unload_from_core
from .commands import (
    archive_log,
    backup_point,
    delete_log,
    handle_admin_mqsc,
    mark_log_archived,
    plan_log_delete,
)

if TYPE_CHECKING:
    from ..config import QMConfig
    from ..core.engine import QueueManagerCore
    from ..security import Security


#: the longest request line the server reads (the stream reader's limit)
MAX_REQUEST_BYTES = 64 << 20
#: the requests ``AdminProtocol.handle`` answers
COMMANDS = ("ping", "status", "mqsc", "load", "unload", "log_need", "image", "recreate", "stop",
            "log_archive", "log_archived", "log_delete", "log_delete_plan", "backup_point")


def read_request(line: bytes) -> dict:
    """The request object of one line, or AdminRequestError saying why not."""
    try:
        req = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise AdminRequestError(f"the request is not UTF-8 text: {exc}") from None
    except RecursionError:      # json's parser recurses once per level of nesting
        raise AdminRequestError("the request is nested too deeply to be read") from None
    except ValueError as exc:
        raise AdminRequestError(f"the request is not JSON: {exc}") from None
    if not isinstance(req, dict):
        raise AdminRequestError(f"the request is a JSON {type(req).__name__}, not an object "
                                'such as {"cmd": "ping"}')
    return req


def _text(req: dict, key: str, default: str | None = None) -> str | None:
    """A string field of the request (``default`` when it is absent or null)."""
    value = req.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise AdminRequestError(f"the {req['cmd']} request's '{key}' must be a string, not "
                                f"{json.dumps(value)[:80]}")
    return value


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
                    reply = await self.handle(read_request(line), send)
                except HarbormqError as exc:
                    reply = {"ok": False, "error": str(exc)}
                except Exception as exc:  # noqa: BLE001 - a bug must not cost the reply
                    self.core.oplog.emit("HMQ8152E", f"admin request failed: {exc!r}")
                    reply = {"ok": False, "error": f"HMQ8152E: the queue manager failed to "
                                                   f"process the request: {exc!r}"}
                writer.write(json.dumps(reply, default=str).encode() + b"\n")
                await writer.drain()
        except ConnectionError:
            pass        # the client went away: there is no one left to answer
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
        if cmd == "unload":
            return {"ok": True, "result": await self._unload(req)}
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
        if cmd == "log_delete_plan":
            return {"ok": True, "result": plan_log_delete(self.core, req.get("through"))}
        if cmd == "backup_point":
            return {"ok": True, "result": await backup_point(
                self.core, checkpoint=req.get("checkpoint") is True,
                switch=req.get("switch") is True)}
        if cmd in ("image", "recreate"):
            return await self._media(req, send)
        if cmd == "stop":
            mode = _text(req, "mode", "controlled")
            if mode not in STOP_MODES:
                raise AdminRequestError(f"unknown stop mode {mode!r}; known: "
                                        f"{', '.join(STOP_MODES)}")
            self.request_stop(mode)
            return {"ok": True}
        raise AdminRequestError(f"unknown admin command {json.dumps(cmd)[:80]}; known: "
                                f"{', '.join(COMMANDS)}")

    async def _unload(self, req: dict) -> dict:
        queue, path = _text(req, "queue"), _text(req, "path")
        if not queue or not path:
            raise AdminRequestError("unload needs 'queue' and 'path'")
        try:
            ids = {k: bytes.fromhex(req[k]) if req.get(k) else None
                   for k in ("msg_id", "correl_id")}
        except (TypeError, ValueError):
            raise AdminRequestError("msg_id and correl_id are hexadecimal") from None
        older = req.get("older_than_s")
        if older is not None and (not isinstance(older, (int, float)) or older < 0):
            raise AdminRequestError("older_than_s is a number of seconds, 0 or more")
        try:
            return await unload_from_core(
                self.core, queue, Path(path), move=bool(req.get("move")), **ids,
                older_than_ns=None if older is None else int(older * 1e9))
        except (OSError, ValueError) as exc:
            raise AdminRequestError(f"cannot write the unload file {path}: "
                                    f"{getattr(exc, 'strerror', None) or exc}") from None

    async def _load(self, req: dict) -> dict:
        queue, path = _text(req, "queue"), _text(req, "path")
        if not queue or not path:
            raise AdminRequestError("load needs 'queue' and 'path'")
        try:
            # a regular file only: opening a FIFO blocked the loop until something
            # wrote to it, and reading /dev/zero filled the memory
            if not stat.S_ISREG(os.stat(path).st_mode):
                raise AdminRequestError(f"cannot read load file {path}: it is not a regular "
                                        "file")
            return await load_into_core(self.core, queue, Path(path))
        except (OSError, ValueError) as exc:     # ValueError: a NUL in the path, not UTF-8
            raise AdminRequestError(f"cannot read load file {path}: "
                                    f"{getattr(exc, 'strerror', None) or exc}") from None

    async def _media(self, req: dict, send: Callable[[dict], None]) -> dict:
        """Image and recreate send ``{"progress": {...}}`` lines (at most one per
        object and per 5 %) before their reply."""
        last: dict[str, int] = {}

        def progress(obj: str, done: int, total: int) -> None:
            pct = 100 * done // max(1, total)
            if obj not in last or pct >= last[obj] + 5 or done >= total:
                last[obj] = pct
                send({"progress": {"object": obj, "done": done, "total": total}})

        obj_type, name = _text(req, "type", "all"), _text(req, "name")
        if req["cmd"] == "image":
            results = await image_objects(self.core, obj_type, name, progress)
        else:
            results = await recreate_objects(self.core, obj_type, name, progress,
                                             dry_run=bool(req.get("dry_run")))
        return {"ok": True, "results": results}
