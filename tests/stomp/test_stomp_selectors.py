"""Selectors on SUBSCRIBE: JMSCorrelationID (on a queue with and without a
CORRELID index) and JMSMessageID, SQL-92 conditions on properties and header
fields, and selectors that do not parse, refused with an ERROR naming the
position.
"""

from __future__ import annotations

import pytest
from support.stomp_helpers import (
    bodies,
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
