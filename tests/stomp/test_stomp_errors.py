"""ERROR frames and limits: a destination that is no queue, the receipt-id of
the frame that failed, an ERROR closing only its own connection, and the
``strict`` server's limits (frame and header sizes, header count, subscriptions,
connections, MAXMSGL, a full queue without flow control, no queues defined on
first use).

Not here: malformed frames (test_stomp_frames.py), errors of the ack modes,
selectors and transactions (beside what they test), refused logins
(test_stomp_security.py).
"""

from __future__ import annotations

import time

import pytest
from support.stomp_helpers import (
    QMServer,
    RawStomp,
    deadline_wait,
    depth,
    expect_error,
    send_all,
    subscribe,
)


def test_unknown_destination_prefix(server, conns):
    c = conns.raw(server.port)
    bystander = conns.raw(server.port)
    c.send("SEND", {"destination": "/exchange/news"}, b"x")
    expect_error(c, "/exchange/news", "/queue/", "/topic/")
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
