#!/usr/bin/env python3
"""Dual logging's cost: commits/s of a single log vs a dual log (log.dual_path).

The same two layers as ``bench_log_append.py``, whose runs it reuses:

* ``log``: ``RecoveryLog`` alone, opened the way restart opens it; a committer
  is an asyncio task looping ``append`` + ``await log.force()``;
* ``qm``: ``QueueManager.put(persistent=True)`` (auto-commit) from application
  threads, through the whole queue manager.

Each layer is measured with 1 and N committers, single and dual alternately
for ``--rounds`` rounds (the machine may be shared: alternating spreads the
noise over both), and the median of the rounds is reported with
``dual / single`` (target: >= 0.8, dual within 20 % of single). A dual force
completes when both copies are fdatasynced, the second on a helper thread at
the same time as the first.

Both copies are on the same file system here unless ``--dual-dir`` names a
directory on another disk (as a real dual log would be). On one disk with a
volatile write cache every fdatasync is a cache flush of that disk, so a dual
force costs two flushes of the same device; ``--dual-dir /dev/shm`` (no flush
at all for the dual copy) measures what the mechanism costs apart from that,
and ``--fsync-delay-ms D`` emulates slower flushes (D ms slept inside every
fdatasync, the two copies' sleeping at once as two disks would flush).

Prints one JSON object on stdout; progress goes to stderr.

    .venv/bin/python benchmarks/bench_dual_log.py            # quick: 2 s per run, 3 rounds
    .venv/bin/python benchmarks/bench_dual_log.py --full     # 10 s per run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

# _common first: it puts src/ on the path when harbormq is not installed
from _common import SyncCounter, make_progress  # noqa: I001
from bench_log_append import QUEUE, log_run, qm_run

from harbormq import QueueManager
from harbormq.config import LogSettings
from harbormq.log.manager import RecoveryLog
from harbormq.qmgr import lifecycle as qmgr

QM_NAME = "BENCHQM"
progress = make_progress("bench_dual_log")


def open_log(log_dir: Path, dual_dir: Path | None, loop) -> RecoveryLog:
    log = RecoveryLog(log_dir, QM_NAME, dual_dir)
    log.open()
    chain = log.verify_chain()
    scan = log.scan(chain[0].first_lsn, repair_tail=True)
    for _ in scan:
        pass
    log.start_writing(scan.end_lsn, loop,
                      active_closed=scan.end is not None and scan.end.how == "extent_end")
    return log


async def log_round(log_dir: Path, dual_dir: Path | None, counts: list[int], seconds: float,
                    record_size: int, warmup: float) -> list[dict]:
    log = open_log(log_dir, dual_dir, asyncio.get_running_loop())
    sync = SyncCounter(log)
    try:
        if warmup:
            await log_run(log, sync, 1, warmup, record_size)
        return [await log_run(log, sync, n, seconds, record_size) for n in counts]
    finally:
        await log.force()
        log.close()


def qm_round(home: Path, counts: list[int], seconds: float, record_size: int,
             warmup: float) -> list[dict]:
    qm = QueueManager.open(QM_NAME, home=home)
    try:
        qm.define_queue(QUEUE, DEFPSIST="YES", MAXDEPTH=999_999_999, replace=True)
        sync = SyncCounter(qm.core.log)
        body = os.urandom(record_size)
        if warmup:
            qm_run(qm, sync, 1, warmup, body)
        out = [qm_run(qm, sync, n, seconds, body) for n in counts]
        qm.clear_queue(QUEUE)
        return out
    finally:
        qm.close("immediate")


def summarise(rounds: dict[str, list[list[dict]]], counts: list[int]) -> dict:
    """Median commits/s per mode and committer count, and dual / single."""
    out: dict = {"by_committers": []}
    for i, n in enumerate(counts):
        row: dict = {"committers": n}
        for mode in ("single", "dual"):
            values = [r[i]["commits_per_s"] for r in rounds[mode]]
            row[f"{mode}_commits_per_s"] = round(statistics.median(values), 1)
            row[f"{mode}_rounds"] = values
            row[f"{mode}_records_per_fsync"] = statistics.median(
                r[i]["records_per_fsync"] or 0 for r in rounds[mode])
            row[f"{mode}_p99_us"] = statistics.median(
                (r[i].get("commit_latency") or r[i].get("put_latency"))["p99_us"]
                for r in rounds[mode])
        row["dual_over_single"] = round(row["dual_commits_per_s"] /
                                        row["single_commits_per_s"], 3)
        row["meets_target"] = row["dual_over_single"] >= 0.8
        out["by_committers"].append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=None,
                    help="measured duration of every run (quick: 2, --full: 10)")
    ap.add_argument("--full", action="store_true", help="full run: 10 s per run")
    ap.add_argument("--rounds", type=int, default=3, help="single/dual rounds (median)")
    ap.add_argument("--record-size", type=int, default=256)
    ap.add_argument("--committers", default="1,16", help="comma-separated committer counts")
    ap.add_argument("--warmup", type=float, default=0.5)
    ap.add_argument("--log-file-pages", type=int, default=4096)
    ap.add_argument("--dual-dir", type=Path, default=None,
                    help="where the dual copies go (default: beside the primary, same disk)")
    ap.add_argument("--fsync-delay-ms", type=float, default=0.0,
                    help="emulate slower flushes: sleep this long inside every os.fdatasync")
    ap.add_argument("--skip-qm", action="store_true", help="only the log layer")
    ap.add_argument("--skip-log", action="store_true", help="only the queue manager")
    args = ap.parse_args()
    seconds = args.seconds if args.seconds is not None else (10.0 if args.full else 2.0)
    counts = [int(x) for x in args.committers.split(",") if x.strip()]
    if args.fsync_delay_ms > 0:
        real_fdatasync, delay = os.fdatasync, args.fsync_delay_ms / 1000

        def slow_fdatasync(fd: int) -> None:
            real_fdatasync(fd)
            time.sleep(delay)
        os.fdatasync = slow_fdatasync   # the log writer calls os.fdatasync at run time
    root = Path(tempfile.mkdtemp(prefix="hmq-bench-dual-"))
    dual_root = Path(tempfile.mkdtemp(prefix="hmq-bench-dual2-", dir=args.dual_dir)) \
        if args.dual_dir else root / "dual"
    progress(f"work in {root}, dual copies in {dual_root}")
    result: dict = {
        "benchmark": "dual_log",
        "mode": "full" if args.full else "quick",
        "seconds_per_run": seconds, "rounds": args.rounds, "record_size": args.record_size,
        "committer_counts": counts,
        "dual_dir": str(args.dual_dir) if args.dual_dir else "beside the primary (one disk)",
        "fsync_delay_ms_emulated": args.fsync_delay_ms,
        "target": "dual commits/s >= 0.8 x single (within 20 %)",
        "host": {"cpus": os.cpu_count(), "python": platform.python_version(),
                 "note": "shared 2-core machine with other work running; numbers are noisy"},
    }
    try:
        if not args.skip_log:
            dirs = {"single": (root / "log-single", None),
                    "dual": (root / "log-dual", dual_root / "log")}
            for log_dir, dual_dir in dirs.values():
                RecoveryLog.create(log_dir, QM_NAME, LogSettings(
                    log_type="circular", pages=args.log_file_pages), dual_dir)
            rounds: dict[str, list] = {"single": [], "dual": []}
            for k in range(args.rounds):
                for mode, (log_dir, dual_dir) in dirs.items():
                    progress(f"log layer, round {k + 1}: {mode}")
                    runs = asyncio.run(log_round(log_dir, dual_dir, counts, seconds,
                                                 args.record_size, args.warmup))
                    progress("  " + ", ".join(f"{r['committers']}: {r['commits_per_s']:.0f}/s"
                                              for r in runs))
                    rounds[mode].append(runs)
            result["log"] = summarise(rounds, counts)
        if not args.skip_qm:
            homes = {"single": root / "qm-single", "dual": root / "qm-dual"}
            for mode, home in homes.items():
                home.mkdir()
                qmgr.create(QM_NAME, home=home, log_file_pages=args.log_file_pages,
                            log_dual_path=dual_root / "qm" if mode == "dual" else None)
            rounds = {"single": [], "dual": []}
            for k in range(args.rounds):
                for mode, home in homes.items():
                    progress(f"queue manager, round {k + 1}: {mode}")
                    runs = qm_round(home, counts, seconds, args.record_size, args.warmup)
                    progress("  " + ", ".join(f"{r['threads']}: {r['commits_per_s']:.0f}/s"
                                              for r in runs))
                    rounds[mode].append(runs)
            result["qm"] = summarise(rounds, counts)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(dual_root, ignore_errors=True)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
