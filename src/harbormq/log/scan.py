"""The recovery scan: the log read from an LSN to its end, across extents and
around a bad copy, and how it ended (the end of the log, a torn tail set aside).

Restart's redo, undo and the tools read the log through ``RecoveryLog.scan``
and ``RecoveryLog.read_from``; this module holds the iteration. Not here:
reading one extent file (``reader.py``), which copies of an extent there are
and the check that one holds what the control file says (``copies.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from ..errors import LogCorrupt, LogError, LogMissing
from .control import ExtentInfo
from .copies import checked_batches, every_copy_failed
from .reader import ExtentEnd, ExtentReader
from .records import LogRecord

if TYPE_CHECKING:
    from .manager import RecoveryLog


class RecoveryScan:
    """Iterates the log from an LSN to its end, across extents, and records how
    the log ended (``end_lsn``, ``end`` of the newest extent, torn copy).

    A dual log's extent is read from its first copy; a copy that fails (gone,
    short, a bad header, a record failing its checks, an end that is not the
    one the control file records) is left for the other at the LSN where it
    failed, with a warning (HMQ7491W). Both copies hold the same bytes at the
    same offsets, so the read goes on where it was. Only when every copy fails
    at a point is the extent missing or corrupt."""

    def __init__(self, log: RecoveryLog, from_lsn: int, *, repair_tail: bool):
        self.log = log
        self.from_lsn = from_lsn
        self.repair_tail = repair_tail
        self.end_lsn = from_lsn
        self.end: ExtentEnd | None = None
        self.torn_copy: Path | None = None
        self.records_read = 0
        self.bytes_read = 0

    def __iter__(self) -> Iterator[LogRecord]:
        for batch in self.batches():
            yield from batch

    def batches(self) -> Iterator[list[LogRecord]]:
        """The records a list at a time (restart's redo loop reads these)."""
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
            if newest and self.repair_tail:
                self.log.reconcile_active()
            first = i == start_index
            yield from self._extent(e, newest, first)

    def _extent(self, e: ExtentInfo, newest: bool, first: bool
                ) -> Iterator[list[LogRecord]]:
        end: ExtentEnd
        copies = self.log.extent_copies(e)
        if first and self.from_lsn < e.first_lsn:
            name = copies[0][1].name
            raise LogMissing(f"LSN {self.from_lsn} is older than the oldest extent kept "
                             f"({name} starts at {e.first_lsn})", lsn=self.from_lsn,
                             path=str(copies[0][1]))
        pos = max(self.from_lsn, e.first_lsn)
        failed: dict[int, int] = {}          # copy index -> LSN where it failed
        errors: list[tuple[int, LogError]] = []
        k = 0
        while True:
            path = copies[k][1]
            try:
                reader = ExtentReader(path, newest=newest)
                for batch in checked_batches(reader, e, pos, qm_name=self.log.qm_name):
                    last = batch[-1]
                    self.records_read += len(batch)
                    self.bytes_read += last.lsn + last.length - batch[0].lsn   # contiguous
                    yield batch
                    pos = last.lsn + last.length
                end = reader.end
                break
            except (LogCorrupt, LogMissing) as exc:
                failed[k] = pos
                errors.append((pos, exc))
                # another copy that has not failed at or after this point
                nxt = next((j for j in list(range(k + 1, len(copies))) + list(range(k))
                            if failed.get(j, -1) < pos), None)
                if nxt is None:
                    raise every_copy_failed(errors) from None
                self.log.fell_back(e, copies[k], copies[nxt], exc, pos)
                k = nxt
        self.end = end
        self.end_lsn = end.lsn
        if newest and end.how == "torn" and self.repair_tail:
            self.torn_copy = self.log.keep_torn_tail(e, path, end)
