#!/usr/bin/env python3
"""A backlog building at full speed: producers with no consumer, on the defaults.

The situation a queue exists for: consumers are down and producers go on. A
queue manager created with ``harbormq create``'s defaults (circular log, 3 + 2
extents) runs as its own process (``bench_stomp.Server``); ``--producers`` (8)
pipelining producers (``--window`` 64 SENDs awaiting receipts each) send
``--messages`` persistent messages of ``--body-size`` bytes (1 KiB) with
receipts to ``--queues`` queues (1; 100 spreads the producers over 100
queues, one producer per queue when there are more queues than producers) and
nobody reads them.

What it reports (one JSON object on stdout, progress on stderr):

* ``errors``: the ERROR frames the producers got (the run stops at the first:
  a backlog must slow producers, never fail them), and the operator log's
  HMQ7463E (log full) lines;
* the receipted rate over the run, per second (``rate_per_s``: the holds of
  log-space flow control show as dips, not as failures), its median and
  minimum, and the seconds in which nothing was receipted;
* checkpoint spans (bytes of log from a checkpoint's BEGIN to its END: the
  goal is under one extent at any rate), from ``DISPLAY QMSTATUS`` polled every
  second (the last span and the largest since the start) and the HMQ7466W
  warnings (a span over one extent);
* producer holds for log space (HMQ7461W/HMQ7462I in the operator log);
* the restart after a SIGKILL at the end: seconds from start to listeners
  open, and that every receipted message is there (CURDEPTH).

    .venv/bin/python benchmarks/bench_backlog.py --quick                # 200,000 messages
    .venv/bin/python benchmarks/bench_backlog.py                        # 10,000,000 messages
    .venv/bin/python benchmarks/bench_backlog.py --body-size 65536 --messages 200000
    .venv/bin/python benchmarks/bench_backlog.py --queues 100
    .venv/bin/python benchmarks/bench_backlog.py --flush-delay-ms 200   # a slow store flush

``--flush-delay-ms`` makes each store write of a flush sleep that long first
(``HARBORMQ_DELAY_AT=store.flush:MS``): the slow disk under the stores, on cue.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import stomp_load
from _common import make_progress
from bench_stomp import Server, loadavg, open_conn, split
from stomp_load import Producer, Run

progress = make_progress("bench_backlog")


def qmstatus(server: Server) -> dict:
    out = server.mqsc("DISPLAY QMSTATUS ALL")
    return dict(re.findall(r"(\w+)\(([^)]*)\)", out))


def queue_names(n: int) -> list[str]:
    return ["BACKLOG"] if n == 1 else [f"BACKLOG.{i:03d}" for i in range(n)]


async def load(server: Server, args) -> dict:
    loop = asyncio.get_running_loop()
    queues = queue_names(args.queues)
    n_prod = max(args.producers, len(queues))
    window = max(1, args.window * args.producers // n_prod)
    run = Run(loop, args.messages)
    for i, share in enumerate(split(args.messages, n_prod)):
        p = Producer(run, f"p{i}", "/queue/" + queues[i % len(queues)], share,
                     args.body_size, window=window, sample_every=10)
        p.port = server.port
        run.producers.append(p)
    await asyncio.gather(*(open_conn(loop, p) for p in run.producers))
    la0 = loadavg()
    t0 = time.perf_counter()
    run.t0 = stomp_load._now()
    for p in run.producers:
        p.start()
    per_second: list[int] = []
    spans: list[int] = []
    span_max = 0
    last = 0
    next_report = t0 + 5
    while not run.all_receipted.done():
        await asyncio.sleep(1.0)
        per_second.append(run.receipted - last)
        last = run.receipted
        try:
            st = await loop.run_in_executor(None, qmstatus, server)
            if st.get("CKPTSPAN"):
                spans.append(int(st["CKPTSPAN"]))
                span_max = max(span_max, int(st.get("CKPTMAX") or 0))
        except Exception as exc:      # the admin socket is slow under load: skip a poll
            progress(f"  DISPLAY QMSTATUS failed: {exc}")
        if time.perf_counter() >= next_report:
            next_report += 5
            progress(f"  t={time.perf_counter() - t0:.0f}s receipted={run.receipted} "
                     f"({per_second[-1]}/s) span={spans[-1] if spans else '-'} B")
        if run.error is not None:
            break
    seconds = time.perf_counter() - t0
    error = str(run.error) if run.error else None
    if error is None:
        await asyncio.wait_for(asyncio.gather(*(p.disconnect() for p in run.producers)), 60)
    for p in run.producers:
        p.transport.close()
        if not p.disconnected.done():
            p.disconnected.cancel()
    steady = per_second[2:-1] or per_second
    return {
        "messages": args.messages, "receipted": run.receipted, "body_size": args.body_size,
        "producers": n_prod, "window": window, "queues": len(queues),
        "seconds": round(seconds, 1),
        "msgs_per_s": round(run.receipted / seconds, 1) if seconds else None,
        "mb_per_s": round(run.receipted * args.body_size / seconds / 1e6, 1) if seconds else None,
        "rate_median_per_s": statistics.median(steady) if steady else None,
        "rate_min_per_s": min(steady) if steady else None,
        "seconds_without_receipts": sum(1 for x in steady if x == 0),
        "rate_per_s": per_second,
        "error": error,
        "checkpoint_span_bytes": {
            "samples": len(spans), "median": statistics.median(spans) if spans else None,
            "max_seen": max(spans) if spans else None, "max_reported": span_max or None},
        "loadavg_before": la0, "loadavg_after": loadavg(),
    }


def operator_log_counts(qm_dir: Path) -> dict:
    counts: dict[str, int] = {}
    for f in sorted((qm_dir / "errors").glob("HMQERR*.LOG")):
        for line in f.read_text(errors="replace").splitlines():
            m = re.search(r"\b(HMQ\d{4}[IWE])\b", line)
            if m:
                counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    keep = ("HMQ7463E", "HMQ7466W", "HMQ7469W", "HMQ7461W", "HMQ7462I")
    return {k: counts.get(k, 0) for k in keep}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=10_000_000)
    ap.add_argument("--quick", action="store_true", help="200,000 messages")
    ap.add_argument("--body-size", type=int, default=1024)
    ap.add_argument("--producers", type=int, default=8)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--queues", type=int, default=1)
    ap.add_argument("--flush-delay-ms", type=float, default=0.0)
    ap.add_argument("--no-restart", action="store_true", help="skip the kill -9 and restart")
    args = ap.parse_args()
    if args.quick:
        args.messages = 200_000
    if args.flush_delay_ms:
        os.environ["HARBORMQ_DELAY_AT"] = f"store.flush:{args.flush_delay_ms}"
    home = Path(tempfile.mkdtemp(prefix="hmq-backlog-"))
    server = Server(home, None, "", home / "profile", max_prefetch=64)
    server.create()
    server.start()
    result: dict = {"benchmark": "backlog", "flush_delay_ms": args.flush_delay_ms}
    try:
        for q in queue_names(args.queues):
            server.mqsc(f"DEFINE QLOCAL({q}) MAXDEPTH(999999999) DEFPSIST(YES)")
        result.update(asyncio.run(load(server, args)))
        depth = sum(int(qmstatus_depth(server, q)) for q in queue_names(args.queues))
        result["depth_before_kill"] = depth
        if not args.no_restart:
            os.kill(server.pid, signal.SIGKILL)
            server.proc.wait()
            (server.qm_dir / "listeners.json").unlink(missing_ok=True)   # the dead one's
            t0 = time.perf_counter()
            server.start()
            result["restart_s"] = round(time.perf_counter() - t0, 2)
            after = sum(int(qmstatus_depth(server, q)) for q in queue_names(args.queues))
            result["depth_after_restart"] = after
            result["all_receipted_there"] = after >= result["receipted"]
    finally:
        server.stop()
        result["operator_log"] = operator_log_counts(server.qm_dir)
    print(json.dumps(result))
    sys.exit(1 if result.get("error") else 0)


def qmstatus_depth(server: Server, queue: str) -> str:
    out = server.mqsc(f"DISPLAY QSTATUS({queue}) TYPE(QUEUE) CURDEPTH")
    return re.search(r"CURDEPTH\((\d+)\)", out).group(1)


if __name__ == "__main__":
    main()
