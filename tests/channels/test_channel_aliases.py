"""A remote queue whose RNAME is an alias queue on the receiving queue
manager: the receiver channel resolves it as MQ does (to its target), and an
alias with PUT(DISABLED) sends the message to the dead-letter queue."""

from __future__ import annotations

from support.stomp_helpers import stomp_client
from test_channels import pair, receive_all, send_all


def test_a_channel_delivers_through_an_alias_queue(tmp_path):
    a, b, _ = pair(tmp_path, batchsz=3)
    try:
        b.sc("DEFINE QALIAS(IN.ALIAS) TARGET(IN)\n"
             "DEFINE QALIAS(IN.SHUT) TARGET(IN) PUT(DISABLED)")
        a.sc("DEFINE QREMOTE(TO.ALIAS) RNAME(IN.ALIAS) RQMNAME(QMB)\n"
             "DEFINE QREMOTE(TO.SHUT) RNAME(IN.SHUT) RQMNAME(QMB)")
        send_all(a.port, "/queue/TO.ALIAS", ["via alias 1", "via alias 2"])
        send_all(a.port, "/queue/TO.SHUT", ["refused"])
        assert receive_all(b.port, "IN", 2) == ["via alias 1", "via alias 2"]
        conn = stomp_client(b.port)
        try:
            conn.subscribe("/queue/SYSTEM.DEAD.LETTER.QUEUE", id="d", ack="auto")
            (dead,) = conn.col.wait_messages(1, 30)
        finally:
            conn.disconnect()
        assert dead.body == "refused"
        assert dead.headers["DLH_DESTQ"] == "IN.SHUT" and dead.headers["DLH_REASON"] == "2051"
    finally:
        a.stop()
        b.stop()
