#!/usr/bin/env python3
"""The web listener during a real restart: how long a status request waits,
and whether being asked slows the restart.

Restarts a copy of a crashed queue manager that ``bench_restart_replay.py
--save-log DIR`` kept (no delay point: the restart's own work) as the
server process (``python -m harbormq.server``) with ``[web]`` on a free
loopback port, and polls ``GET /console/api/restart`` (anonymous loopback:
the owner) every --interval-ms from a thread until it says running. Reports
the restart's phases (its report), the time from the process's start to
running, and the latency of the status requests answered while restart
recovery ran (p50, p99, max) and how many were answered in each phase.
The end is when the STOMP listener joins ``listeners.json``, polled or
not; ``--no-poll`` restarts the same copy without asking (the restart's
time alone, to compare).

Prints one JSON object on stdout; progress on stderr.

    .venv/bin/python benchmarks/bench_restart_replay.py --log-mb 200 --save-log /tmp/saved
    .venv/bin/python benchmarks/bench_web_restart.py --from-saved /tmp/saved
    .venv/bin/python benchmarks/bench_web_restart.py --from-saved /tmp/saved --no-poll
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# _common first: it puts src/ on the path when harbormq is not installed
from _common import make_progress  # noqa: I001

QM_NAME = "BENCHQM"
progress = make_progress("bench_web_restart")


def ask(port: int, path: str, timeout: float = 30) -> tuple[int, dict, float]:
    """(status, JSON body, seconds the request took)."""
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = json.loads(resp.read() or b"null")
        return resp.status, body, time.perf_counter() - t0
    finally:
        conn.close()


def web_port(qm_dir: Path) -> int | None:
    try:
        entries = json.loads((qm_dir / "listeners.json").read_text())
    except (OSError, ValueError):
        return None
    return next((e["port"] for e in entries if e.get("transport") == "http"), None)


def stomp_listening(qm_dir: Path) -> bool:
    try:
        entries = json.loads((qm_dir / "listeners.json").read_text())
    except (OSError, ValueError):
        return False
    return any(e.get("transport", "tcp") == "tcp" for e in entries)


def poll(port: int, interval_s: float, latencies: dict[str, list[float]]) -> None:
    """Ask for the start's status until it says running; each answer's time by
    the phase it named."""
    while True:
        status, body, took = ask(port, "/console/api/restart")
        if status == 200 and body["state"] != "starting":
            return
        latencies.setdefault(body["phase"], []).append(took)
        time.sleep(interval_s)


def deadline_status(port: int, timeout: float = 30) -> dict:
    """The status once it is no longer starting."""
    end = time.monotonic() + timeout
    while True:
        status, body, _ = ask(port, "/console/api/restart")
        if status == 200 and body["state"] != "starting" or time.monotonic() > end:
            return body
        time.sleep(0.01)


def run(args) -> dict:
    import tomllib

    import tomli_w
    tmp = Path(tempfile.mkdtemp(prefix="hmq-bench-webrestart-"))
    home = tmp / "home"
    try:
        shutil.copytree(Path(args.from_saved) / "home", home)
        qm_dir = home / "qmgrs" / QM_NAME
        config = tomllib.loads((qm_dir / "qm.toml").read_text())
        config["web"] = {"port": 0}
        (qm_dir / "qm.toml").write_text(tomli_w.dumps(config))
        (qm_dir / "listeners.json").unlink(missing_ok=True)
        env = dict(os.environ, HARBORMQ_HOME=str(home))
        progress(f"restarting {QM_NAME} ({'polling' if args.poll else 'not polling'})")
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "harbormq.server", QM_NAME], env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            port = None
            while port is None:
                if proc.poll() is not None:
                    raise SystemExit(f"the server ended with {proc.returncode}")
                port = web_port(qm_dir)
                time.sleep(0.005)
            listening_s = time.monotonic() - t0
            latencies: dict[str, list[float]] = {}
            poller = threading.Thread(target=poll, args=(port, args.interval_ms / 1000,
                                                         latencies), daemon=True)
            if args.poll:
                poller.start()
            # running: the STOMP listener's entry joins listeners.json (the same
            # moment, polled or not)
            while not stomp_listening(qm_dir):
                if proc.poll() is not None:
                    raise SystemExit(f"the server ended with {proc.returncode}")
                time.sleep(0.002)
            running_s = time.monotonic() - t0
            if args.poll:
                poller.join(60)
            final = deadline_status(port)
        finally:
            proc.terminate()
            proc.wait(60)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    every = sorted(t for ts in latencies.values() for t in ts)

    def pct(p: float) -> float | None:
        return round(every[min(len(every) - 1, int(p * len(every)))] * 1000, 1) \
            if every else None
    report = final.get("restart") or {}
    return {
        "benchmark": "bench_web_restart", "polled": args.poll,
        "interval_ms": args.interval_ms,
        "web_listening_s": round(listening_s, 3),
        "start_to_running_s": round(running_s, 3),
        "restart_phases_s": {k: round(v, 3) for k, v in report.get("phases", {}).items()},
        "bytes_replayed": report.get("bytes_replayed"),
        "status_requests_during_restart": len(every),
        "per_phase": {k: len(v) for k, v in latencies.items()},
        "latency_ms": {"p50": round(statistics.median(every) * 1000, 1) if every else None,
                       "p99": pct(0.99), "max": pct(1.0)},
        "notes": ["latency: a new loopback connection per request, the owner's anonymous "
                  "login (its /proc/net/tcp lookup) included",
                  "shared 2-core machine; other work runs concurrently, numbers are noisy"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--from-saved", required=True, metavar="DIR",
                    help="what bench_restart_replay.py --save-log DIR kept")
    ap.add_argument("--interval-ms", type=float, default=20.0,
                    help="between two status requests")
    ap.add_argument("--no-poll", dest="poll", action="store_false",
                    help="do not ask during restart (its end is seen in listeners.json)")
    print(json.dumps(run(ap.parse_args()), indent=2))


if __name__ == "__main__":
    main()
