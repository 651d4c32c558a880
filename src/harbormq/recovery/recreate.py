"""Media recovery (MQ's rcrmqobj): recreating a damaged object from its latest
media image and the log after it.

**Recreate.** A store rebuilt from an image starts as a store whose recovery
LSN is B: replay applies an effect (a commit, an auto-committed put or get, a
compensation) only if its LSN is at or above B, exactly as restart redo does
for a store. Records are read from ``replay_from``, so a unit of work that was
in flight at B and committed later has its earlier puts and gets seen. The
image's chunks are written first (pass 1, B to its END), then the log from
``replay_from`` is replayed over them (pass 2): a chunk holds the state at B,
which effects logged between B and END must override.
"""


from __future__ import annotations

import mmap
import struct
from dataclasses import replace
from pathlib import Path

from ..core.engine import QueueManagerCore
from ..core.media_points import catalog_media_lsn, media_point_of
from ..core.objects import QMGR_OBJECT
from ..errors import (
    HarbormqError,
    LogMissing,
    ObjectInUse,
    StoreDamaged,
    UnknownObject,
)
from ..log.manager import RecoveryLog
from ..log.reader import ExtentReader
from ..log.records import (
    EXTENT_HEADER_SIZE,
    MIN_RECORD,
    TRAILER,
    LogRecord,
    Message,
    RecordType,
    decode_json,
    image_chunk_entries,
    message_key_of,
)
from ..log.replay import CommitRule, PendingOp
from ..store.dirs import REBUILDING, replace_dir
from ..store.stores import CatalogStore, QueueStore
from .images import Progress, no_progress, require_linear, select_objects
from .plan import ExtentFact, RecreatePlan, recreate_plan

#: replay writes the rebuilt store every this many changes (bounded memory)
REBUILD_BATCH = 20_000
#: the first fields of a record header: length, crc32c, lsn
RECORD_PREFIX = struct.Struct("<IIQ")


def log_view(core: QueueManagerCore) -> RecoveryLog:
    """A read-only view of the log as it is now (the running log keeps appending)."""
    return core.log.view()


def check_extents(log: RecoveryLog, from_lsn: int, what: str) -> None:
    """Every extent from the one holding ``from_lsn`` to the end must be there
    (HMQ6767E naming the first missing one; nothing has been changed yet)."""
    chain = log.chain()
    if not chain or from_lsn < chain[0].first_lsn:
        raise LogMissing(f"{what} needs the log from LSN {from_lsn}, older than the oldest "
                         "extent the log control file lists", lsn=from_lsn)
    for e in chain:
        if e.end_lsn is not None and e.end_lsn <= from_lsn:
            continue
        path = log.extent_path(e.number)
        if not log.extent_present(e):
            raise LogMissing(f"{what} needs log extent {path.name} (LSN {e.first_lsn}..; "
                             f"replay starts at LSN {from_lsn}), which is missing",
                             path=str(path), lsn=from_lsn,
                             hint="restore it from the archive or a backup, then try again")


def log_end(log: RecoveryLog) -> int:
    """LSN just past the last valid record: reads the newest extent, without
    repairing a torn tail (restart's redo does that)."""
    active = log.state.active
    reader = ExtentReader(log.active_path(), newest=True)
    for _ in reader.records(active.first_lsn):
        pass
    return reader.end.lsn


def log_end_estimate(log: RecoveryLog) -> int:
    """Where the records of the newest extent end, walking their length fields
    and LSNs only (no CRCs): cheap enough for every restart, which uses it to
    find stores whose recovery LSN lies beyond the end of the log. A torn last
    record can make it one record long; redo's full read settles the end.

    The walk starts at the last checkpoint's record when the newest extent
    holds it (its place is in the control file, written once the record was
    on disk), not at the extent's start: a restart walks what followed the
    checkpoint, not up to 256 MiB. If that record does not read as one, the
    walk starts at the extent's start after all."""
    return LogEndWalk(log).reach()


class LogEndWalk:
    """``log_end_estimate`` walked only as far as the questions need: restart
    asks for each store's recovery LSN, and each walk goes on from where the
    last one stopped (a store flushed before the checkpoint needs none)."""

    def __init__(self, log: RecoveryLog):
        self.log = log
        self._at: int | None = None     # the LSN walked to (a record's start)
        self._ended = False             # ... and it is where the records end

    def reach(self, lsn: int | None = None) -> int:
        """An LSN the records reach at or past ``lsn``, or where they end when
        that is before it (``lsn`` None: where they end)."""
        active = self.log.state.active
        checkpoint = self.log.state.checkpoint_lsn
        if lsn is not None and lsn <= checkpoint:
            return checkpoint       # (its record is on disk: see log_end_estimate)
        if self._at is not None and (self._ended or (lsn is not None and self._at >= lsn)):
            return self._at
        first = active.first_lsn
        stop = None if lsn is None else EXTENT_HEADER_SIZE + lsn - first
        with open(self.log.active_path(), "rb") as f, \
                mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            def walk(from_lsn: int) -> int:
                end = _records_end(buf, first, EXTENT_HEADER_SIZE + from_lsn - first, stop)
                return first + end - EXTENT_HEADER_SIZE

            if self._at is not None:
                reached = walk(self._at)
            else:
                start = checkpoint if checkpoint > first else first
                reached = walk(start)
                if reached == start and start != first:    # the checkpoint's record
                    reached = walk(first)                   # does not read as one
        self._at = reached
        self._ended = lsn is None or reached < lsn
        return reached


def _records_end(buf, first_lsn: int, offset: int, stop: int | None = None) -> int:
    """The offset past the last of the well-formed records that follow one
    another from ``offset``, or the first such offset at or past ``stop``."""
    size = len(buf)
    if stop is None:
        stop = size
    while offset + MIN_RECORD <= size and offset < stop:
        length, _crc, lsn = RECORD_PREFIX.unpack_from(buf, offset)
        if length < MIN_RECORD or length % 8 or offset + length > size or \
                lsn != first_lsn + offset - EXTENT_HEADER_SIZE or \
                TRAILER.unpack_from(buf, offset + length - 4)[0] != length:
            break
        offset += length
    return offset


class QueueRebuild:
    """Rebuild one queue's store from its latest image and the log after it, up
    to ``to_lsn``, into a new store at ``path`` (runs on a worker thread or
    during restart; touches nothing but ``path``)."""

    def __init__(self, log: RecoveryLog, definition: dict, point: dict, to_lsn: int,
                 path: Path, map_size: int, progress: Progress = no_progress):
        self.log = log
        self.definition = definition
        self.name = definition["name"]
        self.oid = definition["object_id"]
        self.image_lsn = point["image_lsn"]
        self.replay_from = point["replay_from"]
        self.to_lsn = to_lsn
        self.path = path
        self.map_size = map_size
        self.progress = progress
        self.next_seq = 1
        self.records = 0
        self.image_messages = 0
        self.effects = 0

    def run(self) -> dict:
        QueueStore.destroy(self.path)
        # unsynced transactions: nobody relies on this store until it is synced
        # below and put in place, and a crash before that leaves a work directory
        store = QueueStore(self.path, self.oid, map_size=self.map_size, sync=False,
                           owner=self.log.qm_name)
        try:
            self._pass1_image(store)
            self._pass2_replay(store)
            index_type = self.definition["attrs"].get("INDXTYPE", "NONE")
            store.apply({}, self.to_lsn, index_type, self.next_seq)
            store.rebuild_index(index_type)
            messages = store.count()
            store.sync()
        finally:
            store.close()
        return {"object": self.name, "image_lsn": self.image_lsn,
                "replay_from": self.replay_from, "to_lsn": self.to_lsn,
                "image_messages": self.image_messages, "effects": self.effects,
                "records": self.records, "messages": messages}

    def _pass1_image(self, store: QueueStore) -> None:
        """The image's messages, the state at B (nothing to do when B is the
        create record: a queue starts empty)."""
        image_id = None
        total = max(1, self.to_lsn - self.image_lsn)
        batch: list[tuple[bytes, bytes]] = []
        for rec in self.log.read_from(self.image_lsn, self.to_lsn):
            if rec.object_id != self.oid:
                continue
            if rec.lsn == self.image_lsn:
                if rec.type == RecordType.OBJECT_CREATE:
                    return
                if rec.type != RecordType.MEDIA_IMAGE_BEGIN:
                    break
                begin = decode_json(rec.payload)
                image_id = begin["image_id"]
                self.next_seq = max(self.next_seq, begin["next_seq"])
            elif rec.type == RecordType.MEDIA_IMAGE_CHUNK:
                cid, raws = image_chunk_entries(rec.payload)
                if cid == image_id:
                    batch += [(message_key_of(raw), raw) for raw in raws]
                    self.image_messages += len(raws)
                    if len(batch) >= REBUILD_BATCH:
                        store.load_encoded(batch)
                        batch.clear()
                        self.progress(self.name, rec.lsn - self.image_lsn, 2 * total)
            elif rec.type == RecordType.MEDIA_IMAGE_END and \
                    decode_json(rec.payload).get("image_id") == image_id:
                store.load_encoded(batch)
                return
        raise StoreDamaged(f"no complete media image of {self.name} at LSN {self.image_lsn}: "
                           "the log there does not hold it", lsn=self.image_lsn)

    def _pass2_replay(self, store: QueueStore) -> None:
        """The log from ``replay_from`` over the image: the commit rule with
        effects due at or after the image's BEGIN (B), written in batches."""
        effects = _RebuildEffects(self, store)
        rule = CommitRule(effects)
        total = max(1, self.to_lsn - self.replay_from)
        T = RecordType
        for rec in self.log.read_from(self.replay_from, self.to_lsn):
            self.records += 1
            if self.records % 20_000 == 0:
                self.progress(self.name, total + rec.lsn - self.replay_from, 2 * total)
            if rule.feed(rec) or rec.object_id != self.oid:
                continue
            if rec.type == T.OBJECT_ALTER and decode_json(rec.payload).get("clear") and \
                    rec.lsn >= self.image_lsn:
                effects.pending.clear()
                store.clear(0)
            elif rec.type == T.OBJECT_DELETE:
                raise StoreDamaged(f"the log deletes {self.name} (object id {self.oid}) at LSN "
                                   f"{rec.lsn}: there is nothing to recreate", lsn=rec.lsn)
        effects.write()
        self.progress(self.name, 2 * total, 2 * total)


class _RebuildEffects:
    """The commit rule's effects on a store being rebuilt: only this object's
    records, only effects at or after the image (B); pending changes are
    written every REBUILD_BATCH."""

    def __init__(self, rebuild: QueueRebuild, store: QueueStore):
        self.rebuild = rebuild
        self.store = store
        self.pending: dict[bytes, Message | None] = {}

    def target(self, rec: LogRecord) -> bool | None:
        return True if rec.object_id == self.rebuild.oid else None

    def due(self, target, lsn: int) -> bool:
        return lsn >= self.rebuild.image_lsn

    def seen_put(self, target, msg: Message) -> None:
        self.rebuild.next_seq = max(self.rebuild.next_seq, msg.seq + 1)

    def opened(self, op: PendingOp, rec: LogRecord) -> bool:
        return True

    def closed(self, op: PendingOp, applied: bool) -> None:
        pass

    def put(self, target, msg: Message, lsn: int) -> None:
        self._effect(msg.key, msg)

    def delete(self, target, key: bytes, lsn: int, op: PendingOp | None) -> None:
        self._effect(key, None)

    def backed_out(self, op: PendingOp, backout_count: int, lsn: int) -> None:
        msg = self.pending[op.key] if op.key in self.pending else self.store.get(op.key)
        if msg is not None:
            self._effect(op.key, replace(msg, backout_count=backout_count))

    def _effect(self, key: bytes, msg: Message | None) -> None:
        self.pending[key] = msg
        self.rebuild.effects += 1
        if len(self.pending) >= REBUILD_BATCH:
            self.write()

    def write(self) -> None:
        if self.pending:
            self.store.apply(self.pending, 0)
            self.pending.clear()


def rebuild_catalog(log: RecoveryLog, from_lsn: int, to_lsn: int) -> dict[str, dict]:
    """Every live object's definition, from the log alone: each object's latest
    image or create record lies at or after ``from_lsn``, and every later alter
    and delete is there too."""
    objects: dict[str, dict] = {}
    T = RecordType
    for rec in log.read_from(from_lsn, to_lsn):
        t = rec.type
        if t == T.OBJECT_CREATE:
            d = decode_json(rec.payload)
            d["create_lsn"] = rec.lsn
            objects[rec.object_name] = d
        elif t == T.MEDIA_IMAGE_BEGIN:
            d = dict(decode_json(rec.payload)["attributes"])
            cur = objects.get(rec.object_name)
            if cur is None or cur["object_id"] == d["object_id"]:
                objects[rec.object_name] = d
        elif t == T.OBJECT_ALTER:
            d = decode_json(rec.payload)
            d.pop("clear", None)
            cur = objects.get(rec.object_name)
            if cur is not None and cur["object_id"] == rec.object_id:
                d["create_lsn"] = cur.get("create_lsn", 0)
                objects[rec.object_name] = d
        elif t == T.OBJECT_DELETE:
            cur = objects.get(rec.object_name)
            if cur is not None and cur["object_id"] == rec.object_id:
                del objects[rec.object_name]
    return objects


def write_catalog(path: Path, objects: dict[str, dict], recovery_lsn: int,
                  owner: str) -> None:
    CatalogStore.destroy(path)
    store = CatalogStore(path, owner=owner)
    try:
        store.apply(objects, recovery_lsn)
    finally:
        store.close()


# --- recreate (the queue manager running) ---------------------------------------------------

def plans(core: QueueManagerCore, names: list[str]) -> list[RecreatePlan]:
    """What recreating each object needs, from the log as it is now (pure once
    the facts are read: ``recovery/plan.py``)."""
    view = log_view(core)
    facts = [ExtentFact(e.number, e.first_lsn, e.end_lsn, view.extent_present(e))
             for e in view.chain()]
    out = []
    for name in names:
        if name == QMGR_OBJECT:
            lsn = catalog_media_lsn(core)
            point = {"image_lsn": lsn, "replay_from": lsn}
        else:
            point = media_point_of(core, name)
        out.append(recreate_plan(name, point, facts, core.log.end_lsn))
    return out


async def recreate_objects(core: QueueManagerCore, obj_type: str, pattern: str | None,
                           progress: Progress = no_progress, *,
                           dry_run: bool = False) -> list[dict]:
    """``harbormq recreate``: the queue manager object first, then the queues.
    The plan comes first; ``dry_run`` returns it and changes nothing."""
    require_linear(core, "recreating an object")
    core.check_running()
    names = select_objects(core, obj_type, pattern)
    planned = plans(core, names)
    if dry_run:
        return [p.as_dict() | {"plan": p.describe()} for p in planned]
    # every extent any of them needs is there before anything is changed
    view = log_view(core)
    for p in planned:
        check_extents(view, p.replay_from, f"media recovery of {p.object}")
    out = []
    for name in names:
        if name == QMGR_OBJECT:
            out.append(await _recreate_catalog(core, progress))
        elif core.objects[name]["type"] == "QLOCAL":
            out.append(await recreate_queue(core, name, progress))
        elif obj_type != "all":
            # a remote, alias or model queue, a process, a namelist, a channel or a
            # listener is a definition only: the catalog's recreate brings it back
            out.append({"object": core.objects[name]["name"], "definition": True})
    await core.checkpoint("media recovery")
    return out


async def _recreate_catalog(core: QueueManagerCore, progress: Progress) -> dict:
    to_lsn = core.log.end_lsn
    expected = {n: _without_create_lsn(d) for n, d in core.objects.items()}   # as of to_lsn
    await core.log.force(to_lsn)
    view = log_view(core)
    start = catalog_media_lsn(core)
    progress(QMGR_OBJECT, 0, 1)
    objects = await core.loop.run_in_executor(None, rebuild_catalog, view, start, to_lsn)
    if {n: _without_create_lsn(d) for n, d in objects.items()} != expected:
        raise HarbormqError("the definitions rebuilt from the log differ from the queue "
                            "manager's: the catalog store was not replaced", msgid="HMQ7475E")
    tmp = core.config.catalog_dir.with_name("qmgr" + REBUILDING)
    await core.loop.run_in_executor(None, write_catalog, tmp, objects, to_lsn, core.name)
    async with core.flush_lock:
        await core.quiesce_store_io()
        core.catalog_store.close()
        replace_dir(tmp, core.config.catalog_dir, keep_old=False)
        # definitions changed since to_lsn are still dirty: the next flush writes them
        core.replace_catalog_store(CatalogStore(core.config.catalog_dir, owner=core.name),
                                   to_lsn)
    progress(QMGR_OBJECT, 1, 1)
    core.oplog.emit("HMQ7474I", f"object {QMGR_OBJECT} (the catalog of {len(objects)} "
                    f"definitions) recreated from the log (LSN {start} to {to_lsn})")
    return {"object": QMGR_OBJECT, "definitions": len(objects), "from_lsn": start,
            "to_lsn": to_lsn}


def _without_create_lsn(d: dict) -> dict:
    return {k: v for k, v in d.items() if k != "create_lsn"}


async def recreate_queue(core: QueueManagerCore, name: str,
                         progress: Progress = no_progress) -> dict:
    q = core.queues.get(name)
    if q is None:
        raise UnknownObject(f"queue {name} is not defined on queue manager {core.name}",
                            queue=name)
    holders = sorted({u.id for u in core.uows.values() for op in u.ops if op.queue is q})
    if holders:
        raise ObjectInUse(f"queue {name} cannot be recreated while units of work "
                          f"{', '.join(map(str, holders))} hold messages on it; commit or "
                          "back them out first", queue=name)
    if q.recreating:
        raise ObjectInUse(f"queue {name} is being recreated already", queue=name)
    point = media_point_of(core, name)
    # offline from here: a recreate rebuilds the store from the log, and nothing
    # may change the queue meanwhile (its operations fail with MQRC 2101)
    q.recreating = True
    try:
        while name in core.imaging:     # an image of it in progress abandons at its next chunk
            await core.imaging[name]
        if not q.damaged:
            # a healthy store takes its last effects first: a crash during the
            # rebuild must find it as complete as its recovery LSN says
            await core.flush_all()
        to_lsn = core.log.end_lsn
        await core.log.force(to_lsn)
        view = log_view(core)
        check_extents(view, point["replay_from"], f"media recovery of {name}")
        final = core.config.queue_dir(name)
        tmp = final.with_name(final.name + REBUILDING)
        rebuild = QueueRebuild(view, q.definition, point, to_lsn, tmp,
                               core.config.tuning.store_map_size_mb << 20,
                               _threadsafe(core, progress))
        result = await core.loop.run_in_executor(None, rebuild.run)
        async with core.flush_lock:
            await core.quiesce_store_io()
            if core.queues.get(name) is not q:       # deleted meanwhile
                QueueStore.destroy(tmp)
                raise UnknownObject(f"queue {name} was deleted while it was being recreated",
                                    queue=name)
            q.store.close()
            replace_dir(tmp, final, keep_old=q.damaged)
            del core.queues[name]
            fresh = core.open_queue_store(q.definition)
            fresh.next_seq = max(fresh.next_seq, q.next_seq)
    finally:
        q.recreating = False     # (the old queue object: on success a new one serves)
    core.set_media_point(name, dict(point))
    core.oplog.emit("HMQ7474I", f"queue {name} recreated from the log: image at LSN "
                    f"{point['image_lsn']} ({result['image_messages']} messages), "
                    f"{result['effects']} later effects replayed from LSN "
                    f"{point['replay_from']} to {to_lsn}; {result['messages']} messages")
    return result


def _threadsafe(core: QueueManagerCore, progress: Progress) -> Progress:
    def call(obj: str, done: int, total: int) -> None:
        core.loop.call_soon_threadsafe(progress, obj, done, total)
    return call
