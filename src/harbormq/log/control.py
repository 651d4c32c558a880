"""The log control file (MQ's ``amqhlctl.lfh``, z/OS's BSDS): the inventory of
extents with their LSN ranges, the last checkpoint, the restart point.

Two copies, ``control.1`` and ``control.2``, each replaced atomically, copy 1
first. Layout of one copy (little-endian)::

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
    log writer thread owns it while the queue manager runs."""

    def __init__(self, log_dir: Path, dual_dir: Path | None = None):
        self.paths = [log_dir / n for n in COPY_NAMES]
        if dual_dir is not None:
            self.paths += [dual_dir / n for n in COPY_NAMES]
        self.warnings: list[tuple[str, str]] = []

    def write(self, state: ControlState) -> None:
        """Write ``state`` to every copy, copy 1 first. The caller sets the
        sequence (+1 per update; the same one to rewrite a lagging copy)."""
        state.written_ns = time.time_ns()
        data = encode_copy(state)
        for i, path in enumerate(self.paths):
            atomic_write(path, data)
            if i == 0:
                crash_point("control.mid_rewrite")

    def load(self, *, repair: bool = True) -> ControlState:
        """Read and reconcile the copies (see the module docstring). Tools that
        only read (``log dump``, ``status``) pass ``repair=False``."""
        copies: list[ControlState | None] = []
        problems: list[str] = []
        for path in self.paths:
            try:
                copies.append(decode_copy(path.read_bytes()))
            except FileNotFoundError:
                copies.append(None)
                problems.append(f"{path} is missing")
            except ValueError as exc:
                copies.append(None)
                problems.append(f"{path} is damaged ({exc})")
        valid = [(p, c) for p, c in zip(self.paths, copies, strict=False) if c is not None]
        if not valid:
            raise ControlFileDamaged(
                "no readable copy of the log control file: " + "; ".join(problems),
                hint="restore the queue manager from a backup", path=str(self.paths[0]))
        newest_path, newest = max(valid, key=lambda pc: pc[1].sequence)
        for path, c in valid:
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
            self.write(newest)
        return newest
