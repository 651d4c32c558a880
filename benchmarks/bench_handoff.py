#!/usr/bin/env python3
"""What handing work to a second core costs, against doing it on the event loop.

Issue 34 asks the server to use the second core. Python threads share one
GIL, so only a separate process (or C code that releases the GIL) runs beside
the event loop; what it takes off the loop must cost the loop less to receive
than to do. This benchmark measures both sides, in one process and a helper,
with no server, so the figures do not depend on the queue manager:

* ``parse``: the loop parses a stream of persistent 1 KiB SENDs itself
  (``FrameParser``, as a STOMP connection does): loop CPU per frame.
* ``frontend``: a front-end process parses the same stream and hands each
  frame to the loop as a compact operation, ``(command, headers, body)``
  marshalled, in batches over a pipe (Redis 6's I/O threads, as a process):
  loop CPU per frame to read and unmarshal it, and the front end's CPU.
  ``marshal_loads`` is the unmarshalling alone.
* ``wakeup``: a thread woken from an asyncio loop and answering back through
  ``call_soon_threadsafe``, as the log writer is for every force: loop CPU
  and round trip per hand-off, woken by ``threading.Condition`` (what the
  writer used) and by an ``eventfd`` (one syscall, no Python lock: what it
  uses now), each with the loop idle and with the loop busy (a Python spin of
  ``--busy-us`` after each wake-up, holding the GIL the woken thread needs).

CPU is ``time.thread_time`` of the loop's thread (the front end's: its own
process's). Median of ``--rounds`` (5) rounds. Progress to stderr, one JSON
object to stdout.

    .venv/bin/python benchmarks/bench_handoff.py
    .venv/bin/python benchmarks/bench_handoff.py --frames 200000 --rounds 7
"""

from __future__ import annotations

import argparse
import asyncio
import json
import marshal
import multiprocessing
import os
import statistics
import threading
import time

from _common import make_progress

from harbormq.stomp.frames import FrameParser, Limits

progress = make_progress("bench_handoff")

BATCH = 64          # frames per pipe message in the front-end route


def send_stream(count: int, body_size: int) -> bytes:
    body = b"x" * body_size
    frame = (b"SEND\ndestination:/queue/BENCH\npersistent:true\nreceipt:r-%d\n"
             b"content-length:" + str(body_size).encode() + b"\n\n" + body + b"\x00")
    return b"".join(frame.replace(b"%d", str(i).encode()) for i in range(count))


def chunks(stream: bytes, size: int = 64 * 1024):
    for i in range(0, len(stream), size):
        yield stream[i:i + size]


def parse_on_loop(stream: bytes) -> tuple[float, int]:
    """Loop CPU to parse the stream as a connection does (push, next_frame)."""
    parser = FrameParser(Limits())
    parser.version = "1.2"
    frames = 0
    start = time.thread_time()
    for data in chunks(stream):
        parser.push(data)
        while (frame := parser.next_frame()) is not None:
            frames += 1
            _ = frame.headers.get("receipt")
    return time.thread_time() - start, frames


def _frontend(stream: bytes, conn) -> None:
    """The front-end process: parse, hand over compact operations in batches."""
    parser = FrameParser(Limits())
    parser.version = "1.2"
    start = time.process_time()
    batch = []
    for data in chunks(stream):
        parser.push(data)
        while (frame := parser.next_frame()) is not None:
            batch.append((frame.command, frame.headers, frame.body))
            if len(batch) == BATCH:
                conn.send_bytes(marshal.dumps(batch))
                batch = []
    if batch:
        conn.send_bytes(marshal.dumps(batch))
    conn.send_bytes(marshal.dumps(time.process_time() - start))
    conn.close()


def frontend_route(stream: bytes, frames: int) -> tuple[float, float]:
    """(loop CPU, front-end CPU) for the stream parsed in a front-end process."""
    ctx = multiprocessing.get_context("fork")
    ours, theirs = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_frontend, args=(stream, theirs))
    child.start()
    theirs.close()
    got = 0
    start = time.thread_time()
    while got < frames:
        for _command, headers, _body in marshal.loads(ours.recv_bytes()):
            got += 1
            _ = headers.get("receipt")
    loop_cpu = time.thread_time() - start
    frontend_cpu = marshal.loads(ours.recv_bytes())
    child.join()
    return loop_cpu, frontend_cpu


def marshal_loads(stream: bytes) -> float:
    parser = FrameParser(Limits())
    parser.version = "1.2"
    ops = []
    for data in chunks(stream):
        parser.push(data)
        while (frame := parser.next_frame()) is not None:
            ops.append((frame.command, frame.headers, frame.body))
    blobs = [marshal.dumps(ops[i:i + BATCH]) for i in range(0, len(ops), BATCH)]
    start = time.thread_time()
    for blob in blobs:
        marshal.loads(blob)
    return (time.thread_time() - start) / len(ops)


class Waker:
    """A thread woken by the loop that answers through call_soon_threadsafe."""

    def __init__(self, loop: asyncio.AbstractEventLoop, kind: str):
        self.loop, self.kind = loop, kind
        self.cond = threading.Condition()
        self.asked = 0
        self.stopping = False
        self.efd = os.eventfd(0) if kind == "eventfd" else None
        self.answer = None
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def wake(self) -> None:
        if self.efd is not None:
            os.eventfd_write(self.efd, 1)
            return
        with self.cond:
            self.asked += 1
            self.cond.notify()

    def run(self) -> None:
        while True:
            if self.efd is not None:
                os.eventfd_read(self.efd)
            else:
                with self.cond:
                    while not self.asked and not self.stopping:
                        self.cond.wait()
                    self.asked = 0
            if self.stopping:
                return
            self.loop.call_soon_threadsafe(self.answer)

    def stop(self) -> None:
        self.stopping = True
        self.wake()
        self.thread.join()
        if self.efd is not None:
            os.close(self.efd)


def spin(us: float) -> None:
    end = time.perf_counter() + us / 1e6
    while time.perf_counter() < end:
        pass


async def wakeups(kind: str, count: int, busy_us: float) -> tuple[float, float]:
    """(loop CPU per hand-off, median round trip) in µs; with ``busy_us`` the
    loop works on for that long after each wake-up, as a loop turn does after
    it asks for a force (the round trip includes it)."""
    loop = asyncio.get_running_loop()
    waker = Waker(loop, kind)
    trips = []
    done = asyncio.Event()
    state = {"n": 0, "t": 0.0}

    def answered() -> None:
        trips.append(time.perf_counter() - state["t"])
        state["n"] += 1
        if state["n"] == count:
            done.set()
            return
        state["t"] = time.perf_counter()
        waker.wake()
        if busy_us:
            spin(busy_us)         # the rest of the loop's turn, holding the GIL

    waker.answer = answered
    start = time.thread_time()
    state["t"] = time.perf_counter()
    waker.wake()
    await done.wait()
    cpu = time.thread_time() - start
    waker.stop()
    spun = count * busy_us / 1e6 if busy_us else 0.0
    return (cpu - spun) / count * 1e6, statistics.median(trips) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=50_000, help="SENDs per round (50,000)")
    ap.add_argument("--body-size", type=int, default=1024)
    ap.add_argument("--wakeups", type=int, default=5_000, help="hand-offs per round (5,000)")
    ap.add_argument("--busy-us", type=float, default=50.0,
                    help="the loop's work between hand-offs in the busy case (50 µs)")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    stream = send_stream(args.frames, args.body_size)
    rows: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        rows.setdefault(key, []).append(value)

    for r in range(args.rounds):
        progress(f"round {r + 1} of {args.rounds}, load average {os.getloadavg()[0]:.2f}")
        cpu, frames = parse_on_loop(stream)
        add("parse_on_loop_us_per_frame", cpu / frames * 1e6)
        loop_cpu, frontend_cpu = frontend_route(stream, frames)
        add("frontend_loop_us_per_frame", loop_cpu / frames * 1e6)
        add("frontend_process_us_per_frame", frontend_cpu / frames * 1e6)
        add("marshal_loads_us_per_frame", marshal_loads(stream) * 1e6)
        for kind in ("condition", "eventfd"):
            for busy in (0.0, args.busy_us):
                cpu_us, trip_us = asyncio.run(wakeups(kind, args.wakeups, busy))
                label = f"{kind}_{'busy' if busy else 'idle'}"
                add(f"wakeup_{label}_loop_cpu_us", cpu_us)
                add(f"wakeup_{label}_round_trip_us", trip_us)
    result = {
        "benchmark": "handoff",
        "frames": args.frames, "body_size": args.body_size, "wakeups": args.wakeups,
        "busy_us": args.busy_us, "rounds": args.rounds, "batch": BATCH,
        "loadavg_at_end": os.getloadavg(),
        "median": {k: round(statistics.median(v), 2) for k, v in rows.items()},
        "all": {k: [round(x, 2) for x in v] for k, v in rows.items()},
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
