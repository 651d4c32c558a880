"""Rebuild a lost control file from the extents themselves (MQ's BSDS lost:
recovered from an archive's copy and the logs, CSQJU003).

Every extent starts with a header naming its number, its first LSN and the
queue manager; a closed one ends with its EXTENT_END record. The chain is the
newest extent (the highest first LSN) and, walking back, every extent that
ends exactly where the next begins. The last CHECKPOINT_END in the chain gives
the checkpoint, restart and media LSNs. An extent whose header is unreadable
(preallocated, never written) or that does not join the chain (a circular
extent from an older cycle) is free. The archive flags and the inventory of
deleted extents come from the newest ``control.archived`` found in an archive
path, when there is one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import HarbormqError, LogCorrupt, LogMissing
from .checkpoint import read_checkpoint
from .control import ControlFile, ControlState, ExtentInfo, decode_copy
from .manager import RecoveryLog
from .reader import ExtentReader, read_header
from .records import RecordType, decode_json


@dataclass
class Found:
    number: int
    first_lsn: int
    end_lsn: int          # just past its last record
    closed: bool          # ends with EXTENT_END


def rebuild_control(log_dir: Path, qm_name: str, *, log_type: str, pages: int, primary: int,
                    secondary: int, archived_copies: list[Path] = ()
                    ) -> tuple[ControlState, list[str]]:
    """The control state the extents in ``log_dir`` imply, and what was found
    (lines for the operator). Nothing is written: ``write_rebuilt`` does that."""
    found: list[Found] = []
    notes: list[str] = []
    unwritten: list[int] = []
    for path in sorted(Path(log_dir).glob("S*.LOG")):
        try:
            head = read_header(path)
        except HarbormqError:
            notes.append(f"{path.name}: no extent header (never written): free")
            if path.stem[1:].isdigit():
                unwritten.append(int(path.stem[1:]))
            continue
        if head.qm_name != qm_name:
            raise LogCorrupt(f"{path.name} belongs to queue manager {head.qm_name!r}, not "
                             f"{qm_name!r}", path=str(path))
        if head.pages != pages:      # the extents, not qm.toml, say how big they are
            raise LogCorrupt(f"{path.name} is an extent of {head.pages} pages, qm.toml says "
                             f"{pages}: set log.file_pages = {head.pages} and run again",
                             path=str(path))
        reader = ExtentReader(path, newest=True)
        end = head.first_lsn
        for rec in reader.records():
            end = rec.end_lsn
        closed = reader.end is not None and reader.end.how == "extent_end"
        found.append(Found(head.extent_number, head.first_lsn, end, closed))
    if not found:
        raise LogMissing(f"no log extent with a header in {log_dir}: nothing to rebuild from")
    found.sort(key=lambda f: f.first_lsn)
    chain = [found[-1]]
    for f in reversed(found[:-1]):
        if f.closed and f.end_lsn == chain[0].first_lsn:
            chain.insert(0, f)
        elif f.end_lsn > chain[0].first_lsn or not f.closed:
            notes.append(f"extent {f.number} (LSN {f.first_lsn}..{f.end_lsn}) does not join "
                         "the chain: free")
    in_chain = {f.number for f in chain}
    extents = [ExtentInfo(number=f.number, first_lsn=f.first_lsn,
                          end_lsn=None if f is chain[-1] else f.end_lsn,
                          state="active" if f is chain[-1] else "full") for f in chain]
    if log_type == "circular":      # reusable; a linear log never goes back to one
        extents += [ExtentInfo(number=n, first_lsn=0, state="free")
                    for n in [f.number for f in found if f.number not in in_chain] + unwritten]
    state = ControlState(qm_name=qm_name, log_type=log_type, pages=pages, primary=primary,
                         secondary=secondary, extents=extents,
                         next_extent_number=max([f.number for f in found] + unwritten) + 1)
    _take_archive_flags(state, archived_copies, notes)
    _find_checkpoint(state, log_dir, qm_name, notes)
    notes.insert(0, f"chain: {len(chain)} extent(s), LSN {chain[0].first_lsn} to "
                 f"{chain[-1].end_lsn}; checkpoint at LSN {state.checkpoint_lsn or '-'}, "
                 f"restart LSN {state.restart_lsn}, media LSN {state.media_lsn}")
    return state, notes


def _take_archive_flags(state: ControlState, copies: list[Path], notes: list[str]) -> None:
    newest = None
    for path in copies:
        try:
            st = decode_copy(Path(path).read_bytes())
        except (OSError, ValueError):
            continue
        if newest is None or st.sequence > newest.sequence:
            newest = st
    if newest is None:
        return
    live = {e.number for e in state.extents}
    for old in newest.extents:
        mine = next((e for e in state.extents if e.number == old.number), None)
        if mine is not None and mine.state == "full" and mine.first_lsn == old.first_lsn:
            mine.archived = old.archived
        elif old.deleted and old.number not in live:
            state.extents.append(old)       # the inventory of archived, deleted extents
    state.sequence = newest.sequence
    notes.append(f"archive flags and inventory from an archive's control file (sequence "
                 f"{newest.sequence})")


def _find_checkpoint(state: ControlState, log_dir: Path, qm_name: str,
                     notes: list[str]) -> None:
    log = RecoveryLog(log_dir, qm_name)
    log.state = state
    chain = log.chain()
    present = [e for e in chain if log.extent_path(e.number).exists()]
    if not present:
        return
    last = None
    for rec in log.read_from(present[0].first_lsn):
        if rec.type == RecordType.CHECKPOINT_END:
            last = rec
    if last is None:
        state.restart_lsn = present[0].first_lsn
        state.media_lsn = present[0].first_lsn
        notes.append("no checkpoint in the chain: restart replays it whole")
        return
    head = decode_json(last.payload)
    state.checkpoint_lsn = last.lsn
    state.restart_lsn = head["restart_lsn"]
    if state.log_type == "linear":
        table = read_checkpoint(lambda lsn: next(log.read_from(lsn), None), last.lsn)
        media = [mp["replay_from"] for mp in table.get("media", {}).values()]
        state.media_lsn = min(media) if media else present[0].first_lsn


def write_rebuilt(log_dir: Path, state: ControlState) -> None:
    """Write both copies of the rebuilt control file (a sequence past any copy)."""
    state.sequence += 1
    ControlFile(Path(log_dir)).write(state)
