"""Copying into a backup or a restore: every file durable (temporary name,
fsync, rename, directory fsync), its size and SHA-256 known, the bytes
counted for the progress line (MB and MB/s).

A store is copied as a consistent LMDB snapshot, taken by this process
while the queue manager's process may be writing it: LMDB's copy
(``mdb_env_copy2``; compacting, ``MDB_CP_COMPACT``, when a quarter of the
file or more is free pages) reads the environment inside one read
transaction, registered in the environment's lock file as every reader is,
so the writer never reuses a page the copy still reads and the copy is one
committed state of the store (its recovery LSN included). A reader slot
left by a copier that was killed is cleared by the next copy
(``reader_check``).
"""

from __future__ import annotations

import os
import struct
import time
from pathlib import Path
from typing import Callable

import lmdb

from ..errors import BackupError
from ..fsutil import FILE_MODE, copy_durably, fd_sha256, fsync_dir, make_dirs
from ..store.stores import MAX_MAP_SIZE

CHUNK = 4 << 20

Progress = Callable[[dict], None]


class Copier:
    """Counts what is copied; ``progress`` is told at most every ``every`` s."""

    def __init__(self, progress: Progress | None = None, every: float = 1.0,
                 total: int | None = None, durable: bool = True):
        self.progress = progress
        #: False for scratch space that is removed afterwards (a trial restore):
        #: its copies are not forced to disk, nothing depends on them surviving
        self.durable = durable
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
        size, sha = copy_durably(src, dst, expect=expect, durable=self.durable)
        self.counted(size, time.monotonic() - t, str(dst.name))
        return size, sha

    def copy_store(self, src_dir: Path, dst_dir: Path) -> tuple[int, str]:
        """A consistent snapshot of the LMDB environment in ``src_dir`` as
        ``dst_dir/data.mdb``; (size, SHA-256)."""
        t = time.monotonic()
        size, sha = snapshot_store(src_dir, dst_dir)
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


def snapshot_store(src_dir: Path, dst_dir: Path) -> tuple[int, str]:
    src_dir, dst_dir = Path(src_dir), Path(dst_dir)
    make_dirs(dst_dir)
    final = dst_dir / "data.mdb"
    work = dst_dir / "copy.tmp"        # LMDB writes <dir>/data.mdb: a directory of its own
    if work.exists():
        for p in work.iterdir():
            p.unlink()
    else:
        work.mkdir(mode=0o700)
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
        env.copy(str(work), compact=_worth_compacting(env))
    except lmdb.Error as exc:
        raise BackupError(f"store {src_dir} could not be copied: {exc}",
                          path=str(src_dir)) from None
    finally:
        env.close()
    copied = work / "data.mdb"
    os.chmod(copied, FILE_MODE)
    fd = os.open(copied, os.O_RDONLY)
    try:
        size, sha = fd_sha256(fd)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(copied, final)
    work.rmdir()
    fsync_dir(dst_dir)
    return size, sha
