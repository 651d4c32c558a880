"""Publications: one message put on several local queues (the subscription
queues of a publication) with its body written to the log once, in one
MSG_PUBLISH record (``log/records.py``), whatever the number of queues.

``Publishing`` is a part of the core (``engine.QueueManagerCore``), which
provides what ``PublishingHost`` lists. Its caller (pub/sub) resolves the
subscriptions to local queue names; a subscription whose destination is a
remote queue is a plain put of its own. Every queue is checked as a put to it
would be (puts inhibited, MAXMSGL, MAXDEPTH, damaged, a transmission queue)
before anything changes, so a refused publication leaves no trace on any of
them. Then, as a put does:

* non-persistent: on every queue, in memory, nothing logged;
* persistent outside a unit of work: one record flagged AUTO_COMMIT, on every
  queue in the same step, one force before the caller may acknowledge;
* under a unit of work: one record in the unit's chain, each queue counting an
  uncommitted put; COMMIT puts the message on all of them, BACKOUT on none
  (one COMPENSATION undoes the whole record, ``uow.py``).

Not here: the topic tree and subscriptions (``pubsub/``), how the record is
read back (the commit rule, ``log/replay.py``).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import TYPE_CHECKING, Any, Protocol

from ..crashpoints import crash_point
from ..errors import InvalidAttribute, MessageTooLong, QueueFull
from ..log.records import (
    Message,
    PublicationTarget,
    RecordFlag,
    RecordType,
    encode_publication,
    publication_record_length,
    target_msg_id,
)
from .msgid import new_msg_id
from .queue import LocalQueue
from .uow import PublishedTargets, UnitOfWork, UowOp

if TYPE_CHECKING:
    from ..log.manager import RecoveryLog


class PublishingHost(Protocol):
    """What publications use of the rest of the core."""
    log: RecoveryLog

    def check_running(self) -> None: ...

    def is_remote_queue(self, name: str) -> bool: ...

    # (a PutTarget of engine.py, which the parts do not import)
    def output_queue(self, name: str) -> Any: ...

    def check_put_to(self, target: Any, msg: Message) -> None: ...

    def append_record(self, rtype: RecordType, *, uow_id: int = 0, prev_lsn: int = 0,
                      obj: LocalQueue | None = None, payload: bytes = b"",
                      flags: int = 0) -> int: ...

    def _check_uow(self, uow: UnitOfWork) -> None: ...

    def _log_uow(self, uow: UnitOfWork, rtype: RecordType, q: LocalQueue | None,
                 payload: bytes) -> tuple[int, int]: ...

    def _after_commit_put(self, q: LocalQueue) -> None: ...

    async def wait_for_log_room(self, msg: Message) -> None: ...


class Publishing:
    """Publications of the core (a part of ``QueueManagerCore``, which is its
    ``PublishingHost``)."""

    async def publish(self, queues: list[str], msg: Message,
                      uow: UnitOfWork | None = None) -> list[Message]:
        """``publish_nowait``, then the force: outside a unit of work a persistent
        publication returns once it is on disk. Waits, as a put does, while the
        circular log has no spare extent (log-space flow control)."""
        await self.wait_for_log_room(msg)
        msgs, forced = self.publish_nowait(queues, msg, uow)
        if forced is not None:
            await forced
            crash_point("publish.forced")
        return msgs

    def publish_nowait(self, queues: list[str], msg: Message, uow: UnitOfWork | None = None
                       ) -> tuple[list[Message], asyncio.Future | None]:
        """Put ``msg`` (priority and persistence resolved by the caller) on every
        local queue of ``queues`` in one synchronous step. Returns the messages
        as each queue holds them, in the order of ``queues`` (each with its own
        seq, and its own id: the publication's, ``msg.msg_id``, with the
        target's number in its last four bytes when the queue manager gave it),
        and for a persistent publication outside a unit of work the future of
        the force that makes it durable (the caller must not acknowledge it
        before). A name may come twice (two subscriptions with one
        destination): the queue then gets two messages."""
        self.check_running()
        targets = self._publication_targets(queues, msg)
        if uow is not None:
            self._check_uow(uow)
        msg.raw = msg._key = None      # the fields below change: drop what was derived
        msg.seq = 0
        msg.backout_count = 0
        msg.msg_id = msg.msg_id or new_msg_id()
        msg.put_time_ns = time.time_ns()
        if msg.persistent:
            size = publication_record_length(msg, [q.name for q in targets])
            if size > self.log.extent_payload:
                # (refused before anything changes, where the log would refuse it
                # after a unit of work's BEGIN)
                raise MessageTooLong(
                    f"a publication to {len(targets)} queues is a log record of {size} "
                    f"bytes, more than a log extent holds ({self.log.extent_payload}): "
                    "publish to fewer subscriptions at once, or use larger log extents "
                    "(MQRC 2030 MSG_TOO_BIG_FOR_Q)")
        msgs = [msg.for_target(q.allocate_seq(), target_msg_id(msg.msg_id, i))
                for i, q in enumerate(targets)]
        for q in targets:
            q.last_put_ns = msg.put_time_ns
        lsn = prev = 0
        if msg.persistent:
            payload = encode_publication(msg, [PublicationTarget(q.object_id, q.name, m.seq)
                                               for q, m in zip(targets, msgs, strict=True)])
            if uow is None:
                lsn = self.append_record(RecordType.MSG_PUBLISH, payload=payload,
                                         flags=RecordFlag.AUTO_COMMIT)
            else:
                lsn, prev = self._log_uow(uow, RecordType.MSG_PUBLISH, None, payload)
            crash_point("publish.appended")
        if uow is None:
            for q, m in zip(targets, msgs, strict=True):
                q.commit_put(m, lsn)
            for q in set(targets):
                self._after_commit_put(q)
            crash_point("publish.applied")
            return msgs, (self.log.force() if lsn else None)
        # the targets are undone together (one COMPENSATION of the record), so
        # each op knows its siblings; not logged: each op is on its own
        group = PublishedTargets(msg.msg_id) if lsn else None
        for q, m in zip(targets, msgs, strict=True):
            op = UowOp("put", q, m, lsn, prev, publication=group)
            if group is not None:
                group.append(op)
            uow.ops.append(op)
            q.uncommitted_puts += 1
        return msgs, None

    def _publication_targets(self, queues: list[str], msg: Message) -> list[LocalQueue]:
        """Every target checked as a put to it is, before anything changes."""
        if not queues:
            raise InvalidAttribute("a publication needs at least one target queue")
        targets = []
        for name in queues:
            target = self.output_queue(name)      # unknown (2085), damaged (2101)
            if target.header is not None:         # a QREMOTE, or an alias of one
                raise InvalidAttribute(
                    f"{name} is a remote queue: a publication's targets are local queues "
                    "(a subscription to a remote destination is a put of its own)", queue=name)
            self.check_put_to(target, msg)        # inhibited, MAXMSGL, a transmission queue
            targets.append(target.queue)
        for q, copies in Counter(targets).items():
            if q.depth + q.uncommitted_puts + copies > q.attrs["MAXDEPTH"]:
                raise QueueFull(f"queue {q.name} is full: MAXDEPTH is {q.attrs['MAXDEPTH']} "
                                "(MQRC 2053 Q_FULL)", queue=q.name)
        return targets


def publication_of(group: PublishedTargets) -> bytes:
    """The MSG_PUBLISH payload of a publication's ops in a unit of work, as it was
    logged (a shunt copies it forward; targets restart found gone are left out)."""
    return encode_publication(group[0].msg.for_target(0, group.msg_id), [
        PublicationTarget(op.queue.object_id, op.queue.name, op.msg.seq) for op in group])
