"""NACK and backout: the backout count each redelivery carries, and a message
whose count reaches BOTHRESH moved to its BOQNAME, or to the queue manager's
dead-letter queue when BOQNAME takes no puts.

Not here: ACK and NACK themselves (test_stomp_subscribe.py).
"""

from __future__ import annotations

import re

import pytest
from support.stomp_helpers import (
    deadline_wait,
    depth,
    quiet,
    send_all,
    subscribe,
)


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
