"""Fixtures of the HTTP front end's tests: ``web``, a real ``harbormq start
--foreground`` process with ``[web]`` on a free loopback port, its users
(alice: no authority records, bob: granted by tests, root: of the group
mqm), and ``WebClient``, an http.client caller that answers (status,
headers, body). Tests on ``web`` use queues of their own.
"""

from __future__ import annotations

import base64
import http.client
import json
import time

import pytest
from support.stomp_helpers import QMServer, deadline_wait

CSRF = {"ibm-mq-rest-csrf-token": "x"}


def web_entry(srv: QMServer, timeout: float = 30) -> dict:
    """The HTTP listener's entry of listeners.json (written once it listens)."""
    def find():
        try:
            entries = json.loads((srv.qm_dir / "listeners.json").read_text())
        except (OSError, ValueError):
            return None
        return next((e for e in entries if e.get("transport") == "http"), None)
    return deadline_wait(find, timeout, what="the web listener in listeners.json")


def start_web(srv: QMServer, **web) -> QMServer:
    """Give ``srv`` a ``[web]`` table (port 0 unless said) and start it; its
    HTTP port in ``srv.web_port``."""
    import tomllib

    import tomli_w
    data = tomllib.loads(srv.config_path.read_text())
    data["web"] = {"port": 0, **web}
    srv.config_path.write_text(tomli_w.dumps(data))
    srv.start()
    srv.web_port = web_entry(srv)["port"]
    return srv


class WebClient:
    """One caller of the listener: a new connection per request unless
    ``keep`` (then one kept open)."""

    def __init__(self, port: int, user: str | None = None, password: str = "",
                 host: str = "127.0.0.1", timeout: float = 30):
        self.port, self.host, self.timeout = port, host, timeout
        self.auth = None
        if user is not None:
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            self.auth = f"Basic {token}"

    def call(self, method: str, path: str, body: bytes | str | dict | None = None,
             headers: dict | None = None, csrf: bool = True):
        """(status, headers as a dict of lower-case names, body bytes)."""
        hdrs = dict(headers or {})
        if self.auth:
            hdrs.setdefault("Authorization", self.auth)
        if csrf and method in ("POST", "PUT", "PATCH", "DELETE"):
            hdrs.update(CSRF)
        if isinstance(body, dict):
            body = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        elif isinstance(body, str):
            body = body.encode()
            hdrs.setdefault("Content-Type", "text/plain;charset=utf-8")
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request(method, path, body=body, headers=hdrs)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
        finally:
            conn.close()

    def json(self, method: str, path: str, body=None, headers=None, csrf=True):
        status, hdrs, data = self.call(method, path, body, headers, csrf)
        return status, json.loads(data) if data else None

    def mqsc(self, command: str, qm: str = "QW"):
        return self.json("POST", f"/ibmmq/rest/v2/admin/action/qmgr/{qm}/mqsc",
                         {"type": "runCommand", "parameters": {"command": command}})


@pytest.fixture(scope="session")
def web(tmp_path_factory):
    srv = QMServer(tmp_path_factory.mktemp("web") / "hmq", "QW")
    srv.create()
    # short limits, so that the tests of slow and long requests are quick
    start_web(srv, request_timeout_ms=2000, max_body_bytes=1 << 20)
    srv.user_add("alice", "alicepw")                   # no authority records
    srv.user_add("bob", "bobpw")                       # granted during a test
    srv.user_add("root", "rootpw", "mqm")              # an administrator by group
    yield srv
    srv.stop()


@pytest.fixture
def admin(web) -> WebClient:
    return WebClient(web.web_port, "root", "rootpw")


def wait_until(pred, timeout: float = 10.0):
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)
