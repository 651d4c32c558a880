"""Objects and definitions: local queues (their stores opened, damaged,
cleared, deleted), remote queues, channels, listeners and the queue manager
object, each defined, altered and deleted with a record in the log and a
change to the catalog that the next flush writes.

``Definitions`` is a part of the core (``engine.QueueManagerCore``), which
provides what ``DefinitionsHost`` lists. Not here: the attributes and their
defaults (``objects.py``), the catalog's flush (``checkpoints.py``), media
images of objects (``recovery/images.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import ObjectExists, ObjectInUse, StoreDamaged, UnknownObject
from ..log.records import RecordType, encode_json
from ..store.dirs import set_aside
from ..store.stores import QueueStore
from .objects import (
    CHANNEL_DEFAULTS,
    DEAD_LETTER_QUEUE,
    DEFAULT_LOCAL_QUEUE,
    LISTENER_DEFAULTS,
    QLOCAL_DEFAULTS,
    QMGR_DEFAULTS,
    QMGR_OBJECT,
    QREMOTE_DEFAULTS,
    TOPIC_DEFAULTS,
    channel_key,
    check_name,
    listener_key,
    topic_key,
    validate,
)
from .queue import LocalQueue

if TYPE_CHECKING:
    from ..config import QMConfig
    from ..log.manager import RecoveryLog
    from .connections import ConnectionRegistry
    from .operator_log import OperatorLog


class DefinitionsHost(Protocol):
    """What definitions use of the rest of the core."""
    name: str
    config: QMConfig
    log: RecoveryLog
    oplog: OperatorLog
    objects: dict[str, dict]
    queues: dict[str, LocalQueue]
    connections: ConnectionRegistry
    next_object_id: int
    flush_lock: asyncio.Lock
    #: publish/subscribe (pubsub/), once started: it says which queues it owns
    pubsub: Any

    def check_running(self) -> None: ...

    def queue(self, name: str) -> LocalQueue: ...

    def append_record(self, rtype: RecordType, *, obj: LocalQueue | None = None,
                      object_id: int = 0, name: str = "", payload: bytes = b"") -> int: ...

    def catalog_changed(self, name: str, definition: dict | None, lsn: int) -> None: ...

    def forget_media_point(self, name: str) -> None: ...

    async def flush_all(self) -> int: ...

    async def quiesce_store_io(self) -> None: ...

    async def _store_write(self, fn: Callable[..., Any], *args: Any) -> None: ...


class Definitions:
    """The objects of the core (a part of ``QueueManagerCore``, which is its
    ``DefinitionsHost``)."""

    def _init_definitions(self) -> None:
        #: told (objtype, name) when a channel, listener or remote queue changes
        self.definition_listeners: list[Callable[[str, str], None]] = []

    def set_definition(self, name: str, definition: dict | None, lsn: int | None) -> None:
        """``name``'s definition (None: deleted) by the record at ``lsn``, for the
        next flush to write to the catalog. ``lsn`` None: the catalog store has
        it already (restart redo below its recovery LSN), so it is not written."""
        if definition is None:
            self.objects.pop(name, None)
        else:
            self.objects[name] = definition
        if lsn is not None:
            self.catalog_changed(name, definition, lsn)

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
                        "LISTENER": (LISTENER_DEFAULTS, listener_key),
                        # topic objects (pubsub/ runs the tree they attach to)
                        "TOPIC": (TOPIC_DEFAULTS, topic_key)}

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
        self.forget_media_point(key)
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
        if self.pubsub is not None:
            self.pubsub.check_deletable(name)     # a subscription's managed queue
        if (why := self._busy(q)) is not None:
            raise ObjectInUse(f"queue {name} cannot be deleted: {why}", queue=name)
        if q.depth and not purge and not q.damaged:
            raise ObjectInUse(f"queue {name} holds {q.depth} messages; delete it with PURGE "
                              "to discard them (MQRC 2055 Q_NOT_EMPTY)", queue=name)
        lsn = self.append_record(RecordType.OBJECT_DELETE, obj=q,
                                 payload=encode_json({"name": name}))
        self.set_definition(name, None, lsn)
        del self.queues[name]
        self.forget_media_point(name)
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
