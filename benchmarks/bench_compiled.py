#!/usr/bin/env python3
"""The compiled hot modules against their Python source, A/B on one machine.

Each round runs every workload twice in fresh processes, once on the compiled
modules and once with ``HARBORMQ_PURE_PYTHON=1`` (the order alternates from
round to round, so that load from other jobs falls on both alike), and reports
medians and the ratio source ÷ compiled (above 1: the compiled module is
faster). A micro run is the best of five timings of the process's CPU time
(time waiting for a core on a shared machine is not the code's). Micro
workloads, one per module tried (by default those compiled now):

* ``frames``  parse a stream of 1 KiB SENDs and ACKs (``FrameParser.feed``), µs a frame
* ``records`` encode a MSG_PUT log record of a 1 KiB message and decode it back
  (``encode``, ``decode_run``, ``Message.decode``), µs a record: measured
  slower compiled, so not compiled; runs once it is added to the list again
* ``queue``   commit 1,000 puts to a ``LocalQueue``, then take each with
  ``first_available`` and ``commit_delete``, µs a message
* ``message_codec`` read a 1 KiB SEND's headers into a message
  (``message_of_send``) and write it as a MESSAGE frame (``message_frame``),
  µs a message

``--stomp MODES`` adds ``bench_stomp.py --quick`` runs of those modes (receipt,
pipelined, txn) against a real server, whose process inherits the switch:
server CPU µs a message and msgs/s end to end. ``--baseline-src DIR`` compares
instead this tree against another checkout's ``src`` (the code before a change,
its own modules compiled), both compiled, in the same alternating rounds: what
the change gains end to end (stomp modes only; the ratio is baseline ÷ this).

    .venv/bin/python benchmarks/bench_compiled.py                     # micro, 5 rounds
    .venv/bin/python benchmarks/bench_compiled.py --rounds 3 --stomp pipelined,txn,receipt
    .venv/bin/python benchmarks/bench_compiled.py --micro '' --stomp pipelined,txn \
        --baseline-src /tmp/before/src
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: CPU time of this process: on a shared machine, time spent waiting for a core
#: is not the code's
clock = time.process_time
#: each micro workload and the module it measures
MICRO = {"frames": "harbormq.stomp.frames", "records": "harbormq.log.records",
         "queue": "harbormq.core.queue", "message_codec": "harbormq.stomp.message_codec"}


# -- the micro workloads (run inside a child process) -----------------------------------

def _micro_frames(seconds: float) -> float:
    from harbormq.stomp.frames import FrameParser

    body = b"x" * 1024
    send = (b"SEND\ndestination:/queue/Q\npersistent:true\nreceipt:r-123\n"
            b"content-length:1024\n\n" + body + b"\0")
    ack = b"ACK\nid:ID-0123456789abcdef\n\n\0"
    chunk = (send + ack) * 32
    frames = 0
    start = clock()
    while clock() - start < seconds:
        parser = FrameParser()
        parser.version = "1.2"
        for _ in range(20):
            frames += len(parser.feed(chunk))
    return (clock() - start) / frames * 1e6


def _micro_records(seconds: float) -> float:
    from harbormq.log.records import LogRecord, Message, RecordType, decode_run, encode

    msg = Message(b"y" * 1024, msg_id=b"m" * 24, seq=7, put_time_ns=1)
    records = 0
    start = clock()
    while clock() - start < seconds:
        encoded = []
        lsn = 4096
        for i in range(200):
            msg.raw = None
            rec = LogRecord(RecordType.MSG_PUT, uow_id=i, object_id=3, object_name="Q",
                            payload=msg.encode(), lsn=lsn, timestamp_ns=i)
            data = encode(rec)
            encoded.append(data)
            lsn += len(data)
        buf = b"".join(encoded)
        # (a record's LSN is its offset in an extent whose header is 4096 bytes)
        decoded, _end = decode_run(buf, 0, len(buf), 4096 + 4096)
        assert len(decoded) == 200
        for rec in decoded:
            Message.decode(rec.payload)
        records += len(decoded)
    return (clock() - start) / records * 1e6


class _EmptyStore:
    """What a LocalQueue reads of its store: nothing (every message is in memory)."""
    next_seq = 1

    def count(self) -> int:
        return 0

    def last_key(self):
        return None


def _micro_queue(seconds: float) -> float:
    from harbormq.core.queue import LocalQueue
    from harbormq.log.records import Message

    messages = [Message(b"z" * 1024, msg_id=i.to_bytes(24, "big"), seq=i + 1)
                for i in range(1000)]
    done = 0
    start = clock()
    while clock() - start < seconds:
        q = LocalQueue({"name": "Q", "object_id": 7, "attrs": {}}, _EmptyStore())
        for lsn, msg in enumerate(messages, 1):
            q.commit_put(msg, lsn)
        while True:
            key, msg, _expired = q.first_available(None, 0)
            if key is None:
                break
            q.commit_delete(key, 1)
            done += 1
    return (clock() - start) / done * 1e6


def _micro_message_codec(seconds: float) -> float:
    from harbormq.stomp.message_codec import message_frame, message_of_send

    headers = {"destination": "/queue/Q", "persistent": "true", "receipt": "r-123",
               "content-length": "1024", "priority": "4"}
    body = b"w" * 1024

    def defaults(_where, priority, persistent):
        return (0 if priority is None else priority, True if persistent is None else persistent)

    prefix = "MESSAGE\nsubscription:sub-1\ndestination:/queue/Q\n"
    msg_hex = "ab" * 24
    done = 0
    start = clock()
    while clock() - start < seconds:
        for i in range(200):
            msg = message_of_send(headers, body, defaults, None)
            msg.put_time_ns = 1_764_000_000_000_000_000 + i
            message_frame(prefix, msg_hex, "conn-1-7", msg, "1.2", None)
        done += 200
    return (clock() - start) / done * 1e6


def child(workload: str, seconds: float) -> None:
    """Runs one micro workload and prints {"us": ..., "loaded": ...}."""
    from harbormq import _compiled

    run = {"frames": _micro_frames, "records": _micro_records, "queue": _micro_queue,
           "message_codec": _micro_message_codec}[workload]
    # the best of five: what the code costs when nothing else disturbs it
    us = min(run(seconds / 5) for _ in range(5))
    print(json.dumps({"us": us, "loaded": _compiled.loaded_state()}))


# -- the parent: alternating rounds ------------------------------------------------------

def _env(pure: bool, src: Path = ROOT / "src") -> dict:
    env = dict(os.environ)
    env.pop("HARBORMQ_PURE_PYTHON", None)
    if pure:
        env["HARBORMQ_PURE_PYTHON"] = "1"
    env["PYTHONPATH"] = str(src) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _run_micro(workload: str, pure: bool, seconds: float) -> float:
    out = subprocess.run([sys.executable, __file__, "--child", workload,
                          "--seconds", str(seconds)], env=_env(pure), check=True,
                         capture_output=True, text=True).stdout
    result = json.loads(out)
    expected = "source" if pure else "compiled"
    module = MICRO[workload]
    if result["loaded"].get(module, "source") != expected:
        raise SystemExit(f"{workload}: {module} loaded as {result['loaded'][module]}, "
                         f"not {expected} (is the build current? scripts/setup-venv.sh)")
    return result["us"]


def _run_stomp(mode: str, pure: bool, src: Path = ROOT / "src") -> dict:
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_stomp.py"),
                          "--quick", "--mode", mode], env=_env(pure, src), check=True,
                         capture_output=True, text=True).stdout
    result = json.loads(out)
    run = result["modes"][mode] if "modes" in result else result[mode]
    return {"msgs_per_s": run["recv_msgs_per_s"],
            "server_cpu_us_per_msg": run["server_cpu_us_per_msg"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=1.0, help="each micro run's length")
    from harbormq._compiled import COMPILED_MODULES

    compiled = [w for w, m in MICRO.items() if m in COMPILED_MODULES]
    ap.add_argument("--micro", default=",".join(compiled),
                    help="micro workloads ('' for none; records only when it is compiled)")
    ap.add_argument("--stomp", default="", help="bench_stomp --quick modes, e.g. pipelined,txn")
    ap.add_argument("--baseline-src", type=Path, default=None,
                    help="stomp runs: this tree against that src, both compiled")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.seconds)
        return
    micro = [w for w in args.micro.split(",") if w]
    stomp = [m for m in args.stomp.split(",") if m]
    samples: dict[str, dict[str, list]] = {}
    load = [os.getloadavg()[0]]
    for round_no in range(args.rounds):
        order = (False, True) if round_no % 2 == 0 else (True, False)
        for pure in order:
            # (with a baseline, "source" is the baseline's tree, compiled too)
            side = "source" if pure else "compiled"
            for w in micro:
                samples.setdefault(w, {}).setdefault(side, []).append(
                    _run_micro(w, pure, args.seconds))
            for m in stomp:
                run = (_run_stomp(m, False, args.baseline_src) if pure and args.baseline_src
                       else _run_stomp(m, pure))
                samples.setdefault(f"stomp_{m}", {}).setdefault(side, []).append(run)
        load.append(os.getloadavg()[0])
    summary = {}
    for name, sides in samples.items():
        if name.startswith("stomp_"):
            entry = {}
            for key in ("msgs_per_s", "server_cpu_us_per_msg"):
                comp = statistics.median(s[key] for s in sides["compiled"])
                src = statistics.median(s[key] for s in sides["source"])
                entry[key] = {"compiled": round(comp, 1), "source": round(src, 1)}
            entry["cpu_source_over_compiled"] = round(
                entry["server_cpu_us_per_msg"]["source"]
                / entry["server_cpu_us_per_msg"]["compiled"], 3)
            entry["runs"] = sides
        else:
            comp = statistics.median(sides["compiled"])
            src = statistics.median(sides["source"])
            entry = {"us_compiled": round(comp, 3), "us_source": round(src, 3),
                     "source_over_compiled": round(src / comp, 2),
                     "runs_us": {k: [round(v, 3) for v in vs] for k, vs in sides.items()}}
        summary[name] = entry
    if args.baseline_src:     # the two sides are two trees, both compiled
        for entry in summary.values():
            for key in ("msgs_per_s", "server_cpu_us_per_msg"):
                if key in entry:
                    entry[key] = {"this": entry[key]["compiled"],
                                  "baseline": entry[key]["source"]}
            if "runs" in entry:
                entry["runs"] = {"this": entry["runs"]["compiled"],
                                 "baseline": entry["runs"]["source"]}
                entry["cpu_baseline_over_this"] = entry.pop("cpu_source_over_compiled")
    print(json.dumps({"benchmark": "compiled", "rounds": args.rounds,
                      "baseline_src": str(args.baseline_src) if args.baseline_src else None,
                      "load_average": [round(x, 2) for x in load], "results": summary},
                     indent=2))


if __name__ == "__main__":
    main()
