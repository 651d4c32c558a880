#!/usr/bin/env python3
"""A channel's throughput and latency: two queue manager processes on this
machine, a sender channel QMA -> QMB, persistent 1 KiB messages.

Producers send to a remote queue on QMA (receipted, pipelined); consumers on
QMB take the messages off the target queue (an ACK each). Two phases:

* throughput: BATCHSZ 50 (--batchsz), --messages messages, 4 producers with a
  window of 64 and 2 consumers: messages/s end to end (first SEND to last
  MESSAGE on QMB);
* latency: BATCHSZ 1, one producer with a window of 1: SEND written on QMA to
  MESSAGE parsed on QMB, p50/p99 in ms;
* drain (the channel alone): with the sender stopped, the producers fill the
  transmission queue with --drain-messages; then START CHANNEL, and the time
  until all of them are on QMB's queue (DISPLAY QLOCAL CURDEPTH polled every
  50 ms): the channel's own rate, with no STOMP traffic beside it, and the
  CPU time each queue manager's process spent per message meanwhile.

Every phase also reports the CPU per message of each process and the mean
batch the sender sent (DISPLAY CHSTATUS MSGS / BATCHES); ``--profile DIR``
records both processes with py-spy (collapsed stacks) during the throughput
and drain phases. Prints one JSON object on stdout; progress on stderr.

    .venv/bin/python benchmarks/bench_channel.py                 # 20,000 messages
    .venv/bin/python benchmarks/bench_channel.py --messages 100000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (src path)
import stomp_load
from _common import make_progress
from stomp_load import Consumer, Producer, Run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.stomp_helpers import QMServer  # noqa: E402  (the tests' process helper)

progress = make_progress("bench_channel")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pair(root: Path, batchsz: int) -> tuple[QMServer, QMServer]:
    a = QMServer(root / "a", "QMA").create(log_file_pages=4096)
    b = QMServer(root / "b", "QMB").create(log_file_pages=4096)
    port = free_port()
    a.start()
    b.start()
    b.sc(f"DEFINE LISTENER(L1) PORT({port}) CONTROL(QMGR)\nSTART LISTENER(L1)\n"
         "DEFINE CHANNEL(QMA.TO.QMB) CHLTYPE(RCVR)\n"
         "DEFINE QLOCAL(IN) DEFPSIST(YES) MAXDEPTH(999999999)")
    a.sc("DEFINE QLOCAL(QMB) USAGE(XMITQ) DEFPSIST(YES) MAXDEPTH(999999999)\n"
         "DEFINE QREMOTE(TO.B) RNAME(IN) RQMNAME(QMB) DEFPSIST(YES)\n"
         f"DEFINE CHANNEL(QMA.TO.QMB) CHLTYPE(SDR) CONNAME('127.0.0.1({port})') XMITQ(QMB) "
         f"BATCHSZ({batchsz}) SHORTTMR(1)")
    return a, b


async def open_conn(loop, proto, port: int) -> None:
    await loop.create_connection(lambda: proto, "127.0.0.1", port)
    await asyncio.wait_for(proto.connected, 30)


async def phase(a: QMServer, b: QMServer, messages: int, producers: int, window: int,
                consumers: int, profile: Path | None = None) -> dict:
    loop = asyncio.get_running_loop()
    run = Run(loop, messages)
    for i in range(consumers):
        c = Consumer(run, f"c{i}", "/queue/IN", ack="client-individual", prefetch=64,
                     ack_every=32)
        run.consumers.append(c)
        await open_conn(loop, c, b.port)
    for i, share in enumerate([messages // producers + (i < messages % producers)
                               for i in range(producers)]):
        p = Producer(run, f"p{i}", "/queue/TO.B", share, 1024, window=window)
        run.producers.append(p)
        await open_conn(loop, p, a.port)
    await asyncio.wait_for(asyncio.gather(*(c.subscribe() for c in run.consumers)), 30)
    spies = start_profiles(a, b, profile)
    cpu0 = cpu_seconds(a), cpu_seconds(b)
    t0 = time.perf_counter()
    run.t0 = stomp_load._now()
    for p in run.producers:
        p.start()
    last = time.perf_counter()
    while not run.all_received.done():
        await asyncio.sleep(0.5)
        if run.error is not None:
            raise run.error
        if time.perf_counter() - last >= 5:
            last = time.perf_counter()
            progress(f"  sent={run.sent} receipted={run.receipted} received={run.received}")
    seconds = time.perf_counter() - t0
    cpu = cpu_seconds(a) - cpu0[0], cpu_seconds(b) - cpu0[1]
    stop_profiles(spies)
    for proto in run.producers + run.consumers:
        await proto.disconnect()
    lat = sorted(run.e2e_lat)
    pick = (lambda q: round(lat[min(len(lat) - 1, int(q * len(lat)))] / 1e6, 2)) if lat \
        else (lambda q: None)
    return {"messages": messages, "seconds": round(seconds, 2),
            "msgs_per_s": round(messages / seconds), "e2e_ms": {
                "p50": pick(0.5), "p99": pick(0.99), "max": pick(1.0)},
            # (STOMP puts on QMA and deliveries on QMB included)
            "cpu_us_per_msg": {"sender_qm": round(cpu[0] / messages * 1e6),
                               "receiver_qm": round(cpu[1] / messages * 1e6)}}


def mean_batch(a: QMServer) -> float | None:
    """Messages per batch the sender sent (DISPLAY CHSTATUS MSGS / BATCHES)."""
    status = a.sc("DISPLAY CHSTATUS(QMA.TO.QMB) MSGS BATCHES")
    msgs, batches = (re.search(rf"{k}\((\d+)\)", status) for k in ("MSGS", "BATCHES"))
    if not msgs or not batches or not int(batches.group(1)):
        return None
    return round(int(msgs.group(1)) / int(batches.group(1)), 1)


def cpu_seconds(srv: QMServer) -> float:
    """User + system CPU time of a queue manager's process so far."""
    fields = Path(f"/proc/{srv.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_profiles(a: QMServer, b: QMServer, out: Path | None) -> list:
    """py-spy on both queue manager processes (collapsed stacks, for
    ``--profile``): where each side's CPU goes during the drain."""
    if out is None:
        return []
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    out.mkdir(parents=True, exist_ok=True)
    return [subprocess.Popen([spy, "record", "--pid", str(srv.proc.pid), "--rate", "250",
                              "--format", "raw", "--nonblocking", "-o",
                              str(out / f"{side}.txt")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for side, srv in (("sender", a), ("receiver", b))]


def stop_profiles(spies: list) -> None:
    for spy in spies:
        spy.send_signal(signal.SIGINT)
    for spy in spies:
        spy.wait(60)


async def drain_phase(a: QMServer, b: QMServer, messages: int,
                      profile: Path | None = None) -> dict:
    loop = asyncio.get_running_loop()
    a.sc("STOP CHANNEL(QMA.TO.QMB)")
    run = Run(loop, messages)
    for i, share in enumerate([messages // 4 + (i < messages % 4) for i in range(4)]):
        p = Producer(run, f"p{i}", "/queue/TO.B", share, 1024, window=64)
        run.producers.append(p)
        await open_conn(loop, p, a.port)
    for p in run.producers:
        p.start()
    await asyncio.wait_for(run.all_receipted, 600)
    for p in run.producers:
        await p.disconnect()
    spies = start_profiles(a, b, profile)
    cpu0 = cpu_seconds(a), cpu_seconds(b)
    t0 = time.perf_counter()
    a.sc("START CHANNEL(QMA.TO.QMB)")
    want = f"CURDEPTH({messages})"
    while want not in b.sc("DISPLAY QLOCAL(IN) CURDEPTH"):
        await asyncio.sleep(0.05)
        if time.perf_counter() - t0 > 600:
            raise RuntimeError("the channel did not drain in 600 s")
    seconds = time.perf_counter() - t0
    cpu = cpu_seconds(a) - cpu0[0], cpu_seconds(b) - cpu0[1]
    stop_profiles(spies)
    # CPU per message is steadier than the rate on a machine others load too
    return {"messages": messages, "seconds": round(seconds, 2),
            "msgs_per_s": round(messages / seconds),
            "cpu_us_per_msg": {"sender_qm": round(cpu[0] / messages * 1e6),
                               "receiver_qm": round(cpu[1] / messages * 1e6)}}


async def main_async(args) -> dict:
    root = Path(tempfile.mkdtemp(prefix="bench-channel-"))
    out = {"benchmark": "channel", "machine": {
        "cpus": os.cpu_count(), "python": platform.python_version(),
        "loadavg_start": [round(x, 1) for x in os.getloadavg()]}}
    phases = {
        "throughput": (args.batchsz, f"{args.messages} messages, BATCHSZ {args.batchsz}",
                       lambda a, b: phase(a, b, args.messages, 4, 64, 2,
                                          args.profile and args.profile / "throughput")),
        "drain": (args.batchsz, f"{args.drain_messages} messages preloaded, BATCHSZ "
                  f"{args.batchsz}",
                  lambda a, b: drain_phase(a, b, args.drain_messages,
                                           args.profile and args.profile / "drain")),
        "latency": (1, f"{args.latency_messages} messages one at a time, BATCHSZ 1",
                    lambda a, b: phase(a, b, args.latency_messages, 1, 1, 1)),
    }
    try:
        for name, (batchsz, what, run) in phases.items():
            if args.only and name != args.only:
                continue
            a, b = pair(root / name, batchsz)
            try:
                progress(f"{name}: {what}")
                out[name] = await run(a, b) | {"batchsz": batchsz,
                                               "mean_batch": mean_batch(a)}
            finally:
                a.stop()
                b.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    out["machine"]["loadavg_end"] = [round(x, 1) for x in os.getloadavg()]
    out["target_msgs_per_s"] = 10_000
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--latency-messages", type=int, default=500)
    ap.add_argument("--batchsz", type=int, default=50)
    ap.add_argument("--drain-messages", type=int, default=20_000)
    ap.add_argument("--only", choices=("throughput", "drain", "latency"),
                    help="run one phase only")
    ap.add_argument("--profile", type=Path, metavar="DIR",
                    help="record both processes with py-spy during the throughput "
                    "and drain phases: DIR/PHASE/sender.txt and DIR/PHASE/receiver.txt "
                    "(collapsed stacks)")
    args = ap.parse_args()
    print(json.dumps(asyncio.run(main_async(args)), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
