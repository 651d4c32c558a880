"""Selectors on SUBSCRIBE: JMSCorrelationID (on a queue with and without a
CORRELID index) and JMSMessageID, SQL-92 conditions on properties and header
fields, and selectors that do not parse, refused with an ERROR naming the
position.
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


@pytest.mark.parametrize(("selector", "fragments"), [
    ("color = = 'red'", ("selector", "position 9", "HMQ2459E")),
    ("JMSCorrelationID = 'c1", ("selector", "position 20", "not closed")),
    ("color LIKE 5", ("position 12", "pattern")),
    ("JMSMessageID = 'zz'", ("JMSMessageID",))])
def test_unparsable_selector_is_an_error_naming_the_position(server, conns, selector,
                                                             fragments):
    """(Before SQL-92 selectors, any selector but the two ids was refused; now a
    selector is refused only when it does not parse, naming where.)"""
    c = conns.raw(server.port)
    c.send("SUBSCRIBE", {"destination": "/queue/SELX.Q", "id": "1", "selector": selector})
    expect_error(c, *fragments)


# -- SQL-92 selectors (issue 31) ----------------------------------------------------------------

def test_selectors_split_a_queue_between_consumers(server, conns):
    """stomp.py subscribers each selecting on a user header: each gets its own
    messages, in order, and no other."""
    q = "/queue/SELP.SPLIT"
    red, blue = conns.stomp(server.port), conns.stomp(server.port)
    red.subscribe(q, id="red", ack="client-individual",
                  headers={"selector": "color = 'red' AND size > 2", "receipt": "sr"})
    blue.subscribe(q, id="blue", ack="auto",
                   headers={"selector": "color IN ('blue', 'navy') OR size IS NULL",
                            "receipt": "sb"})
    red.col.wait_receipt("sr")
    blue.col.wait_receipt("sb")
    producer = conns.stomp(server.port)
    sent = [("red", "3"), ("blue", "1"), ("red", "1"), ("navy", "9"), ("red", "10"), ("x", None)]
    for i, (color, size) in enumerate(sent):
        headers = {"color": color, "receipt": f"p{i}"}
        if size is not None:
            headers["size"] = size
        producer.send(q, f"{color}-{size}", headers=headers)
        producer.col.wait_receipt(f"p{i}")
    assert [f.body for f in red.col.wait_messages(2)] == ["red-3", "red-10"]
    assert [f.body for f in blue.col.wait_messages(3)] == ["blue-1", "navy-9", "x-None"]
    time.sleep(0.3)
    assert len(red.col.messages) == 2 and len(blue.col.messages) == 3
    # "red-1" matches neither: it stays on the queue for another consumer
    rest = conns.raw(server.port)
    subscribe(rest, "SELP.SPLIT", "rest", ack="auto")
    assert bodies(rest.messages(1)) == [b"red-1"]
    quiet(rest, 0.2)


def test_unselected_messages_stay_for_other_consumers(server, conns):
    """A selecting consumer and a plain one: the plain one gets its turns and
    everything the selector leaves; nothing is lost or given twice."""
    q = "SELP.STAY"
    picky, plain = conns.raw(server.port), conns.raw(server.port)
    subscribe(picky, q, "picky", ack="auto", selector="n / 10 * 10 = n")
    subscribe(plain, q, "plain", ack="auto")
    producer = conns.raw(server.port)
    for i in range(40):
        producer.call("SEND", {"destination": f"/queue/{q}", "n": str(i)}, str(i).encode())
    got_picky, got_plain = [], []
    deadline = time.monotonic() + 20
    while len(got_picky) + len(got_plain) < 40 and time.monotonic() < deadline:
        got_picky += [int(f.body) for f in picky.poll(0.05)]
        got_plain += [int(f.body) for f in plain.poll(0.05)]
    assert sorted(got_picky + got_plain) == list(range(40))
    assert all(n % 10 == 0 for n in got_picky) and got_picky == sorted(got_picky)
    assert got_plain == sorted(got_plain) and len(got_plain) >= 36


def test_selector_on_a_backlog_one_percent_matching(server, conns):
    """A backlog where 1 % match: exactly those, in order; the rest stay."""
    q = "SELP.BACKLOG"
    producer = conns.raw(server.port)
    for i in range(600):
        headers = {"destination": f"/queue/{q}", "receipt": f"r{i}", "seq": str(i)}
        if i % 100 == 42:
            headers["kind"] = "rare"
        producer.send("SEND", headers, str(i).encode())
    for _ in range(600):
        producer.expect("RECEIPT")
    c = conns.raw(server.port)
    subscribe(c, q, "rare", ack="client-individual", selector="kind = 'rare' AND seq >= 100")
    got = c.messages(5)
    assert [int(f.body) for f in got] == [142, 242, 342, 442, 542]
    quiet(c, 0.2)
    for f in got:
        c.call("ACK", {"id": f["ack"]})
    assert depth(server, q) == 595      # what the selector left stays


def test_selector_finds_messages_that_arrive_ahead_of_its_scan(server, conns):
    """The scan remembers where it stopped; a matching message that sorts before
    that point (a higher priority), or that comes back (NACK), is still found."""
    q = "SELP.CURSOR"
    producer = conns.raw(server.port)
    for _ in range(50):
        producer.call("SEND", {"destination": f"/queue/{q}", "priority": "1"}, b"no")
    c = conns.raw(server.port)
    subscribe(c, q, "s", ack="client-individual", selector="hit = 'y'")
    quiet(c, 0.2)
    producer.call("SEND", {"destination": f"/queue/{q}", "hit": "y", "priority": "0"}, b"low")
    low = c.messages(1)[0]
    assert low.body == b"low"
    producer.call("SEND", {"destination": f"/queue/{q}", "hit": "y", "priority": "9"}, b"high")
    high = c.messages(1)[0]
    assert high.body == b"high"
    c.call("NACK", {"id": low["ack"]})
    again = c.messages(1)[0]
    assert again.body == b"low" and again["redelivered"] == "true"
    c.call("ACK", {"id": again["ack"]})
    c.call("ACK", {"id": high["ack"]})
    quiet(c, 0.2)


def test_selector_on_header_fields(server, conns):
    q = "SELP.HEADERS"
    producer = conns.raw(server.port)
    producer.call("SEND", {"destination": f"/queue/{q}", "priority": "2", "type": "invoice"},
                  b"low-invoice")
    producer.call("SEND", {"destination": f"/queue/{q}", "priority": "7", "type": "order",
                           "persistent": "true", "correlation-id": "c-9"}, b"high-order")
    producer.call("SEND", {"destination": f"/queue/{q}", "priority": "8"}, b"high-untyped")
    c = conns.raw(server.port)
    subscribe(c, q, "s", ack="auto",
              selector="JMSPriority > 4 AND JMSType = 'order' AND "
                       "JMSDeliveryMode = 'PERSISTENT' AND JMSCorrelationID LIKE 'c-%' AND "
                       "JMSXDeliveryCount = 1 AND JMSTimestamp > 0")
    assert bodies(c.messages(1)) == [b"high-order"]
    quiet(c, 0.2)
    subscribe(c, q, "t", ack="auto", selector="JMSType IS NULL OR JMSType <> 'invoice'")
    assert bodies(c.messages(1)) == [b"high-untyped"]
    quiet(c, 0.2)
