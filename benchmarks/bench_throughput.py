#!/usr/bin/env python3
"""In-process persistent messaging throughput through ``QueueManager``.

For every combination of unit-of-work size (default 1 and 10 messages) and
application threads (default 1 and 4):

* put phase: each thread loops ``begin()``, ``put`` x U (persistent, --body-size
  bytes, default 1 KiB), ``commit()`` until the phase has put --messages;
* get phase: each thread loops ``begin()``, ``get`` x U, ``commit()`` until the
  same messages are all got (destructive gets, the queue ends empty).

Reports messages/s and units of work/s for each phase, plus the log's group
commits (fsyncs) and log MB/s. Prints one JSON object on stdout; progress on
stderr.

    .venv/bin/python benchmarks/bench_throughput.py          # quick: 2,000 messages per phase
    .venv/bin/python benchmarks/bench_throughput.py --full   # 20,000 messages per phase
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import threading
import time
from pathlib import Path

# _common first: it puts src/ on the path when harbormq is not installed
from _common import SyncCounter, make_progress  # noqa: I001

from harbormq import QueueManager
from harbormq.qmgr import lifecycle as qmgr

QM_NAME = "BENCHQM"
progress = make_progress("bench_throughput")
QUEUE = "BENCH.THROUGHPUT"






def split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def phase(qm: QueueManager, sync: SyncCounter, kind: str, messages: int, uow_size: int,
          threads: int, body: bytes) -> dict:
    shares = split(messages, threads)
    done = [0] * threads
    uows = [0] * threads
    errors: list[Exception] = []
    barrier = threading.Barrier(threads + 1)
    log = qm.core.log

    def worker(i: int) -> None:
        barrier.wait()
        try:
            left = shares[i]
            while left > 0:
                n = min(uow_size, left)
                u = qm.begin()
                got = 0
                for _ in range(n):
                    if kind == "put":
                        u.put(QUEUE, body, persistent=True)
                        got += 1
                    else:
                        if u.get(QUEUE) is None:
                            break
                        got += 1
                u.commit()
                uows[i] += 1
                done[i] += got
                left -= got
                if got < n:   # queue empty: cannot happen when puts and gets match
                    raise RuntimeError(f"get found the queue empty after {done[i]} messages")
        except Exception as exc:  # noqa: BLE001 - re-raised by the main thread
            errors.append(exc)

    ts = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    for t in ts:
        t.start()
    s0, l0 = sync.count, log.end_lsn
    t0 = time.perf_counter()
    barrier.wait()
    for t in ts:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{kind} phase: {len(errors)} thread(s) failed: {errors[0]!r}") \
            from errors[0]
    total = sum(done)
    fsyncs = sync.count - s0
    return {
        "messages": total,
        "units_of_work": sum(uows),
        "seconds": round(elapsed, 3),
        "messages_per_s": round(total / elapsed, 1),
        "uows_per_s": round(sum(uows) / elapsed, 1),
        "body_mb_per_s": round(total * len(body) / elapsed / 1e6, 3),
        "log_mb_per_s": round((log.end_lsn - l0) / elapsed / 1e6, 3),
        "fsyncs": fsyncs,
        "uows_per_fsync": round(sum(uows) / fsyncs, 2) if fsyncs else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=None,
                    help="messages per phase and configuration (quick 2000, --full 20000)")
    ap.add_argument("--full", action="store_true", help="20,000 messages per phase")
    ap.add_argument("--body-size", type=int, default=1024, help="body bytes (default 1024)")
    ap.add_argument("--uow-sizes", default="1,10", help="messages per unit of work")
    ap.add_argument("--threads", default="1,4", help="application thread counts")
    ap.add_argument("--log-file-pages", type=int, default=4096,
                    help="extent size in 4 KiB pages (default 4096 = 16 MiB, circular log)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary HARBORMQ_HOME")
    args = ap.parse_args()
    messages = args.messages or (20_000 if args.full else 2_000)
    uow_sizes = [int(x) for x in args.uow_sizes.split(",")]
    thread_counts = [int(x) for x in args.threads.split(",")]

    home = Path(tempfile.mkdtemp(prefix="hmq-bench-tput-"))
    os.environ["HARBORMQ_HOME"] = str(home)
    progress(f"HARBORMQ_HOME={home}")
    body = os.urandom(args.body_size)
    runs = []
    try:
        qmgr.create(QM_NAME, home=home, log_file_pages=args.log_file_pages)
        qm = QueueManager.open(QM_NAME, home=home)
        try:
            qm.define_queue(QUEUE, DEFPSIST="YES", MAXDEPTH=999_999_999)
            sync = SyncCounter(qm.core.log)
            # warm-up: a few hundred messages through both paths
            phase(qm, sync, "put", 200, 10, 1, body)
            phase(qm, sync, "get", 200, 10, 1, body)
            for uow_size in uow_sizes:
                for threads in thread_counts:
                    row = {"uow_size": uow_size, "threads": threads}
                    for kind in ("put", "get"):
                        progress(f"{kind}: {messages} messages, {uow_size}/UOW, "
                                 f"{threads} thread(s)")
                        r = phase(qm, sync, kind, messages, uow_size, threads, body)
                        progress(f"  {r['messages_per_s']:.0f} messages/s "
                                 f"({r['uows_per_fsync']} UOWs/fsync)")
                        row[kind] = r
                    runs.append(row)
            depth = qm.queue_status(QUEUE)["CURDEPTH"]
        finally:
            qm.close("immediate")
    finally:
        if args.keep:
            progress(f"kept {home}")
        else:
            shutil.rmtree(home, ignore_errors=True)
    result = {
        "benchmark": "throughput",
        "mode": "full" if args.full else "quick",
        "messages_per_phase": messages,
        "body_size": args.body_size,
        "persistent": True,
        "final_queue_depth": depth,
        "runs": runs,
        "summary_messages_per_s": {
            f"uow{r['uow_size']}_threads{r['threads']}": {
                "put": r["put"]["messages_per_s"], "get": r["get"]["messages_per_s"]}
            for r in runs},
        "host": {"cpus": os.cpu_count(), "python": platform.python_version(),
                 "note": "shared 2-core machine; other work runs concurrently, numbers are noisy"},
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
