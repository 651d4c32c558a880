"""Finding and planning the extents a pipeline job reads (runs on the driver).

Planning reads only metadata, as a Parquet reader reads footers: the 4 KiB
extent header (extent number, first LSN) and the fixed header of the first
record (its timestamp). Records themselves are decoded only on executors, in
``read_extent`` (rows.py). The plan of one extent is a small frozen dataclass,
picklable, that names the file and the LSN/time bounds used to skip it.

Bounds: an extent holds the LSNs [first_lsn, next extent's first_lsn); the
times of its records lie in [its first record's time, the next extent's first
record's time], because records are appended in LSN order on one thread.
(This assumes the wall clock did not step backwards while the log was written.)
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import ConfigError, LogCorrupt
from ..log.reader import read_header
from ..log.records import (
    EXTENT_HEADER_SIZE,
    RECORD_HEADER,
    LogRecord,
    RecordDecodeError,
    RecordType,
    decode,
    decode_json,
)

#: how an extent file is recognised in a directory
EXTENT_GLOB = "*.LOG"


@dataclass(frozen=True, slots=True)
class ExtentPlan:
    """One extent, as planned on the driver and read on an executor."""
    path: str
    extent: int                 # extent number (the N of SnnnnnnN.LOG)
    first_lsn: int
    #: first LSN of the next extent (an upper bound of this one's), None for the newest
    next_lsn: int | None
    first_ts_ns: int | None     # time of the first record, None when it holds none
    next_ts_ns: int | None      # time of the next extent's first record
    newest: bool                # may end in a torn tail (as in the engine)
    qm_name: str = ""
    #: a conditional restart gave up this extent's records from here on
    stop_lsn: int | None = None
    #: this extent begins the log again after a conditional restart that gave up
    #: the LSNs [E, H): (E, H)
    given_up: tuple = ()


def find_extent_files(spec: str | list[str]) -> list[Path]:
    """Extent files named by one or more log/archive directories or globs."""
    specs = [spec] if isinstance(spec, str) else list(spec)
    out: list[Path] = []
    for item in specs:
        for part in [p for p in str(item).split(",") if p.strip()]:
            part = part.strip()
            p = Path(part)
            if p.is_dir():
                out += sorted(p.glob(EXTENT_GLOB))
            elif p.is_file():
                out.append(p)
            else:
                matched = sorted(Path(m) for m in glob.glob(part))
                if not matched:
                    raise ConfigError(f"no log extents at {part}: not a directory, a file or "
                                      "a glob that matches anything", msgid="HMQ7601E")
                out += [m for m in matched if m.is_file()]
    return out


def _first_record(path: Path, first_lsn: int) -> LogRecord | None:
    """The extent's first record if it is a whole valid record (a torn one
    bounds nothing)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        head = os.pread(fd, RECORD_HEADER.size, EXTENT_HEADER_SIZE)
        if len(head) < RECORD_HEADER.size:
            return None
        length = RECORD_HEADER.unpack_from(head, 0)[0]
        data = os.pread(fd, length, EXTENT_HEADER_SIZE) if length else b""
    finally:
        os.close(fd)
    try:
        return decode(data, 0, expected_lsn=first_lsn)
    except RecordDecodeError:
        return None


def _never_used(path: Path) -> bool:
    """A preallocated circular extent not yet written, or one being zeroed for reuse."""
    with open(path, "rb") as f:
        return not f.read(EXTENT_HEADER_SIZE).strip(b"\0")


def plan_extents(spec: str | list[str]) -> list[ExtentPlan]:
    """Plans of every extent under ``spec``, oldest first.

    The same extent seen twice (a log directory and its archive) is read once.
    Extents with no header (preallocated, never used) are left out."""
    by_first: dict[int, tuple[Path, object]] = {}
    for path in find_extent_files(spec):
        if path.stat().st_size < EXTENT_HEADER_SIZE:
            raise LogCorrupt(f"{path} is shorter than a log extent header", path=str(path),
                             offset=0)
        if _never_used(path):
            continue
        header = read_header(path)
        by_first.setdefault(header.first_lsn, (path, header))
    if not by_first:
        raise ConfigError(f"no log extents with data under {spec}", msgid="HMQ7601E")
    ordered = [by_first[k] for k in sorted(by_first)]
    firsts = [_first_record(p, h.first_lsn) for p, h in ordered]
    plans = [ExtentPlan(str(p), h.extent_number, h.first_lsn, None,
                        r.timestamp_ns if r is not None else None, None, False, h.qm_name)
             for (p, h), r in zip(ordered, firsts, strict=True)]
    plans = [replace(pl, given_up=tuple(decode_json(r.payload)["discarded"]))
             if r is not None and r.type == RecordType.LOG_CRESTART else pl
             for pl, r in zip(plans, firsts, strict=True)]
    plans = _without_given_up(plans, [list(pl.given_up) for pl in plans if pl.given_up])
    for i in range(len(plans) - 1):
        plans[i] = replace(plans[i], next_lsn=plans[i + 1].first_lsn,
                           next_ts_ns=plans[i + 1].first_ts_ns)
    plans[-1] = replace(plans[-1], newest=True)
    return plans


def _without_given_up(plans: list[ExtentPlan], cuts: list[list[int]]) -> list[ExtentPlan]:
    """A conditional restart gave up the log from E and went on at H, saying so
    in the first record at H (log/crestart.py): the extent holding E is read
    up to E only, and an extent starting in [E, H) (an archived copy of one
    given up) not at all."""
    out = []
    for plan in plans:
        if any(e <= plan.first_lsn < h for e, h in cuts):
            continue
        stop = min((e for e, _h in cuts if plan.first_lsn < e), default=None)
        out.append(replace(plan, stop_lsn=stop) if stop is not None else plan)
    return out


@dataclass(frozen=True, slots=True)
class ScanBounds:
    """What a scan keeps, from pushed-down filters; None = unbounded.
    LSN bounds are inclusive-exclusive [lsn_min, lsn_stop); times inclusive."""
    lsn_min: int | None = None
    lsn_stop: int | None = None
    ts_min: int | None = None
    ts_max: int | None = None
    objects: frozenset[str] | None = None

    def keeps_extent(self, plan: ExtentPlan) -> bool:
        if self.lsn_stop is not None and plan.first_lsn >= self.lsn_stop:
            return False
        if self.lsn_min is not None and plan.next_lsn is not None and \
                plan.next_lsn <= self.lsn_min:
            return False
        if self.ts_max is not None and plan.first_ts_ns is not None and \
                plan.first_ts_ns > self.ts_max:
            return False
        if self.ts_min is not None and plan.next_ts_ns is not None and \
                plan.next_ts_ns < self.ts_min:
            return False
        return True

    def keeps(self, lsn: int, ts_ns: int, obj: str) -> bool:
        return ((self.lsn_min is None or lsn >= self.lsn_min) and
                (self.lsn_stop is None or lsn < self.lsn_stop) and
                (self.ts_min is None or ts_ns >= self.ts_min) and
                (self.ts_max is None or ts_ns <= self.ts_max) and
                (self.objects is None or obj in self.objects))

    @property
    def unbounded(self) -> bool:
        return self == ScanBounds()
