"""Helpers of the HTTP front end's tests (tests/http/, and the tests of the
features that join it): a queue manager server with ``[web]`` on a free
loopback port (``start_web``), the listener's entry of listeners.json
(``web_entry``), and ``WebClient``, an http.client caller that answers
(status, headers, body). The fixtures are in tests/http/conftest.py.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl

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
    return restart_web(srv)


def restart_web(srv: QMServer) -> QMServer:
    """Start ``srv`` (its [web] as it is); the HTTP port in ``srv.web_port``."""
    srv.start()
    srv.web_port = web_entry(srv)["port"]
    return srv


class WebClient:
    """One caller of the listener, a new connection per request; HTTP basic
    when ``user`` is given, https when ``tls_ca`` is."""

    def __init__(self, port: int, user: str | None = None, password: str = "",
                 host: str = "127.0.0.1", timeout: float = 30, tls_ca: str | None = None):
        self.port, self.host, self.timeout = port, host, timeout
        #: https, trusting this CA file, when given
        self.tls_ca = tls_ca
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
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        elif isinstance(body, str):
            body = body.encode()
            hdrs.setdefault("Content-Type", "text/plain;charset=utf-8")
        if self.tls_ca:
            context = ssl.create_default_context(cafile=self.tls_ca)
            conn = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout,
                                               context=context)
        else:
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


def make_key_repository(srv: QMServer) -> str:
    """A self-signed certificate for localhost and 127.0.0.1 in the queue
    manager's key repository (``qmgrs/<QM>/ssl``: SSLKEYR blank); the CA file
    a client trusts, also kept as ``srv.ca``."""
    import subprocess
    keyr = srv.qm_dir / "ssl"
    keyr.mkdir(exist_ok=True)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=localhost", "-addext",
                    "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", str(keyr / "key.pem"), "-out", str(keyr / "cert.pem")],
                   check=True, capture_output=True, timeout=60)
    srv.ca = str(keyr / "cert.pem")
    return srv.ca


def web_client(srv: QMServer, user: str | None = None, password: str = "") -> WebClient:
    """A WebClient of ``srv``'s listener (https trusting ``srv.ca`` when it has one)."""
    return WebClient(srv.web_port, user, password, tls_ca=getattr(srv, "ca", None))


def raw_socket(srv: QMServer, timeout: float = 10):
    """A socket to ``srv``'s listener (TLS when it has a CA), for exact bytes."""
    import socket
    s = socket.create_connection(("127.0.0.1", srv.web_port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    ca = getattr(srv, "ca", None)
    if ca:
        s = ssl.create_default_context(cafile=ca).wrap_socket(s, server_hostname="127.0.0.1")
    return s
