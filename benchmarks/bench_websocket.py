#!/usr/bin/env python3
"""STOMP over WebSocket: round trips per second of a receipted SEND, harbormq's
``/ws`` beside RabbitMQ's Web-STOMP, from Python and from headless Chromium.

One round trip is a persistent SEND (``--non-persistent``: not) of a
100-byte body with a ``receipt`` header, then waiting for its RECEIPT before
the next SEND (one client, one connection): the latency of a durable put as a
browser or a script sees it. The clients:

* ``python``: ``websocket-client`` (blocking), raw STOMP frames, one per message;
* ``tcp``: the same over a plain STOMP TCP connection, the baseline that shows
  what WebSocket adds;
* ``raw-ws``: WebSocket framing written here in a few lines (not a library),
  so that what the server spends on WebSocket shows beside ``tcp``;
* ``chromium``: ``@stomp/stompjs`` from npm in Debian's headless Chromium
  (``publish`` + ``watchForReceipt``); installed on first use by
  ``tests/support/browser.py``, as the tests do.

The brokers run as real server processes on loopback on free ports, with
their storage in a scratch directory (``bench_peers.py`` starts them):

* harbormq: ``harbormq create`` defaults (circular log) plus a
  ``transport = "websocket"`` listener, a user for the browser's login (a
  browser's connection must log in);
* RabbitMQ (Debian's 3.10): ``rabbitmq_web_stomp`` in its enabled plugins
  file and ``rabbitmq_stomp`` enabled offline, Web-STOMP on ``/ws``; a receipt follows the publisher
  confirm (the message is on disk); ``--brokers harbormq`` leaves it out.

Each measurement lasts ``--seconds`` (5) after 50 unmeasured round trips; the
rounds (``--rounds``, 3) interleave the brokers and clients, and the median
of each is reported with p50/p99 latency. The machine's load average is
recorded before and after.

    .venv/bin/python benchmarks/bench_websocket.py
    .venv/bin/python benchmarks/bench_websocket.py --brokers harbormq --clients python

Progress to stderr, one JSON object to stdout. Not part of CI.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from _common import make_progress  # noqa: E402
from bench_peers import HarborMQ, RabbitMQ, ensure_packages, free_port  # noqa: E402
from bench_stomp import code_version, loadavg  # noqa: E402
from support.browser import run_page, stompjs_bundle, stompjs_version  # noqa: E402

progress = make_progress("bench_websocket")
BODY = "x" * 100
WARMUP = 50
WEB_USER, WEB_PASSWORD = "bench", "bench-password"


class HarborMQWebSocket(HarborMQ):
    """harbormq with a WebSocket listener and a user for the browser."""

    def __init__(self, scratch: Path):
        super().__init__(scratch)
        self.ws_port = free_port()
        self.ws_url = f"ws://127.0.0.1:{self.ws_port}/ws"
        self.login = {"login": WEB_USER, "passcode": WEB_PASSWORD}

    def create(self) -> None:
        from harbormq.config import QMConfig
        from harbormq.qmgr import lifecycle as qmgr
        from harbormq.security import UserStore
        qmgr.create(self.QM, home=self.dir, port=self.port, ws_port=self.ws_port)
        cfg = QMConfig.load(self.QM, home=self.dir)
        UserStore(cfg.users_path).add(WEB_USER, WEB_PASSWORD, ["mqm"])


class RabbitMQWebStomp(RabbitMQ):
    """RabbitMQ with Web-STOMP on /ws beside its STOMP listener."""

    def __init__(self, scratch: Path):
        super().__init__(scratch)
        self.ws_port = free_port()
        self.ws_url = f"ws://127.0.0.1:{self.ws_port}/ws"
        self.login = {"login": "guest", "passcode": "guest", "host": "/"}
        with open(self.dir / "rabbitmq.conf", "a") as f:
            f.write(f"web_stomp.tcp.port = {self.ws_port}\nweb_stomp.tcp.ip = 127.0.0.1\n")
        # Web-STOMP enabled in the plugins file; the peers' start enables
        # rabbitmq_stomp beside it (rabbitmq-plugins enable --offline keeps the rest)
        (self.dir / "enabled_plugins").write_text("[rabbitmq_web_stomp].\n")


# ---------------------------------------------------------------------- clients

class RawWsFrames:
    """Whole frames over WebSocket, the framing done here: one frame a message
    out (masked, as a client must), messages in until a frame is whole."""

    def __init__(self, url: str):
        host_port = url.split("//", 1)[1].split("/", 1)[0]
        host, port = host_port.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(f"GET /ws HTTP/1.1\r\nHost: {host_port}\r\nUpgrade: websocket\r\n"
                          f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                          "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: v12.stomp\r\n"
                          "\r\n".encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            self.buf += self._read()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise RuntimeError(f"WebSocket handshake refused: {head[:300]!r}")
        self.frames = b""

    def _read(self) -> bytes:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("the broker closed the connection")
        return data

    def send(self, text: str) -> None:
        payload = text.encode()
        n = len(payload)
        length = bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack("!H", n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(b"\x81" + length + mask + masked)

    def _message(self) -> bytes:
        while True:
            while len(self.buf) < 2:
                self.buf += self._read()
            opcode, n, off = self.buf[0] & 0x0F, self.buf[1] & 0x7F, 2
            if n == 126:
                while len(self.buf) < 4:
                    self.buf += self._read()
                n, off = struct.unpack("!H", self.buf[2:4])[0], 4
            elif n == 127:
                while len(self.buf) < 10:
                    self.buf += self._read()
                n, off = struct.unpack("!Q", self.buf[2:10])[0], 10
            while len(self.buf) < off + n:
                self.buf += self._read()
            payload, self.buf = self.buf[off:off + n], self.buf[off + n:]
            if opcode == 8:
                raise ConnectionError(f"the broker closed the WebSocket: {payload!r}")
            if opcode in (1, 2):
                return payload

    def recv(self) -> str:
        while b"\0" not in self.frames:
            self.frames += self._message()
        frame, _, self.frames = self.frames.partition(b"\0")
        return frame.lstrip(b"\r\n").decode()

    def close(self) -> None:
        self.sock.close()


class TcpFrames:
    """Whole frames over a plain STOMP TCP connection (the baseline)."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def send(self, text: str) -> None:
        self.sock.sendall(text.encode())

    def recv(self) -> str:
        while b"\0" not in self.buf:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("the broker closed the connection")
            self.buf += data
        frame, _, self.buf = self.buf.partition(b"\0")
        return frame.lstrip(b"\r\n").decode()

    def close(self) -> None:
        self.sock.close()


def python_round_trips(broker, queue: str, seconds: float, over: str,
                       persistent: str) -> dict:
    """Receipted SENDs from this process: ``over`` "ws", "raw-ws" or "tcp"."""
    if over == "raw-ws":
        conn = RawWsFrames(broker.ws_url)
    elif over == "ws":
        import websocket
        conn = websocket.create_connection(broker.ws_url, subprotocols=["v12.stomp"],
                                           timeout=30, suppress_origin=True,
                                           skip_utf8_validation=True)
    else:
        conn = TcpFrames(broker.port)
    try:
        connect = "".join(f"{k}:{v}\n" for k, v in broker.login.items())
        conn.send(f"CONNECT\naccept-version:1.2\nheart-beat:0,0\n{connect}\n\0")
        reply = conn.recv()
        if not reply.startswith("CONNECTED"):
            raise RuntimeError(f"{broker.name}: CONNECT over {over} answered {reply[:300]!r}")

        def round_trip(i: int) -> None:
            conn.send(f"SEND\ndestination:/queue/{queue}\npersistent:{persistent}\nreceipt:r{i}\n"
                      f"content-type:text/plain\n\n{BODY}\0")
            while True:
                frame = conn.recv()
                if frame.startswith("RECEIPT"):
                    return
                if frame.startswith("ERROR"):
                    raise RuntimeError(f"{broker.name}: {frame[:300]!r}")
        for i in range(WARMUP):
            round_trip(i)
        latencies = []
        t0 = time.perf_counter()
        end = t0 + seconds
        i = WARMUP
        while time.perf_counter() < end:
            s = time.perf_counter()
            round_trip(i)
            latencies.append(time.perf_counter() - s)
            i += 1
        elapsed = time.perf_counter() - t0
        return summary(len(latencies), elapsed, latencies)
    finally:
        conn.close()


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><script src="stomp.umd.min.js"></script></head>
<body><script>
const cfg = CONFIG;
let reported = false;      // the first report is the one: a close after it says nothing
const report = async (r) => {
  if (reported) return;
  reported = true;
  await fetch("/report", {method: "POST", body: JSON.stringify(r)});
};
const client = new StompJs.Client({brokerURL: cfg.url, connectHeaders: cfg.login,
  reconnectDelay: 0, heartbeatIncoming: 0, heartbeatOutgoing: 0});
const receipt = (id) => new Promise((res) => client.watchForReceipt(id, res));
client.onConnect = async () => {
  try {
    const trip = async (i) => {
      const r = receipt("r" + i);
      client.publish({destination: cfg.queue, body: cfg.body,
                      headers: {receipt: "r" + i, persistent: cfg.persistent}});
      await r;
    };
    let i = 0;
    for (; i < cfg.warmup; i++) await trip(i);
    const lat = [];
    const t0 = performance.now();
    const end = t0 + cfg.seconds * 1000;
    while (performance.now() < end) {
      const s = performance.now();
      await trip(i++);
      lat.push((performance.now() - s) / 1000);
    }
    await report({ok: true, n: lat.length, elapsed: (performance.now() - t0) / 1000, lat,
                  userAgent: navigator.userAgent});
  } catch (e) { await report({ok: false, error: String(e)}); }
  client.deactivate();
};
client.onStompError = (f) => report({ok: false, error: f.headers.message});
client.activate();
</script></body></html>
"""


def chromium_round_trips(broker, queue: str, seconds: float, page_dir: Path,
                         persistent: str) -> dict:
    config = {"url": broker.ws_url, "queue": f"/queue/{queue}", "login": broker.login,
              "body": BODY, "warmup": WARMUP, "seconds": seconds, "persistent": persistent}
    (page_dir / "index.html").write_text(PAGE.replace("CONFIG", json.dumps(config)))
    r = run_page(page_dir, "index.html", timeout=seconds + 120)
    if not r.get("ok"):
        raise RuntimeError(f"{broker.name} from chromium: {r}")
    out = summary(r["n"], r["elapsed"], r["lat"])
    out["user_agent"] = r["userAgent"]
    return out


def summary(n: int, elapsed: float, latencies: list[float]) -> dict:
    s = sorted(latencies)

    def at(q: float) -> float:
        return round(s[min(len(s) - 1, int(q * len(s)))] * 1000, 3) if s else None
    return {"round_trips": n, "seconds": round(elapsed, 3),
            "round_trips_per_s": round(n / elapsed, 1) if elapsed else None,
            "latency_ms": {"p50": at(0.5), "p99": at(0.99)}}


# ---------------------------------------------------------------------- the run

def start_broker(b) -> None:
    if isinstance(b, HarborMQ):
        b.create()                    # runs a loop of its own (the first start)
    took = asyncio.run(b.start())
    progress(f"{b.name} up in {took:.1f} s (WebSocket {b.ws_url})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--brokers", default="harbormq,rabbitmq")
    ap.add_argument("--clients", default="python,tcp,chromium")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--non-persistent", action="store_true",
                    help="non-persistent SENDs: no log force, the protocol's cost alone")
    args = ap.parse_args()
    names = [n for n in args.brokers.split(",") if n]
    persistent = "false" if args.non_persistent else "true"
    clients = [c for c in args.clients.split(",") if c]
    result = {"benchmark": "bench_websocket", "code": code_version(), "seconds": args.seconds,
              "rounds": args.rounds, "body_bytes": len(BODY), "persistent": persistent,
              "load_before": loadavg(), "brokers": {}, "errors": {}}
    scratch = Path(tempfile.mkdtemp(prefix="hmq-bench-ws-"))
    page_dir = scratch / "page"
    if "chromium" in clients:
        page_dir.mkdir()
        shutil.copy(stompjs_bundle(), page_dir / "stomp.umd.min.js")
        result["stompjs"] = stompjs_version()
    brokers = []
    try:
        if "rabbitmq" in names:
            ensure_packages(["rabbitmq"])
        for name in names:
            b = {"harbormq": HarborMQWebSocket, "rabbitmq": RabbitMQWebStomp}[name](scratch)
            try:
                start_broker(b)
            except Exception as exc:      # a peer that cannot run here is reported
                result["errors"][name] = f"{type(exc).__name__}: {exc}"[:2000]
                progress(f"{name} did not start: {exc}")
                b.stop()
                b.cleanup()
                continue
            brokers.append(b)
            result["brokers"][name] = {"version": b.version,
                                       **{c: {"runs": []} for c in clients}}
        for rnd in range(args.rounds):
            for b in brokers:
                for c in clients:
                    queue = f"WS.BENCH.{c.upper().replace('-', '_')}.{rnd}"
                    asyncio.run(b.prepare(queue))     # harbormq: MAXDEPTH for the run
                    if c in ("python", "tcp", "raw-ws"):
                        r = python_round_trips(b, queue, args.seconds,
                                               "ws" if c == "python" else c, persistent)
                    else:
                        r = chromium_round_trips(b, queue, args.seconds, page_dir, persistent)
                    progress(f"round {rnd + 1} {b.name} {c}: {r['round_trips_per_s']} "
                             f"round trips/s, p50 {r['latency_ms']['p50']} ms")
                    result["brokers"][b.name][c]["runs"].append(r)
        for b in brokers:
            for c in clients:
                runs = result["brokers"][b.name][c]["runs"]
                result["brokers"][b.name][c]["median_round_trips_per_s"] = statistics.median(
                    r["round_trips_per_s"] for r in runs) if runs else None
    finally:
        for b in brokers:
            b.stop()
            b.cleanup()
        shutil.rmtree(scratch, ignore_errors=True)
    result["load_after"] = loadavg()
    if "harbormq" in result["brokers"] and "rabbitmq" in result["brokers"]:
        result["harbormq_vs_rabbitmq"] = {
            c: round(result["brokers"]["harbormq"][c]["median_round_trips_per_s"] /
                     result["brokers"]["rabbitmq"][c]["median_round_trips_per_s"], 2)
            for c in clients}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
