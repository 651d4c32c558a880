"""The ``channels`` job: every channel's batches from both sides' logs, side
by side, with the in-doubt windows and the places where the sides disagree.

Spark finds the batches in each queue manager's log (``chanlog.batch_rows``:
one row per batch reaches the driver); pairing the sides by batch id (LUWID)
and checking sequence numbers is plain Python (``pair_channels``, tested
without Spark). Written to OUT: ``channels.json`` (per channel: each side's
figures, the in-doubt windows, the mismatches), ``batches_NAME.jsonl`` (every
batch of the channel, both sides on one line) and ``channel_NAME.png``.

Times from two queue managers are compared as they were logged: on two
machines, their clocks' difference enters the windows measured across them
(receiver commit to sender commit); the in-doubt window itself is measured on
the sender's clock alone.
"""

from __future__ import annotations

import json
from pathlib import Path

from .chanlog import RCVR, SDR, batch_rows, qm_name_of
from .logdata import LogInput
from .report_page import safe_name as _safe
from .session import Progress
from .trace import _time

TOP = 10


def run_channels(spark, sources: list[LogInput], out: Path,
                 progress: Progress | None = None) -> dict:
    progress = progress or Progress("channels", len(sources) + 2)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    logs = []
    for source in sources:
        qm = qm_name_of(source)
        logs.append(batch_rows(spark, source, qm))
        progress.stage(f"{qm}: {len(logs[-1]['batches'])} channel batch(es) and reset(s)")
    report = pair_channels(logs)
    for name, ch in report["channels"].items():
        rows = ch.pop("pairs")
        fname = f"batches_{_safe(name)}.jsonl"
        with open(out / fname, "w") as f:
            for row in rows:
                f.write(json.dumps(row, sort_keys=True) + "\n")
        ch["batches_file"] = fname
        ch["plot"] = _plot(name, rows, out)
    progress.stage(f"paired {len(report['channels'])} channel(s)")
    (out / "channels.json").write_text(json.dumps(report, indent=1) + "\n")
    progress.stage(f"wrote {out / 'channels.json'} and the plots")
    return report


def pair_channels(logs: list[dict]) -> dict:
    """Pure: the batches of every queue manager's log (``batch_rows``) paired
    by channel and LUWID; figures per side, in-doubt windows, mismatches."""
    chans: dict[str, dict] = {}
    for log in logs:
        for b in log["batches"]:
            chans.setdefault(b["channel"], {SDR: [], RCVR: []})[b["side"]].append(b)
    by_qm = {log["qm"]: log for log in logs}
    return {"queue_managers": [{"qm": log["qm"], "first": _t(log["first_ns"]),
                                "last": _t(log["last_ns"]),
                                "restarts": [_time(t) for t in log["restarts_ns"]]}
                               for log in logs],
            "channels": {name: _channel(name, ch, by_qm) for name, ch in sorted(chans.items())}}


def _channel(name: str, ch: dict, by_qm: dict) -> dict:
    mismatches = []
    for side in (SDR, RCVR):
        qms = sorted({b["qm"] for b in ch[side]})
        if len(qms) > 1:
            mismatches.append({"kind": "one side in several queue managers", "side": side,
                               "detail": f"the {side} side of {name} is in the logs of "
                                         f"{', '.join(qms)}"})
    sdr, rcv = ch[SDR], ch[RCVR]
    resets = [b for b in sdr + rcv if b["kind"] == "reset" and b["outcome"] == "committed"]
    pairs = _pairs(sdr, rcv, by_qm, mismatches)
    for side in (sdr, rcv):
        mismatches += _sequence_faults(side, resets)
    windows = [p for p in pairs if p.get("in_doubt_ms") is not None]
    durations = sorted(p["in_doubt_ms"] for p in windows)
    result = {
        "sender": _side(sdr), "receiver": _side(rcv),
        "in_doubt": {
            "windows": len(windows),
            "ms_quantiles": {k: _quantile(durations, q) for k, q in
                             (("p50", .5), ("p90", .9), ("p99", .99), ("max", 1.0))},
            "longest": sorted(windows, key=lambda p: -p["in_doubt_ms"])[:TOP],
            "resolved_after_restart": [p for p in pairs if p.get("resolved_after_restart")],
            "open_at_end": [p for p in pairs if p.get("in_doubt_open")],
        },
        "mismatches": mismatches,
        "pairs": pairs,
    }
    s, r = result["sender"], result["receiver"]
    result["last_committed_agree"] = (s["last_committed"] or {}).get("seq") == \
        (r["last_committed"] or {}).get("seq")
    return result


def _side(batches: list[dict]) -> dict:
    real = [b for b in batches if b["kind"] == "batch"]
    done = [b for b in real if b["outcome"] == "committed"]
    committed = sorted((b for b in batches if b["outcome"] == "committed"),
                       key=lambda b: b["commit_lsn"])
    last = committed[-1] if committed else None
    return {
        "qm": batches[0]["qm"] if batches else None,
        "partner": next((b["partner"] for b in reversed(batches) if b["partner"]), None),
        "batches": len(done),
        "messages": sum(b["messages"] for b in done),
        "dead_letters": sum(b["dead_letters"] for b in done),
        "backed_out": len([b for b in real if b["outcome"] == "backed out"]),
        "seq_first": min((b["seq_first"] for b in done), default=None),
        "seq_last": max((b["seq"] for b in done), default=None),
        "last_committed": None if last is None else {
            "seq": last["seq"], "luwid": last["luwid"], "lsn": last["commit_lsn"],
            "time": _time(last["commit_ns"])},
        "in_doubt_at_end": [b["luwid"] for b in real if b["outcome"] == "in doubt"],
        "in_flight_at_end": [b["luwid"] for b in real if b["outcome"] == "in flight"],
        "resets": [{"next_seq": b["seq"] + 1, "lsn": b["commit_lsn"],
                    "time": _time(b["commit_ns"])}
                   for b in batches if b["kind"] == "reset" and b["outcome"] == "committed"],
    }


def _brief(b: dict) -> dict:
    return {"qm": b["qm"], "outcome": b["outcome"], "sync_lsn": b["lsn"], "uow": b["uow_id"],
            "prepared": _t(b["prepare_ns"]), "ended": _t(b["end_ns"]),
            "end_lsn": b["commit_lsn"] if b["commit_lsn"] is not None else b["backout_lsn"],
            "messages": b["messages"], "dead_letters": b["dead_letters"]}


def _pairs(sdr: list[dict], rcv: list[dict], by_qm: dict, mismatches: list) -> list[dict]:
    s_by = {b["luwid"]: b for b in sdr if b["kind"] == "batch"}
    r_by = {b["luwid"]: b for b in rcv if b["kind"] == "batch"}
    pairs = []
    for luwid in s_by.keys() | r_by.keys():
        s, r = s_by.get(luwid), r_by.get(luwid)
        one = s or r
        p = {"luwid": luwid, "seq_first": one["seq_first"], "seq_last": one["seq"],
             "messages": one["messages"], "sender": s and _brief(s), "receiver": r and _brief(r),
             "_order": one["prepare_ns"] or one["first_msg_ns"] or one["ts_ns"]}
        if s is not None and s["prepare_ns"] is not None:
            end = s["end_ns"]
            p["in_doubt_from"] = _time(s["prepare_ns"])
            if end is None:
                p["in_doubt_open"] = True
                p["in_doubt_ms"] = (by_qm[s["qm"]]["last_ns"] - s["prepare_ns"]) / 1e6
            else:
                p["in_doubt_ms"] = (end - s["prepare_ns"]) / 1e6
                p["resolution"] = s["outcome"]
                p["resolved_after_restart"] = any(
                    s["prepare_ns"] < t < end for t in by_qm[s["qm"]]["restarts_ns"])
            if r is not None and r["commit_ns"] is not None and s["commit_ns"] is not None:
                p["receiver_commit_to_sender_commit_ms"] = (s["commit_ns"] - r["commit_ns"]) / 1e6
        fault = _disagreement(s, r, by_qm)
        if fault:
            p["mismatch"] = fault
            mismatches.append({"kind": fault, "luwid": luwid, "seq_first": p["seq_first"],
                               "seq_last": p["seq_last"]})
        pairs.append(p)
    pairs.sort(key=lambda p: p.pop("_order"))
    return pairs


def _covers(log: dict | None, ns: int | None) -> bool:
    return log is not None and ns is not None and log["first_ns"] <= ns <= log["last_ns"]


def _disagreement(s: dict | None, r: dict | None, by_qm: dict) -> str | None:
    if s is not None and r is not None:
        if (s["seq_first"], s["seq"]) != (r["seq_first"], r["seq"]):
            return (f"sequence numbers differ: the sender numbered it {s['seq_first']}.."
                    f"{s['seq']}, the receiver {r['seq_first']}..{r['seq']}")
        if s["outcome"] == "committed" and r["outcome"] == "backed out":
            return "committed by the sender, backed out by the receiver (its messages lost)"
        if r["outcome"] == "committed" and s["outcome"] == "backed out":
            return "committed by the receiver, backed out by the sender (its messages sent twice)"
        return None
    if s is not None and s["outcome"] == "committed":
        rlog = by_qm.get(s["partner"])
        if _covers(rlog, s["prepare_ns"]):
            return "committed by the sender, not by the receiver (not in its log)"
    if r is not None and r["outcome"] == "committed":
        slog = by_qm.get(r["partner"])
        if _covers(slog, r["first_msg_ns"] or r["ts_ns"]):
            return "committed by the receiver, not in the sender's log"
    return None


def _sequence_faults(batches: list[dict], resets: list[dict]) -> list[dict]:
    """Committed batches of one side in commit order must number their
    messages on from the last: a gap lost numbers, an overlap used some twice.
    A RESET CHANNEL on either side between the two excuses it."""
    faults, prev = [], None
    for b in sorted((b for b in batches if b["outcome"] == "committed"),
                    key=lambda b: b["commit_lsn"]):
        if b["kind"] == "reset":
            prev = b
            continue
        if prev is not None and b["seq_first"] != prev["seq"] + 1 and not any(
                prev["commit_ns"] <= x["commit_ns"] <= b["commit_ns"] for x in resets):
            kind = "sequence gap" if b["seq_first"] > prev["seq"] + 1 else "sequence overlap"
            faults.append({"kind": kind, "side": b["side"], "qm": b["qm"], "luwid": b["luwid"],
                           "seq_first": b["seq_first"], "seq_last": b["seq"],
                           "detail": f"the batch before ended at {prev['seq']}"})
        prev = b
    return faults


def _quantile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def _t(ns: int | None) -> str | None:
    return None if ns is None else _time(ns)


def _plot(name: str, pairs: list[dict], out: Path) -> str:
    """Messages per batch over time (both sides) and each in-doubt window's
    length; windows that outlived a restart of the sender are marked."""
    import datetime as dt

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def when(iso):
        return dt.datetime.fromisoformat(iso)
    fig, axes = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for side, colour in (("sender", "tab:blue"), ("receiver", "tab:orange")):
        pts = [(when(p[side]["ended"]), p["messages"]) for p in pairs
               if p[side] and p[side]["outcome"] == "committed"]
        axes[0].scatter([t for t, _ in pts], [n for _, n in pts], s=10, color=colour,
                        label=f"{side} commits")
        bad = [(when(p[side]["ended"]), p["messages"]) for p in pairs
               if p[side] and p[side]["outcome"] == "backed out"]
        if bad:
            axes[0].scatter([t for t, _ in bad], [n for _, n in bad], marker="x", color=colour,
                            label=f"{side} backouts")
    axes[0].set_ylabel("messages per batch")
    axes[0].legend(fontsize="small")
    axes[0].set_title(f"Channel {name}: batches")
    groups = (("confirmed", "tab:green", lambda p: not p.get("resolved_after_restart")
               and not p.get("in_doubt_open")),
              ("resolved after a sender restart", "tab:red",
               lambda p: p.get("resolved_after_restart")),
              ("in doubt at the end of the log", "black", lambda p: p.get("in_doubt_open")))
    for label, colour, pick in groups:
        pts = [(when(p["in_doubt_from"]), max(p["in_doubt_ms"], 0.01)) for p in pairs
               if p.get("in_doubt_ms") is not None and pick(p)]
        if pts:
            axes[1].scatter([t for t, _ in pts], [d for _, d in pts], s=12, color=colour,
                            label=label)
    axes[1].set_yscale("log")
    axes[1].set_ylabel("in doubt at the sender (ms)")
    axes[1].set_xlabel("time (UTC)")
    axes[1].legend(fontsize="small")
    fig.autofmt_xdate()
    fig.tight_layout()
    fname = f"channel_{_safe(name)}.png"
    fig.savefig(out / fname)
    plt.close(fig)
    return fname
