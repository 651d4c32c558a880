#!/usr/bin/env python3
"""Restart replay rate: how fast restart recovery replays the log (target >= 150 MB/s, issue 14).

1. Create a queue manager with a LINEAR log (extents of --log-file-pages, default
   65535 pages = 256 MiB), ``checkpoint_records`` 10^9, and in qm.toml
   ``[tuning] flush_interval_ms`` and ``flush_max_entries`` 10^9, so neither the
   record count nor the lazy flusher checkpoints or flushes the stores.
2. A child process opens it, opens one unit of work with one put that it never
   commits (the "pin": the restart point cannot move past it, so restart must
   replay the log from there; --no-pin to leave it out), then runs --threads
   threads of persistent traffic in units of work (U puts + commit, U gets +
   commit, 1 KiB bodies, depth kept near --backlog) until it has written
   --log-mb of log. It reports, and the parent SIGKILLs it: no checkpoint, dirty
   stores, an in-flight unit of work.
   Extent switches still checkpoint as the product does (stores flushed there);
   --suppress-switch-checkpoints unhooks that in the writing child only, so
   every effect in the log is still to be redone at restart (worst case).
3. A fresh child process times ``QueueManager.open`` (restart recovery) and
   reports ``restart_report``: bytes/records replayed, phase times. Replay rate =
   bytes_replayed / seconds of the "forward recovery" phase. It also checks the
   queue depth after restart against the committed depth the writer reported.

Prints one JSON object on stdout; progress on stderr.

    .venv/bin/python benchmarks/bench_restart_replay.py            # quick: 64 MB of log
    .venv/bin/python benchmarks/bench_restart_replay.py --full     # 1024 MB (1 GB)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# _common first: it puts src/ on the path when harbormq is not installed
from _common import dir_bytes, make_progress, peak_rss_mb, proc_status  # noqa: I001

QM_NAME = "BENCHQM"
progress = make_progress("bench_restart_replay")

QUEUE = "BENCH.REPLAY"
PIN_QUEUE = "BENCH.PIN"
READY = "READY "


def memory_mb() -> dict:
    """Current RSS, its anonymous and file-backed (mmap) parts, and the peak, in MB."""
    return {k + "_mb": v for k, v in
            proc_status(("VmRSS", "RssAnon", "RssFile", "VmHWM")).items()}










# --------------------------------------------------------------------------- child: write

def child_write(args) -> None:
    from harbormq import QueueManager
    home = Path(args.home)
    qm = QueueManager.open(QM_NAME, home=home)
    if args.suppress_switch_checkpoints:
        qm.core.log.on_switch = None        # benchmark-only: keep stores dirty
    log = qm.core.log
    start_lsn = log.end_lsn
    target = start_lsn + int(args.log_mb * 1e6)
    body = os.urandom(args.body_size)
    pin = None
    if args.pin:
        pin = qm.begin(owner="bench-pin")
        pin.put(PIN_QUEUE, b"pin", persistent=True)
    # a backlog so that gets always find messages
    for _ in range(0, args.backlog, args.uow_size):
        with qm.begin() as u:
            for _ in range(args.uow_size):
                u.put(QUEUE, body, persistent=True)
    counts = {"puts": 0, "gets": 0, "uows": 0}
    lock = threading.Lock()
    errors: list[Exception] = []
    stop = threading.Event()

    def worker() -> None:
        try:
            while not stop.is_set():
                with qm.begin() as u:
                    for _ in range(args.uow_size):
                        u.put(QUEUE, body, persistent=True)
                with qm.begin() as u:
                    got = sum(1 for _ in range(args.uow_size) if u.get(QUEUE) is not None)
                with lock:
                    counts["puts"] += args.uow_size
                    counts["gets"] += got
                    counts["uows"] += 2
                if log.end_lsn >= target:
                    stop.set()
        except Exception as exc:  # noqa: BLE001 - re-raised by the main thread
            errors.append(exc)
            stop.set()

    t0 = time.perf_counter()
    ts = [threading.Thread(target=worker, daemon=True) for _ in range(args.threads)]
    for t in ts:
        t.start()
    next_report = start_lsn
    while any(t.is_alive() for t in ts):
        time.sleep(0.5)
        if log.end_lsn >= next_report:
            progress(f"written {(log.end_lsn - start_lsn) / 1e6:.0f} / {args.log_mb:g} MB of log")
            next_report += max(int(args.log_mb * 1e6 / 10), 1)
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    status = qm.queue_status(QUEUE)
    info = {
        "write_seconds": round(elapsed, 2),
        "log_bytes_written": log.end_lsn - start_lsn,
        "write_log_mb_per_s": round((log.end_lsn - start_lsn) / elapsed / 1e6, 2),
        "puts": counts["puts"] + args.backlog, "gets": counts["gets"],
        "units_of_work": counts["uows"],
        "committed_depth": status["CURDEPTH"],
        "pin_uow": pin.id if pin is not None else None,
        "end_lsn": log.end_lsn, "synced_lsn": log.synced_lsn,
        "last_checkpoint": {k: qm.core.last_checkpoint.get(k)
                            for k in ("reason", "begin_lsn", "restart_lsn", "end_lsn")},
        "peak_rss_mb": peak_rss_mb(),
    }
    print(READY + json.dumps(info), flush=True)
    time.sleep(3600)    # the parent SIGKILLs us here: no checkpoint, stores dirty


# --------------------------------------------------------------------------- child: restart

def child_restart(args) -> None:
    from harbormq import QueueManager
    home = Path(args.home)
    if args.profile:
        child_restart_profiled(args)
        return
    t0, cpu0 = time.perf_counter(), time.process_time()
    qm = QueueManager.open(QM_NAME, home=home)
    open_s, open_cpu = time.perf_counter() - t0, time.process_time() - cpu0
    memory_after_open = memory_mb()
    rep = qm.restart_report
    depth = qm.queue_status(QUEUE)["CURDEPTH"]
    pin_depth = qm.queue_status(PIN_QUEUE)["CURDEPTH"]
    t1 = time.perf_counter()
    qm.close("controlled")
    close_s = time.perf_counter() - t1
    out = {"open_seconds": round(open_s, 3), "open_cpu_seconds": round(open_cpu, 3),
           "close_seconds": round(close_s, 3),
           "report": rep.as_dict(), "depth_after_restart": depth,
           "pin_queue_depth_after_restart": pin_depth, "peak_rss_mb": peak_rss_mb(),
           "memory_after_open": memory_after_open}
    print(json.dumps(out), flush=True)


def child_restart_profiled(args) -> None:
    """The same restart (RunningQueueManager.start, which QueueManager.open runs on
    its loop thread) on this thread, so that cProfile sees it."""
    import asyncio
    import cProfile
    import io
    import pstats

    from harbormq.config import QMConfig
    from harbormq.qmgr.lifecycle import RunningQueueManager
    cfg = QMConfig.load(QM_NAME, Path(args.home))
    out: dict = {}

    async def go() -> None:
        t0 = time.perf_counter()
        rq = await RunningQueueManager.start(cfg, quiet=True)
        out["open_seconds"] = round(time.perf_counter() - t0, 3)
        out["memory_after_open"] = memory_mb()
        out["report"] = rq.report.as_dict()
        out["depth_after_restart"] = rq.core.queues[QUEUE].curdepth
        out["pin_queue_depth_after_restart"] = rq.core.queues[PIN_QUEUE].curdepth
        t1 = time.perf_counter()
        await rq.stop("controlled")
        out["close_seconds"] = round(time.perf_counter() - t1, 3)

    profiler = cProfile.Profile()
    profiler.runcall(asyncio.run, go())
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(30)
    print(text.getvalue(), file=sys.stderr, flush=True)
    out["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(out), flush=True)


# --------------------------------------------------------------------------- parent

def child_cmd(mode: str, home: Path, args) -> list[str]:
    cmd = [sys.executable, os.path.abspath(__file__), "--_child", mode, "--home", str(home),
           "--log-mb", str(args.log_mb), "--body-size", str(args.body_size),
           "--uow-size", str(args.uow_size), "--threads", str(args.threads),
           "--backlog", str(args.backlog)]
    if not args.pin:
        cmd.append("--no-pin")
    if args.suppress_switch_checkpoints:
        cmd.append("--suppress-switch-checkpoints")
    if args.profile and mode == "restart":
        cmd.append("--profile")
    return cmd


def child_env(home: Path) -> dict:
    env = dict(os.environ)
    env["HARBORMQ_HOME"] = str(home)
    env.pop("HARBORMQ_CRASH_AT", None)
    return env


def parent(args) -> dict:
    from harbormq import QueueManager
    from harbormq.config import QMConfig
    from harbormq.qmgr import lifecycle as qmgr

    home = Path(tempfile.mkdtemp(prefix="hmq-bench-replay-"))
    progress(f"HARBORMQ_HOME={home}")
    try:
        if args.from_saved:
            return replay_saved(args, home)
        qmgr.create(QM_NAME, home=home, log_type="linear", log_file_pages=args.log_file_pages,
                    checkpoint_records=10**9)
        cfg = QMConfig.load(QM_NAME, home)
        cfg.tuning.flush_interval_ms = 10**9
        cfg.tuning.flush_max_entries = 10**9
        cfg.save()
        with QueueManager.open(QM_NAME, home=home) as qm:
            qm.define_queue(QUEUE, DEFPSIST="YES", MAXDEPTH=999_999_999)
            qm.define_queue(PIN_QUEUE, DEFPSIST="YES")

        progress(f"writing {args.log_mb:g} MB of log in a child process")
        env = child_env(home)
        child = subprocess.Popen(child_cmd("write", home, args), stdout=subprocess.PIPE,
                                 env=env, text=True)
        info = None
        for line in child.stdout:
            if line.startswith(READY):
                info = json.loads(line[len(READY):])
                break
        if info is None:
            child.wait()
            raise RuntimeError(f"the writing child exited ({child.returncode}) before it was "
                               "ready")
        child.send_signal(signal.SIGKILL)
        child.wait()
        progress(f"writer SIGKILLed (rc {child.returncode}) after "
                 f"{info['log_bytes_written'] / 1e6:.0f} MB in {info['write_seconds']}s")
        log_dir = home / "log" / QM_NAME
        log_files = sorted(p.name for p in log_dir.glob("S*.LOG"))
        log_disk = dir_bytes(log_dir)
        store_disk = dir_bytes(home / "qmgrs" / QM_NAME / "queues")
        if args.save_log:
            save = Path(args.save_log)
            shutil.copytree(home, save / "home")
            (save / "write.json").write_text(json.dumps(
                {"info": info, "log_files": log_files, "log_disk": log_disk,
                 "store_disk": store_disk}))
            progress(f"saved the crashed queue manager in {save} (--from-saved {save})")
        restart = restart_child(home, args, env)
    finally:
        if args.keep:
            progress(f"kept {home}")
        else:
            shutil.rmtree(home, ignore_errors=True)
    return summary(args, info, log_files, log_disk, store_disk, restart)


def restart_child(home: Path, args, env: dict) -> dict:
    # drop this machine's page cache? Not possible unprivileged: the replay reads a log
    # that was just written, usually from the page cache (reported).
    progress("restarting in a fresh child process")
    rc = subprocess.run(child_cmd("restart", home, args), stdout=subprocess.PIPE,
                        env=env, text=True, check=False)
    if rc.returncode != 0:
        raise RuntimeError(f"the restart child failed with exit code {rc.returncode}")
    return json.loads(rc.stdout.strip().splitlines()[-1])


def replay_saved(args, home: Path) -> dict:
    """Restart a copy of a crashed queue manager kept by --save-log: the same log
    replayed again, e.g. to compare two versions of the code."""
    saved = Path(args.from_saved)
    written = json.loads((saved / "write.json").read_text())
    shutil.rmtree(home)
    shutil.copytree(saved / "home", home)
    progress(f"replaying the log saved in {saved}")
    restart = restart_child(home, args, child_env(home))
    return summary(args, written["info"], written["log_files"], written["log_disk"],
                   written["store_disk"], restart)


def summary(args, info: dict, log_files: list, log_disk: int, store_disk: int,
            restart: dict) -> dict:
    rep = restart["report"]
    fwd = rep["phases"]["forward recovery"]
    replayed = rep["bytes_replayed"]
    expected_depth = info["committed_depth"]
    problems = []
    if restart["depth_after_restart"] != expected_depth:
        problems.append(f"depth after restart {restart['depth_after_restart']} != committed "
                        f"depth before the kill {expected_depth}")
    if args.pin and restart["pin_queue_depth_after_restart"] != 0:
        problems.append("the in-flight pin unit of work's put survived restart")
    mb_s = replayed / fwd / 1e6 if fwd else None
    return {
        "benchmark": "restart_replay",
        "mode": "full" if args.full else "quick",
        "log_mb_requested": args.log_mb,
        "settings": {"log_type": "linear", "log_file_pages": args.log_file_pages,
                     "checkpoint_records": 10**9, "flush_interval_ms": 10**9,
                     "flush_max_entries": 10**9, "body_size": args.body_size,
                     "uow_size": args.uow_size, "threads": args.threads,
                     "backlog": args.backlog, "pin_uow": args.pin,
                     "suppress_switch_checkpoints": args.suppress_switch_checkpoints,
                     "profiled": args.profile},
        "write": info,
        "log_extents": log_files,
        "log_bytes_on_disk": log_disk,
        "queue_store_bytes_on_disk": store_disk,
        "restart": {
            "total_open_seconds": restart["open_seconds"],
            # CPU of the whole restart (every thread): steadier than wall time on a
            # machine other work loads
            "open_cpu_seconds": restart.get("open_cpu_seconds"),
            "phases_seconds": {k: round(v, 3) for k, v in rep["phases"].items()},
            "redo_start_lsn": rep["redo_start_lsn"], "end_lsn": rep["end_lsn"],
            "checkpoint_lsn": rep["checkpoint_lsn"],
            "bytes_replayed": replayed, "records_replayed": rep["records_replayed"],
            "effects_redone": rep["effects_redone"],
            "records_skipped": rep.get("records_skipped"),
            "uows_in_flight": rep["uows_in_flight"], "uows_backed_out": rep["uows_backed_out"],
            "torn_tail": rep["torn_tail"], "warnings": rep["warnings"],
            "depth_after_restart": restart["depth_after_restart"],
            "close_seconds": restart["close_seconds"],
            "peak_rss_mb": restart["peak_rss_mb"],
            "memory_after_open": restart["memory_after_open"],
        },
        "replay_mb_per_s": round(mb_s, 2) if mb_s else None,
        "replay_mib_per_s": round(replayed / fwd / 2**20, 2) if fwd else None,
        "replay_records_per_s": round(rep["records_replayed"] / fwd, 1) if fwd else None,
        "target": "replay >= 150 MB/s",
        "meets_target": bool(mb_s and mb_s >= 150),
        "problems": problems,
        "notes": ["MB = 10^6 bytes",
                  "the log was just written, so restart reads it mostly from the page cache",
                  "shared 2-core machine; other work runs concurrently, numbers are noisy"],
        "host": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--log-mb", type=float, default=None,
                    help="MB (10^6 bytes) of log to write before the kill (quick 64, --full 1024)")
    ap.add_argument("--full", action="store_true", help="1024 MB (1 GB) of log")
    ap.add_argument("--log-file-pages", type=int, default=65535,
                    help="extent size in 4 KiB pages (default 65535 = 256 MiB)")
    ap.add_argument("--body-size", type=int, default=1024)
    ap.add_argument("--uow-size", type=int, default=10, help="messages per unit of work")
    ap.add_argument("--threads", type=int, default=4, help="writing threads in the child")
    ap.add_argument("--backlog", type=int, default=1000,
                    help="messages put before the put/get mix starts")
    ap.add_argument("--no-pin", dest="pin", action="store_false",
                    help="no in-flight unit of work pinning the restart point")
    ap.add_argument("--suppress-switch-checkpoints", action="store_true",
                    help="the writing child does not checkpoint at extent switches")
    ap.add_argument("--profile", action="store_true",
                    help="run the restart under cProfile; top functions go to stderr "
                         "(slows the restart: do not quote its rate)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary HARBORMQ_HOME")
    ap.add_argument("--save-log", metavar="DIR",
                    help="copy the crashed queue manager (before its restart) into DIR")
    ap.add_argument("--from-saved", metavar="DIR",
                    help="write nothing: restart a copy of what --save-log kept in DIR")
    ap.add_argument("--_child", choices=("write", "restart"), help=argparse.SUPPRESS)
    ap.add_argument("--home", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.log_mb is None:
        args.log_mb = 1024.0 if args.full else 64.0
    if args._child == "write":
        child_write(args)
    elif args._child == "restart":
        child_restart(args)
    else:
        print(json.dumps(parent(args), indent=2))


if __name__ == "__main__":
    main()
