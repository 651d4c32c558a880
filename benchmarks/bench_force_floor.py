#!/usr/bin/env python3
"""How close a receipted persistent SEND on harbormq is to the machine's floor.

Workload (a) of bench_peers waits for each SEND's RECEIPT, so its rate is one
over the round trip of a force. This measures that round trip on three
servers, on the same loopback and the same disk, in alternating rounds:

* ``harbormq``: a queue manager of this checkout (``harbormq start
  --foreground``, ``harbormq create``'s defaults, heart-beats off);
* ``floor-thread``: _force_floor_server.py with a writer thread, as
  harbormq's log has: what no server written this way can beat;
* ``floor-process``: the same, with the fdatasync in a helper process that has
  a GIL of its own: whether moving the force out of the interpreter would pay;
* ``harbormq-baseline`` with ``--baseline-src DIR``: a queue manager of another
  checkout's ``src`` (the code before a change, e.g. from ``git archive``), set
  up the same way: before and after in the same alternating rounds.

Clients are raw-frame asyncio connections in this process, each sending 1 KiB
persistent SENDs with a receipt, one at a time (``--clients 1,64``: one
client is workload (a)'s producer; 64 is (d)'s). Every reply must be a
RECEIPT. Also measured: a bare pwrite + fdatasync of 1,100 bytes in the same
directory, the disk's share of the floor.

Prints one JSON object on stdout (medians over ``--rounds``); progress on stderr.

    .venv/bin/python benchmarks/bench_force_floor.py
    .venv/bin/python benchmarks/bench_force_floor.py --full
    .venv/bin/python benchmarks/bench_force_floor.py --clients 1 --messages 5000 --rounds 5
    .venv/bin/python benchmarks/bench_force_floor.py --baseline-src /tmp/before/src
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import make_progress  # noqa: I001

progress = make_progress("bench_force_floor")
HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
QM = "FLOOR"
BODY = b"x" * 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, name: str, cmd: list[str], env: dict, port: int):
        self.name, self.port = name, port
        self.home: Path | None = None        # a queue manager's HARBORMQ_HOME
        # a session of its own: stopping it stops its helper process too
        self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)

    def wait_listening(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"{self.name} exited with {self.proc.returncode} at start")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise SystemExit(f"{self.name} did not listen on port {self.port} in {timeout} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)    # a helper left in the group
        except ProcessLookupError:
            pass


def start_servers(scratch: Path, baseline_src: Path | None = None) -> list[Server]:
    sys.path.insert(0, str(SRC))
    servers = [queue_manager("harbormq", scratch / "home", SRC)]
    if baseline_src is not None:
        servers.append(queue_manager("harbormq-baseline", scratch / "home-baseline",
                                     baseline_src))
    for mode in ("thread", "process"):
        p = free_port()
        cmd = [sys.executable, str(HERE / "_force_floor_server.py"), mode, str(p),
               str(scratch / f"floor-{mode}.dat")]
        servers.append(Server(f"floor-{mode}", cmd, dict(os.environ), p))
    for s in servers:
        s.wait_listening()
    # the queue every SEND goes to: deep enough for all of them (nothing reads it)
    from harbormq.admin.client import call
    from harbormq.config import QMConfig
    text = "DEFINE QLOCAL(BENCH.FLOOR) MAXDEPTH(999999999) DEFPSIST(YES) REPLACE"
    for s in servers:
        if s.home is not None:
            reply = call(QMConfig.load(QM, home=s.home), {"cmd": "mqsc", "text": text},
                         timeout=60)
            if not reply.get("ok"):
                raise SystemExit(f"{s.name}: MQSC {text!r} failed: {reply}")
    return servers


def queue_manager(name: str, home: Path, src: Path) -> Server:
    """A queue manager created and run by the code in ``src``, heart-beats off."""
    port = free_port()
    env = dict(os.environ, HARBORMQ_HOME=str(home),
               PYTHONPATH=os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")])))
    setup = ("from harbormq.config import QMConfig\n"
             "from harbormq.qmgr import lifecycle as qmgr\n"
             "from pathlib import Path\n"
             f"qmgr.create({QM!r}, home=Path({str(home)!r}), port={port})\n"
             f"cfg = QMConfig.load({QM!r}, home=Path({str(home)!r}))\n"
             "cfg.stomp.heartbeat_ms = 0\n"
             "cfg.save()\n")
    subprocess.run([sys.executable, "-c", setup], env=env, check=True)
    server = Server(name, [sys.executable, "-m", "harbormq", "start", QM, "--foreground"],
                    env, port)
    server.home = home
    return server


async def run_clients(port: int, clients: int, per_client: int) -> dict:
    frame = (b"SEND\ndestination:/queue/BENCH.FLOOR\npersistent:true\nreceipt:r\n"
             b"content-length:1024\n\n" + BODY + b"\0")
    latencies: list[float] = []

    async def client() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"CONNECT\naccept-version:1.2\nhost:/\nheart-beat:0,0\n\n\0")
        reply = await reader.readuntil(b"\0")
        if not reply.startswith(b"CONNECTED"):
            raise SystemExit(f"port {port}: CONNECT answered {reply[:200]!r}")
        for _ in range(per_client):
            t0 = time.perf_counter()
            writer.write(frame)
            reply = await reader.readuntil(b"\0")
            latencies.append(time.perf_counter() - t0)
            if not reply.lstrip(b"\n").startswith(b"RECEIPT"):
                raise SystemExit(f"port {port}: a SEND was answered {reply[:300]!r}")
        writer.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    seconds = time.perf_counter() - t0
    latencies.sort()
    n = len(latencies)
    return {"msgs_per_s": round(n / seconds), "p50_us": round(latencies[n // 2] * 1e6),
            "p99_us": round(latencies[min(n - 1, int(n * 0.99))] * 1e6)}


def bare_fdatasync_us(directory: Path, count: int = 2000) -> dict:
    """pwrite of 1,100 bytes, then fdatasync, into a preallocated file: the disk alone."""
    path = directory / "bare.dat"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.posix_fallocate(fd, 0, count * 1100 + 4096)
        os.fsync(fd)
        data = b"y" * 1100
        times = []
        for i in range(count):
            t0 = time.perf_counter()
            os.pwrite(fd, data, i * 1100)
            os.fdatasync(fd)
            times.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
        path.unlink()
    times.sort()
    return {"p50_us": round(times[len(times) // 2] * 1e6),
            "mean_us": round(statistics.mean(times) * 1e6)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", default="1,64", help="client counts, comma-separated")
    ap.add_argument("--full", action="store_true", help="10,000 SENDs a run, 5 rounds")
    ap.add_argument("--messages", type=int, default=None,
                    help="SENDs per run with one client (3,000; more clients: 20,000 in all)")
    ap.add_argument("--rounds", type=int, default=None, help="measured rounds (3)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--baseline-src", type=Path, default=None,
                    help="also run a queue manager of this src directory (before a change)")
    args = ap.parse_args()
    args.messages = args.messages or (10_000 if args.full else 3000)
    args.rounds = args.rounds or (5 if args.full else 3)
    counts = [int(c) for c in args.clients.split(",")]
    scratch = Path(tempfile.mkdtemp(prefix="hmq-bench-floor-"))
    servers: list[Server] = []
    runs: dict[str, dict[int, list[dict]]] = {}
    try:
        progress(f"a bare pwrite + fdatasync in {scratch}")
        disk = bare_fdatasync_us(scratch)
        progress(f"disk: p50 {disk['p50_us']} us")
        servers = start_servers(scratch, args.baseline_src)
        load_before = [round(x, 2) for x in os.getloadavg()]
        for rnd in range(-1, args.rounds):           # round -1 warms every server up
            for clients in counts:
                total = args.messages if clients == 1 else 20_000
                for s in servers:
                    r = asyncio.run(run_clients(s.port, clients, max(1, total // clients)))
                    if rnd >= 0:
                        runs.setdefault(s.name, {}).setdefault(clients, []).append(r)
                        progress(f"round {rnd + 1}: {s.name}, {clients} client(s): "
                                 f"{r['msgs_per_s']}/s, p50 {r['p50_us']} us")
        result = {"benchmark": "force_floor", "rounds": args.rounds, "messages": args.messages,
                  "disk_pwrite_fdatasync": disk, "load_before": load_before,
                  "load_after": [round(x, 2) for x in os.getloadavg()], "servers": {}}
        for name, by_clients in runs.items():
            result["servers"][name] = {
                str(c): {k: statistics.median(r[k] for r in rs) for k in rs[0]}
                for c, rs in by_clients.items()}
        floor = result["servers"]["floor-thread"]
        result["harbormq_vs_floor_thread"] = {
            c: round(v["msgs_per_s"] / floor[c]["msgs_per_s"], 2)
            for c, v in result["servers"]["harbormq"].items()}
        if "harbormq-baseline" in result["servers"]:
            base = result["servers"]["harbormq-baseline"]
            result["harbormq_vs_baseline"] = {
                c: round(v["msgs_per_s"] / base[c]["msgs_per_s"], 2)
                for c, v in result["servers"]["harbormq"].items()}
        print(json.dumps(result, indent=1))
    finally:
        for s in servers:
            s.stop()
        if args.keep:
            progress(f"kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
