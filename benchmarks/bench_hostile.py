#!/usr/bin/env python3
"""Server memory under hostile and bursty STOMP clients (issue 31).

Two workloads against a queue manager process on the defaults, its RSS read
from /proc (VmRSS and RssAnon, the heap without file-backed pages):

1. ``flood``: --floods clients (default 8) pipeline persistent SENDs with
   receipts and never read anything, for --flood-seconds; meanwhile another
   client sends persistent SENDs with receipts one at a time. Reported: the
   server's RSS before, at the end and --settle seconds after the floods
   closed, how much each flood got to write, and the bystander's receipt
   times.
2. ``burst``: --messages (default 200,000) persistent 1 KiB SENDs from 8
   pipelining producers (window 64, receipts), then one ``ack:auto`` consumer
   drains the queue; then the server idles for --settle seconds. Reported:
   RSS at the start, at the burst's peak, when drained and after settling
   (the memory return of stomp/memory.py runs every 5 s).

``--src DIR`` runs the server from another checkout's ``src`` (e.g. the
main branch's, for a before/after figure). Prints one JSON object on stdout.

    .venv/bin/python benchmarks/bench_hostile.py [--only flood|burst] [--src DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _common import make_progress  # noqa: I001

progress = make_progress("bench_hostile")
QM = "HOSTILE"


def frame(command: str, headers: dict, body: bytes = b"") -> bytes:
    lines = [command, *(f"{k}:{v}" for k, v in headers.items())]
    if body:
        lines.append(f"content-length:{len(body)}")
    return ("\n".join(lines) + "\n\n").encode() + body + b"\0"


class Server:
    def __init__(self, home: Path, src: str | None):
        self.home = home
        self.env = dict(os.environ, HARBORMQ_HOME=str(home))
        if src:
            self.env["PYTHONPATH"] = src
        self.proc: subprocess.Popen | None = None
        self.port = 0

    def cli(self, *args: str, input: str | None = None) -> str:
        r = subprocess.run([sys.executable, "-m", "harbormq", *args], env=self.env,
                           input=input, capture_output=True, text=True, check=True)
        return r.stdout

    def start(self) -> None:
        self.cli("create", QM, "--port", "0")
        log = open(self.home / "console.log", "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "harbormq", "start", QM,
                                      "--foreground"], env=self.env, stdout=log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        listeners = self.home / "qmgrs" / QM / "listeners.json"
        end = time.monotonic() + 120
        while not listeners.exists():
            if time.monotonic() > end or self.proc.poll() is not None:
                raise SystemExit("the queue manager did not start")
            time.sleep(0.05)
        time.sleep(0.5)
        self.port = json.loads(listeners.read_text())[0]["port"]

    def mqsc(self, text: str) -> str:
        return self.cli("sc", QM, "-c", text)

    def memory(self) -> dict:
        out = {}
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "RssAnon", "VmHWM"):
                    out[key] = round(int(value.split()[0]) / 1024, 1)
        return out

    def memory_returns(self) -> list[str]:
        """The operator log's reports of memory returned after a burst."""
        log = self.home / "qmgrs" / QM / "errors" / "HMQERR01.LOG"
        return [line.split(" ", 1)[1] for line in log.read_text().splitlines()
                if "HMQ9561I" in line]

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def connect(port: int, rcvbuf: int | None = None) -> socket.socket:
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect(("127.0.0.1", port))
    s.sendall(frame("CONNECT", {"accept-version": "1.2", "host": "h", "heart-beat": "0,0"}))
    data = b""
    while b"\0" not in data:
        data += s.recv(4096)
    assert data.startswith(b"CONNECTED"), data[:200]
    return s


def read_frames(s: socket.socket, n: int, timeout: float = 300) -> None:
    """Read until ``n`` frames (NULs) have arrived (bodies hold no NUL)."""
    s.settimeout(timeout)
    got = 0
    while got < n:
        data = s.recv(1 << 18)
        if not data:
            raise SystemExit("connection closed by the server")
        if b"ERROR" in data:
            raise SystemExit(f"ERROR from the server: {data[:300]!r}")
        got += data.count(b"\0")


def flood(server: Server, args) -> dict:
    server.mqsc("\n".join(f"DEFINE QLOCAL(FLOOD.{i}) MAXDEPTH(999999999)"
                          for i in range(args.floods)))
    before = server.memory()
    stop = threading.Event()
    written = [0] * args.floods

    def run(i: int) -> None:
        s = connect(server.port, rcvbuf=4096)
        chunk = b"".join(frame("SEND", {"destination": f"/queue/FLOOD.{i}", "persistent": "true",
                                        "receipt": f"{n:0100d}"}, b"x" * 10) for n in range(500))
        s.settimeout(0.5)
        while not stop.is_set():
            try:
                s.sendall(chunk)
                written[i] += len(chunk)
            except TimeoutError:
                pass
            except OSError:
                break
        s.close()
    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(args.floods)]
    for t in threads:
        t.start()
    time.sleep(2)
    times: list[float] = []
    refused = None
    end = time.monotonic() + args.flood_seconds - 2
    try:
        by = connect(server.port)
        n = 0
        while time.monotonic() < end:
            n += 1
            t0 = time.monotonic()
            by.sendall(frame("SEND", {"destination": "/queue/BYSTANDER", "persistent": "true",
                                      "receipt": f"b{n}"}, b"y"))
            read_frames(by, 1, 120)
            times.append(time.monotonic() - t0)
            time.sleep(0.2)
        by.close()
    except (AssertionError, SystemExit, OSError) as exc:
        refused = str(exc)[:200]
        time.sleep(max(0.0, end - time.monotonic()))
    at_end = server.memory()
    stop.set()
    for t in threads:
        t.join(10)
    time.sleep(args.settle)
    return {"floods": args.floods, "seconds": args.flood_seconds,
            "server_mb_before": before, "server_mb_at_end": at_end,
            f"server_mb_{args.settle}s_after_the_floods_closed": server.memory(),
            "memory_returns": server.memory_returns(),
            "flood_mb_written": [round(w / 1e6, 1) for w in written],
            "bystander_receipt_s": {"n": len(times),
                                    "p50": round(statistics.median(times), 4) if times else None,
                                    "max": round(max(times), 4) if times else None},
            "bystander_failed": refused}


def burst(server: Server, args) -> dict:
    server.mqsc("DEFINE QLOCAL(BURST) MAXDEPTH(999999999)")
    start = server.memory()
    producers = 8
    per = args.messages // producers
    body = b"b" * 1024
    peak = dict(start)
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            m = server.memory()
            if m.get("VmRSS", 0) > peak.get("VmRSS", 0):
                peak.update(m)
            time.sleep(0.2)

    def produce(p: int) -> None:
        s = connect(server.port)
        sent = 0
        while sent < per:
            n = min(64, per - sent)
            s.sendall(b"".join(frame("SEND", {"destination": "/queue/BURST", "persistent": "true",
                                              "receipt": f"{p}-{sent + i}"}, body)
                               for i in range(n)))
            read_frames(s, n)
            sent += n
        s.close()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.monotonic()
    threads = [threading.Thread(target=produce, args=(p,)) for p in range(producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    produced_s = time.monotonic() - t0
    after_produce = server.memory()
    c = connect(server.port)
    c.sendall(frame("SUBSCRIBE", {"destination": "/queue/BURST", "id": "1", "ack": "auto"}))
    read_frames(c, per * producers, 600)
    c.close()
    drained = server.memory()
    drained_s = time.monotonic() - t0
    time.sleep(args.settle)
    sampling.set()
    settled = server.memory()
    return {"messages": per * producers, "produce_s": round(produced_s, 1),
            "produce_and_drain_s": round(drained_s, 1), "server_mb_start": start,
            "server_mb_peak": peak, "server_mb_after_produce": after_produce,
            "server_mb_drained": drained, f"server_mb_after_{args.settle}s": settled,
            "memory_returns": server.memory_returns()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", choices=("flood", "burst"))
    ap.add_argument("--src", help="run the server from this src directory")
    ap.add_argument("--floods", type=int, default=8)
    ap.add_argument("--flood-seconds", type=float, default=20)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--settle", type=float, default=12)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    result = {"src": args.src or "this checkout", "load": os.getloadavg()}
    for name, fn in (("flood", flood), ("burst", burst)):
        if args.only and args.only != name:
            continue
        home = Path(tempfile.mkdtemp(prefix="bench_hostile."))
        server = Server(home, args.src)
        try:
            server.start()
            progress(f"{name} ...")
            result[name] = fn(server, args)
        finally:
            server.stop()
            if not args.keep:
                shutil.rmtree(home, ignore_errors=True)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
