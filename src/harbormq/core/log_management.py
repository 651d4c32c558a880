"""Linear log housekeeping while the queue manager runs (MQ's LogManagement):
which closed extents are archived, and when they leave the log directory.

* ``manual``: extents stay until the operator deletes them (``delete``).
* ``automatic``: an extent is deleted once neither restart nor media recovery
  needs it (after each checkpoint).
* ``archive``: the built-in archiver copies each closed extent to the archive
  path(s) (``log/archive.py``); an extent is deleted once it is both
  archived and unneeded.

A deleted extent's entry stays in the control file as the archive inventory
(``deleted``), the newest ``log.max_archives`` of them, so that restart,
recreate and restore can recall it. The control file is written (and
durable) before any file is removed: a crash in between leaves a file the
control file no longer lists, never a listed file that is gone.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import ConfigError, LogMissing, ObjectError
from ..log import archive
from ..log.control import ExtentInfo, encode_copy
from ..log.records import extent_file_name

if TYPE_CHECKING:
    from ..config import QMConfig
    from ..log.manager import RecoveryLog
    from .operator_log import OperatorLog


class LogManagementHost(Protocol):
    """What log management uses of its queue manager: the core while it runs,
    a stopped queue manager's log under its lock (``qmgr/log_offline.py``),
    which has no loop and runs nothing in the background."""
    name: str
    config: QMConfig
    log: RecoveryLog
    oplog: OperatorLog
    loop: asyncio.AbstractEventLoop | None

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task: ...


class LogManagement:
    def __init__(self, core: LogManagementHost):
        self.core = core
        self.lock = asyncio.Lock()      # one archive or delete at a time
        self._archiving = False

    @property
    def mode(self) -> str:
        return self.core.config.log_management

    @property
    def enabled(self) -> bool:
        return self.core.config.log.log_type == "linear"

    # -- events -----------------------------------------------------------------------

    def on_switch(self, closed: ExtentInfo | None) -> None:
        """An extent was closed: say it is ready for archive, and archive it."""
        if not self.enabled or closed is None:
            return
        self.core.oplog.emit("HMQ7480I", f"log extent {extent_file_name(closed.number)} of "
                             f"queue manager {self.core.name} is full and ready for archive "
                             f"(LSN {closed.first_lsn}..{closed.end_lsn})")
        if self.mode == "archive":
            self.start_archiving()

    def after_checkpoint(self) -> None:
        if self.enabled and self.mode in ("automatic", "archive") and self.deletable():
            self.core.spawn(self.delete())

    def start_archiving(self) -> None:
        if not self._archiving:
            self._archiving = True
            self.core.spawn(self._archive_all())

    async def _archive_all(self) -> None:
        try:
            await self.archive_pending()
        finally:
            self._archiving = False

    # -- archiving --------------------------------------------------------------------

    async def archive_pending(self) -> list[str]:
        """Archive every closed extent not archived yet, oldest first; returns
        their names. Then deletes what the mode allows."""
        core = self.core
        paths = self.archive_paths()
        done = []
        async with self.lock:
            for e in core.log.closed_extents():
                if e.archived:
                    continue
                if not core.log.extent_path(e.number).exists():
                    raise LogMissing(
                        f"log extent {extent_file_name(e.number)} is not in the log directory "
                        "and was never archived: it cannot be archived now", lsn=e.first_lsn,
                        hint="put it back from a backup, or say where a copy is with SET LOG "
                             "ARCHIVED")
                await core.log.force(e.end_lsn)   # the closed extent is whole on disk
                control = encode_copy(core.log.state)    # the control file as it is now
                source = await core.loop.run_in_executor(None, core.log.readable_extent, e)
                await core.loop.run_in_executor(None, functools.partial(
                    archive.archive_extent, source, e.number, e.first_lsn, e.end_lsn,
                    control, list(paths), core.name, cut=e.cut))
                e.archived = True
                await core.log.update_control()
                name = extent_file_name(e.number)
                done.append(name)
                core.oplog.emit("HMQ7481I", f"log extent {name} of queue manager {core.name} "
                                f"archived to {', '.join(map(str, paths))}")
        if done and self.mode in ("automatic", "archive"):
            await self.delete()
        return done

    async def archive_now(self) -> list[str]:
        """ARCHIVE LOG: close the active extent, then archive every closed one:
        the point of recovery a backup procedure needs (redbook §2.3.1)."""
        self.need_linear("ARCHIVE LOG")
        self.archive_paths()         # refused before the switch, not after it
        self.core.log.switch_now()
        return await self.archive_pending()

    async def mark_archived(self, name: str) -> None:
        """SET LOG ARCHIVED: an external archiver has copied this extent."""
        core = self.core
        self.need_linear("SET LOG ARCHIVED")
        e = self.closed_extent(name)
        async with self.lock:
            e.archived = True
            await core.log.update_control()
        core.oplog.emit("HMQ7481I", f"log extent {name} of queue manager {core.name} marked "
                        "archived by the operator")
        if self.mode in ("automatic", "archive"):
            await self.delete()

    def need_linear(self, what: str) -> None:
        if not self.enabled:
            raise ObjectError(f"{what} needs a linear log: the log of queue manager "
                              f"{self.core.name} is circular (its extents are reused, never "
                              "archived or deleted)")

    def archive_paths(self) -> list:
        paths = self.core.config.log_archive_paths
        if not paths:
            raise ConfigError(f"queue manager {self.core.name} has no log archive path",
                              hint="set log.archive_path in qm.toml (one or two directories)")
        return paths

    def closed_extent(self, name: str) -> ExtentInfo:
        for e in self.core.log.state.extents:
            if extent_file_name(e.number) == name.upper():
                if e.state != "full":
                    raise ObjectError(f"log extent {name} is {e.state}, not closed")
                return e
        raise ObjectError(f"log extent {name} is not in the log of queue manager "
                          f"{self.core.name}")

    # -- deletion ---------------------------------------------------------------------

    def deletable(self, through: str | None = None) -> list[ExtentInfo]:
        archived_only = self.mode == "archive"
        out = self.core.log.deletable(archived_only=archived_only)
        if through is not None:
            last = self.closed_extent(through).number
            out = [e for e in out if e.number <= last]
        return out

    def plan_delete(self, through: str | None = None) -> list[ExtentInfo]:
        """The extents ``delete`` removes, oldest first. ObjectError when
        ``through`` names an extent that cannot go (not in the log, not closed,
        still needed, or in archive mode not archived yet); none when it is
        deleted already (and so is every extent before it)."""
        victims = self.deletable(through)
        if through is not None and (not victims or
                                    extent_file_name(victims[-1].number) != through.upper()):
            needed = self.closed_extent(through)
            if needed.deleted:
                return []
            if self.mode == "archive" and not needed.archived:
                why = "it is not archived yet"
            else:
                why = "restart or media recovery still needs it (harbormq log need)"
            raise ObjectError(f"log extent {through} cannot be deleted: {why}"
                              + (f"; {len(victims)} older extent(s) could be"
                                 if victims else ""))
        return victims

    async def delete(self, through: str | None = None) -> dict:
        """Delete unneeded closed extents, oldest first (through ``through`` when
        the operator names one). Returns what was deleted and which of those
        were never archived (the operator is warned: HMQ7483W)."""
        core = self.core
        self.need_linear("deleting log extents")
        async with self.lock:
            victims = self.plan_delete(through)
            if not victims:
                return {"deleted": [], "never_archived": []}
            for e in victims:
                e.deleted = True
            core.log.forget_deleted(core.config.max_archives)
            await core.log.update_control()     # durable before any file goes
            names = [extent_file_name(e.number) for e in victims]
            await core.loop.run_in_executor(None, remove_files, core.log,
                                            [e.number for e in victims])
        never = [extent_file_name(e.number) for e in victims if not e.archived]
        say_deleted(core.oplog, core.name, names, never)
        return {"deleted": names, "never_archived": never}

    def sweep(self) -> None:
        """Files of extents the control file lists as deleted (a crash between
        the control-file write and the removal): remove them now."""
        log = self.core.log
        remove_files(log, [e.number for e in log.state.extents
                           if e.deleted and log.extent_present(e)])

    def status(self) -> list[dict]:
        """Every extent the control file lists, with its archive state."""
        log = self.core.log
        return [{"extent": extent_file_name(e.number), "first_lsn": e.first_lsn,
                 "end_lsn": e.end_lsn, "state": e.state, "archived": e.archived,
                 "deleted": e.deleted, "on_disk": log.extent_present(e)}
                for e in sorted(log.state.extents, key=lambda e: e.first_lsn)
                if e.state != "free"]


def say_deleted(oplog, qm_name: str, names: list[str], never: list[str]) -> None:
    """The operator messages of a deletion: HMQ7482I, and HMQ7483W for the
    extents that were never archived."""
    oplog.emit("HMQ7482I", f"log extent(s) {', '.join(names)} of queue manager "
               f"{qm_name} deleted: neither restart nor media recovery needs them")
    if never:
        oplog.emit("HMQ7483W", f"log extent(s) {', '.join(never)} were deleted "
                   "without ever being archived: a store put back from an older "
                   "copy, or a restore, cannot be brought forward through them")


def remove_files(log, numbers: list[int]) -> None:
    """Remove the files of these extents from the log directory (their control
    file entries already say deleted, durably), then make that durable."""
    log.remove_extent_files(numbers)      # from both copies of a dual log
