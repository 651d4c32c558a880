"""The recovery log of one queue manager: extents, LSN assignment, forces,
switches and control-file updates.

Threads: ``append`` and ``force`` run on the queue manager's event loop (the one
owner of state); a single log-writer thread (``writer.py``) performs every
write, fsync, extent initialisation and control-file update, in the order the
loop queued them. An operation's ``force`` future completes after the fsync
that covers its records; the records appended and the forces asked for in one
turn of the loop reach the writer in one hand-off at the end of the turn.

Extent allocation:
* linear: a new extent ``S{next}.LOG`` at every switch; old ones are kept
  (``log.management = "manual"``).
* circular: ``primary`` extents preallocated; at a switch the writer reuses a
  *free* extent, one that lies wholly before the durable restart point, or adds
  a secondary extent while fewer than ``primary + secondary`` exist. A reused
  extent is zero-filled first, so everything after the end of the log is zero
  and a torn tail is unambiguous.

The control file written by the writer always describes what is already on
disk; an extent is only reused after a control file that no longer needs it
is durable, because both travel through the same ordered command stream.

Not here: the writer thread (``writer.py``), the recovery scan (``scan.py``),
which copy of a dual log to read and the check that a copy holds what the
control file says (``copies.py``), the log's settings (``config.LogSettings``).
"""

from __future__ import annotations

import asyncio
import copy
import heapq
import itertools
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from ..errors import ControlFileMismatch, LogCorrupt, LogError, LogFull, LogMissing
from ..fsutil import fsync_dir, make_dirs
from .control import ControlFile, ControlState, ExtentInfo
from .copies import LogCopies
from .force_times import ForceTimes
from .records import (
    EXTENT_HEADER_SIZE,
    PAGE_SIZE,
    ExtentHeader,
    LogRecord,
    RecordType,
    encode,
    encoded_length,
    extent_file_name,
)
from .scan import RecoveryScan
from .writer import LogWriter

if TYPE_CHECKING:
    from ..config import LogSettings

EXTENT_END_LENGTH = encoded_length(0, 0)


class RecoveryLog(LogCopies):
    """The log of one queue manager, opened for restart and then for writing.

    ``dual_dir``: a dual log (log.dual_path, z/OS's dual active log): every
    extent and copy 2 of the control file are written there too, and a force
    completes once both copies are durable (docs/design-notes.md, "The log").
    Which copy a read uses, and their repair at restart: ``LogCopies``."""

    def __init__(self, log_dir: Path, qm_name: str, dual_dir: Path | None = None):
        self.dir = Path(log_dir)
        self.dual_dir = Path(dual_dir) if dual_dir is not None else None
        self.qm_name = qm_name
        self.control = ControlFile(self.dir, self.dual_dir)
        self.state: ControlState | None = None
        super().__init__()      # the copies' state: warnings, the newest extent's order
        self.end_lsn = 0
        self.synced_lsn = 0
        self.records_since_checkpoint = 0
        #: records appended before the last checkpoint (with the count since it:
        #: every record appended since the log was opened, for the metrics)
        self.records_before_checkpoint = 0
        #: the writer's forces and how long they took (``force_times.py``)
        self.force_times = ForceTimes()
        #: called on the loop after every extent switch, with the new extent number
        self.on_switch: Callable[[int], None] | None = None
        self._writer: LogWriter | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: [target LSN, futures] of the forces asked for in this loop turn
        self._turn_force: list | None = None
        #: ``_end_turn`` is due: this turn appended or forced
        self._turn_end_scheduled = False
        self._waiters: list = []
        self._seq = itertools.count()
        self._active: ExtentInfo | None = None
        self._active_limit = 0      # LSN past which the active extent has no room
        #: the free extents of ``_free_of`` (the extent list they were counted
        #: in), kept by ``_set_extent_state`` so that ``available_extents``,
        #: asked on every persistent put, need not scan the extents
        self._free_count = 0
        self._free_of: list[ExtentInfo] | None = None
        self.failed: BaseException | None = None
        #: told (on the loop) when writing the log fails for good
        self.on_failed: Callable[[BaseException], None] | None = None
        #: says what holds the restart point where it is (the core's units of
        #: work, stores and checkpoints), for a log-full refusal to name it
        self.describe_pin: Callable[[], str] | None = None
        #: told (on the loop) of every log-full refusal, to reach the operator log
        self.on_full: Callable[[LogFull], None] | None = None

    # -- creation -----------------------------------------------------------------

    @classmethod
    def create(cls, log_dir: Path, qm_name: str, settings: LogSettings,
               dual_dir: Path | None = None, *, base_lsn: int = 0,
               first_number: int = 0, images_needed: bool = False,
               id_floor: dict | None = None) -> "RecoveryLog":
        """A new log. ``base_lsn``, ``first_number``: where its LSNs and extent
        numbers start; ``images_needed``, ``id_floor``: see ControlState
        ('harbormq reset-log': above the old log's, in its first control write)."""
        settings.validate()
        make_dirs(log_dir)
        if dual_dir is not None:
            make_dirs(dual_dir)
        log = cls(log_dir, qm_name, dual_dir)
        st = ControlState(qm_name=qm_name, log_type=settings.log_type, pages=settings.pages,
                          primary=settings.primary, secondary=settings.secondary,
                          dual=dual_dir is not None, images_needed=images_needed,
                          id_floor=dict(id_floor or {}))
        log.state = st
        count = settings.primary if settings.log_type == "circular" else 1
        for n in range(first_number, first_number + count):
            log._preallocate(n)
            st.extents.append(ExtentInfo(number=n, first_lsn=base_lsn, end_lsn=None,
                                         state="active" if n == first_number else "free"))
        log._write_header(first_number, first_lsn=base_lsn)
        st.next_extent_number = first_number + count
        st.sequence = 1
        log.control.write(st)
        return log

    @property
    def extent_size(self) -> int:
        return self.state.pages * PAGE_SIZE

    @property
    def extent_payload(self) -> int:
        """Bytes of records an extent holds: the largest record there can be."""
        return self.extent_size - EXTENT_HEADER_SIZE - EXTENT_END_LENGTH

    def _preallocate(self, number: int) -> None:
        for _, directory in self.copies:
            path = directory / extent_file_name(number)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.posix_fallocate(fd, 0, self.extent_size)
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_dir(directory)

    def _write_header(self, number: int, first_lsn: int) -> None:
        head = ExtentHeader(number, first_lsn, time.time_ns(), self.qm_name,
                            self.state.pages).encode()
        for _, directory in self.copies:
            fd = os.open(directory / extent_file_name(number), os.O_RDWR)
            try:
                os.pwrite(fd, head, 0)
                os.fdatasync(fd)
            finally:
                os.close(fd)

    # -- opening for restart ---------------------------------------------------------

    def open(self, *, repair: bool = True) -> ControlState:
        """Phase 1 of restart: read and reconcile the control file."""
        self.state = self.control.load(repair=repair)
        st = self.state
        if st.qm_name != self.qm_name:
            raise ControlFileMismatch(
                f"the log in {self.dir} belongs to queue manager {st.qm_name}, not "
                f"{self.qm_name} (its control file says so)", path=str(self.dir),
                hint="put this queue manager's own log back; a log cannot change hands")
        just_now = any(m == "HMQ7490W" for m, _ in self.control.warnings)
        if st.degraded and not just_now:       # given up in an earlier run: remind
            self._say_degraded_at_start()
        return self.state

    def view(self) -> "RecoveryLog":
        """A read-only view of this log as it is now (the writer goes on)."""
        v = RecoveryLog(self.dir, self.qm_name, self.dual_dir)
        v.state = copy.deepcopy(self.state)
        v.live = self.live
        v.say, v._loop, v._warned = self.say, self._loop, self._warned
        return v

    def chain(self) -> list[ExtentInfo]:
        """Extents holding live log data (not free), oldest first."""
        return sorted((e for e in self.state.extents if e.state in ("active", "full")),
                      key=lambda e: e.first_lsn)

    def verify_chain(self, needed_from: int = 0) -> list[ExtentInfo]:
        """Every extent the control file lists as live exists (in one copy at
        least), starts where it should, and the LSN ranges join up. Extents
        wholly below ``needed_from`` (the restart point) may be gone: archived,
        or deleted once ``harbormq log need`` said nothing needs them."""
        chain = self.chain()
        prev_end = None
        for e in chain:
            path = self.extent_path(e.number)
            present = self.extent_present(e)
            if e.end_lsn is not None and e.end_lsn <= needed_from and not present:
                continue
            if not present:
                raise LogMissing(f"log extent {path.name} (LSN {e.first_lsn}..) is missing"
                                 + (" in both copies" if self.dual_dir else ""),
                                 path=str(path), lsn=e.first_lsn,
                                 hint="restore it from the archive or a backup")
            if prev_end is not None and e.first_lsn != prev_end and \
                    not self.state.discarded_between(prev_end, e.first_lsn):
                raise LogCorrupt(f"log extent {path.name} starts at LSN {e.first_lsn} but "
                                 f"the previous extent ends at {prev_end}", path=str(path),
                                 lsn=e.first_lsn, offset=0)
            prev_end = e.end_lsn
        return chain

    def make_durable(self) -> None:
        """fdatasync the active extent before restart redo trusts what it reads:
        a process killed between write and fsync leaves records only in the page
        cache, and a store flushed from them must not outlive them in a power
        loss. (Full extents were forced when they were switched out.) Every
        healthy copy that is there; one that cannot be forced is given up."""
        e = self.state.active
        for which, directory in self.healthy_copies():
            path = directory / extent_file_name(e.number)
            if self.dual_dir is not None and not path.exists():
                continue        # reconcile_active re-creates it
            try:
                fd = os.open(path, os.O_RDWR)
                try:
                    os.fdatasync(fd)
                finally:
                    os.close(fd)
            except OSError as exc:
                if len(self.healthy_copies()) < 2:
                    raise
                self.degrade_now(which, exc, e.first_lsn)

    def active_path(self) -> Path:
        """The copy of the newest extent to read (the best one; see
        ``extent_copies``)."""
        return self.extent_copies(self.state.active)[0][1]

    def scan(self, from_lsn: int, *, repair_tail: bool = False) -> RecoveryScan:
        return RecoveryScan(self, from_lsn, repair_tail=repair_tail)

    def read_from(self, from_lsn: int, to_lsn: int | None = None) -> Iterator[LogRecord]:
        """Records in [from_lsn, to_lsn), for undo and tools; never repairs."""
        for rec in RecoveryScan(self, from_lsn, repair_tail=False):
            if to_lsn is not None and rec.lsn >= to_lsn:
                return
            yield rec

    def extent_of(self, lsn: int) -> ExtentInfo | None:
        for e in self.chain():
            if e.first_lsn <= lsn and (e.end_lsn is None or lsn < e.end_lsn):
                return e
        return None

    # -- writing -------------------------------------------------------------------

    def start_writing(self, end_lsn: int, loop: asyncio.AbstractEventLoop,
                      active_closed: bool = False) -> None:
        """Position the log at ``end_lsn`` (found by the restart scan) and start the
        writer thread. ``active_closed``: the active extent already ends with an
        EXTENT_END record (a crash mid switch), so switch before writing."""
        self._loop = loop
        self.live = True
        self.end_lsn = self.synced_lsn = end_lsn
        self._free_of = None     # restart (a conditional one) set states itself: count anew
        self._active = self.state.active
        self._active_limit = (self._active.first_lsn + self.extent_size - EXTENT_HEADER_SIZE
                              - EXTENT_END_LENGTH)
        self._writer = LogWriter(self)
        self._writer.open_extent(self._active.number, self._active.first_lsn)
        self._writer.start()
        if active_closed:
            self._switch(write_end_record=False)

    def append(self, rec: LogRecord) -> int:
        """Assign the next LSN to ``rec`` and queue it for writing; returns its LSN.
        Runs on the loop thread only."""
        if self.failed is not None:
            raise LogError(f"the log can no longer be written: {self.failed}")
        name = rec.object_name.encode()
        length = encoded_length(len(name), len(rec.payload))
        if self.end_lsn + length > self._active_limit:
            # (only a record that does not fit here can be too big for any extent)
            if length > self.extent_payload:
                raise LogError(f"a log record of {length} bytes cannot fit in an extent of "
                               f"{self.state.pages} pages", reason=2030)
            self._switch()
        rec.lsn = self.end_lsn
        rec.timestamp_ns = time.time_ns()
        rec.synced_lsn = self.synced_lsn
        data = encode(rec, name)
        self._writer.add_data(self._active.number,
                              EXTENT_HEADER_SIZE + rec.lsn - self._active.first_lsn, data,
                              rec.lsn + length)
        self._end_turn_later()
        self.end_lsn += length
        self.records_since_checkpoint += 1
        return rec.lsn

    def force(self, lsn_end: int | None = None) -> asyncio.Future:
        """A future that completes once every record below ``lsn_end`` (default: all
        appended so far) is on disk.

        The forces asked for in one turn of the event loop share one request to
        the writer, made at the end of the turn for the furthest LSN asked
        (group commit starts here: a burst of frames or calls handled in one
        turn costs one wake-up of the writer). Each caller gets a future of its
        own: a task cancelled while it awaits one cancels only that one, never
        the force another caller waits on (a STOMP frame held until its record
        is on disk, a channel's confirm)."""
        target = self.end_lsn if lsn_end is None else lsn_end
        fut = self._loop.create_future()
        if self.failed is not None:
            fut.set_exception(LogError(f"the log can no longer be written: {self.failed}"))
            return fut
        if target <= self.synced_lsn:
            fut.set_result(self.synced_lsn)
            return fut
        pending = self._turn_force
        if pending is not None:
            if target > pending[0]:
                pending[0] = target
            pending[1].append(fut)
            return fut
        self._turn_force = [target, [fut]]
        self._end_turn_later()
        return fut

    def _end_turn_later(self) -> None:
        if not self._turn_end_scheduled:
            self._turn_end_scheduled = True
            self._loop.call_soon(self._end_turn)

    def _end_turn(self) -> None:
        """The end of a loop turn that appended or forced: its records and its
        force reach the writer in one hand-off (one lock, at most one wake-up),
        its forces' futures wait for the writer's answer."""
        self._turn_end_scheduled = False
        pending, self._turn_force = self._turn_force, None
        force_to = 0
        if pending is not None:
            target, futs = pending
            if self.failed is not None or self._writer is None:
                _fail_all(futs, LogError(f"the log can no longer be written: "
                                         f"{self.failed or 'it is closed'}"))
            elif target <= self.synced_lsn:
                _complete_all(futs, self.synced_lsn)
            else:
                heapq.heappush(self._waiters, (target, next(self._seq), futs))
                force_to = target
        if self._writer is not None:
            self._writer.hand_over(force_to)

    def _on_synced(self, lsn: int) -> None:  # loop thread
        self.synced_lsn = max(self.synced_lsn, lsn)
        while self._waiters and self._waiters[0][0] <= self.synced_lsn:
            _, _, futs = heapq.heappop(self._waiters)
            _complete_all(futs, self.synced_lsn)

    def _on_failed(self, exc: BaseException, control_futures=()) -> None:  # loop thread
        """The writer thread met an error (a full disk, EIO) and ended: every
        force and control-file update still waiting fails, and ``on_failed`` is
        told once (the queue manager stops: restart recovers from the disk)."""
        first = self.failed is None
        self.failed = exc
        error = LogError(f"writing the log failed: {exc}")
        while self._waiters:
            _, _, futs = heapq.heappop(self._waiters)
            _fail_all(futs, error)
        for fut in control_futures:
            if not fut.done():
                fut.set_exception(error)
        if first and self.on_failed is not None:
            self.on_failed(exc)

    def _on_degraded(self, copy: str, exc: BaseException, whole_below: int) -> None:
        """(loop thread) The writer gave up one copy of a dual log (a write or an
        fsync failed there); the control file on the other already says so."""
        self.state.degraded, self.state.degraded_lsn = copy, whole_below
        self._say_degraded(copy, exc)

    # -- extent switch ---------------------------------------------------------------

    def _switch(self, *, write_end_record: bool = True) -> None:
        st = self.state
        old = self._active
        # choose first: LogFull must leave the log exactly as it was (no
        # EXTENT_END in an extent that stays active)
        nxt, reuse = self._choose_next_extent()
        if write_end_record:
            end = LogRecord(RecordType.EXTENT_END)
            end.lsn = self.end_lsn
            end.timestamp_ns = time.time_ns()
            end.synced_lsn = self.synced_lsn
            data = encode(end)
            self._writer.add_data(old.number, EXTENT_HEADER_SIZE + end.lsn - old.first_lsn,
                                  data, end.lsn + len(data))
            self.end_lsn += len(data)
        self._set_extent_state(old, "full")
        old.end_lsn = self.end_lsn
        nxt.first_lsn = self.end_lsn
        nxt.end_lsn = None
        nxt.cut = False
        self._set_extent_state(nxt, "active")
        self._active = nxt
        self._active_limit = (nxt.first_lsn + self.extent_size - EXTENT_HEADER_SIZE
                              - EXTENT_END_LENGTH)
        st.sequence += 1
        self._writer.add_switch(nxt.number, nxt.first_lsn, reuse, copy.deepcopy(st))
        if self.on_switch is not None:
            self._loop.call_soon(self.on_switch, nxt.number)

    def _choose_next_extent(self) -> tuple[ExtentInfo, bool]:
        st = self.state
        if st.log_type == "circular":
            free = sorted((e for e in st.extents if e.state == "free"),
                          key=lambda e: (e.first_lsn, e.number))
            if free:
                return free[0], True
            if len(st.extents) >= st.primary + st.secondary:
                raise self._full()
        info = ExtentInfo(number=st.next_extent_number, first_lsn=0, state="free")
        st.next_extent_number += 1
        self._free_extents()            # counted before the new one joins
        st.extents.append(info)
        self._free_count += 1
        return info, False

    def _full(self) -> LogFull:
        """The refusal of a circular log with no extent left, naming what pins it."""
        pin = self.describe_pin() if self.describe_pin is not None else ""
        exc = LogFull(f"the circular log is full: all {len(self.state.extents)} extents are "
                      f"needed for restart from LSN {self.state.restart_lsn}"
                      + (f": {pin}" if pin else ""),
                      hint="what pins the restart point must end (a unit of work committed "
                      "or backed out) or be written (a store flush), or the queue manager "
                      "needs more log space (--log-primary, --log-secondary, "
                      "--log-file-pages)")
        if self.on_full is not None:
            self.on_full(exc)
        return exc

    def available_extents(self) -> int:
        """Extents a switch could still move to without freeing anything."""
        st = self.state
        if st.log_type == "linear":
            return 1 << 30
        free = self._free_count if self._free_of is st.extents else self._free_extents()
        return free + (st.primary + st.secondary - len(st.extents))

    def _free_extents(self) -> int:
        """How many extents are free: counted once per extent list (a restart,
        a control file read, a list rebuilt), then kept by ``_set_extent_state``."""
        extents = self.state.extents
        if self._free_of is not extents:
            self._free_count = sum(1 for e in extents if e.state == "free")
            self._free_of = extents
        return self._free_count

    def _set_extent_state(self, extent: ExtentInfo, state: str) -> None:
        """Change an extent's state (the one place the writing log does) and
        keep the count of free extents with it."""
        self._free_extents()
        self._free_count += (state == "free") - (extent.state == "free")
        extent.state = state

    def set_checkpoint(self, checkpoint_lsn: int, restart_lsn: int,
                       media_lsn: int = 0) -> asyncio.Future:
        """Record a completed checkpoint; frees circular extents wholly before the
        restart point. Written to the control file in order with the log; the
        future completes when that control file is on disk."""
        st = self.state
        st.checkpoint_lsn = checkpoint_lsn
        st.restart_lsn = restart_lsn
        st.media_lsn = media_lsn
        if st.log_type == "circular":
            for e in st.extents:
                if e.state == "full" and e.end_lsn <= restart_lsn:
                    self._set_extent_state(e, "free")
        self.records_before_checkpoint += self.records_since_checkpoint
        self.records_since_checkpoint = 0
        st.sequence += 1
        fut = self._loop.create_future()
        if self.failed is not None:      # the writer is gone: nothing would answer
            fut.set_exception(LogError(f"the log can no longer be written: {self.failed}"))
            return fut
        self._writer.add_control(copy.deepcopy(st), fut)
        return fut

    def switch_now(self) -> None:
        """Close the active extent now (ARCHIVE LOG); runs on the loop thread."""
        if self.failed is not None:
            raise LogError(f"the log can no longer be written: {self.failed}")
        self._switch()

    def update_control(self) -> asyncio.Future:
        """Write the control file as it is now (after an archive or delete
        changed an extent's entry); the future completes once it is durable."""
        st = self.state
        st.sequence += 1
        fut = self._loop.create_future()
        if self.failed is not None:
            fut.set_exception(LogError(f"the log can no longer be written: {self.failed}"))
            return fut
        self._writer.add_control(copy.deepcopy(st), fut)
        return fut

    def closed_extents(self) -> list[ExtentInfo]:
        """A linear log's closed extents still in the log directory, oldest first."""
        return [e for e in self.chain() if e.state == "full" and not e.deleted]

    def deletable(self, *, archived_only: bool) -> list[ExtentInfo]:
        """Closed extents neither restart nor media recovery needs (wholly below
        the restart and media LSNs on disk), oldest first and without a hole:
        extents go in the order they were written (the iSeries rule)."""
        st = self.state
        needed_from = min(st.restart_lsn, st.media_lsn) if st.media_lsn else st.restart_lsn
        out = []
        for e in self.closed_extents():
            if e.end_lsn > needed_from or (archived_only and not e.archived):
                break
            out.append(e)
        return out

    def forget_deleted(self, keep: int) -> None:
        """Keep the newest ``keep`` deleted entries as the archive inventory
        (0: all of them)."""
        gone = [e for e in self.chain() if e.deleted]
        if keep and len(gone) > keep:
            drop = {e.number for e in gone[:len(gone) - keep]}
            self.state.extents = [e for e in self.state.extents if e.number not in drop]

    def recall_missing(self, from_lsn: int, archive_paths: list, say) -> int:
        """Fetch back from the archive every extent from ``from_lsn`` on that the
        control file lists but the log directory lacks (restart, recreate and
        restore read them then like any other); returns how many. LogMissing
        names the first that no archive holds (with a good hash)."""
        from .archive import recall
        n = 0
        for e in self.chain():
            if e.end_lsn is not None and e.end_lsn <= from_lsn:
                continue
            if self.extent_present(e):
                continue
            # into the first healthy copy; the other reads fall back to it
            recall(list(archive_paths), self.qm_name, e.number, e.first_lsn,
                   self.healthy_copies()[0][1], say)
            e.deleted = False
            n += 1
        return n

    def remove_extent_files(self, numbers: list[int]) -> None:
        """Delete these extents' files from every copy (log management)."""
        for _, directory in self.copies:
            for n in numbers:
                (directory / extent_file_name(n)).unlink(missing_ok=True)
            if numbers and directory.is_dir():
                fsync_dir(directory)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.stop()
            self._writer = None



def _complete_all(futs: list[asyncio.Future], synced_lsn: int) -> None:
    """The forces of one turn, done (a caller that gave up on its own is skipped)."""
    for fut in futs:
        if not fut.done():
            fut.set_result(synced_lsn)


def _fail_all(futs: list[asyncio.Future], error: BaseException) -> None:
    for fut in futs:
        if not fut.done():
            fut.set_exception(error)
