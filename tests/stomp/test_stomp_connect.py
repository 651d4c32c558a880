"""STOMP connections being made: CONNECT and STOMP frames, version negotiation
(1.0 to 1.2, with stomp.py's three clients), heart-beats both ways (and the
transport's heart-beat timers, in process), and what the server does with frames
before CONNECT and with a client that never sends it.

Not here: logins and authority (test_stomp_security.py), how a connection ends
(test_stomp_disconnect.py).
"""

from __future__ import annotations

import asyncio
import time

import pytest
from support.stomp_helpers import (
    deadline_wait,
    depth,
    expect_error,
)

from harbormq.stomp.frames import Limits
from harbormq.stomp.transport import FrameTransport


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_stomp_py_versions_send_subscribe_ack(server, conns, version):
    q = f"V{version.replace('.', '')}.Q"
    c = conns.stomp(server.port, version)
    assert c.col.connected[0].headers.get("version", "1.0") == version
    assert c.col.connected[0].headers["server"].startswith("harbormq/")
    for i in range(3):
        c.send(f"/queue/{q}", f"v{version} #{i}", headers={"receipt": f"r{i}"})
    c.col.wait_receipt("r2")
    c.subscribe(f"/queue/{q}", id="sub", ack="client")
    msgs = c.col.wait_messages(3)
    assert [m.body for m in msgs] == [f"v{version} #{i}" for i in range(3)]
    last = msgs[-1].headers
    if version == "1.2":
        c.ack(last["ack"], receipt="ackr")
    elif version == "1.1":
        c.ack(last["message-id"], last["subscription"], receipt="ackr")
    else:
        c.ack(last["message-id"], receipt="ackr")
    c.col.wait_receipt("ackr")
    c.disconnect()
    assert depth(server, q) == 0


@pytest.mark.parametrize("accept, expect", [
    (None, "1.0"), ("1.0", "1.0"), ("1.1", "1.1"), ("1.0,1.1", "1.1"), ("1.2", "1.2"),
    ("1.1,1.2,2.0", "1.2"), ("1.2, 1.0", "1.2"),
])
@pytest.mark.parametrize("command", ["CONNECT", "STOMP"])
def test_version_negotiation(server, conns, accept, expect, command):
    c = conns.unconnected(server.port)
    h = {"host": "localhost"}
    if accept is not None:
        h["accept-version"] = accept
    c.send(command, h)
    f = c.expect("CONNECTED")
    assert f.get("version", "1.0") == expect
    assert f["session"] and f["server"].startswith("harbormq/")
    c.call("BEGIN", {"transaction": "t"})       # the connection works


def test_unsupported_version_gets_error_with_version_header(server, conns):
    c = conns.unconnected(server.port)
    f = c.connect(version="1.3,2.0")
    assert f.command == "ERROR"
    assert f["version"] == "1.0,1.1,1.2"
    assert "1.3,2.0" in f["message"]
    c.wait_closed()


def test_stomp_py_connect_with_connect_command(server, conns):
    c = conns.stomp(server.port, "1.2", with_connect_command=True)
    assert c.col.connected[0].headers["version"] == "1.2"


def test_pipelined_frames_behind_an_authenticated_connect(server, conns):
    """CONNECT with a login is authenticated off the loop; what the client sent
    behind it in the same write waits for it and is then processed in order."""
    from support.stomp_helpers import build_frame
    c = conns.unconnected(server.port)
    c.send_bytes(build_frame("CONNECT", {"accept-version": "1.2", "host": "x", "login": "root",
                                         "passcode": "rootpw"}) +
                 build_frame("SEND", {"destination": "/queue/PIPE.Q", "receipt": "a",
                                      "k": "v:1"}, b"x") +
                 build_frame("SUBSCRIBE", {"destination": "/queue/PIPE.Q", "id": "1",
                                           "receipt": "b"}) +
                 build_frame("DISCONNECT", {"receipt": "c"}))
    frames = c.wait_closed()
    assert [(f.command, f.get("receipt-id")) for f in frames] == [
        ("CONNECTED", None), ("RECEIPT", "a"), ("RECEIPT", "b"), ("MESSAGE", None),
        ("RECEIPT", "c")]
    assert frames[3]["k"] == "v:1"


def test_frames_before_connect_refused(server, conns):
    c = conns.unconnected(server.port)
    c.send("SEND", {"destination": "/queue/PRE.Q"}, b"x")
    expect_error(c, "CONNECT")


def test_client_that_never_connects_is_dropped(server):
    """The fixture opened a socket at the start and never sent CONNECT."""
    frames = server.idle.wait_closed(timeout=30)
    assert time.monotonic() - server.idle_since >= 4.5
    assert [f.command for f in frames] == ["ERROR"]
    assert "CONNECT" in frames[0]["message"]


# ------------------------------------------------------------------------------ heart-beats

def test_heartbeats_negotiated_and_sent_by_server(server, conns):
    c = conns.unconnected(server.port)
    f = c.connect(heart_beat="0,200")
    assert f["heart-beat"] == "500,500"          # heartbeat_ms of the server
    # the server sends an EOL every max(500, 200) ms while it has nothing else
    t0 = time.monotonic()
    deadline_wait(lambda: c.poll(0.1) == [] and c.reader.heartbeats >= 2, 10,
                  what="two heart-beats from the server")
    assert time.monotonic() - t0 >= 0.7


def test_heartbeats_stomp_py_connection_stays_up(server, conns):
    c = conns.stomp(server.port, "1.2", heartbeats=(300, 300))
    assert c.col.connected[0].headers["heart-beat"] == "500,500"
    c.col.wait(lambda: c.col.heartbeats >= 2, 10, "heart-beats received by stomp.py")
    assert c.is_connected()
    c.send("/queue/HB.Q", "after idling", headers={"receipt": "hb1"})
    c.col.wait_receipt("hb1")
    assert not c.col.errors


def test_silent_client_is_dropped_after_missing_heartbeats(server, conns):
    c = conns.unconnected(server.port)
    c.connect(heart_beat="200,0")       # promises a beat every max(200, 500) ms
    t0 = time.monotonic()
    err = expect_error(c, "heart-beat")
    assert time.monotonic() - t0 >= 0.9   # 2 x 500 ms of silence
    assert err.command == "ERROR"


def test_client_heartbeats_keep_connection_alive(server, conns):
    c = conns.unconnected(server.port)
    c.connect(heart_beat="200,0")
    end = time.monotonic() + 1.6
    while time.monotonic() < end:
        c.send_bytes(b"\n")
        assert c.poll(0.15) == []
    c.call("BEGIN", {"transaction": "still-alive"})


def test_heart_beat_timers_do_not_pile_up():
    """Each period once added a timer handle that was never dropped."""
    class Quiet(FrameTransport):
        def _dispatch(self, frame):
            return None

        def _send(self, data: bytes) -> None:
            self.last_send = 0.0

    async def run() -> int:
        t = Quiet(asyncio.get_running_loop(), Limits(1 << 20, 100, 8192))
        t._beat(5)
        t._check_alive(1000)
        await asyncio.sleep(0.3)
        n = len(t._timers)
        for h in t._timers.values():
            h.cancel()
        return n
    assert asyncio.run(run()) <= 3
