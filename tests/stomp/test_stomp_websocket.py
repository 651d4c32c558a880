"""STOMP over WebSocket (``/ws``): the subprotocols and the HTTP errors of a
handshake that asks for none of them; sending and receiving with receipts and
client acknowledgement from a Python WebSocket client (frames several to a
message, split across messages, text and binary); heart-beats; the limits,
authentication and backpressure of TCP STOMP; and ``@stomp/stompjs`` from npm
in headless Chromium, which the test installs if it must
(``support/browser.py``).
"""

from __future__ import annotations

import json
import shutil
import socket
import time
import urllib.error
import urllib.request

import pytest
import websocket
from support.browser import run_page, stompjs_bundle
from support.stomp_helpers import (
    QMServer,
    bodies,
    deadline_wait,
    depth,
    expect_error,
    raw_connected,
    subscribe,
)
from support.websocket_stomp import WsStomp, ws_url


@pytest.fixture(scope="module")
def ws_server(tmp_path_factory):
    srv = QMServer(tmp_path_factory.mktemp("stompws") / "hmq", "QWS")
    srv.create(heartbeat_ms=500, max_frame_bytes=256 * 1024)
    srv.configure(listeners=[{"name": "STOMP", "host": "127.0.0.1", "port": 0},
                             {"name": "WS", "host": "127.0.0.1", "port": 0,
                              "transport": "websocket"}])
    srv.start()
    srv.ws = next(li for li in srv.listeners if li.get("transport") == "websocket")
    srv.url = ws_url(srv.ws)
    srv.user_add("web", "webpw", "mqm")
    yield srv
    srv.stop()


@pytest.fixture
def ws(ws_server):
    made = []

    def connect(**kw) -> WsStomp:
        c = WsStomp(ws_server.url, **kw)
        made.append(c)
        return c
    yield connect
    for c in made:
        c.close()


def test_listener_address_and_create_option(ws_server, tmp_path):
    assert ws_server.ws["path"] == "/ws" and ws_server.ws["host"] == "127.0.0.1"
    assert "STOMP over WebSocket listener WS started on ws://127.0.0.1:" in \
        ws_server.console() + (ws_server.qm_dir / "errors" / "HMQERR01.LOG").read_text()
    # harbormq create --ws-port adds the listener to qm.toml
    other = QMServer(tmp_path / "hmq", "QWC")
    other.home.mkdir(parents=True)
    other.cli("create", "QWC", "--port", "0", "--ws-port", "0", "--log-file-pages", "64")
    text = other.config_path.read_text()
    assert 'transport = "websocket"' in text and 'name = "WS"' in text


def test_subprotocols_negotiated(ws_server, ws):
    assert ws().subprotocol == "v12.stomp"
    assert ws(subprotocols=["v10.stomp"]).subprotocol == "v10.stomp"
    # the client's order of preference, among the ones the server speaks
    assert ws(subprotocols=["mqtt", "v11.stomp", "v12.stomp"]).subprotocol == "v11.stomp"


@pytest.mark.parametrize("offered", [["mqtt"], []])
def test_no_stomp_subprotocol_is_refused(ws_server, offered):
    with pytest.raises(websocket.WebSocketBadStatusException) as err:
        websocket.create_connection(ws_server.url, subprotocols=offered or None, timeout=10,
                                    suppress_origin=True)
    assert err.value.status_code == 400
    text = err.value.resp_body.decode()
    assert "v12.stomp, v11.stomp, v10.stomp" in text
    assert ("offered mqtt" if offered else "offered no subprotocol") in text


def test_plain_http_is_told_to_upgrade(ws_server):
    base = f"http://127.0.0.1:{ws_server.ws['port']}"
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(base + "/ws", timeout=10)
    assert err.value.code == 426 and "STOMP over WebSocket" in err.value.read().decode()
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(base + "/other", timeout=10)
    assert err.value.code == 404


def test_send_receive_receipts_client_ack(ws_server, ws):
    c = ws()
    assert c.connect()["version"] == "1.2"
    # three SENDs with receipts in one WebSocket message: three RECEIPTs in order
    c.send_message(b"".join(
        f"SEND\ndestination:/queue/WS.ACK\nreceipt:s{i}\npersistent:true\n\nmsg {i}\0".encode()
        for i in range(3)))
    assert [c.expect("RECEIPT")["receipt-id"] for _ in range(3)] == ["s0", "s1", "s2"]
    subscribe(c, "WS.ACK", ack="client-individual")
    got = c.messages(3)
    assert bodies(got) == [b"msg 0", b"msg 1", b"msg 2"]
    for m in got[:2]:
        c.call("ACK", {"id": m["ack"]})
    c.close()
    # the one not acknowledged is backed out when the WebSocket closes
    deadline_wait(lambda: depth(ws_server, "WS.ACK") == 1, what="the backout")
    # the one not acknowledged comes again, to a client over TCP this time
    t = raw_connected(ws_server.port)
    try:
        subscribe(t, "WS.ACK", ack="client-individual")
        again = t.messages(1)[0]
        assert again.body == b"msg 2" and again["redelivered"] == "true"
        t.call("ACK", {"id": again["ack"]})
    finally:
        t.close()
    assert depth(ws_server, "WS.ACK") == 0


def test_frames_split_binary_and_text(ws_server, ws):
    c = ws()
    c.connect()
    frame = b"SEND\ndestination:/queue/WS.SPLIT\nreceipt:split\n\nin two parts\0"
    c.send_message(frame[:20])
    c.send_message(frame[20:])
    assert c.expect("RECEIPT")["receipt-id"] == "split"
    # a binary message, a body that is not UTF-8: it comes back in a binary message
    raw = bytes(range(256))
    c.send_message(b"SEND\ndestination:/queue/WS.SPLIT\nreceipt:bin\ncontent-length:256\n\n"
                   + raw + b"\0", binary=True)
    assert c.expect("RECEIPT")["receipt-id"] == "bin"
    subscribe(c, "WS.SPLIT", ack="auto")
    assert c.messages(1)[0].body == b"in two parts"
    assert c.messages(1)[0].body == raw
    assert c.message_types[0] == "text" and c.message_types[-1] == "binary"


def test_heartbeats_both_ways(ws_server, ws):
    c = ws()
    assert c.connect(heart_beat="500,500")["heart-beat"] == "500,500"
    end = time.monotonic() + 2.5
    while time.monotonic() < end:        # the client's heart-beat: an EOL as a message
        c.send_message("\n")
        assert c.poll(0.3) == []
    assert c.reader.heartbeats >= 2      # the server's, one EOL per message
    c.call("SEND", {"destination": "/queue/WS.HB"}, b"still here")
    # silence: the server gives up after two intervals without a beat
    frames = c.wait_closed(timeout=10)
    assert frames and frames[-1].command == "ERROR"
    assert "no frame or heart-beat" in frames[-1]["message"]


def test_limits_are_tcp_stomps(ws_server, ws):
    ws_server.sc("DEFINE QLOCAL(WS.BIG)")
    c = ws()
    c.connect()
    c.send("SEND", {"destination": "/queue/WS.BIG"}, b"x" * (270 * 1024))
    expect_error(c, "frame size limit of 262144")
    # a message far over the frame limit is not even read: close 1009 (too big)
    c = ws()
    c.connect()
    c.send("SEND", {"destination": "/queue/WS.BIG"}, b"x" * (600 * 1024))
    assert c.wait_closed(timeout=10) == []
    assert depth(ws_server, "WS.BIG") == 0


def test_browser_origin_must_log_in(ws_server, ws):
    """A page of any web site may open a WebSocket to the loopback address: an
    anonymous connection with an Origin (a browser's) is refused, as it would
    act as the OS user running the browser; with a login it is served."""
    c = ws(origin="http://evil.example")
    f = c.connect()
    assert f.command == "ERROR" and "2035" in f["message"]
    c = ws(origin="http://evil.example")
    assert c.connect(login="web", passcode="webpw").command == "CONNECTED"
    c = ws(origin="http://evil.example")
    assert c.connect(login="web", passcode="wrong").command == "ERROR"


def test_backpressure_a_client_that_does_not_read(ws_server, ws):
    """A subscriber that reads nothing stops the deliveries once the socket's
    buffers are full: the queue keeps the rest; reading again takes them all."""
    n, size = 1000, 8192
    fill(ws_server, "WS.SLOW", n, size)
    # a small receive buffer: what the server can push into the sockets is its
    # own send buffer (a few MB at most), far from the 8 MB queued
    c = ws(sockopt=((socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024),))
    c.connect()
    c.send("SUBSCRIBE", {"destination": "/queue/WS.SLOW", "id": "1", "ack": "auto"})
    time.sleep(2.0)
    left = depth(ws_server, "WS.SLOW")
    assert left > n // 4, f"only {left} of {n} left: deliveries did not pause"
    got = c.messages(n, timeout=60)
    assert len(got) == n and depth(ws_server, "WS.SLOW") == 0


def test_a_closed_connection_that_reads_nothing_is_cut_off(ws_server, ws):
    """STOP CONN of a client that reads nothing: what is queued for it cannot
    go, so after LINGER_S its socket is cut and the connection is gone."""
    fill(ws_server, "WS.STUCK", 1000, 8192)
    c = ws(sockopt=((socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024),))
    session = c.connect()["session"]
    c.send("SUBSCRIBE", {"destination": "/queue/WS.STUCK", "id": "1", "ack": "client",
                         "prefetch-count": "1000"})
    time.sleep(1.0)
    ws_server.sc(f"STOP CONN({session})")
    deadline_wait(lambda: session not in ws_server.sc("DISPLAY CONN(*)"), timeout=30,
                  what="the stopped connection to go")
    # its deliveries were backed out: all 1000 are there for the next consumer
    deadline_wait(lambda: depth(ws_server, "WS.STUCK") == 1000, what="the backout")


def fill(srv, queue: str, n: int, size: int) -> None:
    """``n`` messages of ``size`` bytes on ``queue``, put over TCP."""
    t = raw_connected(srv.port)
    try:
        body = b"b" * size
        for _batch in range(n // 100):
            t.send_bytes(b"".join(f"SEND\ndestination:/queue/{queue}\ncontent-length:{size}"
                                  f"\n\n".encode() + body + b"\0" for _ in range(100)))
        t.call("SEND", {"destination": f"/queue/{queue}.END"}, b"")
    finally:
        t.close()
    assert depth(srv, queue) == n


# ------------------------------------------------------------------------- the browser

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>stompjs</title>
<script src="stomp.umd.min.js"></script></head>
<body><script>
const cfg = CONFIG;
let reported = false;      // the first report is the one: a close after it says nothing
const report = async (r) => {
  if (reported) return;
  reported = true;
  await fetch("/report", {method: "POST", body: JSON.stringify(r)});
};
const debug = [];
const client = new StompJs.Client({
  brokerURL: cfg.url, connectHeaders: cfg.login, reconnectDelay: 0,
  heartbeatIncoming: 1000, heartbeatOutgoing: 1000, debug: (s) => debug.push(s.slice(0, 200)),
});
const receipt = (id) => new Promise((res) => client.watchForReceipt(id, res));
client.onConnect = async (connected) => {
  try {
    const t0 = performance.now();
    for (let i = 0; i < cfg.count; i++) {
      const r = receipt("s" + i);
      client.publish({destination: cfg.queue, body: "from the browser " + i,
                      headers: {receipt: "s" + i, persistent: "true"}});
      await r;
    }
    const sendMs = performance.now() - t0;
    const got = [];
    const acked = [];
    await new Promise((done) => {
      client.subscribe(cfg.queue, async (m) => {
        got.push(m.body);
        const r = receipt("a" + got.length);
        m.ack({receipt: "a" + got.length});
        await r;
        acked.push(m.headers["message-id"]);
        if (acked.length === cfg.count) done();
      }, {ack: "client-individual"});
    });
    const fromPython = await new Promise((done) => {
      client.subscribe(cfg.inbound, (m) => { m.ack(); done(m.body); }, {ack: "client"});
    });
    await report({ok: true, version: connected.headers.version,
            server: connected.headers.server, got, acked: acked.length, fromPython,
            sendMs, roundTripsPerSecond: cfg.count / (sendMs / 1000),
            userAgent: navigator.userAgent});
  } catch (e) {
    await report({ok: false, error: String(e), debug});
  }
  client.deactivate();
};
client.onStompError = (f) => report({ok: false, error: f.headers.message, body: f.body, debug});
client.onWebSocketClose = (e) => { if (!client.connected) report({ok: false,
  error: "websocket closed " + e.code, debug}); };
client.activate();
</script></body></html>
"""


def test_stompjs_in_headless_chromium(ws_server, tmp_path):
    page_dir = tmp_path / "page"
    page_dir.mkdir()
    shutil.copy(stompjs_bundle(), page_dir / "stomp.umd.min.js")
    count = 20
    config = {"url": ws_server.url, "queue": "/queue/WS.BROWSER", "count": count,
              "inbound": "/queue/WS.TO.BROWSER", "login": {"login": "web", "passcode": "webpw"}}
    (page_dir / "index.html").write_text(PAGE.replace("CONFIG", json.dumps(config)))
    t = raw_connected(ws_server.port)
    try:
        t.call("SEND", {"destination": "/queue/WS.TO.BROWSER"}, "from python".encode())
    finally:
        t.close()
    report = run_page(page_dir, "index.html", timeout=120)
    assert report.get("ok"), report
    assert report["version"] == "1.2" and report["server"].startswith("harbormq/")
    assert report["got"] == [f"from the browser {i}" for i in range(count)]
    assert report["acked"] == count and report["fromPython"] == "from python"
    assert depth(ws_server, "WS.BROWSER") == 0
    assert depth(ws_server, "WS.TO.BROWSER") == 0


# ------------------------------------------------------------------------- the end

def test_stop_ends_websocket_connections(ws_server):
    """Last in this file: it stops the module's server. A stop ends the
    WebSocket connections, each with an ERROR, in a few seconds (a WebSocket
    whose close is not answered is not waited for long)."""
    c = WsStomp(ws_server.url)
    try:
        c.connect()
        c.call("BEGIN", {"transaction": "t"})
        c.call("SEND", {"destination": "/queue/WS.STOP", "transaction": "t"}, b"never")
        began = time.monotonic()
        assert ws_server.stop() == 0
        assert time.monotonic() - began < 15
        frames = c.wait_closed(timeout=10)
        assert frames and "stopping" in frames[-1]["message"]
    finally:
        c.close()
