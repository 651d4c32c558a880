"""The queue manager core: objects, queues, messages and units of work.

Every method runs on the queue manager's event loop (the one owner of state).
A method changes in-memory state and appends its log records in one
synchronous step, then awaits the force that makes them durable; it returns
only after that. Effects of a unit of work reach the queues at COMMIT, in the
same step as the COMMIT record, so a store flush never carries an effect
whose record could still be lost (the write-ahead rule).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import os
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import NamedTuple

from ..config import QMConfig
from ..crashpoints import crash_point
from ..errors import (
    GetInhibited,
    InvalidAttribute,
    LogFull,
    MessageTooLong,
    ObjectDamaged,
    ObjectExists,
    ObjectInUse,
    PutInhibited,
    QueueFull,
    QueueManagerStopping,
    StoreDamaged,
    UnitOfWorkError,
    UnknownObject,
    UnknownUnitOfWork,
)
from ..log.checkpoint import pack_store_lsns, part_limit, split_table
from ..log.manager import RecoveryLog
from ..log.records import (
    Compensation,
    LogRecord,
    Message,
    MessageRef,
    RecordFlag,
    RecordType,
    encode_json,
    encode_shunt,
    encoded_length,
    shunt_copy,
)
from ..store.dirs import set_aside
from ..store.stores import CatalogStore, QueueStore
from . import remote
from .connections import ConnectionRegistry
from .log_management import LogManagement
from .media_points import media_lsn, media_table
from .objects import (
    CHANNEL_DEFAULTS,
    DEAD_LETTER_QUEUE,
    DEFAULT_LOCAL_QUEUE,
    LISTENER_DEFAULTS,
    QLOCAL_DEFAULTS,
    QMGR_DEFAULTS,
    QMGR_OBJECT,
    QREMOTE_DEFAULTS,
    channel_key,
    check_name,
    listener_key,
    validate,
)
from .operator_log import OperatorLog
from .queue import LocalQueue
from .remote import TransmissionHeader

_id_prefix = os.urandom(8)
_id_counter = itertools.count(1)


@functools.lru_cache(maxsize=4096)
def _begin_payload(owner: str) -> bytes:
    """UOW_BEGIN's payload; owners repeat (one per connection), so it is cached."""
    return encode_json({"owner": owner})


def new_msg_id() -> bytes:
    """24 bytes, like MQ's MsgId: 'HMQ' + a per-process random part + a counter."""
    return b"HMQ\0" + _id_prefix + next(_id_counter).to_bytes(8, "big") + b"\0\0\0\0"


#: the owner of the units of work that move messages at BOTHRESH
REQUEUE_OWNER = "backout-requeue"


class PutTarget(NamedTuple):
    """Where a put to a name goes (``output_queue``)."""
    queue: LocalQueue
    #: for a remote queue definition: what the message is wrapped in
    header: TransmissionHeader | None
    #: the attributes that give the put's defaults (a QREMOTE's own)
    attrs: dict


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


class MessageMatch:
    """Get by message id or correlation id (served by the queue's index)."""

    def __init__(self, msg_id: bytes | None = None, correl_id: bytes | None = None):
        self.msg_id = msg_id
        self.correl_id = correl_id
        if msg_id is not None:
            self.index_type, self.ident = "MSGID", msg_id
        elif correl_id is not None:
            self.index_type, self.ident = "CORRELID", correl_id
        else:
            self.index_type, self.ident = None, None

    def __call__(self, msg: Message) -> bool:
        return ((self.msg_id is None or msg.msg_id == self.msg_id) and
                (self.correl_id is None or msg.correl_id == self.correl_id))


class QueueManagerCore:
    def __init__(self, config: QMConfig, oplog: OperatorLog):
        self.config = config
        self.name = config.name
        self.oplog = oplog
        self.log = RecoveryLog(config.log_dir, config.name, config.log_dual_dir)
        self.log.say = oplog.emit
        self.catalog_store: CatalogStore | None = None
        self.objects: dict[str, dict] = {}            # name -> definition (incl. QMGR)
        #: told (objtype, name) when a channel, listener or remote queue changes
        self.definition_listeners: list = []
        self.catalog_dirty: dict[str, dict | None] = {}
        self.catalog_dirty_lsn: int | None = None
        #: the catalog snapshot a flush is writing (kept until the store has it)
        self.catalog_flushing: dict[str, dict | None] = {}
        self.catalog_flushing_lsn: int | None = None
        self.queues: dict[str, LocalQueue] = {}
        self.uows: dict[int, UnitOfWork] = {}
        self.connections = ConnectionRegistry()
        self.next_uow_id = 1
        self.next_object_id = 1
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stopping: str | None = None
        self.started = False
        #: one flush at a time (and no store closed under one); one checkpoint at a time
        self.flush_lock = asyncio.Lock()
        self.checkpoint_lock = asyncio.Lock()
        self._checkpoint_pending = False
        self._flush_pending = False
        self._relieving = False
        self._background: set[asyncio.Task] = set()
        #: store writes running on executor threads; a cancelled flush does not stop
        #: them, and a store must not be closed under its own write transaction
        self._store_io: set[asyncio.Future] = set()
        self.last_checkpoint: dict = {}
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
            self._checkpoint_pending = True
            self.spawn(self.checkpoint("log records"))
        return lsn

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

    # ------------------------------------------------------------------ objects

    def set_definition(self, name: str, definition: dict | None, lsn: int) -> None:
        if definition is None:
            self.objects.pop(name, None)
        else:
            self.objects[name] = definition
        self.catalog_dirty[name] = definition
        if self.catalog_dirty_lsn is None:
            self.catalog_dirty_lsn = lsn

    def open_queue_store(self, definition: dict, *, at_restart: bool = False,
                         report: bool = True) -> LocalQueue:
        """Open (or, for a new queue, create) a queue's store.

        At restart the store of every queue in the catalog must exist: a missing
        one means its messages are lost, and the queue is marked damaged for
        good (the mark is written into the new empty store) until media
        recovery rebuilds it. A store holding another object id may belong to a
        newer incarnation of the name whose create is still in the log: that is
        judged after redo (``report_damage``), and nothing is written into it.
        Restart passes ``report=False``: damage is reported once redo is over."""
        for k, v in QLOCAL_DEFAULTS.items():     # attributes added since it was defined
            definition["attrs"].setdefault(k, v)
        path = self.config.queue_dir(definition["name"])
        existed = (path / "data.mdb").exists()
        map_size = self.config.tuning.store_map_size_mb << 20
        try:
            store = QueueStore(path, definition["object_id"], map_size=map_size,
                               sync=not self.config.scratch, owner=self.name)
            q = LocalQueue(definition, store)
        except StoreDamaged as exc:
            if not at_restart:
                raise
            # unreadable: keep its files aside, and a new store carries the mark
            aside = set_aside(path)
            store = QueueStore(path, definition["object_id"], map_size=map_size,
                               sync=not self.config.scratch, owner=self.name)
            store.mark_damaged(f"{exc.message} (its files are kept as {aside.name})")
            q = LocalQueue(definition, store)
        if at_restart and not existed:
            store.mark_damaged(f"its store {path} was missing at restart")
        q.damaged = bool(store.damaged) or store.object_id != definition["object_id"]
        q.damage_reason = store.damaged or ""
        store.on_damage = lambda why, q=q: self.damage_queue(q, why)
        self.queues[q.name] = q
        if q.damaged and report and not at_restart:
            self.report_damage(q)
        return q

    def damage_queue(self, q: LocalQueue, why: str) -> None:
        """Damage found while running (AMQ7472): the queue's operations fail with
        MQRC 2101 until it is recreated or deleted. Its unflushed effects are in
        the log; it no longer pins the restart point, and is not flushed."""
        if q.damaged or self.queues.get(q.name) is not q:
            return
        q.damaged, q.damage_reason = True, why
        try:
            q.store.mark_damaged(why)   # so that a restart knows too
        except Exception:  # noqa: BLE001 - an unreadable store is detected again at restart
            pass
        self.report_damage(q)

    def report_damage(self, q: LocalQueue) -> None:
        why = q.damage_reason or q.store.damaged or (
            f"its store {q.store.path} belongs to object id {q.store.object_id}, the "
            f"catalog says {q.object_id}")
        self.oplog.emit("HMQ7472E", f"queue {q.name} is damaged: {why}; its operations fail "
                        "with MQRC 2101 until it is recreated from the log (media recovery) "
                        "or deleted")

    async def define_queue(self, name: str, attrs: dict | None = None, *, like: str | None = None,
                           replace: bool = False) -> dict:
        self.check_running()
        check_name(name)
        if name in self.objects:
            if not replace:
                raise ObjectExists(f"queue {name} already exists (use REPLACE to change it)",
                                   queue=name)
            return await self.alter_queue(name, attrs or {})
        base_name = like or DEFAULT_LOCAL_QUEUE
        base = self.objects.get(base_name)
        if like and base is None:
            raise UnknownObject(f"LIKE({like}): queue {like} is not defined", queue=like)
        merged = dict(base["attrs"] if base else QLOCAL_DEFAULTS)
        if base_name == DEFAULT_LOCAL_QUEUE:
            merged["DESCR"] = ""
        merged.update(validate(attrs or {}, QLOCAL_DEFAULTS, f"queue {name}"))
        oid = self.next_object_id
        self.next_object_id += 1
        definition = {"type": "QLOCAL", "name": name, "object_id": oid, "attrs": merged}
        lsn = self.append_record(RecordType.OBJECT_CREATE, object_id=oid, name=name,
                                 payload=encode_json(definition))
        definition["create_lsn"] = lsn
        self.set_definition(name, definition, lsn)
        q = self.open_queue_store(definition)
        if merged["INDXTYPE"] != "NONE":
            q.store.rebuild_index(merged["INDXTYPE"])
        await self.log.force()
        return definition

    async def alter_queue(self, name: str, attrs: dict) -> dict:
        self.check_running()
        q = self.queue(name)
        changes = validate(attrs, QLOCAL_DEFAULTS, f"queue {name}")
        definition = dict(q.definition, attrs=dict(q.attrs, **changes))
        lsn = self.append_record(RecordType.OBJECT_ALTER, obj=q, payload=encode_json(definition))
        self.set_definition(name, definition, lsn)
        old_index = q.index_type
        q.definition = definition
        q.room_check()           # MAXDEPTH may be larger, PUT disabled: held producers look again
        if definition["attrs"]["INDXTYPE"] != old_index:
            await self.flush_all()
            q.store.rebuild_index(definition["attrs"]["INDXTYPE"])
        await self.log.force()
        return definition

    # -- definitions only: remote queues, channels, listeners ------------------------

    DEFINITION_TYPES = {"QREMOTE": (QREMOTE_DEFAULTS, lambda n: n),
                        "CHANNEL": (CHANNEL_DEFAULTS, channel_key),
                        "LISTENER": (LISTENER_DEFAULTS, listener_key)}

    def definition(self, objtype: str, name: str) -> dict:
        key = self.DEFINITION_TYPES[objtype][1](name)
        d = self.objects.get(key)
        if d is None or d["type"] != objtype:
            raise UnknownObject(f"{objtype.lower()} {name} is not defined on queue manager "
                                f"{self.name} (MQRC 2085)", queue=name)
        return d

    async def define_object(self, objtype: str, name: str, attrs: dict, *,
                            replace: bool = False) -> dict:
        """DEFINE QREMOTE / CHANNEL / LISTENER: a definition in the catalog,
        logged like a queue's (OBJECT_CREATE), with nothing stored beside it."""
        self.check_running()
        check_name(name, objtype.lower())
        defaults, key_of = self.DEFINITION_TYPES[objtype]
        key = key_of(name)
        if key in self.objects:
            if not replace:
                what = "queue" if objtype == "QREMOTE" else objtype.lower()
                raise ObjectExists(f"{what} {name} already exists (use REPLACE to change it)",
                                   queue=name)
            if self.objects[key]["type"] != objtype:
                raise ObjectExists(f"{name} is a {self.objects[key]['type']}, not a {objtype} "
                                   "(MQRC 2100 OBJECT_ALREADY_EXISTS)", queue=name)
            return await self.alter_object(objtype, name, attrs)
        merged = dict(defaults)
        merged.update(validate(attrs, defaults, f"{objtype.lower()} {name}"))
        oid = self.next_object_id
        self.next_object_id += 1
        definition = {"type": objtype, "name": name, "object_id": oid, "attrs": merged}
        lsn = self.append_record(RecordType.OBJECT_CREATE, object_id=oid, name=key,
                                 payload=encode_json(definition))
        definition["create_lsn"] = lsn
        self.set_definition(key, definition, lsn)
        await self.log.force()
        self.notify_definitions(objtype, name)
        return definition

    async def alter_object(self, objtype: str, name: str, attrs: dict) -> dict:
        self.check_running()
        d = self.definition(objtype, name)
        key = self.DEFINITION_TYPES[objtype][1](name)
        changes = validate(attrs, self.DEFINITION_TYPES[objtype][0], f"{objtype.lower()} {name}")
        definition = dict(d, attrs=dict(d["attrs"], **changes))
        lsn = self.append_record(RecordType.OBJECT_ALTER, object_id=d["object_id"], name=key,
                                 payload=encode_json(definition))
        self.set_definition(key, definition, lsn)
        await self.log.force()
        self.notify_definitions(objtype, name)
        return definition

    async def delete_object(self, objtype: str, name: str) -> None:
        self.check_running()
        d = self.definition(objtype, name)
        key = self.DEFINITION_TYPES[objtype][1](name)
        lsn = self.append_record(RecordType.OBJECT_DELETE, object_id=d["object_id"], name=key,
                                 payload=encode_json({"name": key}))
        self.set_definition(key, None, lsn)
        self.media_points.pop(key, None)
        await self.log.force()
        self.notify_definitions(objtype, name)

    def notify_definitions(self, objtype: str, name: str) -> None:
        """Tell whoever runs these objects (the channel initiator) that one changed."""
        for listener in list(self.definition_listeners):
            listener(objtype, name)

    async def alter_qmgr(self, attrs: dict) -> dict:
        self.check_running()
        changes = validate(attrs, QMGR_DEFAULTS, f"queue manager {self.name}")
        qm = self.objects[QMGR_OBJECT]
        definition = dict(qm, attrs=dict(qm["attrs"], **changes))
        lsn = self.append_record(RecordType.OBJECT_ALTER, object_id=qm["object_id"],
                                 name=QMGR_OBJECT, payload=encode_json(definition))
        self.set_definition(QMGR_OBJECT, definition, lsn)
        await self.log.force()
        return definition

    def _busy(self, q: LocalQueue) -> str | None:
        """Why DELETE or CLEAR must wait, with MQ's reason code; None when free."""
        if q.uncommitted_puts or q.locked:
            return "it has uncommitted messages (MQRC 2055 Q_NOT_EMPTY)"
        ipprocs, opprocs = self.connections.procs(q.name)
        if ipprocs or opprocs:
            return (f"it is open by connections (IPPROCS {ipprocs}, OPPROCS {opprocs}) "
                    "(MQRC 2042 OBJECT_IN_USE)")
        return None

    async def delete_queue(self, name: str, *, purge: bool = False) -> None:
        self.check_running()
        q = self.queues.get(name)      # a damaged queue may be deleted
        if q is None:
            raise UnknownObject(f"queue {name} is not defined", queue=name)
        if name in (DEFAULT_LOCAL_QUEUE, DEAD_LETTER_QUEUE):
            raise ObjectInUse(f"{name} is a system queue and cannot be deleted", queue=name)
        if (why := self._busy(q)) is not None:
            raise ObjectInUse(f"queue {name} cannot be deleted: {why}", queue=name)
        if q.depth and not purge and not q.damaged:
            raise ObjectInUse(f"queue {name} holds {q.depth} messages; delete it with PURGE "
                              "to discard them (MQRC 2055 Q_NOT_EMPTY)", queue=name)
        lsn = self.append_record(RecordType.OBJECT_DELETE, obj=q,
                                 payload=encode_json({"name": name}))
        self.set_definition(name, None, lsn)
        del self.queues[name]
        self.media_points.pop(name, None)
        await self.log.force()
        async with self.flush_lock:    # not under a flush that is writing it
            q.store.close()
            q.store.destroy(q.store.path)

    async def clear_queue(self, name: str) -> int:
        """CLEAR QLOCAL: remove every message (refused while any is uncommitted).

        The queue is emptied in memory in the same step as its record, so no put
        that lands while the record is forced can be wiped; the store is hidden
        until it is emptied, after the force (write-ahead). The flush lock is
        held from the record to the store clear: a flush in that window would
        write later puts into the store the clear then drops, and a checkpoint
        would move the restart point past a clear not yet in the store."""
        self.check_running()
        q = self.queue(name)
        if (why := self._busy(q)) is not None:
            raise ObjectInUse(f"queue {name} cannot be cleared: {why}", queue=name)
        async with self.flush_lock:
            await self.quiesce_store_io()
            q = self.queue(name)
            if (why := self._busy(q)) is not None:
                raise ObjectInUse(f"queue {name} cannot be cleared: {why}", queue=name)
            count = q.curdepth
            clear_lsn = self.append_record(RecordType.OBJECT_ALTER, obj=q,
                                           payload=encode_json(dict(q.definition, clear=True)))
            cleared_at = self.log.end_lsn
            q.clear_memory()
            q.clear_pending = (clear_lsn, cleared_at)   # until the store has it (flush_all)
            await self.log.force(cleared_at)
            await self._store_write(q.store.clear, cleared_at)
            q.clear_pending = None
            q.store_hidden = False
        return count

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

    def defaults_for_name(self, name: str, priority: int | None, persistent: bool | None):
        """A put's priority and persistence where the caller left them to the
        queue (for a remote queue, its QREMOTE definition)."""
        return self.put_defaults(self.output_queue(name).attrs, priority, persistent)

    async def put(self, queue: str, msg: Message, uow: UnitOfWork | None = None) -> Message:
        """Put ``msg`` (priority and persistence already resolved by the caller);
        outside a unit of work a persistent put returns once it is on disk."""
        msg, forced = self.put_nowait(queue, msg, uow)
        if forced is not None:
            await forced
        return msg

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

    def _after_commit_put(self, q: LocalQueue) -> None:
        if q.dirty_entries() >= self.config.tuning.flush_max_entries and not self._flush_pending:
            self._flush_pending = True
            self.spawn(self.flush_all())

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
            q = self.queue(queue)
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
        q = self.queue(queue)
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
        q = self.queue(queue)
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

    # ------------------------------------------------------------------ units of work

    def begin(self, owner: str = "") -> UnitOfWork:
        self.check_running()
        uow = UnitOfWork(self.next_uow_id, owner=owner)
        self.next_uow_id += 1
        self.uows[uow.id] = uow
        return uow

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
        return self.log.force() if effect_lsn and force else None

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
            else:
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
        # each op leaves the list only once it is compensated: if the log fills
        # part way (LogFull), a retry goes on where this stopped
        while uow.ops:
            op = uow.ops[-1]
            q = op.queue
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
        return requeue

    def _compensate(self, uow: UnitOfWork, op: UowOp, backout_count: int) -> int:
        undone = RecordType.MSG_PUT if op.kind == "put" else RecordType.MSG_GET
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
            else:
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

    async def resolve(self, uow_id: int, commit: bool) -> None:
        """Resolve an in-doubt unit of work by id (MQ's RESOLVE/rsvmqtrn)."""
        uow = self.find_uow(uow_id)
        if not uow.in_doubt:
            raise UnitOfWorkError(f"unit of work {uow_id} is {uow.state}, not in doubt",
                                  uow=uow_id)
        await (self.commit(uow) if commit else self.backout(uow))

    def in_doubt(self) -> list[UnitOfWork]:
        return [u for u in self.uows.values() if u.in_doubt]

    # ------------------------------------------------------------------ flush & checkpoint

    async def flush_all(self) -> int:
        """Write every dirty store under the write-ahead rule: snapshot, force the log
        past the snapshot, then one synced transaction per store. A snapshot
        stays in memory until its store has it, so a flush that is cancelled or
        fails is taken up by the next one."""
        self._flush_pending = False
        async with self.flush_lock:
            # a cancelled flush's write may still run on its thread: let it finish
            # first, or it could land after (and undo) the newer one
            await self.quiesce_store_io()
            snapshots = [(q, q.begin_flush()) for q in list(self.queues.values())
                         if not q.damaged]
            snapshots = [(q, s) for q, s in snapshots if s is not None and self._store_present(q)]
            catalog = self._begin_catalog_flush()
            if not snapshots and catalog is None:
                return 0
            target = self.log.end_lsn
            await self.log.force(target)
            for q, snap in snapshots:
                if q.clear_pending is not None:     # a CLEAR whose store clear failed
                    await self._store_write(q.store.clear, q.clear_pending[1])
                    q.clear_pending, q.store_hidden = None, False
                next_seq = q.next_seq
                await self._store_write(q.store.apply, snap, target, q.index_type, next_seq)
                q.stored_next_seq = next_seq
                q.end_flush()
            if catalog is not None:
                if not (self.config.catalog_dir / "data.mdb").exists():
                    raise self._fatal(f"its store {self.config.catalog_dir} is missing")
                try:
                    await self._store_write(self.catalog_store.apply, catalog, target)
                except StoreDamaged as exc:   # (a full disk is no damage: it is retried)
                    raise self._fatal(exc.message) from exc
                self.catalog_flushing, self.catalog_flushing_lsn = {}, None
            return len(snapshots)

    def _store_present(self, q: LocalQueue) -> bool:
        """A store whose files were removed under a running queue manager is
        damaged: LMDB would go on writing to the deleted file."""
        if (q.store.path / "data.mdb").exists():
            return True
        self.damage_queue(q, f"its store {q.store.path} was removed while the queue manager "
                          "was running")
        return False

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

    def _fatal(self, why: str) -> ObjectDamaged:
        """Damage to the queue manager object: a preemptive shutdown (AMQ7472).
        Returns the error for the operation that found it to raise."""
        text = (f"the queue manager object of {self.name} is damaged: {why}; the queue "
                "manager stops (preemptive)")
        self.oplog.emit("HMQ7472E", text)
        if self.on_fatal is not None and not self.stopping:
            self.on_fatal(why)
        return ObjectDamaged(text)

    def _begin_catalog_flush(self) -> dict | None:
        if not self.catalog_dirty and not self.catalog_flushing:
            return None
        self.catalog_flushing = {**self.catalog_flushing, **self.catalog_dirty}
        lsns = [x for x in (self.catalog_flushing_lsn, self.catalog_dirty_lsn) if x]
        self.catalog_flushing_lsn = min(lsns) if lsns else None
        self.catalog_dirty, self.catalog_dirty_lsn = {}, None
        return self.catalog_flushing

    async def _store_write(self, fn, *args) -> None:
        fut = self.loop.run_in_executor(None, fn, *args)
        self._store_io.add(fut)
        fut.add_done_callback(self._store_io.discard)
        # shielded: cancelling the flush must not mark the write done while its
        # thread is still inside the store's transaction
        await asyncio.shield(fut)

    def close_stores(self) -> None:
        for q in self.queues.values():
            q.store.close()
        if self.catalog_store is not None:
            self.catalog_store.close()

    async def quiesce_store_io(self) -> None:
        """Wait for store writes already running on other threads."""
        if self._store_io:
            await asyncio.wait(list(self._store_io))

    def restart_point(self, begin_lsn: int, oldest_at_begin: int | None) -> int:
        """The oldest LSN restart would need now: a unit of work is needed from its
        ``first_lsn`` (its latest shunt, once shunted), a store from its oldest
        unflushed effect."""
        candidates = [begin_lsn]
        if oldest_at_begin:
            candidates.append(oldest_at_begin)
        candidates += [u.first_lsn for u in self.uows.values() if u.first_lsn]
        candidates += [q.recovery_lsn for q in self.queues.values()
                       if q.recovery_lsn and not q.damaged]
        candidates += [x for x in (self.catalog_dirty_lsn, self.catalog_flushing_lsn) if x]
        return min(candidates)

    def media_point(self) -> int:
        """Oldest LSN media recovery of the objects needs (core/media_points.py)."""
        return media_lsn(self)

    async def checkpoint(self, reason: str = "requested") -> dict:
        async with self.checkpoint_lock:
            self._checkpoint_pending = False
            begin = self.append_record(RecordType.CHECKPOINT_BEGIN,
                                       payload=encode_json({"reason": reason}))
            # in the same step as BEGIN: the shunts are forced with the checkpoint,
            # before the control file lets the log behind them be reused
            self._shunt_long_units(begin, urgent=reason == "log space")
            oldest_at_begin = min((u.first_lsn for u in self.uows.values() if u.first_lsn),
                                  default=0)
            await self.flush_all()
            crash_point("checkpoint.mid")
            table = {
                "begin_lsn": begin,
                "oldest_uow_at_begin": oldest_at_begin,
                # first_lsn: where restart needs it from (its latest shunt, if any)
                "uows": [{"id": u.id, "state": u.state, "first_lsn": u.first_lsn,
                          "begin_lsn": u.begin, "last_lsn": u.last_lsn}
                         for u in self.uows.values() if u.first_lsn],
                # only the stores behind the log: a flushed store holds its own
                # recovery LSN and next sequence (thousands of idle queues cost nothing)
                "stores": {q.name: {"object_id": q.object_id, "recovery_lsn": q.recovery_lsn,
                                    "next_seq": q.next_seq} for q in self.queues.values()
                           if q.recovery_lsn is not None or q.next_seq != q.stored_next_seq},
                # every store's recovery LSN as written: a store found older at
                # restart was put back from an older copy (recovery/restart.py)
                "store_lsns": pack_store_lsns({
                    q.object_id: q.store.recovery_lsn for q in self.queues.values()
                    if not (q.damaged or q.recreating or q.store_hidden)}),
                "next_uow_id": self.next_uow_id,
                "next_object_id": self.next_object_id,
                "reason": reason,
            }
            if self.config.log.log_type == "linear":
                table["media"] = media_table(self)
            restart_lsn = self.restart_point(begin, oldest_at_begin)
            table["restart_lsn"] = restart_lsn
            head, parts = split_table(table, part_limit(self.log.extent_payload))
            if parts:
                head["parts"] = [self.append_record(RecordType.CHECKPOINT_PART,
                                                    payload=encode_json(p)) for p in parts]
            end = self.append_record(RecordType.CHECKPOINT_END, payload=encode_json(head))
            if end - begin > self.log.extent_payload:
                self.oplog.emit("HMQ7466W", f"A checkpoint of queue manager {self.name} "
                                f"took {end - begin} bytes of log, more than one extent "
                                f"({self.log.extent_payload} bytes): larger extents "
                                "(--log-file-pages) keep checkpoints a small part of the log")
            await self.log.force()
            media_lsn = self.media_point() if self.config.log.log_type == "linear" else 0
            await self.log.set_checkpoint(end, restart_lsn, media_lsn)
            self.last_checkpoint = table | {"end_lsn": end}
            self.report_log_need()
            self._warn_long_units_of_work()
            self._end_held_requeues()
            self.log_management.after_checkpoint()
            return self.last_checkpoint

    def _warn_long_units_of_work(self) -> None:
        """Name every unit of work in the log through each ``long_uow_checkpoints``
        checkpoints (MQ's CSQJ160I and URCHKTH): it pins the restart point (or,
        once shunted, still holds its messages), and on a circular log that
        cannot shunt it, it will be backed out when the log is full."""
        every = self.config.tuning.long_uow_checkpoints
        now = time.time_ns()
        for u in self.uows.values():
            if not u.first_lsn:
                continue
            u.checkpoints += 1
            if every and u.checkpoints % every == 0:
                ext = self.log.extent_of(u.begin)
                where = f" in {self.log.extent_path(ext.number).name}" if ext else ""
                age = (now - (u.first_log_ns or u.started_ns)) / 1e9
                holds = ("it pins the restart point" if u.first_lsn == u.begin else
                         f"its records are shunted (restart needs the log from LSN "
                         f"{u.first_lsn}), but it holds its messages")
                self.oplog.emit("HMQ7465W", f"unit of work {u.id} ({u.state}, owner "
                                f"{u.owner or '-'}) has been in the log through {u.checkpoints} "
                                f"checkpoints, for {age:.0f} s since LSN {u.begin}{where}: "
                                f"{holds}; commit or back it out")

    # ------------------------------------------------------------------ log shunting

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
        records = len(u.undone) + sum(1 for op in u.ops if op.lsn)
        at_least = sum(len(op.msg.body) for op in u.ops if op.lsn and op.kind == "put")
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

    def report_log_need(self) -> None:
        st = self.log.state
        e = self.log.extent_of(st.restart_lsn)
        if e is not None:
            self.oplog.emit("HMQ7467I", f"The oldest log extent required to start queue "
                            f"manager {self.name} is {self.log.extent_path(e.number).name} "
                            f"(restart LSN {st.restart_lsn})")
        if st.log_type == "linear":
            m = self.log.extent_of(st.media_lsn)
            if m is not None:
                self.oplog.emit("HMQ7468I", f"The oldest log extent required to perform media "
                                f"recovery of queue manager {self.name} is "
                                f"{self.log.extent_path(m.number).name} (media LSN "
                                f"{st.media_lsn})")

    # ------------------------------------------------------------------ log space

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
            if not self._relieving:
                self._relieving = True
                self.spawn(self._relieve_log_pressure())
        elif not self._checkpoint_pending and not self.checkpoint_lock.locked():
            # (switches made by a checkpoint's own records start no other one)
            self._checkpoint_pending = True
            self.spawn(self.checkpoint("extent switch"))

    async def _relieve_log_pressure(self) -> None:
        try:
            await self._release_log_space()
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
