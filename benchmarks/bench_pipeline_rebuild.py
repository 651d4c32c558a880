#!/usr/bin/env python3
"""rebuild on Spark local[2], from the log and from a Parquet lake, against a
sequential replay of the same log by the engine's restart recovery (targets:
from the log at least 1.3x faster than replay, from the lake at least 5x).

1. Write a log of --records records (--full: 10,000,000, about 2 GB) with
   _pipeline_log.generate: a linear log of 16 MiB extents (the default size; one
   Spark input partition each), its queue manager
   never checkpointed after the queues were defined, so restart replays it all.
2. Time ``python -m harbormq.pipeline rebuild --log DIR --at-lsn END --master
   local[2]`` (all queues; wall time of the whole command: JVM start, decode,
   joins, Parquet and load files).
3. Ingest the same log into a lake (``ingest --with-bodies``; timed and
   reported apart: a lake is kept current by ingest as the log grows, not
   built for one rebuild), then time ``rebuild --lake LAKE`` of the same point.
4. Time restart recovery of the same queue manager in a fresh process
   (``QueueManager.open``): forward recovery is the sequential replay of the
   same extents; the whole restart is reported too.
5. Check all three agree: the depth of every queue rebuilt from the log and
   from the lake equals the queue's depth after restart.

Prints one JSON object on stdout; progress on stderr. The load average is
recorded before and after each timed phase (the machine is shared).

    .venv/bin/python benchmarks/bench_pipeline_rebuild.py           # 300,000 records (quick)
    .venv/bin/python benchmarks/bench_pipeline_rebuild.py --full    # 10,000,000 records
    ... --save-log DIR      keep the generated queue manager (before its restart) in DIR
    ... --from-saved DIR    write nothing: use a copy of what --save-log kept
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import dir_bytes, make_progress  # noqa: I001
from _pipeline_log import QM_NAME, generate

progress = make_progress("bench_pipeline_rebuild")

RESTART_CHILD = """
import json, sys, time
from harbormq import QueueManager
t0 = time.perf_counter()
qm = QueueManager.open(sys.argv[1], home=sys.argv[2])
total = time.perf_counter() - t0
rep = qm.restart_report.as_dict()
depth = {n: qm.queue_status(n)["CURDEPTH"] for n in qm.queue_names()}
qm.close("immediate")
print(json.dumps({"seconds": total, "report": rep, "depth": depth}, default=str))
"""


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def pipeline_job(name: str, args: list[str], env: dict) -> dict:
    """Run ``python -m harbormq.pipeline NAME ARGS``: wall time, stage lines, result."""
    cmd = [sys.executable, "-m", "harbormq.pipeline", name, *args]
    progress(f"{name}: " + " ".join(cmd[3:]))
    before = load()
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{name} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    stages = [ln for ln in done.stderr.splitlines() if ln.startswith(f"[harbormq {name}]")]
    progress(f"{name}: {seconds:.1f} s")
    return {"seconds": seconds, "stages": stages, "load_before": before, "load_after": load(),
            "result": json.loads(done.stdout.strip().splitlines()[-1])}


def rates(seconds: float, log: dict) -> dict:
    return {"wall_seconds": round(seconds, 1),
            "records_per_s": round(log["records"] / seconds),
            "mb_per_s": round(log["log_bytes"] / seconds / 1e6, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="300,000 records (the default)")
    ap.add_argument("--full", action="store_true", help="the size the target is stated for")
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--driver-memory", default="6g")
    ap.add_argument("--save-log", metavar="DIR",
                    help="keep the generated queue manager (before any restart) in DIR")
    ap.add_argument("--from-saved", metavar="DIR",
                    help="write nothing: use a copy of what --save-log kept in DIR")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()
    records = args.records or (10_000_000 if args.full else 300_000)
    home = Path(tempfile.mkdtemp(prefix="hmq-bench-rebuild-"))
    env = dict(os.environ, HARBORMQ_HOME=str(home))
    spark_conf = ["--master", args.master, "--conf", f"spark.driver.memory={args.driver_memory}"]
    try:
        if args.from_saved:
            saved = Path(args.from_saved)
            shutil.rmtree(home)
            shutil.copytree(saved / "home", home)
            log = json.loads((saved / "log.json").read_text())
            log["log_dir"] = str(home / Path(log["log_dir"]).relative_to(log["home"]))
            progress(f"a copy of the log saved in {saved}: {log['records']:,} records")
        else:
            progress(f"writing a log of {records:,} records under {home}")
            log = generate(home, records)
            log["home"] = str(home)
            if args.save_log:
                saved = Path(args.save_log)
                shutil.copytree(home, saved / "home")
                (saved / "log.json").write_text(json.dumps(log))
                progress(f"saved in {saved} (--from-saved {saved})")
        log_disk = dir_bytes(Path(log["log_dir"]))
        progress(f"log: {log['log_bytes'] / 1e9:.2f} GB of records, {log['records']:,} records")
        point = ["--at-lsn", str(log["at_lsn"])]

        from_log = pipeline_job("rebuild", ["--log", log["log_dir"], *point,
                                            "--out", str(home / "rebuild-log"), *spark_conf], env)
        lake = home / "lake"
        ingest = pipeline_job("ingest", ["--log", log["log_dir"], "--lake", str(lake),
                                         "--with-bodies", *spark_conf], env)
        from_lake = pipeline_job("rebuild", ["--lake", str(lake), *point,
                                             "--out", str(home / "rebuild-lake"), *spark_conf],
                                 env)

        progress("engine restart (sequential replay) in a fresh process")
        before = load()
        rs = subprocess.run([sys.executable, "-c", RESTART_CHILD, QM_NAME, str(home)], env=env,
                            capture_output=True, text=True)
        if rs.returncode != 0:
            raise SystemExit(f"restart failed:\n{rs.stderr[-4000:]}")
        restart = json.loads(rs.stdout.strip().splitlines()[-1])
        fwd = restart["report"]["phases"]["forward recovery"]
        whole = restart["seconds"]
        progress(f"engine: forward recovery {fwd:.1f} s, whole restart {whole:.1f} s")

        def depths(job):
            return {q: v["messages"] for q, v in job["result"]["queues"].items()}

        engine = restart["depth"]
        # both ways: a queue only one side holds messages on disagrees too
        nonempty = {q: d for q, d in engine.items() if d}
        agree = {name: {q: n for q, n in depths(job).items() if n} == nonempty
                 for name, job in (("log", from_log), ("lake", from_lake))}
        result = {
            "benchmark": "pipeline_rebuild",
            "mode": "full" if args.full else ("saved" if args.from_saved else "quick"),
            "machine": {"cpus": os.cpu_count(), "load_average_at_end": load()},
            "log": {"records": log["records"], "bytes": log["log_bytes"], "disk_bytes": log_disk,
                    "write_seconds": log["write_seconds"]},
            "spark": {"master": args.master, **rates(from_log["seconds"], log),
                      "load_before": from_log["load_before"],
                      "load_after": from_log["load_after"], "stages": from_log["stages"]},
            "lake": {
                "ingest": {**rates(ingest["seconds"], log), "lake_bytes": dir_bytes(lake),
                           "load_before": ingest["load_before"],
                           "load_after": ingest["load_after"], "stages": ingest["stages"]},
                "rebuild": {**rates(from_lake["seconds"], log),
                            "load_before": from_lake["load_before"],
                            "load_after": from_lake["load_after"],
                            "stages": from_lake["stages"]},
            },
            "engine_replay": {"forward_recovery_seconds": round(fwd, 1),
                              "restart_seconds": round(whole, 1),
                              "records_replayed": restart["report"]["records_replayed"],
                              "records_per_s": round(restart["report"]["records_replayed"]
                                                     / fwd) if fwd else None,
                              "load_before": before, "load_after": load()},
            "speedup_vs_forward_recovery": round(fwd / from_log["seconds"], 2),
            "speedup_vs_whole_restart": round(whole / from_log["seconds"], 2),
            "target_speedup": 1.3,
            "lake_speedup_vs_forward_recovery": round(fwd / from_lake["seconds"], 2),
            "lake_speedup_vs_whole_restart": round(whole / from_lake["seconds"], 2),
            "lake_target_speedup": 5.0,
            "depths_agree": agree["log"] and agree["lake"],
            "depth": {"rebuild": depths(from_log), "lake_rebuild": depths(from_lake),
                      "engine": engine},
        }
        print(json.dumps(result, indent=1))
        if not result["depths_agree"]:
            raise SystemExit("the rebuilds and the engine disagree on queue depths")
    finally:
        if args.keep:
            progress(f"kept {home}")
        else:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
