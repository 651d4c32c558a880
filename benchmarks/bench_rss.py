#!/usr/bin/env python3
"""Peak RSS with many persistent messages on one queue (target: under 300 MB).

Each measurement is a fresh child process, so its peak RSS is its own:

1. ``put``: opens the queue manager and puts --messages persistent messages of
   --body-size bytes (default 1 KiB) on one queue, in units of work of
   --uow-size (default 100), then stops it (controlled; --crash: SIGKILLs
   itself instead, so the next start has to recover).
2. ``restart``: a fresh process opens the queue manager (restart recovery),
   checks the depth, browses --sample messages and gets --sample messages in a
   unit of work, then stops it.

Reported per process: peak RSS (VmHWM, what the target is about; not
ru_maxrss, which Linux carries over fork+exec from the parent), the peak of
sampled anonymous RSS (heap, without file-backed mmap pages such as LMDB stores
and log extents, which the kernel can drop), the RSS split at points, and
timings. Prints one JSON object on stdout; progress on stderr.

    .venv/bin/python benchmarks/bench_rss.py            # quick: 100,000 messages
    .venv/bin/python benchmarks/bench_rss.py --full     # 1,000,000 messages
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
progress = make_progress("bench_rss")
QUEUE = "BENCH.RSS"
RESULT = "RESULT "






class Sampler(threading.Thread):
    """Samples RSS (and its anonymous part) every ``interval`` seconds."""

    def __init__(self, interval: float = 0.1):
        super().__init__(daemon=True)
        self.interval = interval
        self.peak_rss = 0.0
        self.peak_anon = 0.0
        self.samples = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            st = proc_status()
            self.peak_rss = max(self.peak_rss, st.get("VmRSS", 0.0))
            self.peak_anon = max(self.peak_anon, st.get("RssAnon", 0.0))
            self.samples += 1

    def stop(self) -> dict:
        self._stop_event.set()
        self.join()
        return {"sampled_peak_rss_mb": self.peak_rss, "sampled_peak_anon_mb": self.peak_anon,
                "samples": self.samples}






# --------------------------------------------------------------------------- children

def child_put(args) -> None:
    from harbormq import QueueManager
    sampler = Sampler()
    sampler.start()
    t0 = time.perf_counter()
    qm = QueueManager.open(QM_NAME, home=Path(args.home))
    open_s = time.perf_counter() - t0
    after_open = proc_status()
    body = os.urandom(args.body_size)
    per_thread = [args.messages // args.threads + (1 if i < args.messages % args.threads else 0)
                  for i in range(args.threads)]
    done = [0] * args.threads
    errors: list[Exception] = []

    def worker(i: int) -> None:
        try:
            left = per_thread[i]
            while left:
                n = min(args.uow_size, left)
                with qm.begin() as u:
                    for _ in range(n):
                        u.put(QUEUE, body, persistent=True)
                left -= n
                done[i] += n
        except Exception as exc:  # noqa: BLE001 - re-raised by the main thread
            errors.append(exc)

    t1 = time.perf_counter()
    ts = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(args.threads)]
    for t in ts:
        t.start()
    step = max(args.messages // 10, 1)
    reported = 0
    while any(t.is_alive() for t in ts):
        time.sleep(0.5)
        if sum(done) >= reported + step:
            reported = sum(done)
            st = proc_status()
            progress(f"put {reported}/{args.messages}: RSS {st.get('VmRSS')} MB "
                     f"(anon {st.get('RssAnon')}, file {st.get('RssFile')}), "
                     f"peak {st.get('VmHWM')} MB")
    put_s = time.perf_counter() - t1
    if errors:
        raise errors[0]
    depth = qm.queue_status(QUEUE)["CURDEPTH"]
    before_stop = proc_status()
    out = {"messages_put": sum(done), "open_seconds": round(open_s, 3),
           "put_seconds": round(put_s, 2), "messages_per_s": round(sum(done) / put_s, 1),
           "depth": depth, "memory_after_open": after_open, "memory_before_stop": before_stop}
    if args.crash:
        out.update(sampler.stop(), peak_rss_mb=peak_rss_mb(), stop="SIGKILL")
        print(RESULT + json.dumps(out), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    t2 = time.perf_counter()
    qm.close("controlled")
    out["stop_seconds"] = round(time.perf_counter() - t2, 2)
    out["stop"] = "controlled"
    out.update(sampler.stop(), peak_rss_mb=peak_rss_mb(), memory_at_end=proc_status())
    print(RESULT + json.dumps(out), flush=True)


def child_restart(args) -> None:
    from harbormq import QueueManager
    sampler = Sampler()
    sampler.start()
    t0 = time.perf_counter()
    qm = QueueManager.open(QM_NAME, home=Path(args.home))
    open_s = time.perf_counter() - t0
    after_open = proc_status()
    rep = qm.restart_report
    depth = qm.queue_status(QUEUE)["CURDEPTH"]
    t1 = time.perf_counter()
    browsed = qm.browse(QUEUE, limit=args.sample)
    browse_s = time.perf_counter() - t1
    t2 = time.perf_counter()
    with qm.begin() as u:
        got = [u.get(QUEUE) for _ in range(args.sample)]
    get_s = time.perf_counter() - t2
    ok_order = [m.seq for m in browsed] == [m.seq for m in got if m is not None]
    depth_after = qm.queue_status(QUEUE)["CURDEPTH"]
    t3 = time.perf_counter()
    qm.close("controlled")
    out = {"open_seconds": round(open_s, 3),
           "restart_phases_seconds": {k: round(v, 3) for k, v in rep.phases.items()},
           "records_replayed": rep.records_replayed, "bytes_replayed": rep.bytes_replayed,
           "effects_redone": rep.effects_redone,
           "depth_at_restart": depth, "browsed": len(browsed),
           "browse_seconds": round(browse_s, 4), "got": sum(m is not None for m in got),
           "get_seconds": round(get_s, 4), "browse_matches_get_order": ok_order,
           "depth_after_gets": depth_after, "stop_seconds": round(time.perf_counter() - t3, 2),
           "memory_after_open": after_open}
    out.update(sampler.stop(), peak_rss_mb=peak_rss_mb(), memory_at_end=proc_status())
    print(RESULT + json.dumps(out), flush=True)


# --------------------------------------------------------------------------- parent

def run_child(mode: str, home: Path, args) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--_child", mode, "--home", str(home),
           "--messages", str(args.messages), "--body-size", str(args.body_size),
           "--uow-size", str(args.uow_size), "--threads", str(args.threads),
           "--sample", str(args.sample)]
    if args.crash:
        cmd.append("--crash")
    env = dict(os.environ, HARBORMQ_HOME=str(home))
    env.pop("HARBORMQ_CRASH_AT", None)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, env=env, text=True, check=False)
    lines = [x for x in proc.stdout.splitlines() if x.startswith(RESULT)]
    if not lines:
        raise RuntimeError(f"the {mode} child failed (exit code {proc.returncode})")
    out = json.loads(lines[-1][len(RESULT):])
    out["exit_code"] = proc.returncode
    return out


def parent(args) -> dict:
    from harbormq import QueueManager
    from harbormq.qmgr import lifecycle as qmgr
    home = Path(tempfile.mkdtemp(prefix="hmq-bench-rss-"))
    progress(f"HARBORMQ_HOME={home}")
    try:
        qmgr.create(QM_NAME, home=home, log_type=args.log_type,
                    log_file_pages=args.log_file_pages)
        with QueueManager.open(QM_NAME, home=home) as qm:
            qm.define_queue(QUEUE, DEFPSIST="YES", MAXDEPTH=999_999_999)
        progress(f"putting {args.messages} x {args.body_size} B in a child process")
        put = run_child("put", home, args)
        progress(f"  peak RSS {put['peak_rss_mb']} MB, {put['messages_per_s']:.0f} msgs/s")
        disk = {"queue_store_mb": round(dir_bytes(home / "qmgrs" / QM_NAME / "queues") / 1e6, 1),
                "log_mb": round(dir_bytes(home / "log" / QM_NAME) / 1e6, 1)}
        progress("restarting in a fresh child process, browsing and getting a few")
        restart = run_child("restart", home, args)
        progress(f"  peak RSS {restart['peak_rss_mb']} MB")
    finally:
        if args.keep:
            progress(f"kept {home}")
        else:
            shutil.rmtree(home, ignore_errors=True)
    problems = []
    if put["depth"] != args.messages:
        problems.append(f"depth after the puts is {put['depth']}, expected {args.messages}")
    if restart["depth_at_restart"] != args.messages:
        problems.append(f"depth after restart is {restart['depth_at_restart']}, "
                        f"expected {args.messages}")
    if not restart["browse_matches_get_order"]:
        problems.append("the messages got are not the ones browse returned first")
    target = 300.0
    return {
        "benchmark": "rss",
        "mode": "full" if args.full else "quick",
        "messages": args.messages, "body_size": args.body_size, "uow_size": args.uow_size,
        "threads": args.threads, "log_type": args.log_type,
        "log_file_pages": args.log_file_pages, "crash_after_put": args.crash,
        "put_process": put,
        "restart_process": restart,
        "disk_after_put": disk,
        "peak_rss_mb": {"put": put["peak_rss_mb"], "restart": restart["peak_rss_mb"]},
        "target": "peak RSS < 300 MB in each process",
        "meets_target": put["peak_rss_mb"] < target and restart["peak_rss_mb"] < target,
        "problems": problems,
        "notes": [("peak_rss_mb is VmHWM (peak RSS of the process): anonymous plus "
                   "file-backed pages (LMDB maps, mmapped log extents)"),
                  "shared 2-core machine; other work runs concurrently, numbers are noisy"],
        "host": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=None,
                    help="messages to put (quick 100000, --full 1000000)")
    ap.add_argument("--full", action="store_true", help="1,000,000 messages")
    ap.add_argument("--body-size", type=int, default=1024)
    ap.add_argument("--uow-size", type=int, default=100, help="messages per unit of work")
    ap.add_argument("--threads", type=int, default=1, help="putting threads")
    ap.add_argument("--sample", type=int, default=10,
                    help="messages browsed and got after restart")
    ap.add_argument("--log-type", default="circular", choices=("circular", "linear"))
    ap.add_argument("--log-file-pages", type=int, default=4096)
    ap.add_argument("--crash", action="store_true",
                    help="the putting process SIGKILLs itself instead of stopping")
    ap.add_argument("--keep", action="store_true", help="keep the temporary HARBORMQ_HOME")
    ap.add_argument("--_child", choices=("put", "restart"), help=argparse.SUPPRESS)
    ap.add_argument("--home", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.messages is None:
        args.messages = 1_000_000 if args.full else 100_000
    if args._child == "put":
        child_put(args)
    elif args._child == "restart":
        child_restart(args)
    else:
        print(json.dumps(parent(args), indent=2))


if __name__ == "__main__":
    main()
