#!/usr/bin/env python3
"""Ingest throughput into the Parquet log lake (Spark local[2]).

Writes a log with _pipeline_log.generate, then times ``run_ingest`` twice: the
first ingest of everything, and a second one that finds nothing new (what
idempotence costs: planning and a read of the active extent's tail).

    .venv/bin/python benchmarks/bench_pipeline_ingest.py           # 300,000 records (quick)
    .venv/bin/python benchmarks/bench_pipeline_ingest.py --full    # 2,000,000 records
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from _common import dir_bytes, make_progress  # noqa: I001
from _pipeline_log import generate

progress = make_progress("bench_pipeline_ingest")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="300,000 records (the default)")
    ap.add_argument("--full", action="store_true", help="2,000,000 records")
    ap.add_argument("--records", type=int, default=None)
    args = ap.parse_args()
    records = args.records or (2_000_000 if args.full else 300_000)
    home = Path(tempfile.mkdtemp(prefix="hmq-bench-ingest-"))
    try:
        log = generate(home, records)
        from harbormq.pipeline.ingest import run_ingest
        from harbormq.pipeline.session import session
        spark = session("bench-ingest", "local[2]")
        lake = home / "lake"
        runs = {}
        for name in ("first", "again"):
            t0 = time.perf_counter()
            got = run_ingest(spark, log["log_dir"], str(lake))
            s = time.perf_counter() - t0
            runs[name] = {"seconds": round(s, 2), "records": got["records"],
                          "records_per_s": round(got["records"] / s)}
            progress(f"{name}: {got['records']:,} records in {s:.1f} s")
        spark.stop()
        result = {
            "benchmark": "pipeline_ingest", "mode": "full" if args.full else "quick",
            "machine": {"cpus": os.cpu_count(), "load_average_at_end": os.getloadavg()},
            "log": {"records": log["records"], "bytes": log["log_bytes"]},
            "lake_bytes": dir_bytes(lake),
            "runs": runs,
            "first_mb_per_s": round(log["log_bytes"] / runs["first"]["seconds"] / 1e6, 1),
        }
        print(json.dumps(result, indent=1))
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
