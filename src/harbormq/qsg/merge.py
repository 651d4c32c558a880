"""The group's log: the logs of every member of a queue sharing group merged
into one order, the group-wide stamp's (MQ's LRSN across a sysplex).

Each member writes its own log; every change it makes to a persistent shared
message carries a stamp that orders it among the changes of all members.
Structure recovery (``structure_recovery.py``) and the pipeline's group log
lake read the members' logs through this module:

* ``plan_member`` finds the extents of one member's log from its files: the
  log directory (a member that is down is read from its files as they are)
  and, for an extent no longer there, its archive, **recalled** into scratch
  space the caller names (the archive's hash checked, as restart's recall
  does; the member's own directory is never written: it may be running).
* ``member_records`` reads one member's extents in LSN order from an LSN on.
* ``merged`` merges the members' records into one stamp order. A record that
  carries no stamp (a unit of work's begin, commit, backout...) takes the
  stamp of the last stamped record before it in its own log, so every
  member's own order is kept exactly (``heapq.merge`` is stable per input)
  and records of different members with one stamp go by member, then LSN.

Not here: what a record means for a structure (``structure_recovery.py``,
through the commit rule of ``log/replay.py``), and which records carry a
stamp (the caller passes ``stamp_of``).
"""

from __future__ import annotations

import heapq
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, NamedTuple

from ..errors import LogCorrupt, LogMissing
from ..log import archive
from ..log.reader import ExtentReader, read_header
from ..log.records import EXTENT_HEADER_SIZE, LogRecord, RecordType, extent_file_name

#: the stamp of a record, or None when it carries none
StampOf = Callable[[LogRecord], "int | None"]
#: told as a reading goes: (member, bytes read of it, bytes planned of it)
ReadProgress = Callable[[str, int, int], None]


def no_read_progress(member: str, done: int, total: int) -> None:
    pass


@dataclass(frozen=True)
class MemberLog:
    """Where one member's log lies: its log directory (None when only its
    archive is left, as after losing a site) and its archive paths."""
    name: str
    log_dir: Path | None
    archive_paths: tuple[Path, ...] = ()
    dual_dir: Path | None = None


@dataclass(frozen=True)
class ExtentSource:
    """One extent of a member's log and where it is read from."""
    member: str
    number: int
    first_lsn: int
    path: Path
    size: int
    #: "log" (the member's log directory) or "archive" (recalled from it)
    origin: str
    #: the newest extent of the log (it may end in a torn tail)
    newest: bool = False

    @property
    def name(self) -> str:
        return extent_file_name(self.number)


@dataclass
class MemberPlan:
    """What reading one member's log from ``from_lsn`` takes."""
    member: str
    from_lsn: int
    extents: list[ExtentSource] = field(default_factory=list)
    #: archived extents that must be recalled before the read
    to_recall: list[tuple[archive.ArchiveEntry, Path]] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(e.size for e in self.extents)

    def as_dict(self) -> dict:
        return {"member": self.member, "from_lsn": self.from_lsn, "bytes": self.bytes,
                "extents": [f"{e.name} ({e.origin})" for e in self.extents]}


def used_bytes(path: Path, block: int = 64 << 10) -> int:
    """About the bytes written in an extent file (an extent is preallocated:
    its tail is zeros until written), for a plan's estimate: the written part
    is found by halving over blocks (a block of zeros inside it, which only a
    message body of zeros makes, could end it early: an estimate, not a read)."""
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        lo, hi = 0, (size + block - 1) // block      # blocks [0, lo) written, [hi, ..) not
        while lo < hi:
            mid = (lo + hi) // 2
            f.seek(mid * block)
            if f.read(block).strip(b"\0"):
                lo = mid + 1
            else:
                hi = mid
        if lo == 0:
            return 0
        f.seek((lo - 1) * block)
        return (lo - 1) * block + len(f.read(block).rstrip(b"\0"))


def _never_used(path: Path) -> bool:
    with open(path, "rb") as f:
        return not f.read(EXTENT_HEADER_SIZE).strip(b"\0")


def _log_dir_extents(member: MemberLog) -> dict[int, ExtentSource]:
    """The extents in the member's log directory (either copy of a dual log),
    by first LSN; preallocated extents never written are left out."""
    found: dict[int, ExtentSource] = {}
    for directory in (member.log_dir, member.dual_dir):
        if directory is None or not directory.is_dir():
            continue
        for path in sorted(directory.glob("S*.LOG")):
            if path.stat().st_size < EXTENT_HEADER_SIZE or _never_used(path):
                continue
            header = read_header(path)
            if header.qm_name != member.name[:48]:
                raise LogCorrupt(f"{path} belongs to queue manager {header.qm_name}, not to "
                                 f"member {member.name}", path=str(path), offset=0)
            found.setdefault(header.first_lsn, ExtentSource(
                member.name, header.extent_number, header.first_lsn, path,
                path.stat().st_size, "log"))
    return found


def plan_member(member: MemberLog, from_lsn: int = 0) -> MemberPlan:
    """The extents to read for ``member`` from ``from_lsn`` (0: its oldest
    extent kept anywhere), in LSN order: those in its log directory, and for
    an older one no longer there its newest archived entry. LogMissing names
    the member and the first LSN range that neither holds."""
    in_log = _log_dir_extents(member)
    in_archive: dict[int, tuple[archive.ArchiveEntry, Path]] = {}
    for base in member.archive_paths:
        directory = archive.archive_dir(base, member.name)
        for entry, _ in archive.read_manifest(directory):
            if entry.cut:
                continue
            in_archive.setdefault(entry.first_lsn, (entry, directory / entry.name))
    firsts = sorted(set(in_log) | set(in_archive))
    if not firsts:
        raise LogMissing(f"member {member.name}: no log extent in "
                         f"{member.log_dir or 'no log directory'} nor in its archive "
                         f"({', '.join(map(str, member.archive_paths)) or 'none named'})",
                         lsn=from_lsn)
    plan = MemberPlan(member.name, from_lsn)
    # archived entries know where they end, log files do not until read: the
    # chain is checked when it is read (``member_records``); here an extent
    # is kept when the next one starts after from_lsn
    for i, first in enumerate(firsts):
        nxt = firsts[i + 1] if i + 1 < len(firsts) else None
        if nxt is not None and nxt <= from_lsn:
            continue
        if first in in_log:
            plan.extents.append(in_log[first])
        else:
            entry, path = in_archive[first]
            plan.extents.append(ExtentSource(member.name, entry.number, entry.first_lsn,
                                             path, entry.size, "archive"))
            plan.to_recall.append((entry, path))
    if from_lsn and plan.extents[0].first_lsn > from_lsn:
        raise LogMissing(f"member {member.name}: its log from LSN {from_lsn} is needed, but "
                         f"the oldest extent kept (in its log directory or archive) starts at "
                         f"LSN {plan.extents[0].first_lsn}", lsn=from_lsn,
                         hint="put the member's archived extents back in an archive path")
    # what is read of each: up to the next extent; the newest, up to its last byte written
    for i, e in enumerate(plan.extents):
        nxt = plan.extents[i + 1].first_lsn if i + 1 < len(plan.extents) else None
        size = (EXTENT_HEADER_SIZE + nxt - e.first_lsn if nxt is not None
                else used_bytes(e.path))
        newest = nxt is None and e.origin == "log"
        plan.extents[i] = ExtentSource(e.member, e.number, e.first_lsn, e.path,
                                       min(size, e.size), e.origin, newest)
    return plan


def recall_into(plan: MemberPlan, member: MemberLog, scratch: Path,
                say: Callable[[str, str], None]) -> None:
    """Recall the plan's archived extents into ``scratch/<member>/`` (the
    archive's hash checked by ``archive.recall``); the plan then reads them
    there."""
    if not plan.to_recall:
        return
    dest = scratch / member.name
    dest.mkdir(parents=True, exist_ok=True)
    recalled = {}
    for entry, _ in plan.to_recall:
        recalled[entry.first_lsn] = archive.recall(list(member.archive_paths), member.name,
                                                   entry.number, entry.first_lsn, dest, say)
    plan.extents = [ExtentSource(e.member, e.number, e.first_lsn, recalled[e.first_lsn], e.size,
                                 e.origin, e.newest) if e.first_lsn in recalled else e
                    for e in plan.extents]
    plan.to_recall = []


def remove_recalled(scratch: Path) -> None:
    """The scratch copies, once the reading is over."""
    if scratch.exists():
        shutil.rmtree(scratch, ignore_errors=True)


def member_records(plan: MemberPlan, progress: ReadProgress = no_read_progress,
                   to_lsn: int | None = None) -> Iterator[LogRecord]:
    """The member's records from the plan's ``from_lsn`` to its end (or
    ``to_lsn``), extent after extent. A gap between two extents, or a closed
    extent that does not end with its EXTENT_END record, is LogMissing or
    LogCorrupt naming the member: a merged log with a hole would recover a
    structure wrongly."""
    total = plan.bytes
    done = 0
    expect: int | None = None
    sources = plan.extents
    for i, source in enumerate(sources):
        if i + 1 < len(sources) and sources[i + 1].first_lsn <= plan.from_lsn:
            done += source.size         # wholly before the reading starts
            continue
        if expect is not None and source.first_lsn != expect:
            raise LogMissing(f"member {plan.member}: its log has a gap from LSN {expect} to "
                             f"{source.first_lsn} (before {source.name})", lsn=expect,
                             hint="put the missing extents back in the log directory or the "
                                  "archive")
        reader = ExtentReader(source.path, newest=source.newest)
        start = plan.from_lsn if plan.from_lsn > source.first_lsn else None
        for batch in reader.batches(start, to_lsn=to_lsn):
            for rec in batch:
                if rec.type != RecordType.EXTENT_END:
                    yield rec
        done += source.size
        progress(plan.member, done, total)
        end = reader.end
        if end is not None and end.how == "stopped":
            return
        if not source.newest and (end is None or end.how != "extent_end"):
            if source is sources[-1]:
                return        # the newest kept of a member whose log dir is gone
            raise LogCorrupt(f"member {plan.member}: log extent {source.name} "
                             f"({source.path}) ends at LSN {end.lsn if end else '?'} without "
                             f"its end record", path=str(source.path),
                             offset=end.offset if end else 0)
        expect = end.lsn if end is not None else None


class MergedRecord(NamedTuple):
    """One record of the group's log: its stamp (carried for a record that
    has none), the member whose log holds it, the record."""
    stamp: int
    member: str
    rec: LogRecord


def stamped(member: str, records: Iterable[LogRecord], stamp_of: StampOf,
            from_stamp: int = 0) -> Iterator[MergedRecord]:
    """One member's records with their stamps (a record with none carries
    the last one before it); records before ``from_stamp`` are still given
    (the commit rule needs a unit of work's earlier records)."""
    last = from_stamp
    for rec in records:
        s = stamp_of(rec)
        if s is not None:
            last = max(last, s)
        yield MergedRecord(last, member, rec)


def merged(streams: dict[str, Iterable[MergedRecord]]) -> Iterator[MergedRecord]:
    """The members' stamped streams as one, in stamp order: each member's
    own order kept, one stamp shared by several members ordered by member
    name, then LSN."""
    order = {name: i for i, name in enumerate(sorted(streams))}
    return heapq.merge(*streams.values(),
                       key=lambda m: (m.stamp, order[m.member], m.rec.lsn))


def read_group(plans: dict[str, MemberPlan], stamp_of: StampOf,
               progress: ReadProgress = no_read_progress) -> Iterator[MergedRecord]:
    """Every planned member's log, stamped and merged."""
    return merged({name: stamped(name, member_records(plan, progress), stamp_of)
                   for name, plan in plans.items()})
