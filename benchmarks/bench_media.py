#!/usr/bin/env python3
"""Media recovery rates: recording a media image of a deep queue, and recreating
the queue from it (``harbormq image`` / ``harbormq recreate``).

1. Create a queue manager with a LINEAR log (extents of --log-file-pages,
   default 65535 pages = 256 MiB) and fill one queue with --messages
   persistent messages of --body bytes (units of work of 1,000 puts, issued on
   the queue manager's loop), then checkpoint so that the store holds them all.
2. Image: ``images.image_object`` on the queue, timed. Rate = image payload
   bytes (the encoded messages in its CHUNK records) and messages per second.
3. Recreate: ``recreate.recreate_queue``, timed: the store is rebuilt from the
   image (pass 1) and the log after it (pass 2), then put in place. Rate =
   image bytes and messages per second. The recreated queue's depth is checked
   against the number of messages put.

Prints one JSON object on stdout; progress on stderr.

    .venv/bin/python benchmarks/bench_media.py            # quick: 20,000 messages
    .venv/bin/python benchmarks/bench_media.py --full     # 1,000,000 x 1 KiB
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import tempfile
import time
from pathlib import Path

# _common first: it puts src/ on the path when harbormq is not installed
from _common import dir_bytes, make_progress, peak_rss_mb  # noqa: I001

from harbormq import QueueManager
from harbormq.log.records import Message
from harbormq.qmgr import lifecycle as qmgr
from harbormq.recovery import images, recreate

QM_NAME = "BENCHMEDIA"
QUEUE = "BENCH.MEDIA"
progress = make_progress("bench_media")


async def fill(core, messages: int, body: bytes, batch: int = 1000) -> None:
    done = 0
    while done < messages:
        uow = core.begin("bench")
        n = min(batch, messages - done)
        for _ in range(n):
            await core.put(QUEUE, Message(body=body, persistent=True), uow)
        await core.commit(uow)
        done += n
        if done % 100_000 < batch:
            progress(f"put {done}/{messages}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--full", action="store_true", help="1,000,000 messages of 1 KiB")
    ap.add_argument("--messages", type=int)
    ap.add_argument("--body", type=int, default=1024, help="body bytes (default 1024)")
    ap.add_argument("--log-file-pages", type=int, default=65535)
    ap.add_argument("--keep", action="store_true", help="keep the HARBORMQ_HOME")
    args = ap.parse_args()
    messages = args.messages or (1_000_000 if args.full else 20_000)
    home = Path(tempfile.mkdtemp(prefix="bench_media."))
    out: dict = {"benchmark": "bench_media", "messages": messages, "body_bytes": args.body,
                 "python": platform.python_version(), "home": str(home)}
    try:
        qmgr.create(QM_NAME, home=home, log_type="linear", log_file_pages=args.log_file_pages,
                    checkpoint_records=1_000_000_000)
        with QueueManager.open(QM_NAME, home=home) as qm:
            core = qm.core
            qm.define_queue(QUEUE, DEFPSIST="YES", MAXDEPTH=999_999_999)
            t0 = time.perf_counter()
            qm._call(fill(core, messages, b"b" * args.body))
            qm.checkpoint()
            out["fill_seconds"] = round(time.perf_counter() - t0, 2)
            out["store_bytes"] = dir_bytes(home / "qmgrs" / QM_NAME / "queues")

            last = [0.0]

            def report(obj: str, done: int, total: int) -> None:
                now = time.perf_counter()
                if now - last[0] >= 5 or done >= total:
                    last[0] = now
                    progress(f"{obj}: {done}/{total}")

            t0 = time.perf_counter()
            image = qm._call(images.image_object(core, QUEUE, report))
            secs = time.perf_counter() - t0
            out["image"] = {"seconds": round(secs, 2), "messages": image["messages"],
                            "bytes": image["bytes"],
                            "MB_per_s": round(image["bytes"] / 1e6 / secs, 1),
                            "msgs_per_s": round(image["messages"] / secs)}
            progress(f"image: {out['image']}")

            t0 = time.perf_counter()
            result = qm._call(recreate.recreate_queue(core, QUEUE, report))
            secs = time.perf_counter() - t0
            out["recreate"] = {"seconds": round(secs, 2), "messages": result["messages"],
                               "records_replayed": result["records"],
                               "MB_per_s": round(image["bytes"] / 1e6 / secs, 1),
                               "msgs_per_s": round(result["messages"] / secs)}
            progress(f"recreate: {out['recreate']}")
            depth = qm.queue_status(QUEUE)["CURDEPTH"]
            out["depth_after_recreate"] = depth
            out["depth_ok"] = depth == messages == result["messages"]
        out["peak_rss_mb"] = peak_rss_mb()
    finally:
        if not args.keep:
            shutil.rmtree(home, ignore_errors=True)
    print(json.dumps(out))
    return 0 if out.get("depth_ok") else 1


if __name__ == "__main__":
    raise SystemExit(main())
