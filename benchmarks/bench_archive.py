#!/usr/bin/env python3
"""Log archiving: the archive rate, and what archiving costs the work it runs beside.

1. A queue manager with a linear log, ``log.management = "archive"`` and one or
   two archive paths (--paths). A writer puts and gets persistent 4 KiB
   messages until --log-mb of log is written, with the built-in archiver
   copying each extent as it closes (the "with" run), and once more with
   ``management = "manual"``, where nothing is archived (the "without" run).
   Throughput of the writer in messages/s for each run.
2. The archive rate: the extents left unarchived by the "without" run are
   archived in one go (``archive_pending``), timed: MB/s of extent copied per
   archive path (each copy is read, hashed with SHA-256, written and fsynced).

Prints one JSON object on stdout; progress on stderr.

    .venv/bin/python benchmarks/bench_archive.py               # 128 MB of log
    .venv/bin/python benchmarks/bench_archive.py --log-mb 1024 --paths 2
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (src path)
from _common import make_progress

from harbormq import QueueManager
from harbormq.qmgr import lifecycle as qmgr

progress = make_progress("bench_archive")


def run(home: Path, name: str, management: str, paths: list[Path], log_mb: int,
        pages: int) -> dict:
    qmgr.create(name, home=home, log_type="linear", log_file_pages=pages,
                log_management=management, log_archive_paths=paths)
    qm = QueueManager.open(name, home=home)
    qm.define_queue("BENCH", DEFPSIST="YES", MAXDEPTH=10_000_000)
    body = os.urandom(4096)
    target = qm.core.log.end_lsn + (log_mb << 20)
    n, t0 = 0, time.perf_counter()
    while qm.core.log.end_lsn < target:
        qm.put("BENCH", body)
        qm.get("BENCH")
        n += 1
    elapsed = time.perf_counter() - t0
    progress(f"{management}: {n} put+get pairs in {elapsed:.1f} s")
    out = {"management": management, "messages": n, "seconds": round(elapsed, 2),
           "messages_per_s": round(n / elapsed)}
    if management == "manual" and paths:
        closed = qm.core.log.closed_extents()
        size = sum(qm.core.log.extent_path(e.number).stat().st_size for e in closed)
        t0 = time.perf_counter()
        qm._call(qm.core.log_management.archive_pending())
        secs = time.perf_counter() - t0
        out.update(archived_extents=len(closed), archived_mb=round(size / 2**20, 1),
                   archive_seconds=round(secs, 2),
                   archive_mb_per_s_per_path=round(size / 2**20 * len(paths) / secs, 1))
        progress(f"archived {len(closed)} extents ({size >> 20} MB) to {len(paths)} "
                 f"path(s) in {secs:.1f} s")
    qm.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log-mb", type=int, default=128)
    ap.add_argument("--pages", type=int, default=4096, help="extent size in 4 KiB pages")
    ap.add_argument("--paths", type=int, default=1, choices=(1, 2))
    ap.add_argument("--dir", type=Path, default=None, help="where to work (default: tmp)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(dir=args.dir, prefix="hmq-bench-archive-"))
    try:
        paths = [work / f"arch{i}" for i in range(args.paths)]
        with_archiving = run(work / "a", "ARCH", "archive", paths, args.log_mb, args.pages)
        without = run(work / "b", "NOARCH", "manual", [work / f"b-arch{i}"
                                                        for i in range(args.paths)],
                      args.log_mb, args.pages)
        print(json.dumps({
            "benchmark": "archive", "log_mb": args.log_mb, "extent_mb": args.pages * 4 / 1024,
            "archive_paths": args.paths, "with_archiving": with_archiving,
            "without_archiving": without,
            "throughput_kept": round(with_archiving["messages_per_s"] /
                                     without["messages_per_s"], 3),
            "archive_mb_per_s_per_path": without.get("archive_mb_per_s_per_path"),
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                        "loadavg": os.getloadavg()},
        }, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
