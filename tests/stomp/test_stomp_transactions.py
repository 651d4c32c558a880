"""STOMP transactions (BEGIN, COMMIT, ABORT): SENDs and ACKs that take effect
together or not at all, a transaction lost with its connection, and an
UNSUBSCRIBE between a transactional ACK and the COMMIT or ABORT.

Not here: a transaction backed out to free log space (test_stomp_durability.py),
a held SEND in a transaction (test_stomp_flow_control.py).
"""

from __future__ import annotations

import time

import pytest
from support.stomp_helpers import (
    bodies,
    depth,
    expect_error,
    quiet,
    send_all,
    subscribe,
)


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
