"""Media points: where media recovery of each object starts (MQ's media
recovery log range, AMQ7468).

**Media point of an object.** ``core.media_points[name]`` holds, for every
object, ``image_lsn`` (B: the MEDIA_IMAGE_BEGIN of its latest complete image,
or its OBJECT_CREATE record, which is the object's first image), ``replay_from``
(the first LSN a recreate reads: B, or earlier when a unit of work that had
touched the object was still in flight at B) and ``image_ns`` (when). Every
checkpoint records the table; the control file's media LSN is the oldest
``replay_from`` (HMQ7468I).
"""

from __future__ import annotations

from typing import Protocol


class MediaPointsHost(Protocol):
    """What the media points are computed from (the core)."""
    #: object name -> its definition
    objects: dict[str, dict]
    #: object name -> its media point, once it has an image (before: its create)
    media_points: dict[str, dict]


def media_point_of(core: MediaPointsHost, name: str) -> dict:
    """The media point of one object (its create record until it has an image)."""
    mp = core.media_points.get(name)
    if mp is not None:
        return mp
    d = core.objects[name]
    lsn = d.get("create_lsn", 0)
    return {"object_id": d["object_id"], "image_lsn": lsn, "replay_from": lsn, "image_ns": 0}


def media_lsn(core: MediaPointsHost) -> int:
    """Oldest LSN media recovery of any object needs (the control file's media LSN)."""
    lsns = [media_point_of(core, n)["replay_from"] for n in core.objects]
    return min(lsns) if lsns else 0


def catalog_media_lsn(core: MediaPointsHost) -> int:
    """Where rebuilding the catalog (the queue manager object) starts: every
    object's definition is in its latest image or create record."""
    lsns = [media_point_of(core, n)["image_lsn"] for n in core.objects]
    return min(lsns) if lsns else 0


def media_table(core: MediaPointsHost) -> dict:
    """What a checkpoint records: the media point of every object."""
    return {n: media_point_of(core, n) for n in core.objects}
