#!/usr/bin/env python3
"""Decode throughput of the harbormq-log data source: records/s and MB/s per core.

Writes a log with _pipeline_log.generate (16 MiB extents), then measures
1. in one process, one core: ``rows.read_extent`` over every extent (what one
   Spark task runs), without and with message bodies, and with only the
   rebuild's columns (``rebuild.EVENT_COLUMNS``);
2. through Spark ``local[2]``: every column of every record forced
   (``write.format("noop")``), wall time of the action, and per core (/2).

    .venv/bin/python benchmarks/bench_pipeline_decode.py           # 300,000 records (quick)
    .venv/bin/python benchmarks/bench_pipeline_decode.py --full    # 2,000,000 records
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from _common import make_progress  # noqa: I001
from _pipeline_log import generate

progress = make_progress("bench_pipeline_decode")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="300,000 records (the default)")
    ap.add_argument("--full", action="store_true", help="2,000,000 records")
    ap.add_argument("--records", type=int, default=None)
    args = ap.parse_args()
    records = args.records or (2_000_000 if args.full else 300_000)
    home = Path(tempfile.mkdtemp(prefix="hmq-bench-decode-"))
    try:
        log = generate(home, records)
        from harbormq.pipeline.extents import plan_extents
        from harbormq.pipeline.rows import read_extent
        plans = plan_extents(log["log_dir"])
        from harbormq.pipeline.rebuild import EVENT_COLUMNS
        one_core = {}
        for name, bodies, columns in (("without_bodies", False, None),
                                      ("with_bodies", True, None),
                                      ("rebuild_columns", False, EVENT_COLUMNS)):
            t0 = time.perf_counter()
            n = sum(b.num_rows for p in plans
                    for b in read_extent(p, include_body=bodies, columns=columns))
            s = time.perf_counter() - t0
            one_core[name] = {
                "records": n, "seconds": round(s, 2), "records_per_s": round(n / s),
                "mb_per_s": round(log["log_bytes"] / s / 1e6, 1)}
            progress(f"one core, {name}: {n / s:,.0f} records/s")
        from harbormq.pipeline.session import session
        spark = session("bench-decode", "local[2]")
        df = spark.read.format("harbormq-log").option("includeBody", "true") \
            .load(log["log_dir"])
        df.limit(1).collect()          # JVM and Python workers warm
        t0 = time.perf_counter()
        df.write.format("noop").mode("overwrite").save()
        s = time.perf_counter() - t0
        spark.stop()
        result = {
            "benchmark": "pipeline_decode", "mode": "full" if args.full else "quick",
            "machine": {"cpus": os.cpu_count(), "load_average_at_end": os.getloadavg()},
            "log": {"records": log["records"], "bytes": log["log_bytes"],
                    "extents": len(plans)},
            "one_core": one_core,
            "spark_local2": {"seconds": round(s, 2),
                             "records_per_s": round(log["records"] / s),
                             "records_per_s_per_core": round(log["records"] / s / 2),
                             "mb_per_s_per_core": round(log["log_bytes"] / s / 2e6, 1)},
        }
        print(json.dumps(result, indent=1))
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
