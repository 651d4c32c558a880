#!/usr/bin/env python3
"""rebuild on Spark local[2] against a sequential replay of the same log by the
engine's restart recovery (target: Spark at least 1.3x faster on 2 cores).

1. Write a log of --records records (--full: 10,000,000, about 2 GB) with
   _pipeline_log.generate: a linear log of 16 MiB extents (the default size; one
   Spark input partition each), its queue manager
   never checkpointed after the queues were defined, so restart replays it all.
2. Time ``python -m harbormq.pipeline rebuild --log DIR --at-lsn END --master
   local[2]`` (all queues; wall time of the whole command: JVM start, decode,
   joins, Parquet and load files).
3. Time restart recovery of the same queue manager in a fresh process
   (``QueueManager.open``): forward recovery is the sequential replay of the
   same extents; the whole restart is reported too.
4. Check both agree: the rebuilt depth of every queue equals the queue's depth
   after restart.

Prints one JSON object on stdout; progress on stderr.

    .venv/bin/python benchmarks/bench_pipeline_rebuild.py           # 300,000 records (quick)
    .venv/bin/python benchmarks/bench_pipeline_rebuild.py --full    # 10,000,000 records
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="300,000 records (the default)")
    ap.add_argument("--full", action="store_true", help="the size the target is stated for")
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--driver-memory", default="6g")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()
    records = args.records or (10_000_000 if args.full else 300_000)
    home = Path(tempfile.mkdtemp(prefix="hmq-bench-rebuild-"))
    env = dict(os.environ, HARBORMQ_HOME=str(home))
    try:
        progress(f"writing a log of {records:,} records under {home}")
        log = generate(home, records)
        log_disk = dir_bytes(Path(log["log_dir"]))
        progress(f"log: {log['log_bytes'] / 1e9:.2f} GB of records in {log['write_seconds']} s")

        out = home / "rebuild"
        cmd = [sys.executable, "-m", "harbormq.pipeline", "rebuild", "--log", log["log_dir"],
               "--at-lsn", str(log["at_lsn"]), "--out", str(out), "--master", args.master,
               "--conf", f"spark.driver.memory={args.driver_memory}"]
        progress("spark rebuild: " + " ".join(cmd[1:]))
        t0 = time.perf_counter()
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        spark_s = time.perf_counter() - t0
        if done.returncode != 0:
            raise SystemExit(f"rebuild failed ({done.returncode}):\n{done.stderr[-4000:]}")
        stages = [ln for ln in done.stderr.splitlines() if ln.startswith("[harbormq rebuild]")]
        summary = json.loads(done.stdout.strip().splitlines()[-1])
        progress(f"spark rebuild: {spark_s:.1f} s")

        progress("engine restart (sequential replay) in a fresh process")
        t0 = time.perf_counter()
        rs = subprocess.run([sys.executable, "-c", RESTART_CHILD, QM_NAME, str(home)], env=env,
                            capture_output=True, text=True)
        if rs.returncode != 0:
            raise SystemExit(f"restart failed:\n{rs.stderr[-4000:]}")
        restart = json.loads(rs.stdout.strip().splitlines()[-1])
        fwd = restart["report"]["phases"]["forward recovery"]
        progress(f"engine: forward recovery {fwd:.1f} s, whole restart {restart['seconds']:.1f} s")
        rebuilt = {q: v["messages"] for q, v in summary["queues"].items()}
        agree = all(rebuilt.get(q, 0) == d for q, d in restart["depth"].items())
        result = {
            "benchmark": "pipeline_rebuild",
            "mode": "full" if args.full else "quick",
            "machine": {"cpus": os.cpu_count(), "load_average_at_end": os.getloadavg()},
            "log": {"records": log["records"], "bytes": log["log_bytes"], "disk_bytes": log_disk,
                    "write_seconds": log["write_seconds"]},
            "spark": {"master": args.master, "wall_seconds": round(spark_s, 1),
                      "records_per_s": round(log["records"] / spark_s),
                      "mb_per_s": round(log["log_bytes"] / spark_s / 1e6, 1),
                      "stages": stages},
            "engine_replay": {"forward_recovery_seconds": round(fwd, 1),
                              "restart_seconds": round(restart["seconds"], 1),
                              "records_replayed": restart["report"]["records_replayed"],
                              "records_per_s": round(restart["report"]["records_replayed"]
                                                     / fwd) if fwd else None},
            "speedup_vs_forward_recovery": round(fwd / spark_s, 2),
            "speedup_vs_whole_restart": round(restart["seconds"] / spark_s, 2),
            "target_speedup": 1.3,
            "depths_agree": agree,
            "depth": {"rebuild": rebuilt, "engine": restart["depth"]},
        }
        print(json.dumps(result, indent=1))
        if not agree:
            raise SystemExit("the rebuild and the engine disagree on queue depths")
    finally:
        if args.keep:
            progress(f"kept {home}")
        else:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
