"""Flushes and checkpoints: the stores and the catalog written under the
write-ahead rule, and the checkpoints that say where restart (and media
recovery) would start.

A flush snapshots what is dirty, forces the log past the snapshot, then writes
each store in one synced transaction on an executor thread; a checkpoint
flushes, records what restart needs (units of work, stores behind the log, id
counters, media points) and moves the control file's restart point on. The
catalog's changes wait here (``catalog_dirty``) until a flush writes them.

``FlushAndCheckpoint`` is a part of the core (``engine.QueueManagerCore``),
which provides what ``CheckpointHost`` lists. Not here: the shunts a
checkpoint writes and the relief of a full circular log (``shunting.py``),
extents archived and deleted after it (``log_management.py``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from ..crashpoints import crash_point
from ..errors import ObjectDamaged, StoreDamaged
from ..log.checkpoint import pack_store_lsns, part_limit, split_table
from ..log.records import RecordType, encode_json
from ..store.stores import CatalogStore
from .media_points import MediaPointsHost, media_lsn, media_table
from .queue import LocalQueue

if TYPE_CHECKING:
    from ..config import QMConfig
    from ..log.manager import RecoveryLog
    from .log_management import LogManagement
    from .operator_log import OperatorLog
    from .uow import UnitOfWork


class CheckpointHost(MediaPointsHost, Protocol):
    """What flushes and checkpoints use of the rest of the core."""
    name: str
    config: QMConfig
    log: RecoveryLog
    oplog: OperatorLog
    loop: asyncio.AbstractEventLoop | None
    queues: dict[str, LocalQueue]
    uows: dict[int, UnitOfWork]
    next_uow_id: int
    next_object_id: int
    stopping: str | None
    on_fatal: Callable[[str], None] | None
    log_management: LogManagement

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task: ...

    def append_record(self, rtype: RecordType, *, payload: bytes = b"") -> int: ...

    def damage_queue(self, q: LocalQueue, why: str) -> None: ...

    def _shunt_long_units(self, begin_lsn: int, *, urgent: bool) -> None: ...

    def _end_held_requeues(self) -> None: ...

    def release_held_producers(self) -> None: ...


class FlushAndCheckpoint:
    """Flushes and checkpoints of the core (a part of ``QueueManagerCore``,
    which is its ``CheckpointHost``)."""

    def _init_checkpoints(self) -> None:
        self.catalog_store: CatalogStore | None = None
        #: definitions changed since the last flush began, and the LSN of the first
        self.catalog_dirty: dict[str, dict | None] = {}
        self.catalog_dirty_lsn: int | None = None
        #: the catalog snapshot a flush is writing (kept until the store has it)
        self.catalog_flushing: dict[str, dict | None] = {}
        self.catalog_flushing_lsn: int | None = None
        #: one flush at a time (and no store closed under one); one checkpoint at a time
        self.flush_lock = asyncio.Lock()
        self.checkpoint_lock = asyncio.Lock()
        self._checkpoint_pending = False
        self._flush_pending = False
        #: store writes running on executor threads; a cancelled flush does not stop
        #: them, and a store must not be closed under its own write transaction
        self._store_io: set[asyncio.Future] = set()
        self.last_checkpoint: dict = {}
        #: when the flush of the checkpoint now running began (None: none runs)
        self.checkpoint_flushing_since: float | None = None
        #: bytes of log from a checkpoint's BEGIN to its END: the last, the largest
        self.checkpoint_span_last = 0
        self.checkpoint_span_max = 0
        #: the extents HMQ7467I/HMQ7468I last named, and when
        self._log_need_said: tuple = (None, None)
        self._log_need_said_at = 0.0

    # -- what starts them -------------------------------------------------------------

    def _after_commit_put(self, q: LocalQueue) -> None:
        """A committed put: enough of ``q`` waiting for its store starts a flush."""
        if q.dirty_entries() >= self.config.tuning.flush_max_entries and not self._flush_pending:
            self._flush_pending = True
            self.spawn(self.flush_all())

    def _start_checkpoint(self, reason: str) -> None:
        """Start a checkpoint in the background (callers start none while one waits)."""
        self._checkpoint_pending = True
        self.spawn(self.checkpoint(reason))

    # -- flush ------------------------------------------------------------------------

    async def flush_all(self) -> int:
        """Write every dirty store under the write-ahead rule: snapshot, force the log
        past the snapshot, then one synced transaction per store. A snapshot
        stays in memory until its store has it, so a flush that is cancelled or
        fails is taken up by the next one."""
        self._flush_pending = False
        async with self.flush_lock:
            # a cancelled flush's write may still run on its thread: let it finish
            # first, or it could land after (and undo) the newer one
            await self.quiesce_store_io()
            snapshots = [(q, q.begin_flush()) for q in list(self.queues.values())
                         if not q.damaged]
            snapshots = [(q, s) for q, s in snapshots if s is not None and self._store_present(q)]
            catalog = self._begin_catalog_flush()
            if not snapshots and catalog is None:
                return 0
            target = self.log.end_lsn
            await self.log.force(target)
            for q, snap in snapshots:
                if q.clear_pending is not None:     # a CLEAR whose store clear failed
                    await self._store_write(q.store.clear, q.clear_pending[1])
                    q.clear_pending, q.store_hidden = None, False
                next_seq = q.next_seq
                await self._store_write(q.store.apply, snap, target, q.index_type, next_seq)
                q.stored_next_seq = next_seq
                q.end_flush()
            if catalog is not None:
                if not (self.config.catalog_dir / "data.mdb").exists():
                    raise self._fatal(f"its store {self.config.catalog_dir} is missing")
                try:
                    await self._store_write(self.catalog_store.apply, catalog, target)
                except StoreDamaged as exc:   # (a full disk is no damage: it is retried)
                    raise self._fatal(exc.message) from exc
                self.catalog_flushing, self.catalog_flushing_lsn = {}, None
            return len(snapshots)

    def _store_present(self, q: LocalQueue) -> bool:
        """A store whose files were removed under a running queue manager is
        damaged: LMDB would go on writing to the deleted file."""
        if (q.store.path / "data.mdb").exists():
            return True
        self.damage_queue(q, f"its store {q.store.path} was removed while the queue manager "
                          "was running")
        return False

    def _fatal(self, why: str) -> ObjectDamaged:
        """Damage to the queue manager object: a preemptive shutdown (AMQ7472).
        Returns the error for the operation that found it to raise."""
        text = (f"the queue manager object of {self.name} is damaged: {why}; the queue "
                "manager stops (preemptive)")
        self.oplog.emit("HMQ7472E", text)
        if self.on_fatal is not None and not self.stopping:
            self.on_fatal(why)
        return ObjectDamaged(text)

    def _begin_catalog_flush(self) -> dict | None:
        if not self.catalog_dirty and not self.catalog_flushing:
            return None
        self.catalog_flushing = {**self.catalog_flushing, **self.catalog_dirty}
        lsns = [x for x in (self.catalog_flushing_lsn, self.catalog_dirty_lsn) if x]
        self.catalog_flushing_lsn = min(lsns) if lsns else None
        self.catalog_dirty, self.catalog_dirty_lsn = {}, None
        return self.catalog_flushing

    async def _store_write(self, fn, *args) -> None:
        fut = self.loop.run_in_executor(None, fn, *args)
        self._store_io.add(fut)
        fut.add_done_callback(self._store_io.discard)
        # shielded: cancelling the flush must not mark the write done while its
        # thread is still inside the store's transaction
        await asyncio.shield(fut)

    def close_stores(self) -> None:
        for q in self.queues.values():
            q.store.close()
        if self.catalog_store is not None:
            self.catalog_store.close()

    async def quiesce_store_io(self) -> None:
        """Wait for store writes already running on other threads."""
        if self._store_io:
            await asyncio.wait(list(self._store_io))

    # -- the catalog ------------------------------------------------------------------

    def catalog_changed(self, name: str, definition: dict | None, lsn: int) -> None:
        """A definition changed by the record at ``lsn`` (None: deleted): the next
        flush writes it to the catalog."""
        self.catalog_dirty[name] = definition
        if self.catalog_dirty_lsn is None:
            self.catalog_dirty_lsn = lsn

    def adopt_catalog(self, store: CatalogStore, objects: dict[str, dict] | None = None
                      ) -> None:
        """(restart) The catalog store, opened, and the definitions in it (read
        from it here unless the caller has read them)."""
        self.catalog_store = store
        self.objects = store.load() if objects is None else objects

    def flush_catalog_in_redo(self, lsn: int) -> None:
        """(restart redo) Write the definitions changed so far at once, with
        recovery LSN ``lsn``: the log below it is on disk (redo is reading it)."""
        if self.catalog_dirty:
            self.catalog_store.apply(self.catalog_dirty,
                                     max(lsn, self.catalog_store.recovery_lsn))
            self.catalog_dirty, self.catalog_dirty_lsn = {}, None

    def replace_catalog_store(self, store: CatalogStore, rebuilt_to: int) -> None:
        """(media recovery, under the flush lock) A catalog store rebuilt from the
        log up to ``rebuilt_to`` replaces the old one: the definitions changed
        since are still dirty, and the next flush writes them."""
        self.catalog_store = store
        self.catalog_dirty = {**self.catalog_flushing, **self.catalog_dirty}
        self.catalog_flushing, self.catalog_flushing_lsn = {}, None
        if self.catalog_dirty and self.catalog_dirty_lsn is None:
            self.catalog_dirty_lsn = rebuilt_to

    # -- checkpoint -------------------------------------------------------------------

    def restart_point(self, begin_lsn: int, oldest_at_begin: int | None) -> int:
        """The oldest LSN restart would need now: a unit of work is needed from its
        ``first_lsn`` (its latest shunt, once shunted), a store from its oldest
        unflushed effect."""
        candidates = [begin_lsn]
        if oldest_at_begin:
            candidates.append(oldest_at_begin)
        candidates += [u.first_lsn for u in self.uows.values() if u.first_lsn]
        candidates += [q.recovery_lsn for q in self.queues.values()
                       if q.recovery_lsn and not q.damaged]
        candidates += [x for x in (self.catalog_dirty_lsn, self.catalog_flushing_lsn) if x]
        return min(candidates)

    def media_point(self) -> int:
        """Oldest LSN media recovery of the objects needs (core/media_points.py)."""
        return media_lsn(self)

    async def checkpoint(self, reason: str = "requested") -> dict:
        """A fuzzy checkpoint, as MQ's: the stores are flushed first, outside the
        checkpoint's records, so BEGIN..END holds only the table (and any
        shunts) however long the flush takes and whatever the load. What the
        flush did not cover is in the restart point: everything committed
        before the flush's snapshot (``flushed_below``) is in the stores, so
        redo starts there, or earlier at the first record of a unit of work
        open then (one that commits after the snapshot has its effects only in
        the log, its records before it)."""
        async with self.checkpoint_lock:
            self._checkpoint_pending = False
            flushed_below = self.log.end_lsn
            open_at_flush = {u.id: u.first_lsn for u in self.uows.values() if u.first_lsn}
            self.checkpoint_flushing_since = time.monotonic()
            try:
                await self.flush_all()
            finally:
                self.checkpoint_flushing_since = None
            begin = self.append_record(RecordType.CHECKPOINT_BEGIN,
                                       payload=encode_json({"reason": reason}))
            # in the same step as BEGIN: the shunts are forced with the checkpoint,
            # before the control file lets the log behind them be reused
            self._shunt_long_units(begin, urgent=reason == "log space")
            crash_point("checkpoint.mid")
            # those still open count from where they are now (shunted, perhaps):
            # restart_point() takes them; those ended since the snapshot from then
            ended = [lsn for uid, lsn in open_at_flush.items() if uid not in self.uows]
            oldest_at_begin = min(ended + [u.first_lsn for u in self.uows.values()
                                           if u.first_lsn], default=0)
            table = {
                "begin_lsn": begin,
                "oldest_uow_at_begin": oldest_at_begin,
                "flushed_below": flushed_below,
                # first_lsn: where restart needs it from (its latest shunt, if any)
                "uows": [{"id": u.id, "state": u.state, "first_lsn": u.first_lsn,
                          "begin_lsn": u.begin, "last_lsn": u.last_lsn}
                         for u in self.uows.values() if u.first_lsn],
                # only the stores behind the log: a flushed store holds its own
                # recovery LSN and next sequence (thousands of idle queues cost nothing)
                "stores": {q.name: {"object_id": q.object_id, "recovery_lsn": q.recovery_lsn,
                                    "next_seq": q.next_seq} for q in self.queues.values()
                           if q.recovery_lsn is not None or q.next_seq != q.stored_next_seq},
                # every store's recovery LSN as written: a store found older at
                # restart was put back from an older copy (recovery/restart.py)
                "store_lsns": pack_store_lsns({
                    q.object_id: q.store.recovery_lsn for q in self.queues.values()
                    if not (q.damaged or q.recreating or q.store_hidden)}),
                "next_uow_id": self.next_uow_id,
                "next_object_id": self.next_object_id,
                "reason": reason,
            }
            if self.config.log.log_type == "linear":
                table["media"] = media_table(self)
            restart_lsn = min(self.restart_point(begin, oldest_at_begin), flushed_below)
            table["restart_lsn"] = restart_lsn
            head, parts = split_table(table, part_limit(self.log.extent_payload))
            if parts:
                head["parts"] = [self.append_record(RecordType.CHECKPOINT_PART,
                                                    payload=encode_json(p)) for p in parts]
            end = self.append_record(RecordType.CHECKPOINT_END, payload=encode_json(head))
            self.checkpoint_span_last = end - begin
            self.checkpoint_span_max = max(self.checkpoint_span_max, end - begin)
            if end - begin > self.log.extent_payload:
                self.oplog.emit("HMQ7466W", f"A checkpoint of queue manager {self.name} "
                                f"took {end - begin} bytes of log, more than one extent "
                                f"({self.log.extent_payload} bytes): larger extents "
                                "(--log-file-pages) keep checkpoints a small part of the log")
            await self.log.force()
            media_lsn = self.media_point() if self.config.log.log_type == "linear" else 0
            await self.log.set_checkpoint(end, restart_lsn, media_lsn)
            self.last_checkpoint = table | {"end_lsn": end}
            self.report_log_need()
            self._warn_long_units_of_work()
            self._end_held_requeues()
            self.release_held_producers()
            self.log_management.after_checkpoint()
            return self.last_checkpoint

    def _warn_long_units_of_work(self) -> None:
        """Name every unit of work in the log through each ``long_uow_checkpoints``
        checkpoints (MQ's CSQJ160I and URCHKTH): it pins the restart point (or,
        once shunted, still holds its messages), and on a circular log that
        cannot shunt it, it will be backed out when the log is full."""
        every = self.config.tuning.long_uow_checkpoints
        now = time.time_ns()
        for u in self.uows.values():
            if not u.first_lsn:
                continue
            u.checkpoints += 1
            if every and u.checkpoints % every == 0:
                ext = self.log.extent_of(u.begin)
                where = f" in {self.log.extent_path(ext.number).name}" if ext else ""
                age = (now - (u.first_log_ns or u.started_ns)) / 1e9
                holds = ("it pins the restart point" if u.first_lsn == u.begin else
                         f"its records are shunted (restart needs the log from LSN "
                         f"{u.first_lsn}), but it holds its messages")
                self.oplog.emit("HMQ7465W", f"unit of work {u.id} ({u.state}, owner "
                                f"{u.owner or '-'}) has been in the log through {u.checkpoints} "
                                f"checkpoints, for {age:.0f} s since LSN {u.begin}{where}: "
                                f"{holds}; commit or back it out")

    def report_log_need(self) -> None:
        """HMQ7467I and HMQ7468I (AMQ7467/AMQ7468): after a checkpoint, when the
        extents they name changed or a minute has passed since they were said
        (the relief of a full log checkpoints every half second)."""
        st = self.log.state
        e = self.log.extent_of(st.restart_lsn)
        m = self.log.extent_of(st.media_lsn) if st.log_type == "linear" else None
        said = (e.number if e else None, m.number if m else None)
        now = time.monotonic()
        if said == self._log_need_said and now - self._log_need_said_at < 60:
            return
        self._log_need_said, self._log_need_said_at = said, now
        if e is not None:
            self.oplog.emit("HMQ7467I", f"The oldest log extent required to start queue "
                            f"manager {self.name} is {self.log.extent_path(e.number).name} "
                            f"(restart LSN {st.restart_lsn})")
        if st.log_type == "linear":
            if m is not None:
                self.oplog.emit("HMQ7468I", f"The oldest log extent required to perform media "
                                f"recovery of queue manager {self.name} is "
                                f"{self.log.extent_path(m.number).name} (media LSN "
                                f"{st.media_lsn})")
