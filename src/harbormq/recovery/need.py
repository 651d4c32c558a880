"""Which log extents are still needed (MQ's AMQ7467/AMQ7468, AMQJRNINF, DISPLAY
QMSTATUS RECLOG/MEDIALOG): for restart, for media recovery, and what pins them."""


from __future__ import annotations

import datetime as _dt

from ..errors import (
    HarbormqError,
)
from ..log.checkpoint import read_checkpoint
from ..log.inspect import open_log_readonly
from ..log.manager import RecoveryLog
from ..log.records import (
    extent_file_name,
)


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
                        "state": e.state, "present": log.extent_present(e), "needed": need,
                        "archived": e.archived, "deleted": e.deleted})
        if restart:
            rec_bytes += size
        if media_needed:
            med_bytes += size
        if need == "none" and log.extent_present(e) and linear:   # circular ones are reused
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
        return read_checkpoint(lambda lsn: next(log.read_from(lsn), None),
                               st.checkpoint_lsn).get("media")
    except HarbormqError:
        return None


def log_need_report(config) -> dict:
    """``harbormq log need`` with the queue manager stopped: the control file and
    the media table of the last checkpoint (a running one answers itself)."""
    log = open_log_readonly(config)
    return log_need_facts(log, read_media_table(log))
