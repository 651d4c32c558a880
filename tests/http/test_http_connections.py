"""HTTP requests are connections of the queue manager (http/connections.py):
DISPLAY CONN shows a REST admin request, a console read and a waiting
messaging DELETE with its unit of work and queue handle, with the user, the
client's address, APPLTYPE(HTTP) and an APPLTAG saying which part of the
front end; they are gone once answered; STOP CONN ends a waiting get and
takes nothing; a refused login never shows; STOMP over WebSocket shows as a
STOMP connection on the listener WEB; the /metrics connection counters count
them."""

from __future__ import annotations

import re
import ssl
import threading

from support.stomp_helpers import deadline_wait
from support.web_helpers import web_client
from support.websocket_stomp import WsStomp

MSG = "/ibmmq/rest/v2/messaging/qmgr/QW/queue/{}/message"


def conn_blocks(text: str) -> list[dict]:
    """Each connection of DISPLAY CONN's output as {ATTR: value}, its handles'
    queues (OBJNAME) under "QUEUES"."""
    out = []
    for block in text.split("HMQ8276I")[1:]:
        pairs = dict(re.findall(r"\b([A-Z]+)\(([^)]*)\)", block))
        pairs["QUEUES"] = re.findall(r"\bOBJNAME\(([^)]*)\)", block)
        if "CONN" in pairs:
            out.append(pairs)
    return out


def http_conns(web) -> list[dict]:
    """The HTTP connections DISPLAY CONN shows over the admin socket now."""
    shown = conn_blocks(web.sc("DISPLAY CONN(*) TYPE(ALL) ALL"))
    return [c for c in shown if c["APPLTYPE"] == "HTTP"]


def metric(web, name: str) -> float:
    status, _h, body = web_client(web, "root", "rootpw").call("GET", "/metrics")
    assert status == 200
    m = re.search(rf"^harbormq_{name}\{{[^}}]*\}} (\S+)$", body.decode(), re.M)
    assert m, name
    return float(m.group(1))


def test_a_rest_admin_request_shows_itself_in_display_conn(web, admin):
    status, body = admin.mqsc("DISPLAY CONN(*) ALL")
    assert status == 200
    shown = conn_blocks("\n".join(line for r in body["commandResponse"] for line in r["text"]))
    (me,) = [c for c in shown if c["APPLTYPE"] == "HTTP"]
    assert me["APPLTAG"] == "HTTP REST admin" and me["USERID"] == "root"
    assert me["CHANNEL"] == "WEB" and me["CONNAME"].startswith("127.0.0.1:")
    assert me["UOWSTATE"] == "NONE"
    # a request's connection lasts while it runs: answered, it is gone
    assert http_conns(web) == []
    # a console read is one too, as the console user
    status, doc = web_client(web, "root", "rootpw").json("GET", "/console/api/connections")
    assert status == 200
    tags = [(c["appltag"], c["userid"]) for c in doc["connections"] if c["appltype"] == "HTTP"]
    assert tags == [("HTTP console", "root")]


def test_a_waiting_get_shows_its_unit_of_work_and_handle_and_stop_conn_ends_it(web, admin):
    admin.mqsc("DEFINE QLOCAL(HC.WAIT)")
    answers = []
    opened = metric(web, "connections_opened_total")

    def waiting_get():
        client = web_client(web, "root", "rootpw")
        try:
            answers.append(client.call("DELETE", MSG.format("HC.WAIT") + "?wait=20000")[0])
        except OSError as exc:            # STOP CONN: the request ends unanswered
            answers.append(exc)
    getter = threading.Thread(target=waiting_get)
    getter.start()
    try:
        (conn,) = deadline_wait(lambda: [c for c in http_conns(web) if c["QUEUES"]], 15,
                                what="the waiting get's connection and handle")
        assert conn["APPLTAG"] == "HTTP REST messaging" and conn["USERID"] == "root"
        assert conn["QUEUES"] == ["HC.WAIT"]                 # its handle, open for input
        assert conn["UOWSTATE"] == "ACTIVE" and conn["UOWID"]
        assert "IPPROCS(1)" in web.sc("DISPLAY QSTATUS(HC.WAIT) IPPROCS")
        assert metric(web, "connections") >= 1
        assert metric(web, "connections_opened_total") >= opened + 1
        out = web.sc(f"STOP CONN({conn['CONN']})")
        assert "HMQ8123I" in out
        getter.join(15)
        assert not getter.is_alive() and answers and answers[0] != 200
    finally:
        getter.join(30)
    deadline_wait(lambda: http_conns(web) == [], 10, what="the stopped connection gone")
    assert "IPPROCS(0)" in web.sc("DISPLAY QSTATUS(HC.WAIT) IPPROCS")
    # the stopped get took nothing: a message put now stays for the next get
    status, _h, _b = admin.call("POST", MSG.format("HC.WAIT"), "kept")
    assert status == 201
    assert "CURDEPTH(1)" in web.sc("DISPLAY QLOCAL(HC.WAIT) CURDEPTH")
    status, _h, body = admin.call("DELETE", MSG.format("HC.WAIT"))
    assert (status, body) == (200, b"kept")


def test_a_refused_login_is_no_connection(web):
    opened = metric(web, "connections_opened_total")
    status, _h, _b = web_client(web, "root", "wrong").call(
        "POST", "/ibmmq/rest/v2/admin/action/qmgr/QW/mqsc",
        {"type": "runCommand", "parameters": {"command": "DISPLAY QMGR"}})
    assert status == 401
    # (scrapes are no connections: the count is the refused request's alone)
    assert metric(web, "connections_opened_total") == opened


def test_stomp_over_websocket_shows_as_stomp_on_the_web_listener(web):
    c = WsStomp(f"wss://127.0.0.1:{web.web_port}/ws",
                sslopt={"ca_certs": web.ca, "cert_reqs": ssl.CERT_REQUIRED})
    try:
        assert c.connect(login="bob", passcode="bobpw",
                         **{"client-id": "ws-app"}).command == "CONNECTED"
        shown = conn_blocks(web.sc("DISPLAY CONN(*) ALL"))
        (ws,) = [s for s in shown if s["CHANNEL"] == "WEB"]
        assert ws["APPLTYPE"] == "STOMP" and ws["USERID"] == "bob"
        assert ws["APPLTAG"] == "ws-app" and ws["CONNAME"].startswith("127.0.0.1:")
    finally:
        c.close()
