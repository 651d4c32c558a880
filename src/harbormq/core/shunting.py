"""Log space on a circular log: log shunting, which copies a long unit of
work's records forward so that restart no longer needs the extent it began
in, and log-space relief, which backs out the units of work that pin the
log when no spare extent is left (docs/design-notes.md, "Log shunting").
Also what each extent switch starts: the archiving of the closed extent and
a checkpoint.

``LogShunting`` is a part of the core (``engine.QueueManagerCore``), which
provides what ``ShuntingHost`` lists. Not here: the checkpoint that writes
the shunts (``checkpoints.py``), how a shunt is encoded (``log/records.py``)
and read back (``log/replay.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import LogFull
from ..log.checkpoint import part_limit
from ..log.records import (
    LogRecord,
    MessageRef,
    RecordType,
    encode_shunt,
    encoded_length,
    shunt_copy,
)
from .publish import publication_of

if TYPE_CHECKING:
    from ..config import QMConfig
    from ..log.manager import RecoveryLog
    from .log_management import LogManagement
    from .operator_log import OperatorLog
    from .uow import UnitOfWork


class ShuntingHost(Protocol):
    """What log shunting and log-space relief use of the rest of the core."""
    config: QMConfig
    log: RecoveryLog
    oplog: OperatorLog
    uows: dict[int, UnitOfWork]
    started: bool
    stopping: str | None
    log_management: LogManagement
    checkpoint_lock: asyncio.Lock
    _checkpoint_pending: bool

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task: ...

    def append_record(self, rtype: RecordType, *, uow_id: int = 0, prev_lsn: int = 0,
                      payload: bytes = b"") -> int: ...

    def _start_checkpoint(self, reason: str) -> None: ...

    async def checkpoint(self, reason: str = "requested") -> dict: ...

    async def backout(self, uow: UnitOfWork, *, reason: str | None = None) -> None: ...

    def producers_held(self) -> int: ...

    def log_space_short(self) -> bool: ...

    def units_of_work_pinning_log(self) -> list[UnitOfWork]: ...

    def refuse_held_producers(self) -> None: ...


class LogShunting:
    """Log space of the core (a part of ``QueueManagerCore``, which is its
    ``ShuntingHost``)."""

    def _init_log_space(self) -> None:
        self._relieving = False

    # -- log shunting -----------------------------------------------------------------

    def _shunt_long_units(self, begin_lsn: int, *, urgent: bool) -> None:
        """Log shunting (circular logs; docs/design-notes.md, "Log shunting"): copy
        forward the records of each unit of work that restart would otherwise
        need from an older extent than the one this checkpoint begins in, once it
        has lived through ``tuning.shunt_checkpoints`` checkpoints since it began
        or was last shunted; and, at once, each one that holds the oldest extent
        (the units the queue manager would otherwise back out, HMQ7469W) when
        the log has at most one spare extent left (``urgent``: none). One spare
        extent, not none: the checkpoint that frees the oldest extent must be
        done before the log fills the active one, while work goes on. Runs in
        the step that writes CHECKPOINT_BEGIN."""
        every = self.config.tuning.shunt_checkpoints
        if not every or self.config.log.log_type != "circular":
            return
        here = self.log.extent_of(begin_lsn)
        chain = self.log.chain()
        if here is None or not chain:
            return
        urgent = urgent or self.log.available_extents() <= 1
        oldest_end = chain[0].end_lsn or here.first_lsn
        for u in sorted(self.uows.values(), key=lambda u: u.first_lsn):
            if not u.first_lsn or u.first_lsn >= here.first_lsn or \
                    u.state not in ("active", "prepared", "backing_out"):
                continue
            if (urgent and u.first_lsn < oldest_end) or u.checkpoints - u.shunted_at >= every:
                self._shunt(u)

    def _shunt_copies(self, u: UnitOfWork) -> list[bytes]:
        """Copies of the records restart needs to rebuild ``u`` exactly as its
        original records would: every logged put (the whole message) and get
        still pending, and, being backed out, every get compensated so far with
        its compensation; in LSN order."""
        recs = list(u.undone)
        for op in u.ops:
            if not op.lsn:
                continue     # a non-persistent message: never logged
            if op.publication is not None:
                # one copy of the record for all its targets, at its first
                if op is op.publication[0]:
                    recs.append(LogRecord(RecordType.MSG_PUBLISH, uow_id=u.id,
                                          prev_lsn=op.prev_lsn, lsn=op.lsn,
                                          payload=publication_of(op.publication)))
                continue
            q = op.queue
            if op.kind == "put":
                rtype, payload = RecordType.MSG_PUT, op.msg.encode()
            else:
                rtype = RecordType.MSG_GET
                payload = MessageRef.of(op.msg).encode()
            recs.append(LogRecord(rtype, uow_id=u.id, prev_lsn=op.prev_lsn,
                                  object_id=q.object_id, object_name=q.name, payload=payload,
                                  lsn=op.lsn))
        recs.sort(key=lambda r: r.lsn)
        return [shunt_copy(r) for r in recs]

    def _shunt_room(self, lengths: list[int]) -> tuple[bool, int]:
        """(whether records of ``lengths`` fit in the log without reusing an extent
        that is still needed, leaving room for the rest of the checkpoint; the
        bytes there are to spare). Records never span extents."""
        log = self.log
        payload = log.extent_payload
        reserve = part_limit(payload)          # the checkpoint's own END (and a part)
        left = log.state.active.first_lsn + payload - log.end_lsn
        spare = log.available_extents()
        room = left + spare * payload - reserve
        for n in lengths + [reserve]:
            if n > left:
                if spare == 0:
                    return False, room
                spare -= 1
                left = payload
            left -= n
        return True, room

    def _cannot_shunt(self, u: UnitOfWork, records: int, size: str, room: int) -> bool:
        if not u.unshuntable:
            u.unshuntable = True
            then = ("it is never backed out: resolve it" if u.in_doubt else
                    "it will be backed out if the log fills")
            self.oplog.emit("HMQ7471W", f"unit of work {u.id} ({u.state}, owner "
                            f"{u.owner or '-'}) cannot be shunted: a copy of its {records} "
                            f"log record(s) takes {size} bytes, the circular log has "
                            f"{max(0, room)} to spare; it "
                            f"keeps the restart point at LSN {u.first_lsn}, and {then}")
        return False

    def _shunt(self, u: UnitOfWork) -> bool:
        """Write one shunt of ``u`` (UOW_SHUNT, in parts when large); from then on
        restart needs it from the shunt's first part. False when it cannot be
        written: it would not fit in the log (HMQ7471W, said once)."""
        # the message bodies alone, before anything is encoded: a unit of work
        # bigger than the log is refused without copying it
        logged = [op for op in u.ops if op.lsn and
                  (op.publication is None or op is op.publication[0])]
        records = len(u.undone) + len(logged)
        at_least = sum(len(op.msg.body) for op in logged if op.kind == "put")
        fits, room = self._shunt_room([])
        if at_least > room:
            return self._cannot_shunt(u, records, f"at least {at_least}", room)
        copies = self._shunt_copies(u)
        head = {"state": u.state, "owner": u.owner, "begin_lsn": u.begin,
                "started_ns": u.first_log_ns or u.started_ns}
        payloads = encode_shunt(head, copies, part_limit(self.log.extent_payload))
        lengths = [encoded_length(0, len(p)) for p in payloads]
        fits, room = self._shunt_room(lengths)
        if not fits or max(lengths) > self.log.extent_payload:
            return self._cannot_shunt(u, records, str(sum(lengths)), room)
        first = 0
        try:
            for p in payloads:
                u.last_lsn = self.append_record(RecordType.UOW_SHUNT, uow_id=u.id,
                                                prev_lsn=u.last_lsn, payload=p)
                first = first or u.last_lsn
        except LogFull:
            return False     # an incomplete shunt: readers ignore it
        u.first_lsn = first
        u.shunts += 1
        u.shunted_at = u.checkpoints
        u.unshuntable = False
        self.oplog.emit("HMQ7470I", f"unit of work {u.id} ({u.state}, owner {u.owner or '-'}) "
                        f"shunted: the {len(copies)} log record(s) it still needs since LSN "
                        f"{u.begin} copied forward to LSN {first} ({sum(lengths)} bytes in "
                        f"{len(payloads)} record(s)); restart and backout no longer need the "
                        "log before it")
        return True

    # -- log space --------------------------------------------------------------------

    def on_extent_switch(self, number: int) -> None:
        """After every extent switch: report, checkpoint, and when the circular log
        has no spare extent left, back out the units of work that pin it."""
        if self.stopping == "preemptive" or not self.started:
            return
        first = self.log.state.extent(number).first_lsn
        self.log_management.on_switch(next(
            (e for e in self.log.state.extents if e.state == "full" and e.end_lsn == first),
            None))
        if self.log.available_extents() == 0:
            self.relieve_log_pressure()
        elif not self._checkpoint_pending and not self.checkpoint_lock.locked():
            # (switches made by a checkpoint's own records start no other one)
            self._start_checkpoint("extent switch")

    def relieve_log_pressure(self) -> None:
        """Start the relief of a circular log with no spare extent, unless it runs
        (or the queue manager is stopping)."""
        if not self._relieving and not self.stopping:
            self._relieving = True
            self.spawn(self._relieve_log_pressure())

    async def _relieve_log_pressure(self) -> None:
        """Checkpoint (and back out what pins the log). Producers held for log
        space start it again while they wait (a checkpoint whose flush began
        before the last extent filled may not free one; the next does once the
        stores are written); when a unit of work relief cannot back out still
        pins the log, they are refused instead."""
        try:
            await self._release_log_space()
            if self.producers_held() and self.log_space_short() and \
                    self.units_of_work_pinning_log():
                self.refuse_held_producers()     # in doubt: waiting frees nothing
        finally:
            self._relieving = False

    async def _release_log_space(self) -> None:
        await self.checkpoint("log space")
        if self.log.available_extents() > 0:
            return
        chain = self.log.chain()
        if len(chain) < 2:
            return
        pinned_before = chain[0].end_lsn
        victims = sorted((u for u in self.uows.values()
                          if u.first_lsn and u.first_lsn < pinned_before
                          and u.state in ("active", "backing_out")),
                         key=lambda u: u.first_lsn)
        if not victims:
            return
        self.oplog.emit("HMQ7469W", f"{len(victims)} unit(s) of work backed out to release log "
                        f"space: " + ", ".join(f"UOW {u.id} (owner {u.owner or '-'}, first LSN "
                                               f"{u.first_lsn})" for u in victims))
        for u in victims:
            if u.state not in ("active", "backing_out"):
                continue   # its owner ended it meanwhile
            try:
                await self.backout(u, reason="backed out to release log space (HMQ7469W)")
            except LogFull:
                break
        await self.checkpoint("log space released")
