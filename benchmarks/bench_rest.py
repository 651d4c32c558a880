#!/usr/bin/env python3
"""MQ's REST API on harbormq's HTTP front end: what a request costs.

One queue manager process with ``[web]`` (plain HTTP on loopback, the
owner's anonymous requests, so no password check is timed) and keep-alive
connections from this process's threads:

* put: --messages persistent 1 KiB POSTs from --clients threads (each a
  kept-alive connection): messages/s, p50/p99 of a request; then as many
  nonPersistent (the HTTP path without waiting for a force);
* get: the same messages taken by DELETE (each a unit of work committed
  once its answer is written);
* browse: --deep messages put over STOMP on one queue, then a messagelist
  page of 100 at the head, the next page (after a message this listener
  served, remembered), and the page after a message it never served near
  the tail (looked for from the head, a chunk per loop turn);
* mqsc: runCommand ``DISPLAY QLOCAL(*)`` over --queues queues.

Prints one JSON object on stdout; progress on stderr.

    .venv/bin/python benchmarks/bench_rest.py                   # 2,000 messages
    .venv/bin/python benchmarks/bench_rest.py --full            # 20,000, a 100,000-deep queue
"""

from __future__ import annotations

import argparse
import http.client
import json
import platform
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import _common  # noqa: F401  (src path)
from _common import make_progress

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.stomp_helpers import QMServer, raw_connected, send_all  # noqa: E402
from support.web_helpers import start_web  # noqa: E402

progress = make_progress("bench_rest")
QM = "QB"
MSG = f"/ibmmq/rest/v2/messaging/qmgr/{QM}/queue/{{}}/message"
CSRF = {"ibm-mq-rest-csrf-token": "x"}


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return round(values[min(len(values) - 1, int(p / 100 * len(values)))] * 1000, 3)


def run_clients(port: int, clients: int, count: int, request) -> dict:
    """``count`` requests shared by ``clients`` threads on kept-alive
    connections; ``request(conn, i)`` makes one and checks its answer."""
    times: list[float] = []
    lock = threading.Lock()
    next_i = iter(range(count))

    def worker():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        mine = []
        while True:
            with lock:
                i = next(next_i, None)
            if i is None:
                break
            t = time.perf_counter()
            request(conn, i)
            mine.append(time.perf_counter() - t)
        conn.close()
        with lock:
            times.extend(mine)

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.perf_counter() - started
    return {"requests": count, "clients": clients, "seconds": round(took, 3),
            "per_s": round(count / took, 1), "p50_ms": pct(times, 50), "p99_ms": pct(times, 99)}


def call(conn: http.client.HTTPConnection, method: str, path: str, body=None,
         headers=None) -> tuple[int, dict, bytes]:
    for attempt in (1, 2):
        try:
            conn.request(method, path, body=body, headers={**CSRF, **(headers or {})})
            r = conn.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            conn.close()              # an idle kept-alive connection was closed: again
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def mqsc(conn, command: str) -> dict:
    status, _h, data = call(conn, "POST", f"/ibmmq/rest/v2/admin/action/qmgr/{QM}/mqsc",
                            json.dumps({"type": "runCommand",
                                        "parameters": {"command": command}}),
                            {"Content-Type": "application/json"})
    assert status == 200, data
    return json.loads(data)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--messages", type=int)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--deep", type=int)
    ap.add_argument("--queues", type=int)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    messages = args.messages or (20_000 if args.full else 2_000)
    deep = args.deep or (100_000 if args.full else 10_000)
    queues = args.queues or (1_000 if args.full else 200)
    home = Path(tempfile.mkdtemp(prefix="bench_rest."))
    srv = QMServer(home / "hmq", QM)
    out: dict = {"benchmark": "bench_rest", "python": platform.python_version(),
                 "messages": messages, "body_bytes": 1024}
    try:
        srv.create(log_file_pages=4096)
        start_web(srv)
        port = srv.web_port
        admin = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        mqsc(admin, "DEFINE QLOCAL(B.Q) MAXDEPTH(1000000)")
        body = b"x" * 1024
        progress(f"put {messages}")

        def put(conn, i):
            status, _h, data = call(conn, "POST", MSG.format("B.Q"), body,
                                    {"ibm-mq-md-persistence": "persistent",
                                     "Content-Type": "application/octet-stream"})
            assert status == 201, data
        out["put"] = run_clients(port, args.clients, messages, put)
        progress(f"put {messages} nonPersistent (the HTTP path without a force)")

        def put_np(conn, i):
            status, _h, data = call(conn, "POST", MSG.format("B.NP"), body,
                                    {"ibm-mq-md-persistence": "nonPersistent",
                                     "Content-Type": "application/octet-stream"})
            assert status == 201, data
        mqsc(admin, "DEFINE QLOCAL(B.NP) MAXDEPTH(1000000)")
        out["put_nonpersistent"] = run_clients(port, args.clients, messages, put_np)
        progress(f"get {messages}")

        def get(conn, i):
            status, _h, data = call(conn, "DELETE", MSG.format("B.Q"))
            assert status == 200 and len(data) == 1024, (status, data[:200])
        out["get"] = run_clients(port, args.clients, messages, get)

        progress(f"fill a queue {deep} deep over STOMP (ids this listener never served)")
        mqsc(admin, "DEFINE QLOCAL(B.DEEP) MAXDEPTH(10000000)")
        c = raw_connected(srv.port)
        t = time.perf_counter()
        send_all(c, "B.DEEP", (b"d%d" % i for i in range(deep)), persistent="false")
        out["fill_deep_stomp_s"] = round(time.perf_counter() - t, 3)
        c.close()
        lister = f"/ibmmq/rest/v2/messaging/qmgr/{QM}/queue/B.DEEP/messagelist?limit=100"
        timings = {}
        t = time.perf_counter()
        status, _h, data = call(admin, "GET", lister)
        timings["head_page_ms"] = round((time.perf_counter() - t) * 1000, 3)
        page = json.loads(data)
        t = time.perf_counter()
        status, _h, data = call(admin, "GET", page["nextPage"])
        timings["next_page_remembered_ms"] = round((time.perf_counter() - t) * 1000, 3)
        assert status == 200
        # the id of the message before the tail: the queue manager's ids count up
        # (bytes 12-20), and the SENDs were one after another
        head = bytes.fromhex(page["messages"][0]["messageId"])
        counter = int.from_bytes(head[12:20], "big") + deep - 2
        before_tail = (head[:12] + counter.to_bytes(8, "big") + head[20:]).hex()
        t = time.perf_counter()
        status, _h, data = call(admin, "GET", lister + f"&afterMessageId={before_tail}")
        timings["page_after_unknown_id_near_tail_ms"] = round(
            (time.perf_counter() - t) * 1000, 3)
        assert status == 200 and len(json.loads(data)["messages"]) == 1, data[:300]
        out["browse"] = {"depth": deep, **timings}
        progress(f"{queues} queues for DISPLAY QLOCAL(*)")
        for i in range(queues):
            mqsc(admin, f"DEFINE QLOCAL(B.MANY.{i:06d})")
        t = time.perf_counter()
        doc = mqsc(admin, "DISPLAY QLOCAL(*) CURDEPTH")
        out["mqsc_display_all"] = {"queues": len(doc["commandResponse"]),
                                   "ms": round((time.perf_counter() - t) * 1000, 3)}
        admin.close()
    finally:
        srv.stop()
        if not args.keep:
            shutil.rmtree(home, ignore_errors=True)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
