#!/usr/bin/env python3
"""STOMP end to end: persistent 1 KiB messages through a running queue manager.

The queue manager runs as a separate process (``python -m harbormq start QM
--foreground`` under a fresh temporary ``HARBORMQ_HOME``, a free loopback
port), so its CPU and RSS are read from ``/proc/<pid>``; the load generator
(``stomp_load.py``: raw frames, one asyncio connection per producer/consumer,
one client process) runs here. Every mode sends ``persistent:true`` SENDs of
``--body-size`` (1024) bytes to one queue (defined first with a MAXDEPTH large
enough for the run) and counts a run only when every message was sent,
receipted and received (and the queue is empty at the end, checked with
DISPLAY QSTATUS over the admin socket).

Modes (issue 3 §7; targets on the 2-core machine, generator on the same host):

* ``receipt``  1 producer, each SEND waits for its RECEIPT; 1 consumer.
  Target >= 2,500 msgs/s, p99 receipt latency < 2 ms.
* ``pipelined`` 8 producers, each with up to 64 SENDs awaiting receipts; 8
  consumers. Target >= 15,000 msgs/s.
* ``txn``  4 producers: BEGIN, 50 SENDs, COMMIT with receipt (one
  transaction in flight each); 4 consumers: ``client-individual``, 50 ACKs in
  a transaction then COMMIT (with receipt). Target >= 18,000 msgs/s.
* ``slow-consumer`` ``--duration`` seconds (600 for the target; 20 by default,
  5 quick) of ``--producers`` (4) fast pipelined producers and one consumer
  reading at ``--consumer-rate`` (200 msgs/s) with ``ack:auto`` (the case where
  only the transport's write buffer bounds what the server holds;
  ``--consumer-ack`` changes it): the consumer stops reading its socket
  whenever it is ahead of its rate. Producers hold back while more than
  ``--max-backlog`` (500,000; quick 10,000; 0: never) messages are queued, so
  the queue sits near that depth. The server's RSS is sampled every
  ``--sample-interval`` (5) seconds; reported: start/end/max and the
  least-squares slope (MB/min) of VmRSS, RssAnon (the heap) and RssFile
  (file pages mapped: the LMDB queue store and the log extents) over the
  samples after the first 10%; ``rss_flat`` judges the heap (fitted growth
  under 5 MB or 5%). RssFile grows while the consumer reads messages from
  store pages it has not touched before: page cache, bounded by the store's
  size (about depth x message size), not a leak. Then the consumer reads at
  full speed until the queue is empty (``drain_s``).

Consumers of ``receipt`` and ``pipelined`` acknowledge the way a durable
consumer does: ``--consumer-ack client-individual`` (the default: an ACK per
MESSAGE, each delivery a unit of work of its own) or ``client`` (a cumulative
ACK every ``--ack-every`` messages, default prefetch/2); ``--ack-modes
client-individual,client`` measures both, the first one is the headline.
Prefetch window: ``--prefetch`` (64; the server's default is 16).

Reported per mode: messages, seconds, ``send_msgs_per_s`` (all receipted: first
SEND to last RECEIPT), ``recv_msgs_per_s`` (first SEND to last MESSAGE: the
end-to-end rate, the headline), receipt latency (SEND written -> RECEIPT read;
per SEND, per COMMIT in ``txn``) and end-to-end latency (SEND written ->
MESSAGE read; the body starts with the send timestamp) p50/p90/p99/p99.9/max
in ms, server CPU seconds (utime+stime from /proc/<pid>/stat; main thread and
the other threads, i.e. the log writer and executors, separately) and CPU per
message (us), client CPU seconds (getrusage), server RSS (VmRSS, RssAnon,
RssFile at start/end/max), and the load average before and after. Each
measured run follows a warm-up of ``--warmup`` messages (new connections).

    .venv/bin/python benchmarks/bench_stomp.py --quick              # all modes, a few seconds
    .venv/bin/python benchmarks/bench_stomp.py --mode pipelined     # 200,000 messages
    .venv/bin/python benchmarks/bench_stomp.py --mode slow-consumer --duration 600
    .venv/bin/python benchmarks/bench_stomp.py --mode pipelined --profile py-spy

``--profile py-spy`` runs the server under ``py-spy record`` (sampling, all
threads; needs the ``py-spy`` command, e.g. ``pip install --target /tmp/x
py-spy`` and ``--py-spy /tmp/x/bin/py-spy``) and ``--profile cprofile`` under
``python -m cProfile`` (main thread only, deterministic, slows the server);
either way the top functions by own and cumulative time go to stderr and into
the JSON (``profile``). Do not quote a profiled run's rates. ``--uvloop``
runs the client loop on uvloop, ``--server-loop asyncio|uvloop`` forces
the server's loop (default: what harbormq picks, uvloop when installed; the
JSON says which loop the server process really mapped). Progress goes to stderr, one
JSON object to stdout.

Reading the results on a shared machine: the rates need a quiet host (each
run reports the load average and ``host_cpu.busy_pct``; above ~50% busy the
server is waiting for a CPU). ``server_cpu_us_per_msg`` (and its main-thread
part: the event loop, the ceiling of one core) moves much less with load;
1e6 / main-thread us per message is the rate the server could reach with a
core to itself. Receipt latency includes the log's fdatasync, whose tail on a
shared virtual disk is milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import stomp_load
from _common import make_progress  # puts src/ on the path (harbormq is imported lazily)
from profile_stages import pyspy_samples
from stomp_load import Consumer, Producer, Run

QM_NAME = "BENCHSTOMP"
QUEUE = "BENCH.STOMP"
DEST = "/queue/" + QUEUE
SRC = Path(__file__).resolve().parents[1] / "src"
CLK_TCK = os.sysconf("SC_CLK_TCK")
progress = make_progress("bench_stomp")

MODES = ("receipt", "pipelined", "txn", "slow-consumer")
DEFAULTS = {   # mode: (producers, consumers, window, txn_size, full messages, quick messages)
    "receipt": (1, 1, 1, 0, 30_000, 3_000),
    "pipelined": (8, 8, 64, 0, 200_000, 20_000),
    "txn": (4, 4, 1, 50, 200_000, 20_000),
    "slow-consumer": (4, 1, 64, 0, 0, 0),
}
TARGETS = {"receipt": {"msgs_per_s": 2_500, "p99_receipt_ms": 2.0},
           "pipelined": {"msgs_per_s": 15_000}, "txn": {"msgs_per_s": 18_000}}


# ---------------------------------------------------------------------- /proc

def proc_cpu(pid: int) -> dict:
    """CPU seconds of a process: all (user and system), its main thread, its
    other threads (log writer, executors)."""
    def ticks(path: str) -> tuple[int, int]:
        with open(path) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]), int(fields[12])    # utime, stime (fields 14, 15)
    user, system = ticks(f"/proc/{pid}/stat")
    try:
        mu, ms = ticks(f"/proc/{pid}/task/{pid}/stat")
    except OSError:
        mu, ms = user, system
    return {"total": (user + system) / CLK_TCK, "user": user / CLK_TCK,
            "system": system / CLK_TCK, "main_thread": (mu + ms) / CLK_TCK,
            "main_thread_system": ms / CLK_TCK,
            "other_threads": (user + system - mu - ms) / CLK_TCK}


def proc_mem(pid: int) -> dict:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM", "Threads"):
                v = int(value.split()[0])
                out[key] = v if key == "Threads" else round(v / 1024, 1)
    return out


def host_cpu() -> list[int]:
    """The 'cpu' line of /proc/stat: user nice system idle iowait irq softirq steal."""
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:9]]


def host_cpu_share(a: list[int], b: list[int]) -> dict:
    """How busy the whole machine was between two readings (all processes, ours
    included), and the steal time (vCPUs not running)."""
    d = [y - x for x, y in zip(a, b, strict=True)]
    total = sum(d) or 1
    return {"busy_pct": round(100 * (total - d[3] - d[4]) / total, 1),
            "iowait_pct": round(100 * d[4] / total, 1), "steal_pct": round(100 * d[7] / total, 1)}


def loadavg() -> list[float]:
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def client_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def pct(samples: list[int], scale: float = 1e6) -> dict:
    """Percentiles of ns samples, in ms."""
    if not samples:
        return {}
    s = sorted(samples)
    n = len(s)

    def at(q: float) -> float:
        return round(s[min(n - 1, int(q * n))] / scale, 3)
    return {"n": n, "p50": at(0.50), "p90": at(0.90), "p99": at(0.99), "p999": at(0.999),
            "max": round(s[-1] / scale, 3), "mean": round(sum(s) / n / scale, 3)}


def slope_per_min(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, value) in value per minute."""
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    if sxx == 0:
        return None
    sxy = sum((p[0] - mx) * (p[1] - my) for p in points)
    return round(sxy / sxx * 60, 3)


# ---------------------------------------------------------------------- the server

class Server:
    """A queue manager in its own process under a temporary HARBORMQ_HOME."""

    def __init__(self, home: Path, profile: str | None, py_spy: str, profile_out: Path,
                 max_prefetch: int, loop: str = "default", uvloop_path: str | None = None,
                 create_options: dict | None = None):
        self.home = home
        self.loop = loop
        self.create_options = create_options or {}
        self.uvloop_path = uvloop_path    # where uvloop is when the venv lacks it
        self.profile = profile
        self.py_spy = py_spy
        self.profile_out = profile_out
        self.max_prefetch = max_prefetch
        self.proc: subprocess.Popen | None = None
        self.pid = 0
        self.port = 0
        self.qm_dir = home / "qmgrs" / QM_NAME
        self.log_path = home / "server.out"

    def create(self) -> None:
        from harbormq.config import QMConfig
        from harbormq.qmgr import lifecycle as qmgr
        qmgr.create(QM_NAME, home=self.home, port=0, **self.create_options)
        cfg = QMConfig.load(QM_NAME, home=self.home)
        cfg.stomp.max_prefetch = max(cfg.stomp.max_prefetch, self.max_prefetch)
        cfg.stomp.heartbeat_ms = 0
        cfg.save()

    def start(self) -> None:
        import importlib.util
        extra = self.uvloop_path if (self.loop == "uvloop" and
                                     importlib.util.find_spec("uvloop") is None) else None
        env = dict(os.environ, HARBORMQ_HOME=str(self.home),
                   PYTHONPATH=os.pathsep.join(filter(None, [str(SRC),
                                                            os.environ.get("PYTHONPATH"),
                                                            extra])))
        cmd = [sys.executable, "-m", "harbormq", "start", QM_NAME, "--foreground"]
        if self.loop == "uvloop":
            # the same CLI with uvloop as the policy (for code that calls asyncio.run)
            cmd = [sys.executable, "-c", "import sys, uvloop; uvloop.install(); "
                   "from harbormq.cli import main; sys.exit(main(sys.argv[1:]))",
                   "start", QM_NAME, "--foreground"]
        elif self.loop == "asyncio":
            # the same CLI with uvloop made unimportable: asyncio's own loop
            cmd = [sys.executable, "-c", "import sys; sys.modules['uvloop'] = None; "
                   "from harbormq.cli import main; sys.exit(main(sys.argv[1:]))",
                   "start", QM_NAME, "--foreground"]
        if self.profile == "cprofile":
            cmd = [sys.executable, "-m", "cProfile", "-o", str(self.profile_out),
                   "-m", "harbormq", "start", QM_NAME, "--foreground"]
        elif self.profile == "py-spy":
            cmd = [self.py_spy, "record", "--threads", "-r", "250", "-f", "raw",
                   "-o", str(self.profile_out), "--"] + cmd
        self.out = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=self.out,
                                     stderr=subprocess.STDOUT, cwd=str(self.home))
        deadline = time.monotonic() + 120
        listeners = self.qm_dir / "listeners.json"
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("the queue manager did not start: " +
                                   self.log_path.read_text(errors="replace")[-2000:])
            if listeners.exists() and (self.qm_dir / "admin.sock").exists():
                try:
                    self.port = json.loads(listeners.read_text())[0]["port"]
                    self.pid = self.admin({"cmd": "status"})["status"]["pid"]
                    break
                except (ValueError, OSError, KeyError, IndexError):
                    pass
            if time.monotonic() > deadline:
                raise RuntimeError("the queue manager did not start in 120 s")
            time.sleep(0.05)
        self.loop_detected = self.detect_loop()
        progress(f"queue manager {QM_NAME} running: pid {self.pid}, port {self.port}, "
                 f"loop {self.loop_detected}")

    def detect_loop(self) -> str:
        """uvloop when its extension is mapped into the server process."""
        try:
            with open(f"/proc/{self.pid}/maps") as f:
                return "uvloop" if "uvloop/loop" in f.read() else "asyncio"
        except OSError:
            return "unknown"

    def admin(self, request: dict, timeout: float = 30.0) -> dict:
        from harbormq.admin.client import call as admin_request
        from harbormq.config import QMConfig
        return admin_request(QMConfig.load(QM_NAME, self.home), request,
                             timeout=timeout)

    def mqsc(self, text: str) -> str:
        reply = self.admin({"cmd": "mqsc", "text": text})
        if not reply.get("ok"):
            raise RuntimeError(f"MQSC {text!r} failed: {reply}")
        return reply["output"]

    def depth(self) -> int | None:
        out = self.mqsc(f"DISPLAY QSTATUS({QUEUE}) TYPE(QUEUE) CURDEPTH")
        i = out.find("CURDEPTH(")
        return int(out[i + 9:out.index(")", i)]) if i >= 0 else None

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.kill(self.pid, signal.SIGTERM)     # controlled stop
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            progress("the queue manager did not stop in 120 s: SIGKILL")
            os.kill(self.pid, signal.SIGKILL)
            self.proc.wait()
        self.out.close()


class Sampler:
    """Server RSS and CPU every ``interval`` seconds, on the client's loop."""

    def __init__(self, pid: int, interval: float):
        self.pid = pid
        self.interval = interval
        self.samples: list[dict] = []
        self.task: asyncio.Task | None = None
        self.t0 = time.perf_counter()

    def take(self) -> dict:
        s = {"t": round(time.perf_counter() - self.t0, 2), **proc_mem(self.pid),
             "cpu": round(proc_cpu(self.pid)["total"], 2)}
        self.samples.append(s)
        return s

    async def _loop(self, on_sample=None) -> None:
        while True:
            await asyncio.sleep(self.interval)
            s = self.take()
            if on_sample:
                on_sample(s)

    def start(self, on_sample=None) -> None:
        self.take()
        self.task = asyncio.get_running_loop().create_task(self._loop(on_sample))

    async def stop(self) -> None:
        self.take()
        self.task.cancel()
        try:
            await self.task
        except asyncio.CancelledError:
            pass

    def summary(self, key: str) -> dict:
        vals = [s[key] for s in self.samples if key in s]
        if not vals:
            return {}
        return {"start": vals[0], "end": vals[-1], "max": max(vals), "min": min(vals)}


# ---------------------------------------------------------------------- one phase

def split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


async def open_conn(loop, proto) -> None:
    await loop.create_connection(lambda: proto, "127.0.0.1", proto.port)
    await asyncio.wait_for(proto.connected, 30)


async def phase(server: Server, args, mode: str, messages: int, *, ack: str,
                duration: float = 0.0, label: str = "") -> dict:
    """One run: connect consumers (subscribed), connect producers, go, wait for
    every receipt and every message, disconnect."""
    loop = asyncio.get_running_loop()
    n_prod, n_cons, window, txn_size = (args.producers or DEFAULTS[mode][0],
                                        args.consumers or DEFAULTS[mode][1],
                                        args.window or DEFAULTS[mode][2], DEFAULTS[mode][3])
    if mode == "txn" and args.txn_size:
        txn_size = args.txn_size
    slow = mode == "slow-consumer"
    if slow:
        messages = 10 ** 12      # producers run until told to stop
    run = Run(loop, messages, max_backlog=args.max_backlog if slow else 0,
              rate=args.producer_rate if slow else 0.0)
    prefetch = args.prefetch
    if txn_size:
        prefetch = max(prefetch, 2 * txn_size)
    ack_every = args.ack_every or max(1, prefetch // 2)
    sample_every = 1 if not slow else 10
    for i in range(n_cons):
        c = Consumer(run, f"c{i}", DEST, ack=ack, prefetch=prefetch, ack_every=ack_every,
                     txn_size=txn_size if mode == "txn" else 0,
                     rate=args.consumer_rate if slow else 0.0, sample_every=sample_every)
        c.port = server.port
        run.consumers.append(c)
    shares = split(messages, n_prod) if not slow else [messages] * n_prod
    for i in range(n_prod):
        p = Producer(run, f"p{i}", DEST, shares[i], args.body_size, window=window,
                     txn_size=txn_size, sample_every=sample_every)
        p.port = server.port
        run.producers.append(p)
    await asyncio.gather(*(open_conn(loop, c) for c in run.consumers + run.producers))
    await asyncio.wait_for(asyncio.gather(*(c.subscribe() for c in run.consumers)), 30)

    la0 = loadavg()
    sampler = Sampler(server.pid, args.sample_interval if slow else 1.0)
    srv0 = proc_cpu(server.pid)
    cli0 = client_cpu()
    host0 = host_cpu()
    t0 = time.perf_counter()
    run.t0 = stomp_load._now()
    last = [0, time.perf_counter()]

    def report(s: dict) -> None:
        if slow or s["t"] - last[1] >= 5:
            rate = (run.received - last[0]) / max(1e-9, time.perf_counter() - last[1])
            last[0], last[1] = run.received, time.perf_counter()
            progress(f"  {label}t={s['t']:.0f}s sent={run.sent} received={run.received} "
                     f"({rate:.0f}/s) backlog={run.sent - run.received} "
                     f"RSS={s.get('VmRSS')} MB anon={s.get('RssAnon')} MB")
    sampler.start(report)
    for p in run.producers:
        p.start()

    if slow:
        try:
            await asyncio.wait_for(asyncio.shield(run.all_received), duration)
        except asyncio.TimeoutError:
            pass
        for p in run.producers:          # stop sending; drain what is queued
            p.count = p.sent
        run.total = run.sent
        run.max_backlog = 0
        run.rate = 0.0
        t_stop = time.perf_counter()
        received_at_stop = run.received
        sampler_final = list(sampler.samples)
        # drain the backlog at full speed: the consumer stops being slow
        for c in run.consumers:
            c.rate = 0.0
            c.resume()
        if run.received >= run.total and not run.all_received.done():
            run.all_received.set_result(None)
        if run.receipted >= run.total and not run.all_receipted.done():
            run.all_receipted.set_result(None)
    await watch(run, args.stall_timeout)
    t_end = time.perf_counter()
    srv1 = proc_cpu(server.pid)
    cli1 = client_cpu()
    host1 = host_cpu()
    await sampler.stop()
    la1 = loadavg()
    for c in run.consumers:
        c.flush_acks()
    await asyncio.wait_for(asyncio.gather(*(x.disconnect() for x in
                                            run.consumers + run.producers)), 60)
    for x in run.consumers + run.producers:
        x.transport.close()
    if run.error:
        raise run.error

    total = run.total
    t_rcpt = (run.t_last_receipt - run.t0) / 1e9
    t_msg = (run.t_last_message - run.t0) / 1e9
    srv_cpu = {k: round(srv1[k] - srv0[k], 2) for k in srv0}
    res = {
        "messages": total,
        "producers": n_prod, "consumers": n_cons, "window": window,
        "txn_size": txn_size or None, "consumer_ack": ack,
        "prefetch": prefetch if ack != "auto" else None,
        "ack_every": ack_every if ack == "client" and not txn_size else None,
        "seconds": round(t_end - t0, 3),
        "send_msgs_per_s": round(total / t_rcpt, 1) if t_rcpt > 0 else None,
        "recv_msgs_per_s": round(total / t_msg, 1) if t_msg > 0 else None,
        "receipt_latency_ms": pct(run.send_lat),
        "e2e_latency_ms": pct(run.e2e_lat),
        "server_cpu_s": srv_cpu,
        "server_cpu_us_per_msg": round(srv_cpu["total"] / total * 1e6, 1) if total else None,
        "server_main_thread_us_per_msg": round(srv_cpu["main_thread"] / total * 1e6, 1)
        if total else None,
        # the event loop is one thread: the rate it could reach with a core to itself
        "main_thread_bound_msgs_per_s": round(total / srv_cpu["main_thread"])
        if srv_cpu["main_thread"] else None,
        "server_cpu_util": round(srv_cpu["total"] / (t_end - t0), 2),
        "client_cpu_s": round(cli1 - cli0, 2),
        "client_cpu_util": round((cli1 - cli0) / (t_end - t0), 2),
        "server_rss_mb": sampler.summary("VmRSS"),
        "server_rss_anon_mb": sampler.summary("RssAnon"),
        "server_rss_file_mb": sampler.summary("RssFile"),
        "loadavg_before": la0, "loadavg_after": la1,
        "host_cpu": host_cpu_share(host0, host1),
    }
    if slow:
        res["duration_s"] = round(t_stop - t0, 1)
        res["consumer_rate_target"] = args.consumer_rate
        res["max_backlog"] = args.max_backlog
        res["drain_s"] = round(t_end - t_stop, 1)
        res["send_msgs_per_s"] = round(total / (t_stop - t0), 1)
        res["received_while_slow"] = received_at_stop
        res["recv_msgs_per_s_while_slow"] = round(received_at_stop / (t_stop - t0), 1)
        res["backlog_at_stop"] = total - received_at_stop
        res.update(rss_trend(sampler_final, args.sample_interval))
        res["samples"] = [{k: s.get(k) for k in ("t", "VmRSS", "RssAnon", "RssFile", "cpu")}
                          for s in sampler_final]
    return res


def rss_trend(samples: list[dict], interval: float) -> dict:
    """RSS trend over the slow phase, skipping the first 10% (warm-up of caches)."""
    skip = max(1, len(samples) // 10)
    tail = samples[skip:]
    out = {"trend_from_s": tail[0]["t"] if tail else None}
    for key in ("VmRSS", "RssAnon", "RssFile"):
        pts = [(s["t"], s[key]) for s in tail if key in s]
        out[f"slope_{key}_mb_per_min"] = slope_per_min(pts)
    anon = [s["RssAnon"] for s in tail if "RssAnon" in s]
    rss = [s["VmRSS"] for s in tail if "VmRSS" in s]
    if anon:
        minutes = (tail[-1]["t"] - tail[0]["t"]) / 60
        growth = (out["slope_RssAnon_mb_per_min"] or 0) * minutes
        out["anon_growth_fitted_mb"] = round(growth, 1)
        out["rss_after_warmup_mb"] = {"start": rss[0], "end": rss[-1], "max": max(rss)}
        out["anon_after_warmup_mb"] = {"start": anon[0], "end": anon[-1], "max": max(anon)}
        # flat: the fitted growth of the heap over the run is under 5 MB or 5%
        out["rss_flat"] = abs(growth) < max(5.0, 0.05 * anon[0])
    return out


async def watch(run: Run, stall_timeout: float) -> None:
    """Wait for all receipts and messages; fail on no progress for stall_timeout."""
    both = asyncio.gather(run.all_received, run.all_receipted)
    last = (-1, -1)
    while True:
        try:
            await asyncio.wait_for(asyncio.shield(both), stall_timeout)
            return
        except asyncio.TimeoutError:
            now = (run.received, run.receipted)
            if now == last:
                raise RuntimeError(f"no progress for {stall_timeout} s: sent {run.sent}, "
                                   f"receipted {run.receipted}, received {run.received} "
                                   f"of {run.total}") from None
            last = now


# ---------------------------------------------------------------------- profiles

def summarize_pyspy(path: Path, top: int, seconds: float | None = None,
                    rate: int = 250) -> dict:
    """py-spy raw output (collapsed stacks 'thread;f1 (file:line);f2 ... count',
    recorded without --idle, so only samples of running threads): own and
    cumulative share of all busy samples per function, for every thread and
    for the event loop (main) thread alone; and each thread's busy share."""
    own = collections.Counter()
    cum = collections.Counter()
    own_main = collections.Counter()
    cum_main = collections.Counter()
    threads = collections.Counter()
    total = 0
    main_total = 0
    for _stack, frames, n in pyspy_samples(str(path)):
        total += n
        thread = frames[0].split(": ", 1)[-1].rstrip(")")
        threads[thread] += n
        funcs = []
        for fr in frames[1:]:
            name, _, loc = fr.partition(" (")
            file = loc.split(":")[0]
            short = "/".join(file.split("/")[-2:])
            funcs.append(f"{name} ({short})")
        if not funcs:
            continue
        main = thread == "MainThread"
        own[funcs[-1]] += n
        if main:
            main_total += n
            own_main[funcs[-1]] += n
        for fn in set(funcs):
            cum[fn] += n
            if main:
                cum_main[fn] += n

    def share(c, of):
        return [{"function": k, "pct": round(100 * v / of, 2)} for k, v in c.most_common(top)]
    out = {"tool": "py-spy record (busy samples only)", "rate_hz": rate, "samples": total,
           "threads_pct_of_busy": {k: round(100 * v / total, 2)
                                   for k, v in threads.most_common(10)} if total else {},
           "top_own": share(own, total), "top_cumulative": share(cum, total),
           "main_thread_top_own": share(own_main, main_total),
           "main_thread_top_cumulative": share(cum_main, main_total)}
    if seconds:
        out["threads_core_pct"] = {k: round(100 * v / (rate * seconds), 1)
                                   for k, v in threads.most_common(10)}
    return out


def summarize_cprofile(path: Path, top: int) -> dict:
    import pstats
    st = pstats.Stats(str(path))
    rows = []
    for (file, line, name), (_cc, nc, tt, ct, _callers) in st.stats.items():
        short = "/".join(file.split("/")[-2:])
        rows.append((tt, ct, nc, f"{name} ({short}:{line})"))
    total = st.total_tt

    def pick(idx):
        return [{"function": r[3], "own_s": round(r[0], 3), "cum_s": round(r[1], 3),
                 "calls": r[2]} for r in sorted(rows, key=lambda r: -r[idx])[:top]]
    return {"tool": "cProfile (main thread only)", "total_s": round(total, 2),
            "top_own": pick(0), "top_cumulative": pick(1)}


# ---------------------------------------------------------------------- main

async def run_all(server: Server, args, modes: list[str]) -> dict:
    results = {}
    for mode in modes:
        if mode == "slow-consumer":
            acks = [args.consumer_ack or "auto"]
        elif mode == "txn":
            acks = ["client-individual"]
        else:
            acks = (args.ack_modes.split(",") if args.ack_modes
                    else [args.consumer_ack or "client-individual"])
        for ack in acks:
            messages = args.messages or (DEFAULTS[mode][5] if args.quick else DEFAULTS[mode][4])
            if args.warmup and mode != "slow-consumer":
                progress(f"{mode} ({ack}): warm-up, {args.warmup} messages")
                await phase(server, args, mode, min(args.warmup, messages), ack=ack,
                            label="warm-up ")
            duration = args.duration or (5.0 if args.quick else 20.0)
            what = f"{duration:.0f} s" if mode == "slow-consumer" else f"{messages} messages"
            progress(f"{mode} ({ack}): {what}, loadavg {loadavg()}")
            r = await phase(server, args, mode, messages, ack=ack, duration=duration)
            depth = server.depth()
            r["queue_depth_after"] = depth
            if depth:
                r.setdefault("problems", []).append(f"queue depth {depth} after the run")
            t = TARGETS.get(mode)
            if t:
                met = r["recv_msgs_per_s"] >= t["msgs_per_s"]
                if "p99_receipt_ms" in t:
                    met = met and r["receipt_latency_ms"].get("p99", 1e9) < t["p99_receipt_ms"]
                r["target"] = t
                r["meets_target"] = met
            progress(f"  -> host busy {r['host_cpu']['busy_pct']}% (steal "
                     f"{r['host_cpu']['steal_pct']}%), server user/system "
                     f"{r['server_cpu_s']['user']}/{r['server_cpu_s']['system']} s")
            progress(f"  -> sent {r['send_msgs_per_s']}/s, received {r['recv_msgs_per_s']}/s, "
                     f"receipt p50/p99 {r['receipt_latency_ms'].get('p50')}/"
                     f"{r['receipt_latency_ms'].get('p99')} ms, server CPU "
                     f"{r['server_cpu_s']['total']} s ({r['server_cpu_us_per_msg']} us/msg), "
                     f"client CPU {r['client_cpu_s']} s, loadavg {r['loadavg_after']}")
            key = mode if len(acks) == 1 else f"{mode}:{ack}"
            results[key] = r
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", default="all", help="receipt, pipelined, txn, slow-consumer, "
                    "a comma list, or all (default)")
    ap.add_argument("--quick", action="store_true", help="small runs (a few seconds each)")
    ap.add_argument("--messages", type=int, default=None,
                    help="messages per run (full: 30,000 receipt, 200,000 pipelined/txn)")
    ap.add_argument("--duration", type=float, default=None,
                    help="slow-consumer seconds (default 20, quick 5; the target needs 600)")
    ap.add_argument("--warmup", type=int, default=None,
                    help="warm-up messages before each measured run (2000; quick 300; 0: none)")
    ap.add_argument("--body-size", type=int, default=1024)
    ap.add_argument("--producers", type=int, default=0, help="override the mode's count")
    ap.add_argument("--consumers", type=int, default=0, help="override the mode's count")
    ap.add_argument("--window", type=int, default=0, help="receipts (txn: transactions) "
                    "in flight per producer; default: the mode's")
    ap.add_argument("--txn-size", type=int, default=0, help="txn mode: SENDs/ACKs per "
                    "transaction (50)")
    ap.add_argument("--consumer-ack", default=None,
                    choices=["auto", "client", "client-individual"],
                    help="consumer ack mode (default client-individual; slow-consumer auto)")
    ap.add_argument("--ack-modes", default=None,
                    help="receipt/pipelined: comma list of ack modes to measure in turn")
    ap.add_argument("--prefetch", type=int, default=64, help="prefetch-count (64)")
    ap.add_argument("--ack-every", type=int, default=0,
                    help="ack:client: cumulative ACK every N messages (default prefetch/2)")
    ap.add_argument("--consumer-rate", type=float, default=200.0,
                    help="slow-consumer: messages/s the consumer reads (200)")
    ap.add_argument("--producer-rate", type=float, default=0.0,
                    help="slow-consumer: total producer rate limit, msgs/s (0: as fast as "
                         "they can)")
    ap.add_argument("--max-backlog", type=int, default=None,
                    help="slow-consumer: producers hold back while this many messages are "
                         "queued (500,000; quick 10,000; 0: unbounded)")
    ap.add_argument("--sample-interval", type=float, default=None,
                    help="slow-consumer: seconds between RSS samples (default 5; quick 0.5)")
    ap.add_argument("--checkpoint-records", type=int, default=0,
                    help="queue manager's checkpoint interval in log records (default: "
                         "harbormq create's, 10,000)")
    ap.add_argument("--log-file-pages", type=int, default=0,
                    help="log extent size in 4 KiB pages (default: harbormq create's, 4096)")
    ap.add_argument("--stall-timeout", type=float, default=60.0)
    ap.add_argument("--uvloop", action="store_true", help="client loop on uvloop")
    ap.add_argument("--server-loop", choices=["default", "asyncio", "uvloop"],
                    default="default",
                    help="default: whatever harbormq picks (uvloop when installed); asyncio: "
                         "uvloop hidden from the server; uvloop: installed as the policy")
    ap.add_argument("--uvloop-path", default="/tmp/hmqbench-tools",
                    help="where uvloop is installed when the venv lacks it (pip --target)")
    ap.add_argument("--profile", choices=["py-spy", "cprofile"], default=None,
                    help="profile the server process")
    ap.add_argument("--py-spy", default=shutil.which("py-spy") or "/tmp/hmqbench-tools/bin/py-spy")
    ap.add_argument("--profile-out", default=None, help="keep the raw profile here")
    ap.add_argument("--top", type=int, default=30, help="functions listed per profile table")
    ap.add_argument("--keep", action="store_true", help="keep the temporary HARBORMQ_HOME")
    args = ap.parse_args()
    if args.sample_interval is None:
        args.sample_interval = 0.5 if args.quick else 5.0
    if args.warmup is None:
        args.warmup = 300 if args.quick else 2000
    if args.max_backlog is None:
        args.max_backlog = 10_000 if args.quick else 500_000
    modes = list(MODES) if args.mode == "all" else args.mode.split(",")
    for m in modes:
        if m not in MODES:
            ap.error(f"unknown mode {m!r}")

    loop_impl = "asyncio"
    if args.uvloop:
        try:
            import uvloop
        except ImportError:
            sys.path.append(args.uvloop_path)
            import uvloop
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        loop_impl = f"uvloop {uvloop.__version__}"

    home = Path(tempfile.mkdtemp(prefix="hmq-bench-stomp-"))
    progress(f"HARBORMQ_HOME={home}")
    profile_out = Path(args.profile_out) if args.profile_out else home / (
        "server.pyspy.txt" if args.profile == "py-spy" else "server.prof")
    server = Server(home, args.profile, args.py_spy, profile_out,
                    max(args.prefetch, 2 * (args.txn_size or 50)),
                    loop=args.server_loop, uvloop_path=args.uvloop_path,
                    create_options={k: v for k, v in (
                        ("checkpoint_records", args.checkpoint_records),
                        ("log_file_pages", args.log_file_pages)) if v})
    results = {}
    error = None
    la_start = loadavg()
    try:
        server.create()
        server.start()
        server.mqsc(f"DEFINE QLOCAL({QUEUE}) MAXDEPTH(999999999) DEFPSIST(YES) REPLACE")
        rss0 = proc_mem(server.pid)
        results = asyncio.run(run_all(server, args, modes))
        rss1 = proc_mem(server.pid)
    except BaseException as exc:   # noqa: BLE001 - reported in the JSON, then re-raised
        error = exc
        rss0 = rss1 = {}
    finally:
        server.stop()
        profile = None
        if args.profile and profile_out.exists():
            try:
                profile = (summarize_pyspy if args.profile == "py-spy"
                           else summarize_cprofile)(profile_out, args.top)
                print_profile(profile)
            except Exception as exc:  # noqa: BLE001
                profile = {"error": repr(exc)}
        if args.keep:
            progress(f"kept {home}")
        else:
            shutil.rmtree(home, ignore_errors=True)
    if error is not None and not results:
        raise error
    out = {
        "benchmark": "stomp",
        "size": "quick" if args.quick else "full",
        "body_size": args.body_size, "persistent": True,
        "client_loop": loop_impl, "client_processes": 1,
        "server_loop": getattr(server, "loop_detected", None),
        "server_code": code_version(),
        "queue_manager": {"checkpoint_records": args.checkpoint_records or "default (10000)",
                          "log_file_pages": args.log_file_pages or "default (4096)",
                          "prefetch_count": args.prefetch},
        "modes": results,
        "summary": {k: {"send_msgs_per_s": v.get("send_msgs_per_s"),
                        "recv_msgs_per_s": v.get("recv_msgs_per_s"),
                        "receipt_p50_ms": v["receipt_latency_ms"].get("p50"),
                        "receipt_p99_ms": v["receipt_latency_ms"].get("p99"),
                        "meets_target": v.get("meets_target", v.get("rss_flat"))}
                    for k, v in results.items()},
        "server_rss_mb_first_last": {"start": rss0.get("VmRSS"), "end": rss1.get("VmRSS"),
                                     "peak": rss1.get("VmHWM")},
        "loadavg_at_start": la_start,
        "profile": profile,
        "error": repr(error) if error else None,
        "host": {"cpus": os.cpu_count(), "python": platform.python_version(),
                 "note": "shared 2-core machine; server and load generator on the same host"},
    }
    print(json.dumps(out, indent=2))
    if error is not None:
        sys.exit(1)


def code_version() -> dict:
    root = SRC.parent
    try:
        head = subprocess.run(["git", "-C", str(root), "log", "-1", "--format=%h %s"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "src"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {}
    return {"git_head": head[:100], "src_modified": bool(dirty)}


def print_profile(p: dict) -> None:
    progress(f"profile ({p.get('tool')}):")
    for table in ("top_own", "top_cumulative", "main_thread_top_own",
                  "main_thread_top_cumulative"):
        progress(f"  {table}:")
        for row in p.get(table, []):
            vals = ", ".join(f"{k}={v}" for k, v in row.items() if k != "function")
            progress(f"    {vals:32s} {row['function']}")
    if "threads_pct_of_busy" in p:
        progress(f"  threads (% of busy samples): {p['threads_pct_of_busy']}")


if __name__ == "__main__":
    main()
