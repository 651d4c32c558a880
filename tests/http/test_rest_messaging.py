"""MQ's messaging REST API: puts, destructive gets and browses through HTTP
are the messages STOMP sees (stomp.py on the same queue), with MQ's
``ibm-mq-md-*`` headers; paging by message id; a get that waits; a client
that goes while its get waits takes nothing; a persistent put answered 201
survives a SIGKILL."""

from __future__ import annotations

import json
import socket
import ssl
import struct
import threading
import time

from support.stomp_helpers import deadline_wait, stomp_client
from support.web_helpers import WebClient, raw_socket, restart_web, web_client

MSG = "/ibmmq/rest/v2/messaging/qmgr/QW/queue/{}/message"
LIST = "/ibmmq/rest/v2/messaging/qmgr/QW/queue/{}/messagelist"


def curdepth(admin: WebClient, queue: str) -> int:
    _status, doc = admin.json("POST", "/ibmmq/rest/v2/admin/action/qmgr/QW/mqsc", {
        "type": "runCommandJSON", "command": "display", "qualifier": "qlocal", "name": queue,
        "responseParameters": ["curdepth"]})
    return doc["commandResponse"][0]["parameters"]["curdepth"]


def test_put_over_http_is_what_stomp_receives(web, admin):
    admin.mqsc("DEFINE QLOCAL(MS.TO.STOMP)")
    status, headers, _b = admin.call(
        "POST", MSG.format("MS.TO.STOMP"), "héllo", {
            "ibm-mq-md-persistence": "persistent", "ibm-mq-md-priority": "7",
            "ibm-mq-md-correlationId": b"order-42".hex(), "ibm-mq-md-replyTo": "REPLY.Q",
            "ibm-mq-md-expiry": "600000",
            "ibm-mq-usr": json.dumps([{"name": "region", "value": "eu"},
                                      {"name": "count", "value": 3}])})
    assert status == 201
    msg_id = headers["ibm-mq-md-messageid"]
    assert len(msg_id) == 48
    conn = stomp_client(web.port, login="root", passcode="rootpw")
    try:
        conn.subscribe("/queue/MS.TO.STOMP", id="s1", ack="client-individual")
        (frame,) = conn.col.wait_messages(1)
        h = frame.headers
        assert frame.body in ("héllo", "héllo".encode())
        assert h["message-id"] == msg_id and h["persistent"] == "true"
        assert h["priority"] == "7" and h["correlation-id"] == "order-42"
        assert h["reply-to"] == "REPLY.Q" and h["content-type"] == "text/plain;charset=utf-8"
        assert h["region"] == "eu" and h["count"] == "3"
        assert 0 < int(h["expires"]) - time.time() * 1000 <= 600_000
        conn.ack(h["ack"])
    finally:
        conn.disconnect()
    deadline_wait(lambda: curdepth(admin, "MS.TO.STOMP") == 0, what="the ack")


def test_stomp_send_is_what_http_gets(web, admin):
    admin.mqsc("DEFINE QLOCAL(MS.FROM.STOMP)")
    conn = stomp_client(web.port, login="root", passcode="rootpw")
    try:
        conn.send("/queue/MS.FROM.STOMP", "from stomp", headers={
            "persistent": "true", "priority": "3", "correlation-id": "c-1",
            "reply-to": "/queue/BACK", "content-type": "application/json", "colour": "blue",
            "receipt": "r1"})
        conn.col.wait_receipt("r1")
    finally:
        conn.disconnect()
    status, headers, body = admin.call("GET", MSG.format("MS.FROM.STOMP"))     # browse
    assert status == 200 and body == b"from stomp"
    assert curdepth(admin, "MS.FROM.STOMP") == 1
    status, headers, body = admin.call("DELETE", MSG.format("MS.FROM.STOMP"))  # get
    assert status == 200 and body == b"from stomp"
    assert headers["ibm-mq-md-persistence"] == "persistent"
    assert headers["ibm-mq-md-priority"] == "3"
    assert bytes.fromhex(headers["ibm-mq-md-correlationid"]) == b"c-1"
    assert headers["ibm-mq-md-replyto"] == "/queue/BACK"
    assert headers["ibm-mq-md-expiry"] == "unlimited"
    assert headers["content-type"].startswith("application/json")
    assert json.loads(headers["ibm-mq-usr"]) == [{"name": "colour", "value": "blue"}]
    assert curdepth(admin, "MS.FROM.STOMP") == 0
    assert admin.call("DELETE", MSG.format("MS.FROM.STOMP"))[0] == 204


def test_browse_pages_by_message_id_without_taking(web, admin):
    admin.mqsc("DEFINE QLOCAL(MS.PAGES)")
    ids = [admin.call("POST", MSG.format("MS.PAGES"), f"m{i}")[1]["ibm-mq-md-messageid"]
           for i in range(25)]
    seen, path = [], LIST.format("MS.PAGES") + "?limit=10"
    while path:
        status, doc = admin.json("GET", path)
        assert status == 200 and len(doc["messages"]) <= 10
        seen += [m["messageId"] for m in doc["messages"]]
        path = doc["nextPage"]
    assert seen == ids and curdepth(admin, "MS.PAGES") == 25
    # paging by an id this listener did not serve (looked for in the queue)
    status, doc = admin.json("GET", LIST.format("MS.PAGES") + f"?limit=3&afterMessageId="
                             f"{ids[20]}")
    assert [m["messageId"] for m in doc["messages"]] == ids[21:24]
    # one message at a time, with its body
    status, headers, body = admin.call("GET", MSG.format("MS.PAGES") +
                                       f"?afterMessageId={ids[3]}")
    assert body == b"m4" and headers["ibm-mq-md-messageid"] == ids[4]
    status, _h, body = admin.call("GET", MSG.format("MS.PAGES") + f"?messageId={ids[7]}")
    assert body == b"m7"
    status, doc = admin.json("GET", LIST.format("MS.PAGES") + "?afterMessageId=" + "00" * 24)
    assert status == 404 and doc["error"][0]["reasonCode"] == 2033
    # a destructive get of one chosen message
    status, _h, body = admin.call("DELETE", MSG.format("MS.PAGES") + f"?messageId={ids[9]}")
    assert body == b"m9" and curdepth(admin, "MS.PAGES") == 24


def test_get_by_correlation_id_and_priority_order(web, admin):
    admin.mqsc("DEFINE QLOCAL(MS.SELECT)")
    for body, prio, correl in (("low", "1", "aa"), ("high", "8", "bb"), ("mid", "5", "aa")):
        admin.call("POST", MSG.format("MS.SELECT"), body,
                   {"ibm-mq-md-priority": prio, "ibm-mq-md-correlationId": correl})
    assert admin.call("DELETE", MSG.format("MS.SELECT") + "?correlationId=aa")[2] == b"mid"
    assert admin.call("DELETE", MSG.format("MS.SELECT"))[2] == b"high"
    assert admin.call("DELETE", MSG.format("MS.SELECT"))[2] == b"low"


def test_get_waits_for_a_message(web, admin):
    admin.mqsc("DEFINE QLOCAL(MS.WAIT)")
    out = []
    t = threading.Thread(target=lambda: out.append(
        admin.call("DELETE", MSG.format("MS.WAIT") + "?wait=10000")))
    started = time.monotonic()
    t.start()
    time.sleep(0.5)
    assert admin.call("POST", MSG.format("MS.WAIT"), "late")[0] == 201
    t.join(15)
    status, _h, body = out[0]
    assert status == 200 and body == b"late" and time.monotonic() - started < 5
    started = time.monotonic()
    assert admin.call("DELETE", MSG.format("MS.WAIT") + "?wait=300")[0] == 204
    assert time.monotonic() - started >= 0.3


def test_client_gone_while_its_get_waits_takes_nothing(web, admin):
    admin.mqsc("DEFINE QLOCAL(MS.GONE)")
    s = raw_socket(web)
    s.sendall((f"DELETE {MSG.format('MS.GONE')}?wait=20000 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               "Authorization: Basic cm9vdDpyb290cHc=\r\nibm-mq-rest-csrf-token: x\r\n"
               "\r\n").encode())
    time.sleep(0.5)
    s.close()                                  # gone before any message came
    time.sleep(1.0)                            # (the listener notices the close meanwhile)
    admin.call("POST", MSG.format("MS.GONE"), "kept")
    time.sleep(0.3)
    assert curdepth(admin, "MS.GONE") == 1
    assert admin.call("DELETE", MSG.format("MS.GONE"))[2] == b"kept"


def test_put_refusals(web, admin):
    admin.mqsc("DEFINE QLOCAL(MS.BAD) MAXDEPTH(1)")
    for headers, why in (({"ibm-mq-md-persistence": "yes"}, "persistence"),
                         ({"ibm-mq-md-priority": "10"}, "priority"),
                         ({"ibm-mq-md-correlationId": "xyz"}, "hexadecimal"),
                         ({"ibm-mq-md-correlationId": "00" * 25}, "24"),
                         ({"ibm-mq-md-expiry": "soon"}, "expiry"),
                         ({"ibm-mq-usr": "{"}, "ibm-mq-usr")):
        status, _h, body = admin.call("POST", MSG.format("MS.BAD"), "x", headers)
        assert status == 400 and why in json.loads(body)["error"][0]["message"], headers
    assert admin.call("POST", MSG.format("MS.BAD"), "one")[0] == 201
    status, _h, body = admin.call("POST", MSG.format("MS.BAD"), "two")
    assert status == 503 and json.loads(body)["error"][0]["reasonCode"] == 2053
    status, _h, body = admin.call("POST", MSG.format("MS.NOT.THERE"), "x")
    assert status == 404 and json.loads(body)["error"][0]["reasonCode"] == 2085
    status, _h, body = admin.call("POST", MSG.format("MS.BAD").replace("/QW/", "/QX/"), "x")
    assert status == 404


def test_expired_message_is_not_got(web, admin):
    admin.mqsc("DEFINE QLOCAL(MS.EXPIRE)")
    admin.call("POST", MSG.format("MS.EXPIRE"), "brief", {"ibm-mq-md-expiry": "100"})
    status, headers, _b = admin.call("GET", MSG.format("MS.EXPIRE"))
    assert status in (200, 204)
    if status == 200:
        assert int(headers["ibm-mq-md-expiry"]) <= 100
    time.sleep(0.25)
    assert admin.call("DELETE", MSG.format("MS.EXPIRE"))[0] == 204


def test_persistent_put_answered_201_survives_sigkill(web, admin):
    admin.mqsc("DEFINE QLOCAL(MS.DURABLE)")
    for i in range(20):
        assert admin.call("POST", MSG.format("MS.DURABLE"), f"d{i}",
                          {"ibm-mq-md-persistence": "persistent"})[0] == 201
    web.kill()                                 # (the session's server: started again)
    restart_web(web)
    status, doc = web_client(web, "root", "rootpw").json(
        "GET", LIST.format("MS.DURABLE") + "?limit=100")
    assert status == 200 and len(doc["messages"]) == 20


def test_client_gone_while_its_message_is_sent_leaves_it_on_the_queue(web, admin):
    """The get is committed only once the answer is written: a client that
    stops reading and goes takes nothing (the message is backed out)."""
    size = 12 << 20                            # more than the sockets' buffers hold
    admin.mqsc(f"ALTER QMGR MAXMSGL({size})")
    admin.mqsc(f"ALTER CHANNEL(SYSTEM.DEF.SVRCONN) CHLTYPE(SVRCONN) MAXMSGL({size})")
    admin.mqsc(f"DEFINE QLOCAL(MS.HALFWAY) MAXMSGL({size})")
    conn = stomp_client(web.port, login="root", passcode="rootpw")
    try:
        conn.send("/queue/MS.HALFWAY", b"B" * size, headers={"receipt": "r"})
        conn.col.wait_receipt("r")
    finally:
        conn.disconnect()
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.settimeout(10)
    raw.connect(("127.0.0.1", web.web_port))
    s = ssl.create_default_context(cafile=web.ca).wrap_socket(raw, server_hostname="127.0.0.1")
    s.sendall((f"DELETE {MSG.format('MS.HALFWAY')} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               "Authorization: Basic cm9vdDpyb290cHc=\r\nibm-mq-rest-csrf-token: x\r\n"
               "\r\n").encode())
    assert s.recv(100).startswith(b"HTTP/1.1 200")   # the answer began...
    time.sleep(0.5)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()                                  # ...and the client went (reset)
    deadline_wait(lambda: curdepth(admin, "MS.HALFWAY") == 1, what="the backout")
    status, headers, body = admin.call("DELETE", MSG.format("MS.HALFWAY"))
    assert status == 200 and len(body) == size
    assert headers["ibm-mq-md-backoutcount"] == "1"
