#!/usr/bin/env python3
"""Publish/subscribe at scale (issue 29): restart with many durable
subscriptions, and the publish rate against the size of the topic tree.

1. Create a queue manager and write --subs durable subscriptions (default
   1,000,000), each on a topic string of its own (``bench/<i mod 1000>/<i>``,
   so the tree has --subs leaves), onto SYSTEM.DURABLE.SUBSCRIBER.QUEUE as the
   service writes them (one status message each, 10,000 per unit of work).
   They deliver to 10 provided queues: a managed queue per subscription would
   make this a benchmark of 1,000,000 queues, not of subscriptions.
2. Start the queue manager as ``harbormq start`` does (a server process) and
   time it from the spawn to its STOMP listener open (listeners.json
   written): restart recovery, then the status queues read back, then the
   listeners. Its RSS (and USS: the store's pages it mapped aside) and CPU
   seconds once started, the load average (the wall time depends on what
   else the machine runs), and the pub/sub start line of the operator log
   (HMQ5801I).
3. Publish rate: --publications non-persistent publications to a topic with one
   subscription, on the queue manager holding the --subs subscriptions that do
   not match and on a new queue manager with an empty tree, both open in this
   process, --rounds rounds alternating between them (the median of each).

Prints one JSON object on stdout; progress on stderr.

    .venv/bin/python benchmarks/bench_pubsub_restart.py              # 1,000,000
    .venv/bin/python benchmarks/bench_pubsub_restart.py --subs 100000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import make_progress

from harbormq import QueueManager
from harbormq.core.objects import DURABLE_SUBSCRIBER_QUEUE
from harbormq.log.records import Message
from harbormq.pubsub.status import Subscription, status_message
from harbormq.qmgr import lifecycle

progress = make_progress("bench_pubsub_restart")
BATCH = 10_000
DESTS = [f"DEST.{k}" for k in range(10)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_subscriptions(qm: QueueManager, n: int) -> None:
    core = qm.core
    qm._call(core.pubsub.ready())
    for d in DESTS:
        qm.define_queue(d, DEFPSIST="YES")

    async def batch(start: int, end: int) -> None:
        uow = core.begin("bench")
        for i in range(start, end):
            sub = Subscription(f"BENCH.SUB.{i}", f"bench/{i % 1000}/{i}", DESTS[i % 10],
                               "PROVIDED", sub_id=os.urandom(24).hex().upper())
            core.put_nowait(DURABLE_SUBSCRIBER_QUEUE, status_message(sub), uow)
        await core.commit(uow)
    t0 = time.monotonic()
    for start in range(0, n, BATCH):
        qm._call(batch(start, min(n, start + BATCH)))
        if start % 100_000 == 0:
            progress(f"{start} subscriptions written ({time.monotonic() - t0:.0f} s)")


def timed_server_start(home: Path, name: str, env: dict) -> dict:
    qm_dir = home / "qmgrs" / name
    lj = qm_dir / "listeners.json"
    if lj.exists():
        lj.unlink()
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "harbormq", "start", name, "--foreground"],
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT)
    try:
        while not lj.exists():
            if proc.poll() is not None:
                raise SystemExit(f"the queue manager exited with {proc.returncode}")
            time.sleep(0.01)
        seconds = time.monotonic() - t0
        import psutil
        server = psutil.Process(proc.pid)
        mem = server.memory_full_info()
        cpu = server.cpu_times()
        figures = {"rss_mb": round(mem.rss / 2**20, 1), "uss_mb": round(mem.uss / 2**20, 1),
                   # CPU seconds: what the start costs whatever else the machine runs
                   "cpu_s": round(cpu.user + cpu.system, 2),
                   "loadavg_1m": round(os.getloadavg()[0], 1)}
    finally:
        proc.terminate()
        proc.wait(timeout=300)
    line = next((ln for ln in (qm_dir / "errors" / "HMQERR01.LOG").read_text().splitlines()
                 if "HMQ5801I" in ln), "")
    return {"start_to_listeners_s": round(seconds, 2), **figures,
            "pubsub_line": line.split(" ", 2)[-1] if line else ""}


def rate_subscription(qm: QueueManager) -> None:
    qm.define_queue("RATE.Q", MAXDEPTH=999_999_999)
    qm._call(qm.core.pubsub.subscribe("rate/x", name="RATE", dest="RATE.Q"))


def publish_rate(qm: QueueManager, n: int) -> float:
    """Publications per second of ``n`` non-persistent ones to one subscriber."""
    ps = qm.core.pubsub

    async def run() -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            ps.publish_nowait("rate/x", Message(b"x" * 100, persistent=False))
        return n / (time.perf_counter() - t0)
    rate = qm._call(run())
    qm._call(qm.core.clear_queue("RATE.Q"))
    return rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--subs", type=int, default=1_000_000)
    ap.add_argument("--publications", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=5, help="publish-rate rounds (median)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench_pubsub_"))
    home = scratch / "hmq"
    home.mkdir()
    env = dict(os.environ, HARBORMQ_HOME=str(home))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1]
                                                          / "src"), env.get("PYTHONPATH")]))
    out: dict = {"benchmark": "pubsub_restart", "subs": args.subs}
    try:
        lifecycle.create("QMPS", home=home, log_file_pages=16384, port=free_port())
        with QueueManager.open("QMPS", home=home) as qm:
            t0 = time.monotonic()
            write_subscriptions(qm, args.subs)
            out["write_s"] = round(time.monotonic() - t0, 1)
        progress("timing the server's start")
        out.update(timed_server_start(home, "QMPS", env))
        progress(json.dumps(out))
        lifecycle.create("QMEMPTY", home=home, log_file_pages=16384, port=free_port())
        # both open at once, rounds alternating: the machine's load moves under both alike
        with QueueManager.open("QMPS", home=home) as full, \
                QueueManager.open("QMEMPTY", home=home) as empty:
            assert len(full.core.pubsub.subs) == args.subs
            rates: dict[str, list[float]] = {"full": [], "empty": []}
            for qm in (full, empty):
                rate_subscription(qm)
            for _ in range(args.rounds):
                rates["full"].append(publish_rate(full, args.publications))
                rates["empty"].append(publish_rate(empty, args.publications))
        med = {k: sorted(v)[len(v) // 2] for k, v in rates.items()}
        out["publish_rate_full_tree_per_s"] = round(med["full"])
        out["publish_rate_empty_tree_per_s"] = round(med["empty"])
        out["publish_rate_rounds"] = {k: [round(r) for r in v] for k, v in rates.items()}
        out["rate_ratio_full_over_empty"] = round(med["full"] / med["empty"], 3)
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
