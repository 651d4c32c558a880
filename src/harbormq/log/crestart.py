"""Conditional restart (z/OS's CSQJU003 CRESTART ENDRBA/ENDTIME): give up the
log after a point, for when its tail is lost for good or must not be replayed.

Two steps, as on z/OS:

1. ``plan`` (``harbormq log crestart``, queue manager stopped) reads the log,
   finds the cut, the last checkpoint wholly before it, and exactly what the
   cut loses: the units of work committed after it (their puts gone, their
   gets undone), the auto-committed puts and gets after it, the definitions
   changed after it, the units of work in doubt at it. With ``--yes`` the
   plan is recorded in the control file (``ControlState.crestart``).
2. ``apply`` (the next start, first thing in restart) carries it out.

**The cut.** ``E``, a record boundary: every record at or after E is given up.
The extent holding E keeps its file unchanged and is closed at E (its control
entry says ``cut``; readers stop there), so an archived copy of it stays
valid. Every later extent's files are renamed ``S…LOG.given-up.N`` beside
it (as a torn tail is kept: renamed within its directory, never deleted,
never read as an extent again), and the whole plan is kept as
``crestart.N.json``. The log resumes in a new extent whose first
LSN ``H`` lies past every LSN the old log (or any store) ever reached, and
whose first record, LOG_CRESTART, says ``[E, H)`` was discarded: a tool that
reads extent files without the control file (the pipeline) learns the cut
from the log itself.

**Why a gap.** A store whose recovery LSN lies in ``(E, H)`` holds effects of
the discarded log, whatever happens later: restart treats it as damaged
(recreated from its media image on a linear log). Were the log to resume at
E, a store flushed from the discarded tail would be indistinguishable from
one flushed from the new log once the new log grew past its LSN.

**Crash safety.** ``apply`` is idempotent up to its last step, the control
file write that clears the pending record: moving files aside and creating
the new extent are redone as often as needed, and nothing before that write
changes what the old control file describes as needed.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Callable

from ..crashpoints import crash_point
from ..errors import HarbormqError, LogError, LogMissing
from ..fsutil import atomic_write, fsync_dir, rename_durably
from .checkpoint import read_checkpoint
from .control import ControlState, ExtentInfo
from .records import (
    EXTENT_HEADER_SIZE,
    ExtentHeader,
    LogRecord,
    Message,
    MessageRef,
    RecordType,
    decode_json,
    encode,
    encode_json,
    extent_file_name,
)
from .replay import CommitRule, PendingOp

#: a given-up extent's file is renamed ``S…LOG`` + this + N (N: the control
#: sequence at which the conditional restart was carried out)
GIVEN_UP = ".given-up."
#: messages listed one by one in a plan (the counts are always whole)
LIST_LIMIT = 1000


class CrestartError(LogError):
    msgid = "HMQ7132E"


@dataclass
class CrestartPlan:
    requested: str                    # what the operator asked for, as text
    cut_lsn: int                      # E: every record at or after it is given up
    resume_lsn: int                   # H: where the log goes on
    checkpoint_lsn: int               # the last checkpoint wholly before E (0: none)
    restart_lsn: int                  # where restart redo then starts
    media_lsn: int
    cut_extent: str                   # the extent holding E (closed there)
    discarded_extents: list[str] = field(default_factory=list)
    unreadable_extents: list[str] = field(default_factory=list)
    log_end_lsn: int = 0              # how far the log could be read
    records_discarded: int = 0
    bytes_discarded: int = 0
    #: units of work whose COMMIT lies at or after E: lost whole
    uows_lost: list[dict] = field(default_factory=list)
    #: units of work prepared before E and not ended before it: stay in doubt
    uows_in_doubt: list[int] = field(default_factory=list)
    #: units of work in flight at E: backed out at restart
    uows_in_flight: list[int] = field(default_factory=list)
    #: per queue: committed puts lost, committed gets (and expiries) undone: those
    #: messages come back
    puts_lost: dict[str, int] = field(default_factory=dict)
    gets_undone: dict[str, int] = field(default_factory=dict)
    messages_lost: list[dict] = field(default_factory=list)      # up to LIST_LIMIT
    messages_back: list[dict] = field(default_factory=list)      # up to LIST_LIMIT
    definitions: list[dict] = field(default_factory=list)
    #: objects the given-up log changed (None: not known, part of it is unreadable)
    touched: list[str] | None = field(default_factory=list)
    #: stores written after the point that hold such changes (queue: recovery
    #: LSN): damaged at restart, recreated from their media images on a linear log
    stores_past_point: dict[str, int] = field(default_factory=dict)
    next_uow_id: int = 0
    next_object_id: int = 0
    recorded_ns: int = 0

    def as_dict(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, d: dict) -> "CrestartPlan":
        known = {f.name for f in fields(cls)}      # (a plan recorded by another release)
        return cls(**{k: v for k, v in d.items() if k in known})

    def summary(self) -> str:
        puts, gets = sum(self.puts_lost.values()), sum(self.gets_undone.values())
        text = (f"the log from LSN {self.cut_lsn} ({self.requested}) is given up: "
                f"{self.records_discarded} records, {len(self.uows_lost)} unit(s) of work "
                f"committed after the point, {puts} committed put(s) lost, {gets} committed "
                f"get(s) undone (those messages come back), {len(self.definitions)} "
                f"definition change(s) lost, {len(self.uows_in_flight)} unit(s) of work in "
                f"flight at the point backed out, {len(self.uows_in_doubt)} in doubt")
        if self.unreadable_extents:
            text += ("; what " + ", ".join(self.unreadable_extents) + " held cannot be read "
                     "and is not counted")
        return text


# -- planning -------------------------------------------------------------------------

def plan(log, *, end_lsn: int | None = None, end_time_ns: int | None = None,
         requested: str = "", store_lsns: dict[str, int] | None = None,
         catalog_lsn: int = 0,
         progress: Callable[[str, int, int], None] | None = None) -> CrestartPlan:
    """What a conditional restart at ``end_lsn`` (or at the first record
    written after ``end_time_ns``) would do. ``log`` is opened, not written.
    ``store_lsns``: the recovery LSN of every queue's store by its directory
    name, ``catalog_lsn`` the catalog's (the resume LSN lies past all of them;
    a store past the point is damaged at restart)."""
    st: ControlState = log.state
    if st.crestart:
        raise CrestartError(
            f"a conditional restart is already recorded for queue manager {st.qm_name} "
            f"(at LSN {st.crestart['cut_lsn']})",
            hint=f"start the queue manager to carry it out, or cancel it with 'harbormq log "
                 f"crestart {st.qm_name} --cancel'")
    chain = log.chain()
    present = [e for e in chain if log.extent_present(e)]
    if not present:
        raise LogMissing(f"no extent of the log of {st.qm_name} is on disk",
                         hint="recall extents from the archive first (a start with archive "
                              "paths configured does), or use 'harbormq reset-log'")
    cut = _find_cut(log, chain, end_lsn, end_time_ns)
    cut_ext = _extent_holding(chain, cut)
    if cut_ext is None or cut <= chain[0].first_lsn:
        raise CrestartError(
            f"LSN {cut} leaves nothing of the log of {st.qm_name}: the oldest extent kept "
            f"starts at {chain[0].first_lsn}",
            hint="a log given up whole is 'harbormq reset-log'")
    checkpoint_lsn, table = _checkpoint_before(log, chain, cut)
    if table is not None:
        restart_lsn = min(c for c in [table["begin_lsn"], table["restart_lsn"]] +
                          [u["first_lsn"] for u in table["uows"]] if c is not None)
        media = table.get("media") or {}
        media_lsn = min((mp["replay_from"] for mp in media.values()), default=0) \
            if st.log_type == "linear" else 0
    elif chain[0].first_lsn == 0 and log.extent_present(chain[0]):
        restart_lsn, media_lsn = 0, 0      # the whole log from its first record
    else:
        raise CrestartError(
            f"no checkpoint wholly before LSN {cut} is in the log of {st.qm_name} on disk "
            f"(the oldest extent there starts at LSN {present[0].first_lsn})",
            hint="recall the older extents from the archive into the log directory, or "
                 "choose a later point")
    _need_on_disk(log, chain, restart_lsn, cut, "restart from the checkpoint before it")
    if media_lsn:
        _need_on_disk(log, chain, media_lsn, cut, "media recovery of the stores written "
                      "after it")
    if st.log_type == "circular" and cut_ext.state == "active" and \
            not any(e.state == "free" for e in st.extents) and \
            len(st.extents) >= st.primary + st.secondary:
        raise CrestartError(
            f"every extent of the circular log of {st.qm_name} is in use and the point lies in "
            "the newest one: the log could not go on after the cut",
            hint="choose a point in an older extent, or resolve the units of work that pin "
                 "the log first")
    p = CrestartPlan(requested=requested or f"LSN {cut}", cut_lsn=cut, resume_lsn=0,
                     checkpoint_lsn=checkpoint_lsn, restart_lsn=restart_lsn,
                     media_lsn=media_lsn, cut_extent=extent_file_name(cut_ext.number))
    _list_losses(log, chain, p, progress)
    store_lsns = store_lsns or {}
    p.stores_past_point = {n: lsn for n, lsn in sorted(store_lsns.items())
                           if lsn > cut and (p.touched is None or n in p.touched)}
    definitions_lost = p.definitions or p.touched is None
    if catalog_lsn > cut and definitions_lost and st.log_type == "circular":
        raise CrestartError(
            f"the definitions of queue manager {st.qm_name} were last written at LSN "
            f"{catalog_lsn}, after the point (LSN {cut}), and a circular log holds no media "
            "image to rebuild them from: the queue manager could not start",
            hint=f"choose a point at or after LSN {catalog_lsn}, or restore the queue "
                 "manager from a backup")
    bound = max(e.first_lsn for e in st.extents) + log.extent_size
    bound = max([bound, p.log_end_lsn + 1, catalog_lsn + 1] +
                [v + 1 for v in store_lsns.values()])
    p.resume_lsn = (bound + 4095) // 4096 * 4096
    p.discarded_extents = [extent_file_name(e.number) for e in chain
                           if e.first_lsn >= cut and e is not cut_ext]
    return p


def _need_on_disk(log, chain: list[ExtentInfo], from_lsn: int, cut: int, what: str) -> None:
    """Every extent from ``from_lsn`` up to the cut is in the chain and on disk:
    else the cut, once carried out, could never be restarted from."""
    holding = _extent_holding(chain, from_lsn + 1)
    if holding is None:
        raise CrestartError(
            f"{what} needs the log from LSN {from_lsn}, which is no longer in the log of "
            f"{log.qm_name} (a circular log reused its extent, or it was deleted)",
            needs_lsn=from_lsn, hint="choose a later point, or recall the extent from the "
                                     "archive first")
    for e in chain:
        if e.first_lsn < cut and (e.end_lsn is None or e.end_lsn > from_lsn) and \
                not log.extent_present(e):
            raise CrestartError(
                f"{what} needs {extent_file_name(e.number)} (LSN {e.first_lsn}..), which is "
                "not on disk", needs_lsn=from_lsn,
                hint="recall it from the archive (configure the archive path), or choose a "
                     "later point")


def _extent_holding(chain: list[ExtentInfo], lsn: int) -> ExtentInfo | None:
    """The extent whose records run up to ``lsn`` (at a boundary, the one before)."""
    for e in chain:
        if e.first_lsn < lsn and (e.end_lsn is None or lsn <= e.end_lsn):
            return e
    return None


def _records(log, e: ExtentInfo, from_lsn: int | None = None):
    """One extent's records, read as restart reads them (a dual log's other
    copy where one fails; a cut extent up to its cut)."""
    for rec in log.scan(max(from_lsn or 0, e.first_lsn)):
        if e.end_lsn is not None and rec.lsn >= e.end_lsn:
            return
        yield rec
        if rec.type == RecordType.EXTENT_END:
            return


def _find_cut(log, chain, end_lsn, end_time_ns) -> int:
    """The record boundary E: before the first record that ends after
    ``end_lsn``, or the first record written after ``end_time_ns``."""
    if end_lsn is not None:
        e = _extent_holding(chain, end_lsn) or (chain[0] if end_lsn <= chain[0].first_lsn
                                                else None)
        if e is None:
            if any(d["from"] <= end_lsn < d["to"] for d in log.state.discarded):
                raise CrestartError(f"LSN {end_lsn} lies in log given up by an earlier "
                                    "conditional restart")
            raise CrestartError(f"LSN {end_lsn} lies beyond the log of {log.qm_name}, which "
                                f"ends in {extent_file_name(chain[-1].number)}")
        if end_lsn == e.end_lsn:
            return end_lsn
        last = e.first_lsn
        try:
            for rec in _records(log, e):
                if rec.lsn + rec.length > end_lsn or rec.type == RecordType.EXTENT_END:
                    return rec.lsn
                last = rec.lsn + rec.length
        except LogMissing as exc:
            raise CrestartError(f"the extent holding LSN {end_lsn} cannot be read: "
                                f"{exc.message}", hint="recall it from the archive first") \
                from None
        if e.state == "active" and end_lsn >= last:
            raise CrestartError(f"LSN {end_lsn} lies at or beyond the end of the log of "
                                f"{log.qm_name} (LSN {last}): there is nothing to give up")
        return last
    last = None
    for e in chain:
        if not log.extent_present(e):
            if last is None:
                continue            # deleted or archived below what is on disk
            raise CrestartError(
                f"log extent {extent_file_name(e.number)} is missing: the first record "
                "after the time cannot be found past it",
                hint="recall it from the archive, or give the point as --end-lsn")
        for rec in _records(log, e):
            if rec.type == RecordType.EXTENT_END:
                continue
            if rec.timestamp_ns > end_time_ns:
                if last is None:
                    raise CrestartError(
                        f"the oldest record on disk (LSN {rec.lsn}) was written after the "
                        "time given: there is nothing to keep",
                        hint="recall older extents from the archive, or use 'harbormq "
                             "reset-log'")
                return rec.lsn
            last = rec.timestamp_ns
    raise CrestartError(f"every record of the log of {log.qm_name} was written at or before "
                        "the time given: there is nothing to give up")


def _checkpoint_before(log, chain, cut: int) -> tuple[int, dict | None]:
    """The last complete checkpoint whose CHECKPOINT_END ends at or before the
    cut, and its table; (0, None) when the log on disk holds none."""
    st = log.state
    by_lsn: dict[int, LogRecord] = {}

    def read_record(lsn: int):
        if lsn in by_lsn:
            return by_lsn[lsn]
        e = _extent_holding(chain, lsn + 1)
        return next(iter(_records(log, e, lsn)), None) if e is not None else None

    if st.checkpoint_lsn:
        try:
            rec = read_record(st.checkpoint_lsn)
        except HarbormqError:
            rec = None          # in a lost extent: look further back
        if rec is not None and rec.type == RecordType.CHECKPOINT_END and \
                rec.lsn + rec.length <= cut:
            return rec.lsn, read_checkpoint(read_record, rec.lsn)
    # walk back extent by extent from the one holding the cut
    for e in reversed([e for e in chain if e.first_lsn < cut]):
        if not log.extent_present(e):
            break
        found = None
        for rec in _records(log, e):
            if rec.lsn + rec.length > cut:
                break
            if rec.type == RecordType.CHECKPOINT_END:
                found = rec
        if found is not None:
            by_lsn[found.lsn] = found
            return found.lsn, read_checkpoint(read_record, found.lsn)
    return 0, None


class _Losses:
    """The commit rule's effects, counted: what the records from the cut on did."""

    def __init__(self, p: CrestartPlan):
        self.p = p
        self.past_cut = False
        self.touched: set[str] = set()

    def target(self, rec: LogRecord):
        return rec.object_name

    def due(self, target, lsn: int) -> bool:
        return lsn >= self.p.cut_lsn

    def seen_put(self, target, msg: Message) -> None:
        pass

    def opened(self, op: PendingOp, rec: LogRecord) -> bool:
        if op.kind == "get":
            op.msg = MessageRef.decode(rec.payload)
        return True

    def closed(self, op: PendingOp, applied: bool) -> None:
        pass

    def put(self, target, msg: Message, lsn: int) -> None:
        p = self.p
        self.touched.add(target)
        p.puts_lost[target] = p.puts_lost.get(target, 0) + 1
        if len(p.messages_lost) < LIST_LIMIT:
            p.messages_lost.append({"queue": target, "msg_id": msg.msg_id.hex(), "lsn": lsn})

    def delete(self, target, key: bytes, lsn: int, op: PendingOp | None) -> None:
        p = self.p
        self.touched.add(target)
        p.gets_undone[target] = p.gets_undone.get(target, 0) + 1
        ref = op.msg if op is not None else None
        if len(p.messages_back) < LIST_LIMIT:
            p.messages_back.append({"queue": target, "lsn": lsn, "msg_id":
                                    ref.msg_id.hex() if ref is not None else None})

    def backed_out(self, op: PendingOp, backout_count: int, lsn: int) -> None:
        self.touched.add(op.target)      # a backout count the store may hold


def _list_losses(log, chain, p: CrestartPlan, progress) -> None:
    """Replay the commit rule from the restart point to the end of the log,
    counting only effects at or after the cut."""
    losses = _Losses(p)
    rule = CommitRule(losses)
    T = RecordType
    start = next((e for e in chain if e.end_lsn is None or e.end_lsn > p.restart_lsn), None)
    todo = chain[chain.index(start):] if start is not None else []
    for i, e in enumerate(todo):
        if progress:
            progress("reading the log", i, len(todo))
        if not log.extent_present(e):
            if e.first_lsn < p.cut_lsn:
                raise LogMissing(f"log extent {extent_file_name(e.number)} (LSN "
                                 f"{e.first_lsn}..) is missing: the plan needs it",
                                 lsn=e.first_lsn, hint="recall it from the archive first")
            p.unreadable_extents = [extent_file_name(x.number) for x in todo[i:]]
            break
        try:
            for rec in _records(log, e, max(p.restart_lsn, e.first_lsn)):
                if rec.lsn >= p.cut_lsn and not losses.past_cut:
                    losses.past_cut = True
                    p.uows_in_flight = sorted(u.id for u in rule.open.values()
                                              if u.state != "prepared")
                    p.uows_in_doubt = sorted(u.id for u in rule.open.values()
                                             if u.state == "prepared")
                if rec.uow_id:
                    p.next_uow_id = max(p.next_uow_id, rec.uow_id + 1)
                if rec.object_id:
                    p.next_object_id = max(p.next_object_id, rec.object_id + 1)
                if losses.past_cut:
                    if rec.type == T.EXTENT_END:
                        continue
                    p.records_discarded += 1
                    p.bytes_discarded += rec.length
                    if rec.type == T.UOW_COMMIT:
                        _note_commit(rule, rec, p)
                    elif rec.type in (T.OBJECT_CREATE, T.OBJECT_ALTER, T.OBJECT_DELETE):
                        p.definitions.append({"lsn": rec.lsn, "change": rec.type.name,
                                              "object": rec.object_name})
                rule.feed(rec)
                p.log_end_lsn = rec.lsn + rec.length
        except HarbormqError as exc:
            if e.first_lsn < p.cut_lsn and p.log_end_lsn < p.cut_lsn:
                raise
            # the discarded part is damaged from here: say so, count no further
            p.unreadable_extents = [f"{extent_file_name(e.number)} from LSN "
                                    f"{p.log_end_lsn} ({exc.message})"] + \
                [extent_file_name(x.number) for x in todo[i + 1:]]
            break
    if not losses.past_cut:      # the readable log ends at the cut
        p.uows_in_flight = sorted(u.id for u in rule.open.values() if u.state != "prepared")
        p.uows_in_doubt = sorted(u.id for u in rule.open.values() if u.state == "prepared")
    p.uows_in_flight = [u for u in p.uows_in_flight if u not in
                        {x["id"] for x in p.uows_lost}]
    p.touched = None if p.unreadable_extents else \
        sorted(losses.touched | {d["object"] for d in p.definitions})


def _note_commit(rule: CommitRule, rec: LogRecord, p: CrestartPlan) -> None:
    ids = [rec.uow_id] + (list(decode_json(rec.payload).get("joined", ()))
                          if rec.payload else [])
    for uow_id in ids:
        uow = rule.open.get(uow_id)
        if uow is None:
            continue
        queues: dict[str, list[int]] = {}
        for op in uow.ops.values():
            q = queues.setdefault(op.target, [0, 0])
            q[0 if op.kind == "put" else 1] += 1
        p.uows_lost.append({"id": uow_id, "owner": uow.owner, "commit_lsn": rec.lsn,
                            "commit_ns": rec.timestamp_ns,
                            "queues": {n: {"puts": c[0], "gets": c[1]}
                                       for n, c in sorted(queues.items())}})


def record(log, p: CrestartPlan) -> None:
    """Write the plan into the control file (both copies, durable)."""
    p.recorded_ns = time.time_ns()
    st = log.state
    st.crestart = p.as_dict()
    st.sequence += 1
    log.control.write(st)


def cancel(log) -> dict | None:
    st = log.state
    pending = st.crestart
    begun = [d / f"crestart.{st.sequence}.json" for _, d in log.copies
             if (d / f"crestart.{st.sequence}.json").exists()]
    if pending and begun:
        raise CrestartError(
            f"the conditional restart of {st.qm_name} was begun by a start that did not "
            f"finish ({begun[0]} exists, extents may be set aside): it can only be finished",
            hint=f"start the queue manager: it carries the rest out ('harbormq start "
                 f"{st.qm_name}')")
    if pending:
        st.crestart = None
        st.sequence += 1
        log.control.write(st)
    return pending


# -- applying (at the next start) -----------------------------------------------------

def apply(log, say: Callable[[str, str], None]) -> CrestartPlan:
    """Carry out the recorded conditional restart on the opened log (restart
    phase 1, before anything reads the chain). Returns the plan applied. An
    I/O error leaves it to be finished by the next start (CrestartError)."""
    try:
        return _apply(log, say)
    except OSError as exc:
        raise CrestartError(
            f"the conditional restart of {log.qm_name} could not be carried out: {exc}; what "
            "was done so far is kept and the next start goes on with it",
            hint="fix the cause (a full disk, a directory that cannot be written) and start "
                 "again") from None


def _apply(log, say: Callable[[str, str], None]) -> CrestartPlan:
    st: ControlState = log.state
    p = CrestartPlan.from_dict(st.crestart)
    E, H = p.cut_lsn, p.resume_lsn
    chain = sorted((e for e in st.extents if e.state in ("active", "full")),
                   key=lambda e: e.first_lsn)
    cut_ext = _extent_holding(chain, E)
    if cut_ext is None or extent_file_name(cut_ext.number) != p.cut_extent:
        raise CrestartError(
            f"the conditional restart recorded for {st.qm_name} cuts the log at LSN {E} in "
            f"{p.cut_extent}, but the control file no longer lists that extent there",
            hint=f"cancel it ('harbormq log crestart {st.qm_name} --cancel') and plan again")
    later = [e for e in chain if e.first_lsn >= E and e is not cut_ext]
    n = st.sequence          # the same on every retry: the control file is unchanged
    # 1. the given-up extents' files renamed aside in every copy (kept), with
    #    the whole plan (the operator log has its summary)
    for _, directory in log.healthy_copies():
        atomic_write(directory / f"crestart.{n}.json",
                     json.dumps(p.as_dict(), indent=1).encode())
        for e in later:
            src = directory / extent_file_name(e.number)
            kept = src.with_name(src.name + f"{GIVEN_UP}{n}")
            # (already kept: a repeated apply, and ``src`` is the new extent)
            if src.exists() and not kept.exists():
                rename_durably(src, kept)
    # 2. the new extent, starting at H with the LOG_CRESTART record
    if st.log_type == "circular":
        for e in later:
            e.state, e.end_lsn = "free", None
        spare = sorted((e for e in st.extents if e.state == "free"),
                       key=lambda e: e.number)
        if spare:
            new = spare[0]
        else:          # the cut extent was the newest of a full circular log
            new = ExtentInfo(number=st.next_extent_number, first_lsn=H, state="free")
            st.next_extent_number += 1
            st.extents.append(new)
    else:
        st.extents = [e for e in st.extents if e not in later]
        new = ExtentInfo(number=st.next_extent_number, first_lsn=H, state="free")
        st.next_extent_number += 1
        st.extents.append(new)
    note = LogRecord(RecordType.LOG_CRESTART, payload=encode_json({
        "discarded": [E, H], "requested": p.requested, "recorded_ns": p.recorded_ns,
        "plan": f"crestart.{n}.json"}))
    note.lsn, note.timestamp_ns, note.synced_lsn = H, time.time_ns(), H
    head = ExtentHeader(new.number, H, time.time_ns(), st.qm_name, st.pages).encode()
    data = encode(note)
    for _, directory in log.healthy_copies():
        _write_new_extent(directory / extent_file_name(new.number), head, data,
                          st.pages * 4096)
    crash_point("crestart.mid_apply")
    # 3. the control file: the cut extent closed at E, the new one active at H
    if cut_ext.end_lsn != E:
        cut_ext.cut = True      # (its file is unchanged: an archived copy stays good)
    cut_ext.state, cut_ext.end_lsn = "full", E
    new.state, new.first_lsn, new.end_lsn, new.cut = "active", H, None, False
    new.archived = new.deleted = False
    st.checkpoint_lsn, st.restart_lsn, st.media_lsn = p.checkpoint_lsn, p.restart_lsn, \
        p.media_lsn
    st.discarded = list(st.discarded) + [{
        "from": E, "to": H, "next_uow_id": p.next_uow_id, "next_object_id": p.next_object_id,
        # what the given-up log changed: a store written after E that holds none
        # of it is as it was at E (None: unknown, every such store is suspect)
        "touched": p.touched, "definitions": bool(p.definitions) or p.touched is None}]
    st.crestart = None
    st.sequence += 1
    log.control.write(st)
    say("HMQ7131W", f"conditional restart of queue manager {st.qm_name} carried out: "
        + p.summary() + f"; the log goes on at LSN {H} in {extent_file_name(new.number)}; "
        f"the given-up extents are kept as S…LOG{GIVEN_UP}{n} and the whole plan as "
        f"crestart.{n}.json in the log directory")
    return p


def _write_new_extent(path: Path, head: bytes, first_record: bytes, size: int) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.posix_fallocate(fd, 0, size)
        os.pwrite(fd, head, 0)
        os.pwrite(fd, first_record, EXTENT_HEADER_SIZE)
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(path.parent)

