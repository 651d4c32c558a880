"""Connections cut between a sender and its receiver (a loopback proxy in
the test, ``channel_proxy.py``), and connections dropped silently, found by
heartbeats. Receipts on QMA are the ground truth: every receipted message
arrives on QMB exactly once, in the order sent."""

from __future__ import annotations

import time

from channel_proxy import ChannelProxy, Cut
from test_channel_crash import Producer
from test_channels import pair, receive_all, send_all, wait_until

from harbormq.channels import protocol as p

#: one cut per connection, at the points of a batch where a lost connection
#: leaves the two sides in different states
CUTS = [
    Cut("out", p.MSGS, 3, "after"),       # the batch's messages, not its END_BATCH
    Cut("out", p.MSGS, 2, "mid"),         # inside a frame of messages
    Cut("out", p.END_BATCH, 1, "before"),  # the whole batch, but not its END_BATCH
    Cut("out", p.END_BATCH, 1, "after"),   # right after END_BATCH
    Cut("back", p.CONFIRM, 1, "before"),   # committed on QMB, the confirm lost
    Cut("back", p.HELLO_OK, 1, "before"),  # in the handshake
    Cut("out", p.MSGS, 7, "mid"),
    Cut("back", p.CONFIRM, 2, "before"),
    Cut("out", p.END_BATCH, 3, "after"),
]


def test_a_connection_cut_mid_batch_loses_and_repeats_nothing(tmp_path):
    a, b, port = pair(tmp_path, batchsz=5)
    proxy = ChannelProxy(port, CUTS)
    producer = Producer(a)
    try:
        a.sc(f"ALTER CHANNEL(QMA.TO.QMB) CHLTYPE(SDR) CONNAME('127.0.0.1({proxy.port})')")
        producer.start()
        wait_until(lambda: len(proxy.events) == len(CUTS) and proxy.connections > len(CUTS),
                   180, f"the {len(CUTS)} cuts ({proxy.events})")
        wait_until(lambda: len(producer.receipted) > 40, 60, "more messages after the cuts")
        producer.stop_flag.set()
        producer.join(30)
        assert not producer.unknown, producer.unknown       # QMA never went away
        sent = producer.receipted
        wait_until(lambda: "CURDEPTH(0)" in a.sc("DISPLAY QLOCAL(QMB) CURDEPTH") and
                   "INDOUBT(NO)" in a.sc("DISPLAY CHSTATUS(QMA.TO.QMB) ALL"), 60,
                   "the transmission queue to empty")
        got = receive_all(b.port, "IN", len(sent))
        assert got == sent, (len(got), len(sent), proxy.events)
        assert "CURDEPTH(0)" in b.sc("DISPLAY QLOCAL(IN) CURDEPTH"), "a duplicate"
        assert "HMQ9520I" in (a.qm_dir / "errors" / "HMQERR01.LOG").read_text(), \
            "a batch in doubt was resolved at least once"
    finally:
        producer.stop_flag.set()
        proxy.close()
        a.stop()
        b.stop()


def test_heartbeats_find_a_silently_dropped_connection(tmp_path):
    """HBINT(1) on the sender, HBINT(2) on the receiver: both use 2 s (the
    larger). The connection then goes silent on the way (no FIN, no RST):
    the sender's unanswered heartbeat and the receiver's silence find it in
    seconds, both let go of it, and the next message gets through on a new
    connection (without heartbeats the receiver would hold the channel for
    300 s and the sender would not notice until DISCINT)."""
    a, b, port = pair(tmp_path, batchsz=5)
    proxy = ChannelProxy(port, [Cut("back", p.CONFIRM, 1, "hold")])
    try:
        a.sc(f"ALTER CHANNEL(QMA.TO.QMB) CHLTYPE(SDR) CONNAME('127.0.0.1({proxy.port})') "
             "HBINT(1)")
        b.sc("ALTER CHANNEL(QMA.TO.QMB) CHLTYPE(RCVR) HBINT(2)")
        send_all(a.port, "/queue/TO.B", ["before"])
        assert receive_all(b.port, "IN", 1) == ["before"]
        held_at = wait_until(lambda: proxy.events, 10, "the hold")[0][-1]
        log_a = a.qm_dir / "errors" / "HMQERR01.LOG"
        log_b = b.qm_dir / "errors" / "HMQERR01.LOG"
        assert "heartbeat interval 2 s" in log_a.read_text()
        assert "heartbeat interval 2 s" in log_b.read_text()
        wait_until(lambda: "HMQ9135E" in log_a.read_text(), 20, "the sender to notice")
        wait_until(lambda: "HMQ9135E" in log_b.read_text(), 20, "the receiver to notice")
        found = time.monotonic() - held_at
        assert found < 20, found
        assert "did not answer a heartbeat" in log_a.read_text()
        send_all(a.port, "/queue/TO.B", ["after"])
        assert receive_all(b.port, "IN", 1, timeout=30) == ["after"]
        assert time.monotonic() - held_at < 45, "well within the 60 s of old"
    finally:
        proxy.close()
        a.stop()
        b.stop()
