"""Channels between two real queue manager processes on loopback: a sender
on QMA, a receiver on QMB, STOMP clients at both ends (stomp.py), receipts
and ACKs as ground truth."""

from __future__ import annotations

import shutil
import socket
import time

from support.stomp_helpers import QMServer, stomp_client


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pair(tmp_path, *, batchsz: int = 50, shortrty: int = 100, log_type: str = "circular"):
    """QMA (sender side) and QMB (receiver side), started, the channel defined."""
    a = QMServer(tmp_path / "a", "QMA").create(log_file_pages=256, log_type=log_type)
    b = QMServer(tmp_path / "b", "QMB").create(log_file_pages=256, log_type=log_type)
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


def wait_until(pred, timeout: float, what: str):
    """``pred()`` once it is true; AssertionError naming ``what`` after ``timeout``."""
    end = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.1)


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
                conn.ack(m.headers["ack"], receipt=f"ack-{m.headers['ack']}")
                out.append(m.body)
        conn.col.wait(lambda: len(conn.col.receipts) >= count, timeout,
                      f"the receipts of {count} ACKs")
        assert not conn.col.errors, [e.headers for e in conn.col.errors]
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


def test_an_undeliverable_message_goes_to_the_dead_letter_queue(tmp_path):
    """Unknown queue, full queue: the message goes to the dead-letter queue with
    a header naming the reason and where it was going; the others arrive."""
    a, b, _ = pair(tmp_path, batchsz=3)
    try:
        b.sc("DEFINE QLOCAL(TINY) DEFPSIST(YES) MAXDEPTH(1)")
        a.sc("DEFINE QREMOTE(TO.NOWHERE) RNAME(NO.SUCH.Q) RQMNAME(QMB)\n"
             "DEFINE QREMOTE(TO.TINY) RNAME(TINY) RQMNAME(QMB)")
        send_all(a.port, "/queue/TO.B", ["ok0"])
        send_all(a.port, "/queue/TO.NOWHERE", ["lost?"])
        send_all(a.port, "/queue/TO.TINY", ["t0", "t1"])
        send_all(a.port, "/queue/TO.B", ["ok1"])
        assert receive_all(b.port, "IN", 2) == ["ok0", "ok1"]
        assert receive_all(b.port, "TINY", 1) == ["t0"]
        conn = stomp_client(b.port)
        try:
            conn.subscribe("/queue/SYSTEM.DEAD.LETTER.QUEUE", id="d", ack="auto")
            dead = conn.col.wait_messages(2, 30)
        finally:
            conn.disconnect()
        by_body = {m.body: m.headers for m in dead}
        assert by_body["lost?"]["DLH_DESTQ"] == "NO.SUCH.Q"
        assert by_body["lost?"]["DLH_REASON"] == "2085", by_body["lost?"]
        assert by_body["t1"]["DLH_REASON"] == "2053"
        assert "HMQ9544W" in (b.qm_dir / "errors" / "HMQERR01.LOG").read_text()
    finally:
        a.stop()
        b.stop()


def test_a_sequence_number_mismatch_stops_the_channel_until_reset(tmp_path):
    """QMB restored from an older state (its sync data says fewer messages
    arrived than QMA sent): the channel stops with HMQ9526E rather than lose
    or duplicate anything silently; RESET CHANNEL on the sender lets it go on."""
    a, b, port = pair(tmp_path, batchsz=5)
    try:
        send_all(a.port, "/queue/TO.B", [f"m{i}" for i in range(5)])
        assert receive_all(b.port, "IN", 5) == [f"m{i}" for i in range(5)]
        a.sc("STOP CHANNEL(QMA.TO.QMB)")
        end = time.monotonic() + 30
        while "STATUS(RUNNING)" in b.sc("DISPLAY CHSTATUS(QMA.TO.QMB)"):
            assert time.monotonic() < end
            time.sleep(0.1)
        # the receiver's sync data as if restored from before: sequence number 2
        b.sc("RESET CHANNEL(QMA.TO.QMB) SEQNUM(3)")
        send_all(a.port, "/queue/TO.B", ["m5"])
        a.sc("START CHANNEL(QMA.TO.QMB)")
        end = time.monotonic() + 60
        while "STATUS(STOPPED)" not in a.sc("DISPLAY CHSTATUS(QMA.TO.QMB)"):
            assert time.monotonic() < end, a.sc("DISPLAY CHSTATUS(QMA.TO.QMB) ALL")
            time.sleep(0.2)
        log = (a.qm_dir / "errors" / "HMQERR01.LOG").read_text()
        assert "HMQ9526E" in log and "last sent sequence number 5" in log, log[-2000:]
        assert "CURDEPTH(1)" in a.sc("DISPLAY QLOCAL(QMB) CURDEPTH"), "m5 waits, not lost"
        a.sc("RESET CHANNEL(QMA.TO.QMB) SEQNUM(3)\nSTART CHANNEL(QMA.TO.QMB)")
        assert receive_all(b.port, "IN", 1) == ["m5"]
        assert "LSTSEQNO(3)" in b.sc("DISPLAY CHSTATUS(QMA.TO.QMB) ALL")
    finally:
        a.stop()
        b.stop()


def test_resolve_channel_decides_a_batch_in_doubt_by_hand(tmp_path):
    """The sender dies with a batch in doubt and the receiver is gone for good:
    RESOLVE CHANNEL ACTION(BACKOUT) puts the batch back on the transmission
    queue; ACTION(COMMIT) would take it as delivered."""
    a, b, _ = pair(tmp_path, batchsz=5)
    try:
        a.stop()
        a.env["HARBORMQ_CRASH_AT"] = "channel.sender_prepared"
        a.start()
        # (the put's receipt first: the crash may come in the same loop turn as it)
        a.sc("STOP CHANNEL(QMA.TO.QMB)")
        send_all(a.port, "/queue/TO.B", ["x0"])
        a.sc("START CHANNEL(QMA.TO.QMB)", check=False)
        a.proc.wait(60)
        assert a.proc.returncode == -9
        a.env.pop("HARBORMQ_CRASH_AT")
        b.stop()                      # the partner is gone
        a.start()
        a.sc("STOP CHANNEL(QMA.TO.QMB)")
        status = a.sc("DISPLAY CHSTATUS(QMA.TO.QMB) ALL")
        assert "INDOUBT(YES)" in status, status
        out = a.sc("RESOLVE CHANNEL(QMA.TO.QMB) ACTION(BACKOUT)")
        assert "backed out" in out, out
        assert "INDOUBT(NO)" in a.sc("DISPLAY CHSTATUS(QMA.TO.QMB) ALL")
        assert "CURDEPTH(1)" in a.sc("DISPLAY QLOCAL(QMB) CURDEPTH"), "x0 is back to send"
        out = a.sc("RESOLVE CHANNEL(QMA.TO.QMB) ACTION(COMMIT)")
        assert "no batch in doubt" in out
    finally:
        a.stop()
        b.stop()


def test_channel_objects_in_mqsc(tmp_path):
    srv = QMServer(tmp_path / "c", "QMC").create()
    srv.start()
    try:
        out = srv.sc("DEFINE QLOCAL(XQ) USAGE(XMITQ)\n"
                     "DEFINE QREMOTE(R1) RNAME(IN) RQMNAME(QMX) XMITQ(XQ)\n"
                     "DEFINE CHANNEL(C1) CHLTYPE(SDR) CONNAME('127.0.0.1(1)') XMITQ(XQ)\n"
                     "DEFINE LISTENER(L1) PORT(0)\n"
                     "DISPLAY QREMOTE(R1) ALL\nDISPLAY CHANNEL(C1) ALL\nDISPLAY LISTENER(*) STATUS")
        assert "RQMNAME(QMX)" in out and "XMITQ(XQ)" in out and "CONNAME(127.0.0.1(1))" in out
        assert "STATUS(STOPPED)" in out
        for bad, why in [("DEFINE CHANNEL(C2) CHLTYPE(SVR)", "choose one of"),
                         ("DEFINE CHANNEL(C2) CONNAME('nohost')", "host(port)"),
                         ("DEFINE CHANNEL(C2) BATCHSZ(0)", "out of range"),
                         ("DEFINE CHANNEL(C2) SSLCIPH(TLS_AES_128_GCM_SHA256)", "ANY_TLS13"),
                         ("DEFINE CHANNEL(C2) SSLPEER(XX=1)", "KEY=value"),
                         ("DEFINE QREMOTE(R1) RNAME(X)", "already exists"),
                         ("DEFINE QLOCAL(R1)", "already exists"),
                         ("DEFINE LISTENER(L2) PORT(70000)", "out of range")]:
            got = srv.sc(bad, check=False)
            assert why in got, (bad, got)
        # a put to a remote queue whose transmission queue is not one is refused
        out = srv.sc("DEFINE QLOCAL(PLAIN)\nDEFINE QREMOTE(R2) RNAME(IN) RQMNAME(QMX) "
                     "XMITQ(PLAIN)")
        conn = stomp_client(srv.port)
        try:
            conn.send("/queue/R2", "x", headers={"receipt": "r"})
            conn.col.wait(lambda: conn.col.errors, 10, "an ERROR")
            assert "not a transmission queue" in conn.col.errors[0].headers["message"]
        finally:
            conn.disconnect()
        srv.sc("DELETE QREMOTE(R1)\nDELETE CHANNEL(C1)\nDELETE LISTENER(L1)")
        assert "not found" in srv.sc("DISPLAY CHANNEL(C1)", check=False)
        srv.stop()
        srv.start()      # definitions survive a restart (the catalog, the log)
        assert "CHANNEL(C1)" not in srv.sc("DISPLAY CHANNEL(*)")
        assert "QUEUE(R2)" in srv.sc("DISPLAY QREMOTE(*)")
    finally:
        srv.stop()


def test_the_sync_data_is_recreated_after_damage(tmp_path):
    """SYSTEM.CHANNEL.SYNCQ is a queue like any other: its store lost, a linear
    log recreates it at restart, and the channel goes on where it was, neither
    losing nor repeating a message (MQ's sync file image and recreate)."""
    a, b, _ = pair(tmp_path, batchsz=4, log_type="linear")
    try:
        send_all(a.port, "/queue/TO.B", [f"m{i}" for i in range(10)])
        assert receive_all(b.port, "IN", 10) == [f"m{i}" for i in range(10)]
        b.stop()
        shutil.rmtree(b.qm_dir / "queues" / "SYSTEM.CHANNEL.SYNCQ")
        b.start()
        assert "HMQ7474I" in (b.qm_dir / "errors" / "HMQERR01.LOG").read_text()
        send_all(a.port, "/queue/TO.B", [f"m{i}" for i in range(10, 15)])
        assert receive_all(b.port, "IN", 5) == [f"m{i}" for i in range(10, 15)]
        assert "LSTSEQNO(15)" in b.sc("DISPLAY CHSTATUS(QMA.TO.QMB) ALL")
    finally:
        a.stop()
        b.stop()


def test_the_edges_of_the_put_path_and_of_resolve(tmp_path):
    """A message of exactly MAXMSGL goes to a remote queue as to a local one; a
    plain put to a transmission queue is refused (2091); a message addressed to
    the receiver's transmission queue is dead-lettered (no routing onward);
    RESOLVE CHANNEL is refused while the channel runs."""
    a, b, _ = pair(tmp_path, batchsz=5)
    try:
        a.sc("ALTER QLOCAL(QMB) MAXMSGL(1000)")
        b.sc("ALTER QLOCAL(IN) MAXMSGL(1000)\nDEFINE QLOCAL(XB) USAGE(XMITQ)")
        a.sc("DEFINE QREMOTE(TO.XB) RNAME(XB) RQMNAME(QMB)")
        send_all(a.port, "/queue/TO.B", ["x" * 1000])
        assert receive_all(b.port, "IN", 1) == ["x" * 1000]
        conn = stomp_client(a.port)
        try:
            conn.send("/queue/QMB", "plain", headers={"receipt": "r"})
            conn.col.wait(lambda: conn.col.errors, 10, "an ERROR")
            assert "2091" in conn.col.errors[0].headers["message"]
        finally:
            conn.disconnect()
        send_all(a.port, "/queue/TO.XB", ["onward?"])
        conn = stomp_client(b.port)
        try:
            conn.subscribe("/queue/SYSTEM.DEAD.LETTER.QUEUE", id="d", ack="auto")
            [dead] = conn.col.wait_messages(1, 30)
            assert dead.body == "onward?" and dead.headers["DLH_DESTQ"] == "XB"
        finally:
            conn.disconnect()
        assert "CURDEPTH(0)" in b.sc("DISPLAY QLOCAL(XB) CURDEPTH")
        assert "STATUS(RUNNING)" in a.sc("DISPLAY CHSTATUS(QMA.TO.QMB)")   # (DISCINT 30 s)
        out = a.sc("RESOLVE CHANNEL(QMA.TO.QMB) ACTION(BACKOUT)", check=False)
        assert "HMQ8149E" in out and "STOP CHANNEL" in out, out
    finally:
        a.stop()
        b.stop()


def test_one_sender_channel_at_a_time_serves_a_transmission_queue(tmp_path):
    """Two sender channels on one transmission queue: as MQ opens it for
    exclusive input, the second is refused while the first is in session on it
    (a START CHANNEL with HMQ8149E; one woken by a message retries, HMQ9515E),
    and takes over once the first has stopped. Every message arrives once, in
    order."""
    a, b, port = pair(tmp_path, batchsz=5)
    try:
        b.sc("DEFINE CHANNEL(QMA.TO.QMB.2) CHLTYPE(RCVR)")
        a.sc(f"DEFINE CHANNEL(QMA.TO.QMB.2) CHLTYPE(SDR) CONNAME('127.0.0.1({port})') "
             "XMITQ(QMB) BATCHSZ(5) SHORTRTY(100) SHORTTMR(1) DISCINT(30)\n"
             "STOP CHANNEL(QMA.TO.QMB.2)")
        first = [f"one{i}" for i in range(12)]
        send_all(a.port, "/queue/TO.B", first)
        assert receive_all(b.port, "IN", 12) == first
        assert "STATUS(RUNNING)" in a.sc("DISPLAY CHSTATUS(QMA.TO.QMB)")   # (DISCINT 30 s)
        out = a.sc("START CHANNEL(QMA.TO.QMB.2)", check=False)
        assert "HMQ8149E" in out and "transmission queue QMB is in use by sender channel " \
            "QMA.TO.QMB" in out and "MQRC 2042" in out, out
        assert "STOPPED" in a.sc("DISPLAY CHSTATUS(QMA.TO.QMB.2)")
        a.sc("STOP CHANNEL(QMA.TO.QMB)\nSTART CHANNEL(QMA.TO.QMB.2)")
        second = [f"two{i}" for i in range(12)]
        send_all(a.port, "/queue/TO.B", second)
        assert receive_all(b.port, "IN", 12) == second
        assert "LSTSEQNO(12)" in b.sc("DISPLAY CHSTATUS(QMA.TO.QMB.2) ALL")
        out = a.sc("START CHANNEL(QMA.TO.QMB)", check=False)
        assert "in use by sender channel QMA.TO.QMB.2" in out, out
        assert "CURDEPTH(0)" in a.sc("DISPLAY QLOCAL(QMB) CURDEPTH")
    finally:
        a.stop()
        b.stop()


def test_the_receiver_puts_with_the_authority_of_mcauser(tmp_path):
    """MCAUSER(chanusr): a put chanusr may not make (no PUT on SECRET) goes to
    the dead-letter queue with reason 2035, never lost; the others arrive."""
    a, b, _ = pair(tmp_path, batchsz=5)
    try:
        b.user_add("chanusr", "pw-chanusr", "apps")
        b.sc("DEFINE QLOCAL(SECRET) DEFPSIST(YES)\n"
             "SET AUTHREC PROFILE(IN) OBJTYPE(QUEUE) GROUP('apps') AUTHADD(PUT)\n"
             "ALTER CHANNEL(QMA.TO.QMB) CHLTYPE(RCVR) MCAUSER('chanusr')")
        a.sc("DEFINE QREMOTE(TO.SECRET) RNAME(SECRET) RQMNAME(QMB)")
        send_all(a.port, "/queue/TO.B", ["ok0"])
        send_all(a.port, "/queue/TO.SECRET", ["s0"])
        send_all(a.port, "/queue/TO.B", ["ok1"])
        assert receive_all(b.port, "IN", 2) == ["ok0", "ok1"]
        conn = stomp_client(b.port)
        try:
            conn.subscribe("/queue/SYSTEM.DEAD.LETTER.QUEUE", id="d", ack="auto")
            [dead] = conn.col.wait_messages(1, 30)
        finally:
            conn.disconnect()
        assert dead.body == "s0"
        assert dead.headers["DLH_REASON"] == "2035", dead.headers
        assert dead.headers["DLH_DESTQ"] == "SECRET"
        assert "MCAUSER chanusr" in dead.headers["DLH_REASON_TEXT"]
        assert "CURDEPTH(0)" in b.sc("DISPLAY QLOCAL(SECRET) CURDEPTH")
        assert "CURDEPTH(0)" in a.sc("DISPLAY QLOCAL(QMB) CURDEPTH")
    finally:
        a.stop()
        b.stop()


def test_a_receiver_restored_from_a_backup_stops_the_channel_until_reset(tmp_path):
    """QMB is backed up, more batches flow, QMB's disks are lost and it is
    restored from the backup: its sync data goes back to the backup's
    sequence number, so the channel stops with HMQ9526E naming both numbers.
    After RESET CHANNEL the channel goes on. What QMB's applications then see
    (docs/channels.md): messages that arrived on QMB after the backup and were
    not consumed are lost (QMA committed them as delivered and keeps no copy);
    messages on QMB at the backup and consumed after it come back, a second
    time."""
    a, b, _ = pair(tmp_path, batchsz=5, log_type="linear")
    try:
        send_all(a.port, "/queue/TO.B", [f"m{i}" for i in range(10)])
        assert receive_all(b.port, "IN", 10) == [f"m{i}" for i in range(10)]
        send_all(a.port, "/queue/TO.B", [f"m{i}" for i in range(10, 15)])
        wait_until(lambda: "CURDEPTH(5)" in b.sc("DISPLAY QLOCAL(IN) CURDEPTH"), 30, "m10..m14")
        b.cli("backup", "QMB", "--to", str(tmp_path / "bk"))
        # QMB's applications take m10..m14 after the backup; m15..m24 arrive and wait
        assert receive_all(b.port, "IN", 5) == [f"m{i}" for i in range(10, 15)]
        send_all(a.port, "/queue/TO.B", [f"m{i}" for i in range(15, 25)])
        wait_until(lambda: "CURDEPTH(10)" in b.sc("DISPLAY QLOCAL(IN) CURDEPTH"), 30,
                   "m15..m24")
        # (QMA commits once the CONFIRM is read)
        wait_until(lambda: "LSTSEQNO(25)" in a.sc("DISPLAY CHSTATUS(QMA.TO.QMB) ALL"), 30,
                   "QMA to commit the last batch")

        b.stop()                                  # QMB's disks are lost
        shutil.rmtree(b.qm_dir)
        shutil.rmtree(b.home / "log" / "QMB")
        b.cli("restore", "QMB", "--from", str(tmp_path / "bk" / "QMB"))
        b.start()
        assert "LSTSEQNO(15)" in b.sc("DISPLAY CHSTATUS(QMA.TO.QMB) ALL")
        send_all(a.port, "/queue/TO.B", ["m25"])
        a.sc("START CHANNEL(QMA.TO.QMB)", check=False)    # (a retrying one tries now)
        wait_until(lambda: "STATUS(STOPPED)" in a.sc("DISPLAY CHSTATUS(QMA.TO.QMB)"), 60,
                   "the channel to stop")
        log = (a.qm_dir / "errors" / "HMQERR01.LOG").read_text()
        assert "HMQ9526E" in log and "last sent sequence number 25" in log and \
            "QMB last received 15" in log and "16..25 (10 messages)" in log, log[-2000:]
        assert "CURDEPTH(1)" in a.sc("DISPLAY QLOCAL(QMB) CURDEPTH"), "m25 waits, not lost"

        a.sc("RESET CHANNEL(QMA.TO.QMB) SEQNUM(16)\nSTART CHANNEL(QMA.TO.QMB)")
        # m10..m14 were on IN at the backup: back, a second time; m15..m24 are lost
        assert receive_all(b.port, "IN", 6) == [f"m{i}" for i in range(10, 15)] + ["m25"]
        assert "CURDEPTH(0)" in b.sc("DISPLAY QLOCAL(IN) CURDEPTH")
        assert "LSTSEQNO(16)" in b.sc("DISPLAY CHSTATUS(QMA.TO.QMB) ALL")
    finally:
        a.stop()
        b.stop()
