"""The HTTP listener itself: started by the server from qm.toml's [web] and
by ``harbormq create --web-port``, its address in listeners.json, the
loopback rule, and the registration point of the features."""

from __future__ import annotations

import json

from conftest import WebClient, web_entry
from support.stomp_helpers import QMServer

from harbormq.config import QMConfig


def test_listener_is_in_listeners_json_beside_stomp(web):
    entries = json.loads((web.qm_dir / "listeners.json").read_text())
    assert entries[0]["port"] == web.port                 # STOMP stays first
    http_entry = web_entry(web)
    assert http_entry == {"name": "WEB", "host": "127.0.0.1", "port": web.web_port,
                          "tls": False, "transport": "http"}
    status, doc = WebClient(web.web_port).json("GET", "/ibmmq/rest/v2/openapi.json")
    assert status == 200 and doc["openapi"].startswith("3.")


def test_create_web_port_writes_the_web_table(tmp_path):
    srv = QMServer(tmp_path / "hmq", "QC")
    srv.home.mkdir(parents=True)
    srv.cli("create", "QC", "--port", "0", "--web-port", "0", "--log-file-pages", "64")
    config = QMConfig.load("QC", srv.home)
    assert config.web.enabled and config.web.port == 0 and config.web.host == "127.0.0.1"


def test_non_loopback_host_without_tls_is_refused(tmp_path):
    srv = QMServer(tmp_path / "hmq", "QN")
    srv.create()
    import tomllib

    import tomli_w
    data = tomllib.loads(srv.config_path.read_text())
    data["web"] = {"host": "0.0.0.0", "port": 0, "connauth": "required"}
    srv.config_path.write_text(tomli_w.dumps(data))
    status, out = srv.start_failure()
    assert status != 0 and "web.tls" in out and "0.0.0.0" in out
