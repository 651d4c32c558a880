"""The queue manager core: ``QueueManagerCore``, the one owner of run-time
state, composed of its parts; and the message path (puts, gets, browse,
expiry).

Every method runs on the queue manager's event loop (the one owner of state).
A method changes in-memory state and appends its log records in one
synchronous step, then awaits the force that makes them durable; it returns
only after that. Effects of a unit of work reach the queues at COMMIT, in the
same step as the COMMIT record, so a store flush never carries an effect
whose record could still be lost (the write-ahead rule).

The parts, each in a module of its own that declares in a ``Protocol`` what
it uses of the rest: ``definitions.py`` (objects and definitions),
``uow.py`` (units of work), ``checkpoints.py`` (flushes and checkpoints),
``shunting.py`` (log space), ``publish.py`` (a message put on several
queues with one record), ``dynamic.py`` (model and dynamic queues),
``triggering.py`` (trigger messages). They are mixed into the one object,
not held as helpers: a put, a get or a commit calls into units of work and flushes for
every message, and through a helper each call would take one more look-up.
Alias and remote queues are resolved here (``aliases.py``, ``remote.py``).
Besides the message path, this module holds the state the parts share, the
methods through which recovery sets the core up, and what the core knows of
the channel initiator (``ChannelCommands``). Not here: a queue in memory
(``queue.py``), connections (``connections.py``).
"""

from __future__ import annotations

import asyncio
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol

from ..config import QMConfig
from ..errors import (
    GetInhibited,
    InvalidAttribute,
    MessageTooLong,
    ObjectDamaged,
    PutInhibited,
    QueueFull,
    QueueManagerStopping,
    UnknownObject,
)
from ..log.manager import RecoveryLog
from ..log.records import LogRecord, Message, MessageRef, RecordFlag, RecordType
from . import aliases, remote
from .checkpoints import FlushAndCheckpoint
from .connections import ConnectionRegistry
from .definitions import Definitions
from .dynamic import DynamicQueues
from .log_management import LogManagement
from .log_space import LogSpaceFlowControl
from .msgid import new_msg_id
from .objects import QMGR_OBJECT
from .operator_log import OperatorLog
from .publish import Publishing
from .queue import LocalQueue, MessageMatch
from .remote import TransmissionHeader
from .shared import SharedQueues
from .shunting import LogShunting
from .triggering import Triggering
from .uow import UnitOfWork, UnitsOfWork, UowOp

if TYPE_CHECKING:
    from .checkpoints import CheckpointHost
    from .definitions import DefinitionsHost
    from .dynamic import DynamicHost
    from .log_management import LogManagementHost
    from .publish import PublishingHost
    from .shared import SharedQueuesHost
    from .shunting import ShuntingHost
    from .triggering import TriggeringHost
    from .uow import UnitsOfWorkHost


class PutTarget(NamedTuple):
    """Where a put to a name goes (``output_queue``)."""
    queue: LocalQueue
    #: for a remote queue definition: what the message is wrapped in
    header: TransmissionHeader | None
    #: the attributes that give the put's defaults (a QREMOTE's own)
    attrs: dict


class ChannelCommands(Protocol):
    """What the admin commands ask of the channel initiator
    (``channels/initiator.py``), which is ``core.channels`` while it runs."""

    def check_deletable(self, objtype: str, name: str) -> None: ...

    def listener_status(self, name: str) -> str: ...

    def status(self, pattern: str) -> list[dict]: ...

    async def start_channel(self, name: str) -> str: ...

    async def stop_channel(self, name: str) -> str: ...

    async def reset_channel(self, name: str, seqnum: int) -> str: ...

    async def resolve_channel(self, name: str, commit: bool) -> str: ...

    async def start_listener(self, name: str) -> str: ...

    async def stop_listener(self, name: str) -> str: ...


class QueueManagerCore(Definitions, UnitsOfWork, FlushAndCheckpoint, LogShunting,
                       LogSpaceFlowControl, Publishing, DynamicQueues, Triggering, SharedQueues):
    def __init__(self, config: QMConfig, oplog: OperatorLog):
        self.config = config
        self.name = config.name
        self.oplog = oplog
        self.log = RecoveryLog(config.log_dir, config.name, config.log_dual_dir)
        self.log.say = oplog.emit
        self.objects: dict[str, dict] = {}            # name -> definition (incl. QMGR)
        self.queues: dict[str, LocalQueue] = {}
        self.uows: dict[int, UnitOfWork] = {}
        self.connections = ConnectionRegistry()
        self.next_uow_id = 1
        self.next_object_id = 1
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stopping: str | None = None
        self.started = False
        self._background: set[asyncio.Task] = set()
        #: media recovery (harbormq.recovery): object name -> media point, the
        #: images being written, when this instance started
        self.media_points: dict[str, dict] = {}
        self.imaging: dict[str, asyncio.Future] = {}
        self.started_ns = time.time_ns()
        #: called with the reason when the queue manager must stop at once
        #: (damage to the queue manager object); set by whoever runs the core
        self.on_fatal = None
        #: linear log housekeeping: archiving and deleting closed extents
        self.log_management = LogManagement(self)
        #: the channel initiator, once the server process has started it
        self.channels: ChannelCommands | None = None
        #: the publish/subscribe service (pubsub/), once started after restart
        self.pubsub = None
        self._init_definitions()
        self._init_checkpoints()
        self._init_log_space()
        self._init_log_space_flow()
        self._init_dynamic()
        self._init_triggering()
        self._init_shared()

    # ------------------------------------------------------------------ helpers

    def cancel_background(self) -> None:
        """Cancel every task ``spawn`` started (at stop)."""
        for task in list(self._background):
            task.cancel()

    def spawn(self, coro) -> asyncio.Task:
        task = self.loop.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(self._report_failure)
        return task

    def _report_failure(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            tb = traceback.extract_tb(exc.__traceback__)
            where = " at " + " < ".join(f"{Path(f.filename).name}:{f.lineno}"
                                       for f in reversed(tb[-3:])) if tb else ""
            self.oplog.emit("HMQ5008E", f"background task failed: {exc!r}{where}")

    def check_running(self) -> None:
        if self.stopping:
            raise QueueManagerStopping(f"queue manager {self.name} is stopping "
                                       f"({self.stopping}); no new work is accepted")

    def queue(self, name: str) -> LocalQueue:
        q = self.queues.get(name)
        if q is None:
            raise UnknownObject(f"queue {name} is not defined on queue manager {self.name} "
                                "(MQRC 2085 UNKNOWN_OBJECT_NAME)", queue=name)
        if q.damaged:
            raise ObjectDamaged(f"queue {name} is damaged (MQRC 2101 OBJECT_DAMAGED): "
                                f"{q.damage_reason or 'its store was lost'}; only DELETE and "
                                "'harbormq recreate' are allowed", queue=name)
        if q.recreating:
            raise ObjectDamaged(f"queue {name} is being recreated from the log (MQRC 2101 "
                                "OBJECT_DAMAGED until it is done)", queue=name)
        return q

    @property
    def qmgr_attrs(self) -> dict:
        return self.objects[QMGR_OBJECT]["attrs"]

    def append_record(self, rtype: RecordType, *, uow_id: int = 0, prev_lsn: int = 0,
                      obj: LocalQueue | None = None, object_id: int = 0, name: str = "",
                      payload: bytes = b"", flags: int = 0) -> int:
        rec = LogRecord(rtype, uow_id=uow_id, prev_lsn=prev_lsn,
                        object_id=obj.object_id if obj else object_id,
                        object_name=obj.name if obj else name, payload=payload, flags=flags)
        lsn = self.log.append(rec)
        if self.started and not self._checkpoint_pending and \
                self.log.records_since_checkpoint >= self.config.log.checkpoint_records:
            self._start_checkpoint("log records")
        return lsn

    def log_write_failed(self, exc: BaseException) -> None:
        """The log writer met an error (a full disk, EIO): nothing more can be made
        durable. Say so, and stop at once (preemptive): what is on disk is
        consistent, and a restart once the disk is fixed recovers from it.
        Persistent operations waiting for a force fail with the reason."""
        self.oplog.emit("HMQ6709E", f"the recovery log of queue manager {self.name} cannot be "
                        f"written ({exc}); persistent work fails and the queue manager stops "
                        "(preemptive) so that a restart recovers what is on disk")
        if self.on_fatal is not None and not self.stopping:
            self.on_fatal(f"the log cannot be written: {exc}")

    # ------------------------------------------------------------------ set up by recovery

    def mark_started(self) -> None:
        """(restart) Recovery is over: from now on the log's growth and extent
        switches start checkpoints."""
        self.started = True

    def raise_id_floors(self, *, uow: int = 0, object: int = 0) -> None:
        """(restart) Unit of work and object ids below these are never given again."""
        self.next_uow_id = max(self.next_uow_id, uow)
        self.next_object_id = max(self.next_object_id, object)

    def adopt_media_points(self, points: dict[str, dict]) -> None:
        """(restart) The media points the last checkpoint recorded."""
        self.media_points = points

    def set_media_point(self, name: str, point: dict) -> None:
        """Media recovery of ``name`` would start at ``point`` (an image, a recreate)."""
        self.media_points[name] = point

    def forget_media_point(self, name: str) -> None:
        """``name`` is deleted, or a newer object has the name: back to its create record."""
        self.media_points.pop(name, None)

    # ------------------------------------------------------------------ messages

    def check_put(self, q: LocalQueue, msg: Message) -> None:
        """What refuses a put to ``q`` whatever its depth: puts inhibited, a message
        too long, a bad priority. A protocol server checks this before it holds a
        producer for room on a full queue (flow control): these fail at once."""
        attrs = q.attrs
        if attrs["PUT"] != "ENABLED":
            raise PutInhibited(f"puts are inhibited on queue {q.name} (MQRC 2051)",
                               queue=q.name)
        limit = min(attrs["MAXMSGL"], self.qmgr_attrs["MAXMSGL"])
        if len(msg.body) > limit:
            raise MessageTooLong(
                f"message of {len(msg.body)} bytes is longer than MAXMSGL {limit} of queue "
                f"{q.name} (MQRC 2030 MSG_TOO_BIG_FOR_Q)", queue=q.name)
        if not 0 <= msg.priority <= 9:
            raise InvalidAttribute(f"priority {msg.priority} is out of range 0..9")
        if msg.persistent and attrs.get("DEFTYPE") == "TEMPDYN":
            self.refuse_persistent(q)

    def check_put_to(self, target: PutTarget, msg: Message) -> None:
        """Everything that refuses a put to ``target`` whatever its depth: a
        message put straight on a transmission queue, then ``check_put`` (for a
        remote queue, on its transmission queue with the message as it is,
        before it is wrapped). A protocol server checks this before it holds a
        producer for room (flow control), and passes ``checked`` to the put."""
        q = target.queue
        if target.header is None and q.attrs.get("USAGE") == "XMITQ" and \
                not remote.is_wrapped(msg.body):
            raise InvalidAttribute(f"queue {q.name} is a transmission queue: put to a remote "
                                   "queue definition (QREMOTE) that names it instead "
                                   "(MQRC 2091 XMIT_Q_USAGE_ERROR)", queue=q.name)
        self.check_put(q, msg)

    def _prepare_message(self, q: LocalQueue, msg: Message) -> Message:
        """(after ``check_put_to``) Give the message its id, time and sequence."""
        if q.full:
            raise QueueFull(f"queue {q.name} is full: MAXDEPTH is {q.attrs['MAXDEPTH']} "
                            "(MQRC 2053 Q_FULL)", queue=q.name)
        msg.raw = msg._key = None   # the fields below change: drop what was derived
        msg.msg_id = msg.msg_id or new_msg_id()
        msg.put_time_ns = time.time_ns()
        msg.seq = q.allocate_seq()
        return msg

    def defaults_for(self, q: LocalQueue, priority: int | None, persistent: bool | None):
        return self.put_defaults(q.attrs, priority, persistent)

    @staticmethod
    def put_defaults(attrs: dict, priority: int | None, persistent: bool | None):
        """A put's priority and persistence where the caller left them to
        ``attrs`` (a ``PutTarget``'s)."""
        return (attrs["DEFPRTY"] if priority is None else priority,
                attrs["DEFPSIST"] == "YES" if persistent is None else persistent)

    def output_queue(self, name: str) -> PutTarget:
        """Where a put to ``name`` goes: the local queue, or for a remote queue
        definition (QREMOTE) its transmission queue and the header to wrap the
        message in; and the attributes that give the put's defaults (the
        QREMOTE's own, as in MQ's name resolution)."""
        alias = aliases.resolve(self.objects, name, "put")
        if alias is not None:      # the target resolved; the defaults are the alias's
            return self.output_queue(alias[0])._replace(attrs=alias[1])
        shared = self.shared_queues.get(name)
        if shared is not None:      # a queue sharing group's (core/shared.py)
            return PutTarget(shared, None, shared.attrs)
        found = remote.resolve(self.objects, name)
        if found is None:
            q = self.queue(name)
            return PutTarget(q, None, q.attrs)
        xmitq, header, attrs = found
        if attrs["PUT"] != "ENABLED":
            raise PutInhibited(f"puts are inhibited on remote queue {name} (MQRC 2051)",
                               queue=name)
        # (not dataclasses.replace: this runs for every put to a remote queue)
        return PutTarget(self.queue(xmitq), TransmissionHeader(header.rq, header.rqm, self.name),
                         attrs)

    def is_remote_queue(self, name: str) -> bool:
        d = self.objects.get(name)
        return d is not None and d["type"] == "QREMOTE"

    def is_queue_definition(self, name: str) -> bool:
        """``name`` is a queue that opens without a store of its own: a remote
        queue definition or an alias (a front end defines none on first use)."""
        if name in self.shared_queues:      # a queue sharing group's (core/shared.py)
            return True
        d = self.objects.get(name)
        return d is not None and d["type"] in ("QREMOTE", "QALIAS")

    def input_queue(self, name: str) -> LocalQueue:
        """The local queue a get from ``name`` takes from: the queue, or an
        alias's target (the alias's GET checked)."""
        alias = aliases.resolve(self.objects, name, "get")
        name = alias[0] if alias is not None else name
        shared = self.shared_queues.get(name)
        return shared if shared is not None else self.queue(name)

    def defaults_for_name(self, name: str, priority: int | None, persistent: bool | None):
        """A put's priority and persistence where the caller left them to the
        queue (for a remote queue, its QREMOTE definition; for an alias, the
        alias's, a topic's alias included)."""
        d = self.objects.get(name)
        if d is not None and d["type"] == "QALIAS" and d["attrs"].get("TARGTYPE") == "TOPIC":
            return self.put_defaults(d["attrs"], priority, persistent)
        return self.put_defaults(self.output_queue(name).attrs, priority, persistent)

    async def put(self, queue: str, msg: Message, uow: UnitOfWork | None = None) -> Message:
        """Put ``msg`` (priority and persistence already resolved by the caller);
        outside a unit of work a persistent put returns once it is on disk. A
        persistent put waits while the circular log has no spare extent
        (log-space flow control, ``log_space.py``)."""
        await self.wait_for_log_room(msg)
        if self.pubsub is not None and (topic := aliases.topic_of(self.objects, queue)):
            # an alias of a topic: the put is a publication there
            await self.pubsub.publish(topic, msg, uow)
            return msg
        msg, forced = self.put_nowait(queue, msg, uow)
        if forced is not None:
            await forced
        return msg

    async def wait_for_log_room(self, msg: Message) -> None:
        """A persistent message waits here while the circular log has no spare
        extent (log-space flow control, ``log_space.py``)."""
        if msg.persistent and self.log_space_short():
            self.check_running()
            await self.wait_for_log_space(
                time.monotonic() + self.config.tuning.log_space_wait_ms / 1000)

    def put_nowait(self, queue: str, msg: Message, uow: UnitOfWork | None = None, *,
                   target: PutTarget | None = None, checked: bool = False
                   ) -> tuple[Message, asyncio.Future | None]:
        """The put itself, in one synchronous step; returns the message and, for a
        persistent put outside a unit of work, the future of the force that makes
        it durable (the caller must not acknowledge it before that completes).
        Protocol servers use this so that frames are applied in arrival order
        while their forces are shared.

        ``target``: ``output_queue(queue)``, when the caller resolved it in the
        same step; ``checked``: the caller ran ``check_put_to(target, msg)``
        in that step too (ignored without a ``target``)."""
        self.check_running()
        if target is None or not checked:
            target = target or self.output_queue(queue)
            self.check_put_to(target, msg)
        q, header, _attrs = target
        if q.shared:
            return self.shared_put(q, msg, uow)
        if q.attrs.get("TRIGGER") == "YES" and not self.triggering:
            triggered = self.put_triggering(queue, msg, uow, target)
            if triggered is not None:
                return triggered
        if header is not None:
            msg.raw = msg._key = None
            msg.msg_id = msg.msg_id or new_msg_id()    # the id it keeps end to end
            msg.put_time_ns = time.time_ns()
            msg = remote.wrap(msg, header)
        msg = self._prepare_message(q, msg)
        q.last_put_ns = msg.put_time_ns
        if uow is None:
            forced = None
            if msg.persistent:
                lsn = self.append_record(RecordType.MSG_PUT, obj=q, payload=msg.encode(),
                                         flags=RecordFlag.AUTO_COMMIT)
                q.commit_put(msg, lsn)
                forced = self.log.force()
            else:
                q.commit_put(msg, 0)
            self._after_commit_put(q)
            return msg, forced
        self._check_uow(uow)
        lsn = prev = 0
        if msg.persistent:
            lsn, prev = self._log_uow(uow, RecordType.MSG_PUT, q, msg.encode())
        uow.ops.append(UowOp("put", q, msg, lsn, prev))
        q.uncommitted_puts += 1
        return msg, None


    async def get(self, queue: str, uow: UnitOfWork | None = None, *, wait: float = 0,
                  match: MessageMatch | None = None) -> Message | None:
        """Destructive get, waiting up to ``wait`` seconds; outside a unit of work
        a persistent get returns once its record is on disk."""
        deadline = time.monotonic() + wait
        while True:
            msg, forced = self.get_nowait(queue, uow, match=match)
            if msg is not None:
                if forced is not None:
                    await forced
                return msg
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            q = self.input_queue(queue)
            fut = self.loop.create_future()
            q.waiters.append(fut)
            try:
                await asyncio.wait_for(fut, remaining)
            except asyncio.TimeoutError:
                pass
            finally:
                if fut in q.waiters:
                    q.waiters.remove(fut)

    def get_nowait(self, queue: str, uow: UnitOfWork | None = None, *,
                   match: MessageMatch | None = None, defer: bool = False
                   ) -> tuple[Message | None, asyncio.Future | None]:
        """Take the first available message in one synchronous step: (message or
        None, the force future of a persistent get outside a unit of work).

        ``defer`` (a get under ``uow`` that will usually be committed on its
        own, as a STOMP delivery is at its ACK): on a queue with HARDENBO(NO)
        the get is not logged now but at the commit, where alone it is one
        record (MSG_GET, AUTO_COMMIT) instead of UOW_BEGIN, MSG_GET and
        UOW_COMMIT. Until then it is only a lock: a crash, like a backout,
        gives the message back, and then its backout count is not hardened."""
        q = self._queue_to_get_from(queue)
        if uow is not None:
            self._check_uow(uow)   # it may have been backed out while a caller waited
        if q.shared:
            return self.shared_get(q, uow, match)
        if isinstance(match, MessageMatch) and match.ident is None:
            match = None     # (a match of another kind selects by its own rule)
        key, msg, expired = q.first_available(match, time.time_ns())
        for ekey, emsg in expired:
            self._expire(q, ekey, emsg)
        if msg is None:
            return None, None
        q.last_get_ns = time.time_ns()
        if uow is None:
            forced = None
            if msg.persistent:
                q.commit_delete(key, self._log_get_alone(q, msg))
                forced = self.log.force()
            else:
                q.commit_delete(key, 0)
            return msg, forced
        if defer and msg.persistent and q.attrs.get("HARDENBO", "NO") == "NO":
            q.locked[key] = uow.id
            uow.ops.append(UowOp("get", q, msg, deferred=True))
            return msg, None
        self._get_under(uow, q, key, msg)
        return msg, None

    def _queue_to_get_from(self, queue: str) -> LocalQueue:
        self.check_running()
        q = self.input_queue(queue)
        if q.attrs["GET"] != "ENABLED":
            raise GetInhibited(f"gets are inhibited on queue {queue} (MQRC 2016)", queue=queue)
        return q

    def _log_get_alone(self, q: LocalQueue, msg: Message) -> int:
        """A get that is its own unit of work: one MSG_GET with AUTO_COMMIT."""
        return self.append_record(RecordType.MSG_GET, obj=q,
                                  payload=MessageRef.of(msg).encode(),
                                  flags=RecordFlag.AUTO_COMMIT)

    def _get_under(self, uow: UnitOfWork, q: LocalQueue, key: bytes, msg: Message) -> None:
        """A get under a unit of work: logged (persistent), then locked."""
        lsn = prev = 0
        if msg.persistent:
            lsn, prev = self._log_uow(uow, RecordType.MSG_GET, q, MessageRef.of(msg).encode())
        q.locked[key] = uow.id      # only once its record is in the log (LogFull)
        uow.ops.append(UowOp("get", q, msg, lsn, prev))

    def get_batch_nowait(self, queue: str, uow: UnitOfWork, limit: int) -> list[Message]:
        """Up to ``limit`` messages got under ``uow`` in one synchronous step: one
        scan of the queue and one store read for all of them (a sender channel's
        batch); each get is logged and locked as ``get_nowait`` does it."""
        q = self._queue_to_get_from(queue)
        self._check_uow(uow)
        now = time.time_ns()
        msgs, expired = q.available(limit, now)
        for ekey, emsg in expired:
            self._expire(q, ekey, emsg)
        if msgs:
            q.last_get_ns = now
        for msg in msgs:
            self._get_under(uow, q, msg.key, msg)
        return msgs

    def browse(self, queue: str, *, limit: int | None = None, after: bytes | None = None,
               match: MessageMatch | None = None) -> list[Message]:
        """Messages a get could take, in delivery order, without removing them."""
        q = self.input_queue(queue)
        if q.shared:
            return q.browse(limit=limit, match=match)
        now = time.time_ns()
        out = []
        for key in q.iter_keys():
            if after is not None and key <= after:
                continue
            if key in q.locked:
                continue
            msg = q.lookup(key)
            if msg is None or msg.expired(now) or (match is not None and not match(msg)):
                continue
            out.append(msg)
            if limit is not None and len(out) >= limit:
                break
        return out

    def _expire(self, q: LocalQueue, key: bytes, msg: Message) -> None:
        """Expired messages are removed when met (MQ does the same at get time)."""
        lsn = 0
        if msg.persistent:
            lsn = self.append_record(RecordType.MSG_EXPIRE, obj=q, flags=RecordFlag.AUTO_COMMIT,
                                     payload=MessageRef.of(msg).encode())
        q.commit_delete(key, lsn)
        q.expired_total += 1


if TYPE_CHECKING:
    def _hosts(core: QueueManagerCore) -> tuple[DefinitionsHost, UnitsOfWorkHost, CheckpointHost,
                                                ShuntingHost, LogManagementHost, PublishingHost,
                                                DynamicHost, TriggeringHost, SharedQueuesHost]:
        """The core is the host each of its parts declares (for a type checker)."""
        return core, core, core, core, core, core, core, core, core

