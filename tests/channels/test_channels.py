"""Channels between two real queue manager processes on loopback: a sender
on QMA, a receiver on QMB, STOMP clients at both ends (stomp.py), receipts
and ACKs as ground truth."""

from __future__ import annotations

import socket
import time

from support.stomp_helpers import QMServer, stomp_client


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pair(tmp_path, *, batchsz: int = 50, shortrty: int = 100):
    """QMA (sender side) and QMB (receiver side), started, the channel defined."""
    a = QMServer(tmp_path / "a", "QMA").create(log_file_pages=256)
    b = QMServer(tmp_path / "b", "QMB").create(log_file_pages=256)
    port = free_port()
    a.start()
    b.start()
    b.sc(f"DEFINE LISTENER(L1) TRPTYPE(TCP) PORT({port}) CONTROL(QMGR)\n"
         "START LISTENER(L1)\n"
         "DEFINE CHANNEL(QMA.TO.QMB) CHLTYPE(RCVR)\n"
         "DEFINE QLOCAL(IN) DEFPSIST(YES) MAXDEPTH(100000)")
    a.sc("DEFINE QLOCAL(QMB) USAGE(XMITQ) DEFPSIST(YES) MAXDEPTH(100000)\n"
         "DEFINE QREMOTE(TO.B) RNAME(IN) RQMNAME(QMB) DEFPSIST(YES)\n"
         f"DEFINE CHANNEL(QMA.TO.QMB) CHLTYPE(SDR) CONNAME('127.0.0.1({port})') XMITQ(QMB) "
         f"BATCHSZ({batchsz}) SHORTRTY({shortrty}) SHORTTMR(1) DISCINT(30)")
    return a, b, port


def send_all(port: int, dest: str, bodies: list[str]) -> None:
    conn = stomp_client(port)
    try:
        for i, body in enumerate(bodies):
            conn.send(dest, body, headers={"receipt": f"r{i}", "persistent": "true"})
            conn.col.wait_receipt(f"r{i}")
    finally:
        conn.disconnect()


def receive_all(port: int, queue: str, count: int, timeout: float = 60) -> list[str]:
    """``count`` messages, each acknowledged as it comes (the server sends no
    more than its prefetch unacknowledged)."""
    conn = stomp_client(port)
    try:
        conn.subscribe(f"/queue/{queue}", id="s1", ack="client-individual")
        out: list[str] = []
        end = time.monotonic() + timeout
        while len(out) < count:
            conn.col.wait(lambda: conn.col.messages, max(0.1, end - time.monotonic()),
                          f"{count} messages on {queue} ({len(out)} so far)")
            for m in conn.col.take():
                conn.ack(m.headers["ack"])
                out.append(m.body)
        return out
    finally:
        conn.disconnect()


def test_messages_cross_the_channel_exactly_once_in_order(tmp_path):
    a, b, _ = pair(tmp_path, batchsz=7)
    try:
        bodies = [f"m{i}" for i in range(100)]
        send_all(a.port, "/queue/TO.B", bodies)
        assert receive_all(b.port, "IN", 100) == bodies
        status = a.sc("DISPLAY CHSTATUS(QMA.TO.QMB) ALL")
        assert "LSTSEQNO(100)" in status and "INDOUBT(NO)" in status, status
        assert "STATUS(RUNNING)" in status or "STATUS(INACTIVE)" in status, status
        assert "LSTSEQNO(100)" in b.sc("DISPLAY CHSTATUS(QMA.TO.QMB) ALL")
        assert "CURDEPTH(0)" in a.sc("DISPLAY QLOCAL(QMB) CURDEPTH")
    finally:
        a.stop()
        b.stop()
