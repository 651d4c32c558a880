"""The log-writer thread of one queue manager's log, and group commit.

One thread per open log performs every write, fdatasync, extent
initialisation and control-file update, in the order the loop queued them
(``RecoveryLog`` in ``manager.py`` queues them: it assigns the LSNs, asks for
forces and decides switches and control-file contents). Records appended in
one turn of the event loop reach the thread as one operation; every record
queued while one fdatasync runs shares the next (group commit). A dual log's
two copies are written alike and forced at once; a copy that fails is given
up, the last one failing ends the thread (the loop is told, HMQ6709E).

Not here: LSNs, forces' futures, the choice of the next extent (``manager.py``);
which copy a read uses (``copies.py``).
"""

from __future__ import annotations

import copy
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from ..crashpoints import crash_point
from ..fsutil import fsync_dir, pwrite_all
from .control import ControlState
from .records import ExtentHeader, extent_file_name

if TYPE_CHECKING:
    import asyncio

    from .manager import RecoveryLog

#: wake the writer once this many bytes wait, even if nobody forces yet
WAKE_BYTES = 256 * 1024
ZERO_CHUNK = bytes(1 << 20)


class Doorbell:
    """How the loop wakes the writer thread: an eventfd. Ringing is one write
    syscall, and none while the thread is awake; waiting blocks in a read with
    the GIL released. (A ``threading.Condition`` allocates a lock per wait and
    runs Python on both sides of every wake-up: ``benchmarks/bench_handoff.py``
    measures the two.) One thread waits; the caller's lock guards the flag."""

    __slots__ = ("_fd", "_sleeping")

    def __init__(self) -> None:
        #: made by the first wait: a writer that never runs holds no descriptor
        self._fd: int | None = None
        self._sleeping = False

    def ring(self) -> None:
        """(the lock held) Wake the thread if it sleeps or is about to."""
        if self._sleeping:
            self._sleeping = False
            os.eventfd_write(self._fd, 1)

    def wait(self, lock: threading.Lock) -> None:
        """(the lock held) Sleep until rung; returns with ``lock`` held again. A
        ring between releasing the lock and the read is kept by the eventfd's
        counter, so none is lost; the caller checks its condition again."""
        if self._fd is None:
            self._fd = os.eventfd(0, os.EFD_CLOEXEC)
        self._sleeping = True
        lock.release()
        try:
            os.eventfd_read(self._fd)
        finally:
            lock.acquire()

    def close(self) -> None:
        """(the thread ended)"""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class LogWriter(threading.Thread):
    """The log-writer thread. Consumes an ordered list of operations:
    ("data", extent, offset, [chunks]), ("switch", ...), ("control", state)."""

    def __init__(self, log: RecoveryLog):
        super().__init__(name=f"harbormq-log-{log.qm_name}", daemon=True)
        self.log = log
        #: guards ops, pending_bytes, queued_lsn, force_target and stopping
        self.lock = threading.Lock()
        self.bell = Doorbell()
        self.ops: list[list] = []
        self.pending_bytes = 0
        self.queued_lsn = log.end_lsn   # LSN past everything queued
        self.force_target = 0
        self.stopping = False
        #: extent number -> {copy: descriptor}, one per healthy copy
        self.fds: dict[int, dict[str, int]] = {}
        self.current: int | None = None
        #: (copy, directory) still written: both of a dual log until one fails
        self.live: list[tuple[str, Path]] = log.healthy_copies()
        #: the control file as last handed to the writer (a lost copy is recorded in it)
        self.state = copy.deepcopy(log.state)
        self.synced = log.synced_lsn
        # a dual log forces its two copies at once: the second on this helper
        self._mirror = ThreadPoolExecutor(1, thread_name_prefix=f"harbormq-log2-{log.qm_name}") \
            if len(self.live) > 1 else None
        # loop-thread side: record bytes not yet handed to the thread
        self._staged: list[bytes] = []
        self._staged_extent = self._staged_offset = self._staged_len = self._staged_end = 0

    # loop-thread side -------------------------------------------------------------

    def add_data(self, extent: int, offset: int, data: bytes, end_lsn: int) -> None:
        """Stage a record's bytes. The records appended in one turn of the event
        loop reach the writer together, with the turn's force, when the log ends
        the turn (``hand_over``), or before anything that must follow them (a
        switch, a control-file update): one lock and one wake-up per turn instead
        of one per record. The caller makes sure ``hand_over`` follows."""
        staged = self._staged
        if staged and (extent != self._staged_extent or
                       offset != self._staged_offset + self._staged_len):
            self.hand_over()
        if not staged:
            self._staged_extent, self._staged_offset, self._staged_len = extent, offset, 0
        staged.append(data)
        self._staged_len += len(data)
        self._staged_end = end_lsn
        if self._staged_len >= WAKE_BYTES:
            self.hand_over()

    def hand_over(self, force_to: int = 0) -> None:
        """Queue the staged bytes for the writer thread and, when ``force_to`` is
        past what it was asked before, ask it to force up to there: both under
        one lock, with at most one wake-up (loop thread)."""
        if self._staged:
            chunks, self._staged = self._staged, []
            nbytes = self._staged_len
            extent, offset = self._staged_extent, self._staged_offset
        else:
            if force_to <= self.force_target:
                return
            chunks, nbytes = None, 0
        with self.lock:
            if chunks is not None:
                last = self.ops[-1] if self.ops else None
                if last is not None and last[0] == "data" and last[1] == extent and \
                        last[2] + last[4] == offset:
                    last[3].extend(chunks)
                    last[4] += nbytes
                else:
                    self.ops.append(["data", extent, offset, chunks, nbytes])
                self.pending_bytes += nbytes
                self.queued_lsn = self._staged_end
            if force_to > self.force_target:
                self.force_target = force_to
                self.bell.ring()
            elif self.pending_bytes >= WAKE_BYTES:
                self.bell.ring()

    def add_switch(self, number: int, first_lsn: int, reuse: bool, state: ControlState) -> None:
        self.hand_over()
        with self.lock:
            self.ops.append(["switch", number, first_lsn, reuse])
            self.ops.append(["control", state, None])
            self.bell.ring()

    def add_control(self, state: ControlState, done: asyncio.Future | None = None) -> None:
        self.hand_over()
        with self.lock:
            self.ops.append(["control", state, done])
            self.bell.ring()

    def stop(self) -> None:
        self.hand_over()
        with self.lock:
            self.stopping = True
            self.bell.ring()
        self.join()
        self.bell.close()
        for fds in self.fds.values():
            for fd in fds.values():
                os.close(fd)
        self.fds.clear()
        if self._mirror is not None:
            self._mirror.shutdown()

    # writer-thread side -----------------------------------------------------------

    def open_extent(self, number: int, first_lsn: int) -> None:
        """(before the thread starts) Open the active extent in every healthy
        copy; a copy that cannot be opened is given up."""
        fds = self.fds[number] = {}
        self.current = number
        for c, directory in list(self.live):
            try:
                fds[c] = os.open(directory / extent_file_name(number), os.O_RDWR)
            except OSError as exc:
                if len(self.live) < 2:
                    raise
                self.live = [x for x in self.live if x[0] != c]
                self.log.degrade_now(c, exc, first_lsn)
                self.state = copy.deepcopy(self.log.state)

    def _lost(self, c: str, exc: OSError) -> None:
        """A write, an fsync or a file operation failed on copy ``c``. The last
        copy: re-raised (the log cannot be written, HMQ6709E). Otherwise the
        copy is given up: its descriptors closed, the control file saying so
        written to the other copy (before anything more is acknowledged),
        the loop told (HMQ7490W)."""
        if len(self.live) < 2 or c not in (x[0] for x in self.live):
            raise exc
        self.live = [x for x in self.live if x[0] != c]
        for fds in self.fds.values():
            fd = fds.pop(c, None)
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.log.control.degrade(self.state, c, self.synced)
        self.log._loop.call_soon_threadsafe(self.log._on_degraded, c, exc, self.synced)

    def _sync(self, number: int) -> None:
        """fdatasync extent ``number`` in every healthy copy (both at once)."""
        fds = list(self.fds[number].items())
        if len(fds) == 1:
            try:
                os.fdatasync(fds[0][1])
            except OSError as exc:
                self._lost(fds[0][0], exc)      # the only copy: raises
            return
        second = self._mirror.submit(os.fdatasync, fds[1][1])
        failed = []
        try:
            os.fdatasync(fds[0][1])
        except OSError as exc:
            failed.append((fds[0][0], exc))
        try:
            second.result()
        except OSError as exc:
            failed.insert(0, (fds[1][0], exc))
        for c, exc in failed:
            self._lost(c, exc)

    def _write_control(self, state: ControlState) -> None:
        if self.state.degraded:
            state.degraded, state.degraded_lsn = self.state.degraded, self.state.degraded_lsn
        self.state = state
        self.log.control.write(state, on_copy_error=self._lost)

    def run(self) -> None:
        ops: list[list] = []
        try:
            while True:
                with self.lock:
                    while not self.ops and not self.stopping and \
                            self.force_target <= self.synced:
                        self.bell.wait(self.lock)
                    if self.stopping and not self.ops and self.force_target <= self.synced:
                        return
                    ops, self.ops = self.ops, []
                    self.pending_bytes = 0
                    upto = self.queued_lsn
                    must_sync = self.force_target > self.synced or self.stopping
                started = time.perf_counter()     # a force's duration: writes and sync
                for op in ops:
                    kind = op[0]
                    if kind == "data":
                        data = b"".join(op[3])
                        for c, fd in list(self.fds[op[1]].items()):
                            try:
                                pwrite_all(fd, data, op[2])
                            except OSError as exc:
                                self._lost(c, exc)
                    elif kind == "switch":
                        self._switch(op[1], op[2], op[3])
                    else:
                        self._write_control(op[1])
                        if op[2] is not None:
                            self.log._loop.call_soon_threadsafe(_resolve, op[2])
                if must_sync or any(op[0] != "data" for op in ops):
                    crash_point("log.after_write_before_fsync")
                    self._sync(self.current)
                    self.synced = upto
                    self.log.force_times.record(time.perf_counter() - started)
                    crash_point("log.after_fsync_before_ack")
                    self.log._loop.call_soon_threadsafe(self.log._on_synced, upto)
        except BaseException as exc:  # disk full, EIO: the log is unusable
            with self.lock:           # whatever waits for this thread must hear of it
                ops = ops + self.ops
                self.ops = []
            waiting = [op[2] for op in ops if op[0] == "control" and op[2] is not None]
            try:
                self.log._loop.call_soon_threadsafe(self.log._on_failed, exc, waiting)
            except RuntimeError:    # the loop is closed: nobody is left to tell
                return

    def _switch(self, number: int, first_lsn: int, reuse: bool) -> None:
        old = self.current
        for c, fd in list(self.fds[old].items()):
            try:
                os.fdatasync(fd)
            except OSError as exc:
                self._lost(c, exc)
        for fd in self.fds.pop(old).values():
            os.close(fd)
        fds = self.fds[number] = {}
        # one header for every copy: the copies are the same, byte for byte
        head = ExtentHeader(number, first_lsn, time.time_ns(), self.log.qm_name,
                            self.log.state.pages).encode()
        for c, directory in list(self.live):
            try:
                fds[c] = self._init_extent(directory, number, head, reuse)
            except OSError as exc:
                self._lost(c, exc)
        crash_point("extent.mid_switch")
        self.current = number

    def _init_extent(self, directory: Path, number: int, head: bytes, reuse: bool) -> int:
        """A new or reused extent in one copy, zero-filled or preallocated, its
        header written and forced; returns its descriptor."""
        path = directory / extent_file_name(number)
        size = self.log.extent_size
        zero_fill = reuse and path.exists()
        if zero_fill:
            fd = os.open(path, os.O_RDWR)
        else:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            if zero_fill:
                for off in range(0, size, len(ZERO_CHUNK)):
                    pwrite_all(fd, ZERO_CHUNK[:min(len(ZERO_CHUNK), size - off)], off)
            else:
                os.posix_fallocate(fd, 0, size)
                fsync_dir(directory)
            pwrite_all(fd, head, 0)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
        return fd


def _resolve(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)
