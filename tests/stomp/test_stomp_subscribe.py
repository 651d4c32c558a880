"""SUBSCRIBE, ACK and NACK: the ack modes (auto, client, client-individual) in
each version, the prefetch window, UNSUBSCRIBE and subscribing again, the queue
handles subscriptions hold, and a model of one subscription (hypothesis: SENDs,
ACK/NACK and transactions in random order, checked against the model).

Not here: backout counts and thresholds (test_stomp_backout.py), selectors
(test_stomp_selectors.py), ACKs in a transaction (test_stomp_transactions.py).
"""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from support.stomp_helpers import (
    bodies,
    deadline_wait,
    depth,
    expect_error,
    quiet,
    raw_connected,
    send_all,
    subscribe,
)


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


def test_nack_refused_on_10(server, conns):
    c = conns.raw(server.port, version="1.0")
    send_all(c, "NACK10.Q", ["x"])
    subscribe(c, "NACK10.Q", ack="client")
    m = c.messages(1)[0]
    c.send("NACK", {"message-id": m["message-id"]})
    expect_error(c, "NACK")


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


# ------------------------------------------------------------------------------ the prefetch window

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


# ------------------------------------------------------------------------------ UNSUBSCRIBE

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


# ------------------------------------------------------------------------------ model-based

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
