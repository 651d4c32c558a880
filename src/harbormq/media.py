"""Media recovery (MQ's rcdmqimg / rcrmqobj): media images, recreating objects
from the log, damaged objects, and which log extents are still needed.

**Media point of an object.** ``core.media_points[name]`` holds, for every
object, ``image_lsn`` (B: the MEDIA_IMAGE_BEGIN of its latest complete image,
or its OBJECT_CREATE record, which is the object's first image), ``replay_from``
(the first LSN a recreate reads: B, or earlier when a unit of work that had
touched the object was still in flight at B) and ``image_ns`` (when). Every
checkpoint records the table; the control file's media LSN is the oldest
``replay_from`` (HMQ7468I).

**A consistent image of a queue in use** (the codec contract in
``log/records.py``: the committed state as of B). In one synchronous step on
the event loop, the only owner of queue state, the image appends its BEGIN
record (LSN B), opens an LMDB read transaction on the queue's store (an MVCC
snapshot that later flushes do not change), and copies the queue's in-memory
committed layers (``dirty`` over ``flushing``; a flush in progress keeps its
snapshot in ``flushing`` until it is done, so store plus layers is the
committed state whichever side of that flush the read transaction lands on).
Chunks are then streamed from the snapshot, one CHUNK record at a time,
yielding to the loop between chunks: puts and gets go on meanwhile, and their
records land among the chunks with LSNs above B.

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

import asyncio
import copy
import datetime as _dt
import fnmatch
import itertools
import mmap
import struct
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

from .core.objects import QMGR_OBJECT
from .crashpoints import crash_point
from .errors import (
    HarbormqError,
    LogMissing,
    MediaRecoveryNotAllowed,
    ObjectDamaged,
    ObjectInUse,
    StoreDamaged,
    UnknownObject,
)
from .fsutil import fsync_dir, rename_durably
from .log.manager import RecoveryLog
from .log.reader import ExtentReader
from .log.records import (
    AUTO_COMMIT,
    EXTENT_HEADER_SIZE,
    MIN_RECORD,
    TRAILER,
    Compensation,
    Message,
    MessageRef,
    RecordType,
    decode_json,
    encode_image_chunk,
    encode_json,
    extent_file_name,
    image_chunk_entries,
    message_key_of,
)
from .store import CatalogStore, QueueStore, unseal

Progress = Callable[[str, int, int], None]     # (object, done, total)

#: payload bytes per CHUNK record (smaller for tiny extents, see _chunk_limit)
CHUNK_BYTES = 512 * 1024
#: suffixes of a store's work and evidence directories: '#' is never in a queue's
#: directory name (``config.queue_dir_name``), so they cannot meet a real queue
REBUILDING, REPLACED, DAMAGED = "#recreate", "#replaced", "#damaged."
#: replay writes the rebuilt store every this many changes (bounded memory)
REBUILD_BATCH = 20_000
_image_ids = itertools.count(time.time_ns())
#: the first fields of a record header: length, crc32c, lsn
RECORD_PREFIX = struct.Struct("<IIQ")


def _no_progress(obj: str, done: int, total: int) -> None:
    pass


def require_linear(core, what: str) -> None:
    if core.config.log.log_type != "linear":
        raise MediaRecoveryNotAllowed(
            f"{what} is not possible on queue manager {core.name}: it has a circular log, "
            "which does not keep the records media recovery needs (media recovery not allowed)",
            hint="create a queue manager with a linear log ('harbormq create QM2 --log "
                 "linear'), define the objects there and move the messages across")


def select_objects(core, obj_type: str, pattern: str | None) -> list[str]:
    """Object names for ``--type all|qmgr|queue`` and a generic name (``APP.*``)."""
    if obj_type not in ("all", "qmgr", "queue"):
        raise HarbormqError(f"--type must be all, qmgr or queue, not {obj_type!r}",
                            msgid="HMQ8405E")
    if obj_type == "qmgr":
        return [QMGR_OBJECT]
    if obj_type == "queue" and not pattern:
        raise HarbormqError("--type queue needs a queue name (generic names like APP.* "
                            "are allowed)", msgid="HMQ8405E")
    pattern = pattern or "*"
    names = sorted(n for n, d in core.objects.items()
                   if d["type"] != "QMGR" and fnmatch.fnmatchcase(n, pattern))
    if obj_type == "all":
        names = [QMGR_OBJECT] + names
    if not names:
        raise UnknownObject(f"no queue matches {pattern!r} on queue manager {core.name} "
                            "(MQRC 2085)", queue=pattern)
    return names


# --- media points ----------------------------------------------------------------------

def media_point_of(core, name: str) -> dict:
    """The media point of one object (its create record until it has an image)."""
    mp = core.media_points.get(name)
    if mp is not None:
        return mp
    d = core.objects[name]
    lsn = d.get("create_lsn", 0)
    return {"object_id": d["object_id"], "image_lsn": lsn, "replay_from": lsn, "image_ns": 0}


def media_lsn(core) -> int:
    """Oldest LSN media recovery of any object needs (the control file's media LSN)."""
    lsns = [media_point_of(core, n)["replay_from"] for n in core.objects]
    return min(lsns) if lsns else 0


def catalog_media_lsn(core) -> int:
    """Where rebuilding the catalog (the queue manager object) starts: every
    object's definition is in its latest image or create record."""
    lsns = [media_point_of(core, n)["image_lsn"] for n in core.objects]
    return min(lsns) if lsns else 0


def media_table(core) -> dict:
    """What a checkpoint records: the media point of every object."""
    return {n: media_point_of(core, n) for n in core.objects}


# --- writing images ------------------------------------------------------------------------

def _chunk_limit(core) -> int:
    return min(CHUNK_BYTES, core.log.extent_size // 4)


async def image_objects(core, obj_type: str, pattern: str | None,
                        progress: Progress = _no_progress) -> list[dict]:
    """``harbormq image``: record a media image of each selected object."""
    require_linear(core, "recording a media image")
    core._check_running()
    names = select_objects(core, obj_type, pattern)
    out = []
    for name in names:
        q = core.queues.get(name)
        if q is not None and q.damaged and len(names) > 1:
            # a generic request images what it can; the damaged need recreate first
            out.append({"object": name, "skipped": f"damaged: {q.damage_reason}"})
            continue
        out.append(await image_object(core, name, progress))
    await core.checkpoint("media image")    # records the new media points (HMQ7468I)
    return out


async def image_object(core, name: str, progress: Progress = _no_progress, *,
                       force: bool = True) -> dict:
    """Write one media image (BEGIN, CHUNKs, END); the object's media point moves
    to it once its END is on disk. ``force=False``: the caller forces the log
    before anything relies on the new point (the shutdown checkpoint does)."""
    if name not in core.objects:
        raise UnknownObject(f"object {name} is not defined on queue manager {core.name}",
                            queue=name)
    while name in core.imaging:       # one image of an object at a time
        await core.imaging[name]
    done = core.loop.create_future()
    core.imaging[name] = done
    try:
        if core.objects[name]["type"] == "QMGR":
            return await _image_definition(core, name, force)
        return await _image_queue(core, name, progress, force)
    finally:
        del core.imaging[name]
        done.set_result(None)


async def _image_definition(core, name: str, force: bool) -> dict:
    definition = core.objects[name]
    image_id = next(_image_ids)
    begin = core._append(RecordType.MEDIA_IMAGE_BEGIN, object_id=definition["object_id"],
                         name=name, payload=encode_json({
                             "image_id": image_id, "object_type": definition["type"],
                             "attributes": definition, "messages": 0, "next_seq": 0,
                             "replay_from": 0}))
    return await _end_image(core, definition, image_id, begin, begin, 0, 0, force)


async def _image_queue(core, name: str, progress: Progress, force: bool) -> dict:
    q = core.queue(name)              # a damaged queue cannot be imaged (MQRC 2101)
    definition = q.definition
    image_id = next(_image_ids)
    # --- the synchronous step that fixes the image at B (see the module docstring)
    in_flight = [u.first_lsn for u in core.uows.values()
                 if u.first_lsn and any(op.queue is q and op.lsn for op in u.ops)]
    txn = None if q.store_hidden else q.store.env.begin(db=q.store.msgs, buffers=True)
    try:
        overlay = dict(q.flushing)
        overlay.update(q.dirty)
        count = _persistent_count(q, txn, overlay)
        begin = core._append(RecordType.MEDIA_IMAGE_BEGIN, obj=q, payload=encode_json({
            "image_id": image_id, "object_type": definition["type"],
            "attributes": definition, "messages": count, "next_seq": q.next_seq,
            "replay_from": min([*in_flight, core.log.end_lsn])}))
        replay_from = min([*in_flight, begin])
        # --- stream the snapshot
        limit = _chunk_limit(core)
        written = nbytes = 0
        batch: list[bytes] = []
        batch_bytes = 0
        for raw in _checked(core, q, _snapshot_messages(q, txn, overlay)):
            if batch and batch_bytes + len(raw) > limit:
                nbytes += await _write_chunk(core, q, image_id, batch)
                written += len(batch)
                progress(name, written, count)
                batch, batch_bytes = [], 0
            batch.append(raw)
            batch_bytes += len(raw) + 4
        if batch:
            nbytes += await _write_chunk(core, q, image_id, batch)
            written += len(batch)
            progress(name, written, count)
    finally:
        if txn is not None and core.queues.get(name) is q:
            txn.abort()
    if written != count:
        raise HarbormqError(f"the image of queue {name} holds {written} messages, its "
                            f"snapshot counted {count}: the image is not used", msgid="HMQ7475E")
    return await _end_image(core, definition, image_id, begin, replay_from, written, nbytes,
                            force)


async def _write_chunk(core, q, image_id: int, batch: list[bytes]) -> int:
    if core.queues.get(q.name) is not q or q.damaged or q.recreating or \
            core.stopping == "preemptive":
        raise ObjectInUse(f"the image of queue {q.name} was abandoned: the queue was deleted, "
                          "damaged or the queue manager is stopping", queue=q.name)
    payload = encode_image_chunk(image_id, batch)
    core._append(RecordType.MEDIA_IMAGE_CHUNK, obj=q, payload=payload)
    crash_point("media.mid_image")
    await asyncio.sleep(0)            # let puts and gets run between chunks
    return len(payload)


def _checked(core, q, messages):
    """Damage met while reading the snapshot marks the queue damaged (HMQ7472E)."""
    try:
        yield from messages
    except StoreDamaged as exc:
        core.damage_queue(q, exc.message)
        raise


def _persistent_count(q, txn, overlay: dict) -> int:
    """Persistent messages in the snapshot: the store's, corrected by the overlay."""
    n = 0
    if txn is not None:
        n = txn.stat(q.store.msgs)["entries"] - txn.stat(q.store.np)["entries"]
    for key, msg in overlay.items():
        old = txn.get(key) if txn is not None else None
        old_persistent = old is not None and txn.get(key, db=q.store.np) is None
        n += (msg is not None and msg.persistent) - old_persistent
    return n


def _snapshot_messages(q, txn, overlay: dict):
    """Encoded persistent messages of the snapshot in delivery order: the store's
    read transaction merged with the in-memory overlay (which wins)."""
    mem = sorted(overlay)
    i = 0
    if txn is not None:
        for key, value in txn.cursor(db=q.store.msgs):
            key = bytes(key)
            while i < len(mem) and mem[i] < key:
                msg = overlay[mem[i]]
                if msg is not None and msg.persistent:
                    yield msg.encode()
                i += 1
            if i < len(mem) and mem[i] == key:
                msg = overlay[key]
                i += 1
                if msg is not None and msg.persistent:
                    yield msg.encode()
                continue
            raw = unseal(key, value, q.store.path)
            if raw[9]:            # the persistent flag of the Message encoding
                yield raw
    for key in mem[i:]:
        msg = overlay[key]
        if msg is not None and msg.persistent:
            yield msg.encode()


async def _end_image(core, definition: dict, image_id: int, begin: int, replay_from: int,
                     messages: int, nbytes: int, force: bool) -> dict:
    name = definition["name"]
    core._append(RecordType.MEDIA_IMAGE_END, object_id=definition["object_id"], name=name,
                 payload=encode_json({"image_id": image_id, "begin_lsn": begin,
                                      "messages": messages, "bytes": nbytes,
                                      "replay_from": replay_from}))
    if force:
        await core.log.force()
    point = {"object_id": definition["object_id"], "image_lsn": begin,
             "replay_from": replay_from, "image_ns": time.time_ns()}
    if core.objects.get(name, {}).get("object_id") == definition["object_id"]:
        core.media_points[name] = point
    return {"object": name, "image_lsn": begin, "replay_from": replay_from,
            "messages": messages, "bytes": nbytes}


async def shutdown_images(core) -> int:
    """At a controlled shutdown: the queue manager object and every empty local
    queue (cheap, and it lets the media point move past queues that drained)."""
    if core.config.log.log_type != "linear":
        return 0
    n = 0
    for name in [QMGR_OBJECT] + sorted(core.queues):
        q = core.queues.get(name)
        if q is not None and (q.damaged or q.depth or q.uncommitted_puts or q.locked):
            continue
        # no force each: the shutdown checkpoint's own force covers every END
        # before the control file's media LSN can move
        await image_object(core, name, force=False)
        n += 1
    return n


async def auto_image_loop(core, tick: float = 1.0) -> None:
    """``image.schedule = "auto"`` (MQ's IMGSCHED/IMGINTVL/IMGLOGLN): an object is
    due once ``interval_minutes`` passed since its image, or ``log_length_mb`` of
    log was written since it. One object per tick, the most overdue first, so
    the queue manager never images everything at once."""
    settings = core.config.image
    interval_ns = int(settings.interval_minutes * 60e9)
    length = int(settings.log_length_mb * (1 << 20))
    while True:
        await asyncio.sleep(tick)
        if core.stopping:
            return
        now = time.time_ns()
        due = []
        for name in list(core.objects):
            q = core.queues.get(name)
            if q is not None and q.damaged:
                continue
            mp = media_point_of(core, name)
            since = mp["image_ns"] or core.started_ns
            if now - since >= interval_ns or \
                    (length and core.log.end_lsn - mp["image_lsn"] >= length):
                due.append((since, name))
        if due:
            _since, name = min(due)
            try:
                await image_object(core, name)
            except (ObjectDamaged, ObjectInUse, UnknownObject):
                continue      # damaged or deleted meanwhile: nothing to image
            core.oplog.emit("HMQ7476I", f"media image of {name} recorded automatically "
                            "(image.schedule = auto)")


# --- reading the log for media recovery ------------------------------------------------------

def log_view(core) -> RecoveryLog:
    """A read-only view of the log as it is now (the running log keeps appending)."""
    view = RecoveryLog(core.log.dir, core.name)
    view.state = copy.deepcopy(core.log.state)
    return view


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
        if not path.exists():
            raise LogMissing(f"{what} needs log extent {path.name} (LSN {e.first_lsn}..; "
                             f"replay starts at LSN {from_lsn}), which is missing",
                             path=str(path), lsn=from_lsn,
                             hint="restore it from the archive or a backup, then try again")


def log_end(log: RecoveryLog) -> int:
    """LSN just past the last valid record: reads the newest extent, without
    repairing a torn tail (restart's redo does that)."""
    active = log.state.active
    reader = ExtentReader(log.extent_path(active.number), newest=True)
    for _ in reader.records(active.first_lsn):
        pass
    return reader.end.lsn


def log_end_estimate(log: RecoveryLog) -> int:
    """Where the records of the newest extent end, walking their length fields
    and LSNs only (no CRCs): cheap enough for every restart, which uses it to
    find stores whose recovery LSN lies beyond the end of the log. A torn last
    record can make it one record long; redo's full read settles the end."""
    active = log.state.active
    path = log.extent_path(active.number)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        offset, size = EXTENT_HEADER_SIZE, len(buf)
        while offset + MIN_RECORD <= size:
            length, _crc, lsn = RECORD_PREFIX.unpack_from(buf, offset)
            if length < MIN_RECORD or length % 8 or offset + length > size or \
                    lsn != active.first_lsn + offset - EXTENT_HEADER_SIZE or \
                    TRAILER.unpack_from(buf, offset + length - 4)[0] != length:
                break
            offset += length
    return active.first_lsn + offset - EXTENT_HEADER_SIZE


class QueueRebuild:
    """Rebuild one queue's store from its latest image and the log after it, up
    to ``to_lsn``, into a new store at ``path`` (runs on a worker thread or
    during restart; touches nothing but ``path``)."""

    def __init__(self, log: RecoveryLog, definition: dict, point: dict, to_lsn: int,
                 path: Path, map_size: int, progress: Progress = _no_progress):
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
        store = QueueStore(self.path, self.oid, map_size=self.map_size, sync=False)
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
        B = self.image_lsn
        pending: dict[bytes, Message | None] = {}
        uows: dict[int, list] = {}
        total = max(1, self.to_lsn - self.replay_from)

        def lookup(key: bytes) -> Message | None:
            return pending[key] if key in pending else store.get(key)

        def effect(key: bytes, msg: Message | None) -> None:
            pending[key] = msg
            self.effects += 1
            if len(pending) >= REBUILD_BATCH:
                store.apply(pending, 0)
                pending.clear()

        T = RecordType
        for rec in self.log.read_from(self.replay_from, self.to_lsn):
            self.records += 1
            if self.records % 20_000 == 0:
                self.progress(self.name, total + rec.lsn - self.replay_from, 2 * total)
            t = rec.type
            if t in (T.UOW_COMMIT, T.UOW_BACKOUT):
                ops = uows.pop(rec.uow_id, None)
                if ops and t == T.UOW_COMMIT and rec.lsn >= B:
                    for kind, key, msg, _lsn in ops:
                        effect(key, msg if kind == "put" else None)
                continue
            if rec.object_id != self.oid:
                continue
            if t == T.MSG_PUT:
                msg = Message.decode(rec.payload)
                self.next_seq = max(self.next_seq, msg.seq + 1)
                if rec.flags & AUTO_COMMIT:
                    if rec.lsn >= B:
                        effect(msg.key, msg)
                else:
                    uows.setdefault(rec.uow_id, []).append(("put", msg.key, msg, rec.lsn))
            elif t in (T.MSG_GET, T.MSG_EXPIRE):
                ref = MessageRef.decode(rec.payload)
                if rec.flags & AUTO_COMMIT:
                    if rec.lsn >= B:
                        effect(ref.key, None)
                else:
                    uows.setdefault(rec.uow_id, []).append(("get", ref.key, None, rec.lsn))
            elif t == T.COMPENSATION:
                comp = Compensation.decode(rec.payload)
                ops = uows.get(rec.uow_id, [])
                op = next((o for o in ops if o[3] == comp.undone_lsn), None)
                if op is not None:
                    ops.remove(op)
                if comp.undone_type == T.MSG_GET and rec.lsn >= B:
                    msg = lookup(comp.ref.key)
                    if msg is not None:
                        effect(msg.key, replace(msg, backout_count=comp.backout_count))
            elif t == T.OBJECT_ALTER and decode_json(rec.payload).get("clear") and rec.lsn >= B:
                pending.clear()
                store.clear(0)
            elif t == T.OBJECT_DELETE:
                raise StoreDamaged(f"the log deletes {self.name} (object id {self.oid}) at LSN "
                                   f"{rec.lsn}: there is nothing to recreate", lsn=rec.lsn)
        if pending:
            store.apply(pending, 0)
        self.progress(self.name, 2 * total, 2 * total)


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


def write_catalog(path: Path, objects: dict[str, dict], recovery_lsn: int) -> None:
    CatalogStore.destroy(path)
    store = CatalogStore(path)
    try:
        store.apply(objects, recovery_lsn)
    finally:
        store.close()


def replace_dir(new: Path, final: Path, *, keep_old: bool) -> None:
    """Put a rebuilt store in place. A damaged old store is kept aside
    (``NAME#damaged.N``) as evidence; a healthy one is removed once the new
    one is there."""
    aside = final.with_name(final.name + REPLACED)
    QueueStore.destroy(aside)
    if final.exists():
        if keep_old:
            set_aside(final)
        else:
            rename_durably(final, aside)
    crash_point("media.mid_swap")
    new.rename(final)
    fsync_dir(final.parent)
    QueueStore.destroy(aside)


# --- recreate (the queue manager running) ---------------------------------------------------

async def recreate_objects(core, obj_type: str, pattern: str | None,
                           progress: Progress = _no_progress) -> list[dict]:
    """``harbormq recreate``: the queue manager object first, then the queues."""
    require_linear(core, "recreating an object")
    core._check_running()
    names = select_objects(core, obj_type, pattern)
    view = log_view(core)
    # check every extent any of them needs before changing anything
    for name in names:
        start = catalog_media_lsn(core) if name == QMGR_OBJECT else \
            media_point_of(core, name)["replay_from"]
        check_extents(view, start, f"media recovery of {name}")
    out = []
    for name in names:
        if name == QMGR_OBJECT:
            out.append(await _recreate_catalog(core, progress))
        else:
            out.append(await recreate_queue(core, name, progress))
    await core.checkpoint("media recovery")
    return out


async def _recreate_catalog(core, progress: Progress) -> dict:
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
    await core.loop.run_in_executor(None, write_catalog, tmp, objects, to_lsn)
    async with core._flush_lock:
        await core.quiesce_store_io()
        core.catalog_store.close()
        replace_dir(tmp, core.config.catalog_dir, keep_old=False)
        core.catalog_store = CatalogStore(core.config.catalog_dir)
        # definitions changed since to_lsn are still dirty: the next flush writes them
        core.catalog_dirty = {**core.catalog_flushing, **core.catalog_dirty}
        core.catalog_flushing, core.catalog_flushing_lsn = {}, None
        if core.catalog_dirty and core.catalog_dirty_lsn is None:
            core.catalog_dirty_lsn = to_lsn
    progress(QMGR_OBJECT, 1, 1)
    core.oplog.emit("HMQ7474I", f"object {QMGR_OBJECT} (the catalog of {len(objects)} "
                    f"definitions) recreated from the log (LSN {start} to {to_lsn})")
    return {"object": QMGR_OBJECT, "definitions": len(objects), "from_lsn": start,
            "to_lsn": to_lsn}


def _without_create_lsn(d: dict) -> dict:
    return {k: v for k, v in d.items() if k != "create_lsn"}


async def recreate_queue(core, name: str, progress: Progress = _no_progress) -> dict:
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
        async with core._flush_lock:
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
    core.media_points[name] = dict(point)
    core.oplog.emit("HMQ7474I", f"queue {name} recreated from the log: image at LSN "
                    f"{point['image_lsn']} ({result['image_messages']} messages), "
                    f"{result['effects']} later effects replayed from LSN "
                    f"{point['replay_from']} to {to_lsn}; {result['messages']} messages")
    return result


def _threadsafe(core, progress: Progress) -> Progress:
    def call(obj: str, done: int, total: int) -> None:
        core.loop.call_soon_threadsafe(progress, obj, done, total)
    return call


# --- damage at restart ---------------------------------------------------------------------

def check_store(store: QueueStore, end_lsn: int, verify_limit_mb: int) -> str | None:
    """Why a queue store opened at restart is damaged, or None."""
    try:
        if store.damaged:
            return store.damaged
        if store.recovery_lsn > end_lsn:
            return (f"its recovery LSN {store.recovery_lsn} lies beyond the end of the log "
                    f"(LSN {end_lsn})")
        data = store.path / "data.mdb"
        if data.stat().st_size <= verify_limit_mb << 20:
            store.verify()
    except (StoreDamaged, OSError) as exc:
        return exc.message if isinstance(exc, StoreDamaged) else str(exc)
    return None


def set_aside(path: Path) -> Path:
    """Keep a damaged store's files for inspection, never destroy them."""
    n = 1
    while (aside := path.with_name(f"{path.name}{DAMAGED}{n}")).exists():
        n += 1
    rename_durably(path, aside)
    return aside


# --- which extents are needed ---------------------------------------------------------------

def _iso(ns: int) -> str | None:
    if not ns:
        return None
    return _dt.datetime.fromtimestamp(ns / 1e9, _dt.timezone.utc).isoformat(
        timespec="milliseconds")


def log_need_facts(log: RecoveryLog, media: dict | None) -> dict:
    """Which extents restart and media recovery still need (MQ's AMQ7467/AMQ7468,
    AMQJRNINF, DISPLAY QMSTATUS RECLOG/MEDIALOG/RECSZ/MEDIASZ). ``media`` is the
    media table of the last checkpoint (``media_table``), for who pins the point."""
    st = log.state
    linear = st.log_type == "linear"
    chain = log.chain()
    rec_ext = log.extent_of(st.restart_lsn)
    med_ext = log.extent_of(st.media_lsn) if linear else None
    extents, removable = [], []
    size = log.extent_size
    rec_bytes = med_bytes = 0
    for e in chain:
        path = log.extent_path(e.number)
        restart = e.end_lsn is None or e.end_lsn > st.restart_lsn
        media_needed = linear and (e.end_lsn is None or e.end_lsn > st.media_lsn)
        need = "restart" if restart else "media" if media_needed else "none"
        extents.append({"extent": path.name, "first_lsn": e.first_lsn, "end_lsn": e.end_lsn,
                        "state": e.state, "present": path.exists(), "needed": need})
        if restart:
            rec_bytes += size
        if media_needed:
            med_bytes += size
        if need == "none" and path.exists() and linear:   # circular ones are reused
            removable.append(path.name)
    oldest_lsn = min(st.restart_lsn, st.media_lsn) if linear else st.restart_lsn
    oldest_ext = log.extent_of(oldest_lsn)
    oldest_ns = _record_time(log, oldest_lsn)
    facts = {
        "queue_manager": st.qm_name, "log_type": st.log_type,
        "RECLOG": extent_file_name(rec_ext.number) if rec_ext else None,
        "MEDIALOG": extent_file_name(med_ext.number) if med_ext else None,
        "RECSZ": -(-rec_bytes >> 20), "MEDIASZ": -(-med_bytes >> 20),    # MB, rounded up
        "restart_lsn": st.restart_lsn, "media_lsn": st.media_lsn if linear else None,
        "oldest_extent_needed": extent_file_name(oldest_ext.number) if oldest_ext else None,
        "oldest_entry_lsn": oldest_lsn, "oldest_entry_time": _iso(oldest_ns),
        "amqjrninf": _jrninf(oldest_ext, oldest_ns),
        "removable": removable, "extents": extents, "pinned_by": [],
    }
    if linear and media and med_ext is not None:
        # the objects whose media point lies in the oldest extent media recovery needs
        lo, hi = med_ext.first_lsn, med_ext.end_lsn
        for name, mp in sorted(media.items(), key=lambda kv: kv[1]["replay_from"]):
            if mp["replay_from"] >= lo and (hi is None or mp["replay_from"] < hi):
                facts["pinned_by"].append({
                    "object": name, "image_lsn": mp["image_lsn"],
                    "replay_from": mp["replay_from"],
                    "since": _iso(mp["image_ns"] or _record_time(log, mp["image_lsn"])),
                    "why": ("its latest image" if mp["image_lsn"] == mp["replay_from"] else
                            "a unit of work in flight at its latest image")})
    return facts


def _record_time(log: RecoveryLog, lsn: int) -> int:
    try:
        rec = next(log.read_from(lsn), None)
    except HarbormqError:
        return 0
    return rec.timestamp_ns if rec is not None and rec.lsn == lsn else 0


def _jrninf(ext, ns: int) -> str:
    """AMQJRNINF's layout: receiver name (10), library (10), YYYYMMDDHHMMSSmmm;
    stars when the oldest extent needed is gone."""
    name = extent_file_name(ext.number).removesuffix(".LOG") if ext else "*" * 10
    t = _dt.datetime.fromtimestamp(ns / 1e9, _dt.timezone.utc) if ns else None
    stamp = t.strftime("%Y%m%d%H%M%S") + f"{t.microsecond // 1000:03d}" if t else "0" * 17
    return f"{name:<10}{'LOG':<10}{stamp}"


def read_media_table(log: RecoveryLog) -> dict | None:
    """The media table recorded by the last checkpoint (for tools that read the
    log with the queue manager stopped)."""
    st = log.state
    if not st.checkpoint_lsn:
        return None
    try:
        rec = next(log.read_from(st.checkpoint_lsn), None)
    except HarbormqError:
        return None
    if rec is None or rec.type != RecordType.CHECKPOINT_END:
        return None
    return decode_json(rec.payload).get("media")



# --- the admin socket (server.py) ------------------------------------------------------------

ADMIN_COMMANDS = ("image", "recreate", "log_need")


async def admin_command(core, req: dict, send: Callable[[dict], None]) -> dict:
    """``{"cmd": "image"|"recreate", "type": "all"|"qmgr"|"queue", "name": ...}`` and
    ``{"cmd": "log_need"}``. Image and recreate send ``{"progress": {...}}``
    lines (at most one per object and per 5 %) before their reply."""
    cmd = req["cmd"]
    if cmd == "log_need":
        return {"ok": True, "log_need": log_need_facts(core.log,
                                                       core.last_checkpoint.get("media"))}
    last: dict[str, int] = {}

    def progress(obj: str, done: int, total: int) -> None:
        pct = 100 * done // max(1, total)
        if obj not in last or pct >= last[obj] + 5 or done >= total:
            last[obj] = pct
            send({"progress": {"object": obj, "done": done, "total": total}})

    fn = image_objects if cmd == "image" else recreate_objects
    results = await fn(core, req.get("type", "all"), req.get("name"), progress)
    return {"ok": True, "results": results}
