#!/usr/bin/env python3
"""Shared-queue throughput of a queue sharing group (docs/qsg.md) against one
local queue: persistent ``--body-size`` (1 KiB) messages over STOMP, each
SEND waiting for its RECEIPT, from one producer on the first member; one
consumer per other member (``client-individual``, an ACK per message), or on
the only member when the group has one. A private PostgreSQL 15 cluster
(tests/support/postgres.py) is the group's store; every member is a server
process on a free loopback port.

Reported per configuration (``local``: one queue manager, no group; ``qsg-N``:
N members): messages, seconds from the first SEND to the last MESSAGE,
``msgs_per_s`` and the receipt latency p50/p99 in ms, and that every message
arrived exactly once.

Peer recovery (``--peer-recovery N``, 3 by default, 0 skips it): two members;
a STOMP consumer on QM1 holds a persistent message unacknowledged, QM1 is
SIGKILLed, and the time until a subscriber on QM2 receives the message is
measured (goal < 2 s), N times (QM1 started again between).

    .venv/bin/python benchmarks/bench_qsg_throughput.py                  # 500 messages
    .venv/bin/python benchmarks/bench_qsg_throughput.py --full           # 5,000 messages
    .venv/bin/python benchmarks/bench_qsg_throughput.py --members 1,2,3 --messages 2000
    .venv/bin/python benchmarks/bench_qsg_throughput.py --members "" --peer-recovery 10
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import _common  # noqa: E402,F401  (the src path for an uninstalled checkout)
from support.postgres import PostgresCluster  # noqa: E402
from support.stomp_helpers import QMServer, raw_connected  # noqa: E402

progress = _common.make_progress("qsg")


def percentile(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


def consume(port: int, queue: str, expected_total: list, got: list, lock, done: threading.Event,
            sub_id: str) -> None:
    c = raw_connected(port)
    c.send("SUBSCRIBE", {"destination": f"/queue/{queue}", "id": sub_id,
                         "ack": "client-individual", "prefetch-count": "32"})
    while not done.is_set():
        try:
            frames = c.poll(0.2)
        except Exception:  # noqa: BLE001 - the run ends with the servers
            break
        for f in frames:
            if f.command != "MESSAGE":
                continue
            c.send("ACK", {"id": f["ack"]})
            with lock:
                got.append(f.body[:16])
                if len(got) >= expected_total[0]:
                    done.set()
    c.close()


def run(name: str, servers: list[QMServer], queue: str, messages: int, body_size: int) -> dict:
    producer = raw_connected(servers[0].port)
    consumers = servers[1:] or servers[:1]
    got: list = []
    lock = threading.Lock()
    done = threading.Event()
    total = [messages]
    threads = [threading.Thread(target=consume, args=(s.port, queue, total, got, lock, done,
                                                      f"s{i}"), daemon=True)
               for i, s in enumerate(consumers)]
    for t in threads:
        t.start()
    time.sleep(0.5)     # subscriptions in place
    latencies = []
    pad = b"x" * max(0, body_size - 16)
    t0 = time.monotonic()
    for i in range(messages):
        s = time.monotonic()
        producer.call("SEND", {"destination": f"/queue/{queue}", "persistent": "true"},
                      b"%016d" % i + pad)
        latencies.append((time.monotonic() - s) * 1000)
    sent = time.monotonic() - t0
    done.wait(120)
    took = time.monotonic() - t0
    for t in threads:
        t.join(5)
    producer.close()
    ids = sorted(got)
    result = {"config": name, "members": len(servers), "messages": messages,
              "received": len(got), "exactly_once": ids == sorted(b"%016d" % i
                                                                 for i in range(messages)),
              "send_s": round(sent, 3), "seconds": round(took, 3),
              "msgs_per_s": round(len(got) / took, 1) if took else 0,
              "receipt_p50_ms": round(percentile(latencies, 50), 3),
              "receipt_p99_ms": round(percentile(latencies, 99), 3)}
    progress(json.dumps(result))
    return result


def local_baseline(home: Path, messages: int, body_size: int) -> dict:
    srv = QMServer(home, "LOCAL")
    srv.home.mkdir(parents=True, exist_ok=True)
    srv.cli("create", "LOCAL", "--port", "0", "--log-file-pages", "4096")
    srv.start()
    try:
        srv.sc("DEFINE QLOCAL(LQ) MAXDEPTH(999999999)")
        return run("local", [srv], "LQ", messages, body_size)
    finally:
        srv.stop()


def group(home: Path, pg: PostgresCluster, members: int, messages: int, body_size: int) -> dict:
    db = pg.create_database(f"bench{members}")
    servers = []
    try:
        for n in range(1, members + 1):
            srv = QMServer(home, f"QM{members}{n}")
            srv.home.mkdir(parents=True, exist_ok=True)
            srv.cli("create", srv.name, "--port", "0", "--log-file-pages", "4096", "--qsg",
                    f"G{members}", "--qsg-db", db)
            servers.append(srv.start())
        servers[0].sc("DEFINE CFSTRUCT(APP1)\nDEFINE QLOCAL(SQ) QSGDISP(SHARED) CFSTRUCT(APP1)")
        time.sleep(0.5)     # the definition reaches every member (NOTIFY)
        return run(f"qsg-{members}", servers, "SQ", messages, body_size)
    finally:
        for s in servers:
            s.stop()


def peer_recovery(home: Path, pg: PostgresCluster, runs: int) -> dict:
    db = pg.create_database("peers")
    servers = []
    for name in ("PR1", "PR2"):
        srv = QMServer(home, name)
        srv.home.mkdir(parents=True, exist_ok=True)
        srv.cli("create", name, "--port", "0", "--log-file-pages", "1024", "--qsg", "GP",
                "--qsg-db", db)
        servers.append(srv.start())
    qm1, qm2 = servers
    times = []
    try:
        qm1.sc("DEFINE CFSTRUCT(APP1)\nDEFINE QLOCAL(SQ) QSGDISP(SHARED) CFSTRUCT(APP1)")
        for i in range(runs):
            if not qm1.running:
                qm1.start()
            c1 = raw_connected(qm1.port)
            body = b"held-%d" % i
            c1.call("SEND", {"destination": "/queue/SQ", "persistent": "true"}, body)
            c1.send("SUBSCRIBE", {"destination": "/queue/SQ", "id": "s1",
                                  "ack": "client-individual"})
            [m1] = c1.messages(1)
            assert m1.body == body, m1
            c2 = raw_connected(qm2.port)      # a consumer there once QM1 holds the message
            c2.call("SUBSCRIBE", {"destination": "/queue/SQ", "id": "s2",
                                  "ack": "client-individual"})
            t0 = time.monotonic()
            qm1.kill()
            [m2] = c2.messages(1, timeout=60)
            times.append(time.monotonic() - t0)
            assert m2.body == body, m2
            c2.call("ACK", {"id": m2["ack"]})
            c2.close()
            progress(f"peer recovery {i + 1}/{runs}: {times[-1]:.3f} s")
    finally:
        for s in servers:
            s.kill()
    return {"runs": runs, "redelivery_s": [round(t, 3) for t in times],
            "median_s": round(percentile(times, 50), 3), "max_s": round(max(times), 3),
            "goal_s": 2.0, "met": max(times) < 2.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=None)
    ap.add_argument("--full", action="store_true", help="5,000 messages a configuration")
    ap.add_argument("--members", default="1,2,3")
    ap.add_argument("--body-size", type=int, default=1024)
    ap.add_argument("--peer-recovery", type=int, default=3,
                    help="SIGKILLs of a member holding a message (0: none)")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    messages = args.messages or (5000 if args.full else 500)
    home = Path(tempfile.mkdtemp(prefix="hmq-bench-qsg-"))
    pg = PostgresCluster.create()
    results = []
    peers = None
    try:
        members = [int(x) for x in args.members.split(",") if x]
        if members:
            results.append(local_baseline(home, messages, args.body_size))
        for m in members:
            results.append(group(home, pg, m, messages, args.body_size))
        if args.peer_recovery:
            peers = peer_recovery(home, pg, args.peer_recovery)
    finally:
        pg.destroy()
        if not args.keep:
            shutil.rmtree(home, ignore_errors=True)
    local = (results[0]["msgs_per_s"] or 1) if results else 1
    print(json.dumps({"benchmark": "qsg_throughput", "body_size": args.body_size,
                      "load_average": [round(x, 2) for x in os.getloadavg()],
                      "results": results,
                      "vs_local": {r["config"]: round(r["msgs_per_s"] / local, 2)
                                   for r in results[1:]},
                      "peer_recovery": peers}, indent=2))


if __name__ == "__main__":
    main()
