"""How a STOMP connection ends and what its deliveries do then: DISCONNECT with
a receipt behind earlier ones, an abrupt close, STOP CONN from MQSC and a
controlled stop of the queue manager; deliveries never acknowledged come back,
redelivered.

Not here: a connection ended by its ERROR (test_stomp_errors.py), by missing
heart-beats (test_stomp_connect.py).
"""

from __future__ import annotations

import socket

from support.stomp_helpers import (
    QMServer,
    bodies,
    expect_error,
    quiet,
    raw_connected,
    send_all,
    subscribe,
)


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
