#!/usr/bin/env python3
"""The check a persistent put makes of a circular log's space
(``RecoveryLog.available_extents``, through ``log_space_short``), against the
scan of every extent's state it replaced (the same answer).

A queue manager of this checkout with a circular log of ``--primary`` +
``--secondary`` extents is opened; each timing is the best of five runs of
``--calls`` calls, in ns a call. The scan is timed here, on the same log, so
no other checkout is needed; ``PYTHONPATH=OTHER/src`` times another one's
``available_extents``.

Prints one JSON object on stdout.

    .venv/bin/python benchmarks/bench_log_space_check.py
    .venv/bin/python benchmarks/bench_log_space_check.py --primary 20 --secondary 40
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import timeit

# _common first: it puts src/ on the path when harbormq is not installed
import _common  # noqa: F401, I001

from harbormq import QueueManager
from harbormq.qmgr import lifecycle as qmgr


def scan(log) -> int:
    """What ``available_extents`` computed before the count was kept."""
    st = log.state
    free = sum(1 for e in st.extents if e.state == "free")
    return free + (st.primary + st.secondary - len(st.extents))


def best_ns(fn, calls: int) -> float:
    return round(min(timeit.repeat(fn, number=calls, repeat=5)) / calls * 1e9, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--primary", type=int, default=3)
    ap.add_argument("--secondary", type=int, default=2)
    ap.add_argument("--calls", type=int, default=200_000)
    args = ap.parse_args()
    home = tempfile.mkdtemp(prefix="bench-log-space-")
    os.environ["HARBORMQ_HOME"] = home
    try:
        qmgr.create("BENCHQM", home=home, log_file_pages=32, log_primary=args.primary,
                    log_secondary=args.secondary)
        qm = QueueManager.open("BENCHQM", home=home)
        try:
            log = qm.core.log
            assert log.available_extents() == scan(log)
            result = {
                "benchmark": "log_space_check",
                "extents": len(log.state.extents),
                "limit": args.primary + args.secondary,
                "available_extents_ns": best_ns(log.available_extents, args.calls),
                "scan_ns": best_ns(lambda: scan(log), args.calls),
                "log_space_short_ns": best_ns(qm.core.log_space_short, args.calls),
                "load_average": os.getloadavg()[0],
            }
        finally:
            qm.close("immediate")
    finally:
        shutil.rmtree(home, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
