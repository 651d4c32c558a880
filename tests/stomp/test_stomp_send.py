"""SEND and the MESSAGE it becomes: bodies (NUL bytes, content-length, a large
one, CRLF frames), headers and their escaping by version, properties, the
message descriptor (priority, expiry, persistence, correlation id, reply-to)
and queues defined on first use.

Not here: receipts and what they promise (test_stomp_durability.py), a SEND
refused (test_stomp_errors.py), a full queue's wait (test_stomp_flow_control.py).
"""

from __future__ import annotations

import re
import time

from support.stomp_helpers import (
    bodies,
    expect_error,
    quiet,
    send_all,
    subscribe,
)


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


def test_crlf_frames_accepted(server, conns):
    c = conns.raw(server.port)
    c.send_bytes(b"SEND\r\ndestination:/queue/CRLF.Q\r\nreceipt:c1\r\nk:v\r\n\r\ncrlf\0\r\n")
    assert c.expect("RECEIPT")["receipt-id"] == "c1"
    subscribe(c, "CRLF.Q", ack="auto")
    m = c.messages(1)[0]
    assert m.body == b"crlf" and m["k"] == "v"


# ------------------------------------------------------------------------------ headers

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


# ------------------------------------------------------------------------------ descriptor

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


def test_default_persistence_is_the_queues_defpsist(server, conns):
    server.sc("DEFINE QLOCAL(PSIST.YES) DEFPSIST(YES)\nDEFINE QLOCAL(PSIST.NO) DEFPSIST(NO)")
    c = conns.raw(server.port)
    send_all(c, "PSIST.YES", ["y"])
    send_all(c, "PSIST.NO", ["n"])
    subscribe(c, "PSIST.YES", "a", ack="auto")
    assert c.messages(1)[0]["persistent"] == "true"
    subscribe(c, "PSIST.NO", "b", ack="auto")
    assert c.messages(1)[0]["persistent"] == "false"


# ------------------------------------------------------------------------------ auto-define

def test_auto_define_on_defines_from_default(server, conns):
    c = conns.raw(server.port)
    send_all(c, "AUTODEF.NEW", ["x"])
    out = server.sc("DISPLAY QLOCAL(AUTODEF.NEW) MAXDEPTH")
    assert "QUEUE(AUTODEF.NEW)" in out


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
