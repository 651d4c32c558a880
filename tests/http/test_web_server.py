"""The HTTP listener itself: started by the server from qm.toml's [web] and
by ``harbormq create --web-port``, its address in listeners.json, the
loopback rule, TLS with the queue manager's key repository, the OpenAPI
description, and STOMP over WebSocket at ``/ws``."""

from __future__ import annotations

import http.client
import json
import ssl
import tomllib

import pytest
import tomli_w
from support.web_helpers import web_client, web_entry
from support.websocket_stomp import WsStomp

from harbormq.config import QMConfig
from harbormq.errors import ConfigError
from harbormq.http.server import check_address
from harbormq.qmgr import lifecycle as qmgr


def test_listener_is_in_listeners_json_beside_stomp(web):
    entries = json.loads((web.qm_dir / "listeners.json").read_text())
    assert entries[0]["port"] == web.port                 # STOMP stays first
    assert web_entry(web) == {"name": "WEB", "host": "127.0.0.1", "port": web.web_port,
                              "tls": True, "transport": "http"}


def test_openapi_description_lists_the_api(web):
    status, doc = web_client(web).json("GET", "/ibmmq/rest/v2/openapi.json")
    assert status == 200 and doc["openapi"].startswith("3.")
    paths = doc["paths"]
    assert set(paths["/ibmmq/rest/v2/admin/action/qmgr/{qmgr}/mqsc"]) == {"post"}
    assert set(paths["/ibmmq/rest/v2/messaging/qmgr/{qmgr}/queue/{queue}/message"]) == \
        {"post", "delete", "get"}
    assert "/ibmmq/rest/v2/messaging/qmgr/{qmgr}/queue/{queue}/messagelist" in paths
    assert "/ws" in paths and doc["components"]["securitySchemes"]["basic"]["scheme"] == \
        "basic"


def test_tls_with_the_key_repository(web):
    # the session's listener serves https with qmgrs/QW/ssl/cert.pem; plain HTTP fails
    status, doc = web_client(web, "root", "rootpw").mqsc("PING QMGR")
    assert status == 200 and doc["overallCompletionCode"] == 0
    plain = http.client.HTTPConnection("127.0.0.1", web.web_port, timeout=5)
    with pytest.raises((http.client.HTTPException, ConnectionError)):
        plain.request("GET", "/ibmmq/rest/v2/openapi.json")
        plain.getresponse()
    plain.close()


def test_create_web_port_writes_the_web_table(home):
    qmgr.create("QC", home=home, log_file_pages=64, web_port=0)
    config = QMConfig.load("QC", home)
    assert config.web.enabled and config.web.port == 0 and config.web.host == "127.0.0.1"
    qmgr.create("QD", home=home, log_file_pages=64)
    assert not QMConfig.load("QD", home).web.enabled     # off unless asked for


def test_web_table_is_checked(home):
    qmgr.create("QE", home=home, log_file_pages=64, web_port=0)
    path = home / "qmgrs" / "QE" / "qm.toml"
    good = tomllib.loads(path.read_text())
    for change, why in (({"max_body": 5}, "unknown key web.max_body"),
                        ({"connauth": "maybe"}, "web.connauth"),
                        ({"tls_cert": "/x.pem"}, "tls_key"),
                        ({"port": 70000}, "web.port")):
        path.write_text(tomli_w.dumps({**good, "web": {**good["web"], **change}}))
        with pytest.raises(ConfigError, match=why):
            QMConfig.load("QE", home)


def test_loopback_rule():
    check_address("127.0.0.1", tls=False, connauth="optional")
    check_address("::1", tls=False, connauth="optional")
    check_address("0.0.0.0", tls=True, connauth="required")
    with pytest.raises(ConfigError, match="connauth"):
        check_address("0.0.0.0", tls=True, connauth="optional")
    with pytest.raises(ConfigError, match="web.tls"):
        check_address("0.0.0.0", tls=False, connauth="required")


def test_stomp_over_websocket_at_ws(web):
    c = WsStomp(f"wss://127.0.0.1:{web.web_port}/ws",
                sslopt={"ca_certs": web.ca, "cert_reqs": ssl.CERT_REQUIRED})
    try:
        assert c.connect(login="root", passcode="rootpw").command == "CONNECTED"
        c.call("SEND", {"destination": "/queue/WS.MOUNTED"}, b"over ws")
    finally:
        c.close()
    status, _h, body = web_client(web, "root", "rootpw").call(
        "DELETE", "/ibmmq/rest/v2/messaging/qmgr/QW/queue/WS.MOUNTED/message")
    assert status == 200 and body == b"over ws"


def test_ws_logs_in_when_the_web_listener_requires_it(tmp_path):
    """connauth = "required" in [web] holds for STOMP over WebSocket at /ws as for
    the REST paths: a client without Origin that does not log in is refused."""
    from support.stomp_helpers import QMServer
    from support.web_helpers import start_web
    srv = QMServer(tmp_path / "hmq", "QR")
    srv.create()
    start_web(srv, connauth="required")
    srv.user_add("root", "rootpw", "mqm")
    try:
        c = WsStomp(f"ws://127.0.0.1:{srv.web_port}/ws")
        try:
            assert c.connect().command == "ERROR"                  # anonymous: refused
        finally:
            c.close()
        c = WsStomp(f"ws://127.0.0.1:{srv.web_port}/ws")
        try:
            assert c.connect(login="root", passcode="rootpw").command == "CONNECTED"
        finally:
            c.close()
    finally:
        srv.stop()


def test_the_listener_before_restart_uses_the_key_repository_of_the_last_run(tmp_path):
    """Before restart recovery SSLKEYR is not known yet: the listener opened then
    uses the repository SSLKEYR named when the queue manager last ran, never one
    the operator may have moved away from; not known, it opens after restart."""
    from support.oplog import operator_log
    from support.stomp_helpers import QMServer
    from support.web_helpers import make_key_repository, restart_web, start_web

    srv = QMServer(tmp_path / "hmq", "QK")
    srv.create()
    make_key_repository(srv)
    record = srv.qm_dir / "web-sslkeyr.json"

    def after_restart() -> int:
        return sum(1 for msgid, _ in operator_log(srv.home, "QK") if msgid == "HMQ8023W")

    try:
        start_web(srv, tls=True)           # the first start: not known, after restart
        assert after_restart() == 1
        assert json.loads(record.read_text()) == {"sslkeyr": ""}
        srv.stop()
        # a repository named once and since moved away from is not served before restart
        record.write_text(json.dumps({"sslkeyr": str(tmp_path / "retired")}))
        restart_web(srv)
        assert after_restart() == 2
        status, doc = web_client(srv).json("GET", "/ibmmq/rest/v2/openapi.json")
        assert status == 200
        assert json.loads(record.read_text()) == {"sslkeyr": ""}     # SSLKEYR now
        srv.stop()
        restart_web(srv)                   # known and loadable: opened before restart
        assert after_restart() == 2
    finally:
        if srv.running:
            srv.stop()
