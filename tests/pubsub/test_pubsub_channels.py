"""A subscription whose DEST is a remote queue: each publication is a plain put
there, and crosses the channel to the other queue manager (a real receiver
process, read with a real stomp.py client)."""

from __future__ import annotations

import socket
import time

from support.stomp_helpers import QMServer, stomp_client

from harbormq import QueueManager
from harbormq.channels.initiator import ChannelInitiator
from harbormq.log.records import Message


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def receive(port: int, queue: str, count: int, timeout: float = 60) -> list[tuple[str, str]]:
    conn = stomp_client(port)
    try:
        conn.subscribe(f"/queue/{queue}", id="s1", ack="auto")
        end = time.monotonic() + timeout
        out: list = []
        while len(out) < count:
            conn.col.wait(lambda: conn.col.messages, max(0.1, end - time.monotonic()),
                          f"{count} messages on {queue} ({len(out)} so far)")
            out.extend((m.body, m.headers.get("MQTopicString", "")) for m in conn.col.take())
        return out
    finally:
        conn.disconnect()


def test_a_subscription_with_a_remote_dest_receives_across_a_channel(make_qm, home, tmp_path):
    b = QMServer(tmp_path / "b", "QMB").create(log_file_pages=256)
    port = free_port()
    b.start()
    try:
        b.sc(f"DEFINE LISTENER(L1) TRPTYPE(TCP) PORT({port}) CONTROL(QMGR)\n"
             "START LISTENER(L1)\n"
             "DEFINE CHANNEL(QMA.TO.QMB) CHLTYPE(RCVR)\n"
             "DEFINE QLOCAL(IN) DEFPSIST(YES)")
        make_qm("QMA")
        with QueueManager.open("QMA", home=home) as qm:
            qm.define_queue("QMB", USAGE="XMITQ", DEFPSIST="YES")
            initiator = ChannelInitiator(qm.core)
            qm._call(initiator.start())
            try:
                qm._call(qm.core.define_object("QREMOTE", "TO.B", {
                    "RNAME": "IN", "RQMNAME": "QMB", "DEFPSIST": "YES"}))
                qm._call(qm.core.define_object("CHANNEL", "QMA.TO.QMB", {
                    "CHLTYPE": "SDR", "CONNAME": f"127.0.0.1({port})", "XMITQ": "QMB",
                    "BATCHSZ": 5, "SHORTTMR": 1}))
                ps = qm.core.pubsub
                s = qm._call(ps.subscribe("orders/#", name="REMOTE", durable=True,
                                          dest="TO.B"))
                assert s.dest == "TO.B" and not s.managed
                for i in range(5):
                    assert qm._call(ps.publish(f"orders/{i}", Message(
                        f"o{i}".encode(), persistent=True))) == 1
                got = receive(b.port, "IN", 5)
                # in order, each with its topic string (a message property)
                assert got == [(f"o{i}", f"orders/{i}") for i in range(5)]
            finally:
                qm._call(initiator.stop())
    finally:
        b.stop()
