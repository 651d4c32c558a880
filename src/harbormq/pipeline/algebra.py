"""Point-in-time contents of queues as set algebra over log records (docs/pipeline.md).

The contents of queue Q at LSN T (the state after every record with LSN <= T):

    image messages of Q's latest complete media image before T          (if any)
  + messages put on Q by units of work committed at or before T (after the image)
  - messages got or expired by units of work committed at or before T
  ordered by priority (high first), then put order (the store key
  ``message_key(priority, seq)``).

This follows what restart redo does with each record (recovery/restart.py):
* A MSG_PUBLISH is a put on each of its targets (the data source gives a row
  per target, at the publication's LSN).
* A MSG_PUT/MSG_GET/MSG_EXPIRE flagged AUTO_COMMIT takes effect at its own LSN;
  one in a unit of work takes effect at the UOW's COMMIT. Backed-out and
  in-flight or in-doubt units of work have no effect: their puts are not on
  the queue, and the messages they got are still on it (locked, which the
  ``locked_uow`` column shows; the engine does the same).
* A COMPENSATION of a get sets the message's backout count.
* A CLEAR (OBJECT_ALTER with "clear") removes every message committed before it
  (the engine refuses CLEAR while anything is uncommitted on the queue).
* OBJECT_DELETE ends a queue; a later OBJECT_CREATE of the name is a new queue
  (a new object id). Messages belong to one object id, so records of an older
  incarnation never leak into a newer one.
* Non-persistent messages are never logged, so they are never in a rebuild.
* A media image (MEDIA_IMAGE_BEGIN at B .. MEDIA_IMAGE_END, see records.py) is the
  committed state as of B: effects committed after B are applied to it.

A message is identified within its queue by (priority, seq); with the object
id that identifies it in the whole log. The per-queue decisions (which
incarnation, which image, which clear) come from a few small records and are
made on the driver by ``plan_targets``; the per-message algebra is a set of
joins (``spark_rebuild`` in rebuild.py) or, for tests and as the written-down
reference, ``reference_rebuild`` below.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable

from ..errors import HarbormqError

#: record types the driver collects to plan a rebuild (few per queue)
CONTROL_TYPES = ("OBJECT_CREATE", "OBJECT_ALTER", "OBJECT_DELETE", "MEDIA_IMAGE_BEGIN",
                 "MEDIA_IMAGE_END", "EXTENT_END")


class RebuildError(HarbormqError):
    msgid = "HMQ7610E"


@dataclass(frozen=True)
class Target:
    """One queue to rebuild: which incarnation and from where its history counts."""
    queue: str
    object_id: int
    #: effects committed at or below this LSN are not applied (creation, image
    #: begin or the last clear, whichever is latest)
    floor_lsn: int
    #: the media image whose messages start the queue, if one does
    image_id: int | None = None
    image_lsn: int | None = None


def coverage_start(extent_firsts: list[int], extent_ends: dict[int, int], at_lsn: int) -> int:
    """First LSN of the unbroken run of extents that ends at the one holding ``at_lsn``.

    ``extent_firsts``: first LSNs of the extents read, ascending;
    ``extent_ends``: first LSN -> end LSN of each extent closed by EXTENT_END."""
    start = extent_firsts[0]
    for prev, nxt in zip(extent_firsts, extent_firsts[1:], strict=False):
        if nxt > at_lsn:
            break
        if extent_ends.get(prev) != nxt:
            start = nxt       # a gap (a lost or reused extent): history restarts here
    return start


def plan_targets(control: Iterable[dict], at_lsn: int, queues: list[str] | None,
                 history_from: int) -> list[Target]:
    """Decide, per queue, the incarnation at ``at_lsn`` and where its history starts.

    ``control``: rows of CONTROL_TYPES with lsn <= at_lsn (lsn, type, object_id,
    object, data, image_id); ``history_from``: the first LSN of unbroken log."""
    rows = sorted(control, key=lambda r: r["lsn"])
    live: dict[str, dict] = {}          # name -> {"object_id", "create_lsn", "type"}
    clears: dict[int, int] = {}         # object id -> last clear LSN
    begins: dict[int, tuple[int, int]] = {}   # image id -> (object id, begin LSN)
    images: dict[int, tuple[int, int]] = {}   # object id -> (image id, begin LSN), complete
    for r in rows:
        t, oid, name = r["type"], r["object_id"], r["object"]
        data = json.loads(r["data"]) if r.get("data") else {}
        if t == "OBJECT_CREATE":
            live[name] = {"object_id": oid, "create_lsn": r["lsn"], "type": data.get("type")}
        elif t == "OBJECT_DELETE":
            if name in live and live[name]["object_id"] == oid:
                del live[name]
        elif t == "OBJECT_ALTER" and data.get("clear"):
            clears[oid] = r["lsn"]
        elif t == "MEDIA_IMAGE_BEGIN":
            begins[r["image_id"]] = (oid, r["lsn"])
            if name not in live or live[name]["object_id"] != oid:
                # the object was created before the log read: the image vouches for it
                live[name] = {"object_id": oid, "create_lsn": None,
                              "type": data.get("object_type")}
        elif t == "MEDIA_IMAGE_END":
            got = begins.get(r["image_id"])
            if got is not None and got[0] == oid and got[1] >= history_from:
                images[oid] = (r["image_id"], got[1])
    names = queues if queues else sorted(n for n, v in live.items() if v["type"] == "QLOCAL")
    out = []
    for name in names:
        info = live.get(name)
        if info is None or info["type"] != "QLOCAL":
            raise RebuildError(f"queue {name} is not defined at LSN {at_lsn} in the log read",
                               queue=name, lsn=at_lsn,
                               hint="check the name and the point; an archive may hold an "
                                    "older definition")
        oid = info["object_id"]
        image = images.get(oid)
        if image is None and (info["create_lsn"] is None or info["create_lsn"] < history_from):
            raise RebuildError(f"the history of queue {name} is incomplete: it was defined "
                               f"before LSN {history_from}, where the unbroken log read "
                               "starts, and no media image of it follows",
                               queue=name, lsn=history_from,
                               hint="add the archived extents to the path")
        start = image[1] if image is not None else info["create_lsn"]
        clear = clears.get(oid, -1)
        keep_image = image is not None and clear < image[1]
        out.append(Target(name, oid, max(start, clear),
                          image[0] if keep_image else None, image[1] if keep_image else None))
    return out


def reference_rebuild(records: Iterable[dict], at_lsn: int, targets: list[Target]
                      ) -> dict[str, list[dict]]:
    """The algebra in plain Python over data-source rows: queue -> messages in
    delivery order. The Spark job computes the same with joins."""
    recs = [r for r in records if r["lsn"] <= at_lsn]
    by_oid = {t.object_id: t for t in targets}
    commit = {r["uow_id"]: r["lsn"] for r in recs if r["type"] == "UOW_COMMIT"}
    ended = set(commit) | {r["uow_id"] for r in recs if r["type"] == "UOW_BACKOUT"}
    undone = {r["undone_lsn"] for r in recs if r["type"] == "COMPENSATION"}

    def effective(r):
        return r["lsn"] if r["auto_commit"] else commit.get(r["uow_id"])

    present: dict[tuple, dict] = {}
    for r in recs:
        t = by_oid.get(r["object_id"])
        if t is None:
            continue
        if r["type"] == "MEDIA_IMAGE_CHUNK" and r["image_id"] == t.image_id:
            for m in r["image_messages"]:
                present[(t.object_id, m["priority"], m["seq"])] = dict(
                    m, queue=t.queue, object_id=t.object_id, put_lsn=None, locked_uow=None)
        elif r["type"] in ("MSG_PUT", "MSG_PUBLISH"):   # (a publication: a row per target)
            eff = effective(r)
            if eff is not None and eff > t.floor_lsn:
                present[(t.object_id, r["priority"], r["seq"])] = {
                    "queue": t.queue, "object_id": t.object_id, "put_lsn": r["lsn"],
                    "locked_uow": None, **{k: r[k] for k in MESSAGE_FIELDS}}
    for r in recs:
        key = (r["object_id"], r["priority"], r["seq"])
        if r["object_id"] not in by_oid or key not in present:
            continue
        if r["type"] in ("MSG_GET", "MSG_EXPIRE"):
            eff = effective(r)
            if eff is not None:
                del present[key]
            elif r["uow_id"] not in ended and r["lsn"] not in undone:
                present[key]["locked_uow"] = r["uow_id"]
        elif r["type"] == "COMPENSATION" and r["undone_type"] == "MSG_GET" and \
                r["lsn"] > by_oid[r["object_id"]].floor_lsn:
            present[key]["backout_count"] = r["backout_count"]
    out: dict[str, list[dict]] = {t.queue: [] for t in targets}
    for key in sorted(present, key=lambda k: (k[0], -k[1], k[2])):
        m = present[key]
        out[m["queue"]].append(m)
    return out


#: message columns a rebuild keeps (data-source names)
MESSAGE_FIELDS = ("msg_id", "correl_id", "priority", "seq", "persistent", "expiry_ns",
                  "put_time_ns", "backout_count", "reply_to", "format", "size", "properties",
                  "properties_json", "body")
