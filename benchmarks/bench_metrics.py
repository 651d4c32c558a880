#!/usr/bin/env python3
"""/metrics: the time and size of a scrape by the number of queues, and
STOMP traffic with a scrape every second against none.

``scrape`` (``--sizes``: 100 and 10,000 queues, 100,000 too with ``--full``):
a real queue manager in this process (the embedded API) given N more local
queues, a tenth of them holding 3 messages each, and scraped ``--repeat``
times through
``MetricsEndpoint.scrape`` (what ``GET /metrics`` runs; the HTTP transfer
aside). Defining a real queue makes an LMDB store (about 30 ms on this
machine: an hour for 100,000), so the added queues are ``LocalQueue``
objects over an empty stand-in store, their messages in the queue's memory
layer: the snapshot reads the same attributes and walks the same keys as
for a real queue, without the store's page reads. Reported per size: the
snapshot's loop time, its steps and the longest one (how long a scrape held
message traffic up), the render time in its thread, the whole scrape and its CPU, the
size of the text and of its gzip, the series, and how late the loop ran a
1 ms timer (p50, p99, max) for a second idle and during a scrape.

``traffic``: a queue manager process with ``[web]`` and ``--queues`` (500;
``--full`` 2,000) real queues (defined over the admin socket, one MQSC
script), the ``receipt`` mode of ``bench_stomp.py`` (1 producer, each
persistent 1 KiB SEND waiting for its RECEIPT; 1 consumer) for
``--messages`` (3,000; 6,000) a round, in ``--rounds`` (4; 6) rounds
alternating: nothing else, then a scrape of /metrics every second from
another thread (as Prometheus does) and a console open on the queue list
(its first page of 50 read 2 s after each read ends, logged in, as
console.js does); the machine is shared, so the two conditions alternate
and each reports its median. ``ratio`` is scraped
over unscraped (msgs/s, p99 receipt ms, the server's CPU a message and its
event loop's, which the machine's load moves least).

    .venv/bin/python benchmarks/bench_metrics.py                  # both, quick; JSON on stdout
    .venv/bin/python benchmarks/bench_metrics.py --full --part scrape     # 100 to 100,000
    .venv/bin/python benchmarks/bench_metrics.py --part traffic --queues 10000
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import gzip
import json
import os
import statistics
import tempfile
import threading
import time
import urllib.request
from argparse import Namespace
from pathlib import Path

from _common import make_progress  # puts src/ on the path

progress = make_progress("bench_metrics")


class _EmptyStore:
    """The read side of an empty ``QueueStore`` (see the module docstring)."""
    next_seq = 0

    def count(self) -> int:
        return 0

    def last_key(self):
        return None

    def iter_keys(self, start=None):
        return iter(())

    def get(self, key):
        return None


def add_queues(core, n: int, prefix: str) -> None:
    """(loop thread) ``n`` local queues over stand-in stores, every tenth with
    3 messages."""
    from harbormq.core.objects import QLOCAL_DEFAULTS
    from harbormq.core.queue import LocalQueue
    from harbormq.log.records import Message
    base = 10_000_000
    now = time.time_ns()
    for i in range(n):
        name = f"{prefix}{i:06d}"
        q = LocalQueue({"name": name, "object_id": base + i, "type": "QLOCAL",
                        "attrs": dict(QLOCAL_DEFAULTS)}, _EmptyStore())
        if i % 10 == 0:
            for _ in range(3):
                msg = Message(body=b"x" * 100, persistent=False, priority=i % 10)
                msg.msg_id = i.to_bytes(24, "big")
                msg.put_time_ns = now - 5_000_000_000
                msg.seq = q.allocate_seq()
                q.commit_put(msg, 0)
        core.queues[name] = q


async def loop_lag(work=None, seconds: float = 0.0) -> dict:
    """How late the loop runs a 1 ms timer while ``work`` (a coroutine) runs,
    or for ``seconds`` without it: what a frame or a force waiting on the
    loop would wait (ms: p50, p99, max)."""
    lags: list[float] = []
    done = asyncio.Event()

    async def probe():
        while not done.is_set():
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append((time.perf_counter() - t - 0.001) * 1000)
    task = asyncio.ensure_future(probe())
    if work is not None:
        await work
    else:
        await asyncio.sleep(seconds)
    done.set()
    await task
    lags.sort()
    return {"p50": round(lags[len(lags) // 2], 2), "p99": round(lags[int(len(lags) * 0.99)], 2),
            "max": round(lags[-1], 2), "samples": len(lags)}


def scrape_sizes(sizes: list[int], repeat: int) -> list[dict]:
    from harbormq.api import QueueManager
    from harbormq.http import metrics_snapshot
    from harbormq.http.metrics import MetricsEndpoint
    from harbormq.http.metrics_render import render
    from harbormq.qmgr import lifecycle as qmgr
    out = []
    with tempfile.TemporaryDirectory(prefix="bench_metrics.") as tmp:
        home = Path(tmp)
        progress(f"load average {os.getloadavg()}")
        qmgr.create("BENCHMET", home=home, log_file_pages=256)
        qm = QueueManager.open("BENCHMET", home=home)
        try:
            core = qm.core
            have = 0
            for n in sizes:
                qm._call_sync(add_queues, core, n - have, f"B.{n}.")
                have = n
                endpoint = MetricsEndpoint(core)
                runs = []
                for _ in range(repeat):
                    collections = [0, 0, 0]

                    def count(phase, info, collections=collections):
                        if phase == "start":
                            collections[info["generation"]] += 1
                    gc.collect()
                    gc.callbacks.append(count)
                    t0 = time.perf_counter()
                    snap = qm._call(metrics_snapshot.take_snapshot(core))
                    t1 = time.perf_counter()
                    gc.callbacks.remove(count)
                    text = render(snap)
                    t2 = time.perf_counter()
                    gz = gzip.compress(text, compresslevel=1)
                    t3 = time.perf_counter()
                    c3 = time.process_time()
                    whole = qm._call(endpoint.scrape(gzipped=True))
                    t4 = time.perf_counter()
                    c4 = time.process_time()
                    runs.append({"snapshot_s": t1 - t0, "loop_s": snap.loop_seconds,
                                 "steps": snap.steps, "longest_step_ms":
                                 snap.longest_step * 1000, "render_s": t2 - t1,
                                 "gzip_s": t3 - t2, "scrape_s": t4 - t3,
                                 # CPU of every thread of this process: the scrape's cost
                                 # whatever the machine's load
                                 "scrape_cpu_s": c4 - c3,
                                 "bytes": len(text), "gzip_bytes": len(gz),
                                 "endpoint_bytes": len(whole),
                                 "gc_collections_in_snapshot": collections,
                                 "series": text.count(b"\n") - text.count(b"\n#")})
                idle = qm._call(loop_lag(seconds=1.0))
                busy = qm._call(loop_lag(endpoint.scrape(gzipped=True)))
                endpoint.close()
                best = min(runs, key=lambda r: r["scrape_s"])
                row = {"queues": len(core.queues), **{k: round(v, 4) if isinstance(v, float)
                                                      else v for k, v in best.items()},
                       "scrape_s_all": [round(r["scrape_s"], 3) for r in runs],
                       "loop_lag_ms_idle": idle, "loop_lag_ms_scraping": busy}
                progress(f"{row['queues']} queues: scrape {row['scrape_s']:.3f} s, CPU "
                         f"{row['scrape_cpu_s']:.3f} s (loop "
                         f"{row['loop_s']:.3f} s in {row['steps']} steps, longest "
                         f"{row['longest_step_ms']:.1f} ms; render {row['render_s']:.3f} s), "
                         f"{row['bytes'] / 1e6:.1f} MB, gzip {row['gzip_bytes'] / 1e6:.2f} MB; "
                         f"loop lag p99 {idle['p99']} ms idle, {busy['p99']} ms scraping")
                out.append(row)
        finally:
            # the stand-ins have no store for the shutdown's flush to write
            qm._call_sync(lambda: [core.queues.pop(n) for n in list(core.queues)
                                   if n.startswith("B.")])
            qm.close("immediate")
    return out


class Scraper(threading.Thread):
    """GET /metrics every ``interval`` seconds until stopped."""

    def __init__(self, port: int, interval: float = 1.0):
        super().__init__(daemon=True)
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.interval = interval
        self.stopped = threading.Event()
        self.times: list[float] = []
        self.sizes: list[int] = []

    def run(self) -> None:
        while not self.stopped.is_set():
            t0 = time.perf_counter()
            req = urllib.request.Request(self.url, headers={"Accept-Encoding": "gzip"})
            with urllib.request.urlopen(req, timeout=60) as resp:
                self.sizes.append(len(resp.read()))
            took = time.perf_counter() - t0
            self.times.append(took)
            self.stopped.wait(max(0.0, self.interval - took))


class ConsoleReader(threading.Thread):
    """A console open on the queue list: ``/console/api/queues`` page 1 read
    again ``interval`` seconds after each read ends, logged in as ``auth``
    (what console.js does on that page)."""

    def __init__(self, port: int, auth: str, interval: float = 2.0):
        super().__init__(daemon=True)
        self.url = f"http://127.0.0.1:{port}/console/api/queues?offset=0&limit=50&filter=&sort=name"
        self.auth = auth
        self.interval = interval
        self.stopped = threading.Event()
        self.times: list[float] = []

    def run(self) -> None:
        while not self.stopped.is_set():
            t0 = time.perf_counter()
            req = urllib.request.Request(self.url, headers={"Authorization": self.auth})
            with urllib.request.urlopen(req, timeout=60) as resp:
                resp.read()
            self.times.append(time.perf_counter() - t0)
            self.stopped.wait(self.interval)


def console_user(home: Path, qm_name: str) -> str:
    """An administrator for the console's reads (``harbormq user add``): its
    HTTP basic Authorization header."""
    import base64
    import subprocess
    import sys
    env = dict(os.environ, HARBORMQ_HOME=str(home))
    subprocess.run([sys.executable, "-m", "harbormq", "user", "add", qm_name, "console",
                    "--group", "mqm"], input="consolepw\n", text=True, env=env, check=True,
                   capture_output=True, timeout=120)
    return "Basic " + base64.b64encode(b"console:consolepw").decode()


def traffic(args) -> dict:
    import bench_stomp
    from bench_stomp import Server
    with tempfile.TemporaryDirectory(prefix="bench_metrics.") as tmp:
        home = Path(tmp)
        server = Server(home, None, "", home / "profile.out", args.prefetch,
                        create_options={"web_port": 0, "log_file_pages": 4096})
        server.create()
        server.start()
        try:
            t0 = time.monotonic()
            script = "\n".join(f"DEFINE QLOCAL(MET.{i:06d})" for i in range(args.queues))
            server.admin({"cmd": "mqsc", "text": script}, timeout=3600)
            server.mqsc(f"DEFINE QLOCAL({bench_stomp.QUEUE}) MAXDEPTH(999999999)")
            progress(f"{args.queues} queues defined in {time.monotonic() - t0:.0f} s")
            entries = json.loads((server.qm_dir / "listeners.json").read_text())
            web_port = next(e["port"] for e in entries if e.get("transport") == "http")
            auth = console_user(home, bench_stomp.QM_NAME)
            phase_args = Namespace(producers=1, consumers=1, window=1, txn_size=0,
                                   prefetch=args.prefetch, ack_every=0, max_backlog=0,
                                   producer_rate=0.0, consumer_rate=0, body_size=1024,
                                   sample_interval=5.0, stall_timeout=120.0)
            rounds = []
            asyncio.run(bench_stomp.phase(server, phase_args, "receipt", 500,
                                          ack="client-individual", label="warm-up"))
            for r in range(args.rounds):
                scraped = r % 2 == 1
                scraper = Scraper(web_port) if scraped else None
                console = ConsoleReader(web_port, auth) if scraped else None
                for reader in filter(None, (scraper, console)):
                    reader.start()
                res = asyncio.run(bench_stomp.phase(server, phase_args, "receipt",
                                                    args.messages, ack="client-individual",
                                                    label=f"round {r}"))
                for reader in filter(None, (scraper, console)):
                    reader.stopped.set()
                    reader.join()
                row = {"round": r, "scraped": scraped,
                       "msgs_per_s": res["recv_msgs_per_s"],
                       "p99_receipt_ms": res["receipt_latency_ms"]["p99"],
                       # the server's CPU a message, and its event loop's: what the
                       # machine's load moves least
                       "server_cpu_us_per_msg": res["server_cpu_us_per_msg"],
                       "server_main_thread_us_per_msg": res["server_main_thread_us_per_msg"],
                       "loadavg": res["loadavg_after"]}
                if scraper:
                    row.update(scrapes=len(scraper.times),
                               scrape_s_max=round(max(scraper.times), 3),
                               scrape_gzip_bytes=scraper.sizes[-1] if scraper.sizes else 0,
                               console_reads=len(console.times),
                               console_read_s_max=round(max(console.times, default=0), 3))
                progress(json.dumps(row))
                rounds.append(row)
        finally:
            server.stop()

    def median(scraped: bool, key: str) -> float:
        return statistics.median(r[key] for r in rounds if r["scraped"] == scraped)
    keys = ("msgs_per_s", "p99_receipt_ms", "server_cpu_us_per_msg",
            "server_main_thread_us_per_msg")
    summary = {c: {k: median(c == "scraped", k) for k in keys}
               for c in ("unscraped", "scraped")}
    return {"queues": args.queues, "messages_per_round": args.messages, "rounds": rounds,
            "median": summary,
            "ratio": {k: round(summary["scraped"][k] / summary["unscraped"][k], 3)
                      for k in keys}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--part", choices=("scrape", "traffic", "all"), default="all")
    p.add_argument("--full", action="store_true",
                   help="100,000 queues scraped too; traffic: 2,000 queues, 6 rounds of "
                        "6,000 messages")
    p.add_argument("--sizes", help="queues to scrape, e.g. 100,10000 (the quick default)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--queues", type=int, help="traffic: queues defined (quick 500)")
    p.add_argument("--messages", type=int, help="traffic: messages a round (quick 3,000)")
    p.add_argument("--rounds", type=int, help="traffic: rounds, alternating (quick 4)")
    p.add_argument("--prefetch", type=int, default=64)
    args = p.parse_args()
    args.sizes = args.sizes or ("100,10000,100000" if args.full else "100,10000")
    args.queues = args.queues or (2000 if args.full else 500)
    args.messages = args.messages or (6000 if args.full else 3000)
    args.rounds = args.rounds or (6 if args.full else 4)
    out: dict = {"benchmark": "bench_metrics"}
    if args.part in ("scrape", "all"):
        out["scrape"] = scrape_sizes([int(s) for s in args.sizes.split(",")], args.repeat)
    if args.part in ("traffic", "all"):
        out["traffic"] = traffic(args)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
