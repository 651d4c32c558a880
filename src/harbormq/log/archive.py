"""Archived extents: the copy, the manifest, recall and scrub.

An archive path holds, per queue manager (``<path>/<QM>/``, the name mapped by
``fsutil.file_name``)::

    S0000003.LOG      a closed extent, copied whole
    control.archived  the control file as it was at the latest archive (MQ
                      writes the BSDS into every archive)
    manifest.jsonl    one line per archived extent, oldest first

A manifest line names the extent, its LSN range, the times of its first and
last records, its size and SHA-256, when it was archived, and ``prev``: the
SHA-256 of the previous line. A gap, a line edited or a file changed is found
by ``scrub``. Every file is written as a temporary file, fsynced, renamed
into place and its directory fsynced, and the manifest line is appended (and
fsynced) only after the extent it names is durable: there is never an entry
for a file that is not there.

Up to two archive paths (MQ's dual archive): each gets its own copy and its
own manifest. Recall takes the first copy whose hash is right.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .. import fsutil
from ..errors import LogCorrupt, LogMissing
from ..fsutil import FILE_MODE, atomic_write, copy_durably, file_name, fsync_dir, make_dirs
from .reader import ExtentReader, closed_at, read_header
from .records import RecordType, decode_json, extent_file_name

MANIFEST = "manifest.jsonl"
CONTROL_COPY = "control.archived"
COPY_CHUNK = 4 << 20


@dataclass(frozen=True)
class ArchiveEntry:
    name: str
    number: int
    first_lsn: int
    end_lsn: int
    first_ns: int
    last_ns: int
    size: int
    sha256: str
    archived_ns: int
    prev: str
    #: closed by a conditional restart at end_lsn (records after it are given up)
    cut: bool = False

    def line(self) -> bytes:
        return json.dumps(self.__dict__, sort_keys=True, separators=(",", ":")).encode() + b"\n"


def archive_dir(path: Path, qm_name: str) -> Path:
    return Path(path) / file_name(qm_name)


def read_manifest(directory: Path) -> list[tuple[ArchiveEntry, bytes]]:
    """(entry, its line) in order. Every append is fsynced before the next, so
    only the last line can be torn (a crash mid-append): it is not an entry.
    LogCorrupt names any other line that is not one."""
    return _read_manifest(directory)[0]


def _read_manifest(directory: Path) -> tuple[list[tuple[ArchiveEntry, bytes]], int]:
    """(entries, bytes of the manifest that hold them)."""
    path = directory / MANIFEST
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], 0
    out, good = [], 0
    lines = data.splitlines(keepends=True)
    for n, line in enumerate(lines, 1):
        try:
            if not line.endswith(b"\n"):
                raise ValueError("no end of line")
            out.append((ArchiveEntry(**json.loads(line)), line))
            good += len(line)
        except (ValueError, TypeError) as exc:
            if n == len(lines):
                break       # the torn tail of an append cut short: it names nothing
            raise LogCorrupt(f"archive manifest {path} line {n} is unreadable: {exc}",
                             path=str(path)) from None
    return out, good


def _dt_text(ns: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ns / 1e9)) + " UTC"


def file_sha256(path: Path) -> str:
    return fsutil.file_sha256(path)[1]


def _record_times(path: Path, end_lsn: int | None = None) -> tuple[int, int]:
    """The first and last record times (of a cut extent: up to its cut)."""
    first = last = 0
    for rec in ExtentReader(path, newest=False).records(to_lsn=end_lsn):
        first = first or rec.timestamp_ns
        last = rec.timestamp_ns
    return first, last


def archive_extent(extent_path: Path, number: int, first_lsn: int, end_lsn: int,
                   control: bytes, paths: list[Path], qm_name: str, *,
                   cut: bool = False) -> list[ArchiveEntry]:
    """Copy one closed extent into every archive path, then ``control`` (an
    encoded control-file copy), then the manifest line. An extent already in a
    manifest with the same hash is not copied again there. Returns the
    entries written or found."""
    first_ns, last_ns = _record_times(extent_path, end_lsn if cut else None)
    done = []
    for base in paths:
        directory = archive_dir(base, qm_name)
        make_dirs(directory)
        entries, good = _read_manifest(directory)
        known = next((e for e, _ in entries if e.number == number), None)
        if known is not None:
            # the same extent archived before (a retry), or another log's extent
            # of that number (a queue manager deleted and created again with
            # the same archive path): never taken for this one unchecked
            if (known.first_lsn, known.end_lsn, known.size) != \
                    (first_lsn, end_lsn, extent_path.stat().st_size) or \
                    known.sha256 != file_sha256(extent_path):
                raise LogCorrupt(
                    f"archive {directory} already holds a different {known.name} (LSN "
                    f"{known.first_lsn}..{known.end_lsn}, archived "
                    f"{_dt_text(known.archived_ns)}): it belongs to another log of a queue "
                    f"manager named {qm_name}; nothing was archived there",
                    path=str(directory / known.name),
                    hint="give this queue manager its own archive path, or move the old "
                         "archive away")
            if (directory / known.name).exists():
                done.append(known)
                continue
        size, sha = copy_durably(extent_path, directory / extent_file_name(number))
        atomic_write(directory / CONTROL_COPY, control)
        prev = hashlib.sha256(entries[-1][1]).hexdigest() if entries else ""
        entry = ArchiveEntry(name=extent_file_name(number), number=number,
                             first_lsn=first_lsn, end_lsn=end_lsn, first_ns=first_ns,
                             last_ns=last_ns, size=size, sha256=sha,
                             archived_ns=time.time_ns(), prev=prev, cut=cut)
        fd = os.open(directory / MANIFEST, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
        try:
            if os.fstat(fd).st_size != good:
                os.ftruncate(fd, good)      # drop a torn tail before appending after it
            os.write(fd, entry.line())
            os.fsync(fd)
        finally:
            os.close(fd)
        if not entries:
            fsync_dir(directory)      # the manifest's name, the first time
        done.append(entry)
    return done


def find(paths: list[Path], qm_name: str, number: int) -> list[tuple[Path, ArchiveEntry]]:
    """Every archived copy of extent ``number``: (file, entry)."""
    out = []
    for base in paths:
        directory = archive_dir(base, qm_name)
        for entry, _ in read_manifest(directory):
            if entry.number == number:
                out.append((directory / entry.name, entry))
    return out


def recall(paths: list[Path], qm_name: str, number: int, first_lsn: int, dest: Path,
           say: Callable[[str, str], None]) -> Path:
    """Fetch extent ``number`` back into the log directory ``dest`` from the
    first archived copy whose hash is right; LogMissing when none is."""
    problems = []
    for src, entry in find(paths, qm_name, number):
        if entry.first_lsn != first_lsn:
            problems.append(f"{src} holds LSN {entry.first_lsn}.., not {first_lsn}..")
            continue
        if not src.exists():
            problems.append(f"{src} is missing")
            continue
        try:
            owner = read_header(src).qm_name
        except LogCorrupt as exc:
            problems.append(exc.message)
            continue
        if owner != qm_name[:48]:
            problems.append(f"{src} belongs to queue manager {owner}")
            continue
        size, sha = copy_durably(src, dest / entry.name, expect=(entry.size, entry.sha256))
        if sha != entry.sha256 or size != entry.size:
            problems.append(f"{src} fails its hash (SHA-256 {sha[:16]}.., the manifest says "
                            f"{entry.sha256[:16]}..)")
            continue
        say("HMQ7484I", f"log extent {entry.name} (LSN {entry.first_lsn}..{entry.end_lsn}) "
            f"recalled from the archive {src.parent} (SHA-256 verified)")
        return dest / entry.name
    where = "; ".join(problems) or ("no archive path holds it (" +
                                    (", ".join(map(str, paths)) or "none configured") + ")")
    raise LogMissing(f"log extent {extent_file_name(number)} (LSN {first_lsn}..) is not in the "
                     f"log directory and cannot be recalled: {where}", lsn=first_lsn,
                     hint="put a copy of it back in the log directory or an archive path")


def scrub(paths: list[Path], qm_name: str) -> list[dict]:
    """Check every archive path: the manifest's hash chain, every file's size
    and SHA-256, every record's CRC. One report per path; ``bad`` names the
    first problem (None when all is well)."""
    reports = []
    for base in paths:
        directory = archive_dir(base, qm_name)
        report = {"path": str(directory), "extents": 0, "bytes": 0, "bad": None}
        reports.append(report)
        try:
            entries = read_manifest(directory)
        except LogCorrupt as exc:
            report["bad"] = exc.message
            continue
        prev_line = b""
        prev_end, prev_cut = None, False
        for entry, line in entries:
            expected = hashlib.sha256(prev_line).hexdigest() if prev_line else ""
            problem = None
            if entry.prev != expected:
                problem = (f"manifest entry {entry.name}: the chain of hashes is broken (an "
                           "entry before it was removed or edited)")
            elif prev_end is not None and entry.first_lsn != prev_end and not prev_cut and \
                    not _resumes_after_cut(directory / entry.name, prev_end, entry.first_lsn):
                problem = (f"manifest entry {entry.name} starts at LSN {entry.first_lsn}, the "
                           f"one before ends at {prev_end}: a gap in the archive")
            else:
                problem = _check_file(directory / entry.name, entry)
            if problem:
                report["bad"] = problem
                break
            report["extents"] += 1
            report["bytes"] += entry.size
            prev_line, prev_end, prev_cut = line, entry.end_lsn, entry.cut
    return reports


def _resumes_after_cut(path: Path, prev_end: int, first_lsn: int) -> bool:
    """Whether the extent at ``path`` begins the log again after a conditional
    restart that gave up the LSNs between (its first record says so)."""
    try:
        rec = next(iter(ExtentReader(path, newest=False).records()), None)
    except (LogCorrupt, LogMissing):
        return False
    if rec is None or rec.type != RecordType.LOG_CRESTART:
        return False
    given_up_from, resumed_at = decode_json(rec.payload)["discarded"]
    return given_up_from <= prev_end and resumed_at == first_lsn


def _check_file(path: Path, entry: ArchiveEntry) -> str | None:
    if not path.exists():
        return f"{path} is missing"
    if path.stat().st_size != entry.size:
        return f"{path} is {path.stat().st_size} bytes, the manifest says {entry.size}"
    if file_sha256(path) != entry.sha256:
        return f"{path} fails its SHA-256"
    try:
        reader = ExtentReader(path, newest=False)
        for _rec in reader.records(to_lsn=entry.end_lsn if entry.cut else None):
            pass
    except LogCorrupt as exc:
        return f"{path}: {exc.message}"
    end = reader.end
    if not closed_at(end, entry.end_lsn, entry.cut):
        return (f"{path} ends at LSN {end.lsn if end else '?'} "
                f"({end.how if end else 'unread'}), the manifest says {entry.end_lsn}")
    return None
