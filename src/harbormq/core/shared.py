"""Shared queues on the message path: what the core asks of a queue sharing
group's shared queue (``SharedQueue``) and of the group (``SharedGroup``,
``core.group``), and the puts, gets and unit-of-work steps that use them
(``SharedQueues``, a part of ``QueueManagerCore``).

A shared queue's messages live in the group's store (``harbormq.qsg``,
which registers its queues in ``core.shared_queues`` at start and sets
``core.group``); the core never imports it. A change to a persistent shared
message is logged here as a SHARED_PUT or SHARED_GET record with the
group-wide stamp the store returned, in the caller's unit of work like a
local put or get (docs/qsg.md).

Units of work: one that touched only shared queues is decided by the group
(``SharedGroup.commit``: one PostgreSQL statement) before its COMMIT record
is written; one that also touched local queues, or commits with joined
units, has its shared rows prepared first and resolved once the COMMIT
record is forced. A backout backs the rows out after its records are
written. Not here: the store's SQL (``qsg/structure.py``)."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Protocol

from ..log.records import MessageRef, RecordFlag, RecordType, SharedChange
from .msgid import new_msg_id
from .uow import SHARED_GET, SHARED_KINDS, SHARED_PUT, UowOp

if TYPE_CHECKING:
    from ..log.manager import RecoveryLog
    from ..log.records import Message
    from .operator_log import OperatorLog
    from .queue import MessageMatch
    from .uow import UnitOfWork


class SharedQueue(Protocol):
    """A shared queue as the core uses it (``qsg/queue.py``): the attributes
    and consumer line of a local queue, its messages in the group's store."""
    name: str
    shared: bool               # True: the message path takes the shared branch
    object_id: int             # 0: no object of this queue manager's catalog
    structure: str
    waiters: list
    last_put_ns: int
    last_get_ns: int

    @property
    def attrs(self) -> dict: ...

    def check_put(self, msg: Message) -> None:
        """What refuses a put whatever the depth: its structure failed, a
        persistent message on a RECOVER(NO) structure, the store unreachable."""

    def put(self, msg: Message, uow_id: int | None) -> int:
        """Insert ``msg`` (its seq set to its key in the group); the stamp."""

    def get(self, uow_id: int | None, match: MessageMatch | None
            ) -> tuple[Message, int] | None:
        """Take the first available message (and the stamp of the get)."""


class SharedGroup(Protocol):
    """The queue sharing group as the core uses it (``core.group``)."""
    member_number: int

    def commit(self, uow_id: int) -> None:
        """Decide a unit of work of shared queues only as committed (one statement)."""

    def prepare(self, uow_id: int, log_lsn: int) -> None:
        """Mark its shared rows prepared (with ``log_lsn``, the log's end now):
        the member's log decides."""

    def resolve_later(self, uow_id: int, commit: bool, forced: asyncio.Future | None) -> None:
        """Apply the log's decision to the prepared rows once ``forced`` is done."""

    def backout(self, uow_id: int) -> None:
        """Back its shared rows out (or later, if the store cannot be reached)."""

    def holds(self, uow_id: int) -> bool:
        """The unit of work has rows in the store that this process did not
        make (restart rebuilt it in doubt)."""

    def outcomes_after_redo(self, uow_ids: list[int], log_end: int) -> dict[int, str]:
        """(restart, the log recovered up to ``log_end``) What the store decided
        for units of work the log leaves open: 'commit' or 'backout'."""


class SharedQueuesHost(Protocol):
    """What the shared-queue steps use of the rest of the core."""
    log: RecoveryLog
    oplog: OperatorLog
    group: SharedGroup | None

    def append_record(self, rtype: RecordType, *, uow_id: int = 0, prev_lsn: int = 0,
                      obj=None, object_id: int = 0, name: str = "", payload: bytes = b"",
                      flags: int = 0) -> int: ...

    def _log_uow(self, uow: UnitOfWork, rtype: RecordType, q, payload: bytes
                 ) -> tuple[int, int]: ...

    def _check_uow(self, uow: UnitOfWork) -> None: ...


class SharedQueues:
    """Puts, gets and unit-of-work steps on shared queues (a part of
    ``QueueManagerCore``, which is its ``SharedQueuesHost``)."""

    def _init_shared(self) -> None:
        #: the group's shared queues by name, registered by harbormq.qsg at start
        self.shared_queues: dict[str, SharedQueue] = {}
        #: the queue sharing group, when this queue manager is a member
        self.group: SharedGroup | None = None
        #: units of work that changed the store (from before the change: a
        #: record the log then refuses, LogFull, leaves rows all the same)
        self.shared_uows: set[int] = set()

    def _change(self, q: SharedQueue, stamp: int, msg: Message, kind: str) -> bytes:
        number = self.group.member_number
        if kind == SHARED_PUT:
            return SharedChange.put(stamp, number, q.structure, msg).encode()
        return SharedChange.get(stamp, number, q.structure, MessageRef.of(msg)).encode()

    def shared_put(self, q: SharedQueue, msg: Message, uow: UnitOfWork | None
                   ) -> tuple[Message, asyncio.Future | None]:
        """A put on a shared queue: in the store first (its stamp), then its
        record (persistent), in ``uow`` or committed at once."""
        q.check_put(msg)
        if uow is not None:
            self._check_uow(uow)
            self.shared_uows.add(uow.id)
        msg.raw = msg._key = None
        msg.msg_id = msg.msg_id or new_msg_id()
        msg.put_time_ns = time.time_ns()
        stamp = q.put(msg, None if uow is None else uow.id)
        q.last_put_ns = msg.put_time_ns
        return msg, self._log_shared(q, uow, msg, stamp, SHARED_PUT)

    def shared_get(self, q: SharedQueue, uow: UnitOfWork | None, match: MessageMatch | None
                   ) -> tuple[Message | None, asyncio.Future | None]:
        """A destructive get from a shared queue: taken in the store (locked to
        ``uow``, or deleted outside one), then its record (persistent)."""
        if uow is not None:
            self.shared_uows.add(uow.id)
        got = q.get(None if uow is None else uow.id, match)
        if got is None:
            return None, None
        msg, stamp = got
        q.last_get_ns = time.time_ns()
        return msg, self._log_shared(q, uow, msg, stamp, SHARED_GET)

    def _log_shared(self, q: SharedQueue, uow: UnitOfWork | None, msg: Message, stamp: int,
                    kind: str) -> asyncio.Future | None:
        """The record of a change made in the store (persistent messages only):
        AUTO_COMMIT and forced outside a unit of work (the force returned), else
        a record and an op of ``uow``."""
        rtype = RecordType.SHARED_PUT if kind == SHARED_PUT else RecordType.SHARED_GET
        if uow is None:
            if not msg.persistent:
                return None
            self.append_record(rtype, obj=q, payload=self._change(q, stamp, msg, kind),
                               flags=RecordFlag.AUTO_COMMIT)
            return self.log.force()
        lsn = prev = 0
        if msg.persistent:
            lsn, prev = self._log_uow(uow, rtype, q, self._change(q, stamp, msg, kind))
        uow.ops.append(UowOp(kind, q, msg, lsn, prev))
        return None

    # -- units of work -----------------------------------------------------------------

    def _has_shared(self, uow: UnitOfWork) -> bool:
        return self.group is not None and (
            uow.id in self.shared_uows or self.group.holds(uow.id))

    def _decide_shared_first(self, uow: UnitOfWork, joined) -> list[int]:
        """(commit, before its COMMIT record) The group's side: a unit of work
        of shared queues alone is decided now (returns []); otherwise the
        shared rows of ``uow`` and ``joined`` are prepared and their ids
        returned, to be resolved once the COMMIT record is forced."""
        units = [u for u in (uow, *joined) if self._has_shared(u)]
        if not units:
            return []
        alone = not joined and all(op.kind in SHARED_KINDS for op in uow.ops) and \
            not self.group.holds(uow.id) and uow.state == "active"
        if alone:
            self.group.commit(uow.id)
            self.shared_uows.discard(uow.id)
            return []
        for u in units:
            if u.state != "prepared":     # (prepared by an XA prepare already)
                self.group.prepare(u.id, self.log.end_lsn)
        return [u.id for u in units]

    def _prepare_shared(self, uow: UnitOfWork) -> None:
        """(two-phase commit's prepare) Its shared rows prepared in the store."""
        if self._has_shared(uow):
            self.group.prepare(uow.id, self.log.end_lsn)

    def _resolve_shared_after(self, ids: list[int], forced: asyncio.Future | None) -> None:
        for uow_id in ids:
            self.shared_uows.discard(uow_id)
            self.group.resolve_later(uow_id, True, forced)

    def _undo_shared_op(self, uow: UnitOfWork, op: UowOp) -> None:
        """(backout) A shared op's COMPENSATION, when it was logged: the store's
        rows are backed out at the end (``_back_out_shared``)."""
        if op.lsn:
            self._compensate(uow, op, op.msg.backout_count + (op.kind == SHARED_GET),
                             RecordType.SHARED_PUT if op.kind == SHARED_PUT
                             else RecordType.SHARED_GET)

    def _back_out_shared(self, uow: UnitOfWork, had_shared: bool) -> None:
        if had_shared:
            self.shared_uows.discard(uow.id)
            self.group.backout(uow.id)
