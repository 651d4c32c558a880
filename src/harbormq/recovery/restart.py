"""Restart recovery, in the phases of MQ's restart (docs/design-notes.md, "Restart"):

1. Log initialisation: read and reconcile both control-file copies, verify the
   extent chain, open the stores, discard non-persistent messages.
2. Status rebuild: read the last checkpoint; compute the redo start point =
   min(checkpoint begin, oldest unit of work active at it, stores' recovery LSNs).
3. Forward recovery (redo): read from the redo start to the end of the log
   (keeping a torn tail aside), rebuild the units of work, and apply each
   committed effect whose LSN is at or above its store's recovery LSN.
4. Backward recovery (undo): back out in-flight and in-backout units of work,
   writing compensation records; keep in-doubt ones with their messages locked.
5. Index rebuild for indexed queues (``qindxbld`` wait or nowait).
6. A checkpoint; HMQ7467I/HMQ7468I name the extents still needed.

Redo writes nothing to the log and stores record their recovery LSN in the same
transaction as their data, so restarting twice, or crashing during restart,
gives the same result.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Generator
from dataclasses import dataclass, field, replace
from typing import Callable

from ..core.engine import QueueManagerCore
from ..core.objects import QMGR_OBJECT
from ..core.queue import LocalQueue
from ..core.uow import PublishedTargets, UnitOfWork, UowOp
from ..crashpoints import crash_point, delay_point
from ..errors import HarbormqError, LogMissing, ObjectDamaged, StandbyError, StoreDamaged
from ..fsutil import rename_durably, sweep_tmp
from ..log import crestart
from ..log.checkpoint import read_checkpoint, unpack_store_lsns
from ..log.records import (
    LogRecord,
    Message,
    MessageRef,
    RecordType,
    decode_json,
    extent_file_name,
)
from ..log.replay import CommitRule, OpenUow, PendingOp, without_effect
from ..store import dirs
from ..store.stores import CatalogStore, QueueStore
from . import need, recreate

#: flush stores during redo when this many effects wait, so memory stays bounded
REDO_FLUSH_ENTRIES = 20_000
#: redo plans this much log at a time (``without_effect``): a message put and
#: got again within one stretch is skipped. Bigger stretches find more pairs
#: (a queue's backlog puts them further apart) and hold more records in memory
REDO_STRETCH_BYTES = 16 << 20
#: off only to compare (tests): redo then feeds every record to the rule
SKIP_WITHOUT_EFFECT = True

#: forward recovery reports its progress after this much log, and at least
#: this often (the web listener's restart status, the command line's bars)
PROGRESS_BYTES = 4 << 20
PROGRESS_EVERY_S = 0.25
#: a restart on the queue manager's loop lets other work run (the web
#: listener's restart status, ``http/starting.py``) once it has worked this long
#: without a pause: between two queue stores opened, two batches of redo, two
#: units of work undone, two indexes rebuilt
PAUSE_AFTER_S = 0.05
#: turns of the loop a pause gives: a request is a few callbacks in a row (accept,
#: read, handler, write), each a turn; a turn with nothing to do costs microseconds
PAUSE_TURNS = 8

Progress = Callable[[str, int, int], None]   # (phase, done, total)
#: work done in steps: each ``yield`` is a point where the loop may run other work
Steps = Generator[None, None, "object"]


def run_steps(steps: Steps):
    """Run ``steps`` to its end without a pause (the standby's redo rounds
    run on no loop); its return value."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


async def run_steps_paced(steps: Steps):
    """Run ``steps`` to its end on the loop, letting other work run once a
    stretch of it has taken PAUSE_AFTER_S; its return value."""
    pause_at = time.monotonic() + PAUSE_AFTER_S
    try:
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value
            if time.monotonic() >= pause_at:
                await pause()
                pause_at = time.monotonic() + PAUSE_AFTER_S
    finally:
        steps.close()


async def pause() -> None:
    """PAUSE_TURNS turns of the loop for other work."""
    for _ in range(PAUSE_TURNS):
        await asyncio.sleep(0)


class Pacer:
    """Lets the loop run other work between two steps of an async phase once
    PAUSE_AFTER_S has passed since the last pause."""

    def __init__(self) -> None:
        self.pause_at = time.monotonic() + PAUSE_AFTER_S

    async def step(self) -> None:
        if time.monotonic() >= self.pause_at:
            await pause()
            self.pause_at = time.monotonic() + PAUSE_AFTER_S


@dataclass
class RestartReport:
    phases: dict[str, float] = field(default_factory=dict)   # phase -> seconds
    control_sequence: int = 0
    extents: list[str] = field(default_factory=list)
    checkpoint_lsn: int = 0
    redo_start_lsn: int = 0
    end_lsn: int = 0
    records_replayed: int = 0
    bytes_replayed: int = 0
    effects_redone: int = 0
    #: records redo skipped: messages put and got again with nothing in between
    #: (log/replay.py without_effect), and units of work left with nothing else
    records_skipped: int = 0
    nonpersistent_discarded: int = 0
    uows_backed_out: int = 0
    uows_in_flight: int = 0
    uows_in_doubt: int = 0
    compensations_written: int = 0
    indexes_rebuilt: int = 0
    indexes_verified: int = 0
    torn_tail: str | None = None
    #: the conditional restart carried out by this restart (its plan)
    crestart: dict | None = None
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


class Restart:
    def __init__(self, core: QueueManagerCore, progress: Progress | None = None, *,
                 replaying: bool = False):
        self.core = core
        #: standby replay (qmgr/standby.py): phases 1-3 only, nothing written to
        #: the log, and a standby queue manager is not refused
        self.replaying = replaying
        #: LSN of the last CHECKPOINT_END redo read (0: none)
        self.last_checkpoint_lsn = 0
        self.progress = progress or (lambda phase, done, total: None)
        self.report = RestartReport()
        self.redo_from: dict[int, int] = {}     # object id -> store recovery LSN at open
        #: the commit rule (log/replay.py), applied to the queues' committed state
        self.rule = CommitRule(RedoEffects(self))
        #: phase 1's store checks: the newest extent walked as far as they need
        self._log_end_walk = recreate.LogEndWalk(core.log)
        self._log_end = 0           # the end of the log, read only if something is recreated
        self._media: dict | None = None          # the last checkpoint's media table
        self._progress_at = 0       # redo: bytes read when progress was last shown
        self._progress_due = 0.0    # redo: when progress is shown again, whatever was read

    def emit(self, msgid: str, text: str) -> None:
        self.core.oplog.emit(msgid, text)

    def _log_said(self, msgid: str, text: str) -> None:
        """The log's own messages during restart (a copy read around, a copy
        rewritten or given up): to the operator log and the report."""
        self.emit(msgid, text)
        self.report.warnings.append(f"{msgid} {text}")

    async def run(self) -> RestartReport:
        core = self.core
        t0 = time.monotonic()
        said = core.log.say
        core.log.say = self._log_said
        try:
            return await self._run(t0)
        finally:
            core.log.say = said

    def redo_only(self):
        """Phases 1 to 3 (standby replay, qmgr/standby.py): the stores brought to
        the end of the log, nothing written to it, units of work left open.
        Returns the scan (its end LSN)."""
        said = self.core.log.say
        self.core.log.say = self._log_said
        try:
            self.phase1_log_init()
            self.phase2_status_rebuild()
            return run_steps(self._redo_steps())
        finally:
            self.core.log.say = said

    async def _run(self, t0: float) -> RestartReport:
        core = self.core
        await run_steps_paced(self._log_init_steps())
        t1 = time.monotonic()
        await pause()
        self.phase2_status_rebuild()
        t2 = time.monotonic()
        await pause()
        scan = await run_steps_paced(self._redo_steps())
        t3 = time.monotonic()
        core.log.start_writing(scan.end_lsn, core.loop,
                               active_closed=scan.end is not None and scan.end.how == "extent_end")
        await self.phase4_undo()
        t4 = time.monotonic()
        await self.phase5_indexes()
        t5 = time.monotonic()
        core.mark_started()
        await core.checkpoint("restart")
        t6 = time.monotonic()
        r = self.report
        r.phases = {"log initialisation": t1 - t0, "status rebuild": t2 - t1,
                    "forward recovery": t3 - t2, "backward recovery": t4 - t3,
                    "index rebuild": t5 - t4, "checkpoint": t6 - t5}
        return r

    # -- phase 1 --------------------------------------------------------------------

    def phase1_log_init(self) -> None:
        """Log initialisation without a pause (the standby's rounds)."""
        run_steps(self._log_init_steps())

    def _log_init_steps(self) -> Steps:
        """Log initialisation, a step a queue's store (opened and checked, then
        its non-persistent messages discarded): a queue manager of many
        queues spends most of the phase there."""
        core, r = self.core, self.report
        log = core.log
        self.progress("log initialisation", 0, 1)
        st = log.open()
        for msgid, text in log.control.warnings:
            self.emit(msgid, text)
            r.warnings.append(f"{msgid} {text}")
        if st.standby and not self.replaying:
            raise StandbyError(
                f"queue manager {core.name} is a standby kept current by log replay from "
                f"{', '.join(st.standby['archives'])}: it cannot be started",
                hint=f"make it the active queue manager with 'harbormq activate {core.name}'")
        if st.restored_ns and not self.replaying:
            st.restored_ns = 0      # started: it has a log of its own from here on
        if st.crestart:       # recorded by 'harbormq log crestart': carried out first
            r.crestart = crestart.apply(log, self._log_said).as_dict()
            st = log.state
        for _, directory in log.copies:
            sweep_tmp(directory)
        settings = core.config.log
        if st.log_type != settings.log_type:
            # the log's own control file is the one source of truth for its type
            self.emit("HMQ7122W", f"qm.toml says log type {settings.log_type!r}, but the log "
                      f"of {core.name} is {st.log_type}: the log's type holds (a log cannot "
                      "change type; create a new queue manager for the other type)")
            settings.log_type = st.log_type
        if core.config.log_archive_paths:     # a needed extent gone: fetch it back
            log.recall_missing(st.restart_lsn, core.config.log_archive_paths, self.emit)
        chain = log.verify_chain(needed_from=st.restart_lsn)
        r.control_sequence = st.sequence
        r.extents = [extent_file_name(e.number) for e in chain if log.extent_present(e)]
        log.make_durable()     # the end of the log below is trusted by store checks
        log.reconcile_active()     # a dual log: both copies of the newest extent equal
        self._open_catalog()
        if core.catalog_store.clean_stop() is not None:
            core.catalog_store.set_clean_stop(None)    # from here on, not a clean stop
        self.redo_from[0] = core.catalog_store.recovery_lsn
        local = [d for d in core.objects.values() if d["type"] == "QLOCAL"]
        stores = max(1, len(local))
        for i, definition in enumerate(local, 1):
            q = core.open_queue_store(definition, at_restart=True, report=False)
            q = self._check_queue_store(q)
            self.redo_from[q.object_id] = q.store.recovery_lsn
            if time.monotonic() >= self._progress_due:
                self._progress_due = time.monotonic() + PROGRESS_EVERY_S
                self.progress("log initialisation", i - 1, stores)
            yield
        self._sweep_orphan_stores()
        for q in list(core.queues.values()):   # also a store that may be a newer incarnation
            r.nonpersistent_discarded += q.store.purge_nonpersistent()
            q.depth = q.store.count()
            yield
        self.progress("log initialisation", stores, stores)
        self.emit("HMQ7201I", f"Log initialisation for queue manager {core.name} complete: "
                  f"{st.log_type} log, control file sequence {st.sequence}, "
                  f"{len(chain)} extent(s) in use ({', '.join(r.extents)})")


    # -- damaged objects at restart (recreate.py) --------------------------------------

    def _open_catalog(self) -> None:
        """The catalog is the queue manager object's store. Damaged, it is rebuilt
        from the log (linear), else the queue manager cannot start."""
        core = self.core
        path = core.config.catalog_dir
        try:
            if not (path / "data.mdb").exists() and core.log.state.checkpoint_lsn:
                # (no checkpoint yet: the queue manager is being created)
                raise StoreDamaged(f"its store {path} is missing", path=str(path))
            store = CatalogStore(path, owner=core.name, sync=not core.config.scratch)
            try:
                if store.owner != core.name:
                    raise StoreDamaged(f"it belongs to queue manager {store.owner}",
                                       path=str(path))
                objects = store.load()
                lsn = store.recovery_lsn
                why = dirs.lsn_problem(lsn, self._log_end_walk.reach(lsn),
                                       lambda lsn: core.log.state.discarded_at(lsn, None))
                if why:
                    raise StoreDamaged(why, path=str(path))
            except StoreDamaged:
                store.close()
                raise
            core.adopt_catalog(store, objects)
            return
        except StoreDamaged as exc:
            why = exc.message
        self.emit("HMQ7472E", f"the queue manager object of {core.name} is damaged: {why}")
        if core.config.log.log_type != "linear":
            raise ObjectDamaged(
                f"queue manager {core.name} cannot start: its queue manager object is "
                f"damaged ({why}) and a circular log cannot recreate it",
                hint="restore the queue manager from a backup, or delete it")
        st = core.log.state
        start = st.media_lsn or core.log.chain()[0].first_lsn
        recreate.check_extents(core.log, start, "media recovery of the queue manager object")
        objects = recreate.rebuild_catalog(core.log, start, self.log_end)
        if path.exists():
            dirs.set_aside(path)
        # built aside and moved in whole: a crash meanwhile leaves no half catalog
        tmp = path.with_name(path.name + dirs.REBUILDING)
        recreate.write_catalog(tmp, objects, self.log_end, core.name)
        dirs.replace_dir(tmp, path, keep_old=False)
        core.adopt_catalog(CatalogStore(path, owner=core.name, sync=not core.config.scratch))
        self.emit("HMQ7474I", f"object {QMGR_OBJECT} (the catalog of {len(objects)} "
                  f"definitions) recreated from the log, LSN {start} to {self.log_end}")

    @property
    def log_end(self) -> int:
        """The end of the log (the newest extent read in full, its torn tail not
        yet repaired): what a recreate at restart replays to."""
        if not self._log_end:
            self._log_end = recreate.log_end(self.core.log)
        return self._log_end

    def _check_queue_store(self, q: LocalQueue) -> LocalQueue:
        """Damage found at restart: with a linear log the queue is recreated here,
        before redo, so that redo and undo then treat it like any healthy store
        (its in-flight units of work included). Returns the queue as it is now."""
        core = self.core
        if not q.damaged:
            why = dirs.check_store(q.store, self._log_end_walk.reach,
                                   core.config.tuning.verify_store_mb,
                                   lambda lsn: core.log.state.discarded_at(lsn, q.name),
                                   owner=core.name)
            if why is None:
                return q
            q.damaged, q.damage_reason = True, why
            try:
                q.store.mark_damaged(why)
            except HarbormqError:
                pass     # unreadable: detected again at the next restart
        if q.store.object_id != q.object_id:
            return q     # perhaps a newer incarnation still in the log: judged after redo
        if core.config.log.log_type != "linear":
            return q     # reported after redo, which ignores its uncommitted work
        self.emit("HMQ7472E", f"queue {q.name} is damaged: {q.damage_reason}; recreating it "
                  "from the log")
        if self._media is None:
            self._media = need.read_media_table(core.log) or {}
        mp = self._media.get(q.name)
        if mp is None or mp["object_id"] != q.object_id:
            lsn = q.definition.get("create_lsn", 0)
            mp = {"object_id": q.object_id, "image_lsn": lsn, "replay_from": lsn}
        final = q.store.path
        tmp = final.with_name(final.name + dirs.REBUILDING)
        try:
            recreate.check_extents(core.log, mp["replay_from"], f"media recovery of {q.name}")
            result = recreate.QueueRebuild(core.log, q.definition, mp, self.log_end, tmp,
                                        core.config.tuning.store_map_size_mb << 20,
                                        lambda o, d, t: self.progress(f"recreate {o}", d, t)
                                        ).run()
        except HarbormqError as exc:
            QueueStore.destroy(tmp)
            self.emit(exc.msgid, f"queue {q.name} could not be recreated: {exc.message}; it "
                      "stays damaged (DELETE it, or restore the extents and run 'harbormq "
                      "recreate')")
            return q
        q.store.close()
        del core.queues[q.name]
        dirs.replace_dir(tmp, final, keep_old=True)
        fresh = core.open_queue_store(q.definition, report=False)
        fresh.next_seq = max(fresh.next_seq, q.next_seq)
        self.emit("HMQ7474I", f"queue {q.name} recreated from the log at restart: image at "
                  f"LSN {mp['image_lsn']} ({result['image_messages']} messages), "
                  f"{result['effects']} later effects; {result['messages']} messages")
        return fresh

    def _sweep_orphan_stores(self, *, after_redo: bool = False) -> None:
        """Store directories with no catalog entry: a define whose record never got
        to disk, or a delete interrupted before removing the directory. Empty ones
        are removed; any with messages are kept aside, never destroyed.

        Before redo, a store of an object newer than any the catalog knows is
        left alone: its define is in the log after the catalog's last flush (a
        power cut between a flush's store writes and its catalog write), and
        redo opens it as that queue's store. After redo, what is still unknown
        is an orphan."""
        core = self.core
        qdir = core.config.queues_dir
        if not qdir.is_dir():
            return
        known = {core.config.queue_dir(n) for n in core.queues}
        newest_known = max((d["object_id"] for d in core.objects.values()), default=0)
        for path in qdir.iterdir():
            if path in known or not path.is_dir() or path.name.endswith(".orphan") or \
                    dirs.DAMAGED in path.name:     # damaged stores kept as evidence
                continue
            if path.name.endswith((dirs.REBUILDING, dirs.REPLACED)):
                QueueStore.destroy(path)      # an interrupted media recovery's work files
                continue
            store = QueueStore(path)
            count, oid = store.count(), store.object_id
            store.close()
            if not after_redo and oid is not None and oid > newest_known:
                continue
            if count == 0:
                QueueStore.destroy(path)
            else:
                aside = path.with_name(path.name + ".orphan")
                rename_durably(path, aside)
                self.emit("HMQ7511W", f"store {path} holds {count} message(s) but no queue "
                          f"is defined for it; kept aside as {aside}")

    # -- phase 2 --------------------------------------------------------------------

    def phase2_status_rebuild(self) -> None:
        core, r = self.core, self.report
        st = core.log.state
        table: dict = {}
        if st.checkpoint_lsn:
            table = read_checkpoint(lambda lsn: next(core.log.read_from(lsn), None),
                                    st.checkpoint_lsn)
            candidates = [table["begin_lsn"], table["restart_lsn"]]
            candidates += [u["first_lsn"] for u in table["uows"]]
            redo_start = min(c for c in candidates if c is not None)
            core.raise_id_floors(uow=table["next_uow_id"], object=table["next_object_id"])
            for name, info in table["stores"].items():
                q = core.queues.get(name)
                if q is not None and q.object_id == info["object_id"]:
                    q.next_seq = max(q.next_seq, info["next_seq"])
            core.adopt_media_points({
                n: mp for n, mp in table.get("media", {}).items()
                if n in core.objects and core.objects[n]["object_id"] == mp["object_id"]})
            redo_start = self._bring_forward_restored_stores(
                unpack_store_lsns(table.get("store_lsns", [])), redo_start)
        else:
            redo_start = core.log.chain()[0].first_lsn
        # ids a given-up or an older log used are never given again
        for floor in [{"uow": d["next_uow_id"], "object": d["next_object_id"]}
                      for d in st.discarded] + [st.id_floor]:
            core.raise_id_floors(uow=floor.get("uow", 0), object=floor.get("object", 0))
        r.checkpoint_lsn = st.checkpoint_lsn
        r.redo_start_lsn = redo_start
        for definition in core.objects.values():
            core.raise_id_floors(object=definition["object_id"] + 1)
        ext = core.log.extent_of(redo_start)
        self.emit("HMQ7232I", f"Status rebuild for queue manager {core.name} complete: last "
                  f"checkpoint at LSN {st.checkpoint_lsn or '-'}, "
                  f"{len(table.get('uows', []))} unit(s) of work active at it, redo starts at "
                  f"LSN {redo_start}" + (f" in {extent_file_name(ext.number)}" if ext else ""))

    def _bring_forward_restored_stores(self, written: dict[int, int], redo_start: int) -> int:
        """A store whose recovery LSN is older than the one the last checkpoint
        saw written was put back from an older copy. Redo goes back for it, as
        MQ's restart reads page 0 of every page set (redbook §2.1.3): to the
        restart point of a checkpoint taken before that LSN, which covers every
        unit of work in flight then. A store the log on disk can no longer
        bring forward is damaged (HMQ6767E): recreated from its media image on
        a linear log, reported on a circular one. Returns where redo starts."""
        core = self.core
        behind = {q.name: self.redo_from.get(q.object_id, 0) for q in core.queues.values()
                  if not q.damaged and q.object_id in written
                  and self.redo_from.get(q.object_id, 0) < written[q.object_id]}
        if not behind:
            return redo_start
        if core.config.log_archive_paths:
            self._recall_for(behind)
        oldest, starts = self._checkpoint_starts()
        for name, have in sorted(behind.items(), key=lambda item: item[1]):
            q = core.queues[name]
            # the latest checkpoint begun at or before the store's LSN
            start = max((r for b, r in starts if b <= have and r >= oldest), default=None)
            if start is None and oldest == 0:
                start = 0        # the log is whole from its very first record
            if start is not None:
                self.emit("HMQ7234W", f"the store of queue {name} was put back from an older "
                          f"copy: its recovery LSN is {have}, the queue manager had written "
                          f"{written[q.object_id]}; redo brings it forward from LSN {start}")
                redo_start = min(redo_start, start)
                continue
            ext = core.log.extent_of(have)
            self.emit("HMQ6767E", f"the store of queue {name} was put back from an older copy "
                      f"(recovery LSN {have}, the queue manager had written "
                      f"{written[q.object_id]}) and the log from LSN {have} is no longer on "
                      "disk" + (f" ({extent_file_name(ext.number)})" if ext else "") +
                      f"; the oldest extent kept starts at LSN {oldest}")
            q.damaged, q.damage_reason = True, (
                f"its store was put back from an older copy (recovery LSN {have}) that the "
                "log on disk cannot bring forward")
            try:
                q.store.mark_damaged(q.damage_reason)
            except HarbormqError:
                pass
            q = self._check_queue_store(q)      # a linear log recreates it now
            self.redo_from[q.object_id] = q.store.recovery_lsn
        return redo_start

    def _recall_for(self, behind: dict[str, int]) -> None:
        """Fetch back from the archive the log those stores need: from the oldest
        store LSN, then one extent further back at a time until a checkpoint
        begun before each LSN has its restart point on disk (a unit of work
        open across that checkpoint can put it an extent or more earlier)."""
        core = self.core
        from_lsn = min(behind.values())
        while True:
            try:
                core.log.recall_missing(from_lsn, core.config.log_archive_paths, self.emit)
            except LogMissing as exc:
                self.emit("HMQ6767E", f"{exc.message}; stores that need it cannot be "
                          "brought forward from the archive")
                return
            oldest, starts = self._checkpoint_starts()
            if oldest == 0 or all(any(b <= have and r >= oldest for b, r in starts)
                                  for have in behind.values()):
                return
            earlier = [e for e in core.log.chain()
                       if e.end_lsn is not None and e.end_lsn <= oldest]
            if not earlier:
                return
            from_lsn = earlier[-1].first_lsn

    def _checkpoint_starts(self) -> tuple[int, list[tuple[int, int]]]:
        """(the oldest LSN whose extent is on disk, [(begin LSN, restart LSN) of
        every checkpoint in the log on disk]): a full read of the log, done
        only when a store was put back from an older copy."""
        log = self.core.log
        chain = log.chain()
        kept = chain
        for i, e in enumerate(chain):
            if not log.extent_present(e):
                kept = chain[i + 1:]
        if not kept:
            return log.state.active.first_lsn, []
        starts = []
        for rec in log.read_from(kept[0].first_lsn):
            if rec.type == RecordType.CHECKPOINT_END:
                head = decode_json(rec.payload)
                starts.append((head["begin_lsn"], head["restart_lsn"]))
        return kept[0].first_lsn, starts

    # -- phase 3 --------------------------------------------------------------------

    def _queue_for(self, rec: LogRecord) -> LocalQueue | None:
        return self.rule.effects.target(rec)

    def _due(self, q: LocalQueue, lsn: int) -> bool:
        return self.rule.effects.due(q, lsn)

    def phase3_redo(self):
        """Forward recovery without a pause; the scan (its end LSN)."""
        return run_steps(self._redo_steps())

    def _redo_steps(self) -> Steps:
        """Forward recovery, a step a batch of log records (the loop may run
        other work between two: nothing else touches the core before restart
        ends); returns the scan."""
        core, r = self.core, self.report
        core.log.make_durable()   # redo flushes stores from what it reads
        active = core.log.state.active
        if r.redo_start_lsn > active.first_lsn:
            # the newest extent is read whole even when redo starts inside it: a
            # damaged record there, followed by good ones, is corruption (the
            # reading rules in log/reader.py)
            for _rec in core.log.read_from(active.first_lsn, r.redo_start_lsn):
                pass
        scan = core.log.scan(r.redo_start_lsn, repair_tail=True)
        for q in core.queues.values():
            q.ordered = False
        total = max(1, self._log_bytes_from(r.redo_start_lsn))
        self.progress("forward recovery", 0, total)
        # the log is read a stretch at a time: what is put and got again within
        # a stretch is skipped (log/replay.py without_effect)
        stretch: list[list[LogRecord]] = []
        stretch_bytes = 0
        # redo makes and drops records by the hundred thousand, none of them in
        # a reference cycle: the cyclic collector would only walk a stretch's
        # records again and again (a quarter of redo's CPU). (For the whole
        # process: another queue manager in it goes without the collector too,
        # for as long as this redo lasts.)
        collecting = gc.isenabled()
        gc.disable()
        try:
            for batch in scan.batches():
                stretch.append(batch)
                stretch_bytes += batch[-1].end_lsn - batch[0].lsn
                if stretch_bytes >= REDO_STRETCH_BYTES:
                    yield from self._redo_stretch(stretch, total)
                    stretch, stretch_bytes = [], 0
                yield
            if stretch:
                yield from self._redo_stretch(stretch, total)
        finally:
            if collecting:
                gc.enable()
        self.progress("forward recovery", total, total)
        r.records_replayed = scan.records_read
        r.bytes_replayed = scan.bytes_read
        r.end_lsn = scan.end_lsn
        if scan.torn_copy is not None:
            r.torn_tail = str(scan.torn_copy)
            self.emit("HMQ7502W", f"the log ends in a torn record at offset {scan.end.offset} of "
                      f"{extent_file_name(core.log.state.active.number)} (LSN {scan.end_lsn}): "
                      f"{scan.end.reason}; {scan.end.torn_length} bytes kept in "
                      f"{scan.torn_copy.name}")
        self._flush_during_redo(scan.end_lsn)
        self._sweep_orphan_stores(after_redo=True)
        damaged = [q.name for q in core.queues.values() if q.damaged]
        for q in core.queues.values():
            if q.damaged:
                core.report_damage(q)
            q.end_redo()
        if damaged:
            self.emit("HMQ7473W", f"queue manager {core.name} starts with {len(damaged)} "
                      f"damaged object(s): {', '.join(damaged)}; their uncommitted work is "
                      "ignored and their operations fail with MQRC 2101 until they are "
                      + ("recreated ('harbormq recreate') or deleted"
                         if core.config.log.log_type == "linear" else
                         "deleted (a circular log cannot recreate them)"))
        for open_uow in self.rule.open.values():
            core.adopt_unit_of_work(_unit_of_work(open_uow))
        if r.nonpersistent_discarded:
            self.emit("HMQ7237I", f"{r.nonpersistent_discarded} non-persistent message(s) "
                      "discarded at restart")
        self.emit("HMQ7229I", f"{r.records_replayed} log records accessed on queue manager "
                  f"{core.name} during the log replay phase ({r.bytes_replayed} bytes, "
                  f"{r.effects_redone} effects redone; {r.records_skipped} records skipped: "
                  "messages put and got again, and their units of work)")
        self.emit("HMQ7230I", f"Log replay for queue manager {core.name} complete (log ends "
                  f"at LSN {r.end_lsn})")
        return scan

    def _redo_stretch(self, stretch: list[list[LogRecord]], total: int) -> Steps:
        """Redo a stretch of the log (batches of records in LSN order), a step
        a batch."""
        core, r = self.core, self.report
        records = [rec for batch in stretch for rec in batch]
        core.raise_id_floors(uow=max([rec.uow_id for rec in records]) + 1)
        skip = without_effect(records, self.rule.open, self.redo_from) \
            if SKIP_WITHOUT_EFFECT else ()
        r.records_skipped += len(skip)
        handlers = self.rule.handlers      # (the rule's feed, without a call per record)
        redo_other = self._redo_other
        target, seen_seq = self.rule.effects.target, self.rule.effects.seen_seq
        put_type = RecordType.MSG_PUT
        for batch in stretch:
            for rec in batch:
                if rec.lsn in skip:
                    if rec.type is put_type:
                        q = target(rec)     # a put skipped still uses up its sequence number
                        if q is not None:
                            seen_seq(q, int.from_bytes(rec.payload[:8], "little"))
                    continue
                handler = handlers.get(rec.type)
                if handler is None:
                    redo_other(rec)
                else:
                    handler(rec)
            done = batch[-1].end_lsn - r.redo_start_lsn
            if done - self._progress_at >= PROGRESS_BYTES:
                self._progress_at = done
                self.progress("forward recovery", min(done, total), total)
                crash_point("restart.mid_redo")
            elif time.monotonic() >= self._progress_due:
                self._progress_due = time.monotonic() + PROGRESS_EVERY_S
                self.progress("forward recovery", min(done, total), total)
            delay_point("restart.redo_batch")
            yield
        # (only here, between stretches: inside one, the state between the two
        # halves of a skipped pair is not the log's)
        if sum(q.dirty_entries() for q in core.queues.values()) >= REDO_FLUSH_ENTRIES:
            self._flush_during_redo(records[-1].end_lsn)

    def _log_bytes_from(self, lsn: int) -> int:
        chain = self.core.log.chain()
        if not chain:
            return 0
        last = chain[-1]
        end = last.first_lsn + self.core.log.extent_size
        return max(0, end - lsn)

    def _flush_during_redo(self, lsn: int) -> None:
        """Everything below ``lsn`` is on disk already (we are reading it), so a
        store may take every effect redone so far with recovery LSN ``lsn``."""
        core = self.core
        for q in core.queues.values():
            snap = q.begin_flush()
            if snap is not None:
                q.store.apply(snap, max(lsn, q.store.recovery_lsn), q.index_type, q.next_seq)
                q.end_flush()
        # (not while redo is still below the catalog's own LSN: going back for a
        # store put back from a copy replays definitions the catalog has long
        # passed; written there, a crash would bring back a queue deleted since)
        if lsn >= self.redo_from.get(0, 0):
            core.flush_catalog_in_redo(lsn)

    def _redo_other(self, rec: LogRecord) -> None:
        """A record the commit rule leaves to restart (phase3_redo gives the rest to
        the rule, and keeps ``next_uow_id`` above every unit of work read)."""
        T = RecordType
        if rec.type == T.CHECKPOINT_END:
            self.last_checkpoint_lsn = rec.lsn
        elif rec.type in (T.OBJECT_CREATE, T.OBJECT_ALTER, T.OBJECT_DELETE):
            self._redo_object(rec)
        elif rec.type == T.MEDIA_IMAGE_END:
            self._redo_image_end(rec)

    def _redo_image_end(self, rec: LogRecord) -> None:
        """A completed media image moves the object's media point (core/media_points.py)."""
        end = decode_json(rec.payload)
        d = self.core.objects.get(rec.object_name)
        if d is not None and d["object_id"] == rec.object_id:
            self.core.set_media_point(rec.object_name, {
                "object_id": rec.object_id, "image_lsn": end["begin_lsn"],
                "replay_from": end["replay_from"], "image_ns": rec.timestamp_ns})

    def _redo_object(self, rec: LogRecord) -> None:
        core, r = self.core, self.report
        data = decode_json(rec.payload)
        mp = core.media_points.get(rec.object_name)
        if mp is not None and (mp["object_id"] < rec.object_id or (
                mp["object_id"] == rec.object_id and rec.type == RecordType.OBJECT_DELETE)):
            core.forget_media_point(rec.object_name)    # a newer incarnation, or deleted
        core.raise_id_floors(object=rec.object_id + 1)
        catalog_due = rec.lsn >= self.redo_from[0]
        if rec.type == RecordType.OBJECT_CREATE:
            data["create_lsn"] = rec.lsn
            existing = core.objects.get(rec.object_name)
            if catalog_due or existing is None or existing["object_id"] != rec.object_id:
                core.set_definition(rec.object_name, data, rec.lsn)
            if data["type"] == "QLOCAL":
                q = core.queues.get(rec.object_name)
                if q is not None and q.object_id != rec.object_id:
                    del core.queues[q.name]      # an older incarnation of the name
                    q.store.close()
                    q = None
                if q is None:
                    q = core.open_queue_store(data, report=False)
                    r.nonpersistent_discarded += q.store.purge_nonpersistent()
                    q.depth = q.store.count()
                    q.ordered = False   # as for every queue during redo
                    self.redo_from.setdefault(q.object_id, q.store.recovery_lsn)
            r.effects_redone += 1
        elif rec.type == RecordType.OBJECT_ALTER:
            clear = data.pop("clear", False)
            existing = core.objects.get(rec.object_name)
            if existing is not None and existing["object_id"] == rec.object_id:
                data["create_lsn"] = existing.get("create_lsn", 0)
                # (below the catalog's recovery LSN: the catalog has it already)
                core.set_definition(rec.object_name, data, rec.lsn if catalog_due else None)
                q = self._queue_for(rec)
                if q is not None:
                    q.definition = data
                    if clear and self._due(q, rec.lsn):
                        q.clear_memory()
                        q.store.clear(rec.end_lsn)
                        q.store_hidden = False
                        self.redo_from[q.object_id] = rec.end_lsn
        elif rec.type == RecordType.OBJECT_DELETE:
            existing = core.objects.get(rec.object_name)
            if existing is not None and existing["object_id"] == rec.object_id:
                core.set_definition(rec.object_name, None, rec.lsn)
            q = core.queues.get(rec.object_name)
            if q is not None and q.object_id == rec.object_id:   # damaged or not
                del core.queues[q.name]
                own = q.store.object_id == rec.object_id
                q.store.close()
                if own:     # never the store of a newer incarnation of the name
                    QueueStore.destroy(q.store.path)

    def _inconsistent(self, rec: LogRecord, what: str) -> None:
        text = f"log record at LSN {rec.lsn} ({rec.type.name}) does not match the store: {what}"
        self.report.warnings.append(text)
        self.emit("HMQ7512W", text)

    # -- phase 4 --------------------------------------------------------------------

    async def phase4_undo(self) -> None:
        core, r = self.core, self.report
        in_flight = [u for u in core.uows.values() if u.state in ("active", "backing_out")]
        in_doubt = [u for u in core.uows.values() if u.state == "prepared"]
        if core.group is not None:
            # a queue sharing group decided some units of work the log leaves
            # open (core/shared.py): their COMMIT records are written now
            decided = core.group.outcomes_after_redo(list(core.uows), r.end_lsn)
            for uow in [u for u in in_flight if decided.get(u.id) == "commit"]:
                core.commit_nowait(uow, force=False)
                in_flight.remove(uow)
        r.uows_in_flight = len(in_flight)
        r.uows_in_doubt = len(in_doubt)
        self.progress("backward recovery", 0, max(1, len(in_flight)))
        for uow in self.rule.joined_unrecorded.values():
            core.append_record(RecordType.UOW_COMMIT, uow_id=uow.id, prev_lsn=uow.last_lsn)
        requeue = []
        pacer = Pacer()
        for i, uow in enumerate(sorted(in_flight, key=lambda u: u.first_lsn), 1):
            await pacer.step()
            before = core.log.records_since_checkpoint
            requeue += core.undo(uow)
            r.compensations_written += core.log.records_since_checkpoint - before - 1
            r.uows_backed_out += 1
            crash_point("restart.mid_undo")
            self.progress("backward recovery", i, len(in_flight))
        self.progress("backward recovery", max(1, len(in_flight)), max(1, len(in_flight)))
        await core.log.force()
        self.emit("HMQ7233I", f"{r.uows_backed_out} out of {r.uows_in_flight} in-flight units "
                  f"of work backed out for queue manager {core.name} "
                  f"({r.compensations_written} compensation records)")
        if in_doubt:
            self.emit("HMQ7235I", f"{len(in_doubt)} in-doubt unit(s) of work kept, their "
                      "messages locked until resolved: " +
                      ", ".join(str(u.id) for u in in_doubt))
        for q, msg in requeue:
            core.requeue_backout(q, msg)
        if requeue:
            await core.log.force()

    # -- phase 5 --------------------------------------------------------------------

    async def phase5_indexes(self) -> None:
        core, r = self.core, self.report
        indexed = [q for q in core.queues.values() if q.index_type != "NONE"]
        if not indexed:
            return
        await core.flush_all()
        stale = []
        for q in indexed:
            if q.store.index_type == q.index_type and q.store.index_entries() == q.store.count():
                r.indexes_verified += 1
            else:
                stale.append(q)

        def rebuild(q: LocalQueue) -> None:
            q.store.rebuild_index(q.index_type)
            q.index_ready = True

        for q in stale:
            q.index_ready = False
        if core.config.tuning.qindxbld == "nowait":
            for q in stale:
                core.loop.run_in_executor(None, rebuild, q)
            r.indexes_rebuilt = len(stale)
        else:
            pacer = Pacer()
            for i, q in enumerate(stale, 1):
                await pacer.step()
                rebuild(q)
                self.progress("index rebuild", i, len(stale))
            r.indexes_rebuilt = len(stale)
        self.emit("HMQ7236I", f"queue indexes: {r.indexes_rebuilt} rebuilt"
                  f"{' in the background' if core.config.tuning.qindxbld == 'nowait' else ''}, "
                  f"{r.indexes_verified} verified")


class RedoEffects:
    """The commit rule's effects at restart: on the queues' committed layers,
    with the locks and uncommitted-put counts the core keeps for units of work
    still open. An effect applies to a store only at or above the recovery LSN
    it had when it was opened (``Restart.redo_from``)."""

    def __init__(self, restart: Restart):
        self.restart = restart
        self.report = restart.report
        # (the dicts themselves, never replaced: these two run for every message record)
        self._queues = restart.core.queues
        self._redo_from = restart.redo_from

    def target(self, rec: LogRecord) -> LocalQueue | None:
        q = self._queues.get(rec.object_name)
        if q is None or q.object_id != rec.object_id or q.damaged:
            return None   # deleted, an older incarnation of the name, or damaged
        return q

    def due(self, q: LocalQueue, lsn: int) -> bool:
        """Redo applies an effect only if its LSN is at or above the store's LSN."""
        return lsn >= self._redo_from.get(q.object_id, 0)

    def seen_put(self, q: LocalQueue, msg: Message) -> None:
        self.seen_seq(q, msg.seq)

    @staticmethod
    def seen_seq(q: LocalQueue, seq: int) -> None:
        """A put of ``q`` with sequence number ``seq`` was read (also one redo
        skips: log/replay.py without_effect)."""
        if seq >= q.next_seq:
            q.next_seq = seq + 1

    def opened(self, op: PendingOp, rec: LogRecord) -> bool:
        q = op.target
        if op.kind == "put":
            q.uncommitted_puts += 1
            return True
        msg = q.lookup(op.key)
        if msg is None:
            # expected when the store already holds a later state (the get's
            # commit is below the store's LSN); anything else is a mismatch
            if self.due(q, rec.lsn):
                ref = MessageRef.decode(rec.payload)
                self.restart._inconsistent(rec, f"got message {ref.msg_id.hex()} is not on "
                                                f"{q.name}")
            return False
        q.locked[op.key] = op.uow_id
        op.msg = msg
        return True

    def closed(self, op: PendingOp, applied: bool) -> None:
        if op.kind == "put":
            op.target.uncommitted_puts -= 1
        elif not applied:
            op.target.unlocked(op.key)

    def put(self, q: LocalQueue, msg: Message, lsn: int) -> None:
        q.commit_put(msg, lsn)
        self.report.effects_redone += 1

    def delete(self, q: LocalQueue, key: bytes, lsn: int, op: PendingOp | None) -> None:
        if op is None and q.lookup(key) is None:
            return      # an auto-committed get the store already has
        q.commit_delete(key, lsn)
        self.report.effects_redone += 1

    def backed_out(self, op: PendingOp, backout_count: int, lsn: int) -> None:
        op.target.commit_update(replace(op.msg, backout_count=backout_count), lsn)
        self.report.effects_redone += 1


def _unit_of_work(o: OpenUow) -> UnitOfWork:
    """A unit of work the log leaves open, as the core keeps it (phase 4 backs it
    out, or keeps it in doubt)."""
    ops = []
    group: PublishedTargets | None = None
    for op in o.ops.values():
        if op.fanout:
            # a publication's targets, undone together by one COMPENSATION
            if group is None or group[0].lsn != op.lsn:
                group = PublishedTargets(op.publication_id)
            ops.append(UowOp(op.kind, op.target, op.msg, op.lsn, op.prev_lsn,
                             publication=group))
            group.append(ops[-1])
        else:
            ops.append(UowOp(op.kind, op.target, op.msg, op.lsn, op.prev_lsn))
    uow = UnitOfWork(o.id, owner=o.owner, state=o.state, first_lsn=o.first_lsn,
                     last_lsn=o.last_lsn, first_log_ns=o.started_ns, ops=ops)
    if o.started_ns:
        uow.started_ns = o.started_ns
    return uow
