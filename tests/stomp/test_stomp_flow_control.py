"""Producer flow control: a SEND that finds its queue full holds its producer
(the server stops reading from it) until the queue has room or
``stomp.full_queue_wait_ms`` passes, then fails with MQRC 2053 (hardening
issue: "a full queue disconnects its producer").

Real servers (``harbormq start --foreground``) on free loopback ports, with
stomp.py and the raw client. ``server`` has the default configuration (the
regression runs there, so it runs unchanged on code without the setting),
``short`` a wait of one second, ``long`` a wait far longer than any test so a
held producer stays held for as long as the test looks at it.
"""

from __future__ import annotations

import re
import time

import pytest
from support.stomp_helpers import (
    QMServer,
    RawStomp,
    build_frame,
    deadline_wait,
    raw_connected,
    stomp_client,
)

#: the wait of ``short``
SHORT_WAIT_S = 1.0


def _server(tmp_path_factory, name: str, **stomp):
    srv = QMServer(tmp_path_factory.mktemp(name.lower()) / "hmq", name)
    srv.create(**stomp)
    srv.start()
    return srv


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = _server(tmp_path_factory, "QF")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def short(tmp_path_factory):
    srv = _server(tmp_path_factory, "QSHORT", full_queue_wait_ms=int(SHORT_WAIT_S * 1000))
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def long(tmp_path_factory):
    srv = _server(tmp_path_factory, "QLONG", full_queue_wait_ms=600_000)
    yield srv
    srv.stop()


def status(srv: QMServer, queue: str, what: str) -> int:
    out = srv.sc(f"DISPLAY QSTATUS({queue}) {what}")
    m = re.search(what + r"\((\d+)\)", out)
    assert m, out
    return int(m.group(1))


def depth(srv: QMServer, queue: str) -> int:
    return status(srv, queue, "CURDEPTH")


def send(queue: str, body: str, **headers) -> bytes:
    return build_frame("SEND", {"destination": f"/queue/{queue}", **headers}, body.encode())


def fill(c: RawStomp, queue: str, bodies) -> None:
    for b in bodies:
        c.call("SEND", {"destination": f"/queue/{queue}"}, b.encode())


def drain(srv: QMServer, queue: str, n: int) -> list[bytes]:
    """The next ``n`` messages of ``queue`` (ack:auto, a connection of its own)."""
    c = raw_connected(srv.port)
    try:
        c.call("SUBSCRIBE", {"destination": f"/queue/{queue}", "id": "d", "ack": "auto"})
        return [m.body for m in c.messages(n)]
    finally:
        c.close()


def expect_error(c: RawStomp, timeout: float = 60):
    """The ERROR the server ends the connection with, and the frames before it."""
    frames = c.wait_closed(timeout=timeout)
    errors = [f for f in frames if f.command == "ERROR"]
    assert len(errors) == 1 and frames[-1] is errors[0], frames
    return errors[0], frames[:-1]


@pytest.fixture
def clients():
    """stomp.py connections made by a test, disconnected at its end."""
    made = []
    yield made
    for c in made:
        try:
            if c.is_connected():
                c.disconnect()
        except Exception:
            pass


def test_full_queue_slows_a_pipelining_producer_instead_of_dropping_it(server, clients):
    """Regression: MAXDEPTH 10, a producer pipelines 30 persistent SENDs with
    receipts, a consumer drains slowly. Before flow control the 11th SEND got an
    ERROR (2053) and the connection was closed; now every SEND waits its turn."""
    server.sc("DEFINE QLOCAL(FLOW.Q) MAXDEPTH(10)")
    n = 30
    producer = stomp_client(server.port)
    clients.append(producer)
    for i in range(n):
        producer.send("/queue/FLOW.Q", f"m{i:02d}",
                      headers={"persistent": "true", "receipt": f"r{i}"})
    # the queue fills to MAXDEPTH and no further: no more than 10 receipts yet
    deadline_wait(lambda: depth(server, "FLOW.Q") == 10, 30, what="FLOW.Q full")
    assert len(producer.col.receipts) <= 10
    assert not producer.col.errors, [e.headers for e in producer.col.errors]

    consumer = stomp_client(server.port)
    clients.append(consumer)
    consumer.subscribe("/queue/FLOW.Q", id="s", ack="client-individual",
                       headers={"prefetch-count": "1"})
    got = []
    for i in range(n):
        consumer.col.wait_messages(i + 1, timeout=60)
        m = consumer.col.messages[i]
        got.append(m.body)
        assert depth(server, "FLOW.Q") <= 10
        time.sleep(0.02)                                # a slow consumer
        consumer.ack(m.headers["ack"])
    assert got == [f"m{i:02d}" for i in range(n)]       # all, once, in order
    producer.col.wait(lambda: len(producer.col.receipts) == n, 60, "all 30 receipts")
    assert producer.col.receipts == [f"r{i}" for i in range(n)]
    assert producer.col.errors == [] and producer.is_connected()
    # the connection is still good for more
    producer.send("/queue/FLOW.Q", "after", headers={"receipt": "after"})
    producer.col.wait_receipt("after")
    assert producer.col.errors == [] and consumer.col.errors == []


# ----------------------------------------------------------------------- the wait expires

@pytest.mark.parametrize("persistent", ["true", "false"])
def test_send_beyond_maxdepth_fails_with_2053_after_the_wait(short, persistent):
    """No consumer: the SEND beyond MAXDEPTH is held for the wait, then gets an
    ERROR naming the queue and 2053 (and its receipt id); what was sent before it
    is all on the queue, what was pipelined behind it was never applied."""
    q = f"SHORT.{persistent.upper()}"
    short.sc(f"DEFINE QLOCAL({q}) MAXDEPTH(5)")
    c = raw_connected(short.port)
    try:
        fill(c, q, [f"m{i}" for i in range(5)])
        started = time.monotonic()
        c.send_bytes(send(q, "m5", persistent=persistent, receipt="r5") +
                     send("SHORT.BEHIND", "behind", receipt="rb"))
        err, before = expect_error(c)
        waited = time.monotonic() - started
    finally:
        c.close()
    assert before == [], before                     # no RECEIPT for either SEND
    msg = err["message"]
    assert "2053" in msg and q in msg and "full_queue_wait_ms" in msg, msg
    assert err["receipt-id"] == "r5"
    assert waited >= 0.9 * SHORT_WAIT_S, waited     # held for the wait, not failed at once
    assert waited < SHORT_WAIT_S + 45, waited       # ...and not for ever
    assert depth(short, q) == 5
    assert drain(short, q, 5) == [f"m{i}".encode() for i in range(5)]
    out = short.sc("DISPLAY QLOCAL(SHORT.*)")
    assert "SHORT.BEHIND" not in out                # the frame behind it was never read


def test_held_send_in_a_transaction_fails_and_backs_out_the_transaction(short):
    """A transaction's own uncommitted SENDs count toward MAXDEPTH: with no
    consumer its next SEND waits in vain, fails with 2053, and the transaction
    is backed out with the connection."""
    short.sc("DEFINE QLOCAL(SHORT.TX) MAXDEPTH(3)")
    c = raw_connected(short.port)
    try:
        fill(c, "SHORT.TX", ["outside"])
        c.call("BEGIN", {"transaction": "t"})
        for i in range(2):
            c.call("SEND", {"destination": "/queue/SHORT.TX", "transaction": "t"},
                   f"t{i}".encode())
        c.send("SEND", {"destination": "/queue/SHORT.TX", "transaction": "t",
                        "receipt": "r2"}, b"t2")
        err, _ = expect_error(c)
    finally:
        c.close()
    assert "2053" in err["message"] and "SHORT.TX" in err["message"]
    deadline_wait(lambda: depth(short, "SHORT.TX") == 1, 30, what="the transaction backed out")
    assert drain(short, "SHORT.TX", 1) == [b"outside"]


def test_queue_defined_on_first_use_copies_the_default_queue_and_is_flow_controlled(
        server, short):
    """A queue defined on first use takes SYSTEM.DEFAULT.LOCAL.QUEUE's attributes
    as they are at that moment: MQ's MAXDEPTH 5000 unless the administrator
    altered it; its producers are held like any other's."""
    c = raw_connected(server.port)
    fill(c, "FIRST.USE", ["x"])
    c.close()
    assert "MAXDEPTH(5000)" in server.sc("DISPLAY QLOCAL(FIRST.USE) MAXDEPTH")
    short.sc("ALTER QLOCAL(SYSTEM.DEFAULT.LOCAL.QUEUE) MAXDEPTH(3)")
    try:
        c = raw_connected(short.port)
        try:
            fill(c, "SHORT.FIRST.USE", ["a", "b", "c"])
            c.send("SEND", {"destination": "/queue/SHORT.FIRST.USE"}, b"d")
            err, _ = expect_error(c)
        finally:
            c.close()
    finally:
        short.sc("ALTER QLOCAL(SYSTEM.DEFAULT.LOCAL.QUEUE) MAXDEPTH(5000)")
    assert "MAXDEPTH(3)" in short.sc("DISPLAY QLOCAL(SHORT.FIRST.USE) MAXDEPTH")
    assert "2053" in err["message"] and "full_queue_wait_ms" in err["message"]
    assert depth(short, "SHORT.FIRST.USE") == 3


# -------------------------------------------------------------- held, the rest goes on

def test_held_producer_blocks_neither_consumers_nor_other_producers(long):
    long.sc("DEFINE QLOCAL(HELD.Q) MAXDEPTH(2)\nDEFINE QLOCAL(FREE.Q)")
    held = raw_connected(long.port)
    others = [raw_connected(long.port) for _ in range(3)]
    producer, consumer, held_consumer = others
    try:
        fill(held, "HELD.Q", ["1", "2"])
        held.send_bytes(send("HELD.Q", "3", receipt="r3") +
                        send("FREE.Q", "behind", receipt="rb"))
        # another producer and a consumer on another queue are served meanwhile
        consumer.call("SUBSCRIBE", {"destination": "/queue/FREE.Q", "id": "c", "ack": "auto"})
        for i in range(20):
            producer.call("SEND", {"destination": "/queue/FREE.Q", "persistent": "true"},
                          f"f{i}".encode())
        assert [m.body for m in consumer.messages(20)] == [f"f{i}".encode() for i in range(20)]
        # ...and so is a consumer of the full queue itself
        held_consumer.call("SUBSCRIBE", {"destination": "/queue/HELD.Q", "id": "h",
                                         "ack": "client-individual", "prefetch-count": "1"})
        first = held_consumer.messages(1)[0]
        assert first.body == b"1"
        # the delivery awaiting its ACK still takes its place (its get may be
        # backed out): the held producer has no receipt, no error, and its next
        # frame is not applied
        assert held.poll(0.5) == []
        assert consumer.poll(0.2) == []
        # the ACK makes room: the held SEND is put and receipted, then the frame
        # behind it is read and applied
        held_consumer.call("ACK", {"id": first["ack"]})
        assert [(f.command, f.get("receipt-id")) for f in (held.recv(), held.recv())] == [
            ("RECEIPT", "r3"), ("RECEIPT", "rb")]
        assert [m.body for m in consumer.messages(1)] == [b"behind"]
        rest = held_consumer.messages(1)
        assert rest[0].body == b"2"
        held_consumer.call("ACK", {"id": rest[0]["ack"]})
        assert held_consumer.messages(1)[0].body == b"3"
    finally:
        for c in (held, *others):
            c.close()


def test_held_producers_of_one_queue_take_turns_in_the_order_they_came(long):
    """Two producers held on one queue: room goes to the one held first, and its
    next SEND finds room yet queues behind the other (no jumping the line)."""
    long.sc("DEFINE QLOCAL(FAIR.Q) MAXDEPTH(1)")
    opprocs = lambda: status(long, "FAIR.Q", "OPPROCS")     # noqa: E731
    filler = raw_connected(long.port)
    fill(filler, "FAIR.Q", ["0"])
    filler.send("DISCONNECT", {"receipt": "bye"})
    filler.wait_closed()
    deadline_wait(lambda: opprocs() == 0, 30, what="the filler's handle closed")
    a = raw_connected(long.port)
    b = raw_connected(long.port)
    consumer = raw_connected(long.port)
    try:
        # a SEND opens the queue (OPPROCS) before it waits: that says it is held
        a.send_bytes(send("FAIR.Q", "a1", receipt="a1") + send("FAIR.Q", "a2", receipt="a2"))
        deadline_wait(lambda: opprocs() == 1, 30, what="a held")
        b.send_bytes(send("FAIR.Q", "b1", receipt="b1"))
        deadline_wait(lambda: opprocs() == 2, 30, what="b held")
        assert a.poll(0.2) == [] and b.poll(0.2) == []
        # room for two: a1 (first in line), then b1, though a2 came right after a1
        long.sc("ALTER QLOCAL(FAIR.Q) MAXDEPTH(3)")
        assert a.recv().get("receipt-id") == "a1"
        assert b.recv().get("receipt-id") == "b1"
        assert a.poll(0.3) == []                     # a2 waits for the next room
        consumer.call("SUBSCRIBE", {"destination": "/queue/FAIR.Q", "id": "c", "ack": "auto"})
        assert [m.body for m in consumer.messages(4)] == [b"0", b"a1", b"b1", b"a2"]
        assert a.recv().get("receipt-id") == "a2"
    finally:
        for c in (a, b, consumer):
            c.close()


def test_larger_maxdepth_or_a_stopped_producer_lets_the_next_producer_go(long):
    """ALTER QLOCAL MAXDEPTH makes room; a held producer ended by STOP CONN is
    never put and gives its turn to the next one."""
    long.sc("DEFINE QLOCAL(ALTER.Q) MAXDEPTH(1)")
    opprocs = lambda: status(long, "ALTER.Q", "OPPROCS")    # noqa: E731
    filler = raw_connected(long.port)
    fill(filler, "ALTER.Q", ["0"])
    filler.close()
    deadline_wait(lambda: opprocs() == 0, 30, what="the filler's handle closed")
    stopped, a, b = (raw_connected(long.port) for _ in range(3))
    try:
        stopped.send_bytes(send("ALTER.Q", "never", receipt="never"))
        deadline_wait(lambda: opprocs() == 1, 30, what="first producer held")
        a.send_bytes(send("ALTER.Q", "a", receipt="a"))
        deadline_wait(lambda: opprocs() == 2, 30, what="second producer held")
        b.send_bytes(send("ALTER.Q", "b", receipt="b"))
        deadline_wait(lambda: opprocs() == 3, 30, what="third producer held")
        long.sc(f"STOP CONN({stopped.connected['session']})")
        err, _ = expect_error(stopped)
        assert "STOP CONN" in err["message"]
        stopped.close()
        deadline_wait(lambda: opprocs() == 2, 30, what="the stopped producer gone")
        long.sc("ALTER QLOCAL(ALTER.Q) MAXDEPTH(2)")
        assert a.recv().get("receipt-id") == "a"
        assert b.poll(0.3) == []                 # room for one only
        long.sc("ALTER QLOCAL(ALTER.Q) MAXDEPTH(3)")
        assert b.recv().get("receipt-id") == "b"
        assert drain(long, "ALTER.Q", 3) == [b"0", b"a", b"b"]
        assert depth(long, "ALTER.Q") == 0
    finally:
        for c in (stopped, a, b):
            c.close()


def test_what_room_cannot_cure_fails_at_once(long):
    """Puts inhibited (2051) or a message too long (2030) are not waited on: not
    when the SEND comes to a full queue, and not for a producer already held when
    puts are inhibited (the wait here is 10 minutes)."""
    long.sc("DEFINE QLOCAL(INHIB.Q) MAXDEPTH(1) MAXMSGL(10)")
    c = raw_connected(long.port)
    fill(c, "INHIB.Q", ["0"])
    c.send("SEND", {"destination": "/queue/INHIB.Q"}, b"x" * 11)
    err, _ = expect_error(c)
    assert "2030" in err["message"]
    c.close()
    held = raw_connected(long.port)
    try:
        held.send_bytes(send("INHIB.Q", "held", receipt="held"))
        deadline_wait(lambda: status(long, "INHIB.Q", "OPPROCS") == 1, 30, what="held")
        long.sc("ALTER QLOCAL(INHIB.Q) PUT(DISABLED)")
        err, before = expect_error(held)
        assert before == [] and "2051" in err["message"] and err["receipt-id"] == "held"
    finally:
        held.close()
    c = raw_connected(long.port)
    c.send("SEND", {"destination": "/queue/INHIB.Q"}, b"y")
    err, _ = expect_error(c)
    assert "2051" in err["message"]
    c.close()
    long.sc("ALTER QLOCAL(INHIB.Q) PUT(ENABLED)")
    assert drain(long, "INHIB.Q", 1) == [b"0"]


def test_remote_and_transmission_queue_refusals_fail_at_once(long):
    """A SEND to a remote queue (QREMOTE) is checked on its transmission queue,
    with the message as sent, before the producer is held for room there; a
    SEND straight to a transmission queue fails with 2091 whatever its depth
    (not 2051 or 2053, as it did when the flow control checked first). The
    wait here is 10 minutes: nothing below may be waited on."""
    long.sc("DEFINE QLOCAL(FC.XQ) USAGE(XMITQ) MAXDEPTH(1) MAXMSGL(10)\n"
            "DEFINE QREMOTE(FC.R) RNAME(IN) RQMNAME(QMB) XMITQ(FC.XQ)\n"
            "DEFINE QREMOTE(FC.R.INH) RNAME(IN) RQMNAME(QMB) XMITQ(FC.XQ) PUT(DISABLED)")
    c = raw_connected(long.port)
    fill(c, "FC.R", ["0"])                  # the transmission queue is full now
    c.close()
    for queue, body, code in (("FC.R", b"x" * 11, "2030"), ("FC.R.INH", b"y", "2051"),
                              ("FC.XQ", b"z", "2091")):
        c = raw_connected(long.port)
        c.send("SEND", {"destination": f"/queue/{queue}", "receipt": "r"}, body)
        err, before = expect_error(c, timeout=30)
        assert before == [] and code in err["message"] and err["receipt-id"] == "r", \
            (queue, err.headers)
        c.close()
    assert depth(long, "FC.XQ") == 1
