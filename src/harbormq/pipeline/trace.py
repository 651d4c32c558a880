"""The ``trace`` job: the life of one message, from its put to its final
outcome, in one queue manager's log or across several.

Across queue managers the message keeps its id: put on A's transmission
queue (by a QREMOTE, with a transmission header saying where it goes), got
by A's sender channel in a batch, put by B's receiver in the batch of the
same LUWID, got by a consumer on B (or put on B's dead-letter queue, with
the reason). A publication (MSG_PUBLISH) is one message on several queues:
its trace shows the fan-out, every target queue and what became of the
message there. A unit of work that holds a channel's synchronisation data is a
channel batch (``chanlog``): the trace names the channel, the batch's
sequence numbers and LUWID, and the message's own sequence number.
"""

from __future__ import annotations

import datetime as dt
import json

from ..errors import HarbormqError
from ..log.records import EXTENT_HEADER_SIZE, publication_msg_id

COLUMNS = ["lsn", "offset", "ts_ns", "type", "auto_commit", "uow_id", "object", "priority",
           "seq", "backout_count", "undone_type", "image_id", "format", "properties"]


#: the owner of a channel's units of work (channels/sync.py ``owner``)
CHANNEL_OWNER = "channel "


class TraceError(HarbormqError):
    msgid = "HMQ7640E"


def _time(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns / 1e9, dt.timezone.utc).isoformat(timespec="milliseconds")


def _hex(value: str, option: str) -> bytes:
    try:
        return bytes.fromhex(value)
    except ValueError:
        raise TraceError(f"{option} {value!r} is not hexadecimal (as 'log dump' and the "
                         "rebuild show message ids)") from None


def _collect(records, msg_id: bytes) -> tuple[list[dict], dict]:
    """The records naming the message, and the ends of their units of work. A
    publication's targets each have an id of their own (the publication's
    with the target's number: ``log.records.target_msg_id``): given any of
    them, or the publication's, the records of every target are collected."""
    from pyspark.sql import functions as F

    def naming(ids):
        return F.col("msg_id").isin(*ids) | \
            F.exists("image_messages", lambda m: m["msg_id"].isin(*ids))
    match = naming([msg_id])
    if len(msg_id) == 24:        # (one scan finds the publication's targets too)
        match = match | ((F.col("type") == "MSG_PUBLISH") & (
            F.substring("msg_id", 1, 20) == F.lit(publication_msg_id(msg_id)[:20])))
    found = records.filter(match).select(*COLUMNS, "msg_id").orderBy("lsn").collect()
    ids = {bytes(r["msg_id"]) for r in found if r["type"] == "MSG_PUBLISH"} - {msg_id}
    if ids:
        found = records.filter(naming(sorted(ids | {msg_id}))).select(*COLUMNS) \
            .orderBy("lsn").collect()
    rows = [{k: v for k, v in r.asDict().items() if k in COLUMNS} for r in found]
    uows = sorted({r["uow_id"] for r in rows if r["uow_id"] and not r["auto_commit"]})
    outcomes: dict[int, list[dict]] = {}
    if uows:
        for r in (records.filter(F.col("uow_id").isin(uows) & F.col("type").isin(
                "UOW_PREPARE", "UOW_COMMIT", "UOW_BACKOUT"))
                  .select("uow_id", "type", "lsn", "ts_ns").orderBy("lsn").collect()):
            outcomes.setdefault(r["uow_id"], []).append(r.asDict())
    return rows, outcomes


def run_trace(spark, records, msg_id_hex: str, source=None) -> dict:
    """Events that name the message (puts, gets, expiry, backouts, image copies)
    with the outcomes of their units of work, and the final outcome. With
    ``source`` (the LogInput of ``records``) channel batches are named too."""
    rows, outcomes = _collect(records, _hex(msg_id_hex, "--msgid"))
    if not rows:
        raise TraceError(f"no log record names message {msg_id_hex}",
                         hint="the message may be non-persistent (never logged) or older "
                              "than the log read")
    facts = channel_facts(spark, source, records, rows, bytes.fromhex(msg_id_hex)) \
        if source is not None else {}
    return describe_life(msg_id_hex, rows, outcomes, facts=facts)


def trace_across(spark, sources: list, msg_id_hex: str | None = None,
                 correl_id_hex: str | None = None) -> dict:
    """The life of a message across the logs of one or more queue managers
    (one LogInput each), in time order. With ``correl_id_hex``: the life of
    every message put with that correlation id."""
    from pyspark.sql import functions as F

    from .chanlog import qm_name_of
    if (msg_id_hex is None) == (correl_id_hex is None):
        raise TraceError("give exactly one of --msgid and --correlid")
    multi = len(sources) > 1
    qms = [qm_name_of(s) for s in sources] if multi else [None]
    inputs = [(s, qm, s.records(spark)) for s, qm in zip(sources, qms, strict=True)]
    if msg_id_hex is not None:
        return _life_across(spark, inputs, msg_id_hex)
    correl = _hex(correl_id_hex, "--correlid")
    # (a publication once, by its own id: its trace shows every target)
    ids = sorted({publication_msg_id(bytes(r[0])) if r[1] == "MSG_PUBLISH" else r[0]
                  for _s, _qm, records in inputs for r in records.filter(
                      F.col("type").isin("MSG_PUT", "MSG_PUBLISH") &
                      (F.col("correl_id") == F.lit(correl)))
                  .select("msg_id", "type").distinct().collect()})
    if not ids:
        raise TraceError(f"no message put with correlation id {correl_id_hex} is in the log"
                         + (f"s of {', '.join(qms)}" if multi else ""))
    return {"correl_id": correl_id_hex,
            "messages": [_life_across(spark, inputs, m.hex()) for m in ids]}


def _life_across(spark, inputs, msg_id_hex: str) -> dict:
    msg_id = _hex(msg_id_hex, "--msgid")
    events = []
    for source, qm, records in inputs:
        rows, outcomes = _collect(records, msg_id)
        if rows:
            facts = channel_facts(spark, source, records, rows, msg_id)
            events += life_events(rows, outcomes, qm=qm, facts=facts)
    if not events:
        names = [qm for _s, qm, _r in inputs if qm]
        raise TraceError(f"no log record names message {msg_id_hex}"
                         + (f" in the logs of {', '.join(names)}" if names else ""),
                         hint="the message may be non-persistent (never logged) or older "
                              "than the logs read")
    if inputs[0][1] is not None:     # several queue managers: their clocks order them
        events.sort(key=lambda e: (e["ts_ns"], e["lsn"]))
    return _life(msg_id_hex, events)


def channel_facts(spark, source, records, rows: list[dict], msg_id: bytes) -> dict:
    """What the log says about the channel side of the message's records:
    {uow id: batch facts} for units of work that are channel batches, and
    {("xqh", lsn): transmission header} for puts on a transmission queue."""
    from ..core import remote
    from .chanlog import ChannelLogError, message_seq, messages_of_batch, sync_records
    from .ingest import LakeError
    facts: dict = {}
    uows = sorted({r["uow_id"] for r in rows if r["uow_id"] and not r["auto_commit"]
                   and r["type"] in ("MSG_GET", "MSG_PUT")})
    try:
        syncs = [s.asDict() for s in sync_records(spark, source, uows).collect()] if uows \
            else []
    except ChannelLogError as exc:
        return {"note": f"channel batches not shown: {exc.message}"}
    for s in syncs:
        found = message_seq(s["side"], s["seq"], messages_of_batch(records, s["uow_id"]),
                            msg_id)
        if found is not None:    # else a reset, or the message was not sent in it
            facts[s["uow_id"]] = {"channel": s["channel"], "side": s["side"],
                                  "partner": s["partner"], "seq": found[0],
                                  "batch_seq_first": found[1], "batch_seq_last": s["seq"],
                                  "luwid": s["luwid"]}
    # a unit of work of a channel that never put its sync data (the batch did not
    # reach END_BATCH): its UOW_BEGIN still names the channel as its owner
    rest = [u for u in uows if u not in facts]
    if rest:
        from pyspark.sql import functions as F
        for o in (records.filter(F.col("uow_id").isin(rest) & (F.col("type") == "UOW_BEGIN"))
                  .select("uow_id", "data").collect()):
            owner = json.loads(o["data"] or "{}").get("owner", "")
            if owner.startswith(CHANNEL_OWNER):
                facts[o["uow_id"]] = {"channel": owner[len(CHANNEL_OWNER):], "luwid": None}
    for r in rows:
        if r["type"] == "MSG_PUT" and r.get("format") == "MQXMIT":
            first = r["lsn"] - r["offset"] + EXTENT_HEADER_SIZE
            try:
                got = source.records(spark, include_body=True, columns=["lsn", "body"],
                                     extents=[first]).filter(f"lsn = {r['lsn']}").first()
            except LakeError:
                continue         # a lake without bodies: the put is shown without it
            if got is not None and remote.is_wrapped(got["body"]):
                header, _msg = remote.unwrap(got["body"])
                facts[("xqh", r["lsn"])] = {"queue": header.rq, "qm": header.rqm}
    return facts


def describe_life(msg_id_hex: str, rows: list[dict], outcomes: dict[int, list[dict]],
                  facts: dict | None = None) -> dict:
    """Pure: turn one queue manager's records into events and a final outcome."""
    return _life(msg_id_hex, life_events(rows, outcomes, facts=facts))


def life_events(rows: list[dict], outcomes: dict[int, list[dict]], *, qm: str | None = None,
                facts: dict | None = None) -> list[dict]:
    """Pure: one event per record of one queue manager (``qm``: its name, when
    the trace spans several), with the internal fields ``_final`` needs."""
    facts = facts or {}
    events = []
    fanout: dict[int, int] = {}           # a publication's LSN -> its targets read
    for r in rows:
        if r["type"] == "MSG_PUBLISH":
            fanout[r["lsn"]] = fanout.get(r["lsn"], 0) + 1
    for r in rows:
        t = r["type"]
        uow = None if r["auto_commit"] else r["uow_id"]
        fate = outcomes.get(uow, []) if uow else []
        end = next((o for o in fate if o["type"] in ("UOW_COMMIT", "UOW_BACKOUT")), None)
        ev = {"lsn": r["lsn"], "time": _time(r["ts_ns"]), "queue": r["object"], "uow": uow}
        if qm is not None:
            ev["qm"] = qm
        batch = facts.get(uow) if uow else None
        dlh = (r.get("properties") or {}).get("DLH_REASON") if t == "MSG_PUT" else None
        if t == "MSG_PUBLISH":
            ev["event"] = (f"published to {fanout[r['lsn']]} queue(s): put here (priority "
                           f"{r['priority']}, seq {r['seq']})")
            topic = (r.get("properties") or {}).get("MQTopicString")
            if topic is not None:
                ev["topic"] = topic
                ev["event"] += f" for topic {topic!r}"
        elif t == "MSG_PUT":
            ev["event"] = f"put (priority {r['priority']}, seq {r['seq']})"
            xqh = facts.get(("xqh", r["lsn"]))
            if xqh:
                ev["event"] += f" for queue {xqh['queue']} on {xqh['qm']}"
                ev["to"] = xqh
            if dlh is not None:
                props = r["properties"]
                ev["event"] = (f"dead-lettered (reason {dlh}: "
                               f"{props.get('DLH_REASON_TEXT', '')}; it was for queue "
                               f"{props.get('DLH_DESTQ', '?')})")
                ev["dead_letter_reason"] = int(dlh) if dlh.isdigit() else dlh
        elif t == "MSG_GET":
            ev["event"] = "get"
        elif t == "MSG_EXPIRE":
            ev["event"] = "expired"
        elif t == "COMPENSATION":
            undone = {"MSG_GET": "get", "MSG_PUBLISH": "publication"}.get(r["undone_type"], "put")
            ev["event"] = (f"{undone} backed out"
                           f" (backout count {r['backout_count']})")
        else:
            ev["event"] = f"in media image {r['image_id']}"
        if batch is not None and t in ("MSG_GET", "MSG_PUT"):
            if t == "MSG_GET":
                ev["event"] = f"get by channel {batch['channel']}"
                ev["event"] += f" for {batch['partner']}" if batch["luwid"] else ""
            else:
                ev["event"] += f" by channel {batch['channel']}"
                ev["event"] += f" from {batch['partner']}" if batch["luwid"] else ""
            ev["event"] += (f": message {batch['seq']} of batch {batch['batch_seq_first']}.."
                            f"{batch['batch_seq_last']} (LUWID {batch['luwid']})"
                            if batch["luwid"] else
                            " in a batch that never ended (no sync data: END_BATCH was "
                            "not reached)")
            ev["channel"] = batch
        if uow is None or t in ("COMPENSATION", "MEDIA_IMAGE_CHUNK"):
            ev["outcome"] = "committed" if t != "MEDIA_IMAGE_CHUNK" else "copied"
        elif end is not None:
            ev["outcome"] = ("committed" if end["type"] == "UOW_COMMIT" else "backed out") + \
                f" at LSN {end['lsn']} ({_time(end['ts_ns'])})"
        elif any(o["type"] == "UOW_PREPARE" for o in fate):
            ev["outcome"] = "in doubt at the end of the log"
        else:
            ev["outcome"] = "in flight at the end of the log"
        ev["_type"], ev["ts_ns"], ev["_seq"] = t, r["ts_ns"], r["seq"]
        ev["_effect_lsn"] = r["lsn"] if uow is None or end is None else end["lsn"]
        ev["_dlh"] = dlh
        events.append(ev)
    if "note" in facts and events:
        events[0]["note"] = facts["note"]
    return events


def _life(msg_id_hex: str, events: list[dict]) -> dict:
    """The final outcome of events in order; the events without their internals;
    for a publication, its fan-out."""
    present: dict[tuple, str | None] = {}     # (qm, queue, seq) -> dead-letter reason
    last, put_outcome = None, None
    for ev in events:
        t, qm = ev["_type"], ev.get("qm")
        where = (qm, ev["queue"], ev["_seq"])
        done = ev["outcome"].startswith("committed")
        if t in ("MSG_PUT", "MSG_PUBLISH"):
            put_outcome = put_outcome or ev["outcome"]
            if done:
                present[where] = ev["_dlh"]
        elif t in ("MSG_GET", "MSG_EXPIRE") and done:
            present.pop(where, None)
            last = f"{'got from' if t == 'MSG_GET' else 'expired on'} {_name(where)} at LSN " \
                   f"{ev['_effect_lsn']}"
    if present:
        final = "on queue " + ", ".join(
            _name(w) + (f" (dead-lettered, reason {r})" if r else "")
            for w, r in sorted(present.items(), key=lambda wr: (wr[0][0] or "", wr[0][1:])))
    elif last is not None:
        final = last
    else:
        final = f"never on a queue (put {put_outcome or 'not in the log read'})"
    public = [{k: v for k, v in ev.items() if not k.startswith("_") and k != "ts_ns"}
              for ev in events]
    life = {"msg_id": msg_id_hex, "events": public, "final": final}
    fanout = _fanout(events)
    if fanout:
        life["fanout"] = fanout
    return life


def _fanout(events: list[dict]) -> list[dict]:
    """Each target of the message's publications: its queue, the publication's
    outcome, and what became of the message there (still on it, got, expired,
    never on it)."""
    out = []
    for p in (ev for ev in events if ev["_type"] == "MSG_PUBLISH"):
        where = (p.get("qm"), p["queue"], p["_seq"])
        then = next((ev for ev in events if ev["_type"] in ("MSG_GET", "MSG_EXPIRE")
                     and (ev.get("qm"), ev["queue"], ev["_seq"]) == where
                     and ev["outcome"].startswith("committed")), None)
        if not p["outcome"].startswith("committed"):
            became = f"never on it (the publication was {p['outcome']})"
        elif then is None:
            became = "on it at the end of the log"
        else:
            became = (f"{'got' if then['_type'] == 'MSG_GET' else 'expired'} at LSN "
                      f"{then['_effect_lsn']}")
        out.append({"lsn": p["lsn"], "queue": _name(where), "seq": p["_seq"],
                    "publication": p["outcome"], "became": became})
    return out


def _name(where: tuple) -> str:
    qm, queue = where[0], where[1]
    return queue if qm is None else f"{queue} on {qm}"


def format_life(life: dict) -> str:
    if "messages" in life:        # traced by correlation id
        return "\n".join([f"correlation id {life['correl_id']}: "
                          f"{len(life['messages'])} message(s)"] +
                         [format_life(m) for m in life["messages"]])
    lines = [f"message {life['msg_id']}"]
    for e in life["events"]:
        uow = f" UOW {e['uow']}" if e["uow"] else ""
        qm = f"{e['qm']:<8} " if "qm" in e else ""
        lines.append(f"  {qm}LSN {e['lsn']:>12}  {e['time']}  {e['queue']}: {e['event']}{uow}"
                     f" -> {e['outcome']}")
        if "note" in e:
            lines.append(f"  note: {e['note']}")
    if "fanout" in life:
        lines.append(f"  fan-out: {len(life['fanout'])} target(s)")
        lines += [f"    LSN {f['lsn']:>12}  {f['queue']} (seq {f['seq']}): {f['became']}"
                  for f in life["fanout"]]
    lines.append(f"  final: {life['final']}")
    return "\n".join(lines)
