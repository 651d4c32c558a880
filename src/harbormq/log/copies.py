"""The copies of a log's extents: which to read, and whether one holds what the
control file says.

A dual log (``log.dual_path``) writes every extent into two directories, the
primary and the dual copy; a single log has one. This module holds:

* ``checked_batches``, the one statement of the rule that a copy of an extent
  starts at the LSN the control file lists for it and, once closed, ends where
  the control file says (its EXTENT_END record, or the cut of a conditional
  restart). The recovery scan, the choice of the newest extent's copy, the
  archiver's read and ``log recover-copy`` all read through it;
* ``trusted``: a copy given up after a failure holds only what was closed
  before it failed;
* ``LogCopies``, the part of ``RecoveryLog`` that chooses between the copies:
  the order to read them in, reading around a bad one (HMQ7491W), making the
  newest extent's copies equal at restart (HMQ7492I), giving one up (HMQ7490W).

Not here: writing the copies (``writer.py``), the control file's copies
(``control.py``), re-creating a lost copy offline (``dual.py``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Callable, Iterator

from ..errors import LogCorrupt, LogError, LogMissing
from ..fsutil import copy_durably
from .control import DUAL, PRIMARY, ControlFile, ControlState, ExtentInfo
from .reader import ExtentEnd, ExtentReader, closed_at, keep_torn_tail, same_bytes
from .records import LogRecord, extent_file_name


def checked_batches(reader: ExtentReader, e: ExtentInfo, from_lsn: int | None = None, *,
                    qm_name: str | None = None) -> Iterator[list[LogRecord]]:
    """The records of one copy of extent ``e`` from ``from_lsn`` on, a list at a
    time, read by ``reader`` (opened on that copy); ``reader.end`` then says how
    the copy ended. Raises LogCorrupt where the copy does not hold what the
    control file says of ``e``: it starts at another LSN, its header names
    another queue manager than ``qm_name`` (when given), or, closed, it ends
    anywhere but at the control file's end. A cut extent is read to its cut."""
    path, head = reader.path, reader.header
    if head.first_lsn != e.first_lsn:
        raise LogCorrupt(f"log extent {path.name} starts at LSN {head.first_lsn}, the "
                         f"control file says {e.first_lsn}", path=str(path), offset=0)
    if qm_name is not None and head.qm_name != qm_name[:48]:
        raise LogCorrupt(f"log extent {path.name} belongs to queue manager "
                         f"{head.qm_name}, not {qm_name}", path=str(path), offset=0)
    closed = not reader.newest
    yield from reader.batches(from_lsn, to_lsn=e.end_lsn if e.cut and closed else None)
    end = reader.end
    if closed and not closed_at(end, e.end_lsn, e.cut):
        raise LogCorrupt(f"log extent {path.name} ends at LSN {end.lsn}, the control file "
                         f"says {e.end_lsn}", path=str(path), lsn=end.lsn, offset=end.offset)


def read_copy(path: Path, e: ExtentInfo, *, newest: bool) -> ExtentEnd:
    """Read one copy of ``e`` whole through ``checked_batches``; how it ended."""
    reader = ExtentReader(path, newest=newest)
    for _ in checked_batches(reader, e):
        pass
    return reader.end


def trusted(which: str, e: ExtentInfo, state: ControlState) -> bool:
    """Whether copy ``which`` may hold extent ``e`` whole: a copy given up
    (degraded) holds only the extents closed and forced before it failed."""
    return which != state.degraded or (e.end_lsn is not None and
                                       e.end_lsn <= state.degraded_lsn)


def every_copy_failed(errors: list[tuple[int, LogError]]) -> LogError:
    """The error of the copy that read furthest, naming what the others said."""
    pos, exc = max(errors, key=lambda pe: pe[0])
    others = [o for _, o in errors if o is not exc]
    if others:
        exc.message += "; the other copy fails too: " + "; ".join(o.message for o in others)
        exc.args = (exc.message,)
    return exc


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class LogCopies:
    """The copies of the log's extents, as ``RecoveryLog`` (which is one) reads
    and repairs them. Every operator message of the log itself is about its
    copies (a copy read around, rewritten, given up): they are said here."""

    # what the log provides (set by RecoveryLog.__init__ and restart)
    dir: Path
    dual_dir: Path | None
    qm_name: str
    control: ControlFile
    state: ControlState | None
    _loop: asyncio.AbstractEventLoop | None

    def __init__(self) -> None:
        #: operator messages of the log itself (a copy read around, a copy lost);
        #: each is also kept in ``warnings``
        self.say: Callable[[str, str], None] | None = None
        self.warnings: list[tuple[str, str]] = []
        self._warned: set = set()
        #: the log is being written (a running queue manager, or a view of it):
        #: the newest extent is read from its first healthy copy
        self.live = False
        #: the newest extent's copies, best first, as a full read of each chose them
        self._newest_order: dict[int, list[tuple[str, Path]]] = {}
        self._newest_reads: dict[int, list] = {}
        self._reconciled = False
        #: reconcile_active made the healthy copies of the newest extent equal
        self._copies_equal = False

    def extent_path(self, number: int) -> Path:
        """The extent's file in the log directory (its primary copy)."""
        return self.dir / extent_file_name(number)

    @property
    def copies(self) -> list[tuple[str, Path]]:
        """(copy, directory) of every copy of the log: the primary, then the dual."""
        if self.dual_dir is None:
            return [(PRIMARY, self.dir)]
        return [(PRIMARY, self.dir), (DUAL, self.dual_dir)]

    def healthy_copies(self) -> list[tuple[str, Path]]:
        """The copies still written (a dual log that lost one runs on the other)."""
        degraded = self.state.degraded if self.state is not None else ""
        return [(c, d) for c, d in self.copies if c != degraded]

    def _trusted_paths(self, e: ExtentInfo) -> list[tuple[str, Path]]:
        return [(c, d / extent_file_name(e.number)) for c, d in self.copies
                if trusted(c, e, self.state)]

    def extent_copies(self, e: ExtentInfo) -> list[tuple[str, Path]]:
        """(copy, path) of the copies of ``e`` that may be read, in the order to
        try them. The newest extent of a log not being written is read from
        the copy that reads furthest (``_choose_newest``)."""
        out = self._trusted_paths(e)
        if len(out) > 1 and e.state == "active" and not self.live:
            return [x for x in self._choose_newest(e, out) if x in out]
        return out

    def extent_present(self, e: ExtentInfo) -> bool:
        """Whether a copy of ``e`` that may be read is on disk."""
        if self.dual_dir is None:
            return self.extent_path(e.number).exists()
        return any(p.exists() for _, p in self._trusted_paths(e))

    def readable_extent(self, e: ExtentInfo) -> Path:
        """A copy of the closed extent ``e`` that reads whole (the archiver
        copies it). A single log: its path, unread."""
        copies = self._trusted_paths(e)
        if len(copies) == 1:
            return copies[0][1]
        failed = []
        for which, path in copies:
            try:
                read_copy(path, e, newest=False)
            except (LogCorrupt, LogMissing) as exc:
                failed.append((which, path, exc))
                continue
            for bad_copy, bad_path, exc in failed:
                self.fell_back(e, (bad_copy, bad_path), (which, path), exc, e.first_lsn)
            return path
        raise every_copy_failed([(0, exc) for _, _, exc in failed])

    def _choose_newest(self, e: ExtentInfo, copies: list[tuple[str, Path]]
                       ) -> list[tuple[str, Path]]:
        """The newest extent's copies, best first: each is read whole (the
        records after a crash may reach further in one copy than in the other,
        whose unforced tail was lost); the copy reading furthest without an
        error is first. Chosen once per opening of the log."""
        order = self._newest_order.get(e.number)
        if order is not None:
            return order
        reads = []
        for which, path in copies:
            try:
                reads.append((which, path, read_copy(path, e, newest=True), None))
            except (LogCorrupt, LogMissing) as exc:
                reads.append((which, path, None, exc))
        good = [r for r in reads if r[3] is None]
        if good:
            best = max(good, key=lambda r: r[2].lsn)     # the first of equals
            reads.remove(best)
            reads.insert(0, best)
            for which, path, _, exc in reads:
                if exc is not None:
                    self.fell_back(e, (which, path), best[:2], exc, e.first_lsn)
        self._newest_reads[e.number] = reads
        order = [(c, p) for c, p, _, _ in reads]
        self._newest_order[e.number] = order
        return order

    def fell_back(self, e: ExtentInfo, bad: tuple[str, Path], good: tuple[str, Path],
                  exc: LogError, lsn: int) -> None:
        """A copy of ``e`` could not be read: say so, once per extent and copy."""
        self._warn(("read", e.number, bad[0]), "HMQ7491W",
                   f"the {bad[0]} copy of log extent {bad[1].name} of queue manager "
                   f"{self.qm_name} cannot be read from LSN {lsn} ({exc.message}); it is read "
                   f"from the {good[0]} copy ({good[1]}) instead. Re-create the bad copy with "
                   f"'harbormq log recover-copy {self.qm_name}' (queue manager stopped)")

    def _warn(self, key, msgid: str, text: str) -> None:
        if key in self._warned:
            return
        self._warned.add(key)
        self.warnings.append((msgid, text))
        say = self.say
        if say is None:
            return
        loop = self._loop
        if loop is not None and not loop.is_closed() and _running_loop() is not loop:
            loop.call_soon_threadsafe(say, msgid, text)     # a reader on a worker thread
        else:
            say(msgid, text)

    def keep_torn_tail(self, e: ExtentInfo, path: Path, end: ExtentEnd) -> Path | None:
        """Keep the torn tail aside and zero it, in every healthy copy holding
        the same bytes (after ``reconcile_active``, all of them); returns the
        copy beside ``path``."""
        kept = keep_torn_tail(path, end)
        for _, directory in self.healthy_copies():
            other = directory / path.name
            if other != path and other.exists() and self._copies_equal:
                keep_torn_tail(other, end)
        return kept

    def reconcile_active(self) -> None:
        """Restart, before writing resumes: make every healthy copy of the
        newest extent equal to the one that reads furthest, so that the
        copies never differ silently. A copy missing, damaged or shorter (its
        unforced tail lost in a crash) is rewritten from the best one (its own
        torn bytes kept aside first); one that cannot be written is given up
        (HMQ7490W, the log goes on with one copy). Nothing to do for a single
        log, or when no copy of the extent reads alone (the read then goes
        around the damage, and restart reports it if it cannot)."""
        if self._reconciled or self.dual_dir is None:
            return
        self._reconciled = True
        st = self.state
        e = st.active
        healthy = [(c, d / extent_file_name(e.number)) for c, d in self.healthy_copies()]
        if len(healthy) < 2:
            return
        self._choose_newest(e, healthy)
        reads = self._newest_reads[e.number]
        best = reads[0]
        if best[3] is not None:
            return
        for which, path, end, exc in reads[1:]:
            if exc is None and same_bytes(best[1], path):
                continue
            why = (f"it read to LSN {end.lsn}, the {best[0]} copy to LSN {best[2].lsn}"
                   if exc is None else f"it cannot be read: {exc.message}")
            if exc is None and end.lsn == best[2].lsn:
                why = "its bytes after the end of the log differ"
            try:
                if exc is None and end.how == "torn":
                    keep_torn_tail(path, end)       # its own unforced tail, kept aside
                copy_durably(best[1], path)
            except OSError as err:
                self.degrade_now(which, err, e.first_lsn)
                continue
            self._warn(("rewrite", e.number, which), "HMQ7492I",
                       f"the {which} copy of log extent {path.name} of queue manager "
                       f"{self.qm_name} was rewritten from the {best[0]} copy before writing "
                       f"resumes ({why})")
        self._copies_equal = True

    def degrade_now(self, which: str, exc: OSError, whole_below: int) -> None:
        """Give up copy ``which`` while the log is not being written (restart):
        the control file says so, in the copy that is left."""
        self.control.degrade(self.state, which, whole_below)
        self._say_degraded(which, exc)

    def _say_degraded(self, which: str, exc: BaseException) -> None:
        where = dict(self.copies)[which]
        self._warn(("degraded", which), "HMQ7490W",
                   f"the {which} copy of the log of queue manager {self.qm_name} in {where} "
                   f"cannot be written ({exc}): the log goes on with one copy, in "
                   f"{dict(self.copies)[PRIMARY if which == DUAL else DUAL]}. Once the "
                   f"directory works again, stop the queue manager and run 'harbormq log "
                   f"recover-copy {self.qm_name}'")

    def _say_degraded_at_start(self) -> None:
        st = self.state
        which = st.degraded
        self._warn(("degraded", which), "HMQ7490W",
                   f"the {which} copy of the log of queue manager {self.qm_name} "
                   f"({dict(self.copies)[which]}) was given up after a failure (it is whole "
                   f"only below LSN {st.degraded_lsn}): the log runs on one copy. Stop the "
                   f"queue manager and run 'harbormq log recover-copy {self.qm_name}' to "
                   "re-create it")
