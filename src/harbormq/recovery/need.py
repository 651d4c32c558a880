"""Which log extents are still needed (MQ's AMQ7467/AMQ7468, AMQJRNINF, DISPLAY
QMSTATUS RECLOG/MEDIALOG): for restart, for media recovery, and what pins them."""


from __future__ import annotations

import datetime as _dt
import json
import time

from ..errors import (
    HarbormqError,
)
from ..fsutil import atomic_write
from ..log.checkpoint import read_checkpoint
from ..log.inspect import open_log_readonly
from ..log.manager import RecoveryLog
from ..log.records import (
    extent_file_name,
)
from .recreate import log_end_estimate


def _iso(ns: int) -> str | None:
    if not ns:
        return None
    return _dt.datetime.fromtimestamp(ns / 1e9, _dt.timezone.utc).isoformat(
        timespec="milliseconds")


#: where a restart of this log records how fast it replayed (the log's disk sets it)
REPLAY_FILE = "replay.json"
#: the replay rate assumed until a restart of this log has measured one (bytes/s)
ASSUMED_REPLAY_RATE = 50 << 20
#: a restart that read less than this measured its fixed costs, not its rate
MEASURE_MIN_BYTES = 4 << 20


def replay_rate(log: RecoveryLog) -> tuple[float, bool]:
    """(bytes of log a restart replays per second, measured or assumed)."""
    try:
        d = json.loads((log.dir / REPLAY_FILE).read_text())
        if d["bytes"] > 0 and d["seconds"] > 0:
            return d["bytes"] / d["seconds"], True
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return float(ASSUMED_REPLAY_RATE), False


def record_replay_rate(log: RecoveryLog, replayed: int, seconds: float) -> None:
    """After a restart: its bytes read over its whole time, when it read enough
    to say (an estimate only: written atomically, not forced to be kept)."""
    if replayed >= MEASURE_MIN_BYTES and seconds > 0:
        atomic_write(log.dir / REPLAY_FILE, json.dumps(
            {"bytes": replayed, "seconds": round(seconds, 3), "when": _iso(time.time_ns())}
        ).encode())


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
    # recovery time, predicted: the log from each point to its end over the rate
    # the last long restart of this log measured (MQ has no such figure)
    rate, measured = replay_rate(log)
    end = log.end_lsn or _end_estimate(log)
    facts.update({
        "replay_rate_mb_s": round(rate / (1 << 20), 1), "replay_rate_measured": measured,
        "restart_estimate_s": round(max(0, end - st.restart_lsn) / rate, 2),
        "media_estimates_s": {name: round(max(0, end - mp["replay_from"]) / rate, 2)
                              for name, mp in sorted((media or {}).items())} if linear else {},
    })
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


def _end_estimate(log: RecoveryLog) -> int:
    """The end of the log of a stopped queue manager (its newest extent walked)."""
    try:
        return log_end_estimate(log)
    except (OSError, ValueError):
        return log.state.active.first_lsn


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
