"""The recovery log of one queue manager: extents, LSN assignment, group commit.

Threads: ``append`` and ``force`` run on the queue manager's event loop (the one
owner of state); a single log-writer thread performs every write, fsync,
extent initialisation and control-file update, in the order the loop queued
them. An operation's ``force`` future completes after the fsync that covers its
records; all records queued while one fsync runs share the next one (group
commit).

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
"""

from __future__ import annotations

import asyncio
import copy
import heapq
import itertools
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from ..crashpoints import crash_point
from ..errors import LogCorrupt, LogError, LogFull, LogMissing
from ..fsutil import fsync_dir, make_dirs
from .control import ControlFile, ControlState, ExtentInfo
from .reader import ExtentEnd, ExtentReader, keep_torn_tail
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

MIN_PAGES, MAX_PAGES = 32, 65535
EXTENT_END_LENGTH = encoded_length(0, 0)
#: wake the writer once this many bytes wait, even if nobody forces yet
WAKE_BYTES = 256 * 1024
ZERO_CHUNK = bytes(1 << 20)


@dataclass
class LogSettings:
    log_type: str = "circular"
    pages: int = 4096
    primary: int = 3
    secondary: int = 2
    checkpoint_records: int = 10_000

    def validate(self) -> None:
        from ..errors import ConfigError
        if self.log_type not in ("circular", "linear"):
            raise ConfigError(f"log type must be 'circular' or 'linear', not {self.log_type!r}")
        if not MIN_PAGES <= self.pages <= MAX_PAGES:
            raise ConfigError(f"--log-file-pages {self.pages} is out of range: it must be "
                              f"between {MIN_PAGES} and {MAX_PAGES} (4 KiB pages)")
        if self.primary < 2 or self.primary > 254:
            raise ConfigError(f"--log-primary {self.primary} is out of range (2..254)")
        if self.secondary < 1 or self.primary + self.secondary > 255:
            raise ConfigError(f"--log-secondary {self.secondary} is out of range "
                              "(1.., primary + secondary <= 255)")
        if self.checkpoint_records < 100:
            raise ConfigError("log.checkpoint_records must be at least 100")


class RecoveryScan:
    """Iterates the log from an LSN to its end, across extents, and records how
    the log ended (``end_lsn``, ``end`` of the newest extent, torn copy)."""

    def __init__(self, log: "RecoveryLog", from_lsn: int, *, repair_tail: bool):
        self.log = log
        self.from_lsn = from_lsn
        self.repair_tail = repair_tail
        self.end_lsn = from_lsn
        self.end: ExtentEnd | None = None
        self.torn_copy: Path | None = None
        self.records_read = 0
        self.bytes_read = 0

    def __iter__(self) -> Iterator[LogRecord]:
        chain = self.log.chain()
        start_index = 0
        for i, e in enumerate(chain):
            if e.end_lsn is not None and e.end_lsn <= self.from_lsn:
                start_index = i + 1
        if start_index >= len(chain):
            raise LogMissing(f"LSN {self.from_lsn} is not in any extent of the log",
                             lsn=self.from_lsn)
        for i in range(start_index, len(chain)):
            e = chain[i]
            newest = e.state == "active"
            path = self.log.extent_path(e.number)
            reader = ExtentReader(path, newest=newest)
            if reader.header.first_lsn != e.first_lsn:
                raise LogCorrupt(f"log extent {path.name} starts at LSN "
                                 f"{reader.header.first_lsn}, the control file says "
                                 f"{e.first_lsn}", path=str(path), offset=0)
            if i == start_index and self.from_lsn < e.first_lsn:
                raise LogMissing(f"LSN {self.from_lsn} is older than the oldest extent kept "
                                 f"({path.name} starts at {e.first_lsn})", lsn=self.from_lsn,
                                 path=str(path))
            for rec in reader.records(max(self.from_lsn, e.first_lsn)):
                self.records_read += 1
                self.bytes_read += rec.length
                yield rec
            end = reader.end
            if not newest and (end.how != "extent_end" or end.lsn != e.end_lsn):
                raise LogCorrupt(f"log extent {path.name} ends at LSN {end.lsn}, the control "
                                 f"file says {e.end_lsn}", path=str(path), lsn=end.lsn,
                                 offset=end.offset)
            self.end = end
            self.end_lsn = end.lsn
            if newest and end.how == "torn" and self.repair_tail:
                self.torn_copy = keep_torn_tail(path, end)


class RecoveryLog:
    """The log of one queue manager, opened for restart and then for writing."""

    def __init__(self, log_dir: Path, qm_name: str):
        self.dir = Path(log_dir)
        self.qm_name = qm_name
        self.control = ControlFile(self.dir)
        self.state: ControlState | None = None
        self.end_lsn = 0
        self.synced_lsn = 0
        self.records_since_checkpoint = 0
        #: called on the loop after every extent switch, with the new extent number
        self.on_switch: Callable[[int], None] | None = None
        self._writer: _Writer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: [target LSN, future] of the force asked for in this loop turn
        self._turn_force: list | None = None
        self._waiters: list = []
        self._seq = itertools.count()
        self._active: ExtentInfo | None = None
        self._active_limit = 0      # LSN past which the active extent has no room
        self.failed: BaseException | None = None
        #: told (on the loop) when writing the log fails for good
        self.on_failed: Callable[[BaseException], None] | None = None

    # -- creation -----------------------------------------------------------------

    @classmethod
    def create(cls, log_dir: Path, qm_name: str, settings: LogSettings) -> "RecoveryLog":
        settings.validate()
        make_dirs(log_dir)
        log = cls(log_dir, qm_name)
        st = ControlState(qm_name=qm_name, log_type=settings.log_type, pages=settings.pages,
                          primary=settings.primary, secondary=settings.secondary)
        log.state = st
        count = settings.primary if settings.log_type == "circular" else 1
        for n in range(count):
            log._preallocate(n)
            st.extents.append(ExtentInfo(number=n, first_lsn=0, end_lsn=None,
                                         state="active" if n == 0 else "free"))
        log._write_header(0, first_lsn=0)
        st.next_extent_number = count
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

    def extent_path(self, number: int) -> Path:
        return self.dir / extent_file_name(number)

    def _preallocate(self, number: int) -> None:
        path = self.extent_path(number)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.posix_fallocate(fd, 0, self.extent_size)
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(self.dir)

    def _write_header(self, number: int, first_lsn: int) -> None:
        path = self.extent_path(number)
        head = ExtentHeader(number, first_lsn, time.time_ns(), self.qm_name,
                            self.state.pages).encode()
        fd = os.open(path, os.O_RDWR)
        try:
            os.pwrite(fd, head, 0)
            os.fdatasync(fd)
        finally:
            os.close(fd)

    # -- opening for restart ---------------------------------------------------------

    def open(self, *, repair: bool = True) -> ControlState:
        """Phase 1 of restart: read and reconcile the control file."""
        self.state = self.control.load(repair=repair)
        return self.state

    def chain(self) -> list[ExtentInfo]:
        """Extents holding live log data (not free), oldest first."""
        return sorted((e for e in self.state.extents if e.state in ("active", "full")),
                      key=lambda e: e.first_lsn)

    def verify_chain(self, needed_from: int = 0) -> list[ExtentInfo]:
        """Every extent the control file lists as live exists, starts where it
        should, and the LSN ranges join up. Extents wholly below ``needed_from``
        (the restart point) may be gone: archived, or deleted once ``harbormq
        log need`` said nothing needs them."""
        chain = self.chain()
        prev_end = None
        for e in chain:
            path = self.extent_path(e.number)
            if e.end_lsn is not None and e.end_lsn <= needed_from and not path.exists():
                continue
            if not path.exists():
                raise LogMissing(f"log extent {path.name} (LSN {e.first_lsn}..) is missing",
                                 path=str(path), lsn=e.first_lsn,
                                 hint="restore it from the archive or a backup")
            if prev_end is not None and e.first_lsn != prev_end:
                raise LogCorrupt(f"log extent {path.name} starts at LSN {e.first_lsn} but "
                                 f"the previous extent ends at {prev_end}", path=str(path),
                                 lsn=e.first_lsn, offset=0)
            prev_end = e.end_lsn
        return chain

    def make_durable(self) -> None:
        """fdatasync the active extent before restart redo trusts what it reads:
        a process killed between write and fsync leaves records only in the page
        cache, and a store flushed from them must not outlive them in a power
        loss. (Full extents were forced when they were switched out.)"""
        fd = os.open(self.extent_path(self.state.active.number), os.O_RDWR)
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)

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
        self.end_lsn = self.synced_lsn = end_lsn
        self._active = self.state.active
        self._active_limit = (self._active.first_lsn + self.extent_size - EXTENT_HEADER_SIZE
                              - EXTENT_END_LENGTH)
        self._writer = _Writer(self)
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
        if length > self.extent_payload:
            raise LogError(f"a log record of {length} bytes cannot fit in an extent of "
                           f"{self.state.pages} pages", reason=2030)
        if self.end_lsn + length > self._active_limit:
            self._switch()
        rec.lsn = self.end_lsn
        rec.timestamp_ns = time.time_ns()
        rec.synced_lsn = self.synced_lsn
        data = encode(rec, name)
        self._writer.add_data(self._active.number,
                              EXTENT_HEADER_SIZE + rec.lsn - self._active.first_lsn, data,
                              rec.lsn + length)
        self.end_lsn += length
        self.records_since_checkpoint += 1
        return rec.lsn

    def force(self, lsn_end: int | None = None) -> asyncio.Future:
        """A future that completes once every record below ``lsn_end`` (default: all
        appended so far) is on disk.

        The forces asked for in one turn of the event loop share one future and
        one request to the writer, made at the end of the turn for the furthest
        LSN asked (group commit starts here: a burst of frames or calls handled
        in one turn costs one wake-up of the writer)."""
        target = self.end_lsn if lsn_end is None else lsn_end
        if self.failed is not None:
            fut = self._loop.create_future()
            fut.set_exception(LogError(f"the log can no longer be written: {self.failed}"))
            return fut
        if target <= self.synced_lsn:
            fut = self._loop.create_future()
            fut.set_result(self.synced_lsn)
            return fut
        pending = self._turn_force
        if pending is not None:
            pending[0] = max(pending[0], target)
            return pending[1]
        fut = self._loop.create_future()
        self._turn_force = [target, fut]
        self._loop.call_soon(self._request_turn_force)
        return fut

    def _request_turn_force(self) -> None:
        target, fut = self._turn_force
        self._turn_force = None
        if self.failed is not None or self._writer is None:
            if not fut.done():
                fut.set_exception(LogError(f"the log can no longer be written: "
                                           f"{self.failed or 'it is closed'}"))
        elif target <= self.synced_lsn:
            if not fut.done():
                fut.set_result(self.synced_lsn)
        else:
            heapq.heappush(self._waiters, (target, next(self._seq), fut))
            self._writer.request_force(target)

    def _on_synced(self, lsn: int) -> None:  # loop thread
        self.synced_lsn = max(self.synced_lsn, lsn)
        while self._waiters and self._waiters[0][0] <= self.synced_lsn:
            _, _, fut = heapq.heappop(self._waiters)
            if not fut.done():
                fut.set_result(self.synced_lsn)

    def _on_failed(self, exc: BaseException, control_futures=()) -> None:  # loop thread
        """The writer thread met an error (a full disk, EIO) and ended: every
        force and control-file update still waiting fails, and ``on_failed`` is
        told once (the queue manager stops: restart recovers from the disk)."""
        first = self.failed is None
        self.failed = exc
        error = LogError(f"writing the log failed: {exc}")
        while self._waiters:
            _, _, fut = heapq.heappop(self._waiters)
            if not fut.done():
                fut.set_exception(error)
        for fut in control_futures:
            if not fut.done():
                fut.set_exception(error)
        if first and self.on_failed is not None:
            self.on_failed(exc)

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
        old.state = "full"
        old.end_lsn = self.end_lsn
        nxt.first_lsn = self.end_lsn
        nxt.end_lsn = None
        nxt.state = "active"
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
                raise LogFull(
                    f"the circular log is full: all {len(st.extents)} extents are needed "
                    "for restart", hint="long-running units of work pin the log; commit or "
                    "back them out, or create the queue manager with more log space")
        info = ExtentInfo(number=st.next_extent_number, first_lsn=0, state="free")
        st.next_extent_number += 1
        st.extents.append(info)
        return info, False

    def available_extents(self) -> int:
        """Extents a switch could still move to without freeing anything."""
        st = self.state
        free = sum(1 for e in st.extents if e.state == "free")
        if st.log_type == "linear":
            return 1 << 30
        return free + (st.primary + st.secondary - len(st.extents))

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
                    e.state = "free"
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
            if self.extent_path(e.number).exists():
                continue
            recall(list(archive_paths), self.qm_name, e.number, e.first_lsn, self.dir, say)
            e.deleted = False
            n += 1
        return n

    def close(self) -> None:
        if self._writer is not None:
            self._writer.stop()
            self._writer = None


class _Writer(threading.Thread):
    """The log-writer thread. Consumes an ordered list of operations:
    ("data", extent, offset, [chunks]), ("switch", ...), ("control", state)."""

    def __init__(self, log: RecoveryLog):
        super().__init__(name=f"harbormq-log-{log.qm_name}", daemon=True)
        self.log = log
        self.cond = threading.Condition()
        self.ops: list[list] = []
        self.pending_bytes = 0
        self.queued_lsn = log.end_lsn   # LSN past everything queued
        self.force_target = 0
        self.stopping = False
        self.fds: dict[int, int] = {}
        self.current: int | None = None
        # loop-thread side: record bytes not yet handed to the thread
        self._staged: list[bytes] = []
        self._staged_extent = self._staged_offset = self._staged_len = self._staged_end = 0
        self._hand_over_scheduled = False

    # loop-thread side -------------------------------------------------------------

    def add_data(self, extent: int, offset: int, data: bytes, end_lsn: int) -> None:
        """Stage a record's bytes. Records appended in one turn of the event loop
        reach the writer together, at the end of the turn or before anything that
        must follow them (a force, a switch, a control-file update): one lock
        and one op per turn instead of one per record."""
        staged = self._staged
        if staged and (extent != self._staged_extent or
                       offset != self._staged_offset + self._staged_len):
            self.hand_over()
        if not staged:
            self._staged_extent, self._staged_offset, self._staged_len = extent, offset, 0
            if not self._hand_over_scheduled:
                self._hand_over_scheduled = True
                self.log._loop.call_soon(self._hand_over_at_turn_end)
        staged.append(data)
        self._staged_len += len(data)
        self._staged_end = end_lsn
        if self._staged_len >= WAKE_BYTES:
            self.hand_over()

    def _hand_over_at_turn_end(self) -> None:
        self._hand_over_scheduled = False
        self.hand_over()

    def hand_over(self) -> None:
        """Queue the staged bytes for the writer thread (loop thread)."""
        if not self._staged:
            return
        chunks, self._staged = self._staged, []
        nbytes = self._staged_len
        with self.cond:
            last = self.ops[-1] if self.ops else None
            if last is not None and last[0] == "data" and last[1] == self._staged_extent and \
                    last[2] + last[4] == self._staged_offset:
                last[3].extend(chunks)
                last[4] += nbytes
            else:
                self.ops.append(["data", self._staged_extent, self._staged_offset, chunks,
                                 nbytes])
            self.pending_bytes += nbytes
            self.queued_lsn = self._staged_end
            if self.pending_bytes >= WAKE_BYTES:
                self.cond.notify()

    def add_switch(self, number: int, first_lsn: int, reuse: bool, state: ControlState) -> None:
        self.hand_over()
        with self.cond:
            self.ops.append(["switch", number, first_lsn, reuse])
            self.ops.append(["control", state, None])
            self.cond.notify()

    def add_control(self, state: ControlState, done: asyncio.Future | None = None) -> None:
        self.hand_over()
        with self.cond:
            self.ops.append(["control", state, done])
            self.cond.notify()

    def request_force(self, lsn: int) -> None:
        self.hand_over()
        with self.cond:
            if lsn > self.force_target:
                self.force_target = lsn
                self.cond.notify()

    def stop(self) -> None:
        self.hand_over()
        with self.cond:
            self.stopping = True
            self.cond.notify()
        self.join()
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()

    # writer-thread side -----------------------------------------------------------

    def open_extent(self, number: int, first_lsn: int) -> None:
        self.fds[number] = os.open(self.log.extent_path(number), os.O_RDWR)
        self.current = number

    def run(self) -> None:
        synced = self.log.synced_lsn
        ops: list[list] = []
        try:
            while True:
                with self.cond:
                    while not self.ops and not self.stopping and self.force_target <= synced:
                        self.cond.wait()
                    if self.stopping and not self.ops and self.force_target <= synced:
                        return
                    ops, self.ops = self.ops, []
                    self.pending_bytes = 0
                    upto = self.queued_lsn
                    must_sync = self.force_target > synced or self.stopping
                for op in ops:
                    kind = op[0]
                    if kind == "data":
                        _pwrite_all(self.fds[op[1]], b"".join(op[3]), op[2])
                    elif kind == "switch":
                        self._switch(op[1], op[2], op[3])
                    else:
                        self.log.control.write(op[1])
                        if op[2] is not None:
                            self.log._loop.call_soon_threadsafe(_resolve, op[2])
                if must_sync or any(op[0] != "data" for op in ops):
                    crash_point("log.after_write_before_fsync")
                    os.fdatasync(self.fds[self.current])
                    synced = upto
                    crash_point("log.after_fsync_before_ack")
                    self.log._loop.call_soon_threadsafe(self.log._on_synced, upto)
        except BaseException as exc:  # disk full, EIO: the log is unusable
            with self.cond:           # whatever waits for this thread must hear of it
                ops = ops + self.ops
                self.ops = []
            waiting = [op[2] for op in ops if op[0] == "control" and op[2] is not None]
            try:
                self.log._loop.call_soon_threadsafe(self.log._on_failed, exc, waiting)
            except RuntimeError:    # the loop is closed: nobody is left to tell
                return

    def _switch(self, number: int, first_lsn: int, reuse: bool) -> None:
        old = self.current
        os.fdatasync(self.fds[old])
        os.close(self.fds.pop(old))
        path = self.log.extent_path(number)
        size = self.log.extent_size
        if reuse and path.exists():
            fd = os.open(path, os.O_RDWR)
            for off in range(0, size, len(ZERO_CHUNK)):
                _pwrite_all(fd, ZERO_CHUNK[:min(len(ZERO_CHUNK), size - off)], off)
        else:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            os.posix_fallocate(fd, 0, size)
            fsync_dir(path.parent)
        head = ExtentHeader(number, first_lsn, time.time_ns(), self.log.qm_name,
                            self.log.state.pages).encode()
        _pwrite_all(fd, head, 0)
        os.fsync(fd)
        crash_point("extent.mid_switch")
        self.fds[number] = fd
        self.current = number


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    """pwrite may write less than asked (a signal, a full disk): finish or raise."""
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        if n == 0:
            raise OSError(f"pwrite wrote nothing at offset {offset}")
        view, offset = view[n:], offset + n


def _resolve(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)
