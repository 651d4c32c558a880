#!/usr/bin/env python3
"""Log bytes and rate of a persistent publication to N subscription queues:
one MSG_PUBLISH record (the body written once) against the N plain puts a
publication would otherwise be (MSG_PUT records in one unit of work, so that
it is still all or nothing).

For N = 1, 10, 100, 1000 target queues and a 1 KiB body it reports the log
bytes per publication both ways and their ratio, and publications/s (and
deliveries/s: publications x N) through ``QueueManagerCore.publish`` outside
a unit of work (one record, one force each), with one publisher.

Prints one JSON object on stdout; progress goes to stderr.

    .venv/bin/python benchmarks/bench_publish_log.py            # quick
    .venv/bin/python benchmarks/bench_publish_log.py --full     # more publications per N
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import shutil
import tempfile
import time
from pathlib import Path

# _common first: it puts src/ on the path when harbormq is not installed
from _common import make_progress  # noqa: I001

from harbormq import QueueManager
from harbormq.log.records import Message
from harbormq.qmgr import lifecycle as qmgr

QM_NAME = "BENCHPUB"
BODY = b"p" * 1024
progress = make_progress("bench_publish_log")


def measure(qm: QueueManager, n: int, count: int) -> dict:
    core = qm.core
    names = [f"SUB.{n}.{i:04d}" for i in range(n)]
    for name in names:
        qm.define_queue(name, DEFPSIST="YES", MAXDEPTH=10_000_000)

    async def run() -> dict:
        log = core.log
        # one publication each: one record, one force
        start_lsn, t0 = log.end_lsn, time.perf_counter()
        for _ in range(count):
            await core.publish(names, Message(body=BODY))
        pub_s = time.perf_counter() - t0
        pub_bytes = log.end_lsn - start_lsn
        # the same as N plain puts in one unit of work, committed
        start_lsn, t0 = log.end_lsn, time.perf_counter()
        for _ in range(count):
            uow = core.begin(owner="bench")
            for name in names:
                core.put_nowait(name, Message(body=BODY), uow)
            await core.commit(uow)
        puts_s = time.perf_counter() - t0
        puts_bytes = log.end_lsn - start_lsn
        return {"targets": n, "publications": count,
                "log_bytes_per_publication": round(pub_bytes / count),
                "log_bytes_per_n_puts": round(puts_bytes / count),
                "ratio_n_puts_to_publication": round(puts_bytes / pub_bytes, 1),
                "publications_per_s": round(count / pub_s, 1),
                "deliveries_per_s": round(count * n / pub_s),
                "n_puts_units_per_s": round(count / puts_s, 1)}
    result = asyncio.run_coroutine_threadsafe(run(), qm._loop).result()
    for name in names:          # (keep the queue manager small for the next N)
        qm.delete_queue(name, purge=True)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="more publications per N")
    ap.add_argument("--targets", default="1,10,100,1000")
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="bench-publish-"))
    try:
        qmgr.create(QM_NAME, home=home, log_file_pages=4096)
        qm = QueueManager.open(QM_NAME, home=home)
        runs = []
        try:
            for n in [int(x) for x in args.targets.split(",")]:
                count = max(20, (20_000 if args.full else 2_000) // n)
                progress(f"N={n}: {count} publications, then as {count} x {n} puts")
                runs.append(measure(qm, n, count))
                progress(json.dumps(runs[-1]))
        finally:
            qm.close("immediate")
        print(json.dumps({"benchmark": "bench_publish_log", "body_bytes": len(BODY),
                          "python": platform.python_version(), "runs": runs}, indent=1))
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
