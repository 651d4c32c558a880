#!/usr/bin/env python3
"""Hot backup cost and rate (issue: backup and restore §1).

A queue manager (linear log, 16 MiB extents) runs as its own process under a
temporary ``HARBORMQ_HOME``; ``--data-mb`` of persistent 1 KiB messages are
loaded into ``--queues`` queues first (in-process, before the server starts),
so that the backup has stores to copy. Then, with STOMP producers sending
persistent 1 KiB messages with a receipt each (``--producers`` connections,
``--window`` SENDs in flight each, one asyncio client in this process):

* ``without``: receipted SENDs per second over ``--seconds``, once just
  before the backup and once just after it;
* ``during``: receipted SENDs per second while ``harbormq backup QM --to DIR
  --idle`` runs (``--no-idle``: without ``--idle``; a hot full backup, its
  trial restore included), and the backup's own figures: MB copied, the
  copy rate (MB/s over the copying, the target's figure), the trial
  restore's seconds, the whole backup's seconds.

``kept`` = during / the mean of the two ``without`` rounds (target: at least
0.8); ``backup_mb_s`` (target: at least 150). The load only sends, so its
queues grow and its rate drifts down as they do (6% over 12 s of no backup
at all, and more the longer the backup): a baseline on both sides of the
backup takes that drift out of ``kept``; ``kept_vs_before`` is the ratio to
the round before alone (the figure of earlier runs). The load average before
and after says how loaded the machine was.

    .venv/bin/python benchmarks/bench_backup.py            # 400 MB, 10 s rounds
    .venv/bin/python benchmarks/bench_backup.py --quick    # 50 MB, 4 s
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (src on sys.path)

QM = "BK"
BODY = b"x" * 1024


class Producer(asyncio.Protocol):
    def __init__(self, queue: str, window: int, counter: list, stop: asyncio.Event):
        self.queue, self.window, self.counter, self.stop = queue, window, counter, stop
        self.buf = bytearray()
        self.sent = self.acked = 0
        self.connected = asyncio.get_running_loop().create_future()
        self.done = asyncio.get_running_loop().create_future()

    def connection_made(self, transport):
        self.t = transport
        transport.write(b"CONNECT\naccept-version:1.2\nhost:/\n\n\0")

    def data_received(self, data):
        self.buf += data
        while (end := self.buf.find(b"\0")) != -1:
            frame = bytes(self.buf[:end])
            del self.buf[:end + 1]
            frame = frame.lstrip(b"\r\n")
            if frame.startswith(b"CONNECTED"):
                self.connected.set_result(True)
                self._send()
            elif frame.startswith(b"RECEIPT"):
                self.acked += 1
                self.counter[0] += 1
                self._send()
            elif frame.startswith(b"ERROR"):
                if not self.done.done():
                    self.done.set_exception(RuntimeError(frame[:300].decode(errors="replace")))

    def _send(self):
        out = []
        while not self.stop.is_set() and self.sent - self.acked < self.window:
            out.append(b"SEND\ndestination:/queue/%s\npersistent:true\nreceipt:%d\n"
                       b"content-length:1024\n\n%s\0" % (self.queue.encode(), self.sent, BODY))
            self.sent += 1
        if out:
            self.t.write(b"".join(out))
        if self.stop.is_set() and self.acked >= self.sent and not self.done.done():
            self.done.set_result(self.sent)

    def connection_lost(self, exc):
        if not self.done.done():
            self.done.set_exception(RuntimeError(f"connection lost: {exc}"))


async def load(port: int, producers: int, window: int, until) -> tuple[int, float]:
    """Producers until ``until()`` (a coroutine) returns: (receipts, seconds)."""
    loop = asyncio.get_running_loop()
    stop, counter, protos = asyncio.Event(), [0], []
    for i in range(producers):
        _, p = await loop.create_connection(
            lambda i=i: Producer(f"LOAD.{i % 4}", window, counter, stop), "127.0.0.1", port)
        protos.append(p)
    await asyncio.gather(*(p.connected for p in protos))
    t0, c0 = time.monotonic(), counter[0]
    result = await until()
    n, t = counter[0] - c0, time.monotonic() - t0
    stop.set()
    for p in protos:
        p._send()
    await asyncio.wait_for(asyncio.gather(*(p.done for p in protos)), 60)
    for p in protos:
        p.t.close()
    return n, t, result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-mb", type=int, default=400)
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--producers", type=int, default=4)
    ap.add_argument("--window", type=int, default=32)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--keep-dir", type=Path, default=None)
    ap.add_argument("--no-idle", dest="idle", action="store_false",
                    help="back up at --nice 10 only, not in the idle scheduling class")
    ap.add_argument("--max-rate", type=float, default=None, metavar="MB/S",
                    help="the backup's --max-rate (default: none, as fast as it can)")
    args = ap.parse_args()
    if args.quick:
        args.data_mb, args.seconds = 50, 4.0
    from harbormq import QueueManager
    from harbormq.qmgr import lifecycle

    base = Path(tempfile.mkdtemp(prefix="bench-backup-", dir=args.keep_dir))
    home, bk = base / "home", base / "bk"
    env = dict(os.environ, HARBORMQ_HOME=str(home),
               PYTHONPATH=str(Path(_common.__file__).resolve().parents[1] / "src"))
    load_before = os.getloadavg()
    server = None
    try:
        lifecycle.create(QM, home=home, log_type="linear", log_file_pages=4096, port=0)
        t = time.monotonic()
        with QueueManager.open(QM, home=home) as qm:
            for i in range(args.queues):
                qm.define_queue(f"DATA.{i}", replace=True, MAXDEPTH=999_999_999)
            for i in range(4):
                qm.define_queue(f"LOAD.{i}", replace=True, MAXDEPTH=999_999_999)
            per = args.data_mb * 1024 // args.queues
            for i in range(args.queues):
                for start in range(0, per, 1000):
                    uow = qm.begin()
                    for _ in range(min(1000, per - start)):
                        uow.put(f"DATA.{i}", BODY, persistent=True)
                    uow.commit()
        preload_s = time.monotonic() - t
        console = base / "server.log"
        with open(console, "wb") as out:
            server = subprocess.Popen([sys.executable, "-m", "harbormq", "start", QM,
                                       "--foreground"], env=env, stdout=out,
                                      stderr=subprocess.STDOUT)
        lj = home / "qmgrs" / QM / "listeners.json"
        end = time.monotonic() + 120
        while not lj.exists():
            if time.monotonic() > end or server.poll() is not None:
                raise SystemExit("the queue manager did not start:\n"
                                 + console.read_text(errors="replace")[-3000:])
            time.sleep(0.05)
        time.sleep(0.5)
        port = json.loads(lj.read_text())[0]["port"]

        async def rounds():
            async def sleep():
                await asyncio.sleep(args.seconds)
            await load(port, args.producers, args.window, sleep)     # warm-up
            before = await load(port, args.producers, args.window, sleep)

            async def backup():
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "harbormq", "backup", QM, "--to", str(bk), "--json",
                    *(["--idle"] if args.idle else []),
                    *(["--max-rate", str(args.max_rate)] if args.max_rate else []),
                    env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
                out, err = await proc.communicate()
                if proc.returncode != 0:
                    raise SystemExit(f"backup failed: {err.decode()}")
                return json.loads(out)
            during = await load(port, args.producers, args.window, backup)
            after = await load(port, args.producers, args.window, sleep)
            return before, during, after
        before, during, after = asyncio.run(rounds())
        b = during[2]
        rate_before, rate1 = before[0] / before[1], during[0] / during[1]
        rate_after = after[0] / after[1]
        rate0 = (rate_before + rate_after) / 2
        print(json.dumps({
            "data_mb_loaded": args.data_mb, "preload_s": round(preload_s, 1),
            "producers": args.producers, "window": args.window,
            "stomp_msgs_per_s_without_backup": round(rate0),
            "stomp_msgs_per_s_before_backup": round(rate_before),
            "stomp_msgs_per_s_after_backup": round(rate_after),
            "stomp_msgs_per_s_during_backup": round(rate1),
            "kept": round(rate1 / rate0, 3), "kept_target": 0.8,
            "kept_vs_before": round(rate1 / rate_before, 3),
            "backup_mb": round(b["bytes"] / 1e6, 1),
            "backup_copy_s": b["copy_seconds"], "backup_mb_s": b["mb_s"],
            "backup_mb_s_target": 150,
            "backup_trial_restore_s": b["trial_seconds"], "backup_total_s": b["seconds"],
            "backup_mb_s_incl_trial": round(b["bytes"] / 1e6 / b["seconds"], 1),
            "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
            "backup_idle_class": args.idle, "backup_max_rate_mb_s": args.max_rate,
            "backup_paced_s": b.get("paced_seconds"), "cpus": os.cpu_count(),
        }, indent=1))
    finally:
        if server is not None and server.poll() is None:
            server.terminate()
            server.wait(60)
        if args.keep_dir is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
