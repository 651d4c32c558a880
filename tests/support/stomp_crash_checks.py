"""Ground truth for the STOMP crash and power-cut harnesses: reading the
journals of tests/support/stomp_crash_workload.py and checking them against what is
left on the queues. The rules (``verify``):

* no receipted message is lost: a message whose SEND (or whose transaction's
  COMMIT) was receipted is, at the end, either still on its queue or was
  consumed by an ACK (or transactional ACK + COMMIT) that was at least sent;
* nothing consumed and acknowledged comes back: at most one ACK receipt per
  message, no delivery of it after that receipt, and it is not on the queue;
* deliveries that were not acknowledged are redelivered or still on the
  queue (unless the message was never durable: its SEND not receipted and the
  server killed before its force; a persistent put is visible at once and
  receipted after the force, so that is allowed and counted); a redelivery
  by the same server incarnation says ``redelivered:true`` with a higher
  backout count (across a restart the count may be one lower than last seen:
  a backout is visible before its record is forced; that is counted);
* messages that reach BOTHRESH(3) (NACKs, dropped connections, crashes) are
  moved to the backout queue, which counts as "on its queue" at the end;
* transactions are atomic: the messages of a transaction whose COMMIT was
  not receipted are durable all or none (its messages may be delivered before
  the COMMIT's force, so a crash can take back messages a consumer saw; that
  is counted), those of an aborted or abandoned one are never seen; nothing is
  on a queue twice.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

from harbormq import QueueManager

QUEUES = ("CRASH.Q0", "CRASH.Q1")
BOQ = "CRASH.BOQ"          # BOTHRESH(3): NACKs, drops and crashes move messages here


def journal_size(d: Path) -> int:
    return sum(p.stat().st_size for p in d.glob("*.jsonl"))


def read_journals(d: Path) -> list[dict]:
    events = []
    for p in sorted(d.glob("*.jsonl")):
        who = p.stem
        for line in p.read_text().splitlines():
            e = json.loads(line)
            e["who"] = who
            events.append(e)
    events.sort(key=lambda e: e["ts"])
    return events


def drain(name: str, home: Path, oplog: list | None = None) -> list[tuple[str, str, int]]:
    """(wid, queue, backout count) of every message left on the workload's
    queues that exist, the queue manager opened in this process after the
    server is gone. ``oplog`` gets the operator messages of that start."""
    qm = QueueManager.open(name, home=home)
    if oplog is not None:
        oplog.extend(qm.core.oplog.entries)
    try:
        out = []
        for q in (*QUEUES, BOQ):
            if q not in qm.core.queues:
                continue
            for m in qm.browse(q):
                out.append((m.properties.get("wid"), q, m.backout_count))
        return out
    finally:
        qm.close()


def verify(events: list[dict], left: list[tuple[str, str, int]]) -> tuple[list[str], Counter]:
    v: list[str] = []
    stats: Counter = Counter()
    sent: dict[str, str | None] = {}
    send_port: dict[str, int] = {}
    receipted: set[str] = set()
    tx_wids: dict[str, list[str]] = {}
    tx_state: dict[str, str] = {}
    deliveries: dict[str, list[dict]] = defaultdict(list)
    ack_attempted: set[str] = set()
    acked: Counter = Counter()
    acked_ts: dict[str, int] = {}
    for e in events:
        t = e["t"]
        if t == "send":
            sent[e["wid"]] = e["tx"]
            send_port[e["wid"]] = e["port"]
            if e["tx"]:
                tx_wids.setdefault(e["tx"], []).append(e["wid"])
        elif t == "rcpt":
            receipted.add(e["wid"])
        elif t in ("commit-attempt", "commit", "abort") or (t == "drop" and "tx" in e):
            tx_state[e["tx"]] = t
            if t == "commit":
                receipted.update(e["wids"])
        elif t == "dlv":
            deliveries[e["wid"]].append(e)
        elif t == "ack-attempt":
            ack_attempted.update(e["wids"])
        elif t == "acked":
            for w in e["wids"]:
                acked[w] += 1
                acked_ts.setdefault(w, e["ts"])
        elif t == "failure":
            v.append(f"workload {e['who']} failed: {e['error']}")
        stats[t] += 1

    left_count = Counter(w for w, _, _ in left)
    for w, q, boc in left:
        if q == BOQ and boc < 3:
            v.append(f"{w} is on {BOQ} with backout count {boc}, below BOTHRESH(3)")
    left_boc = {w: boc for w, _, boc in left}
    for w, n in left_count.items():
        if n > 1:
            v.append(f"{w} is on the queues {n} times")
        if w not in sent:
            v.append(f"{w} is on a queue but was never sent")
    for w in deliveries:
        if w not in sent:
            v.append(f"{w} delivered but never sent")

    # receipted messages are not lost
    for w in sorted(receipted):
        if w not in left_count and w not in ack_attempted:
            v.append(f"LOST: {w} was receipted, is not on its queue and no ACK of it was "
                     f"ever sent (deliveries: {len(deliveries.get(w, []))})")
    # consumed and acknowledged once
    for w, n in acked.items():
        if n > 1:
            v.append(f"{w} acknowledged (ACK receipted) {n} times")
        if w in left_count:
            v.append(f"{w} was acknowledged (receipt) but is still on its queue")
        later = [d for d in deliveries.get(w, []) if d["ts"] > acked_ts[w]]
        if later:
            v.append(f"{w} delivered again after its ACK receipt: {later[0]}")
    # unacknowledged deliveries come back
    for w, dl in deliveries.items():
        if w not in ack_attempted and w not in left_count:
            # a persistent put is visible before its force, so a message whose SEND
            # was not receipted can be delivered and then lost with the server.
            # Once receipted, or seen after a restart, it was durable.
            if w in receipted or any(d["port"] != send_port[w] for d in dl):
                v.append(f"{w} was delivered, never acknowledged, and is gone")
            else:
                stats["unreceipted delivered then lost in a crash"] += 1
        for d1, d2 in zip(dl, dl[1:], strict=False):
            if d2["port"] == d1["port"]:
                stats["redelivered same incarnation"] += 1
                if d2["redelivered"] != "true" or d2["boc"] <= d1["boc"]:
                    v.append(f"{w} redelivered by the same server without redelivered:true "
                             f"and a higher backout count: {d1} then {d2}")
            else:
                stats["redelivered after restart"] += 1
                # a backout is visible before its record is forced: a crash can
                # take the last increment back (counted, not a violation)
                if d2["boc"] < d1["boc"]:
                    stats["backout count lower after a restart"] += 1
        if w in left_boc and dl and left_boc[w] < dl[-1]["boc"]:
            stats["backout count lower after a restart"] += 1
    # transactions: all or nothing
    for tx, wids in tx_wids.items():
        state = tx_state.get(tx)
        seen = [w for w in wids if w in deliveries or w in left_count]
        if state in (None, "abort", "drop"):
            if seen:
                v.append(f"transaction {tx} ({state or 'no COMMIT sent'}) left messages "
                         f"visible: {seen}")
            stats[f"tx {state or 'unfinished'}"] += 1
        elif state == "commit-attempt":
            # the outcome is unknown; deliveries prove nothing (a commit is visible
            # before its force, and a crash can still take it back), but once one
            # message of it is proven durable (on a queue at the end, or its ACK
            # receipted) every message of it must be there or consumed
            durable = [w for w in wids if w in left_count or w in acked]
            missing = [w for w in wids if w not in left_count and w not in ack_attempted]
            if durable and missing:
                v.append(f"transaction {tx}: COMMIT sent, not receipted; {durable} are "
                         f"durable but {missing} are gone")
            if seen and not durable:
                stats["tx seen, then taken back by a crash"] += 1
            stats["tx commit unknown"] += 1
    stats["receipted"] = len(receipted)
    stats["acked"] = len(acked)
    stats["left on queues"] = len(left)
    stats["moved to the backout queue"] = sum(1 for _, q, _ in left if q == BOQ)
    return v, stats
