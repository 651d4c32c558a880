#!/usr/bin/env python3
"""Selection cost: a queue of ``--messages`` (100,000) where 1 % match a
SUBSCRIBE ``selector``, drained of its matches over STOMP (issue 31).

The broker runs as its own process on loopback (harbormq as bench_peers
starts it: ``harbormq start --foreground`` from this checkout's src/, a
circular log on the defaults; ActiveMQ 5.17 from Debian with KahaDB in a
scratch directory, if ``--brokers`` names it and it is installed). One
producer fills the queue with persistent messages of ``--body-size`` (100)
bytes, each with user headers ``n`` (its number) and ``kind`` (``rare`` for
every hundredth, ``common`` otherwise), pipelined, the last SEND receipted.
Then one consumer subscribes with ``--selector`` (``kind = 'rare'``;
``client-individual``, prefetch 100, an ACK per MESSAGE) and the clock runs
from SUBSCRIBE to the last match received: ``matched_msgs_per_s`` (messages
delivered per second, the headline) and ``scanned_msgs_per_s`` (queue
messages judged per second). The non-matching 99 % stay on the queue; the
figures of ``--runs`` (3) runs, each on a fresh queue, and their median. A
broker that delivers no match for ``--stall-s`` (60) seconds is reported as
stalled, with what it had delivered by then.

``evaluation`` is the selector alone, in this process, without a queue:
``Selector.matches`` per second on the same messages' properties, for the
selector given and for a larger one (``COMPLEX``).

    .venv/bin/python benchmarks/bench_selectors.py                    # harbormq
    .venv/bin/python benchmarks/bench_selectors.py --brokers harbormq,activemq
    .venv/bin/python benchmarks/bench_selectors.py --messages 10000 --runs 1   # quick

Progress to stderr, one JSON object to stdout. Not part of CI.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from _common import make_progress  # noqa: E402
from bench_peers import ActiveMQ, HarborMQ, deb_version  # noqa: E402
from bench_stomp import loadavg  # noqa: E402

progress = make_progress("bench_selectors")
PREFETCH = 100
COMPLEX = ("(kind = 'rare' OR kind LIKE 'r%e') AND n BETWEEN 0 AND 1000000 AND "
           "JMSPriority >= 0 AND region IS NULL AND n * 2 <> 7")


def evaluation(selector: str, n: int) -> dict:
    """Selector.matches per second over ``n`` messages (properties as STOMP sets them)."""
    from harbormq.core.selectors import compile_selector
    from harbormq.log.records import Message
    msgs = [Message(body=b"", priority=4,
                    properties={"n": str(i), "kind": "rare" if i % 100 == 50 else "common"})
            for i in range(n)]
    out = {}
    for name, text in (("given", selector), ("complex", COMPLEX)):
        sel = compile_selector(text)
        t0 = time.perf_counter()
        matched = sum(map(sel.matches, msgs))
        elapsed = time.perf_counter() - t0
        out[name] = {"selector": text, "matched": matched,
                     "evaluations_per_s": round(n / elapsed),
                     "us_per_evaluation": round(elapsed / n * 1e6, 2)}
    return out


async def _read_frame(r: asyncio.StreamReader) -> tuple[str, dict, bytes]:
    raw = await r.readuntil(b"\0")
    head, _, body = raw[:-1].lstrip(b"\r\n").partition(b"\n\n")
    lines = head.decode().split("\n")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers.setdefault(k, v)
    return lines[0], headers, body


async def _connect(broker) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    r, w = await asyncio.open_connection("127.0.0.1", broker.port, limit=1 << 22)
    w.write(b"CONNECT\naccept-version:1.2\nhost:" + broker.host.encode() +
            b"\nheart-beat:0,0\n" + broker.connect_extra + b"\n\0")
    command, headers, body = await _read_frame(r)
    if command != "CONNECTED":
        raise RuntimeError(f"{broker.name}: {command} {headers} {body[:200]!r}")
    return r, w


async def fill(broker, queue: str, n: int, body_size: int, every: int) -> float:
    """Seconds to queue ``n`` messages (every ``every``-th one rare)."""
    r, w = await _connect(broker)
    body = b"x" * body_size
    t0 = time.perf_counter()
    dest = f"/queue/{queue}".encode()
    for i in range(n):
        kind = b"rare" if i % every == every // 2 else b"common"
        receipt = b"receipt:filled\n" if i == n - 1 else b""
        w.write(b"SEND\ndestination:" + dest + b"\npersistent:true\nn:%d\nkind:%s\n%s"
                b"content-length:%d\n\n" % (i, kind, receipt, len(body)) + body + b"\0")
        if i % 1000 == 999:
            await w.drain()
    await w.drain()
    while True:
        command, headers, body_ = await _read_frame(r)
        if command == "RECEIPT" and headers.get("receipt-id") == "filled":
            break
        if command == "ERROR":
            raise RuntimeError(f"{broker.name}: {headers} {body_[:200]!r}")
    w.write(b"DISCONNECT\n\n\0")
    w.close()
    return time.perf_counter() - t0


async def drain_matches(broker, queue: str, selector: str, expected: int,
                        stall_s: float) -> tuple[float, int]:
    """(seconds from SUBSCRIBE to the last matching MESSAGE, matches received):
    all ``expected``, or fewer when none came for ``stall_s``."""
    r, w = await _connect(broker)
    t0 = time.perf_counter()
    w.write(b"SUBSCRIBE\ndestination:/queue/" + queue.encode() + b"\nid:sel\n"
            b"ack:client-individual\nprefetch-count:%d\n" % PREFETCH +
            broker.subscribe_extra + b"selector:" + selector.encode() + b"\n\n\0")
    got = 0
    last = t0
    while got < expected:
        try:
            command, headers, body = await asyncio.wait_for(_read_frame(r), stall_s)
        except TimeoutError:
            progress(f"{broker.name}: stalled after {got} of {expected} matches")
            break
        if command == "ERROR":
            raise RuntimeError(f"{broker.name}: {headers} {body[:200]!r}")
        if command != "MESSAGE":
            continue
        if headers.get("kind") != "rare":
            raise RuntimeError(f"{broker.name}: a message the selector does not select: "
                               f"{headers}")
        got += 1
        last = time.perf_counter()
        w.write(b"ACK\nid:" + (headers.get("ack") or headers["message-id"]).encode() +
                b"\nmessage-id:" + headers["message-id"].encode() +
                b"\nsubscription:sel\n\n\0")
    w.write(b"DISCONNECT\n\n\0")
    w.close()
    return last - t0, got


async def bench(broker, args) -> dict:
    runs = []
    expected = args.messages // 100
    for i in range(args.runs):
        queue = f"SEL.BENCH.{i}"
        try:
            await broker.prepare(queue)
            fill_s = await fill(broker, queue, args.messages, args.body_size, 100)
            drain_s, got = await drain_matches(broker, queue, args.selector, expected,
                                               args.stall_s)
        except (OSError, RuntimeError, asyncio.IncompleteReadError) as exc:
            # (ActiveMQ closed a producer's connection once, filling its third queue)
            progress(f"{broker.name} run {i + 1} failed: {exc!r}")
            runs.append({"error": repr(exc), "stalled": True, "matched_msgs_per_s": 0.0,
                         "scanned_msgs_per_s": None})
            continue
        run = {"fill_s": round(fill_s, 2), "drain_s": round(drain_s, 3),
               "matched": got, "stalled": got < expected,
               "matched_msgs_per_s": round(got / drain_s, 1) if drain_s else 0.0,
               "scanned_msgs_per_s": round(args.messages / drain_s, 1)
               if drain_s and got == expected else None,
               "loadavg": loadavg()}
        progress(f"{broker.name} run {i + 1}: {run}")
        runs.append(run)
    return {"version": broker.version, "runs": runs,
            "median_matched_msgs_per_s":
                statistics.median(r["matched_msgs_per_s"] for r in runs),
            "median_scanned_msgs_per_s":
                statistics.median(r["scanned_msgs_per_s"] or 0.0 for r in runs),
            "stalled_runs": sum(r["stalled"] for r in runs)}


async def main_async(args) -> dict:
    scratch = Path(tempfile.mkdtemp(prefix="hmq-bench-sel-"))
    results = {"messages": args.messages, "match_fraction": 0.01, "selector": args.selector,
               "body_size": args.body_size, "prefetch": PREFETCH,
               "evaluation": evaluation(args.selector, args.messages), "brokers": {}}
    try:
        for name in args.brokers.split(","):
            if name == "activemq" and not deb_version("activemq"):
                progress("activemq is not installed: skipped")
                continue
            broker = {"harbormq": HarborMQ, "activemq": ActiveMQ}[name](scratch)
            if isinstance(broker, HarborMQ):
                await asyncio.to_thread(broker.create)    # it runs a loop of its own
            try:
                started = await broker.start()
                progress(f"{name} started in {started:.1f} s on port {broker.port}")
                results["brokers"][name] = await bench(broker, args)
            finally:
                broker.stop()
                broker.cleanup()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--brokers", default="harbormq", help="harbormq,activemq")
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--body-size", type=int, default=100)
    ap.add_argument("--selector", default="kind = 'rare'")
    ap.add_argument("--stall-s", type=float, default=60.0)
    args = ap.parse_args()
    print(json.dumps(asyncio.run(main_async(args)), indent=1))


if __name__ == "__main__":
    main()
