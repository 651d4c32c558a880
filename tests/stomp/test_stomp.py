"""STOMP end to end: stomp.py (and, where exact bytes or exact counts matter, a
raw-socket client) against a real ``harbormq start --foreground`` process on a
free loopback port (issue 3 §1-§4, §6).

Servers are module-scoped and shared by every test whose configuration is the
default one (``server``); a few configurations get their own process
(``strict``: limits, auto-define and flow control off; ``required``: connauth
required on a non-loopback listener; TLS; the SIGKILL durability test). Every test uses
queues of its own, so tests sharing a server do not see each other's messages.
"""

from __future__ import annotations

# ------------------------------------------------------------------------------ fixtures
import asyncio
import os
import re
import shutil
import socket
import ssl
import subprocess
import threading
import time

import pytest
import stomp
from support.os_users import PEER_USER, ensure_os_user, nameless_user, run_as
from support.stomp_helpers import (
    ConnectionClosed,
    QMServer,
    RawStomp,
    deadline_wait,
    raw_connected,
    stomp_client,
)

from harbormq.stomp.frames import Limits
from harbormq.stomp.transport import FrameTransport


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = QMServer(tmp_path_factory.mktemp("stomp") / "hmq", "QS")
    srv.create(heartbeat_ms=500)
    srv.start()
    # a client that connects and never sends CONNECT (checked near the end)
    srv.idle = RawStomp(srv.port, timeout=30)
    srv.idle_since = time.monotonic()
    srv.user_add("alice", "alice:pass\\word")          # no authority records
    srv.user_add("bob", "bobpw")                        # granted during a test
    srv.user_add("root", "rootpw", "mqm")              # an administrator by group
    yield srv
    srv.idle.close()
    srv.stop()


@pytest.fixture
def conns():
    """Raw and stomp.py connections made by a test, closed at its end."""
    made = []

    class Maker:
        def raw(self, port, **kw) -> RawStomp:
            c = raw_connected(port, **kw)
            made.append(c)
            return c

        def unconnected(self, port) -> RawStomp:
            c = RawStomp(port)
            made.append(c)
            return c

        def stomp(self, port, version="1.2", **kw):
            c = stomp_client(port, version, **kw)
            made.append(c)
            return c
    yield Maker()
    for c in made:
        try:
            if isinstance(c, RawStomp):
                c.close()
            elif c.is_connected():
                c.disconnect()
        except Exception:
            pass


def depth(srv: QMServer, queue: str) -> int:
    out = srv.sc(f"DISPLAY QSTATUS({queue}) CURDEPTH")
    m = re.search(r"CURDEPTH\((\d+)\)", out)
    assert m, out
    return int(m.group(1))


def send_all(c: RawStomp, queue: str, bodies, **headers) -> None:
    for b in bodies:
        c.call("SEND", {"destination": f"/queue/{queue}", **headers},
               b if isinstance(b, bytes) else b.encode())


def subscribe(c: RawStomp, queue: str, sub_id: str = "s1", ack: str = "client-individual",
              **headers) -> list:
    return c.call("SUBSCRIBE", {"destination": f"/queue/{queue}", "id": sub_id, "ack": ack,
                                **headers})


def bodies(frames) -> list[bytes]:
    return [f.body for f in frames]


def quiet(c: RawStomp, t: float = 0.3) -> None:
    """Nothing more arrives on ``c`` for ``t`` seconds."""
    extra = c.poll(t)
    assert extra == [], f"unexpected frames: {[(f.command, f.headers) for f in extra]}"


def expect_error(c: RawStomp, *fragments: str):
    frames = c.wait_closed(timeout=20)
    errors = [f for f in frames if f.command == "ERROR"]
    assert errors, f"no ERROR before the close: {frames}"
    msg = errors[-1].get("message", "")
    for frag in fragments:
        assert frag in msg, f"{frag!r} not in ERROR message {msg!r}"
    return errors[-1]


# ------------------------------------------------------------------------------ CONNECT

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


def test_frames_before_connect_refused(server, conns):
    c = conns.unconnected(server.port)
    c.send("SEND", {"destination": "/queue/PRE.Q"}, b"x")
    expect_error(c, "CONNECT")


# ------------------------------------------------------------------------------ bodies, headers

def test_content_length_body_with_nul_bytes(server, conns):
    c = conns.raw(server.port)
    body = b"\0head\0\n\nmiddle\0\0tail\0"
    send_all(c, "NUL.Q", [body, b"", b"plain"])
    subscribe(c, "NUL.Q", ack="auto")
    got = c.messages(3)
    assert bodies(got) == [body, b"", b"plain"]
    assert got[0]["content-length"] == str(len(body))


def test_stomp_py_body_with_nul(server, conns):
    c = conns.stomp(server.port)
    c.send("/queue/NULPY.Q", "a\0b\0c", headers={"receipt": "n1"})
    c.col.wait_receipt("n1")
    c.subscribe("/queue/NULPY.Q", id="1", ack="auto")
    assert c.col.wait_messages(1)[0].body == "a\0b\0c"


def test_header_escaping_round_trip_stomp_py(server, conns):
    c = conns.stomp(server.port)
    user = {"x-colon": "a:b:c", "x-newline": "line1\nline2", "x-backslash": "c:\\dir\\f",
            "x-all": "\\:\n\\c\\n"}
    c.send("/queue/ESC.Q", "escapes", headers={**user, "receipt": "e1"})
    c.col.wait_receipt("e1")
    c.subscribe("/queue/ESC.Q", id="1", ack="auto")
    m = c.col.wait_messages(1)[0]
    for k, v in user.items():
        assert m.headers[k] == v, k


def test_header_escaping_round_trip_raw_12(server, conns):
    """Names and values, \\r included (1.2 only); repeated headers: first wins."""
    c = conns.raw(server.port)
    c.call("SEND", [("destination", "/queue/ESCRAW.Q"), ("we:ird\nname", "v\r\n:\\"),
                    ("dup", "first"), ("dup", "second")], b"x")
    subscribe(c, "ESCRAW.Q", ack="auto")
    m = c.messages(1)[0]
    assert m["we:ird\nname"] == "v\r\n:\\"
    assert m["dup"] == "first"


def test_header_escaping_11_has_no_cr_escape(server, conns):
    c = conns.raw(server.port, version="1.1")
    c.call("SEND", {"destination": "/queue/ESC11.Q", "k": "a:b\nc"}, b"x")
    subscribe(c, "ESC11.Q", ack="auto")
    assert c.messages(1)[0]["k"] == "a:b\nc"
    c.send_bytes(b"SEND\ndestination:/queue/ESC11.Q\nk:a\\rb\n\nx\0")
    expect_error(c, "escape")


def test_headers_map_to_the_descriptor(server, conns):
    c = conns.raw(server.port)
    future = int(time.time() * 1000) + 3_600_000
    c.call("SEND", {"destination": "/queue/MAP.Q", "persistent": "true", "priority": "7",
                    "correlation-id": "corr-1", "reply-to": "/queue/REPLY.Q",
                    "content-type": "application/json", "expires": str(future),
                    "app-prop": "v1", "x-num": "42"}, b'{"a":1}')
    c.call("SEND", {"destination": "/queue/MAP.Q", "persistent": "false"}, b"np")
    subscribe(c, "MAP.Q", ack="auto")
    m, np = c.messages(2)
    assert m["persistent"] == "true" and np["persistent"] == "false"
    assert m["priority"] == "7"
    assert m["correlation-id"] == "corr-1"
    assert m["reply-to"] == "/queue/REPLY.Q"
    assert m["content-type"] == "application/json"
    assert m["expires"] == str(future)
    assert m["app-prop"] == "v1" and m["x-num"] == "42"
    assert m["destination"] == "/queue/MAP.Q" and m["subscription"] == "s1"
    assert re.fullmatch(r"[0-9a-f]+", m["message-id"])
    assert abs(int(m["timestamp"]) - time.time() * 1000) < 60_000
    assert "ack" not in m.headers        # ack:auto deliveries need none
    assert m.body == b'{"a":1}'


def test_priority_order_then_fifo(server, conns):
    c = conns.raw(server.port)
    sent = [("a", 1), ("b", 5), ("c", 9), ("d", 5), ("e", 0), ("f", 9), ("g", 1)]
    for body, prio in sent:
        c.call("SEND", {"destination": "/queue/PRIO.Q", "priority": str(prio)}, body.encode())
    subscribe(c, "PRIO.Q", ack="client-individual", **{"prefetch-count": "10"})
    got = c.messages(len(sent))
    assert bodies(got) == [b"c", b"f", b"b", b"d", b"a", b"g", b"e"]
    assert [int(m["priority"]) for m in got] == [9, 9, 5, 5, 1, 1, 0]


def test_expired_message_never_delivered(server, conns):
    c = conns.raw(server.port)
    past = int(time.time() * 1000) - 10_000
    c.call("SEND", {"destination": "/queue/EXP.Q", "expires": str(past)}, b"stale")
    c.call("SEND", {"destination": "/queue/EXP.Q", "expires": "0"}, b"fresh")
    subscribe(c, "EXP.Q", ack="client-individual")
    m = c.messages(1)[0]
    assert m.body == b"fresh"
    quiet(c)


def test_default_persistence_is_the_queues_defpsist(server, conns):
    server.sc("DEFINE QLOCAL(PSIST.YES) DEFPSIST(YES)\nDEFINE QLOCAL(PSIST.NO) DEFPSIST(NO)")
    c = conns.raw(server.port)
    send_all(c, "PSIST.YES", ["y"])
    send_all(c, "PSIST.NO", ["n"])
    subscribe(c, "PSIST.YES", "a", ack="auto")
    assert c.messages(1)[0]["persistent"] == "true"
    subscribe(c, "PSIST.NO", "b", ack="auto")
    assert c.messages(1)[0]["persistent"] == "false"


# ------------------------------------------------------------------------------ acks

def test_ack_auto_removes_on_delivery(server, conns):
    c = conns.raw(server.port)
    send_all(c, "AUTO.Q", [f"m{i}" for i in range(5)])
    subscribe(c, "AUTO.Q", ack="auto")
    assert bodies(c.messages(5)) == [f"m{i}".encode() for i in range(5)]
    c.close()
    assert depth(server, "AUTO.Q") == 0
    c2 = conns.raw(server.port)
    subscribe(c2, "AUTO.Q", ack="auto")
    quiet(c2)


def test_prefetch_window_client_individual(server, conns):
    c = conns.raw(server.port)
    send_all(c, "PF.Q", [f"m{i}" for i in range(10)])
    subscribe(c, "PF.Q", ack="client-individual", **{"prefetch-count": "3"})
    first = c.messages(3)
    quiet(c)                                   # never more than 3 unacknowledged
    c.call("ACK", {"id": first[1]["ack"]})     # one acknowledged: one more comes
    more = c.messages(1)
    quiet(c)
    c.call("NACK", {"id": first[0]["ack"]})    # NACK frees a slot too
    refill = c.messages(1)
    quiet(c)
    assert bodies(first) == [b"m0", b"m1", b"m2"] and more[0].body == b"m3"
    # acknowledging everything that comes lets all the rest through, m0 again
    seen = [m.body for m in first + more + refill]
    pending = [first[2], more[0], *refill]
    while pending:
        new = c.call("ACK", {"id": pending.pop(0)["ack"]}) + c.poll(0.1)
        pending += new
        seen += [m.body for m in new]
        assert len(pending) <= 3
    assert sorted(seen) == sorted([b"m0"] + [f"m{i}".encode() for i in range(10)])


def test_prefetch_window_client_cumulative(server, conns):
    c = conns.raw(server.port)
    send_all(c, "PFC.Q", [f"m{i}" for i in range(8)])
    subscribe(c, "PFC.Q", ack="client", **{"prefetch-count": "2"})
    a = c.messages(2)
    quiet(c)
    c.call("ACK", {"id": a[1]["ack"]})          # acknowledges both
    b = c.messages(2)
    quiet(c)
    assert bodies(a + b) == [b"m0", b"m1", b"m2", b"m3"]


def test_default_prefetch_window(server, conns):
    c = conns.raw(server.port)
    send_all(c, "PFD.Q", [f"m{i}" for i in range(20)])
    subscribe(c, "PFD.Q", ack="client")
    c.messages(16)                               # stomp.default_prefetch
    quiet(c)


def test_prefetch_count_out_of_range(server, conns):
    c = conns.raw(server.port)
    c.send("SUBSCRIBE", {"destination": "/queue/PFX.Q", "id": "1", "ack": "client",
                         "prefetch-count": "100000"})
    expect_error(c, "prefetch")


def test_client_ack_is_cumulative(server, conns):
    c = conns.raw(server.port)
    send_all(c, "CUM.Q", [f"m{i}" for i in range(5)])
    subscribe(c, "CUM.Q", ack="client", **{"prefetch-count": "10"})
    got = c.messages(5)
    c.call("ACK", {"id": got[2]["ack"]})         # m0..m2
    c.close()                                    # abrupt: no DISCONNECT
    c2 = conns.raw(server.port)
    subscribe(c2, "CUM.Q", ack="client", **{"prefetch-count": "10"})
    again = c2.messages(2)
    assert bodies(again) == [b"m3", b"m4"]
    assert all(m["redelivered"] == "true" and m["backout-count"] == "1" for m in again)
    quiet(c2)


def test_client_individual_ack_is_not_cumulative(server, conns):
    c = conns.raw(server.port)
    send_all(c, "IND.Q", [f"m{i}" for i in range(5)])
    subscribe(c, "IND.Q", ack="client-individual", **{"prefetch-count": "10"})
    got = c.messages(5)
    c.call("ACK", {"id": got[2]["ack"]})
    c.close()
    c2 = conns.raw(server.port)
    subscribe(c2, "IND.Q", ack="client-individual", **{"prefetch-count": "10"})
    again = c2.messages(4)
    assert bodies(again) == [b"m0", b"m1", b"m3", b"m4"]
    assert {m["redelivered"] for m in again} == {"true"}
    quiet(c2)


def test_ack_twice_is_an_error(server, conns):
    c = conns.raw(server.port)
    send_all(c, "ACK2.Q", ["x"])
    subscribe(c, "ACK2.Q")
    m = c.messages(1)[0]
    c.call("ACK", {"id": m["ack"]})
    c.send("ACK", {"id": m["ack"]})
    expect_error(c, "not a delivery")


def test_ack_by_message_id_in_11(server, conns):
    c = conns.raw(server.port, version="1.1")
    send_all(c, "ACK11.Q", ["a", "b"])
    subscribe(c, "ACK11.Q", ack="client-individual")
    a, b = c.messages(2)
    assert "ack" not in a.headers                  # 1.1 acknowledges by message-id
    c.call("ACK", {"message-id": b["message-id"], "subscription": "s1"})
    c.close()
    c2 = conns.raw(server.port)
    subscribe(c2, "ACK11.Q")
    assert bodies(c2.messages(1)) == [b"a"]
    quiet(c2)


def test_unsubscribe_backs_out_to_another_consumer(server, conns):
    c = conns.raw(server.port)
    other = conns.raw(server.port)
    send_all(c, "UNSUB.Q", ["a", "b", "c"])
    subscribe(c, "UNSUB.Q", ack="client-individual", **{"prefetch-count": "3"})
    got = c.messages(3)
    assert {m["redelivered"] for m in got} == {"false"}
    subscribe(other, "UNSUB.Q", ack="client-individual")
    quiet(other, 0.2)                             # all three are held by c
    c.call("UNSUBSCRIBE", {"id": "s1"})
    again = other.messages(3)
    assert bodies(again) == [b"a", b"b", b"c"]
    assert all(m["redelivered"] == "true" and m["backout-count"] == "1" for m in again)
    quiet(c)                                      # nothing more for the old subscription
    c.send("ACK", {"id": got[0]["ack"]})          # its deliveries are gone
    expect_error(c, "not a delivery")


def test_nack_redelivers_with_growing_backout_count(server, conns):
    c = conns.raw(server.port)
    send_all(c, "NACK.Q", ["poison"])
    subscribe(c, "NACK.Q")
    counts = []
    for _ in range(4):
        m = c.messages(1)[0]
        counts.append((m["redelivered"], m.get("backout-count")))
        c.call("NACK", {"id": m["ack"]})
    assert counts == [("false", None), ("true", "1"), ("true", "2"), ("true", "3")]


def _nack_to_threshold(server, conns, queue: str, persistent: str):
    server.sc(f"DEFINE QLOCAL({queue}.BOQ)\n"
              f"DEFINE QLOCAL({queue}) BOTHRESH(2) BOQNAME({queue}.BOQ)")
    c = conns.raw(server.port)
    send_all(c, queue, ["poison"], persistent=persistent, **{"x-tag": "p1"})
    subscribe(c, queue)
    m = c.messages(1)[0]
    c.call("NACK", {"id": m["ack"]})
    m = c.messages(1)[0]
    assert m["backout-count"] == "1"
    c.call("NACK", {"id": m["ack"]})              # backout count 2 = BOTHRESH
    quiet(c, 0.5)                                 # not redelivered: moved
    subscribe(c, f"{queue}.BOQ", "boq", ack="auto")
    moved = c.messages(1)[0]
    assert moved.body == b"poison" and moved["x-tag"] == "p1"
    assert moved["persistent"] == persistent
    assert depth(server, queue) == 0


def test_nack_at_backout_threshold_moves_to_boqname(server, conns):
    _nack_to_threshold(server, conns, "BONP.Q", "false")


def test_nack_at_backout_threshold_moves_persistent_to_boqname(server, conns):
    """Regression: the backout made the message visible and then awaited the log
    force; the NACKing subscription took it back (backout-count 2) before the move
    to BOQNAME, which then gave up."""
    _nack_to_threshold(server, conns, "BOP.Q", "true")


def test_nack_at_backout_threshold_without_subscriber_moves_to_boqname(server, conns):
    """The same threshold reached by an UNSUBSCRIBE (nobody left to redeliver to)."""
    server.sc("DEFINE QLOCAL(BO2.BOQ)\nDEFINE QLOCAL(BO2.Q) BOTHRESH(1) BOQNAME(BO2.BOQ)")
    c = conns.raw(server.port)
    send_all(c, "BO2.Q", ["poison"])
    subscribe(c, "BO2.Q")
    c.messages(1)
    c.call("UNSUBSCRIBE", {"id": "s1"})
    deadline_wait(lambda: depth(server, "BO2.BOQ") == 1, 20, what="move to BO2.BOQ")
    assert depth(server, "BO2.Q") == 0


# ------------------------------------------------------------------------------ transactions

def test_transaction_commit_sends_and_acks_together(server, conns):
    c = conns.raw(server.port)
    watcher = conns.raw(server.port)
    send_all(c, "TX.IN", ["in1", "in2"])
    subscribe(watcher, "TX.OUT", ack="auto")
    subscribe(c, "TX.IN", **{"prefetch-count": "5"})
    m1, m2 = c.messages(2)
    c.call("BEGIN", {"transaction": "t1"})
    c.call("ACK", {"id": m1["ack"], "transaction": "t1"})
    c.call("SEND", {"destination": "/queue/TX.OUT", "transaction": "t1"}, b"out1")
    c.call("SEND", {"destination": "/queue/TX.OUT", "transaction": "t1"}, b"out2")
    quiet(watcher, 0.3)                            # nothing visible before COMMIT
    c.call("COMMIT", {"transaction": "t1"})
    assert bodies(watcher.messages(2)) == [b"out1", b"out2"]
    c.close()                                      # m2 was never acknowledged
    c2 = conns.raw(server.port)
    subscribe(c2, "TX.IN")
    again = c2.messages(1)
    assert bodies(again) == [b"in2"] and again[0]["redelivered"] == "true"
    quiet(c2)


def test_transaction_abort_discards_sends_and_unacks(server, conns):
    c = conns.raw(server.port)
    watcher = conns.raw(server.port)
    send_all(c, "TXA.IN", ["in1", "in2"])
    subscribe(watcher, "TXA.OUT", ack="auto")
    subscribe(c, "TXA.IN", **{"prefetch-count": "5"})
    m1, m2 = c.messages(2)
    c.call("BEGIN", {"transaction": "t1"})
    c.call("ACK", {"id": m1["ack"], "transaction": "t1"})
    c.call("ACK", {"id": m2["ack"], "transaction": "t1"})
    c.call("SEND", {"destination": "/queue/TXA.OUT", "transaction": "t1"}, b"never")
    c.call("ABORT", {"transaction": "t1"})
    quiet(watcher, 0.3)
    # both deliveries are unacknowledged again: one can be acknowledged now ...
    c.call("ACK", {"id": m2["ack"]})
    c.close()
    # ... and the other comes back after the connection is gone
    c2 = conns.raw(server.port)
    subscribe(c2, "TXA.IN")
    assert bodies(c2.messages(1)) == [b"in1"]
    quiet(c2)
    assert depth(server, "TXA.OUT") == 0


def test_transaction_lost_with_connection(server, conns):
    c = conns.raw(server.port)
    send_all(c, "TXL.IN", ["in1"])
    subscribe(c, "TXL.IN")
    m = c.messages(1)[0]
    c.call("BEGIN", {"transaction": "t"})
    c.call("ACK", {"id": m["ack"], "transaction": "t"})
    c.call("SEND", {"destination": "/queue/TXL.OUT", "transaction": "t"}, b"lost")
    c.close()                                       # no COMMIT
    c2 = conns.raw(server.port)
    subscribe(c2, "TXL.IN")
    assert c2.messages(1)[0]["redelivered"] == "true"
    subscribe(c2, "TXL.OUT", "o", ack="auto")
    quiet(c2)


def test_stomp_py_transactions_and_client_individual(server, conns):
    c = conns.stomp(server.port)
    for i in range(4):
        c.send("/queue/PYTX.Q", f"m{i}", headers={"receipt": f"s{i}"})
    c.col.wait_receipt("s3")
    c.subscribe("/queue/PYTX.Q", id="1", ack="client-individual",
                headers={"prefetch-count": "4"})
    msgs = c.col.wait_messages(4)
    tx = c.begin()
    for m in msgs[:2]:
        c.ack(m.headers["ack"], transaction=tx)
    c.send("/queue/PYTX.OUT", "from tx", transaction=tx)
    c.commit(tx, headers={"receipt": "commit"})
    c.col.wait_receipt("commit")
    tx2 = c.begin()
    c.ack(msgs[2].headers["ack"], transaction=tx2)
    c.send("/queue/PYTX.OUT", "aborted", transaction=tx2)
    c.abort(tx2, headers={"receipt": "abort"})
    c.col.wait_receipt("abort")
    c.nack(msgs[3].headers["ack"], receipt="nack")
    c.col.wait_receipt("nack")
    redelivered = c.col.wait(lambda: [m for m in c.col.messages
                                      if m.headers.get("redelivered") == "true"], 10)
    assert [m.body for m in redelivered] == ["m3"]
    assert redelivered[0].headers["backout-count"] == "1"
    c.disconnect(receipt="bye")     # stomp.py sends DISCONNECT and returns at once
    c.col.wait_receipt("bye")
    assert not c.col.errors
    c2 = conns.raw(server.port)
    subscribe(c2, "PYTX.Q", ack="client-individual")
    assert bodies(c2.messages(2)) == [b"m2", b"m3"]   # m2's ack was aborted
    subscribe(c2, "PYTX.OUT", "o", ack="auto")
    assert bodies(c2.messages(1)) == [b"from tx"]
    quiet(c2)


def test_transaction_errors(server, conns):
    c = conns.raw(server.port)
    c.call("BEGIN", {"transaction": "t"})
    c.send("BEGIN", {"transaction": "t"})
    expect_error(c, "already in progress")
    c = conns.raw(server.port)
    c.send("COMMIT", {"transaction": "nope"})
    expect_error(c, "nope")


# ------------------------------------------------------------------------------ DISCONNECT

def test_disconnect_receipt_after_earlier_receipts_then_close(server, conns):
    c = conns.raw(server.port)
    send_all(c, "DISC.Q", ["a", "b"])
    subscribe(c, "DISC.Q", ack="client-individual", **{"prefetch-count": "2"})
    c.messages(2)
    c.send("SEND", {"destination": "/queue/DISC.Q", "persistent": "true", "receipt": "p"},
           b"c")
    c.send("DISCONNECT", {"receipt": "bye"})
    frames = c.wait_closed()
    assert [(f.command, f.get("receipt-id")) for f in frames] == [("RECEIPT", "p"),
                                                                  ("RECEIPT", "bye")]
    c2 = conns.raw(server.port)
    subscribe(c2, "DISC.Q", ack="client-individual")
    again = c2.messages(3)
    assert bodies(again) == [b"a", b"b", b"c"]
    assert [m["redelivered"] for m in again] == ["true", "true", "false"]


def test_stomp_py_abrupt_disconnect_redelivers(server, conns):
    c = conns.stomp(server.port)
    for i in range(3):
        c.send("/queue/ABRUPT.Q", f"m{i}", headers={"receipt": f"r{i}"})
    c.col.wait_receipt("r2")
    c.subscribe("/queue/ABRUPT.Q", id="1", ack="client-individual")
    c.col.wait_messages(3)
    # the socket goes away without DISCONNECT
    c.transport.socket.shutdown(socket.SHUT_RDWR)
    c.col.wait(lambda: c.col.disconnected, 10, "stomp.py noticing the close")
    c2 = conns.stomp(server.port)
    c2.subscribe("/queue/ABRUPT.Q", id="1", ack="auto")
    msgs = c2.col.wait_messages(3)
    assert [m.body for m in msgs] == ["m0", "m1", "m2"]
    assert {m.headers["redelivered"] for m in msgs} == {"true"}


# ------------------------------------------------------------------------------ selectors

def test_selector_correlation_id(server, conns):
    c = conns.raw(server.port)
    for body, corr in [("a", "c1"), ("b", "c2"), ("c", "c1"), ("d", "it's")]:
        c.call("SEND", {"destination": "/queue/SELC.Q", "correlation-id": corr}, body.encode())
    subscribe(c, "SELC.Q", "x", selector="JMSCorrelationID = 'c1'")
    assert bodies(c.messages(2)) == [b"a", b"c"]
    quiet(c, 0.2)
    subscribe(c, "SELC.Q", "y", selector="JMSCorrelationID='it''s'")
    assert bodies(c.messages(1)) == [b"d"]
    quiet(c, 0.2)


@pytest.mark.parametrize("prefix", ["", "ID:"])
def test_selector_message_id(server, conns, prefix):
    q = f"SELM{len(prefix)}.Q"
    c = conns.raw(server.port)
    send_all(c, q, ["a", "b", "c"])
    subscribe(c, q, **{"prefetch-count": "3"})
    got = c.messages(3)
    wanted = got[1]["message-id"]
    c.call("UNSUBSCRIBE", {"id": "s1"})          # all three back on the queue
    subscribe(c, q, "sel", selector=f"JMSMessageID = '{prefix}{wanted}'")
    m = c.messages(1)[0]
    assert m.body == b"b" and m["message-id"] == wanted
    quiet(c, 0.2)


def test_selector_with_correlid_index(server, conns):
    server.sc("DEFINE QLOCAL(SELIX.Q) INDXTYPE(CORRELID)")
    c = conns.raw(server.port)
    for i in range(30):
        c.send("SEND", {"destination": "/queue/SELIX.Q", "correlation-id": f"k{i % 3}"},
               f"m{i}".encode())
    c.call("BEGIN", {"transaction": "sync"})
    subscribe(c, "SELIX.Q", selector="JMSCorrelationID = 'k2'", ack="auto")
    assert bodies(c.messages(10)) == [f"m{i}".encode() for i in range(2, 30, 3)]
    quiet(c, 0.2)


@pytest.mark.parametrize("selector", ["color = 'red'", "JMSCorrelationID = c1",
                                      "JMSMessageID = 'zz'"])
def test_unsupported_selector_is_an_error(server, conns, selector):
    c = conns.raw(server.port)
    c.send("SUBSCRIBE", {"destination": "/queue/SELX.Q", "id": "1", "selector": selector})
    expect_error(c, "selector" if "zz" not in selector else "JMSMessageID")


# ------------------------------------------------------------------------------ errors

def test_unknown_destination_prefix(server, conns):
    c = conns.raw(server.port)
    bystander = conns.raw(server.port)
    c.send("SEND", {"destination": "/topic/news"}, b"x")
    expect_error(c, "/topic/news", "/queue/")
    send_all(bystander, "BYSTANDER.Q", ["still fine"])


def test_stomp_py_error_closes_only_that_connection(server, conns):
    bad = conns.stomp(server.port)
    good = conns.stomp(server.port)
    bad.send("/exchange/x", "nope")
    bad.col.wait(lambda: bad.col.errors, 10, "ERROR")
    err = bad.col.errors[0]
    assert "/exchange/x" in err.headers["message"]
    bad.col.wait(lambda: bad.col.disconnected, 10, "close after ERROR")
    good.send("/queue/GOOD.Q", "ok", headers={"receipt": "g"})
    good.col.wait_receipt("g")
    assert not good.col.errors


def test_error_carries_receipt_id_of_failing_frame(server, conns):
    c = conns.raw(server.port)
    c.send("SEND", {"destination": "/queue/bad name", "receipt": "r-bad"}, b"x")
    err = expect_error(c, "bad name")
    assert err["receipt-id"] == "r-bad"


def test_slow_consumer_is_not_buffered_without_bound(server, conns):
    """ack:auto removes a message as it is written; a consumer that does not read
    must stop the server writing (transport backpressure), so most messages stay
    on the queue instead of piling up in server memory."""
    c = conns.raw(server.port)
    body = b"z" * 16384
    n = 1200                                       # ~19 MiB
    for _ in range(n):
        c.send("SEND", {"destination": "/queue/SLOW.Q", "persistent": "false"}, body)
    c.call("BEGIN", {"transaction": "sync"})
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    slow.connect(("127.0.0.1", server.port))
    try:
        slow.sendall(b"CONNECT\naccept-version:1.2\nhost:x\n\n\0"
                     b"SUBSCRIBE\nid:1\ndestination:/queue/SLOW.Q\nack:auto\n\n\0")
        before, end = -1, time.monotonic() + 30
        while time.monotonic() < end:
            time.sleep(0.3)
            stable = depth(server, "SLOW.Q")
            if stable == before:
                break
            before = stable
        assert stable > n // 2, f"only {stable} of {n} left: the server buffers the rest"
        # reading drains everything
        slow.settimeout(20)
        total = b""
        while total.count(body) < n:
            chunk = slow.recv(1 << 20)
            assert chunk
            total += chunk
            if len(total) > 2 * n * len(body):
                break
        assert total.count(body) == n
    finally:
        slow.close()


# ------------------------------------------------------------------------------ security

def test_wrong_password_refused_with_2035(server, conns):
    for login, pw in [("alice", "wrong"), ("nobody", "x"), ("alice", "")]:
        c = conns.unconnected(server.port)
        f = c.connect(login=login, passcode=pw)
        assert f.command == "ERROR"
        assert "2035" in f["message"]
        c.wait_closed()


def test_a_login_that_looks_like_console_markup_is_refused_as_any_other(server, conns):
    """The operator message naming the login goes to the server's console as it
    is: '[/x]' once raised rich's MarkupError in place of the 2035 refusal."""
    for login in ("[/x]", "[bold]mallory", ":skull:"):
        c = conns.unconnected(server.port)
        f = c.connect(login=login, passcode="wrong")
        assert f.command == "ERROR"
        assert "2035" in f["message"], f["message"]
        c.wait_closed()
        line = f"user {login!r} failed authentication"
        deadline_wait(lambda line=line: line in server.console(),
                      what=f"the refusal of {login!r} on the console, word for word")
    assert conns.raw(server.port, login="root", passcode="rootpw")


def test_password_with_colon_and_backslash_via_stomp_py(server, conns):
    c = conns.stomp(server.port, login="alice", passcode="alice:pass\\word")
    assert c.is_connected()


def test_authority_refusal_then_grant(server, conns):
    server.sc("DEFINE QLOCAL(AUTH.Q)")
    c = conns.raw(server.port, login="alice", passcode="alice:pass\\word")
    c.send("SEND", {"destination": "/queue/AUTH.Q"}, b"x")
    expect_error(c, "2035", "PUT", "AUTH.Q")
    c = conns.raw(server.port, login="alice", passcode="alice:pass\\word")
    c.send("SUBSCRIBE", {"destination": "/queue/AUTH.Q", "id": "1"})
    expect_error(c, "2035", "GET")
    # auto-define needs CRT on the queue manager
    c = conns.raw(server.port, login="alice", passcode="alice:pass\\word")
    c.send("SEND", {"destination": "/queue/AUTH.NEW"}, b"x")
    expect_error(c, "2035")

    server.sc("SET AUTHREC PROFILE(AUTH.Q) OBJTYPE(QUEUE) PRINCIPAL('bob') AUTHADD(PUT)",
              cli=True)                            # through the real 'harbormq sc'
    b = conns.raw(server.port, login="bob", passcode="bobpw")
    send_all(b, "AUTH.Q", ["granted"])
    b.send("SUBSCRIBE", {"destination": "/queue/AUTH.Q", "id": "1"})
    expect_error(b, "2035", "GET")
    server.sc("SET AUTHREC PROFILE('AUTH.*') OBJTYPE(QUEUE) PRINCIPAL('bob') AUTHADD(PUT,GET)")
    server.sc("SET AUTHREC PROFILE(AUTH.Q) OBJTYPE(QUEUE) PRINCIPAL('bob') AUTHADD(GET)")
    b = conns.raw(server.port, login="bob", passcode="bobpw")
    subscribe(b, "AUTH.Q", ack="auto")
    assert bodies(b.messages(1)) == [b"granted"]
    # alice still has nothing
    c = conns.raw(server.port, login="alice", passcode="alice:pass\\word")
    c.send("SUBSCRIBE", {"destination": "/queue/AUTH.Q", "id": "1"})
    expect_error(c, "2035")


def test_admin_group_user_has_every_authority(server, conns):
    c = conns.raw(server.port, login="root", passcode="rootpw")
    send_all(c, "ROOTNEW.Q", ["x"])              # auto-define included
    subscribe(c, "ROOTNEW.Q", ack="auto")
    assert bodies(c.messages(1)) == [b"x"]


def test_user_added_while_running_can_log_in(server, conns):
    server.user_add("late", "latepw")
    c = conns.stomp(server.port, login="late", passcode="latepw")
    assert c.is_connected()
    server.cli("user", "delete", server.name, "late")
    c2 = conns.unconnected(server.port)
    f = c2.connect(login="late", passcode="latepw")
    assert f.command == "ERROR" and "2035" in f["message"]


def _stomp_py_try(port: int, op: str, queue: str, login=None, passcode=None) -> dict:
    """One stomp.py connection that gets one message from ``queue`` (``op`` "get")
    or puts one with a receipt ("put"); what the server answered. Runs in the
    child that ``run_as`` makes, as another OS user."""
    try:
        conn = stomp_client(port, login=login, passcode=passcode)
    except stomp.exception.ConnectFailedException as exc:
        return {"connected": False, "refusal": str(exc)}
    col = conn.col
    if op == "get":
        conn.subscribe(f"/queue/{queue}", id="1", ack="auto")
        col.wait(lambda: col.messages or col.errors, what=f"a message or an ERROR on {queue}")
    else:
        conn.send(f"/queue/{queue}", "from the peer", headers={"receipt": "p1"})
        col.wait(lambda: col.receipts or col.errors, what=f"a RECEIPT or an ERROR on {queue}")
    out = {"connected": True, "uid": os.getuid(), "bodies": [m.body for m in col.messages],
           "receipts": list(col.receipts),
           "errors": [e.headers.get("message", "") for e in col.errors]}
    try:
        conn.disconnect()
    except Exception:
        pass                     # closed by the server after its ERROR
    return out


def test_anonymous_connection_acts_as_the_connecting_os_user(server, conns):
    """The hardening issue's defect: an anonymous loopback connection used to get
    the owner's authority whoever made it. Now it is the OS user at the other
    end: the owner (root, who runs these tests and the server) as before, and
    any other user with only what authority records give that user."""
    peer = ensure_os_user()
    server.sc("DEFINE QLOCAL(PEER.SECRET)\nDEFINE QLOCAL(PEER.MINE)")
    server.user_add("peerapp", "peerpw")
    owner = conns.stomp(server.port)                     # anonymous, as the owner
    owner.send("/queue/PEER.SECRET", "secret", headers={"receipt": "o1"})
    owner.send("/queue/PEER.MINE", "for the peer", headers={"receipt": "o2"})
    owner.col.wait_receipt("o2")
    owner.subscribe("/queue/PEER.SECRET", id="1", ack="client-individual")
    [got] = owner.col.wait_messages(1)
    assert got.body == "secret"                          # the owner reads any queue
    owner.disconnect()                                   # not acknowledged: back on the queue
    deadline_wait(lambda: depth(server, "PEER.SECRET") == 1, what="the secret back")

    # the same anonymous connection from a process of another OS user
    for op, queue, authority in [("get", "PEER.SECRET", "GET"), ("put", "PEER.SECRET", "PUT"),
                                 ("get", "PEER.MINE", "GET"), ("put", "PEER.NEW", "PUT")]:
        r = run_as(peer, _stomp_py_try, server.port, op, queue)
        assert r["connected"] and r["uid"] == peer.pw_uid != os.getuid(), r
        assert r["bodies"] == [] and r["receipts"] == [], r
        [error] = r["errors"]
        assert "2035" in error and authority in error and PEER_USER in error, r
    assert depth(server, "PEER.SECRET") == 1 and depth(server, "PEER.MINE") == 1
    assert "PEER.NEW" not in server.sc("DISPLAY QLOCAL(PEER.*)")

    # exactly what records give that OS user
    server.sc(f"SET AUTHREC PROFILE(PEER.MINE) OBJTYPE(QUEUE) PRINCIPAL('{PEER_USER}') "
              "AUTHADD(GET)")
    r = run_as(peer, _stomp_py_try, server.port, "get", "PEER.MINE")
    assert (r["bodies"], r["errors"]) == (["for the peer"], []), r
    r = run_as(peer, _stomp_py_try, server.port, "get", "PEER.SECRET")
    assert r["bodies"] == [] and "2035" in r["errors"][0], r

    # a login from that process is the harbormq user, granted by its records
    r = run_as(peer, _stomp_py_try, server.port, "get", "PEER.SECRET", "peerapp", "peerpw")
    assert r["bodies"] == [] and "2035" in r["errors"][0] and "peerapp" in r["errors"][0], r
    server.sc("SET AUTHREC PROFILE(PEER.SECRET) OBJTYPE(QUEUE) PRINCIPAL('peerapp') "
              "AUTHADD(GET)")
    r = run_as(peer, _stomp_py_try, server.port, "get", "PEER.SECRET", "peerapp", "peerpw")
    assert (r["bodies"], r["errors"]) == (["secret"], []), r


def _raw_anonymous_connect(port: int) -> dict:
    """An anonymous CONNECT; the server's answer (runs as another uid)."""
    with RawStomp(port) as c:
        f = c.connect()
        return {"uid": os.getuid(), "command": f.command, "headers": f.headers}


def test_anonymous_connection_whose_os_user_cannot_be_identified_is_refused(server):
    """Fail closed: a uid with no user name is nobody the queue manager can check,
    so its anonymous connection is refused, saying to log in (never the owner)."""
    from support.oplog import operator_log
    nameless = nameless_user()
    r = run_as(nameless, _raw_anonymous_connect, server.port)
    assert r["uid"] == nameless.pw_uid
    assert r["command"] == "ERROR", r
    msg = r["headers"]["message"]
    assert msg.startswith("HMQ5540E") and "2035" in msg, msg
    assert f"uid {nameless.pw_uid} has no user name" in msg and "log in" in msg, msg
    entries = [t for m, t in operator_log(server.home, server.name) if m == "HMQ5540E"]
    assert any(f"uid {nameless.pw_uid}" in t for t in entries), entries


@pytest.fixture(scope="module")
def required(tmp_path_factory):
    """connauth required, listening on every interface (allowed only so)."""
    srv = QMServer(tmp_path_factory.mktemp("stompreq") / "hmq", "QR")
    srv.create(connauth="required")
    srv.configure(listeners=[{"name": "ALL", "host": "0.0.0.0", "port": 0,
                              "tls_cert": "", "tls_key": ""}])
    srv.start()
    srv.user_add("carol", "carolpw")
    yield srv
    srv.stop()


def test_connauth_required_refuses_anonymous(required, conns):
    c = conns.unconnected(required.port)
    f = c.connect()
    assert f.command == "ERROR" and "2035" in f["message"]
    c.wait_closed()
    with pytest.raises(stomp.exception.ConnectFailedException):
        stomp_client(required.port)
    ok = conns.stomp(required.port, login="carol", passcode="carolpw")
    assert ok.is_connected()
    c = conns.unconnected(required.port)
    assert c.connect(login="carol", passcode="bad").command == "ERROR"


@pytest.mark.parametrize("host", ["0.0.0.0", "::", ""])
def test_non_loopback_listener_refused_when_connauth_optional(tmp_path, host):
    srv = QMServer(tmp_path / "hmq", "QN")
    srv.create()
    srv.configure(listeners=[{"name": "WIDE", "host": host, "port": 0,
                              "tls_cert": "", "tls_key": ""}])
    rc, out = srv.start_failure()
    assert rc != 0
    assert "loopback" in out and "connauth" in out, out
    assert not (srv.qm_dir / "listeners.json").exists()
    # and the queue manager is not left running
    assert srv.cli("status", srv.name).stdout.count("running") == 0


# ------------------------------------------------------------------------------ strict server

@pytest.fixture(scope="module")
def strict(tmp_path_factory):
    srv = QMServer(tmp_path_factory.mktemp("stompstrict") / "hmq", "QL")
    srv.create(auto_define_queues=False, max_frame_bytes=8192, max_headers=12,
               max_header_bytes=2048, max_subscriptions=3, max_connections=5,
               full_queue_wait_ms=0)
    srv.start()
    srv.sc("DEFINE QLOCAL(LIM.Q)\nDEFINE QLOCAL(SMALL.Q) MAXMSGL(100)")
    yield srv
    srv.stop()


def test_auto_define_off_names_queue_and_2085(strict, conns):
    c = conns.raw(strict.port)
    c.send("SEND", {"destination": "/queue/NOT.THERE"}, b"x")
    expect_error(c, "NOT.THERE", "2085")
    c = conns.raw(strict.port)
    c.send("SUBSCRIBE", {"destination": "/queue/NOT.THERE.EITHER", "id": "1"})
    expect_error(c, "NOT.THERE.EITHER", "2085")
    c = conns.raw(strict.port)
    send_all(c, "LIM.Q", ["defined queues work"])


def test_auto_define_on_defines_from_default(server, conns):
    c = conns.raw(server.port)
    send_all(c, "AUTODEF.NEW", ["x"])
    out = server.sc("DISPLAY QLOCAL(AUTODEF.NEW) MAXDEPTH")
    assert "QUEUE(AUTODEF.NEW)" in out


def test_frame_larger_than_max_frame_bytes(strict, conns):
    c = conns.raw(strict.port)
    c.send("SEND", {"destination": "/queue/LIM.Q"}, b"x" * 9000)
    expect_error(c, "8192")
    c = conns.raw(strict.port)
    c.send_bytes(b"SEND\ndestination:/queue/LIM.Q\n\n" + b"y" * 9000)   # no length, no NUL
    expect_error(c, "8192")


def test_a_5_mb_frame_gets_its_error_frame_not_a_reset(strict, conns):
    """The server once closed with the rest of the frame unread: the client got
    ECONNRESET instead of the ERROR. Now it ends its side and reads the rest away."""
    c = conns.raw(strict.port)
    c.send_bytes(b"SEND\ndestination:/queue/LIM.Q\ncontent-length:5000000\n\n" +
                 b"z" * 5_000_000 + b"\0")
    expect_error(c, "8192")


def test_too_many_headers_and_header_bytes(strict, conns):
    c = conns.raw(strict.port)
    c.send("SEND", {"destination": "/queue/LIM.Q", **{f"h{i}": "v" for i in range(12)}}, b"x")
    expect_error(c, "limit is 12")
    c = conns.raw(strict.port)
    c.send("SEND", {"destination": "/queue/LIM.Q", "big": "v" * 3000}, b"x")
    expect_error(c, "2048")


def test_too_many_subscriptions(strict, conns):
    c = conns.raw(strict.port)
    for i in range(3):
        subscribe(c, "LIM.Q", f"s{i}")
    c.send("SUBSCRIBE", {"destination": "/queue/LIM.Q", "id": "s3"})
    expect_error(c, "max_subscriptions")


def test_queue_full_is_an_error_with_2053_at_once_without_flow_control(strict, conns):
    """stomp.full_queue_wait_ms = 0: a SEND to a full queue fails at once, as
    MQPUT does (the wait itself: test_stomp_flow_control.py)."""
    strict.sc("DEFINE QLOCAL(FULL.Q) MAXDEPTH(2)")
    c = conns.raw(strict.port)
    send_all(c, "FULL.Q", ["1", "2"])
    c.send("SEND", {"destination": "/queue/FULL.Q", "receipt": "r3"}, b"3")
    err = expect_error(c, "2053", "FULL.Q")
    assert err["receipt-id"] == "r3" and "full_queue_wait_ms" not in err["message"]
    assert depth(strict, "FULL.Q") == 2


def test_queue_maxmsgl(strict, conns):
    c = conns.raw(strict.port)
    send_all(c, "SMALL.Q", [b"x" * 100])
    c.send("SEND", {"destination": "/queue/SMALL.Q"}, b"x" * 101)
    expect_error(c, "2030")


def test_max_connections(strict, conns):
    held: list[RawStomp] = []
    err = None
    end = time.monotonic() + 20
    try:
        while time.monotonic() < end:
            c = RawStomp(strict.port)
            f = c.connect()
            if f.command == "CONNECTED":
                held.append(c)
                continue
            c.close()
            if len(held) == 5:
                err = f
                break
            time.sleep(0.05)   # earlier tests' connections are still being released
        assert err is not None and len(held) == 5, f"{len(held)} connections, {err}"
        assert err.command == "ERROR" and "max_connections" in err["message"]
        held.pop().close()

        def again():
            c = RawStomp(strict.port)
            if c.connect().command == "CONNECTED":
                held.append(c)
                return True
            c.close()
            return False
        deadline_wait(again, 10, what="a free connection slot again")
    finally:
        for c in held:
            c.close()


# ------------------------------------------------------------------------------ TLS

def make_cert(tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not available to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=localhost", "-addext",
                    "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    return cert, key


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    base = tmp_path_factory.mktemp("stomptls")
    cert, key = make_cert(base)
    srv = QMServer(base / "hmq", "QT")
    srv.create()
    srv.configure(listeners=[{"name": "TLS", "host": "127.0.0.1", "port": 0,
                              "tls_cert": str(cert), "tls_key": str(key)},
                             {"name": "PLAIN", "host": "127.0.0.1", "port": 0,
                              "tls_cert": "", "tls_key": ""}])
    srv.start()
    srv.cert = cert
    yield srv
    srv.stop()


def test_tls_stomp_py_verified(tls_server, conns):
    assert tls_server.listeners[0]["tls"] is True
    c = conns.stomp(tls_server.port, tls_ca=str(tls_server.cert))
    c.send("/queue/TLS.Q", "over tls", headers={"receipt": "t1", "persistent": "true"})
    c.col.wait_receipt("t1")
    c.subscribe("/queue/TLS.Q", id="1", ack="client-individual")
    m = c.col.wait_messages(1)[0]
    assert m.body == "over tls"
    c.ack(m.headers["ack"], receipt="a1")
    c.col.wait_receipt("a1")


def test_tls_stomp_py_unverified_and_raw(tls_server, conns):
    c = conns.stomp(tls_server.port, tls_noverify=True)
    c.send("/queue/TLS2.Q", "noverify", headers={"receipt": "t2"})
    c.col.wait_receipt("t2")
    ctx = ssl.create_default_context(cafile=str(tls_server.cert))
    r = RawStomp(tls_server.port, tls=ctx)
    try:
        assert r.connect().command == "CONNECTED"
        subscribe(r, "TLS2.Q", ack="auto")
        assert bodies(r.messages(1)) == [b"noverify"]
    finally:
        r.close()


def test_tls_and_plain_listeners_share_queues(tls_server, conns):
    plain = [li for li in tls_server.listeners if li["name"] == "PLAIN"][0]
    assert plain["tls"] is False and plain["port"] != tls_server.port
    p = conns.raw(plain["port"])
    send_all(p, "BOTH.Q", ["from plain"])
    t = conns.stomp(tls_server.port, tls_ca=str(tls_server.cert))
    t.subscribe("/queue/BOTH.Q", id="1", ack="auto")
    assert t.col.wait_messages(1)[0].body == "from plain"


def test_tls_bad_certificate_refused_at_start(tmp_path):
    srv = QMServer(tmp_path / "hmq", "QB")
    srv.create()
    srv.configure(listeners=[{"name": "TLS", "host": "127.0.0.1", "port": 0,
                              "tls_cert": str(tmp_path / "missing.pem"),
                              "tls_key": str(tmp_path / "missing.key")}])
    rc, out = srv.start_failure()
    assert rc != 0 and "TLS" in out and "missing.pem" in out, out


def test_tls_listener_refuses_plain_text(tls_server, conns):
    c = RawStomp(tls_server.port, timeout=10)
    try:
        c.send_bytes(b"CONNECT\naccept-version:1.2\nhost:x\n\n\0")
        with pytest.raises((ConnectionClosed, TimeoutError, UnicodeDecodeError, ValueError,
                            AssertionError)):
            f = c.recv(timeout=5)
            assert f.command != "CONNECTED"
    finally:
        c.close()
    # the listener is still fine
    ok = conns.stomp(tls_server.port, tls_noverify=True)
    assert ok.is_connected()


# ------------------------------------------------------------------------------ durability

@pytest.mark.parametrize("hardenbo", ["NO", "YES"])
def test_receipted_persistent_messages_survive_sigkill(tmp_path, hardenbo):
    """Receipted messages and ACKs survive a kill -9; deliveries never
    acknowledged come back. Their backout count survives the kill only with
    HARDENBO(YES), which logs each delivery's get when it is made."""
    srv = QMServer(tmp_path / "hmq", "QD")
    srv.create()
    srv.start()
    try:
        srv.sc(f"DEFINE QLOCAL(DUR.Q) HARDENBO({hardenbo})")
        n = 300
        c = raw_connected(srv.port)
        # pipelined: every SEND carries a receipt; kill as soon as the last arrives
        for i in range(n):
            c.send("SEND", {"destination": "/queue/DUR.Q", "persistent": "true",
                            "receipt": f"p{i}"}, f"dur {i}".encode())
        c.send("BEGIN", {"transaction": "t"})
        for i in range(20):
            c.send("SEND", {"destination": "/queue/DUR.Q", "persistent": "true",
                            "transaction": "t"}, f"tx {i}".encode())
        c.send("COMMIT", {"transaction": "t", "receipt": "commit"})
        want = {f"p{i}" for i in range(n)} | {"commit"}
        got = set()
        while got != want:
            f = c.expect("RECEIPT")
            got.add(f["receipt-id"])
        srv.kill()
        c.close()
        srv.start()
        c = raw_connected(srv.port)
        subscribe(c, "DUR.Q", ack="client", **{"prefetch-count": "1024"})
        msgs = c.messages(n + 20)
        assert sorted(bodies(msgs)) == sorted([f"dur {i}".encode() for i in range(n)] +
                                              [f"tx {i}".encode() for i in range(20)])
        # acknowledge the first half (ACK receipts: after the force), kill at once
        half = len(msgs) // 2
        c.send("ACK", {"id": msgs[half - 1]["ack"], "receipt": "acked"})
        c.expect("RECEIPT")
        srv.kill()
        c.close()
        srv.start()
        c = raw_connected(srv.port)
        subscribe(c, "DUR.Q", ack="client-individual", **{"prefetch-count": "1024"})
        rest = c.messages(len(msgs) - half)
        assert sorted(bodies(rest)) == sorted(bodies(msgs[half:]))
        hardened = hardenbo == "YES"
        assert {m["redelivered"] for m in rest} == {"true" if hardened else "false"}
        assert {m.get("backout-count") for m in rest} == {"1" if hardened else None}
        quiet(c)
        c.close()
    finally:
        srv.stop()


def test_many_stomp_py_clients_in_parallel(server, conns):
    """8 stomp.py producers and consumers at once: every receipted message is
    delivered exactly once to the consumers (client-individual, acked)."""
    per = 60
    producers = [conns.stomp(server.port) for _ in range(4)]
    consumers = [conns.stomp(server.port) for _ in range(4)]
    seen: list[str] = []
    lock = threading.Lock()

    for i, c in enumerate(consumers):
        def on_message(frame, c=c):
            with lock:
                seen.append(frame.body)
            c.ack(frame.headers["ack"])
        c.col.on_message = on_message
        c.subscribe("/queue/PAR.Q", id=f"c{i}", ack="client-individual",
                    headers={"prefetch-count": "8"})

    def produce(k, p):
        for j in range(per):
            p.send("/queue/PAR.Q", f"p{k}-{j}", headers={"receipt": f"p{k}-{j}",
                                                         "persistent": "true"})
    threads = [threading.Thread(target=produce, args=(k, p)) for k, p in enumerate(producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for k, p in enumerate(producers):
        p.col.wait_receipt(f"p{k}-{per - 1}", 30)
        assert len(p.col.receipts) == per
    deadline_wait(lambda: len(seen) >= 4 * per, 30, what="all messages consumed")
    time.sleep(0.2)
    assert sorted(seen) == sorted(f"p{k}-{j}" for k in range(4) for j in range(per))
    deadline_wait(lambda: depth(server, "PAR.Q") == 0, 10, what="queue drained")


# ------------------------------------------------------------------------------ more edges

def test_receipts_in_frame_order_mixing_persistent_and_not(server, conns):
    c = conns.raw(server.port)
    for i in range(60):
        c.send("SEND", {"destination": "/queue/ORDER.Q", "persistent": "true" if i % 3 else
                        "false", "receipt": f"o{i}"}, b"x")
    got = [c.expect("RECEIPT")["receipt-id"] for _ in range(60)]
    assert got == [f"o{i}" for i in range(60)]


def test_nack_refused_on_10(server, conns):
    c = conns.raw(server.port, version="1.0")
    send_all(c, "NACK10.Q", ["x"])
    subscribe(c, "NACK10.Q", ack="client")
    m = c.messages(1)[0]
    c.send("NACK", {"message-id": m["message-id"]})
    expect_error(c, "NACK")


def test_stop_conn_backs_out_its_deliveries(server, conns):
    c = conns.raw(server.port, login="root", passcode="rootpw")
    session = c.connected["session"]
    send_all(c, "STOPC.Q", ["a", "b"])
    subscribe(c, "STOPC.Q", ack="client")
    c.messages(2)
    out = server.sc(f"DISPLAY CONN({session}) ALL")
    assert "USERID(root)" in out and "CONNAME(127.0.0.1:" in out, out
    server.sc(f"STOP CONN({session})", cli=True)
    expect_error(c, session)
    c2 = conns.raw(server.port)
    subscribe(c2, "STOPC.Q", ack="auto")
    again = c2.messages(2)
    assert bodies(again) == [b"a", b"b"] and {m["redelivered"] for m in again} == {"true"}


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


def test_slow_consumer_with_heartbeats_is_not_dropped(server, conns):
    """Regression: with its socket full the server stopped reading from the client,
    did not see its heart-beats, and dropped it (losing the ack:auto messages
    already in the write buffer)."""
    c = conns.raw(server.port)
    body = b"h" * 16384
    n = 600
    for _ in range(n):
        c.send("SEND", {"destination": "/queue/SLOWHB.Q", "persistent": "false"}, body)
    c.call("BEGIN", {"transaction": "sync"})
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    slow.connect(("127.0.0.1", server.port))
    try:
        slow.sendall(b"CONNECT\naccept-version:1.2\nhost:x\nheart-beat:500,0\n\n\0"
                     b"SUBSCRIBE\nid:1\ndestination:/queue/SLOWHB.Q\nack:auto\n\n\0")
        end = time.monotonic() + 2.5          # busy elsewhere, but beating every 200 ms
        while time.monotonic() < end:
            slow.sendall(b"\n")
            time.sleep(0.2)
        slow.settimeout(20)
        data = b""
        while data.count(body) < n:
            chunk = slow.recv(1 << 20)
            assert chunk, f"closed after {data.count(body)} of {n} messages"
            data += chunk
            assert b"ERROR" not in data
        assert data.count(body) == n
    finally:
        slow.close()


@pytest.mark.parametrize("together", [False, True], ids=["separate", "same-write"])
def test_unsubscribe_between_transactional_ack_and_commit(server, conns, together):
    """Regression: UNSUBSCRIBE backed out deliveries already ACKed in an open
    transaction; COMMIT then failed (its SENDs lost) or, in the same write,
    committed while the backout task logged HMQ9503E. Now the transaction keeps
    them: COMMIT consumes the message and publishes the SEND."""
    from support.oplog import operator_log
    from support.stomp_helpers import build_frame
    q = f"UNSUBTX{int(together)}"
    c = conns.raw(server.port)
    session = c.connected["session"]
    send_all(c, f"{q}.IN", ["in"], persistent="true")
    subscribe(c, f"{q}.IN")
    m = c.messages(1)[0]
    c.call("BEGIN", {"transaction": "t"})
    c.call("SEND", {"destination": f"/queue/{q}.OUT", "transaction": "t"}, b"out")
    c.call("ACK", {"id": m["ack"], "transaction": "t"})
    if together:
        c.send_bytes(build_frame("UNSUBSCRIBE", {"id": "s1"}) +
                     build_frame("COMMIT", {"transaction": "t", "receipt": "cm"}))
        f = c.recv()
        assert f.command == "RECEIPT", f
    else:
        c.call("UNSUBSCRIBE", {"id": "s1"})
        time.sleep(0.1)
        c.call("COMMIT", {"transaction": "t"})
    c2 = conns.raw(server.port)
    subscribe(c2, f"{q}.OUT", "o", ack="auto")
    assert bodies(c2.messages(1)) == [b"out"]
    subscribe(c2, f"{q}.IN", "i", ack="auto")
    quiet(c2)                                     # consumed by the COMMIT
    errors = [t for mid, t in operator_log(server.home, server.name)
              if mid == "HMQ9503E" and session in t]
    assert errors == []


def test_large_message_near_the_frame_limit(server, conns):
    c = conns.raw(server.port)
    body = bytes(range(256)) * (4_000_000 // 256)
    # non-persistent: this queue manager's 1 MiB log extents cannot hold a 4 MB
    # persistent message (HMQ7500E, a readable ERROR)
    c.call("SEND", {"destination": "/queue/LARGE.Q", "persistent": "false"}, body)
    subscribe(c, "LARGE.Q", ack="client-individual")
    m = c.messages(1)[0]
    assert m.body == body
    c.call("ACK", {"id": m["ack"]})


def test_client_that_never_connects_is_dropped(server):
    """The fixture opened a socket at the start and never sent CONNECT."""
    frames = server.idle.wait_closed(timeout=30)
    assert time.monotonic() - server.idle_since >= 4.5
    assert [f.command for f in frames] == ["ERROR"]
    assert "CONNECT" in frames[0]["message"]


def test_abort_after_unsubscribe_backs_out_its_acked_deliveries(server, conns):
    c = conns.raw(server.port)
    send_all(c, "ABUN.Q", ["m"])
    subscribe(c, "ABUN.Q")
    m = c.messages(1)[0]
    c.call("BEGIN", {"transaction": "t"})
    c.call("ACK", {"id": m["ack"], "transaction": "t"})
    c.call("UNSUBSCRIBE", {"id": "s1"})
    c.call("ABORT", {"transaction": "t"})
    c2 = conns.raw(server.port)
    subscribe(c2, "ABUN.Q", ack="auto")
    again = c2.messages(1)[0]
    assert again.body == b"m" and again["redelivered"] == "true"
    c.send("ACK", {"id": m["ack"]})               # nothing left to acknowledge
    expect_error(c, "not a delivery")


def test_resubscribe_same_id_after_unsubscribe(server, conns):
    c = conns.raw(server.port)
    send_all(c, "RESUB.Q", ["a", "b", "c"])
    subscribe(c, "RESUB.Q", **{"prefetch-count": "1"})
    a = c.messages(1)[0]
    c.call("UNSUBSCRIBE", {"id": "s1"})
    subscribe(c, "RESUB.Q", **{"prefetch-count": "2"})
    got = c.messages(2)
    quiet(c)
    assert bodies(got) == [b"a", b"b"] and got[0]["redelivered"] == "true"
    assert a["ack"] not in {m["ack"] for m in got}


@pytest.mark.parametrize("persistent", ["true", "false"])
def test_backout_threshold_falls_back_to_dead_letter_queue(server, conns, persistent):
    """BOQNAME put-inhibited: the message goes to the queue manager's DEADQ."""
    q = f"DLQF{persistent[0].upper()}.Q"         # MQSC folds unquoted names
    server.sc(f"DEFINE QLOCAL({q}.BOQ) PUT(DISABLED)\n"
              f"DEFINE QLOCAL({q}) BOTHRESH(1) BOQNAME({q}.BOQ)")
    dlq = re.search(r"DEADQ\(([^)]*)\)", server.sc("DISPLAY QMGR DEADQ")).group(1).strip()
    assert dlq
    c = conns.raw(server.port)
    send_all(c, q, ["to the dlq"], persistent=persistent)
    subscribe(c, q)
    m = c.messages(1)[0]
    c.call("NACK", {"id": m["ack"]})
    quiet(c, 0.3)
    subscribe(c, dlq, "dlq", ack="auto", selector=f"JMSMessageID = '{m['message-id']}'")
    moved = c.messages(1)[0]
    assert moved.body == b"to the dlq" and moved["HMQ_BACKOUT_QUEUE"] == q
    assert depth(server, q) == 0


def test_concurrent_auto_define_of_one_queue(server, conns):
    """Eight connections SEND to the same undefined queue at once: one defines it,
    every SEND is receipted, none gets an ERROR."""
    clients = [conns.raw(server.port) for _ in range(8)]
    for i, c in enumerate(clients):
        c.send("SEND", {"destination": "/queue/RACE.NEW", "receipt": f"r{i}"}, f"{i}".encode())
    for i, c in enumerate(clients):
        f = c.recv()
        assert (f.command, f.get("receipt-id")) == ("RECEIPT", f"r{i}"), f
    subscribe(clients[0], "RACE.NEW", ack="auto")
    assert sorted(bodies(clients[0].messages(8))) == sorted(f"{i}".encode() for i in range(8))


def test_queue_handles_of_stomp_connections(server, conns):
    def status():
        out = server.sc("DISPLAY QSTATUS(HANDLES.Q) IPPROCS OPPROCS")
        return (int(re.search(r"IPPROCS\((\d+)\)", out).group(1)),
                int(re.search(r"OPPROCS\((\d+)\)", out).group(1)))
    p = conns.raw(server.port)
    send_all(p, "HANDLES.Q", ["x"])
    c = conns.raw(server.port)
    subscribe(c, "HANDLES.Q", "a")
    subscribe(c, "HANDLES.Q", "b")
    # one handle per connection and queue, used by both subscriptions
    assert status() == (1, 1)
    c.call("UNSUBSCRIBE", {"id": "a"})
    assert status() == (1, 1)
    c2 = conns.raw(server.port)
    subscribe(c2, "HANDLES.Q", "c")
    assert status() == (2, 1)
    c2.close()
    c.close()
    p.send("DISCONNECT", {"receipt": "bye"})
    p.wait_closed()
    deadline_wait(lambda: status() == (0, 0), 10, what="handles closed")


def test_controlled_stop_ends_connections_and_backs_out(tmp_path):
    srv = QMServer(tmp_path / "hmq", "QE")
    srv.create()
    srv.start()
    try:
        c = raw_connected(srv.port)
        send_all(c, "STOP.Q", ["a", "b"], persistent="true")
        subscribe(c, "STOP.Q", ack="client")
        c.messages(2)
        c.call("BEGIN", {"transaction": "t"})
        c.call("SEND", {"destination": "/queue/STOP.Q", "transaction": "t",
                        "persistent": "true"}, b"uncommitted")
        assert srv.stop() == 0
        expect_error(c, "stopping")
        assert not (srv.qm_dir / "listeners.json").exists()
        srv.start()
        c = raw_connected(srv.port)
        subscribe(c, "STOP.Q", ack="client-individual")
        again = c.messages(2)
        assert bodies(again) == [b"a", b"b"]
        assert {m["redelivered"] for m in again} == {"true"}
        quiet(c)
        c.close()
    finally:
        srv.stop()


def test_properties_from_12_producer_cannot_break_10_consumer_frames(server, conns):
    """Regression: the 1.0 (raw) encoding replaced LF in values only, so a property
    name 'x\\n\\nfake' from a 1.2 producer ended a 1.0 consumer's header block early."""
    p = conns.raw(server.port)
    p.call("SEND", [("destination", "/queue/INJ10.Q"), ("x\n\nfake", "1"),
                    ("k:colon", "v\r\nw"), ("plain", "ok")], b"the body")
    c = conns.raw(server.port, version="1.0")
    c.send("SUBSCRIBE", {"destination": "/queue/INJ10.Q", "ack": "auto"})
    m = c.messages(1)[0]
    assert m.body == b"the body"
    assert m["content-length"] == "8" and m["plain"] == "ok"
    assert all("\n" not in k and "\r" not in k for k, _ in m.pairs)


def test_unicode_headers_and_body_round_trip(server, conns):
    c = conns.raw(server.port)
    c.call("SEND", {"destination": "/queue/UNI.Q", "x-uni": "héllo ✓ 日本語",
                    "content-type": "text/plain;charset=utf-8"}, "körper ✓".encode())
    s = conns.stomp(server.port)
    s.subscribe("/queue/UNI.Q", id="1", ack="auto")
    m = s.col.wait_messages(1)[0]
    assert m.headers["x-uni"] == "héllo ✓ 日本語" and m.body == "körper ✓"


def test_crlf_frames_accepted(server, conns):
    c = conns.raw(server.port)
    c.send_bytes(b"SEND\r\ndestination:/queue/CRLF.Q\r\nreceipt:c1\r\nk:v\r\n\r\ncrlf\0\r\n")
    assert c.expect("RECEIPT")["receipt-id"] == "c1"
    subscribe(c, "CRLF.Q", ack="auto")
    m = c.messages(1)[0]
    assert m.body == b"crlf" and m["k"] == "v"


def test_delivery_backed_out_to_release_log_space(tmp_path):
    """A consumer sits on an unacknowledged persistent delivery while others fill
    the (tiny, circular) log: the queue manager backs its unit of work out to
    release log space (HMQ7469W), the message comes back, and the late ACK gets
    an ERROR with MQRC 2003 instead of acknowledging a backed-out delivery.

    A delivery (one get) is always small enough to shunt forward, so with log
    shunting it would stay open for as long as its consumer holds it: this
    queue manager does not shunt (``tuning.shunt_checkpoints = 0``). Only a
    delivery from a queue with HARDENBO(YES) is in the log before its ACK."""
    srv = _tiny_log_server(tmp_path)
    try:
        srv.sc("DEFINE QLOCAL(PIN.Q) HARDENBO(YES)")
        h = raw_connected(srv.port)
        send_all(h, "PIN.Q", ["pin"], persistent="true")
        subscribe(h, "PIN.Q", ack="client", **{"prefetch-count": "2"})
        first = h.messages(1)[0]
        p = raw_connected(srv.port)
        subscribe(p, "FLOW.Q", ack="auto")
        back = []
        for i in range(5000):
            p.call("SEND", {"destination": "/queue/FLOW.Q", "persistent": "true"}, b"y" * 1000)
            if i % 20 == 0:
                back = h.poll(0.005)
                if back:
                    break
        assert back, "the long unit of work was never backed out"
        assert back[0].body == b"pin" and back[0]["redelivered"] == "true"
        h.send("ACK", {"id": first["ack"], "receipt": "late"})
        expect_error(h, "2003")
        p.call("BEGIN", {"transaction": "still-fine"})
    finally:
        srv.stop()


def _tiny_log_server(tmp_path) -> QMServer:
    srv = QMServer(tmp_path / "hmq", "QP")
    srv.home.mkdir(parents=True)
    srv.cli("create", "QP", "--port", "0", "--log-file-pages", "32", "--log-primary", "2",
            "--log-secondary", "1", "--checkpoint-records", "200")
    srv.configure(tuning={"shunt_checkpoints": 0})
    srv.start()
    return srv


def test_a_delivery_awaiting_its_ack_does_not_pin_the_log(tmp_path):
    """With HARDENBO(NO), the default, a delivery's get is logged at its ACK:
    a consumer holding one while others cycle the tiny circular log many times
    over pins nothing, is never backed out, and its late ACK is what takes
    the message, for good (a kill -9 after the ACK's receipt brings back
    nothing)."""
    srv = _tiny_log_server(tmp_path)
    try:
        h = raw_connected(srv.port)
        send_all(h, "PIN.Q", ["pin", "second"], persistent="true")
        subscribe(h, "PIN.Q", ack="client-individual", **{"prefetch-count": "1"})
        first = h.messages(1)[0]
        p = raw_connected(srv.port)
        subscribe(p, "FLOW.Q", ack="auto")
        for _ in range(1500):     # 1.5 MB through a log of three 128 KiB extents
            p.call("SEND", {"destination": "/queue/FLOW.Q", "persistent": "true"}, b"y" * 1000)
        assert h.poll(0.2) == []
        assert "HMQ7469W" not in (srv.qm_dir / "errors" / "HMQERR01.LOG").read_text()
        h.send("ACK", {"id": first["ack"], "receipt": "late"})
        assert h.expect("RECEIPT")["receipt-id"] == "late"
        assert h.messages(1)[0].body == b"second"     # delivered once the first is gone
        srv.kill()
        srv.start()
        c = raw_connected(srv.port)
        subscribe(c, "PIN.Q", ack="auto")
        assert bodies(c.messages(1)) == [b"second"]
        assert c.poll(0.3) == []
    finally:
        srv.stop()


def test_ipv6_loopback_listener_allowed_with_connauth_optional(tmp_path):
    try:
        probe = socket.socket(socket.AF_INET6)
        probe.bind(("::1", 0))
        probe.close()
    except OSError:
        pytest.skip("no IPv6 loopback here")
    srv = QMServer(tmp_path / "hmq", "Q6")
    srv.create()
    srv.configure(listeners=[{"name": "V6", "host": "::1", "port": 0,
                              "tls_cert": "", "tls_key": ""}])
    srv.start()
    try:
        c = RawStomp(srv.port, host="::1")
        assert c.connect().command == "CONNECTED"       # anonymous: loopback
        send_all(c, "V6.Q", ["six"])
        subscribe(c, "V6.Q", ack="auto")
        assert bodies(c.messages(1)) == [b"six"]
        c.close()
    finally:
        srv.stop()


def test_prefetch_window_never_exceeded_with_random_acks(server, conns):
    import random
    rng = random.Random(7)
    c = conns.raw(server.port)
    n, window = 120, 5
    for i in range(n):
        c.send("SEND", {"destination": "/queue/PFR.Q"}, f"m{i}".encode())
    c.call("BEGIN", {"transaction": "sync"})
    subscribe(c, "PFR.Q", ack="client-individual", **{"prefetch-count": str(window)})
    outstanding, done, nacked = [], set(), 0
    while len(done) < n:
        if not outstanding:
            outstanding.append(c.recv(10))
        outstanding += c.poll(0.02)
        assert len(outstanding) <= window, len(outstanding)
        rng.shuffle(outstanding)
        for _ in range(rng.randint(1, len(outstanding))):
            m = outstanding.pop()
            if rng.random() < 0.2:
                nacked += 1
                c.send("NACK", {"id": m["ack"]})
            else:
                done.add(m.body)
                c.send("ACK", {"id": m["ack"]})
    assert done == {f"m{i}".encode() for i in range(n)} and nacked > 0
    c.call("BEGIN", {"transaction": "end"})
    quiet(c, 0.2)


def test_stomp_py_11_nack_and_ack(server, conns):
    c = conns.stomp(server.port, "1.1")
    c.send("/queue/PY11.Q", "eleven", headers={"receipt": "s"})
    c.col.wait_receipt("s")
    c.subscribe("/queue/PY11.Q", id="sub", ack="client-individual")
    m = c.col.wait_messages(1)[0]
    c.nack(m.headers["message-id"], "sub", receipt="n")
    again = c.col.wait_messages(2)[1]
    assert again.headers["redelivered"] == "true" and again.body == "eleven"
    c.ack(again.headers["message-id"], "sub", receipt="a")
    c.col.wait_receipt("a")
    assert not c.col.errors


def test_pipelined_flood_split_at_random_points(server, conns):
    """Thousands of frames in one stream, cut into random pieces: every SEND is
    receipted in order and delivered once, bodies intact."""
    import random

    from support.stomp_helpers import build_frame
    rng = random.Random(11)
    n = 3000
    blob = b"".join(build_frame("SEND", {"destination": "/queue/FLOOD.Q", "receipt": f"f{i}",
                                         "i": str(i), "esc": "a:b\nc"},
                                f"body {i} \0 {'x' * rng.randrange(200)}".encode())
                    + rng.choice([b"", b"\n", b"\r\n"]) for i in range(n))
    c = conns.raw(server.port)
    pos = 0
    while pos < len(blob):
        step = rng.randrange(1, 4096)
        c.send_bytes(blob[pos:pos + step])
        pos += step
    got = [c.expect("RECEIPT")["receipt-id"] for _ in range(n)]
    assert got == [f"f{i}" for i in range(n)]
    subscribe(c, "FLOOD.Q", ack="client", **{"prefetch-count": "1024"})
    seen = []
    while len(seen) < n:
        batch = c.messages(min(1024, n - len(seen)))
        seen += batch
        c.call("ACK", {"id": batch[-1]["ack"]})
    assert [int(m["i"]) for m in seen] == list(range(n))
    assert all(m["esc"] == "a:b\nc" and m.body.startswith(f"body {m['i']} \0".encode())
               for m in seen)


def test_transaction_backed_out_to_release_log_space(tmp_path):
    srv = QMServer(tmp_path / "hmq", "QW")
    srv.home.mkdir(parents=True)
    srv.cli("create", "QW", "--port", "0", "--log-file-pages", "32", "--log-primary", "2",
            "--log-secondary", "1", "--checkpoint-records", "200")
    srv.start()
    try:
        t = raw_connected(srv.port)
        t.call("BEGIN", {"transaction": "long"})
        for _ in range(3):      # half the log: too big to shunt forward (the last resort)
            t.call("SEND", {"destination": "/queue/LONGTX.Q", "transaction": "long",
                            "persistent": "true"}, b"never" * 12_000)
        p = raw_connected(srv.port)
        subscribe(p, "FLOW2.Q", ack="auto")
        log = srv.qm_dir / "errors" / "HMQERR01.LOG"
        for i in range(5000):
            p.call("SEND", {"destination": "/queue/FLOW2.Q", "persistent": "true"}, b"y" * 1000)
            if i % 50 == 0 and "HMQ7469W" in log.read_text():
                break
        else:
            pytest.fail("the long transaction was never backed out")
        t.send("COMMIT", {"transaction": "long", "receipt": "c"})
        expect_error(t, "2003")
        subscribe(p, "LONGTX.Q", "l", ack="auto")
        quiet(p)
    finally:
        srv.stop()


def test_message_expiring_while_delivered_is_not_redelivered(server, conns):
    c = conns.raw(server.port)
    soon = int(time.time() * 1000) + 700
    c.call("SEND", {"destination": "/queue/EXPD.Q", "expires": str(soon)}, b"short-lived")
    c.call("SEND", {"destination": "/queue/EXPD.Q"}, b"lasting")
    subscribe(c, "EXPD.Q", **{"prefetch-count": "1"})
    m = c.messages(1)[0]
    assert m.body == b"short-lived" and m["expires"] == str(soon)
    time.sleep(max(0.0, soon / 1000 - time.time()) + 0.2)
    c.call("NACK", {"id": m["ack"]})
    nxt = c.messages(1)[0]
    assert nxt.body == b"lasting"
    c.call("ACK", {"id": nxt["ack"]})
    quiet(c)


def test_listener_port_in_use_refused_at_start(server, tmp_path):
    srv = QMServer(tmp_path / "hmq", "QU")
    srv.create()
    srv.configure(listeners=[{"name": "BUSY", "host": "127.0.0.1", "port": server.port,
                              "tls_cert": "", "tls_key": ""}])
    rc, out = srv.start_failure()
    assert rc != 0 and "cannot listen" in out and str(server.port) in out, out
    assert not (srv.qm_dir / "admin.sock").exists()


# ------------------------------------------------------------------------------ model-based

from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import (  # noqa: E402
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

MODEL_PORT: list[int] = []


class SubscriptionModel(RuleBasedStateMachine):
    """One connection, one client-individual subscription (prefetch 3), SENDs,
    ACK/NACK and transactions in random order against a model of the queue:
    which messages are available, which are delivered and held (by the window),
    which a transaction will consume or publish. After every step the deliveries
    the server made are checked against the model; at the end a second
    connection drains the queue and must find exactly what the model says."""

    PREFETCH = 3
    ACK_MODE = "client-individual"
    runs = 0

    @initialize()
    def setup(self):
        SubscriptionModel.runs += 1
        self.q = f"MODEL.{SubscriptionModel.runs}"
        self.c = raw_connected(MODEL_PORT[0])
        self.n = 0
        self.available: set[str] = set()
        self.delivered_before: set[str] = set()
        self.held: dict[str, dict] = {}          # ack id -> {"body", "tx"}
        self.tx: str | None = None
        self.tx_sends: list[str] = []
        self.tx_n = 0
        subscribe(self.c, self.q, ack=self.ACK_MODE,
                  **{"prefetch-count": str(self.PREFETCH)})

    def teardown(self):
        c = getattr(self, "c", None)
        if c is None:
            return
        c.close()
        expected = sorted(self.available | {h["body"] for h in self.held.values()})
        d = raw_connected(MODEL_PORT[0])
        try:
            subscribe(d, self.q, ack="auto")
            got = sorted(m.body.decode() for m in d.messages(len(expected)))
            assert got == expected
            quiet(d, 0.05)
        finally:
            d.close()

    def settle(self, frames=()):
        """Take the deliveries the last step caused and check them."""
        pending = list(frames)
        want = min(self.PREFETCH, len(self.held) + len(self.available))
        end = time.monotonic() + 10
        while True:
            for f in pending:
                assert f.command == "MESSAGE", f
                body = f.body.decode()
                assert body in self.available, (body, self.available)
                assert f["redelivered"] == ("true" if body in self.delivered_before
                                            else "false")
                self.available.discard(body)
                self.delivered_before.add(body)
                self.held[f["ack"]] = {"body": body, "tx": None}
            assert len(self.held) <= self.PREFETCH
            pending = []
            if len(self.held) >= want:
                break
            assert time.monotonic() < end, f"only {len(self.held)} of {want} delivered"
            pending = self.c.poll(0.01)
        extra = self.c.poll(0.01)
        assert extra == [], f"beyond the window: {extra}"

    @rule(in_tx=st.booleans())
    def send(self, in_tx):
        self.n += 1
        body = f"m{self.n}"
        if in_tx and self.tx:
            frames = self.c.call("SEND", {"destination": f"/queue/{self.q}",
                                          "transaction": self.tx}, body.encode())
            self.tx_sends.append(body)
        else:
            frames = self.c.call("SEND", {"destination": f"/queue/{self.q}"}, body.encode())
            self.available.add(body)
        self.settle(frames)

    @precondition(lambda self: self.tx is None)
    @rule()
    def begin(self):
        self.tx_n += 1
        self.tx = f"t{self.tx_n}"
        self.settle(self.c.call("BEGIN", {"transaction": self.tx}))

    @precondition(lambda self: self.tx is not None)
    @rule()
    def commit(self):
        frames = self.c.call("COMMIT", {"transaction": self.tx})
        for ack, h in list(self.held.items()):
            if h["tx"] == self.tx:
                del self.held[ack]
        self.available.update(self.tx_sends)
        self.tx, self.tx_sends = None, []
        self.settle(frames)

    @precondition(lambda self: self.tx is not None)
    @rule()
    def abort(self):
        frames = self.c.call("ABORT", {"transaction": self.tx})
        for h in self.held.values():
            if h["tx"] == self.tx:
                h["tx"] = None
        self.tx, self.tx_sends = None, []
        self.settle(frames)

    def _free(self):
        return sorted(a for a, h in self.held.items() if h["tx"] is None)

    def covered(self, ack: str) -> list[str]:
        """What an ACK/NACK of ``ack`` covers: itself, or with ack:client every
        earlier delivery still held and not in a transaction (cumulative)."""
        if self.ACK_MODE != "client":
            return [ack]
        out = []
        for a, h in self.held.items():          # in delivery order
            if h["tx"] is None:
                out.append(a)
            if a == ack:
                return out
        raise AssertionError(ack)

    @precondition(lambda self: any(h["tx"] is None for h in self.held.values()))
    @rule(data=st.data(), in_tx=st.booleans())
    def ack(self, data, in_tx):
        ack = data.draw(st.sampled_from(self._free()))
        covered = self.covered(ack)
        if in_tx and self.tx:
            frames = self.c.call("ACK", {"id": ack, "transaction": self.tx})
            for a in covered:
                self.held[a]["tx"] = self.tx
        else:
            frames = self.c.call("ACK", {"id": ack})
            for a in covered:
                del self.held[a]
        self.settle(frames)

    @precondition(lambda self: any(h["tx"] is None for h in self.held.values()))
    @rule(data=st.data())
    def nack(self, data):
        ack = data.draw(st.sampled_from(self._free()))
        covered = self.covered(ack)
        frames = self.c.call("NACK", {"id": ack})
        for a in covered:
            self.available.add(self.held.pop(a)["body"])
        self.settle(frames)

    @invariant()
    def window(self):
        if hasattr(self, "held"):
            assert len(self.held) <= self.PREFETCH


class CumulativeSubscriptionModel(SubscriptionModel):
    ACK_MODE = "client"


@pytest.mark.parametrize("model", [SubscriptionModel, CumulativeSubscriptionModel],
                         ids=["client-individual", "client"])
def test_subscription_model(server, model):
    MODEL_PORT[:] = [server.port]
    run = model.TestCase
    run.settings = settings(max_examples=12, stateful_step_count=25, deadline=None,
                            suppress_health_check=[HealthCheck.too_slow])
    run().runTest()


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


class _HeldTransport(FrameTransport):
    """A transport that dispatches nothing and keeps the bytes it sends."""
    def _dispatch(self, frame):
        return None

    def _send(self, data: bytes) -> None:
        self.sent.append(data)


def _held_transport(loop, log) -> _HeldTransport:
    t = _HeldTransport(loop, Limits(1 << 20, 100, 8192))
    t.sent, t.core = [], type("Core", (), {"log": log})()
    return t


def test_frames_held_on_forces_that_fail_end_the_connection_once():
    """Each frame held on a force has a future of its own; when the log fails,
    the forces of a turn fail together. The first failed frame ends the
    connection with one ERROR; the frames behind it are dropped, not each made
    to fail it again (a second ERROR, then a write after the end)."""
    from harbormq.errors import LogError

    class Log:
        """Forces that fail on the next loop turn (a full disk)."""
        def __init__(self, loop):
            self.loop = loop

        def force(self):
            fut = self.loop.create_future()
            self.loop.call_soon(fut.set_exception, LogError("writing the log failed: ENOSPC"))
            return fut

    async def run():
        loop = asyncio.get_running_loop()
        trouble = []
        loop.set_exception_handler(lambda _loop, context: trouble.append(context))
        t = _held_transport(loop, Log(loop))
        t._send_after(t.core.log.force(), b"RECEIPT-1")      # one loop turn
        t._send_after(t.core.log.force(), b"MESSAGE-2")
        t._send_after(None, b"RECEIPT-3")
        for _ in range(10):
            await asyncio.sleep(0)
        return t.sent, trouble
    sent, trouble = asyncio.run(run())
    assert len(sent) == 1 and sent[0].startswith(b"ERROR\n") and b"ENOSPC" in sent[0], sent
    assert trouble == []


def test_a_frame_held_on_a_cancelled_shared_force_is_still_sent_in_order():
    """The forces asked for in one loop turn share a future; a task awaiting it
    that is cancelled (a receiver channel's confirmer when its connection ends)
    cancels it for every waiter. A MESSAGE held on it was then dropped (an
    exception in the release callback) and the frames behind it went out: the
    client saw a gap in its deliveries, the message stayed locked, unacked."""
    class Log:
        """Forces that complete on the next loop turn."""
        def __init__(self, loop):
            self.loop, self.asked = loop, 0

        def force(self):
            self.asked += 1
            fut = self.loop.create_future()
            self.loop.call_soon(fut.set_result, 0)
            return fut

    async def run():
        loop = asyncio.get_running_loop()
        t = _held_transport(loop, Log(loop))
        shared = loop.create_future()

        async def confirmer():
            await shared       # as the receiver's confirmer awaited its commit
        waiter = loop.create_task(confirmer())
        await asyncio.sleep(0)
        t._send_after(shared, b"m1")
        t._send_after(shared, b"m2")
        waiter.cancel()
        await asyncio.sleep(0)
        assert shared.cancelled()
        t._send_after(None, b"m3")
        later = loop.create_future()
        t._send_after(later, b"m4")
        later.set_result(0)
        for _ in range(20):
            await asyncio.sleep(0)
        return t.sent, t.core.log.asked
    sent, asked = asyncio.run(run())
    assert sent == [b"m1", b"m2", b"m3", b"m4"]
    assert asked >= 1      # the held frames waited for a force of their own
