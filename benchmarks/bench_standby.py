#!/usr/bin/env python3
"""The disaster-recovery drill and the standby's figures (issue: backup and
restore §5, §7). Also what ``scripts/dr-drill.sh`` runs.

1. A primary queue manager (linear log, ``--extent-pages`` extents, archive
   mode) runs as its own process; STOMP producers send persistent 1 KiB
   messages with a receipt each, and the time each RECEIPT arrives is kept.
2. After a second of load: a hot backup, restored on another home (the
   standby), and ``harbormq replay QS --follow`` on it.
3. ``--seconds`` of load. Every replay round is a JSON line: its **lag**
   (when the round ended minus when the archive had the newest extent), the
   **data age** (minus the time of that extent's last record) and its replay
   rate.
4. The disaster: SIGKILL of the primary, its home deleted (the archive
   survives). ``harbormq activate QS``; **RTO** = from the activate command
   to a STOMP CONNECTED on the standby (target: under 2 s).
5. The standby is drained. **RPO** = the time between the last archived
   record and the disaster, and the receipted messages not there.
   **Violations**: a message receipted before the last archived record that
   is missing, or one there twice, or out of order: must be none.

    .venv/bin/python benchmarks/bench_standby.py [--seconds 20] [--producers 4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (src on sys.path)

QM = "QS"


class Producer(asyncio.Protocol):
    """Persistent SENDs numbered from ``first`` (step ``step``), a receipt each,
    ``window`` in flight; ``receipted[n]`` = time.time_ns() the RECEIPT came."""

    def __init__(self, first: int, step: int, window: int, receipted: dict):
        self.n, self.step, self.window, self.receipted = first, step, window, receipted
        self.inflight = 0
        self.buf = bytearray()
        self.stopped = False
        self.connected = asyncio.get_running_loop().create_future()
        self.lost = asyncio.get_running_loop().create_future()

    def connection_made(self, transport):
        self.t = transport
        transport.write(b"CONNECT\naccept-version:1.2\nhost:/\n\n\0")

    def data_received(self, data):
        self.buf += data
        while (end := self.buf.find(b"\0")) != -1:
            frame = bytes(self.buf[:end]).lstrip(b"\r\n")
            del self.buf[:end + 1]
            if frame.startswith(b"CONNECTED"):
                self.connected.set_result(True)
                self._send()
            elif frame.startswith(b"RECEIPT"):
                rid = frame.split(b"receipt-id:", 1)[1].split(b"\n", 1)[0]
                self.receipted[int(rid)] = time.time_ns()
                self.inflight -= 1
                self._send()

    def _send(self):
        out = []
        while not self.stopped and self.inflight < self.window:
            body = (b"m-%010d-" % self.n).ljust(1024, b"x")
            out.append(b"SEND\ndestination:/queue/DR.Q\npersistent:true\nreceipt:%d\n"
                       b"content-length:1024\n\n%s\0" % (self.n, body))
            self.n += self.step
            self.inflight += 1
        if out:
            self.t.write(b"".join(out))

    def connection_lost(self, exc):
        if not self.lost.done():
            self.lost.set_result(exc)


def hmq(env: dict, *args: str) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "harbormq", *args], env=env,
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"harbormq {' '.join(args)} failed:\n{r.stdout}\n{r.stderr}")
    return r


def wait_port(qm_dir: Path, proc: subprocess.Popen | None = None) -> int:
    lj = qm_dir / "listeners.json"
    end = time.monotonic() + 120
    while True:
        try:
            return json.loads(lj.read_text())[0]["port"]
        except (OSError, ValueError, IndexError):
            if time.monotonic() > end or (proc is not None and proc.poll() is not None):
                raise SystemExit("the queue manager did not start") from None
            time.sleep(0.02)


async def stomp_connected(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"CONNECT\naccept-version:1.2\nhost:/\n\n\0")
    data = await asyncio.wait_for(reader.readuntil(b"\0"), 30)
    writer.close()
    if not data.lstrip(b"\r\n").startswith(b"CONNECTED"):
        raise SystemExit(f"the activated standby answered {data[:200]!r}")


def homes(base: Path) -> tuple[Path, Path, Path, Path, dict, dict]:
    primary, standby, arch, bk = (base / "primary", base / "standby", base / "arch",
                                  base / "bk")
    src = str(Path(_common.__file__).resolve().parents[1] / "src")
    penv = dict(os.environ, HARBORMQ_HOME=str(primary), PYTHONPATH=src)
    senv = dict(os.environ, HARBORMQ_HOME=str(standby), PYTHONPATH=src)
    return primary, standby, arch, bk, penv, senv


def prepare(args, base: Path) -> None:
    from harbormq import QueueManager
    from harbormq.qmgr import lifecycle
    primary, standby, arch, _bk, _penv, _senv = homes(base)
    standby.mkdir(parents=True)
    lifecycle.create(QM, home=primary, log_type="linear", log_file_pages=args.extent_pages,
                     log_management="archive", log_archive_paths=[arch], port=0)
    with QueueManager.open(QM, home=primary) as qm:
        qm.define_queue("DR.Q", MAXDEPTH=999_999_999)


async def drill(args, base: Path) -> dict:
    """The load, the standby, the disaster and the activation: raw figures."""
    from harbormq.log import archive
    primary, standby, arch, bk, penv, senv = homes(base)
    server = subprocess.Popen([sys.executable, "-m", "harbormq", "start", QM, "--foreground"],
                              env=penv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    loop = asyncio.get_running_loop()
    receipted: dict[int, int] = {}
    rounds: list[dict] = []
    replay = None
    try:
        port = wait_port(primary / "qmgrs" / QM, server)
        producers = []
        for i in range(args.producers):
            _, p = await loop.create_connection(
                lambda i=i: Producer(i, args.producers, args.window, receipted),
                "127.0.0.1", port)
            producers.append(p)
        await asyncio.gather(*(p.connected for p in producers))
        await asyncio.sleep(1.0)
        taken = json.loads((await asyncio.to_thread(
            hmq, penv, "backup", QM, "--to", str(bk), "--json")).stdout)
        await asyncio.to_thread(hmq, senv, "restore", QM, "--from", taken["path"], "--port",
                                "0")
        replay = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "harbormq", "replay", QM, "--from", str(arch), "--follow",
            "--interval", str(args.interval), "--json", env=senv,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)

        async def read_rounds():
            async for line in replay.stdout:
                r = json.loads(line)
                r["seen_ns"] = time.time_ns()
                rounds.append(r)
        reading = asyncio.ensure_future(read_rounds())
        n0, t0 = len(receipted), time.monotonic()
        await asyncio.sleep(args.seconds)
        load_rate = (len(receipted) - n0) / (time.monotonic() - t0)
        # the disaster
        server.send_signal(signal.SIGKILL)
        server.wait()
        disaster_ns = time.time_ns()
        for p in producers:
            p.stopped = True
        shutil.rmtree(primary)
        # the last extent the primary archived (the activated standby archives too)
        last = archive.read_manifest(archive.archive_dir(arch, QM))[-1][0]
        t_activate = time.monotonic()
        out = await asyncio.to_thread(hmq, senv, "activate", QM, "--json")
        t_returned = time.monotonic()
        facts = json.loads(out.stdout.strip().splitlines()[-1])
        await stomp_connected(wait_port(standby / "qmgrs" / QM))
        rto = time.monotonic() - t_activate
        facts["command_s"] = round(t_returned - t_activate, 3)
        await asyncio.wait_for(replay.wait(), 30)
        await reading
        replay_rc = replay.returncode
    finally:
        if server.poll() is None:
            server.kill()
        if replay is not None and replay.returncode is None:
            replay.kill()
    await asyncio.to_thread(hmq, senv, "stop", QM)
    return {"receipted": receipted, "rounds": rounds, "load_rate": load_rate, "rto": rto,
            "last": last,
            "facts": facts, "disaster_ns": disaster_ns, "replay_rc": replay_rc}


def judge(args, base: Path, raw: dict) -> dict:
    """Drain the activated standby; RPO, lag and the violations."""
    from harbormq import QueueManager
    _primary, standby, _arch, _bk, _penv, _senv = homes(base)
    receipted, rounds, facts = raw["receipted"], raw["rounds"], raw["facts"]
    got = []
    with QueueManager.open(QM, home=standby) as qm:
        while (m := qm.get("DR.Q")) is not None:
            got.append(int(bytes(m.body)[2:12]))
    last = raw["last"]
    must = {n for n, at in receipted.items() if at <= last.last_ns}
    present = set(got)
    per_producer = {}
    for n in got:
        per_producer.setdefault(n % args.producers, []).append(n)
    fetched = [r for r in rounds if r["fetched"]]
    lag = [(r["seen_ns"] - r["archived_ns"]) / 1e9 for r in fetched]
    age = [(r["seen_ns"] - r["last_record_ns"]) / 1e9 for r in fetched]
    rates = [r["bytes"] / 1e6 / r["seconds"] for r in fetched if r["seconds"] > 0]
    return {
        "producers": args.producers, "window": args.window,
        "extent_kib": args.extent_pages * 4, "load_msgs_per_s": round(raw["load_rate"]),
        "replay_rounds_with_extents": len(fetched),
        "standby_lag_s": {"median": round(statistics.median(lag), 3) if lag else None,
                          "max": round(max(lag), 3) if lag else None},
        "standby_data_age_s": {"median": round(statistics.median(age), 3) if age else None,
                               "max": round(max(age), 3) if age else None},
        "replay_round_mb_s_median_incl_fixed_costs":
            round(statistics.median(rates), 1) if rates else None,
        "replay_exit_status": raw["replay_rc"],
        "rto_s": round(raw["rto"], 3), "rto_target_s": 2.0,
        "activate_s": facts["seconds"], "replay_ended_s": facts.get("replay_ended_s"),
        "activate_command_s": facts["command_s"],
        "backed_out_at_activation": facts.get("backed_out"),
        "rpo_s": round((raw["disaster_ns"] - last.last_ns) / 1e9, 3),
        "rpo_messages": len(set(receipted) - present),
        "receipted": len(receipted), "on_standby": len(got),
        "violations": {
            "receipted_and_archived_but_missing": len(must - present),
            "twice": len(got) - len(present),
            "out_of_order": sum(1 for ns in per_producer.values() if ns != sorted(ns)),
            "never_sent": sum(1 for n in present if n % args.producers >= args.producers)},
        "loadavg": os.getloadavg(), "cpus": os.cpu_count(),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="load before the disaster")
    ap.add_argument("--producers", type=int, default=4)
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--extent-pages", type=int, default=256,
                    help="extent size in 4 KiB pages (how often the primary archives)")
    ap.add_argument("--interval", type=float, default=0.2,
                    help="seconds between the standby's looks at the archive")
    ap.add_argument("--keep-dir", type=Path, default=None)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="dr-drill-", dir=args.keep_dir))
    try:
        prepare(args, base)
        result = judge(args, base, asyncio.run(drill(args, base)))
    finally:
        if args.keep_dir is None:
            shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(result, indent=1))
    return 1 if any(result["violations"].values()) or result["replay_exit_status"] else 0


if __name__ == "__main__":
    sys.exit(main())
