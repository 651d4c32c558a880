"""Copying into a backup or a restore: every file durable (temporary name,
fsync, rename, directory fsync), its size and SHA-256 known, the bytes
counted for the progress line (MB and MB/s).

A backup's copies are made while the queue manager may be serving, beside
its log forces: they are written around the page cache (``copy_in_chunks``,
O_DIRECT one MiB at a time), so that no flood of dirty pages is ever queued
on the device ahead of a force. A trial restore (in scratch space, also
beside a serving queue manager) reads the backup around the page cache and
writes its scratch copies through it, unforced: the queue manager it starts
reads them from there, and they are removed unflushed. A restore's copies
go through the page cache (``copy_durably``): nothing serves beside them.

A store is copied as a consistent LMDB snapshot, taken by this process
while the queue manager's process may be writing it: LMDB's copy
(``mdb_env_copyfd2``; compacting, ``MDB_CP_COMPACT``, when a quarter of the
file or more is free pages) reads the environment inside one read
transaction, registered in the environment's lock file as every reader is,
so the writer never reuses a page the copy still reads and the copy is one
committed state of the store (its recovery LSN included). LMDB writes the
snapshot into a pipe (from a thread: the copy releases the GIL) and this
process writes it out uncached; LMDB's own copy to a file writes the whole
store in one O_DIRECT write of up to a GiB, which queues all of it on the
device at once. A reader slot left by a copier that was killed is cleared
by the next copy (``reader_check``).
"""

from __future__ import annotations

import fcntl
import os
import struct
import threading
import time
from pathlib import Path
from typing import Callable

import lmdb

from ..errors import BackupError
from ..fsutil import DIRECT_CHUNK, copy_durably, copy_in_chunks, make_dirs, rename_durably
from ..store.stores import MAX_MAP_SIZE

Progress = Callable[[dict], None]


class Pacer:
    """``backup --max-rate``: holds the bytes a backup streams (what it copies,
    and what its trial restore copies, replays and hashes) to ``rate`` bytes a
    second by sleeping between chunks, with at most BURST seconds' worth of
    credit saved up while it was slower. A backup streams gigabytes through
    memory; beside a serving queue manager that costs the queue manager
    throughput in proportion to how fast it streams, in any scheduling class
    (docs/backup.md): a slower stream costs less each second."""

    BURST = 0.05

    def __init__(self, rate: float | None):
        self.rate = rate
        self.slept = 0.0
        self._next = 0.0          # when the next byte may go (time.monotonic)

    def took(self, nbytes: int) -> None:
        if not self.rate:
            return
        now = time.monotonic()
        self._next = max(self._next, now - self.BURST) + nbytes / self.rate
        if self._next > now:
            time.sleep(self._next - now)
            self.slept += self._next - now


class Copier:
    """Counts what is copied; ``progress`` is told at most every ``every`` s."""

    def __init__(self, progress: Progress | None = None, every: float = 1.0,
                 total: int | None = None, durable: bool = True, uncached: bool = False,
                 pacer: Pacer | None = None):
        self.progress = progress
        #: paces the copies made beside a serving queue manager (None: at full speed)
        self.pacer = pacer
        #: False for scratch space that is removed afterwards (a trial restore):
        #: its copies are not forced to disk, nothing depends on them surviving
        self.durable = durable
        #: True for a backup's copies, made beside a serving queue manager
        self.uncached = uncached and durable
        self.every = every
        self.total = total
        self.bytes = 0
        self.files = 0
        self.started = time.monotonic()
        self.busy = 0.0           # seconds spent copying (the rate's denominator)
        self._last = 0.0

    def counted(self, size: int, seconds: float, what: str) -> None:
        self.bytes += size
        self.files += 1
        self.busy += seconds
        now = time.monotonic()
        if self.progress is not None and now - self._last >= self.every:
            self._last = now
            self.progress(self.report(what))

    def report(self, what: str = "") -> dict:
        elapsed = max(1e-9, time.monotonic() - self.started)
        return {"what": what, "bytes": self.bytes, "files": self.files, "total": self.total,
                "seconds": elapsed, "mb_s": self.bytes / 1e6 / max(1e-9, self.busy)}

    def copy_file(self, src: Path, dst: Path, *, expect: tuple[int, str] | None = None
                  ) -> tuple[int, str]:
        t = time.monotonic()
        make_dirs(Path(dst).parent)
        if self.uncached or not self.durable:
            fin = os.open(src, os.O_RDONLY)
            try:
                if self.uncached:
                    size, sha = copy_in_chunks(fin, dst, expect=expect, pace=self._pace)
                else:       # scratch: the backup read around the cache, not forced
                    size, sha = copy_in_chunks(fin, dst, expect=expect, direct_read=True,
                                               direct_write=False, durable=False,
                                               pace=self._pace)
            finally:
                os.close(fin)
        else:
            size, sha = copy_durably(src, dst, expect=expect, durable=self.durable)
        self.counted(size, time.monotonic() - t, str(dst.name))
        return size, sha

    @property
    def _pace(self):
        return self.pacer.took if self.pacer is not None and self.pacer.rate else None

    def copy_store(self, src_dir: Path, dst_dir: Path) -> tuple[int, str]:
        """A consistent snapshot of the LMDB environment in ``src_dir`` as
        ``dst_dir/data.mdb``; (size, SHA-256)."""
        t = time.monotonic()
        size, sha = snapshot_store(src_dir, dst_dir, pace=self._pace)
        self.counted(size, time.monotonic() - t, str(src_dir.name))
        return size, sha


#: a named database's record in LMDB's main database (MDB_db): pad, flags,
#: depth, branch, leaf and overflow pages, entries, root
_DB_RECORD = struct.Struct("<IHHQQQQQ")
assert _DB_RECORD.size == 48
#: compact a store's copy only when at least this share of its file is free pages
COMPACT_WHEN_FREE = 0.25


def _worth_compacting(env: lmdb.Environment) -> bool:
    """Whether a compacting copy pays: it walks every tree to leave out the
    free pages, at about half the speed of a plain copy of the file (which
    is just as consistent: LMDB copies it inside one read transaction). A
    queue that only grew has next to no free pages; one that was deep and
    then drained is mostly free pages."""
    try:
        total = env.info()["last_pgno"] + 1
        st = env.stat()
        used = 2 + st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
        with env.begin() as txn:
            for _name, rec in txn.cursor():
                if len(rec) != _DB_RECORD.size:
                    return True          # not a named database's record: play safe
                _, _, _, branch, leaf, overflow, _, _ = _DB_RECORD.unpack(rec)
                used += branch + leaf + overflow
    except lmdb.Error:
        return True
    return (total - used) / total >= COMPACT_WHEN_FREE


#: Linux's fcntl to size a pipe's buffer (one chunk: one read per chunk)
_F_SETPIPE_SZ = 1031


def snapshot_store(src_dir: Path, dst_dir: Path, *,
                   pace: Callable[[int], None] | None = None) -> tuple[int, str]:
    """A consistent snapshot of the LMDB environment in ``src_dir`` written
    uncached as ``dst_dir/data.mdb``; (size, SHA-256)."""
    src_dir, dst_dir = Path(src_dir), Path(dst_dir)
    make_dirs(dst_dir)
    final = dst_dir / "data.mdb"
    try:
        # readahead: the copy reads the whole file in order through this process's
        # own map; without it every page not in the page cache is a fault and a
        # 4 KiB read (a 70 MB store not in the cache: 12 to 17 s instead of 0.25 s)
        env = lmdb.open(str(src_dir), readonly=True, lock=True, create=False, max_dbs=8,
                        map_size=MAX_MAP_SIZE, readahead=True, subdir=True)
    except lmdb.Error as exc:
        raise BackupError(f"store {src_dir} cannot be opened for its copy: {exc}",
                          path=str(src_dir)) from None
    try:
        try:
            env.reader_check()     # slots of copiers killed before us
        except lmdb.Error:
            pass
        compact = _worth_compacting(env)
        read_end, write_end = os.pipe()
        try:
            fcntl.fcntl(write_end, _F_SETPIPE_SZ, DIRECT_CHUNK)
        except OSError:
            pass                   # a smaller pipe: more reads, the same copy
        failed: list[BaseException] = []

        def write_snapshot() -> None:
            try:
                env.copyfd(write_end, compact=compact)
            except BaseException as exc:  # EPIPE too: the reader below gave up
                failed.append(exc)
            finally:
                os.close(write_end)

        writer = threading.Thread(target=write_snapshot, daemon=True,
                                  name=f"snapshot of {src_dir.name}")
        writer.start()
        # under a name of its own until LMDB says the snapshot is whole: a copy
        # that fails midway never has data.mdb's name
        streamed = dst_dir / "data.mdb.snapshot"
        try:
            size, sha = copy_in_chunks(read_end, streamed, stream=True, pace=pace)
        except OSError as exc:
            raise BackupError(f"store {src_dir} could not be copied to {streamed}: {exc}",
                              path=str(streamed)) from None
        finally:
            os.close(read_end)     # a writer still writing gets EPIPE and ends
            writer.join()
        if failed:
            streamed.unlink(missing_ok=True)
            raise BackupError(f"store {src_dir} could not be copied: {failed[0]!r}",
                              path=str(src_dir))
        rename_durably(streamed, final)
    finally:
        env.close()
    return size, sha
