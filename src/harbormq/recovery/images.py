"""Media images (MQ's rcdmqimg): the committed state of an object written to
the log, on demand, at a controlled shutdown and on a schedule.

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
"""


from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import itertools
import time
from typing import Callable

from ..core.engine import QueueManagerCore
from ..core.media_points import media_point_of
from ..core.objects import QMGR_OBJECT
from ..crashpoints import crash_point
from ..errors import (
    HarbormqError,
    MediaRecoveryNotAllowed,
    ObjectDamaged,
    ObjectInUse,
    StoreDamaged,
    UnknownObject,
)
from ..log.records import (
    RecordType,
    encode_image_chunk,
    encode_json,
)
from ..store.stores import unseal

Progress = Callable[[str, int, int], None]     # (object, done, total)

#: payload bytes per CHUNK record (smaller for tiny extents, see _chunk_limit)
CHUNK_BYTES = 512 * 1024
_image_ids = itertools.count(time.time_ns())


def no_progress(obj: str, done: int, total: int) -> None:
    pass


def require_linear(core: QueueManagerCore, what: str) -> None:
    if core.config.log.log_type != "linear":
        raise MediaRecoveryNotAllowed(
            f"{what} is not possible on queue manager {core.name}: it has a circular log, "
            "which does not keep the records media recovery needs (media recovery not allowed)",
            hint="create a queue manager with a linear log ('harbormq create QM2 --log "
                 "linear'), define the objects there and move the messages across")


def select_objects(core: QueueManagerCore, obj_type: str, pattern: str | None) -> list[str]:
    """Object names for ``--type all|qmgr|queue|channel|authinfo`` and a generic
    name (``APP.*``). ``channel`` takes the channels and the CHLAUTH records
    of the matching channel profiles."""
    if obj_type not in ("all", "qmgr", "queue", "channel", "authinfo"):
        raise HarbormqError(f"--type must be all, qmgr, queue, channel or authinfo, not "
                            f"{obj_type!r}", msgid="HMQ8405E")
    if obj_type == "qmgr":
        return [QMGR_OBJECT]
    if obj_type in ("channel", "authinfo"):
        wanted = ("CHANNEL", "CHLAUTH") if obj_type == "channel" else ("AUTHINFO",)
        pattern = pattern or "*"
        names = sorted(key for key, d in core.objects.items() if d["type"] in wanted and
                       fnmatch.fnmatchcase(d["attrs"]["CHLPROF"] if d["type"] == "CHLAUTH"
                                           else d["name"], pattern))
        if not names:
            raise UnknownObject(f"no {obj_type} matches {pattern!r} on queue manager "
                                f"{core.name} (MQRC 2085)", queue=pattern)
        return names
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


def _chunk_limit(core: QueueManagerCore) -> int:
    return min(CHUNK_BYTES, core.log.extent_size // 4)


async def image_objects(core: QueueManagerCore, obj_type: str, pattern: str | None,
                        progress: Progress = no_progress) -> list[dict]:
    """``harbormq image``: record a media image of each selected object."""
    require_linear(core, "recording a media image")
    core.check_running()
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


async def image_object(core: QueueManagerCore, name: str, progress: Progress = no_progress, *,
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
        if core.objects[name]["type"] != "QLOCAL":    # a definition, nothing stored
            return await _image_definition(core, name, force)
        return await _image_queue(core, name, progress, force)
    finally:
        del core.imaging[name]
        done.set_result(None)


async def _image_definition(core: QueueManagerCore, name: str, force: bool) -> dict:
    definition = core.objects[name]
    image_id = next(_image_ids)
    begin = core.append_record(
        RecordType.MEDIA_IMAGE_BEGIN, object_id=definition["object_id"], name=name,
        payload=encode_json({"image_id": image_id, "object_type": definition["type"],
                             "attributes": definition, "messages": 0, "next_seq": 0,
                             "replay_from": 0}))
    return await _end_image(core, name, definition, image_id, begin, begin, 0, 0, force)


async def _image_queue(core: QueueManagerCore, name: str, progress: Progress, force: bool) -> dict:
    q = core.queue(name)              # a damaged queue cannot be imaged (MQRC 2101)
    definition = q.definition
    image_id = next(_image_ids)
    # --- the synchronous step that fixes the image at B (see the module docstring)
    in_flight = [u.first_lsn for u in core.uows.values()
                 if u.first_lsn and any(op.queue is q and op.lsn for op in u.ops)]
    # the store stays open (pinned) while the snapshot's transaction lives
    pin = contextlib.ExitStack()
    txn = None
    if not q.store_hidden:
        txn = pin.enter_context(q.store.pinned()).begin(db=q.store.msgs, buffers=True)
    try:
        overlay = dict(q.flushing)
        overlay.update(q.dirty)
        count = _persistent_count(q, txn, overlay)
        begin = core.append_record(RecordType.MEDIA_IMAGE_BEGIN, obj=q, payload=encode_json({
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
        pin.close()
    if written != count:
        raise HarbormqError(f"the image of queue {name} holds {written} messages, its "
                            f"snapshot counted {count}: the image is not used", msgid="HMQ7475E")
    return await _end_image(core, name, definition, image_id, begin, replay_from, written,
                            nbytes, force)


async def _write_chunk(core: QueueManagerCore, q, image_id: int, batch: list[bytes]) -> int:
    if core.queues.get(q.name) is not q or q.damaged or q.recreating or \
            core.stopping == "preemptive":
        raise ObjectInUse(f"the image of queue {q.name} was abandoned: the queue was deleted, "
                          "damaged or the queue manager is stopping", queue=q.name)
    payload = encode_image_chunk(image_id, batch)
    core.append_record(RecordType.MEDIA_IMAGE_CHUNK, obj=q, payload=payload)
    crash_point("media.mid_image")
    await asyncio.sleep(0)            # let puts and gets run between chunks
    return len(payload)


def _checked(core: QueueManagerCore, q, messages):
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


async def _end_image(core: QueueManagerCore, name: str, definition: dict, image_id: int,
                     begin: int, replay_from: int, messages: int, nbytes: int,
                     force: bool) -> dict:
    """``name``: the catalog key (``CHANNEL:X`` for a channel), as the BEGIN
    record has it and restart and the media points look it up."""
    core.append_record(RecordType.MEDIA_IMAGE_END, object_id=definition["object_id"], name=name,
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


async def shutdown_images(core: QueueManagerCore) -> int:
    """At a controlled shutdown: the queue manager object, every empty local
    queue and every definition without a store (a remote queue, a channel, an
    AUTHINFO, a CHLAUTH record: one record each); cheap, and it lets the media
    point move past queues that drained and definitions that never change."""
    if core.config.log.log_type != "linear":
        return 0
    n = 0
    definitions = sorted(name for name, d in core.objects.items()
                         if d["type"] not in ("QMGR", "QLOCAL"))
    for name in [QMGR_OBJECT] + sorted(core.queues) + definitions:
        q = core.queues.get(name)
        if q is not None and (q.damaged or q.depth or q.uncommitted_puts or q.locked):
            continue
        # no force each: the shutdown checkpoint's own force covers every END
        # before the control file's media LSN can move
        await image_object(core, name, force=False)
        n += 1
    return n


async def auto_image_loop(core: QueueManagerCore, tick: float = 1.0) -> None:
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
