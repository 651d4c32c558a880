"""STOMP's /temp-queue/ and alias queues over STOMP, against a real server
(stomp/tempqueues.py, core/dynamic.py, core/aliases.py; docs/stomp.md).

A request/reply: the requester's reply-to /temp-queue/ reaches the responder
as /queue/<the temporary dynamic queue>, the reply comes back, and the queue
is gone when the requester disconnects; a SIGKILL leaves it to the restart,
which deletes it. An alias queue: SEND and SUBSCRIBE through it reach its
target, its PUT(DISABLED) refuses a SEND, its defaults apply.
"""

from __future__ import annotations

import re

import pytest
from support.stomp_helpers import (
    QMServer,
    deadline_wait,
    depth,
    expect_error,
    raw_connected,
    subscribe,
)


def queue_exists(srv: QMServer, name: str) -> bool:
    out = srv.sc(f"DISPLAY QUEUE({name}) TYPE(ALL)", check=False)
    return re.search(rf"^   QUEUE\({re.escape(name)}\)", out, re.M) is not None


def request_reply(requester, responder, request_queue: str):
    """One round trip; returns (the reply-to the responder saw, the reply)."""
    requester.call("SUBSCRIBE", {"destination": "/temp-queue/replies", "id": "r",
                                 "ack": "auto"})
    subscribe(responder, request_queue, "req", ack="auto")
    requester.call("SEND", {"destination": f"/queue/{request_queue}",
                            "reply-to": "/temp-queue/replies", "correlation-id": "c1"},
                   b"ping")
    (request,) = responder.messages(1)
    reply_to = request["reply-to"]
    responder.call("SEND", {"destination": reply_to, "correlation-id": request["correlation-id"],
                            "persistent": "false"}, b"pong:" + request.body)
    (reply,) = requester.messages(1)
    return reply_to, reply


def test_request_reply_with_a_temporary_queue_gone_at_disconnect(server, conns):
    requester, responder = conns.raw(server.port), conns.raw(server.port)
    reply_to, reply = request_reply(requester, responder, "TMPQ.REQ1")
    assert re.fullmatch(r"/queue/AMQ\.[0-9A-F]{15}", reply_to), reply_to
    assert reply.body == b"pong:ping" and reply["correlation-id"] == "c1"
    name = reply_to[len("/queue/"):]
    out = server.sc(f"DISPLAY QLOCAL({name}) DEFTYPE")
    assert "DEFTYPE(TEMPDYN)" in out, out
    # private: another connection may send to it, not subscribe to it
    other = conns.raw(server.port)
    other.send("SUBSCRIBE", {"destination": reply_to, "id": "x"})
    expect_error(other, "another connection's temporary queue", "2042")
    # MQ takes no persistent message on a temporary dynamic queue
    third = conns.raw(server.port)
    third.send("SEND", {"destination": reply_to, "persistent": "true"}, b"p")
    expect_error(third, "MQRC 2048")
    assert queue_exists(server, name)
    requester.call("DISCONNECT")
    deadline_wait(lambda: not queue_exists(server, name), what=f"{name} deleted")
    # a late reply does not define it again (queues are defined on first use)
    responder.send("SEND", {"destination": reply_to, "persistent": "false"}, b"late")
    expect_error(responder, "was a temporary queue", "2085")
    assert not queue_exists(server, name)


def test_the_same_temp_name_is_one_queue_per_connection(server, conns):
    a, b = conns.raw(server.port), conns.raw(server.port)
    for c in (a, b):
        c.call("SEND", {"destination": "/temp-queue/t", "persistent": "false"}, b"1")
        c.call("SEND", {"destination": "/temp-queue/t", "persistent": "false"}, b"2")
    a.call("SUBSCRIBE", {"destination": "/temp-queue/t", "id": "t", "ack": "auto"})
    got = a.messages(2)
    assert [m.body for m in got] == [b"1", b"2"]
    assert got[0]["destination"].startswith("/queue/AMQ.")
    temp_a = got[0]["destination"][len("/queue/"):]
    b.call("SUBSCRIBE", {"destination": "/temp-queue/t", "id": "t", "ack": "auto"})
    temp_b = b.messages(2)[0]["destination"][len("/queue/"):]
    assert temp_a != temp_b and temp_a.startswith("AMQ.") and temp_b.startswith("AMQ.")


def test_alias_queue_over_stomp(server, conns):
    server.sc("DEFINE QLOCAL(ALIAS.TARGET1) DEFPSIST(NO)\n"
              "DEFINE QALIAS(ALIAS.A1) TARGET(ALIAS.TARGET1) DEFPSIST(YES) DEFPRTY(7)")
    c = conns.raw(server.port)
    c.call("SEND", {"destination": "/queue/ALIAS.A1"}, b"via alias")
    assert depth(server, "ALIAS.TARGET1") == 1
    assert not queue_exists(server, "ALIAS.A1.X")       # nothing defined on first use
    subscribe(c, "ALIAS.A1", "a", ack="auto")
    (m,) = c.messages(1)
    assert m.body == b"via alias"
    assert m["persistent"] == "true" and m["priority"] == "7"   # the alias's defaults
    assert m["destination"] == "/queue/ALIAS.A1"
    server.sc("ALTER QALIAS(ALIAS.A1) PUT(DISABLED)")
    c2 = conns.raw(server.port)
    c2.send("SEND", {"destination": "/queue/ALIAS.A1"}, b"refused")
    expect_error(c2, "alias queue ALIAS.A1", "2051")
    assert depth(server, "ALIAS.TARGET1") == 0
    # the target itself still takes puts: PUT(DISABLED) is the alias's
    c3 = conns.raw(server.port)
    c3.call("SEND", {"destination": "/queue/ALIAS.TARGET1"}, b"direct")
    assert [f.body for f in c.messages(1)] == [b"direct"]      # c's subscription, via A1


@pytest.fixture
def own_server(tmp_path):
    srv = QMServer(tmp_path / "hmq", "QT")
    srv.create(heartbeat_ms=0)
    srv.start()
    yield srv
    if srv.running:
        srv.stop()


def test_temporary_queue_gone_after_sigkill_and_restart(own_server):
    srv = own_server
    requester, responder = raw_connected(srv.port), raw_connected(srv.port)
    try:
        reply_to, _reply = request_reply(requester, responder, "REQ.K")
        name = reply_to[len("/queue/"):]
        # a reply waiting on it when the queue manager dies
        responder.call("SEND", {"destination": reply_to, "persistent": "false"}, b"late")
        assert queue_exists(srv, name)
    finally:
        requester.close()
        responder.close()
    srv.kill()
    srv.start()
    assert not queue_exists(srv, name)
    assert not (srv.qm_dir / "queues" / name).exists()
    oplog = (srv.qm_dir / "errors" / "HMQERR01.LOG").read_text()
    assert f"temporary dynamic queue {name} deleted at restart" in oplog
    assert "QUEUE(SYSTEM.DEFAULT.MODEL.QUEUE)" in srv.sc(
        "DISPLAY QMODEL(SYSTEM.DEFAULT.MODEL.QUEUE)")
