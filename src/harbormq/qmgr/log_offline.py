"""Log management with the queue manager stopped: ``harbormq log archive``,
``log archived`` and ``log delete`` when no queue manager answers on the admin
socket.

The command holds the instance lock for its whole run (the queue manager
cannot start meanwhile) and applies the running queue manager's own rules
(``core/log_management.py``) to the control file as it is on disk:

* archive: every closed extent not archived yet is copied to the archive
  path(s), oldest first (``log/archive.py``, manifest and all), and the
  control file is written after each one (sequence + 1) with the extent
  marked archived. The active extent stays open: closing it writes a log
  record, and only the queue manager writes the log. It is archived once it
  is closed (ARCHIVE LOG, or the archiver in archive mode).
* archived: the flag is set in the control file.
* delete: ``LogManagement.plan_delete`` on the control file's restart and
  media points; the entries are marked deleted and the control file is
  written, and durable, before any file is removed. A crash in between
  leaves files the control file lists as deleted: the next start removes
  them (``LogManagement.sweep``).

Nothing else changes: what the mode would do next (deleting, in automatic
and archive modes, what is archived and unneeded) is left to the next start.
A queue manager stopped by a crash is no different: the restart and media
points of its control file are those of its last checkpoint, and restart
reads nothing before them.
"""

from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace
from typing import Iterator

from ..config import QMConfig
from ..core.log_management import LogManagement, remove_files, say_deleted
from ..core.operator_log import OperatorLog
from ..errors import ControlFileDamaged, LogMissing, QueueManagerRunning
from ..log import archive
from ..log.control import ControlFile, encode_copy
from ..log.control_rebuild import rebuild_control, write_rebuilt
from ..log.manager import RecoveryLog
from ..log.records import extent_file_name
from .lifecycle import InstanceLock


@contextmanager
def _stopped(config: QMConfig) -> Iterator[LogManagement]:
    """The log of a stopped queue manager, under its instance lock, with the
    rules of LogManagement over it."""
    lock = InstanceLock(config)
    try:
        lock.acquire()
    except QueueManagerRunning:
        raise QueueManagerRunning(
            f"queue manager {config.name} holds its lock but does not answer on its admin "
            "socket: it is starting or stopping, or a program has it open in-process",
            hint="run the command again once it has started (it then does the work "
                 "itself) or ended") from None
    try:
        log = RecoveryLog(config.log_dir, config.name, config.log_dual_dir)
        log.open()                 # the copies reconciled, as restart does
        oplog = OperatorLog(config.errors_dir)
        for msgid, text in log.control.warnings:
            oplog.emit(msgid, text)
        config.log.log_type = log.state.log_type      # the control file's type holds
        yield LogManagement(SimpleNamespace(name=config.name, config=config, log=log,
                                            oplog=oplog))
    finally:
        lock.release()


def _write_control(log: RecoveryLog) -> None:
    log.state.sequence += 1
    log.control.write(log.state)        # every copy, each durable before the next


def archive_stopped(config: QMConfig) -> dict:
    """Archive every closed extent not archived yet; the same reply as a running
    queue manager's ``log_archive`` (``closed`` is None: nothing was closed)."""
    with _stopped(config) as lm:
        lm.need_linear("archiving the log")
        paths = lm.archive_paths()
        log, oplog = lm.core.log, lm.core.oplog
        done = []
        for e in log.closed_extents():
            if e.archived:
                continue
            name = extent_file_name(e.number)
            path = log.extent_path(e.number)
            if not path.exists():
                raise LogMissing(f"log extent {name} (LSN {e.first_lsn}..{e.end_lsn}) is "
                                 f"not in the log directory {log.dir}, and the control file "
                                 "says it is neither archived nor deleted: it cannot be "
                                 "archived", path=str(path), lsn=e.first_lsn,
                                 hint=f"put it back, or if a copy of it is kept elsewhere, "
                                      f"say so with 'harbormq log archived {config.name} "
                                      f"{name}'")
            archive.archive_extent(path, e.number, e.first_lsn, e.end_lsn,
                                   encode_copy(log.state), list(paths), config.name)
            e.archived = True
            _write_control(log)
            done.append(name)
            oplog.emit("HMQ7481I", f"log extent {name} of queue manager {config.name} "
                       f"archived to {', '.join(map(str, paths))} (queue manager stopped)")
        return {"closed": None, "current": extent_file_name(log.state.active.number),
                "archived": done, "deleted": [], "paths": [str(p) for p in paths]}


def mark_archived_stopped(config: QMConfig, name: str) -> dict:
    """SET LOG ARCHIVED with the queue manager stopped."""
    with _stopped(config) as lm:
        lm.need_linear("SET LOG ARCHIVED")
        e = lm.closed_extent(name)
        e.archived = True
        _write_control(lm.core.log)
        lm.core.oplog.emit("HMQ7481I", f"log extent {name.upper()} of queue manager "
                           f"{config.name} marked archived by the operator (queue manager "
                           "stopped)")
        return {"extent": name.upper(), "deleted": []}


def delete_stopped(config: QMConfig, through: str | None) -> dict:
    """Delete the closed extents nothing needs, oldest first, through ``through``
    (every one when None), as a running queue manager's ``log_delete``."""
    with _stopped(config) as lm:
        lm.need_linear("deleting log extents")
        log = lm.core.log
        victims = lm.plan_delete(through)
        if not victims:
            return {"deleted": [], "never_archived": []}
        for e in victims:
            e.deleted = True
        log.forget_deleted(config.max_archives)
        _write_control(log)             # durable before any file goes
        remove_files(log, [e.number for e in victims])
        names = [extent_file_name(e.number) for e in victims]
        never = [extent_file_name(e.number) for e in victims if not e.archived]
        say_deleted(lm.core.oplog, config.name, names, never)
        return {"deleted": names, "never_archived": never}


def rebuild_control_stopped(config: QMConfig, *, write: bool) -> list[str]:
    """``harbormq log rebuild-control``: both control-file copies lost or
    damaged. Rebuilt from the extents (and an archive's copy of the control
    file for the archive flags), under the instance lock; refused while any
    copy is still readable (restart reconciles those itself). ``write=False``
    only says what would be written."""
    if config.log_dual_dir is not None:
        raise ControlFileDamaged(
            f"queue manager {config.name} has a dual log: rebuild-control reads one log "
            "directory only", hint=f"with a copy of the control file in either directory, "
            f"'harbormq log recover-copy {config.name}' re-creates the others")
    lock = InstanceLock(config)
    lock.acquire()
    try:
        try:
            ControlFile(config.log_dir).load(repair=False)
        except ControlFileDamaged:
            pass
        else:
            raise ControlFileDamaged(
                f"the control file of {config.name} is readable: nothing to rebuild",
                hint="restart reconciles a damaged or lagging copy from the good one")
        copies = [archive.archive_dir(p, config.name) / archive.CONTROL_COPY
                  for p in config.log_archive_paths]
        state, notes = rebuild_control(
            config.log_dir, config.name, log_type=config.log.log_type, pages=config.log.pages,
            primary=config.log.primary, secondary=config.log.secondary, archived_copies=copies)
        if write:
            write_rebuilt(config.log_dir, state)
            OperatorLog(config.errors_dir).emit(
                "HMQ7123W", f"the log control file of {config.name} was rebuilt from its "
                f"extents: {notes[0]}")
        return notes
    finally:
        lock.release()
