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

    .venv/bin/python benchmarks/bench_qsg_throughput.py                  # 500 messages
    .venv/bin/python benchmarks/bench_qsg_throughput.py --full           # 5,000 messages
    .venv/bin/python benchmarks/bench_qsg_throughput.py --members 1,2,3 --messages 2000
"""

from __future__ import annotations

import argparse
import json
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=None)
    ap.add_argument("--full", action="store_true", help="5,000 messages a configuration")
    ap.add_argument("--members", default="1,2,3")
    ap.add_argument("--body-size", type=int, default=1024)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    messages = args.messages or (5000 if args.full else 500)
    home = Path(tempfile.mkdtemp(prefix="hmq-bench-qsg-"))
    pg = PostgresCluster.create()
    results = []
    try:
        results.append(local_baseline(home, messages, args.body_size))
        for m in [int(x) for x in args.members.split(",") if x]:
            results.append(group(home, pg, m, messages, args.body_size))
    finally:
        pg.destroy()
        if not args.keep:
            shutil.rmtree(home, ignore_errors=True)
    local = results[0]["msgs_per_s"] or 1
    print(json.dumps({"benchmark": "qsg_throughput", "body_size": args.body_size,
                      "results": results,
                      "vs_local": {r["config"]: round(r["msgs_per_s"] / local, 2)
                                   for r in results[1:]}}, indent=2))


if __name__ == "__main__":
    main()
