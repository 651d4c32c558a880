#!/usr/bin/env python3
"""Request/reply over STOMP with temporary reply queues: harbormq side by side
with RabbitMQ and ActiveMQ (issue 30).

Each requester connection subscribes to ``/temp-queue/replies`` and sends
requests to ``/queue/RR.REQUESTS`` with ``reply-to:/temp-queue/replies``, one
at a time, each waiting for its reply; the responders subscribe to the
request queue (``ack:auto``) and send each reply to the ``reply-to`` they
received (harbormq: ``/queue/AMQ....``, a temporary dynamic queue;
RabbitMQ: ``/reply-queue/...``; ActiveMQ: ``/remote-temp-queue/...``).
Requests and replies are non-persistent, 256 bytes (MQ refuses persistent
messages on a temporary dynamic queue). The figures: round trips per second
over all requesters, and the round trip's p50 and p99 in milliseconds.

The brokers run as bench_peers.py starts them (a real server process each on
free loopback ports, in a scratch directory); the runs are interleaved.

    .venv/bin/python benchmarks/bench_request_reply.py
    .venv/bin/python benchmarks/bench_request_reply.py --only harbormq --requests 5000

Not part of CI. Progress to stderr, one JSON object to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import make_progress  # noqa: E402
from bench_peers import (  # noqa: E402
    BROKERS,
    ActiveMQ,
    Broker,
    HarborMQ,
    RabbitMQ,
    ensure_packages,
    loadavg,
)

progress = make_progress("bench_request_reply")
BODY = b"r" * 256
REQUESTS_QUEUE = "RR.REQUESTS"


class Conn:
    """A raw STOMP 1.2 connection (asyncio), frames without NUL in their bodies."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.r, self.w = reader, writer

    @classmethod
    async def open(cls, broker: Broker) -> "Conn":
        r, w = await asyncio.open_connection("127.0.0.1", broker.port)
        c = cls(r, w)
        c.send(b"CONNECT", {"accept-version": "1.2", "host": broker.host,
                            "heart-beat": "0,0"}, extra=broker.connect_extra)
        command, headers, _ = await c.recv()
        if command != "CONNECTED":
            raise RuntimeError(f"{broker.name}: CONNECT refused: {headers}")
        return c

    def send(self, command: bytes, headers: dict, body: bytes = b"", extra: bytes = b"") -> None:
        head = command + b"\n" + b"".join(f"{k}:{v}\n".encode() for k, v in headers.items())
        if body:
            head += b"content-length:%d\n" % len(body)
        self.w.write(head + extra + b"\n" + body + b"\0")

    async def recv(self) -> tuple[str, dict, bytes]:
        raw = (await self.r.readuntil(b"\0")).lstrip(b"\r\n")
        head, _, body = raw[:-1].partition(b"\n\n")
        lines = head.decode().split("\n")
        headers: dict = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers.setdefault(k, v.replace("\\c", ":"))
        if lines[0] == "ERROR":
            raise RuntimeError(f"ERROR: {headers.get('message')} {body[:200]!r}")
        return lines[0], headers, body

    async def close(self) -> None:
        self.w.write(b"DISCONNECT\n\n\0")
        try:
            await self.w.drain()
        finally:
            self.w.close()


async def responder(broker: Broker, stop: asyncio.Event, ready: asyncio.Event) -> int:
    c = await Conn.open(broker)
    c.send(b"SUBSCRIBE", {"destination": f"/queue/{REQUESTS_QUEUE}", "id": "req",
                          "ack": "auto"}, extra=broker.subscribe_extra)
    await c.w.drain()
    ready.set()
    served = 0
    try:
        while not stop.is_set():
            try:
                command, h, body = await asyncio.wait_for(c.recv(), 0.5)
            except asyncio.TimeoutError:
                continue
            if command != "MESSAGE":
                continue
            c.send(b"SEND", {"destination": h["reply-to"], "persistent": "false",
                             "correlation-id": h.get("correlation-id", "")}, body)
            served += 1
    finally:
        await c.close()
    return served


def request_destination(broker: Broker) -> str:
    """Where requests are sent. RabbitMQ: ``/amq/queue/``, the queue the responders'
    SUBSCRIBE declared (a SEND to ``/queue/`` with a ``/temp-queue/`` reply-to
    declares the queue again and is refused: RESOURCE_LOCKED)."""
    if isinstance(broker, RabbitMQ):
        return f"/amq/queue/{REQUESTS_QUEUE}"
    return f"/queue/{REQUESTS_QUEUE}"


async def requester(broker: Broker, n: int, latencies: list[float]) -> None:
    c = await Conn.open(broker)
    if not isinstance(broker, RabbitMQ):
        # RabbitMQ subscribes a connection to its /temp-queue/ at the SEND that names it
        # in reply-to (a SUBSCRIBE to one is refused); harbormq and ActiveMQ need one
        c.send(b"SUBSCRIBE", {"destination": "/temp-queue/replies", "id": "rep",
                              "ack": "auto"}, extra=broker.subscribe_extra)
    for i in range(n):
        t0 = time.perf_counter()
        c.send(b"SEND", {"destination": request_destination(broker), "persistent": "false",
                         "reply-to": "/temp-queue/replies", "correlation-id": str(i)}, BODY)
        while True:
            command, h, _ = await c.recv()
            if command == "MESSAGE" and h.get("correlation-id") == str(i):
                break
        latencies.append(time.perf_counter() - t0)
    await c.close()


async def one_run(broker: Broker, requesters: int, responders: int, requests: int) -> dict:
    stop, ready = asyncio.Event(), [asyncio.Event() for _ in range(responders)]
    served = [asyncio.create_task(responder(broker, stop, r)) for r in ready]
    await asyncio.gather(*(r.wait() for r in ready))
    latencies: list[float] = []
    t0 = time.perf_counter()
    await asyncio.gather(*(requester(broker, requests // requesters, latencies)
                           for _ in range(requesters)))
    elapsed = time.perf_counter() - t0
    stop.set()
    await asyncio.gather(*served)
    latencies.sort()
    return {"round_trips": len(latencies), "seconds": round(elapsed, 3),
            "round_trips_per_s": round(len(latencies) / elapsed, 1),
            "p50_ms": round(1000 * latencies[len(latencies) // 2], 3),
            "p99_ms": round(1000 * latencies[min(len(latencies) - 1,
                                                 int(len(latencies) * 0.99))], 3)}


async def bench(brokers: list[Broker], args) -> dict:
    results: dict = {b.name: {"version": b.version, "runs": []} for b in brokers}
    for b in brokers:
        progress(f"{b.name}: starting")
        await b.start()
        await b.prepare(REQUESTS_QUEUE)
        if isinstance(b, HarborMQ):      # requests are not persistent (the queue's default)
            b.mqsc(f"ALTER QLOCAL({REQUESTS_QUEUE}) DEFPSIST(NO)")
        await one_run(b, args.requesters, args.responders, max(100, args.requests // 10))
    for run in range(args.runs):
        for b in brokers:                # interleaved: shared-machine load falls on all
            r = await one_run(b, args.requesters, args.responders, args.requests)
            progress(f"{b.name} run {run + 1}: {r}")
            results[b.name]["runs"].append(r)
    for res in results.values():
        runs = res["runs"]
        res["median"] = {k: statistics.median(r[k] for r in runs)
                         for k in ("round_trips_per_s", "p50_ms", "p99_ms")}
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=",".join(BROKERS))
    ap.add_argument("--requesters", type=int, default=4)
    ap.add_argument("--responders", type=int, default=2)
    ap.add_argument("--requests", type=int, default=4000, help="round trips per run, in all")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-install", action="store_true")
    args = ap.parse_args()
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    if not args.no_install:
        ensure_packages(names)
    scratch = Path(tempfile.mkdtemp(prefix="hmq-bench-rr-"))
    started: list[Broker] = []
    la = loadavg()
    try:
        for name in names:
            b = {"harbormq": HarborMQ, "rabbitmq": RabbitMQ, "activemq": ActiveMQ}[name](scratch)
            started.append(b)
            if isinstance(b, HarborMQ):
                b.create()
        results = asyncio.run(bench(started, args))
    finally:
        for b in started:
            b.stop()
            b.cleanup()
        shutil.rmtree(scratch, ignore_errors=True)
    print(json.dumps({"benchmark": "request_reply", "body_size": len(BODY),
                      "persistent": False, "requesters": args.requesters,
                      "responders": args.responders, "requests_per_run": args.requests,
                      "runs": args.runs, "brokers": results, "loadavg_at_start": la,
                      "loadavg_at_end": loadavg(), "cpus": os.cpu_count()}, indent=2))


if __name__ == "__main__":
    main()
