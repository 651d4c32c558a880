"""The STOMP listeners: TLS (stomp.py verifying and not, the raw client, beside
a plain listener, a bad certificate, plain text at a TLS port) and the addresses
a listener may take (loopback only unless connauth is required, IPv6's
included; never a port in use).
"""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess

import pytest
from support.stomp_helpers import (
    ConnectionClosed,
    QMServer,
    RawStomp,
    bodies,
    send_all,
    subscribe,
)


def make_cert(tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not available to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=localhost", "-addext",
                    "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    return cert, key


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    base = tmp_path_factory.mktemp("stomptls")
    cert, key = make_cert(base)
    srv = QMServer(base / "hmq", "QT")
    srv.create()
    srv.configure(listeners=[{"name": "TLS", "host": "127.0.0.1", "port": 0,
                              "tls_cert": str(cert), "tls_key": str(key)},
                             {"name": "PLAIN", "host": "127.0.0.1", "port": 0,
                              "tls_cert": "", "tls_key": ""}])
    srv.start()
    srv.cert = cert
    yield srv
    srv.stop()


def test_tls_stomp_py_verified(tls_server, conns):
    assert tls_server.listeners[0]["tls"] is True
    c = conns.stomp(tls_server.port, tls_ca=str(tls_server.cert))
    c.send("/queue/TLS.Q", "over tls", headers={"receipt": "t1", "persistent": "true"})
    c.col.wait_receipt("t1")
    c.subscribe("/queue/TLS.Q", id="1", ack="client-individual")
    m = c.col.wait_messages(1)[0]
    assert m.body == "over tls"
    c.ack(m.headers["ack"], receipt="a1")
    c.col.wait_receipt("a1")


def test_tls_stomp_py_unverified_and_raw(tls_server, conns):
    c = conns.stomp(tls_server.port, tls_noverify=True)
    c.send("/queue/TLS2.Q", "noverify", headers={"receipt": "t2"})
    c.col.wait_receipt("t2")
    ctx = ssl.create_default_context(cafile=str(tls_server.cert))
    r = RawStomp(tls_server.port, tls=ctx)
    try:
        assert r.connect().command == "CONNECTED"
        subscribe(r, "TLS2.Q", ack="auto")
        assert bodies(r.messages(1)) == [b"noverify"]
    finally:
        r.close()


def test_tls_and_plain_listeners_share_queues(tls_server, conns):
    plain = [li for li in tls_server.listeners if li["name"] == "PLAIN"][0]
    assert plain["tls"] is False and plain["port"] != tls_server.port
    p = conns.raw(plain["port"])
    send_all(p, "BOTH.Q", ["from plain"])
    t = conns.stomp(tls_server.port, tls_ca=str(tls_server.cert))
    t.subscribe("/queue/BOTH.Q", id="1", ack="auto")
    assert t.col.wait_messages(1)[0].body == "from plain"


def test_tls_bad_certificate_refused_at_start(tmp_path):
    srv = QMServer(tmp_path / "hmq", "QB")
    srv.create()
    srv.configure(listeners=[{"name": "TLS", "host": "127.0.0.1", "port": 0,
                              "tls_cert": str(tmp_path / "missing.pem"),
                              "tls_key": str(tmp_path / "missing.key")}])
    rc, out = srv.start_failure()
    assert rc != 0 and "TLS" in out and "missing.pem" in out, out


def test_tls_listener_refuses_plain_text(tls_server, conns):
    c = RawStomp(tls_server.port, timeout=10)
    try:
        c.send_bytes(b"CONNECT\naccept-version:1.2\nhost:x\n\n\0")
        with pytest.raises((ConnectionClosed, TimeoutError, UnicodeDecodeError, ValueError,
                            AssertionError)):
            f = c.recv(timeout=5)
            assert f.command != "CONNECTED"
    finally:
        c.close()
    # the listener is still fine
    ok = conns.stomp(tls_server.port, tls_noverify=True)
    assert ok.is_connected()


# ------------------------------------------------------------------------------ addresses

@pytest.mark.parametrize("host", ["0.0.0.0", "::", ""])
def test_non_loopback_listener_refused_when_connauth_optional(tmp_path, host):
    srv = QMServer(tmp_path / "hmq", "QN")
    srv.create()
    srv.configure(listeners=[{"name": "WIDE", "host": host, "port": 0,
                              "tls_cert": "", "tls_key": ""}])
    rc, out = srv.start_failure()
    assert rc != 0
    assert "loopback" in out and "connauth" in out, out
    assert not (srv.qm_dir / "listeners.json").exists()
    # and the queue manager is not left running
    assert srv.cli("status", srv.name).stdout.count("running") == 0


def test_ipv6_loopback_listener_allowed_with_connauth_optional(tmp_path):
    try:
        probe = socket.socket(socket.AF_INET6)
        probe.bind(("::1", 0))
        probe.close()
    except OSError:
        pytest.skip("no IPv6 loopback here")
    srv = QMServer(tmp_path / "hmq", "Q6")
    srv.create()
    srv.configure(listeners=[{"name": "V6", "host": "::1", "port": 0,
                              "tls_cert": "", "tls_key": ""}])
    srv.start()
    try:
        c = RawStomp(srv.port, host="::1")
        assert c.connect().command == "CONNECTED"       # anonymous: loopback
        send_all(c, "V6.Q", ["six"])
        subscribe(c, "V6.Q", ack="auto")
        assert bodies(c.messages(1)) == [b"six"]
        c.close()
    finally:
        srv.stop()


def test_listener_port_in_use_refused_at_start(server, tmp_path):
    srv = QMServer(tmp_path / "hmq", "QU")
    srv.create()
    srv.configure(listeners=[{"name": "BUSY", "host": "127.0.0.1", "port": server.port,
                              "tls_cert": "", "tls_key": ""}])
    rc, out = srv.start_failure()
    assert rc != 0 and "cannot listen" in out and str(server.port) in out, out
    assert not (srv.qm_dir / "admin.sock").exists()
