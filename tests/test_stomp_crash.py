"""The crash harness extended to STOMP (issue 3 §6): 8 producers and 8
consumers (tests/stomp_crash_workload.py, one child process, raw STOMP frames)
against a ``harbormq start --foreground`` server that is SIGKILLed at random
moments under load and restarted; the clients reconnect (a new port every
time) and go on. Receipts are the ground truth:

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

``--crash-runs N`` sets the number of SIGKILLs (default 30 here);
``HARBORMQ_CRASH_SEED`` fixes the seed, printed with the summary and on failure.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from stomp_helpers import PYTHON, QMServer

from harbormq import QueueManager

WORKLOAD = Path(__file__).resolve().with_name("stomp_crash_workload.py")
DEFAULT_KILLS = 30
SEED = int(os.environ.get("HARBORMQ_CRASH_SEED") or random.randrange(1 << 30))
QUEUES = ("CRASH.Q0", "CRASH.Q1")
BOQ = "CRASH.BOQ"          # BOTHRESH(3): NACKs, drops and crashes move messages here
SUMMARY: dict = {}


@pytest.fixture(scope="module", autouse=True)
def _report(request):
    yield
    if not SUMMARY:
        return
    pm = request.config.pluginmanager
    tr, capture = pm.get_plugin("terminalreporter"), pm.get_plugin("capturemanager")
    text = ("stomp crash harness: " + ", ".join(f"{k} {v}" for k, v in SUMMARY.items()) +
            f"; seed {SEED}")
    if tr is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            tr.write_line("")
            tr.write_line(text)


def kill_count(request) -> int:
    n = request.config.getoption("--crash-runs")
    return DEFAULT_KILLS if n is None else n


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


def drain(srv: QMServer) -> list[tuple[str, str, int]]:
    """(wid, queue, backout count) of every message left, the queue manager
    opened in this process after the server is gone."""
    qm = QueueManager.open(srv.name, home=srv.home)
    try:
        out = []
        for q in (*QUEUES, BOQ):
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


def test_stomp_random_sigkills_under_load(tmp_path, request):
    kills_wanted = kill_count(request)
    rng = random.Random(SEED)
    srv = QMServer(tmp_path / "hmq", "QC")
    srv.create(log_file_pages=512)
    srv.start()
    srv.sc(f"DEFINE QLOCAL({BOQ}) MAXDEPTH(999999999)\n" + "\n".join(
        f"DEFINE QLOCAL({q}) DEFPSIST(YES) MAXDEPTH(999999999) BOTHRESH(3) BOQNAME({BOQ})"
        for q in QUEUES))
    journal, stop = tmp_path / "journal", tmp_path / "stop"
    journal.mkdir()
    wl_out = open(tmp_path / "workload.out", "wb")
    wl = subprocess.Popen([PYTHON, str(WORKLOAD), "--qm-dir", str(srv.qm_dir),
                           "--journal", str(journal), "--stop", str(stop),
                           "--seed", str(SEED)], env=srv.env, stdout=wl_out,
                          stderr=subprocess.STDOUT)
    wl_out.close()
    kills = 0
    t0 = time.monotonic()
    try:
        for _ in range(kills_wanted):
            # under load: the clients have reconnected and made progress
            size = journal_size(journal)
            end = time.monotonic() + 60
            while journal_size(journal) < size + 4096:
                assert wl.poll() is None, (tmp_path / "workload.out").read_text()
                assert time.monotonic() < end, "no progress after a restart"
                time.sleep(0.02)
            time.sleep(rng.uniform(0.0, 0.8))
            srv.kill()
            kills += 1
            srv.start()
        time.sleep(0.5)
        stop.touch()
        wl.wait(timeout=120)
        out = (tmp_path / "workload.out").read_text()
        assert wl.returncode == 0, f"workload: {out}"
    finally:
        if wl.poll() is None:
            os.kill(wl.pid, signal.SIGKILL)
            wl.wait()
        srv.kill()
    left = drain(srv)
    events = read_journals(journal)
    violations, stats = verify(events, left)
    SUMMARY.update({"SIGKILLs": kills, "seconds": round(time.monotonic() - t0, 1),
                    **{k: stats[k] for k in ("receipted", "acked", "left on queues",
                                             "redelivered same incarnation",
                                             "redelivered after restart", "nack", "drop",
                                             "tx commit unknown",
                                             "unreceipted delivered then lost in a crash",
                                             "tx seen, then taken back by a crash",
                                             "moved to the backout queue",
                                             "backout count lower after a restart")}})
    assert kills == kills_wanted
    assert stats["receipted"] > 50 * kills_wanted // 10, stats
    assert stats["acked"] > 0 and stats["redelivered after restart"] > 0, stats
    assert not violations, (f"seed {SEED}: {len(violations)} violations:\n" +
                            "\n".join(violations[:40]))


def test_verify_catches_violations():
    """The checker itself: a lost message, a double ACK, a vanished delivery and a
    half-visible transaction are all reported."""
    ev = [
        {"t": "send", "wid": "a", "tx": None, "ts": 1, "port": 1, "who": "p"},
        {"t": "rcpt", "wid": "a", "ts": 2, "port": 1, "who": "p"},
        {"t": "send", "wid": "b", "tx": None, "ts": 3, "port": 1, "who": "p"},
        {"t": "rcpt", "wid": "b", "ts": 4, "port": 1, "who": "p"},
        {"t": "dlv", "wid": "b", "redelivered": "false", "boc": 0, "ts": 5, "port": 1},
        {"t": "ack-attempt", "wids": ["b"], "ts": 6, "port": 1},
        {"t": "acked", "wids": ["b"], "ts": 7, "port": 1},
        {"t": "acked", "wids": ["b"], "ts": 8, "port": 1},
        {"t": "send", "wid": "c", "tx": None, "ts": 9, "port": 1},
        {"t": "rcpt", "wid": "c", "ts": 9, "port": 1},
        {"t": "dlv", "wid": "c", "redelivered": "false", "boc": 0, "ts": 10, "port": 1},
        {"t": "send", "wid": "f", "tx": None, "ts": 9, "port": 1},
        {"t": "dlv", "wid": "f", "redelivered": "false", "boc": 0, "ts": 10, "port": 2},
        {"t": "send", "wid": "g", "tx": None, "ts": 9, "port": 1},
        {"t": "dlv", "wid": "g", "redelivered": "false", "boc": 0, "ts": 10, "port": 1},
        {"t": "send", "wid": "d1", "tx": "T", "ts": 11, "port": 1},
        {"t": "send", "wid": "d2", "tx": "T", "ts": 12, "port": 1},
        {"t": "commit-attempt", "tx": "T", "wids": ["d1", "d2"], "ts": 13, "port": 1},
        {"t": "send", "wid": "h1", "tx": "U", "ts": 11, "port": 1},
        {"t": "send", "wid": "h2", "tx": "U", "ts": 12, "port": 1},
        {"t": "commit-attempt", "tx": "U", "wids": ["h1", "h2"], "ts": 13, "port": 1},
        {"t": "dlv", "wid": "h1", "redelivered": "false", "boc": 0, "ts": 14, "port": 1},
        {"t": "send", "wid": "e", "tx": None, "ts": 14, "port": 1},
        {"t": "dlv", "wid": "e", "redelivered": "false", "boc": 0, "ts": 15, "port": 1},
        {"t": "dlv", "wid": "e", "redelivered": "false", "boc": 0, "ts": 16, "port": 1},
    ]
    for e in ev:
        e.setdefault("who", "x")
    v, stats = verify(ev, [("d1", "CRASH.Q0", 0), ("e", "CRASH.Q0", 1)])
    text = "\n".join(v)
    assert "f was delivered" in text and "g was delivered" not in text
    assert stats["unreceipted delivered then lost in a crash"] == 2     # g and h1
    assert "LOST: a" in text
    assert "b acknowledged (ACK receipted) 2 times" in text
    assert "c was delivered, never acknowledged, and is gone" in text
    assert "transaction T" in text and "transaction U" not in text
    assert stats["tx seen, then taken back by a crash"] == 1
    assert "e redelivered by the same server" in text
