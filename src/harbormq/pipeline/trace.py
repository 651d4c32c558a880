"""The ``trace`` job: the life of one message, from its put to its final outcome."""

from __future__ import annotations

import datetime as dt

from ..errors import HarbormqError


class TraceError(HarbormqError):
    msgid = "HMQ7640E"


def _time(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns / 1e9, dt.timezone.utc).isoformat(timespec="milliseconds")


def run_trace(spark, records, msg_id_hex: str) -> dict:
    """Events that name the message (puts, gets, expiry, backouts, image copies)
    with the outcomes of their units of work, and the final outcome."""
    from pyspark.sql import functions as F
    try:
        msg_id = bytes.fromhex(msg_id_hex)
    except ValueError:
        raise TraceError(f"--msgid {msg_id_hex!r} is not hexadecimal (as 'log dump' and the "
                         "rebuild show message ids)") from None
    mine = records.filter(
        (F.col("msg_id") == F.lit(msg_id)) |
        F.exists("image_messages", lambda m: m["msg_id"] == F.lit(msg_id)))
    rows = [r.asDict() for r in mine.select(
        "lsn", "ts_ns", "type", "auto_commit", "uow_id", "object", "priority", "seq",
        "backout_count", "undone_type", "image_id").orderBy("lsn").collect()]
    if not rows:
        raise TraceError(f"no log record names message {msg_id_hex}",
                         hint="the message may be non-persistent (never logged) or older "
                              "than the log read")
    uows = sorted({r["uow_id"] for r in rows if r["uow_id"] and not r["auto_commit"]})
    outcomes = {}
    if uows:
        for r in (records.filter(F.col("uow_id").isin(uows) & F.col("type").isin(
                "UOW_PREPARE", "UOW_COMMIT", "UOW_BACKOUT"))
                  .select("uow_id", "type", "lsn", "ts_ns").orderBy("lsn").collect()):
            outcomes.setdefault(r["uow_id"], []).append(r.asDict())
    return describe_life(msg_id_hex, rows, outcomes)


def describe_life(msg_id_hex: str, rows: list[dict], outcomes: dict[int, list[dict]]) -> dict:
    """Pure: turn the records into events and a final outcome."""
    events, present, last, put_outcome = [], set(), None, None
    for r in rows:
        t = r["type"]
        uow = None if r["auto_commit"] else r["uow_id"]
        fate = outcomes.get(uow, []) if uow else []
        end = next((o for o in fate if o["type"] in ("UOW_COMMIT", "UOW_BACKOUT")), None)
        ev = {"lsn": r["lsn"], "time": _time(r["ts_ns"]), "queue": r["object"], "uow": uow}
        if t == "MSG_PUT":
            ev["event"] = f"put (priority {r['priority']}, seq {r['seq']})"
        elif t == "MSG_GET":
            ev["event"] = "get"
        elif t == "MSG_EXPIRE":
            ev["event"] = "expired"
        elif t == "COMPENSATION":
            ev["event"] = (f"{'get' if r['undone_type'] == 'MSG_GET' else 'put'} backed out"
                           f" (backout count {r['backout_count']})")
        else:
            ev["event"] = f"in media image {r['image_id']}"
        if uow is None or t in ("COMPENSATION", "MEDIA_IMAGE_CHUNK"):
            ev["outcome"] = "committed" if t != "MEDIA_IMAGE_CHUNK" else "copied"
        elif end is not None:
            ev["outcome"] = ("committed" if end["type"] == "UOW_COMMIT" else "backed out") + \
                f" at LSN {end['lsn']} ({_time(end['ts_ns'])})"
        elif any(o["type"] == "UOW_PREPARE" for o in fate):
            ev["outcome"] = "in doubt at the end of the log"
        else:
            ev["outcome"] = "in flight at the end of the log"
        events.append(ev)
        done = ev["outcome"].startswith("committed")
        if t == "MSG_PUT":
            put_outcome = put_outcome or ev["outcome"]
            if done:
                present.add(r["object"])
        elif t in ("MSG_GET", "MSG_EXPIRE") and done:
            present.discard(r["object"])
            last = f"{'got from' if t == 'MSG_GET' else 'expired on'} {r['object']} at LSN " \
                   f"{r['lsn'] if uow is None else end['lsn']}"
    if present:
        final = "on queue " + ", ".join(sorted(present))
    elif last is not None:
        final = last
    else:
        final = f"never on a queue (put {put_outcome or 'not in the log read'})"
    return {"msg_id": msg_id_hex, "events": events, "final": final}


def format_life(life: dict) -> str:
    lines = [f"message {life['msg_id']}"]
    for e in life["events"]:
        uow = f" UOW {e['uow']}" if e["uow"] else ""
        lines.append(f"  LSN {e['lsn']:>12}  {e['time']}  {e['queue']}: {e['event']}{uow}"
                     f" -> {e['outcome']}")
    lines.append(f"  final: {life['final']}")
    return "\n".join(lines)
