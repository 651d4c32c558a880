"""Reading extents: record iteration, end-of-log detection, corruption reports.

The rules (docs/design-notes.md, "The log"):
* A full (closed) extent is read up to its end, which is its EXTENT_END
  record; any record that fails its checks before that is corruption.
* In the newest extent, the log ends at the first position that holds no valid
  record of the current cycle. If nothing valid of this cycle follows that
  position, it is the end of the log: zero bytes are a clean end, anything
  else is a torn tail whose bytes are kept aside by ``keep_torn_tail``. If a
  valid record of this cycle *does* follow, the bad record is not a tail but
  mid-log corruption: stop and name it.

A reader opens files only when asked to and needs no control file, so the
Spark data source can use it on archived extents as they are.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ..errors import LogCorrupt, LogMissing
from ..fsutil import fsync_dir, private
from .records import (
    EXTENT_HEADER_SIZE,
    MIN_RECORD,
    RECORD_HEADER,
    ExtentHeader,
    LogRecord,
    RecordDecodeError,
    RecordType,
    decode,
    decode_run,
)


@dataclass
class ExtentEnd:
    """How the read of one extent ended."""
    #: "extent_end" (closed by its EXTENT_END record), "clean" (zeros follow),
    #: "torn" (non-zero bytes that are no valid record follow), "stopped" (the
    #: read stopped at the LSN it was asked to: a cut, log/crestart.py)
    how: str
    offset: int            # file offset just past the last valid record
    lsn: int               # LSN just past the last valid record
    torn_length: int = 0   # bytes of torn data from ``offset``
    reason: str = ""


def closed_at(end: ExtentEnd | None, end_lsn: int, cut: bool = False) -> bool:
    """Whether a closed extent read to its end ended where the control file
    says: with its EXTENT_END record, or, for one a conditional restart cut
    (read with ``to_lsn`` = its end), at that record boundary."""
    if end is None or end.lsn != end_lsn:
        return False
    return end.how == ("stopped" if cut else "extent_end")


#: give the pages of a read extent back every this many bytes
RELEASE_BYTES = 8 << 20
#: records per decode_run: the first run is short (many readers want one record,
#: or a few: a checkpoint, the record at an LSN), later ones longer, up to the most
FIRST_RUN, MOST_RUN = 8, 2048


def _open_map(path: Path):
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise LogMissing(f"log extent {path.name} is missing", path=str(path),
                         hint="restore it from the archive or a backup") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        if size < EXTENT_HEADER_SIZE:
            raise LogCorrupt(f"log extent {path} is shorter than its header ({size} bytes)",
                             path=str(path), offset=0)
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def read_header(path: Path) -> ExtentHeader:
    try:
        with open(path, "rb") as f:
            head = f.read(EXTENT_HEADER_SIZE)
    except FileNotFoundError:
        raise LogMissing(f"log extent {path.name} is missing", path=str(path),
                         hint="restore it from the archive or a backup") from None
    try:
        return ExtentHeader.decode(head)
    except RecordDecodeError as exc:
        raise LogCorrupt(f"log extent {path}: {exc.message}", path=str(path), offset=0) from None


class ExtentReader:
    """Iterates the records of one extent.

    ``newest``: this is the newest extent of the log, so a bad record may be
    its torn tail. After iterating, ``end`` says how the extent ended.
    """

    def __init__(self, path: Path, *, newest: bool):
        self.path = Path(path)
        self.newest = newest
        self.end: ExtentEnd | None = None
        self.header = read_header(self.path)

    def _corrupt(self, exc: RecordDecodeError, offset: int, lsn: int) -> LogCorrupt:
        return LogCorrupt(
            f"log extent {self.path.name} is corrupt at offset {offset} (LSN {lsn}): "
            f"{exc.message}", path=str(self.path), offset=offset, lsn=lsn,
            hint="restore this extent from the archive or a dual copy; harbormq will not skip it")

    def records(self, from_lsn: int | None = None, *, to_lsn: int | None = None
                ) -> Iterator[LogRecord]:
        """Yield records with LSN >= from_lsn (a record boundary) and < to_lsn."""
        for batch in self.batches(from_lsn, to_lsn=to_lsn):
            yield from batch

    def batches(self, from_lsn: int | None = None, *, to_lsn: int | None = None
                ) -> Iterator[list[LogRecord]]:
        """The records of ``records``, a list at a time (``decode_run``): the
        readers that go through whole extents (restart, media recovery, the
        archiver, the Spark source) pay the per-record cost of one loop."""
        h = self.header
        buf = _open_map(self.path)
        try:
            size = len(buf)
            offset = EXTENT_HEADER_SIZE
            if from_lsn is not None and from_lsn > h.first_lsn:
                offset = EXTENT_HEADER_SIZE + (from_lsn - h.first_lsn)
                if offset > size:
                    raise LogCorrupt(f"LSN {from_lsn} lies beyond the end of extent "
                                     f"{self.path.name}", path=str(self.path), lsn=from_lsn,
                                     offset=offset)
            released = offset & ~(mmap.PAGESIZE - 1)
            run = FIRST_RUN
            while True:
                lsn = h.first_lsn + offset - EXTENT_HEADER_SIZE
                if to_lsn is not None and lsn >= to_lsn:
                    self.end = ExtentEnd("stopped", offset, lsn)   # as asked
                    return
                batch, offset = decode_run(buf, offset, size, h.first_lsn, stop_lsn=to_lsn,
                                           max_records=run)
                run = min(run * 4, MOST_RUN)
                if not batch:
                    # the record here fails a check: ``decode`` says which (and, were
                    # the two ever to disagree, decodes it: never a record skipped)
                    try:
                        batch = [decode(buf, offset, expected_lsn=lsn)]
                    except RecordDecodeError as exc:
                        self.end = self._classify_end(buf, offset, lsn, exc)
                        return
                    offset += batch[0].length
                yield batch
                if offset - released >= RELEASE_BYTES:
                    upto = offset & ~(mmap.PAGESIZE - 1)
                    buf.madvise(mmap.MADV_DONTNEED, released, upto - released)
                    released = upto
                last = batch[-1]
                if last.type == RecordType.EXTENT_END:
                    self.end = ExtentEnd("extent_end", offset, last.lsn + last.length)
                    return
        finally:
            buf.close()

    def _classify_end(self, buf, offset: int, lsn: int, exc: RecordDecodeError) -> ExtentEnd:
        """A bad record in the newest extent: the end of the log, or corruption?

        After a power loss the device may keep later pages of an unsynced write
        and lose earlier ones, so valid records can follow a hole. Every record
        carries how far the log was known forced when it was appended: if one of
        the records after the hole was appended after the hole's LSN was forced,
        the hole had been on disk and is corruption. Otherwise everything from
        the hole on was never forced, so never acknowledged: a torn tail."""
        if not self.newest:
            raise self._corrupt(exc, offset, lsn)
        last = _last_nonzero(self.path, offset, len(buf))
        if last < offset:
            return ExtentEnd("clean", offset, lsn)
        for rec in _valid_records_after(buf, offset + 8, last, self.header.first_lsn):
            if rec.synced_lsn > lsn:
                raise self._corrupt(exc, offset, lsn)
        torn = ((last - offset) + 8) & ~7
        return ExtentEnd("torn", offset, lsn, torn_length=min(torn, len(buf) - offset),
                         reason=exc.message)


_ZEROS = bytes(1 << 20)


def _last_nonzero(path: Path, start: int, end: int) -> int:
    """Offset of the last non-zero byte in [start, end), or start-1.

    Reads backwards with pread and compares whole chunks against zeros
    (memcmp speed); only the one chunk holding data is searched bytewise.
    pread, unlike slicing the map, leaves no pages in the process's RSS."""
    fd = os.open(path, os.O_RDONLY)
    try:
        hi = end
        while hi > start:
            lo = max(start, hi - len(_ZEROS))
            chunk = os.pread(fd, hi - lo, lo)
            if chunk != _ZEROS[:len(chunk)]:
                return lo + len(chunk.rstrip(b"\0")) - 1
            hi = lo
        return start - 1
    finally:
        os.close(fd)


def _valid_records_after(buf, start: int, last: int, first_lsn: int):
    """Valid records of this cycle at 8-aligned offsets in [start, last]."""
    pos = (start + 7) & ~7
    unpack = RECORD_HEADER.unpack_from
    while pos + MIN_RECORD <= len(buf) and pos <= last:
        length, _crc, lsn = unpack(buf, pos)[:3]
        expected = first_lsn + pos - EXTENT_HEADER_SIZE
        if lsn == expected and length >= MIN_RECORD:
            try:
                rec = decode(buf, pos, expected_lsn=expected)
            except RecordDecodeError:
                rec = None          # only looks like a record: keep scanning
            if rec is not None:
                yield rec
                pos += rec.length
                continue
        pos += 8


def same_bytes(a: Path, b: Path, chunk: int = 1 << 20) -> bool:
    """Whether two files hold the same bytes (the copies of a dual log's extent)."""
    try:
        with open(a, "rb") as fa, open(b, "rb") as fb:
            if os.fstat(fa.fileno()).st_size != os.fstat(fb.fileno()).st_size:
                return False
            while True:
                x, y = fa.read(chunk), fb.read(chunk)
                if x != y:
                    return False
                if not x:
                    return True
    except OSError:
        return False


def keep_torn_tail(path: Path, end: ExtentEnd) -> Path | None:
    """Copy the torn bytes to ``S…LOG.torn.N`` beside the extent, then zero them in
    the extent so new records are written over clean space. Returns the copy."""
    if end.how != "torn" or not end.torn_length:
        return None
    n = 0
    while (copy := path.with_name(f"{path.name}.torn.{n}")).exists():
        n += 1
    with open(path, "r+b") as f:
        f.seek(end.offset)
        data = f.read(end.torn_length)
        with open(copy, "wb", opener=private) as out:
            out.write(f"# torn tail of {path.name} at offset {end.offset} (LSN {end.lsn}): "
                      f"{end.reason}\n".encode())
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        fsync_dir(path.parent)
        f.seek(end.offset)
        f.write(b"\0" * len(data))
        f.flush()
        os.fsync(f.fileno())
    return copy
