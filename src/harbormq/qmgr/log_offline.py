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

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, NoReturn

from ..config import QMConfig
from ..core.log_management import LogManagement, LogManagementHost, remove_files, say_deleted
from ..core.operator_log import OperatorLog
from ..errors import (
    ControlFileDamaged,
    HarbormqError,
    LogMissing,
    QueueManagerRunning,
    ResetLogRefused,
)
from ..fsutil import make_dirs, rename_durably
from ..log import archive, crestart
from ..log.control import ControlFile, decode_copy, encode_copy
from ..log.control_rebuild import rebuild_control, write_rebuilt
from ..log.manager import RecoveryLog
from ..log.records import extent_file_name
from ..store.stores import CatalogStore, QueueStore
from .lifecycle import InstanceLock


@dataclass
class StoppedQueueManager:
    """What ``LogManagement`` needs of its queue manager (``LogManagementHost``),
    for one that is stopped: its log, with no loop and nothing run in the
    background (the commands here archive and delete in the foreground)."""
    name: str
    config: QMConfig
    log: RecoveryLog
    oplog: OperatorLog
    loop: None = None

    def spawn(self, coro) -> NoReturn:
        coro.close()
        raise RuntimeError(f"queue manager {self.name} is stopped: nothing runs in its "
                           "background")


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
        host: LogManagementHost = StoppedQueueManager(config.name, config, log, oplog)
        yield LogManagement(host)
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
                                   encode_copy(log.state), list(paths), config.name,
                                   cut=e.cut)
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
        plan = deletion_plan(victims)
        say_deleted(lm.core.oplog, config.name, plan["would_delete"], plan["never_archived"])
        return {"deleted": plan["would_delete"], "never_archived": plan["never_archived"]}


def plan_delete_stopped(config: QMConfig, through: str | None) -> dict:
    """What ``delete_stopped`` would delete now, deleting nothing (``harbormq log
    delete --dry-run``), as a running queue manager's ``log_delete_plan``."""
    with _stopped(config) as lm:
        lm.need_linear("deleting log extents")
        return deletion_plan(lm.plan_delete(through))


def deletion_plan(victims: list) -> dict:
    """The extents a deletion takes, by name, and those of them never archived
    (HMQ7483W warns of those when they go)."""
    return {"would_delete": [extent_file_name(e.number) for e in victims],
            "never_archived": [extent_file_name(e.number) for e in victims if not e.archived]}


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


def crestart_stopped(config: QMConfig, *, end_lsn: int | None = None,
                     end_time_ns: int | None = None, end_extent: str | None = None,
                     requested: str = "", write: bool = False, progress=None) -> dict:
    """``harbormq log crestart``: plan a conditional restart (log/crestart.py)
    and, with ``write``, record it in the control file for the next start.
    Extents the plan needs are recalled from the archive first, as far as the
    archive has them (the tail that is lost for good is usually in none)."""
    with _stopped(config) as lm:
        log, oplog = lm.core.log, lm.core.oplog
        if end_extent is not None:
            e = lm.closed_extent(end_extent)
            end_lsn = e.end_lsn
        st = log.state
        back = 2 * log.extent_size
        from_lsn = max(0, min(st.restart_lsn, end_lsn if end_lsn is not None
                              else st.restart_lsn) - back)
        _recall_what_the_archive_has(config, log, from_lsn, oplog.emit)
        catalog_lsn, stores = _store_lsns(config)
        args = dict(end_lsn=end_lsn, end_time_ns=end_time_ns, requested=requested,
                    store_lsns=stores, catalog_lsn=catalog_lsn, progress=progress)
        try:
            p = crestart.plan(log, **args)
        except crestart.CrestartError as exc:
            if not config.log_archive_paths or from_lsn == 0 or \
                    ("no checkpoint" not in exc.message and "needs_lsn" not in exc.facts):
                raise
            _recall_what_the_archive_has(config, log, 0, oplog.emit)   # further back
            p = crestart.plan(log, **args)
        if write:
            crestart.record(log, p)
            oplog.emit("HMQ7130W", f"conditional restart recorded for queue manager "
                       f"{config.name}: at its next start, {p.summary()}")
        return p.as_dict()


def crestart_cancel(config: QMConfig) -> dict | None:
    """Remove a recorded conditional restart not yet carried out."""
    with _stopped(config) as lm:
        pending = crestart.cancel(lm.core.log)
        if pending:
            lm.core.oplog.emit("HMQ7130W", f"the conditional restart recorded for queue "
                               f"manager {config.name} at LSN {pending['cut_lsn']} was "
                               "cancelled")
        return pending


def _recall_what_the_archive_has(config: QMConfig, log: RecoveryLog, from_lsn: int,
                                 say) -> None:
    if not config.log_archive_paths:
        return
    for e in log.chain():
        if (e.end_lsn is not None and e.end_lsn <= from_lsn) or log.extent_present(e):
            continue
        try:
            archive.recall(list(config.log_archive_paths), config.name, e.number,
                           e.first_lsn, log.healthy_copies()[0][1], say)
        except LogMissing:
            continue          # not archived: the plan says what it cannot read
        e.deleted = False


def _store_lsns(config: QMConfig) -> tuple[int, dict[str, int]]:
    """The catalog's recovery LSN, and every queue store's on disk by queue
    name (a store no definition names, by its directory's)."""
    catalog_lsn, out, names = 0, {}, {}
    if (config.catalog_dir / "data.mdb").exists():
        try:
            catalog = CatalogStore(config.catalog_dir)
        except HarbormqError:
            catalog = None        # damaged: restart judges it
        if catalog is not None:
            try:
                catalog_lsn = catalog.recovery_lsn
                names = {config.queue_dir(n).name: n for n, d in catalog.load().items()
                         if d.get("type") == "QLOCAL"}
            finally:
                catalog.close()
    for path, store in _queue_stores(config):
        out[names.get(path.name, path.name)] = store.recovery_lsn
    return catalog_lsn, out


def _queue_stores(config: QMConfig):
    """(directory, open store) of every readable queue store on disk, each
    closed once the caller moves on (an unreadable one is restart's to judge)."""
    if not config.queues_dir.is_dir():
        return
    for path in config.queues_dir.iterdir():
        if not (path / "data.mdb").exists():
            continue
        try:
            store = QueueStore(path)
        except HarbormqError:
            continue
        try:
            yield path, store
        finally:
            store.close()


def reset_log_stopped(config: QMConfig, *, write: bool, force: bool = False) -> list[str]:
    """``harbormq reset-log``: every copy of the log is gone, the stores are
    whole. A new, empty log whose LSNs start above every LSN the stores (and
    what is left of the old log) know, so nothing of the old log can ever be
    taken for the new one; what is left of the old log is kept in
    ``reset.N/``. The stores must have been stopped cleanly (the catalog
    says so), else their units of work may be half applied: refused unless
    ``force``. Returns what was (or, without ``write``, would be) done.

    What is left of the old log is renamed ``NAME.reset.N`` in place (within
    its directory: a rename is durable with one directory sync)."""
    lock = InstanceLock(config)
    lock.acquire()
    try:
        if not (config.catalog_dir / "data.mdb").exists():
            raise ResetLogRefused(f"queue manager {config.name} has no catalog at "
                                  f"{config.catalog_dir}: there is nothing to start a new log "
                                  "from", hint="restore it from a backup")
        catalog = CatalogStore(config.catalog_dir)
        try:
            clean, owner = catalog.clean_stop(), catalog.owner
        finally:
            catalog.close()
        if owner not in (None, config.name):
            raise ResetLogRefused(f"the catalog in {config.catalog_dir} belongs to queue "
                                  f"manager {owner}, not {config.name}")
        _refuse_if_the_log_is_whole(config)
        notes, problems = [], []
        catalog_lsn, stores = _store_lsns(config)
        strangers = _stores_of_others(config)
        if strangers:
            raise ResetLogRefused(f"stores of another queue manager are in {config.name}'s "
                                  "directory: " + ", ".join(strangers),
                                  hint="put this queue manager's own stores back")
        if clean is None:
            problems.append("the stores were not stopped cleanly (the last stop was a crash, "
                            "a preemptive stop, or the queue manager is from before clean "
                            "stops were recorded): units of work may be half applied across "
                            "queues")
        else:
            late = {n: lsn for n, lsn in stores.items() if lsn > clean["lsn"]}
            if late:
                problems.append("stores written after the clean stop at LSN "
                                f"{clean['lsn']}: " + ", ".join(f"{n} ({lsn})"
                                                                for n, lsn in late.items()))
            if clean["in_doubt"]:
                notes.append(f"{len(clean['in_doubt'])} in-doubt unit(s) of work "
                             f"({', '.join(map(str, clean['in_doubt']))}) lose their outcome: "
                             "their gets are undone and their puts are lost")
            if clean["in_flight"]:
                notes.append(f"{len(clean['in_flight'])} unit(s) of work in flight at the "
                             "stop end as if backed out (without a backout count)")
        if problems and not force:
            raise ResetLogRefused(
                f"reset-log refused for queue manager {config.name}: " + "; ".join(problems),
                hint="restore the queue manager from a backup; --force starts a new log "
                     "anyway, with the stores as they are")
        notes += [f"WARNING (--force): {p}" for p in problems]
        base, first_number, leftovers = _new_log_start(config, catalog_lsn, stores, clean)
        notes.insert(0, f"a new {config.log.log_type} log for queue manager {config.name} "
                        f"starting at LSN {base} in {extent_file_name(first_number)}; "
                        f"{len(stores)} queue store(s) kept as they are")
        stamp = f".reset.{time.time_ns()}"
        if leftovers:
            notes.append(f"what is left of the old log is kept as NAME{stamp}: " +
                         ", ".join(p.name for p in leftovers))
        if config.log.log_type == "linear":
            notes.append("the first start records a media image of every object (the new "
                         "log holds none)")
        if not write:
            return notes
        # (a re-run after a crash here still sees the renamed leftovers: the
        # start is computed from them too, so it comes out the same or higher)
        for p in leftovers:
            rename_durably(p, p.with_name(p.name + stamp))
        for directory in filter(None, [config.log_dir, config.log_dual_dir]):
            make_dirs(directory)
        RecoveryLog.create(config.log_dir, config.name, config.log, config.log_dual_dir,
                           base_lsn=base, first_number=first_number, images_needed=True,
                           id_floor={"uow": (clean or {}).get("next_uow_id", 0),
                                     "object": (clean or {}).get("next_object_id", 0)})
        OperatorLog(config.errors_dir).emit("HMQ7135W", "the log of queue manager "
                                            f"{config.name} was reset: " + "; ".join(notes))
        return notes
    finally:
        lock.release()


def _stores_of_others(config: QMConfig) -> list[str]:
    return [f"{path.name} (of {store.owner})" for path, store in _queue_stores(config)
            if store.owner not in (None, config.name)]


def _refuse_if_the_log_is_whole(config: QMConfig) -> None:
    """A log whose control file reads and whose needed extents are there is
    not lost: reset-log would throw away what restart can still use."""
    try:
        log = RecoveryLog(config.log_dir, config.name, config.log_dual_dir)
        log.state = log.control.load(repair=False)
        log.verify_chain(needed_from=log.state.restart_lsn)
    except HarbormqError:
        return
    raise ResetLogRefused(f"the log of queue manager {config.name} is not lost: its control "
                          "file reads and every extent restart needs is there",
                          hint="start the queue manager; to give up part of the log, use "
                               f"'harbormq log crestart {config.name}'")


def _new_log_start(config: QMConfig, catalog_lsn: int, stores: dict[str, int],
                   clean: dict | None) -> tuple[int, int, list]:
    """Where the new log's LSNs and extent numbers start: above everything the
    stores, the old control file, the old extents and the archive know."""
    lsns = [catalog_lsn, *stores.values(), (clean or {}).get("lsn", 0)]
    numbers = [-1]
    leftovers = []
    for directory in filter(None, [config.log_dir, config.log_dual_dir]):
        if not directory.is_dir():
            continue
        for p in directory.iterdir():
            if ".reset." not in p.name:      # (kept from an earlier reset, or this one)
                leftovers.append(p)
            name = p.name.split(".reset.")[0]
            digits = name[1:name.index(".LOG")] if ".LOG" in name else ""
            if name.startswith("S") and digits.isdigit():     # S…LOG, .torn.N, .given-up.N
                numbers.append(int(digits))
            elif name.startswith("control."):
                try:
                    old = decode_copy(p.read_bytes())
                except (ValueError, OSError):
                    continue
                numbers.append(old.next_extent_number - 1)
                lsns += [e.first_lsn + old.pages * 4096 for e in old.extents]
    for base in config.log_archive_paths:
        for entry, _line in archive.read_manifest(archive.archive_dir(base, config.name)):
            numbers.append(entry.number)
            lsns.append(entry.end_lsn)
    top = max(lsns) + 1
    return (top + 4095) // 4096 * 4096, max(numbers) + 1, leftovers
