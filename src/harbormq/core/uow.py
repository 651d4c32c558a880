"""Units of work: what one holds (``UnitOfWork``, its ``UowOp``s) and how it
ends. A commit applies its effects to the queues in the same step as its
COMMIT record (with units of work joined to it); a prepare puts it in doubt;
a backout undoes it with a COMPENSATION record per logged operation, and
moves a message that reached its backout threshold to the backout or
dead-letter queue in a unit of work of the queue manager's own (requeue).

``UnitsOfWork`` is a part of the core (``engine.QueueManagerCore``), which
provides what ``UnitsOfWorkHost`` lists. Not here: the puts and gets that add
operations to a unit of work (the message path, ``engine.py``) and the
shunting of long units of work (``shunting.py``).
"""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from ..errors import (
    GetInhibited,
    LogFull,
    MessageTooLong,
    ObjectDamaged,
    PutInhibited,
    QueueFull,
    UnitOfWorkError,
    UnknownObject,
    UnknownUnitOfWork,
)
from ..log.records import (
    Compensation,
    LogRecord,
    Message,
    MessageRef,
    RecordType,
    encode_json,
)
from .queue import LocalQueue, MessageMatch

if TYPE_CHECKING:
    from ..log.manager import RecoveryLog
    from .operator_log import OperatorLog


@functools.lru_cache(maxsize=4096)
def _begin_payload(owner: str) -> bytes:
    """UOW_BEGIN's payload; owners repeat (one per connection), so it is cached."""
    return encode_json({"owner": owner})


#: the owner of the units of work that move messages at BOTHRESH
REQUEUE_OWNER = "backout-requeue"
#: the kinds of ``UowOp`` on a queue sharing group's shared queues (core/shared.py)
SHARED_PUT, SHARED_GET = "shared_put", "shared_get"
SHARED_KINDS = frozenset((SHARED_PUT, SHARED_GET))


@dataclass
class UowOp:
    kind: str                 # "put" | "get"
    queue: LocalQueue
    msg: Message
    lsn: int = 0              # its log record, 0 when not logged (non-persistent)
    prev_lsn: int = 0         # the record before it in the UOW (undo-next on backout)
    #: a persistent get whose record waits for the commit (a STOMP delivery
    #: awaiting its ACK, on a queue with HARDENBO(NO)): until then it is only a lock
    deferred: bool = False
    #: a put that is one target of a logged publication (MSG_PUBLISH, ``publish.py``):
    #: the ops of all its targets, shared by them, undone together by one
    #: COMPENSATION of the record (None: a record of its own, or not logged)
    publication: PublishedTargets | None = field(default=None, repr=False)


class PublishedTargets(list):
    """The ops of one logged publication's targets, in the record's order, and
    the publication's own message id (each target's is derived from it:
    ``log.records.target_msg_id``)."""
    __slots__ = ("msg_id",)

    def __init__(self, msg_id: bytes):
        super().__init__()
        self.msg_id = msg_id


@dataclass
class UnitOfWork:
    id: int
    owner: str = ""
    state: str = "active"     # active | prepared | backing_out | committed | backed_out
    ops: list[UowOp] = field(default_factory=list)
    #: the first record restart needs for it: its UOW_BEGIN, or its latest shunt
    #: (log shunting); 0 while nothing is logged
    first_lsn: int = 0
    last_lsn: int = 0
    started_ns: int = field(default_factory=time.time_ns)
    first_log_ns: int = 0
    #: why the queue manager backed it out on its own (HMQ7469W), if it did
    rolled_back: str | None = None
    #: checkpoints taken while it was in the log (HMQ7465W, MQ's URCHKTH)
    checkpoints: int = 0
    #: its UOW_BEGIN's LSN once a shunt has moved ``first_lsn`` on (0: the same;
    #: a unit of work restart rebuilt from a shunt knows only the shunt)
    begin_lsn: int = 0
    #: while it is being backed out: copies of the gets compensated so far and of
    #: their compensations (a shunt carries them, see ``_shunt_copies``)
    undone: list[LogRecord] = field(default_factory=list, repr=False)
    #: shunts written for it, and ``checkpoints`` at the latest one
    shunts: int = 0
    shunted_at: int = 0
    #: HMQ7471W said it cannot be shunted (said once until a shunt succeeds)
    unshuntable: bool = False

    @property
    def in_doubt(self) -> bool:
        return self.state == "prepared"

    @property
    def begin(self) -> int:
        """Its first record: the UOW_BEGIN (as far as it is known)."""
        return self.begin_lsn or self.first_lsn


class UnitsOfWorkHost(Protocol):
    """What units of work use of the rest of the core."""
    log: RecoveryLog
    oplog: OperatorLog
    queues: dict[str, LocalQueue]
    uows: dict[int, UnitOfWork]
    next_uow_id: int

    @property
    def qmgr_attrs(self) -> dict: ...

    def check_running(self) -> None: ...

    def append_record(self, rtype: RecordType, *, uow_id: int = 0, prev_lsn: int = 0,
                      obj: LocalQueue | None = None, payload: bytes = b"") -> int: ...

    def _after_commit_put(self, q: LocalQueue) -> None: ...

    def _log_get_alone(self, q: LocalQueue, msg: Message) -> int: ...

    def get_nowait(self, queue: str, uow: UnitOfWork | None = None, *,
                   match: MessageMatch | None = None
                   ) -> tuple[Message | None, asyncio.Future | None]: ...

    def put_nowait(self, queue: str, msg: Message, uow: UnitOfWork | None = None
                   ) -> tuple[Message, asyncio.Future | None]: ...


class UnitsOfWork:
    """The units of work of the core (a part of ``QueueManagerCore``, which is
    its ``UnitsOfWorkHost``)."""

    def _log_uow(self, uow: UnitOfWork, rtype: RecordType, q: LocalQueue | None,
                 payload: bytes) -> tuple[int, int]:
        """Append a record of ``uow`` (writing its BEGIN first); returns (lsn, prev)."""
        if not uow.first_lsn:
            uow.first_lsn = uow.last_lsn = uow.begin_lsn = self.append_record(
                RecordType.UOW_BEGIN, uow_id=uow.id, payload=_begin_payload(uow.owner))
            uow.first_log_ns = time.time_ns()
        prev = uow.last_lsn
        uow.last_lsn = self.append_record(rtype, uow_id=uow.id, prev_lsn=prev, obj=q,
                                          payload=payload)
        return uow.last_lsn, prev

    def begin(self, owner: str = "") -> UnitOfWork:
        self.check_running()
        uow = UnitOfWork(self.next_uow_id, owner=owner)
        self.next_uow_id += 1
        self.uows[uow.id] = uow
        return uow

    def adopt_unit_of_work(self, uow: UnitOfWork) -> None:
        """(restart) Keep a unit of work the log leaves open; its id is never
        given again."""
        self.uows[uow.id] = uow
        self.next_uow_id = max(self.next_uow_id, uow.id + 1)

    def discard_empty(self, uow: UnitOfWork) -> None:
        """Forget a unit of work that did nothing (a delivery that found no message)."""
        if uow.ops or uow.first_lsn:
            raise UnitOfWorkError(f"unit of work {uow.id} has work and cannot be discarded",
                                  uow=uow.id)
        uow.state = "backed_out"
        self.uows.pop(uow.id, None)

    def _check_uow(self, uow: UnitOfWork) -> None:
        if uow.rolled_back:
            raise UnitOfWorkError(f"unit of work {uow.id} was backed out by the queue manager: "
                                  f"{uow.rolled_back} (MQRC 2003 BACKED_OUT)", uow=uow.id)
        if uow.state != "active":
            raise UnitOfWorkError(f"unit of work {uow.id} is {uow.state}; it takes no more "
                                  "puts or gets", uow=uow.id)

    def find_uow(self, uow_id: int) -> UnitOfWork:
        uow = self.uows.get(uow_id)
        if uow is None:
            raise UnknownUnitOfWork(f"no unit of work {uow_id} is active or in doubt",
                                    uow=uow_id)
        return uow

    async def prepare(self, uow: UnitOfWork) -> None:
        """Phase one of two-phase commit: from here the UOW is in doubt and survives
        restart, its messages locked, until commit or backout."""
        await self.prepare_nowait(uow)

    def prepare_nowait(self, uow: UnitOfWork) -> asyncio.Future:
        """``prepare`` in one synchronous step; returns the future of the force
        after which it is in doubt on disk (a sender channel gets its next batch
        meanwhile)."""
        self._check_uow(uow)
        self._prepare_shared(uow)
        self._log_deferred(uow, uow)
        self._log_uow(uow, RecordType.UOW_PREPARE, None, b"")
        uow.state = "prepared"
        return self.log.force()

    async def commit(self, uow: UnitOfWork, joined: list[UnitOfWork] | tuple = ()) -> None:
        forced = self.commit_nowait(uow, joined)
        if forced is not None:
            await forced

    def commit_nowait(self, uow: UnitOfWork, joined: list[UnitOfWork] | tuple = (), *,
                      force: bool = True) -> asyncio.Future | None:
        """Commit in one synchronous step; returns the future of the force that
        makes it durable (None when nothing was logged). ``force=False`` asks
        for no force: the COMMIT is written with the next records and is durable
        at the next force (a caller for which a lost commit is still in doubt
        and decided later: a sender channel's batch); returns None then.

        ``joined`` are other units of work that commit atomically with ``uow``
        (a STOMP transaction acknowledging deliveries that were each got under
        a unit of work of their own). One that logged nothing (its gets
        deferred) has them logged as records of ``uow`` before the COMMIT,
        and leaves no trace of its own. The ids of the others are in the
        COMMIT record, which decides them all; each still gets its own COMMIT
        record right after, so every unit of work in the log ends with an
        outcome of its own, and restart commits a joined unit whose own record
        is missing."""
        if uow.rolled_back:
            self._check_uow(uow)
        if uow.state not in ("active", "prepared"):
            raise UnitOfWorkError(f"unit of work {uow.id} is {uow.state} and cannot commit",
                                  uow=uow.id)
        for j in joined:
            if j.state != "active" or j.rolled_back:
                raise UnitOfWorkError(f"unit of work {j.id} is {j.rolled_back or j.state} "
                                      f"and cannot commit with unit of work {uow.id}",
                                      uow=j.id)
        if not joined and not uow.first_lsn and len(uow.ops) == 1 and uow.ops[0].deferred:
            # a delivery acknowledged on its own: one record is its whole unit of work
            op = uow.ops[0]
            op.lsn = self._log_get_alone(op.queue, op.msg)
            op.deferred = False
            self._apply_commit(uow, op.lsn)
            return self.log.force() if force else None
        # a queue sharing group's side first: decided, or prepared (core/shared.py)
        shared = self._decide_shared_first(uow, joined) if self.group is not None else ()
        self._log_deferred(uow, uow)
        for j in joined:
            # a joined unit that logged nothing yet: its gets become this unit's
            # records, decided by its COMMIT (no BEGIN or COMMIT of j's own)
            self._log_deferred(j, j if j.first_lsn else uow)
        logged_joined = [j.id for j in joined if j.first_lsn]
        if logged_joined and not uow.first_lsn:
            # the decision must be a record of its own unit of work
            uow.first_lsn = uow.last_lsn = uow.begin_lsn = self.append_record(
                RecordType.UOW_BEGIN, uow_id=uow.id, payload=_begin_payload(uow.owner))
            uow.first_log_ns = time.time_ns()
        effect_lsn = 0
        if uow.first_lsn:
            effect_lsn = self.append_record(
                RecordType.UOW_COMMIT, uow_id=uow.id, prev_lsn=uow.last_lsn,
                payload=encode_json({"joined": logged_joined}) if logged_joined else b"")
            uow.last_lsn = effect_lsn
        self._apply_commit(uow, effect_lsn)
        for j in joined:
            j_lsn = 0
            if j.first_lsn:
                try:
                    j_lsn = j.last_lsn = self.append_record(RecordType.UOW_COMMIT,
                                                            uow_id=j.id, prev_lsn=j.last_lsn)
                except LogFull:
                    # the decision is logged and holds for j too: it commits now,
                    # as restart would (which writes j's own record then)
                    j_lsn = effect_lsn
            self._apply_commit(j, j_lsn)
        forced = self.log.force() if effect_lsn and (force or shared) else None
        if shared:
            self._resolve_shared_after(shared, forced)
        return forced if force else None

    def _log_deferred(self, uow: UnitOfWork, into: UnitOfWork) -> None:
        """Log the deferred gets of ``uow`` as records of ``into`` (``uow``
        itself, or the unit of work whose COMMIT decides it), one at a time.
        Each op moves to the end of ``into``'s ops once its record is in the
        log: the ops stay in LSN order, which a backout undoes them in, and if
        the log fills part way (LogFull) each op is where a backout finds it."""
        for op in [op for op in uow.ops if op.deferred]:
            op.lsn, op.prev_lsn = self._log_uow(into, RecordType.MSG_GET, op.queue,
                                                MessageRef.of(op.msg).encode())
            op.deferred = False
            uow.ops.remove(op)
            into.ops.append(op)
            op.queue.locked[op.msg.key] = into.id

    def _apply_commit(self, uow: UnitOfWork, effect_lsn: int) -> None:
        touched = set()
        for op in uow.ops:
            q = op.queue
            if op.kind == "put":
                q.uncommitted_puts -= 1
                q.commit_put(op.msg, effect_lsn if op.lsn else 0)
                touched.add(q)
            elif op.kind == "get":
                q.commit_delete(op.msg.key, effect_lsn if op.lsn else 0)
        uow.state = "committed"
        self.uows.pop(uow.id, None)
        for q in touched:
            self._after_commit_put(q)

    async def backout(self, uow: UnitOfWork, *, reason: str | None = None) -> None:
        if uow.state not in ("active", "prepared", "backing_out"):
            raise UnitOfWorkError(f"unit of work {uow.id} is {uow.state} and cannot be backed "
                                  "out", uow=uow.id)
        requeue = self.undo(uow)
        if reason:
            uow.rolled_back = reason
        # in the same step as the undo: once the loop runs again, a consumer
        # would take the message back before it could be moved
        for q, msg in requeue:
            self.requeue_backout(q, msg)
        if uow.first_lsn or requeue:
            await self.log.force()

    def undo(self, uow: UnitOfWork) -> list[tuple[LocalQueue, Message]]:
        """Back out ``uow`` in one synchronous step: a COMPENSATION record per undone
        logged record (so a crash mid-backout resumes where it was), then BACKOUT.
        Returns got messages that reached their queue's backout threshold."""
        uow.state = "backing_out"
        requeue = []
        had_shared = self.group is not None and self._has_shared(uow)
        # each op leaves the list only once it is compensated: if the log fills
        # part way (LogFull), a retry goes on where this stopped
        while uow.ops:
            op = uow.ops[-1]
            q = op.queue
            if op.kind in SHARED_KINDS:     # its rows are backed out below
                self._undo_shared_op(uow, op)
                uow.ops.pop()
                continue
            if op.publication is not None:
                self._undo_publication(uow, op.publication)
                continue
            if op.kind == "put":
                if op.lsn:
                    self._compensate(uow, op, op.msg.backout_count)
                q.put_backed_out()
                uow.ops.pop()
                continue
            msg = replace(op.msg, backout_count=op.msg.backout_count + 1)
            clr_lsn = self._compensate(uow, op, msg.backout_count) if op.lsn else 0
            q.commit_update(msg, clr_lsn)
            uow.ops.pop()
            # (a channel's backouts of a transmission queue move nothing: its
            # messages are wrapped, and their order is the channel's)
            threshold = q.attrs["BOTHRESH"] if q.attrs.get("USAGE") != "XMITQ" else 0
            if threshold and msg.backout_count >= threshold:
                requeue.append((q, msg))
        if uow.first_lsn:
            uow.last_lsn = self.append_record(RecordType.UOW_BACKOUT, uow_id=uow.id,
                                              prev_lsn=uow.last_lsn)
        uow.state = "backed_out"
        self.uows.pop(uow.id, None)
        self._back_out_shared(uow, had_shared)
        return requeue

    def _undo_publication(self, uow: UnitOfWork, group: PublishedTargets) -> None:
        """Undo every target of one logged publication: one COMPENSATION of the
        record, then the targets leave ``uow.ops`` (added together, they are
        its last ops when a backout, going backwards, meets one)."""
        self._compensate(uow, group[0], 0, RecordType.MSG_PUBLISH)
        members = {id(op) for op in group}
        while uow.ops and id(uow.ops[-1]) in members:
            members.discard(id(uow.ops[-1]))
            uow.ops.pop().queue.put_backed_out()
        if members:     # (never so far: nothing is added between a publication's ops)
            for op in uow.ops:
                if id(op) in members:
                    op.queue.put_backed_out()
            uow.ops[:] = [op for op in uow.ops if id(op) not in members]

    def _compensate(self, uow: UnitOfWork, op: UowOp, backout_count: int,
                    undone: RecordType | None = None) -> int:
        undone = undone or (RecordType.MSG_PUT if op.kind == "put" else RecordType.MSG_GET)
        ref = MessageRef.of(op.msg)
        comp = Compensation(undone, op.lsn, op.prev_lsn, ref, backout_count)
        prev = uow.last_lsn
        payload = comp.encode()
        uow.last_lsn = self.append_record(RecordType.COMPENSATION, uow_id=uow.id,
                                          prev_lsn=prev, obj=op.queue, payload=payload)
        if op.kind == "get":
            # a backout the log cuts short stays in the log: a shunt then carries
            # the get and its compensation (the backout count is their effect)
            q = op.queue
            uow.undone += [
                LogRecord(RecordType.MSG_GET, uow_id=uow.id, prev_lsn=op.prev_lsn,
                          object_id=q.object_id, object_name=q.name, payload=ref.encode(),
                          lsn=op.lsn),
                LogRecord(RecordType.COMPENSATION, uow_id=uow.id, prev_lsn=prev,
                          object_id=q.object_id, object_name=q.name, payload=payload,
                          lsn=uow.last_lsn)]
        return uow.last_lsn

    # -- moves at the backout threshold -----------------------------------------------

    def requeue_backout(self, q: LocalQueue, msg: Message) -> None:
        """Move a message that reached BOTHRESH to BOQNAME, else the dead-letter queue,
        in a unit of work of the queue manager's own, in one synchronous step (the
        caller forces the log)."""
        targets = [t for t in (q.attrs["BOQNAME"], self.qmgr_attrs["DEADQ"]) if t]
        for target in targets:
            if target not in self.queues or target == q.name:
                continue
            uow = self.begin(owner=REQUEUE_OWNER)
            try:
                got, _ = self.get_nowait(q.name, uow, match=MessageMatch(msg_id=msg.msg_id))
                if got is None:  # somebody else took it meanwhile
                    self._undo_quietly(uow)
                    return
                moved = replace(got, seq=0, properties=dict(
                    got.properties, HMQ_BACKOUT_QUEUE=q.name))
                self.put_nowait(target, moved, uow)
                self.commit_nowait(uow)
                self.oplog.emit("HMQ7508I", f"message {msg.msg_id.hex()} reached backout "
                                f"threshold {q.attrs['BOTHRESH']} on {q.name}; moved to "
                                f"{target}")
                return
            except (QueueFull, PutInhibited, GetInhibited, UnknownObject, MessageTooLong,
                    ObjectDamaged, LogFull) as exc:
                self.oplog.emit("HMQ7509W", f"could not move message {msg.msg_id.hex()} to "
                                f"{target}: {exc}")
                if uow.state in ("active", "backing_out"):
                    try:
                        self._undo_quietly(uow)
                    except LogFull:
                        self._end_requeue_later(uow)
                        break   # the message is held by this move until it ends
                if isinstance(exc, LogFull):
                    break       # any other target needs the log as much
        self.oplog.emit("HMQ7510W", f"message {msg.msg_id.hex()} stays on {q.name} although "
                        "it reached its backout threshold: no backout or dead-letter queue "
                        "could take it")

    def _undo_quietly(self, uow: UnitOfWork) -> None:
        """Back out a requeue's unit of work without counting its get against
        the message. Its BACKOUT record comes first: when the log refuses it
        (LogFull), nothing has changed, in memory or in the log."""
        if uow.first_lsn:
            self.append_record(RecordType.UOW_BACKOUT, uow_id=uow.id, prev_lsn=uow.last_lsn)
        for op in uow.ops:
            if op.kind == "get":
                op.queue.unlocked(op.msg.key)
            elif op.kind == "put":
                op.queue.put_backed_out()
        uow.ops.clear()
        uow.state = "backed_out"
        self.uows.pop(uow.id, None)

    def _end_requeue_later(self, uow: UnitOfWork) -> None:
        """A requeue whose records are in the log but whose BACKOUT the full log
        refused stays in flight, holding the message, as the log says it is
        (dropped from memory alone, restart would later undo its get against a
        queue that has moved on). A checkpoint is what frees log space: each
        one ends such requeues (``_end_held_requeues``); if the queue manager
        stops first, restart backs them out. Marked backing out: a controlled
        stop waits for applications' units of work, not for this one."""
        uow.state = "backing_out"
        holds = ("it holds its message" if any(op.kind == "get" for op in uow.ops) else
                 "its get was not logged, so it holds no message")
        self.oplog.emit("HMQ7513W", f"unit of work {uow.id} of a move to a backout queue "
                        f"could not be ended (the log is full): {holds}; it stays in flight "
                        "until its backout can be logged")

    def _end_held_requeues(self) -> None:
        """(after a checkpoint) Back out the requeues ``_end_requeue_later`` left
        in flight, now that the log may take their BACKOUT records."""
        for u in [u for u in self.uows.values()
                  if u.owner == REQUEUE_OWNER and u.state == "backing_out"]:
            try:
                self._undo_quietly(u)
            except LogFull:
                return
            self.oplog.emit("HMQ7514I", f"unit of work {u.id} of a move to a backout queue "
                            "is backed out")

    # -- in doubt ---------------------------------------------------------------------

    async def resolve(self, uow_id: int, commit: bool) -> None:
        """Resolve an in-doubt unit of work by id (MQ's RESOLVE/rsvmqtrn)."""
        uow = self.find_uow(uow_id)
        if not uow.in_doubt:
            raise UnitOfWorkError(f"unit of work {uow_id} is {uow.state}, not in doubt",
                                  uow=uow_id)
        await (self.commit(uow) if commit else self.backout(uow))

    def in_doubt(self) -> list[UnitOfWork]:
        return [u for u in self.uows.values() if u.in_doubt]
