"""The log control file (MQ's ``amqhlctl.lfh``, z/OS's BSDS): the inventory of
extents with their LSN ranges, the last checkpoint, the restart point.

Two copies, ``control.1`` and ``control.2``, each replaced atomically, copy 1
first. A dual log (z/OS's dual BSDS) keeps both in the log directory and both
in the dual directory, written in the order log/control.1, dual/control.1,
log/control.2, dual/control.2: each directory alone holds a whole log with two
copies of its control file, also once the other copy of the log is given up.
Layout of one copy (little-endian)::

    0   8   magic        b"HMQCTL01"
    8   8   sequence     +1 at every update
    16  8   written_ns   wall-clock time of the update
    24  4   body length
    28  4   crc32c       CRC32C of bytes [0, 28) and of the body
    32  n   body         JSON (ControlState)

Reading both (``load``):
* both valid and equal sequence and body: use it;
* both valid, sequences one apart: an update was interrupted between the two
  copies; use the newer and rewrite the older, with a warning (HMQ7121W);
* both valid and otherwise different: refuse to start (HMQ7120E, MQ's CSQJ120E):
  one copy was probably restored on its own;
* one valid: use it and rewrite the other, with a warning (HMQ7121W);
* none valid: refuse to start.

A dual log that lost one copy while running records it (``degraded``: which
copy, ``degraded_lsn``: how far it was known whole): the copy on that
directory is stale and takes no part in the rules above, and is no longer
written. A copy saying the other is degraded wins over it at the same
sequence (the mark may be all that was written after the failure).
"""

from __future__ import annotations

import json
import struct
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from crc32c import crc32c

from ..crashpoints import crash_point
from ..errors import ControlFileDamaged, ControlFileMismatch
from ..fsutil import atomic_write

CONTROL_HEADER = struct.Struct("<8sQQII")
assert CONTROL_HEADER.size == 32
CONTROL_MAGIC = b"HMQCTL01"
COPY_NAMES = ("control.1", "control.2")
#: the two copies of a dual log, by the directory they live in
PRIMARY, DUAL = "primary", "dual"


@dataclass
class ExtentInfo:
    number: int
    first_lsn: int
    #: LSN just past the last record; None while the extent is the active one
    end_lsn: int | None = None
    #: "active" (being written), "full" (closed), "free" (reusable, circular only)
    state: str = "active"
    #: a linear log's closed extent: copied to the archive (or said to be by
    #: the operator: ``harbormq log archived``)
    archived: bool = False
    #: its file was deleted from the log directory (log management): the entry
    #: stays as the archive inventory, up to ``log.max_archives`` of them
    deleted: bool = False
    #: closed at ``end_lsn`` by a conditional restart (log/crestart.py): its
    #: file holds given-up records after that, which readers never read
    cut: bool = False


@dataclass
class ControlState:
    qm_name: str
    log_type: str                  # "circular" | "linear"
    pages: int                     # extent size in 4 KiB pages
    primary: int
    secondary: int
    extents: list[ExtentInfo] = field(default_factory=list)
    next_extent_number: int = 0
    checkpoint_lsn: int = 0        # LSN of the last CHECKPOINT_END record
    restart_lsn: int = 0           # oldest LSN restart needs (redo start)
    media_lsn: int = 0             # oldest LSN media recovery needs (linear)
    sequence: int = 0
    written_ns: int = 0
    #: written to two directories (log.dual_path)
    dual: bool = False
    #: "" or the copy ("primary" | "dual") that failed and is no longer written
    degraded: str = ""
    #: the degraded copy holds the log whole below this LSN (0: trust none of it)
    degraded_lsn: int = 0
    #: a conditional restart recorded and not yet carried out (CrestartPlan)
    crestart: dict | None = None
    #: a new log ('harbormq reset-log'): the first start takes media images
    images_needed: bool = False
    #: unit-of-work and object ids below these were used by an older log
    #: ('harbormq reset-log'): never given again ({"uow": n, "object": n})
    id_floor: dict = field(default_factory=dict)
    #: every conditional restart carried out, {"from": E, "to": H, next ids}:
    #: the log from E was given up and went on at H; a store whose recovery
    #: LSN is in (E, H) holds effects of the given-up log
    discarded: list = field(default_factory=list)
    #: a standby queue manager kept current by log replay (qmgr/standby.py):
    #: {"archives": [paths], "since_ns": n, "replayed_lsn": n, "active_sha": s};
    #: it cannot start until 'harbormq activate' removes this
    standby: dict | None = None
    #: when 'harbormq restore' wrote this log (0: never, or started since):
    #: only such a queue manager can become a standby
    restored_ns: int = 0

    def to_json(self) -> bytes:
        d = asdict(self)
        d.pop("sequence")
        d.pop("written_ns")
        return json.dumps(d, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, body: bytes, sequence: int, written_ns: int) -> "ControlState":
        d = json.loads(body)
        d["extents"] = [ExtentInfo(**e) for e in d["extents"]]
        return cls(**d, sequence=sequence, written_ns=written_ns)

    def extent(self, number: int) -> ExtentInfo:
        for e in self.extents:
            if e.number == number:
                return e
        raise KeyError(number)

    @property
    def active(self) -> ExtentInfo:
        return next(e for e in self.extents if e.state == "active")

    def discarded_at(self, lsn: int, name: str | None) -> dict | None:
        """The conditional restart whose given-up log a store with recovery LSN
        ``lsn`` may hold effects of: ``lsn`` lies in its range (E, H) and that
        log changed the object (``name``; None: the catalog, any definition)."""
        for d in self.discarded:
            if d["from"] < lsn < d["to"]:
                if name is None and d["definitions"]:
                    return d
                if name is not None and (d["touched"] is None or name in d["touched"]):
                    return d
        return None

    def discarded_between(self, end: int, start: int) -> bool:
        """Whether a conditional restart gave up the log from ``end`` to
        ``start`` (the gap between a cut extent and the next one)."""
        return any(d["from"] == end and d["to"] == start for d in self.discarded)


def encode_copy(state: ControlState) -> bytes:
    body = state.to_json()
    head = CONTROL_HEADER.pack(CONTROL_MAGIC, state.sequence, state.written_ns, len(body), 0)
    crc = crc32c(body, crc32c(head[:28]))
    return head[:28] + struct.pack("<I", crc) + body


def decode_copy(data: bytes) -> ControlState:
    if len(data) < CONTROL_HEADER.size:
        raise ValueError("short file")
    magic, seq, written, blen, crc = CONTROL_HEADER.unpack_from(data, 0)
    if magic != CONTROL_MAGIC:
        raise ValueError("bad magic")
    body = data[CONTROL_HEADER.size:CONTROL_HEADER.size + blen]
    if len(body) != blen:
        raise ValueError("short body")
    if crc32c(body, crc32c(data[:28])) != crc:
        raise ValueError("CRC mismatch")
    return ControlState.from_json(body, seq, written)


class ControlFile:
    """Both copies of one queue manager's control file. Not thread-safe: the
    log writer thread owns it while the queue manager runs.

    ``dual_dir``: the log is dual; copy 2 lives there."""

    def __init__(self, log_dir: Path, dual_dir: Path | None = None):
        self.dual = dual_dir is not None
        if dual_dir is None:
            self.paths = [log_dir / COPY_NAMES[0], log_dir / COPY_NAMES[1]]
            #: which copy of the log each path belongs to
            self.copy_of = [PRIMARY, PRIMARY]
        else:
            self.paths = [log_dir / COPY_NAMES[0], dual_dir / COPY_NAMES[0],
                          log_dir / COPY_NAMES[1], dual_dir / COPY_NAMES[1]]
            self.copy_of = [PRIMARY, DUAL, PRIMARY, DUAL]
        self.warnings: list[tuple[str, str]] = []

    def write(self, state: ControlState, *, on_copy_error=None) -> None:
        """Write ``state`` to every copy not degraded, in order. The caller
        sets the sequence (+1 per update; the same one to rewrite a lagging
        copy). ``on_copy_error(copy, exc)``: a dual log's copy could not be
        written (an OSError); the handler degrades it and writes the rest."""
        state.written_ns = time.time_ns()
        data = encode_copy(state)
        for i, path in enumerate(self.paths):
            if self.dual and self.copy_of[i] == state.degraded:
                continue
            try:
                atomic_write(path, data)
            except OSError as exc:
                if on_copy_error is None or not self.dual or state.degraded:
                    raise
                on_copy_error(self.copy_of[i], exc)
                return
            if i == 0:
                crash_point("control.mid_rewrite")

    def degrade(self, state: ControlState, copy: str, degraded_lsn: int) -> None:
        """Stop writing ``copy``: record it in ``state`` and write the copy
        that is left (an OSError there is a log that cannot be written)."""
        state.degraded, state.degraded_lsn = copy, degraded_lsn
        self.write(state)

    def load(self, *, repair: bool = True) -> ControlState:
        """Read and reconcile the copies (see the module docstring). Tools that
        only read (``log dump``, ``status``) pass ``repair=False``."""
        copies: list[ControlState | None] = []
        unreadable: dict[int, str] = {}
        for i, path in enumerate(self.paths):
            try:
                copies.append(decode_copy(path.read_bytes()))
            except FileNotFoundError:
                copies.append(None)
                unreadable[i] = f"{path} is missing"
            except (ValueError, OSError) as exc:
                copies.append(None)
                unreadable[i] = f"{path} is damaged ({exc})"
        valid = [(i, c) for i, c in enumerate(copies) if c is not None]
        if not valid:
            raise ControlFileDamaged(
                "no readable copy of the log control file: " + "; ".join(unreadable.values()),
                hint="restore the queue manager from a backup", path=str(self.paths[0]))
        # the newest; at one sequence, a copy that says the other is degraded
        newest_i, newest = max(valid, key=lambda ic: (ic[1].sequence, bool(ic[1].degraded)))
        newest_path = self.paths[newest_i]
        self._check_dual(newest, newest_path)
        if self.dual and newest.degraded:
            # the degraded copy's directory is stale by declaration: not compared,
            # not rewritten (harbormq log recover-copy re-creates it)
            stale = {i for i in range(len(self.paths)) if self.copy_of[i] == newest.degraded}
            valid = [(i, c) for i, c in valid if i not in stale]
            unreadable = {i: p for i, p in unreadable.items() if i not in stale}
        problems = list(unreadable.values())
        for i, c in valid:
            path = self.paths[i]
            if c.sequence == newest.sequence and c.to_json() != newest.to_json():
                raise ControlFileMismatch(
                    f"control file copies {newest_path} and {path} have the same sequence "
                    f"{c.sequence} but different contents", path=str(path),
                    hint="one copy was changed outside harbormq; restore both from one backup")
            if newest.sequence - c.sequence > 1:
                raise ControlFileMismatch(
                    f"control file copies disagree: {newest_path} is at sequence "
                    f"{newest.sequence}, {path} at {c.sequence}; one of them was probably "
                    "restored on its own", path=str(path),
                    hint="restore both copies from the same backup, or delete the one you "
                         "know is stale to start from the other")
            if c.sequence != newest.sequence:
                problems.append(f"{path} is one update behind {newest_path} (an update was "
                                "interrupted)")
        if problems:
            if not repair:
                self.warnings.append(("HMQ7121W", "; ".join(problems)))
                return newest
            msg = "; ".join(problems) + f"; rewritten from {newest_path}"
            self.warnings.append(("HMQ7121W", msg))
            self.write(newest, on_copy_error=lambda copy, exc: self._degrade_at_load(
                newest, copy, exc))
        return newest

    def _check_dual(self, state: ControlState, path: Path) -> None:
        """qm.toml and the log agree on whether the log has two copies."""
        if state.dual and not self.dual:
            raise ControlFileMismatch(
                f"the log of queue manager {state.qm_name} is dual (two copies), but no dual "
                f"path is configured ({path} says so)", path=str(path),
                hint="put log.dual_path back in qm.toml (the directory of the second copy)")
        if self.dual and not state.dual:
            raise ControlFileMismatch(
                f"log.dual_path names {self.paths[1].parent}, but the log of queue manager "
                f"{state.qm_name} was written with one copy ({path})", path=str(path),
                dual_mismatch="single",
                hint=f"run 'harbormq log recover-copy {state.qm_name}' (queue manager "
                     "stopped) to make the second copy, or remove log.dual_path")

    def _degrade_at_load(self, state: ControlState, copy: str, exc: OSError) -> None:
        self.degrade(state, copy, 0)
        where = self.paths[self.copy_of.index(copy)].parent
        self.warnings.append(("HMQ7490W", f"the {copy} copy of the log of queue manager "
                              f"{state.qm_name} in {where} cannot be written ({exc}): the log "
                              f"goes on with one copy; run 'harbormq log recover-copy "
                              f"{state.qm_name}' once the directory works again"))
