#!/usr/bin/env python3
"""Log append throughput and group commit: 1 committer vs N concurrent committers.

Two layers are measured:

* ``log``: the recovery log alone (``RecoveryLog`` opened the way restart opens
  it, then ``start_writing`` on a running asyncio loop). A committer is an
  asyncio task looping ``append(record of --record-size payload bytes)`` then
  ``await log.force()``.
* ``qm``: the same through the full queue manager: ``QueueManager.put`` of a
  persistent message, auto-committed (returns once it is on disk), from 1 vs N
  application threads.

For every run it reports commits/s, records/s, MB/s (payload and log bytes),
the number of group commits (one per fdatasync of the log writer, counted by
wrapping ``RecoveryLog._on_synced``, which the writer calls exactly once after
each of its fdatasyncs; the extra syncs of an extent switch are not counted),
records per fsync, commit latency percentiles, and the ratio
N-committers / 1-committer (target: >= 8).

Prints one JSON object on stdout; progress goes to stderr.

    .venv/bin/python benchmarks/bench_log_append.py            # quick: 2 s per run
    .venv/bin/python benchmarks/bench_log_append.py --full     # 10 s per run
    .venv/bin/python benchmarks/bench_log_append.py --fsync-delay-ms 2   # emulated slow disk
"""

from __future__ import annotations

import argparse
import asyncio
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
from harbormq.config import LogSettings
from harbormq.log.manager import RecoveryLog
from harbormq.log.records import LogRecord, RecordFlag, RecordType, encoded_length
from harbormq.qmgr import lifecycle as qmgr

QM_NAME = "BENCHQM"
progress = make_progress("bench_log_append")
QUEUE = "BENCH.APPEND"




def percentiles(samples: list[float]) -> dict:
    if not samples:
        return {}
    s = sorted(samples)

    def pct(p: float) -> float:
        return round(s[min(len(s) - 1, int(p / 100 * len(s)))] * 1e6, 1)
    return {"p50_us": pct(50), "p90_us": pct(90), "p99_us": pct(99),
            "max_us": round(s[-1] * 1e6, 1)}




# --------------------------------------------------------------------------- log layer

def open_log_for_writing(log_dir: Path, loop: asyncio.AbstractEventLoop) -> RecoveryLog:
    """Open an existing log the way restart does: control file, chain check,
    scan to the end of the log, then start the writer there."""
    log = RecoveryLog(log_dir, QM_NAME)
    log.open()
    chain = log.verify_chain()
    scan = log.scan(chain[0].first_lsn, repair_tail=True)
    for _ in scan:
        pass
    log.start_writing(scan.end_lsn, loop,
                      active_closed=scan.end is not None and scan.end.how == "extent_end")
    return log


async def log_run(log: RecoveryLog, sync: SyncCounter, committers: int, seconds: float,
                  record_size: int) -> dict:
    payload = os.urandom(record_size)
    counts = [0] * committers
    latencies: list[float] = []
    start_lsn = log.end_lsn
    start_syncs = sync.count
    deadline = time.perf_counter() + seconds

    async def committer(i: int) -> None:
        perf = time.perf_counter
        while perf() < deadline:
            t = perf()
            log.append(LogRecord(RecordType.MSG_PUT, object_id=1, object_name=QUEUE,
                                 payload=payload, flags=RecordFlag.AUTO_COMMIT))
            await log.force()
            latencies.append(perf() - t)
            counts[i] += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(committer(i) for i in range(committers)))
    elapsed = time.perf_counter() - t0
    commits = sum(counts)
    log_bytes = log.end_lsn - start_lsn
    syncs = sync.count - start_syncs
    return {
        "committers": committers,
        "seconds": round(elapsed, 3),
        "commits": commits,
        "commits_per_s": round(commits / elapsed, 1),
        "records_per_s": round(commits / elapsed, 1),   # one record per commit here
        "payload_mb_per_s": round(commits * record_size / elapsed / 1e6, 3),
        "log_mb_per_s": round(log_bytes / elapsed / 1e6, 3),
        "fsyncs": syncs,
        "fsyncs_per_s": round(syncs / elapsed, 1),
        "records_per_fsync": round(commits / syncs, 2) if syncs else None,
        "commit_latency": percentiles(latencies),
        "per_committer_min_max": [min(counts), max(counts)],
    }


async def log_layer(log_dir: Path, committer_counts: list[int], seconds: float,
                    record_size: int, warmup: float) -> dict:
    loop = asyncio.get_running_loop()
    log = open_log_for_writing(log_dir, loop)
    sync = SyncCounter(log)
    try:
        if warmup:
            await log_run(log, sync, 1, warmup, record_size)
        runs = []
        for n in committer_counts:
            progress(f"log layer: {n} committer(s) for {seconds:g}s")
            r = await log_run(log, sync, n, seconds, record_size)
            progress(f"  {r['commits_per_s']:.0f} commits/s, {r['fsyncs_per_s']:.0f} fsyncs/s, "
                     f"{r['records_per_fsync']} records/fsync")
            runs.append(r)
        await log.force()
    finally:
        log.close()
    return {"runs": runs}


# --------------------------------------------------------------------------- queue manager

def qm_run(qm: QueueManager, sync: SyncCounter, threads: int, seconds: float,
           body: bytes) -> dict:
    counts = [0] * threads
    lat: list[list[float]] = [[] for _ in range(threads)]
    errors: list[Exception] = []
    barrier = threading.Barrier(threads + 1)
    log = qm.core.log
    start_lsn = log.end_lsn
    start_syncs = sync.count
    deadline = [0.0]

    def worker(i: int) -> None:
        perf = time.perf_counter
        barrier.wait()
        try:
            while perf() < deadline[0]:
                t = perf()
                qm.put(QUEUE, body, persistent=True)
                lat[i].append(perf() - t)
                counts[i] += 1
        except Exception as exc:  # noqa: BLE001 - re-raised by the main thread
            errors.append(exc)

    ts = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    for t in ts:
        t.start()
    deadline[0] = time.perf_counter() + seconds
    t0 = time.perf_counter()
    barrier.wait()
    for t in ts:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} put thread(s) failed: {errors[0]!r}") from errors[0]
    commits = sum(counts)
    syncs = sync.count - start_syncs
    return {
        "threads": threads,
        "seconds": round(elapsed, 3),
        "commits": commits,
        "commits_per_s": round(commits / elapsed, 1),
        "records_per_s": round(commits / elapsed, 1),   # one MSG_PUT record per put
        "payload_mb_per_s": round(commits * len(body) / elapsed / 1e6, 3),
        # includes the checkpoint/extent records written meanwhile
        "log_mb_per_s": round((log.end_lsn - start_lsn) / elapsed / 1e6, 3),
        "fsyncs": syncs,
        "fsyncs_per_s": round(syncs / elapsed, 1),
        "records_per_fsync": round(commits / syncs, 2) if syncs else None,
        "put_latency": percentiles([x for per in lat for x in per]),
        "per_thread_min_max": [min(counts), max(counts)],
    }


def qm_layer(home: Path, thread_counts: list[int], seconds: float, record_size: int,
             warmup: float, log_pages: int) -> dict:
    qmgr.create(QM_NAME, home=home, log_file_pages=log_pages)
    qm = QueueManager.open(QM_NAME, home=home)
    try:
        qm.define_queue(QUEUE, DEFPSIST="YES", MAXDEPTH=999_999_999)
        sync = SyncCounter(qm.core.log)
        body = os.urandom(record_size)
        if warmup:
            qm_run(qm, sync, 1, warmup, body)
        runs = []
        for n in thread_counts:
            progress(f"queue manager: {n} putting thread(s) for {seconds:g}s")
            r = qm_run(qm, sync, n, seconds, body)
            progress(f"  {r['commits_per_s']:.0f} puts/s, {r['fsyncs_per_s']:.0f} fsyncs/s, "
                     f"{r['records_per_fsync']} records/fsync")
            runs.append(r)
    finally:
        qm.close("immediate")
    return {"runs": runs}


def ratio(runs: list[dict], key: str) -> float | None:
    if len(runs) < 2 or not runs[0]["commits_per_s"]:
        return None
    return round(runs[-1][key] / runs[0][key], 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=None,
                    help="measured duration of every run (quick: 2, --full: 10)")
    ap.add_argument("--full", action="store_true", help="full run: 10 s per run")
    ap.add_argument("--record-size", type=int, default=256,
                    help="payload bytes per record / message body (default 256)")
    ap.add_argument("--committers", default="1,16",
                    help="comma-separated committer/thread counts; the ratio is last/first")
    ap.add_argument("--warmup", type=float, default=0.5, help="warm-up seconds (default 0.5)")
    ap.add_argument("--log-file-pages", type=int, default=4096,
                    help="extent size in 4 KiB pages (default 4096 = 16 MiB)")
    ap.add_argument("--fsync-delay-ms", type=float, default=0.0,
                    help="emulate a slower disk: sleep this long inside every os.fdatasync "
                         "of this process (the log writer's); default 0 = the real disk")
    ap.add_argument("--skip-qm", action="store_true", help="only the log layer")
    ap.add_argument("--skip-log", action="store_true", help="only the queue manager")
    ap.add_argument("--keep", action="store_true", help="keep the temporary HARBORMQ_HOME")
    args = ap.parse_args()
    seconds = args.seconds if args.seconds is not None else (10.0 if args.full else 2.0)
    counts = [int(x) for x in args.committers.split(",") if x.strip()]

    if args.fsync_delay_ms > 0:
        real_fdatasync, delay = os.fdatasync, args.fsync_delay_ms / 1000

        def slow_fdatasync(fd: int) -> None:
            real_fdatasync(fd)
            time.sleep(delay)
        os.fdatasync = slow_fdatasync   # the log writer calls os.fdatasync at run time

    home = Path(tempfile.mkdtemp(prefix="hmq-bench-append-"))
    os.environ["HARBORMQ_HOME"] = str(home)
    progress(f"HARBORMQ_HOME={home}")
    result: dict = {
        "benchmark": "log_append",
        "mode": "full" if args.full else "quick",
        "record_size": args.record_size,
        "record_bytes_in_log": encoded_length(len(QUEUE), args.record_size),
        "seconds_per_run": seconds,
        "committer_counts": counts,
        "fsync_delay_ms_emulated": args.fsync_delay_ms,
        "target": "ratio (N committers / 1 committer) >= 8",
        "host": {"cpus": os.cpu_count(), "python": platform.python_version(),
                 "note": "shared 2-core machine; other work runs concurrently, numbers are noisy"},
    }
    try:
        if not args.skip_log:
            log_dir = home / "log" / QM_NAME
            RecoveryLog.create(log_dir, QM_NAME,
                               LogSettings(log_type="linear", pages=args.log_file_pages))
            layer = asyncio.run(log_layer(log_dir, counts, seconds, args.record_size,
                                          args.warmup))
            layer["log_type"] = "linear"
            layer["ratio_commits_per_s"] = ratio(layer["runs"], "commits_per_s")
            layer["meets_target"] = (layer["ratio_commits_per_s"] or 0) >= 8
            result["log"] = layer
            shutil.rmtree(log_dir)
        if not args.skip_qm:
            layer = qm_layer(home, counts, seconds, args.record_size, args.warmup,
                             args.log_file_pages)
            layer["log_type"] = "circular (create defaults)"
            layer["ratio_commits_per_s"] = ratio(layer["runs"], "commits_per_s")
            layer["meets_target"] = (layer["ratio_commits_per_s"] or 0) >= 8
            result["qm"] = layer
    finally:
        if args.keep:
            progress(f"kept {home}")
        else:
            shutil.rmtree(home, ignore_errors=True)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
