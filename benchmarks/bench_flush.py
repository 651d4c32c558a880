#!/usr/bin/env python3
"""How fast the stores take what the log took: the store flush rate against the
log append rate.

A queue manager is opened in this process (``QueueManager.open``, a linear
log of 256 MB extents with automatic checkpoints off, so no extent switch
either up to ``--mb`` 200, and the lazy flush by interval and by count off:
nothing flushes behind the measurement's back; ``stores_flushed`` says the
flush found every store dirty). For each case (``--sizes`` 1024,65536 bytes
x ``--queues`` 1,100), ``--mb`` (64) megabytes of persistent messages are put
outside units of work, spread round-robin over the queues, in batches of
``--batch`` (512) puts sharing one force, as a server's producers would: the
**append** rate is those bytes over the time from the first put to the last
force. Then one ``flush_all`` (what a checkpoint runs: every dirty store
written in one synced LMDB transaction each, on the store I/O thread) writes
them: the **flush** rate is the same bytes over its time. ``flush_vs_append``
above 1 means the flush keeps up with an ingest at that append rate: a store
flush running beside the log's appends frees log space at least as fast as
the producers fill it.

The append rate here has no STOMP in it (the puts come from this process's
own loop), so it is above what the server's producers reach
(``bench_backlog.py`` measures that end to end): a flush faster than this
append is faster than any producer over STOMP.

    .venv/bin/python benchmarks/bench_flush.py                    # 4 cases, 64 MB each
    .venv/bin/python benchmarks/bench_flush.py --mb 256 --sizes 1024 --queues 1
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from _common import make_progress  # puts src/ on the path

progress = make_progress("bench_flush")


def run_case(home: Path, size: int, queues: int, mb: int, batch: int) -> dict:
    from harbormq.api import QueueManager
    from harbormq.config import QMConfig
    from harbormq.log.records import Message
    from harbormq.qmgr import lifecycle as qmgr

    name = f"FL{size}Q{queues}"
    qmgr.create(name, home=home, log_type="linear", log_file_pages=65535,
                checkpoint_records=10 ** 9, port=0)
    cfg = QMConfig.load(name, home=home)
    # no flush behind the measurement's back: not by interval, not by count
    cfg.tuning.flush_interval_ms = 10 ** 9
    cfg.tuning.flush_max_entries = 10 ** 12
    cfg.save()
    qm = QueueManager.open(name, home=home)
    try:
        names = [f"Q{i:03d}" for i in range(queues)]
        for q in names:
            qm.define_queue(q, MAXDEPTH=999_999_999, DEFPSIST="YES")
        count = max(1, mb * 1024 * 1024 // size)
        body = b"x" * size
        core = qm.core

        async def append() -> float:
            t0 = time.perf_counter()
            forced = None
            for i in range(count):
                _msg, forced = core.put_nowait(names[i % queues],
                                               Message(body=body, persistent=True))
                if i % batch == batch - 1:
                    await forced
            await forced
            return time.perf_counter() - t0

        async def flush() -> tuple[float, int]:
            t0 = time.perf_counter()
            stores = await core.flush_all()
            return time.perf_counter() - t0, stores

        append_s = qm._call(append())
        flush_s, stores = qm._call(flush())
        data_mb = count * size / 1e6
        res = {
            "body_size": size, "queues": queues, "messages": count, "data_mb": round(data_mb, 1),
            "append_s": round(append_s, 2), "append_mb_per_s": round(data_mb / append_s, 1),
            "flush_s": round(flush_s, 2), "flush_mb_per_s": round(data_mb / flush_s, 1),
            "stores_flushed": stores,
            "flush_vs_append": round(append_s / flush_s, 2),
        }
        progress(json.dumps(res))
        return res
    finally:
        qm.close("immediate")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=64)
    ap.add_argument("--sizes", default="1024,65536")
    ap.add_argument("--queues", default="1,100")
    ap.add_argument("--batch", type=int, default=512)
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="hmq-flush-"))
    try:
        cases = [run_case(home, int(s), int(q), args.mb, args.batch)
                 for s in args.sizes.split(",") for q in args.queues.split(",")]
    finally:
        shutil.rmtree(home, ignore_errors=True)
    print(json.dumps({"benchmark": "flush", "cases": cases}))


if __name__ == "__main__":
    main()
