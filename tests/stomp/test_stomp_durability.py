"""What a receipt promises, and the log under STOMP: receipted persistent
messages and ACKs survive a SIGKILL, receipts come in frame order, a frame held
on a log force is sent in its turn or ends the connection once (the transport,
in process), and on a tiny circular log a held delivery or a long transaction
is backed out to free log space only when it pins the log.

Not here: an ACK that meets a full log (test_stomp_log_full.py), random SIGKILLs
under load (test_stomp_crash.py).
"""

from __future__ import annotations

import asyncio

import pytest
from support.stomp_helpers import (
    QMServer,
    bodies,
    expect_error,
    quiet,
    raw_connected,
    send_all,
    subscribe,
)

from harbormq.stomp.frames import Limits
from harbormq.stomp.transport import FrameTransport


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


def test_receipts_in_frame_order_mixing_persistent_and_not(server, conns):
    c = conns.raw(server.port)
    for i in range(60):
        c.send("SEND", {"destination": "/queue/ORDER.Q", "persistent": "true" if i % 3 else
                        "false", "receipt": f"o{i}"}, b"x")
    got = [c.expect("RECEIPT")["receipt-id"] for _ in range(60)]
    assert got == [f"o{i}" for i in range(60)]


# ------------------------------------------------------------------------------ held on forces

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


# ------------------------------------------------------------------------------ log space

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
