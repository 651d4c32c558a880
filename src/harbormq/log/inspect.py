"""``harbormq log dump`` (MQ's dmpmqlog) and ``harbormq log map`` (CSQJU004).

Both read the log files directly and never write, so they work with the queue
manager stopped or running. The newest extent may end in a record being
written at that moment; like restart, the dump stops there.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Iterator

from ..config import QMConfig
from ..errors import ConfigError
from .manager import RecoveryLog
from .records import LogRecord, Publication, RecordType, describe, extent_file_name


def open_log_readonly(config: QMConfig, say=None) -> RecoveryLog:
    """The log as it is on disk, for reading only. ``say(msgid, text)``: told
    when a copy of a dual log cannot be read and the other is used."""
    log = RecoveryLog(config.log_dir, config.name, config.log_dual_dir)
    log.say = say
    log.open(repair=False)
    return log


def parse_time(text: str | None) -> int | None:
    """ISO 8601 (UTC when no zone is given) or seconds since the epoch -> ns."""
    if text is None:
        return None
    try:
        return int(float(text) * 1e9)
    except ValueError:
        pass
    try:
        t = _dt.datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(f"time {text!r} is neither ISO 8601 nor seconds since the epoch") \
            from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.timezone.utc)
    return int(t.timestamp() * 1e9)


@dataclass
class DumpFilter:
    from_lsn: int | None = None
    to_lsn: int | None = None
    since_ns: int | None = None
    until_ns: int | None = None
    queue: str | None = None
    uow: int | None = None

    def __call__(self, rec: LogRecord) -> bool:
        if self.since_ns is not None and rec.timestamp_ns < self.since_ns:
            return False
        if self.until_ns is not None and rec.timestamp_ns > self.until_ns:
            return False
        if self.queue is not None and rec.object_name != self.queue and not (
                rec.type == RecordType.MSG_PUBLISH and
                any(t.name == self.queue for t in Publication.decode(rec.payload).targets)):
            return False      # (a publication names its queues in its targets)
        if self.uow is not None and rec.uow_id != self.uow:
            return False
        return True


def dump(config: QMConfig, flt: DumpFilter, say=None) -> Iterator[dict]:
    log = open_log_readonly(config, say)
    chain = log.chain()
    # extents below the restart and media points may have been archived
    present = [e for e in chain if log.extent_present(e)] or chain
    start = flt.from_lsn if flt.from_lsn is not None else present[0].first_lsn
    start = _record_boundary_at_or_after(log, start)
    for rec in log.read_from(start, flt.to_lsn):
        if flt(rec):
            d = describe(rec)
            d["time"] = _dt.datetime.fromtimestamp(rec.timestamp_ns / 1e9, _dt.timezone.utc) \
                .isoformat(timespec="microseconds")
            e = log.extent_of(rec.lsn)
            d["extent"] = extent_file_name(e.number) if e else None
            yield d


def _record_boundary_at_or_after(log: RecoveryLog, lsn: int) -> int:
    """An arbitrary --from-lsn may fall inside a record: start at the extent that
    holds it and skip forward to the first record at or after it."""
    e = log.extent_of(lsn)
    if e is None:
        chain = log.chain()
        return max(lsn, chain[0].first_lsn) if chain else lsn
    for rec in log.read_from(e.first_lsn):
        if rec.lsn >= lsn:
            return rec.lsn
    return lsn


def log_map(config: QMConfig) -> dict:
    log = open_log_readonly(config)
    st = log.state
    restart_ext = log.extent_of(st.restart_lsn)
    media_ext = log.extent_of(st.media_lsn) if st.log_type == "linear" else None
    extents = []
    for e in sorted(st.extents, key=lambda e: (e.state == "free", e.first_lsn, e.number)):
        needed_restart = e.state in ("active", "full") and \
            (e.end_lsn is None or e.end_lsn > st.restart_lsn)
        needed_media = st.log_type == "linear" and e.state in ("active", "full") and \
            (e.end_lsn is None or e.end_lsn > st.media_lsn)
        extents.append({
            "extent": extent_file_name(e.number), "state": e.state,
            "first_lsn": e.first_lsn if e.state != "free" else None,
            "end_lsn": e.end_lsn, "needed_for_restart": needed_restart,
            "needed_for_media_recovery": needed_media,
            "needed": "restart" if needed_restart else "media" if needed_media else "none",
            "present": log.extent_present(e),
            "archived": e.archived, "deleted": e.deleted,
        })
        if log.dual_dir is not None:      # which copies are on disk (not read)
            extents[-1]["copies"] = [c for c, d in log.copies
                                     if (d / extent_file_name(e.number)).exists()]
    return {
        "queue_manager": config.name, "log_type": st.log_type, "pages": st.pages,
        "extent_bytes": st.pages * 4096, "primary": st.primary, "secondary": st.secondary,
        "control_sequence": st.sequence,
        "control_written": _dt.datetime.fromtimestamp(st.written_ns / 1e9, _dt.timezone.utc)
        .isoformat(timespec="seconds"),
        "checkpoint_lsn": st.checkpoint_lsn, "restart_lsn": st.restart_lsn,
        "restart_extent": extent_file_name(restart_ext.number) if restart_ext else None,
        "media_lsn": st.media_lsn if st.log_type == "linear" else None,
        "media_extent": extent_file_name(media_ext.number) if media_ext else None,
        "current_extent": extent_file_name(st.active.number),
        "dual_path": str(log.dual_dir) if log.dual_dir is not None else None,
        "degraded_copy": st.degraded or None,
        "extents": extents,
        "warnings": [f"{m} {t}" for m, t in log.control.warnings + log.warnings],
    }
