#!/usr/bin/env python3
"""The web console at size: its queue page with 10,000 queues and browsing a
1,000,000-message queue, in headless Chromium, and the server's memory.

A queue manager is made with ``--queues`` local queues (``--full``: 10,000)
and one queue, ``DEEP``, of ``--messages`` persistent 100-byte messages
(``--full``: 1,000,000),
loaded through the embedded API before the server starts: defines 500 at a
time, messages in units of work of 5,000, each unit one call onto the
queue manager's loop (the core's own put and commit: real persisted messages).
Then ``harbormq start`` with ``[web]`` and a user, and:

* **time to first paint**, in Chromium (Selenium, ``tests/support/browser.py``):
  from the navigation's start to the first table of the page drawn
  (``window.harbormqFirstView``, set by console.js), and the browser's
  first-contentful-paint, for the queue page (page 1 of the 10,000, by name)
  and for ``DEEP``'s first page of messages, each the median of ``--rounds``
  loads;
* **the JSON behind them**, timed from Python (median of ``--rounds``): the
  queue list's first and last page, by name and deepest first, a filtered
  one; the first page of ``DEEP``, a page in its middle and its last page
  (from cursors made from the message keys, as a user paging there would hold);
* **the server's memory**: its resident size after the start, after the
  queue pages, after the browsing, after ``--rounds`` scrapes of ``/metrics``,
  after the browser, and its peak (VmHWM), from /proc.

    .venv/bin/python benchmarks/bench_console.py            # 1,000 queues, 100,000 messages
    .venv/bin/python benchmarks/bench_console.py --full     # 10,000 and 1,000,000
    .venv/bin/python benchmarks/bench_console.py --full --keep DIR   # load once, rerun

Progress to stderr, one JSON object to stdout. Not part of CI.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import tomli_w  # noqa: E402
from _common import make_progress  # noqa: E402

progress = make_progress("console")
USER, PASSWORD = "bench", "benchpw"
START_TIMEOUT_S = 1800


#: queues defined at once on the loop (their log forces group-commit)
DEFINE_BATCH = 500
#: messages in one unit of work of the load, put in one call onto the loop
LOAD_UNIT = 5_000


async def _define_all(core, names: list[str]) -> None:
    import asyncio
    await asyncio.gather(*(core.define_queue(name) for name in names))


async def _put_unit(qm, queue: str, body: bytes, count: int) -> None:
    """``count`` persistent messages in one unit of work, committed (forced)
    before it returns: the core's own put and commit, one hop onto the loop
    for the whole unit instead of one a message."""
    uow = qm.core.begin("bench-console")
    for _ in range(count):
        msg = qm._message(queue, body, True, None, None, None, None, "", "", None)
        await qm.core.put(queue, msg, uow)
    await qm.core.commit(uow)


def load(home: Path, name: str, queues: int, messages: int) -> dict:
    """The queues and DEEP's messages, written before the server starts through
    the embedded API's queue manager (real definitions and persisted messages,
    in the log and the stores like any others)."""
    from harbormq import QueueManager
    qm = QueueManager.open(name, home=home)
    t0 = time.monotonic()
    try:
        for first in range(0, queues, DEFINE_BATCH):
            names = [f"APP.Q{i:05d}" for i in range(first, min(first + DEFINE_BATCH, queues))]
            qm._call(_define_all(qm.core, names))
            if (first + len(names)) % 2000 == 0:
                progress(f"{first + len(names)} queues defined")
        defined = time.monotonic()
        qm.define_queue("DEEP", MAXDEPTH=str(max(messages, 5000)), DEFPSIST="YES")
        body = b"x" * 100
        for start in range(0, messages, LOAD_UNIT):
            qm._call(_put_unit(qm, "DEEP", body, min(LOAD_UNIT, messages - start)))
            if start and start % 100_000 == 0:
                progress(f"{start} messages put")
    finally:
        qm.close("controlled")
    loaded = time.monotonic()
    return {"define_s": round(defined - t0, 1), "put_s": round(loaded - defined, 1),
            "load_s": round(loaded - t0, 1)}


def server_memory(pid: int) -> dict:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = round(int(value.split()[0]) / 1024, 1)
    return out


def timed_json(client, path: str, rounds: int) -> dict:
    times, body = [], None
    for _ in range(rounds):
        t = time.perf_counter()
        status, body = client.json("GET", path)
        times.append(time.perf_counter() - t)
        assert status == 200, (path, status, body)
    return {"median_ms": round(statistics.median(times) * 1000, 1),
            "bytes": len(json.dumps(body))}, body


def first_paint(driver, url: str, ready_js: str, rounds: int) -> dict:
    """Median over ``rounds`` loads of ``url``: navigation start to the first
    table drawn, and to first-contentful-paint."""
    views, fcps = [], []
    for _ in range(rounds):
        driver.get("about:blank")
        driver.get(url)
        end = time.monotonic() + 60
        while not driver.execute_script(ready_js):
            assert time.monotonic() < end, f"{url}: nothing drawn in 60 s"
            time.sleep(0.02)
        views.append(driver.execute_script("return window.harbormqFirstView"))
        fcps.append(driver.execute_script(
            "const p = performance.getEntriesByName('first-contentful-paint')[0];"
            "return p ? p.startTime : null") or 0)
    return {"first_table_ms": round(statistics.median(views), 1),
            "first_contentful_paint_ms": round(statistics.median(fcps), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--full", action="store_true",
                    help="the issue's sizes: 10,000 queues, 1,000,000 messages")
    ap.add_argument("--queues", type=int, help="local queues (quick 1,000, --full 10,000)")
    ap.add_argument("--messages", type=int,
                    help="messages on DEEP (quick 100,000, --full 1,000,000)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keep", type=Path,
                    help="load into this directory and keep it; a later run given the "
                         "same directory starts the queue manager loaded there (no load)")
    args = ap.parse_args()
    if args.queues is None:
        args.queues = 10_000 if args.full else 1_000
    if args.messages is None:
        args.messages = 1_000_000 if args.full else 100_000

    from support.browser import headless_driver
    from support.stomp_helpers import QMServer
    from support.web_helpers import WebClient, web_entry

    from harbormq.log.records import key_parts, message_key

    with contextlib.ExitStack() as scope:
        scratch = args.keep or Path(scope.enter_context(
            tempfile.TemporaryDirectory(prefix="hmq-bench-console-")))
        srv = QMServer(scratch / "hmq", "QB")
        loaded_file = scratch / "loaded.json"
        if loaded_file.exists():
            loaded = json.loads(loaded_file.read_text())
            args.queues, args.messages = loaded["queues"], loaded["messages"]
            progress(f"reusing {scratch}: {loaded}")
        else:
            srv.create(log_file_pages=4096, log_type="linear")
            progress(f"loading {args.queues} queues and {args.messages} messages")
            loaded = load(srv.home, "QB", args.queues, args.messages)
            loaded.update(queues=args.queues, messages=args.messages,
                          loader_memory_mb=server_memory(os.getpid()))
            progress(f"loaded: {loaded}")
            config = tomllib.loads(srv.config_path.read_text())
            config["web"] = {"port": 0}
            srv.config_path.write_text(tomli_w.dumps(config))
            srv.user_add(USER, PASSWORD, "mqm")
            loaded_file.write_text(json.dumps(loaded))
        started = time.monotonic()
        # a start that opens 10,000 queue stores takes minutes on a loaded machine
        srv.start(timeout=START_TIMEOUT_S)
        srv.web_port = web_entry(srv)["port"]
        start_s = time.monotonic() - started
        pid = srv.proc.pid
        mem = {"after_start": server_memory(pid)}
        client = WebClient(srv.web_port, USER, PASSWORD)
        rounds = args.rounds
        api = {}
        last = max(0, args.queues - 50)
        for label, path in (
                ("queues_first_page", "/console/api/queues?limit=50"),
                ("queues_last_page", f"/console/api/queues?limit=50&offset={last}"),
                ("queues_deepest_first", "/console/api/queues?limit=50&sort=depth"),
                ("queues_filtered", "/console/api/queues?limit=50&filter=APP.Q09*")):
            api[label], _ = timed_json(client, path, rounds)
        mem["after_queue_pages"] = server_memory(pid)
        timing, body = timed_json(client, "/console/api/queues/DEEP/messages?limit=50", rounds)
        api["browse_first_page"] = timing
        # a cursor is the key of the message before the page: the first message's
        # key (the cursor after a page of one), then consecutive put sequences
        _, one = timed_json(client, "/console/api/queues/DEEP/messages?limit=1", 1)
        priority, first_seq = key_parts(bytes.fromhex(one["next"]))
        for label, skip in (("browse_middle_page", args.messages // 2),
                            ("browse_last_page", max(0, args.messages - 51))):
            cursor = message_key(priority, first_seq + skip - 1).hex() if skip else ""
            api[label], page = timed_json(
                client, f"/console/api/queues/DEEP/messages?limit=50&after={cursor}", rounds)
            api[label]["messages"] = len(page["messages"])
        api["queue_depth_reported"] = body["depth"]
        mem["after_browse"] = server_memory(pid)
        scrapes = []
        for _ in range(rounds):
            t = time.perf_counter()
            status, _, data = client.call("GET", "/metrics")
            scrapes.append(time.perf_counter() - t)
            assert status == 200, (status, data[:200])
        api["metrics_scrape"] = {"median_ms": round(statistics.median(scrapes) * 1000, 1),
                                 "bytes": len(data)}
        mem["after_metrics"] = server_memory(pid)

        base = f"http://127.0.0.1:{srv.web_port}/console/"
        with headless_driver() as driver:
            driver.get(base)
            driver.execute_script(
                "sessionStorage.setItem('harbormq-console-auth', arguments[0])",
                client.auth)
            paint = {
                "queue_page": first_paint(
                    driver, base + "#queues",
                    "return document.querySelectorAll('#queue-table tbody tr').length > 0 "
                    "&& window.harbormqFirstView", rounds),
                "browse_page": first_paint(
                    driver, base + "#queue/DEEP",
                    "return document.querySelectorAll('#message-table tbody tr').length > 0 "
                    "&& window.harbormqFirstView", rounds),
            }
        mem["after_browser"] = server_memory(pid)
        srv.stop()
    print(json.dumps({"benchmark": "console", "queues": args.queues,
                      "messages": args.messages, "rounds": rounds, "load": loaded,
                      "load_average": [round(x, 1) for x in os.getloadavg()],
                      "server_start_s": round(start_s, 1), "first_paint": paint,
                      "api": api, "server_memory_mb": mem}, indent=1))


if __name__ == "__main__":
    main()
