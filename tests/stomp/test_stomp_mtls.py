"""Mutual TLS on the STOMP listeners, TCP and WebSocket: a listener may require
a client certificate (``client_auth``) signed by one of its CAs (``tls_ca``);
a missing or untrusted certificate is refused in the handshake, before any
frame, and a trusted one that maps to no user on a ``required`` listener is
refused before any frame too. A certificate's subject maps to a user by the
most specific ``[[security.certificate_users]]`` rule (``security/certmap.py``),
and the connection acts as that user. The certificates are made here by a
throwaway CA (the openssl binary, as the channel TLS tests make theirs).
"""

from __future__ import annotations

import re
import socket
import ssl
import subprocess
import tomllib
from pathlib import Path

import pytest
import tomli_w
import websocket
from support.stomp_helpers import QMServer, RawStomp, deadline_wait
from support.websocket_stomp import WsStomp, ws_url

from harbormq.config import QMConfig
from harbormq.errors import ConfigError
from harbormq.security.certmap import (
    SubjectPatternError,
    map_certificate_user,
    parse_subject_pattern,
)

OPENSSL = "/usr/bin/openssl"
#: P-256 keys: made in milliseconds, where RSA keys take a good part of a second
EC_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1")
LEAF_EXT = ("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=DNS:localhost,"
            "IP:127.0.0.1\n")


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run([OPENSSL, *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(where: Path) -> Path:
    where.mkdir(parents=True)
    openssl("req", "-x509", *EC_KEY, "-nodes", "-keyout", "ca.key", "-out",
            "ca.pem", "-days", "2", "-subj", f"/CN={where.name} CA", cwd=where)
    return where


def make_leaf(ca: Path, where: Path, subject: str) -> tuple[str, str]:
    """A certificate for ``subject`` (``/CN=x/O=y``) signed by ``ca``: (cert, key)."""
    where.mkdir(parents=True)
    (where / "ext.cnf").write_text(LEAF_EXT)
    openssl("req", *EC_KEY, "-nodes", "-keyout", "key.pem", "-out", "req.csr",
            "-subj", subject, cwd=where)
    openssl("x509", "-req", "-in", "req.csr", "-CA", str(ca / "ca.pem"), "-CAkey",
            str(ca / "ca.key"), "-CAcreateserial", "-out", "cert.pem", "-days", "2",
            "-extfile", "ext.cnf", cwd=where)
    return str(where / "cert.pem"), str(where / "key.pem")


RULES = [{"subject": "CN=alice,O=Example", "user": "alice"},
         {"subject": "O=Example", "user": "example"},
         {"subject": "CN=b*,OU=Payments", "user": "payments"},
         {"subject": "CN=admin1", "user": "admin1"}]


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    base = tmp_path_factory.mktemp("mtls")
    ca, rogue = make_ca(base / "trusted"), make_ca(base / "rogue")
    certs = {"server": make_leaf(ca, base / "server", "/CN=localhost"),
             "alice": make_leaf(ca, base / "alice", "/CN=alice/O=Example"),
             "bob": make_leaf(ca, base / "bob", "/CN=bob/OU=Payments/O=Example"),
             "admin1": make_leaf(ca, base / "admin1", "/CN=admin1/O=Ops"),
             "mallory": make_leaf(ca, base / "mallory", "/CN=mallory/O=Elsewhere"),
             "rogue": make_leaf(rogue, base / "rogue-alice", "/CN=alice/O=Example")}
    return {"ca": str(ca / "ca.pem"), **certs}


@pytest.fixture(scope="module")
def mtls_server(tmp_path_factory, pki):
    srv = QMServer(tmp_path_factory.mktemp("stompmtls") / "hmq", "QMT")
    srv.create()
    cert, key = pki["server"]
    tls = {"host": "127.0.0.1", "port": 0, "tls_cert": cert, "tls_key": key,
           "tls_ca": pki["ca"]}
    srv.configure(listeners=[{"name": "REQUIRED", **tls, "client_auth": "required"},
                             {"name": "OPTIONAL", **tls, "client_auth": "optional"},
                             {"name": "WSS", **tls, "client_auth": "required",
                              "transport": "websocket"}])
    data = tomllib.loads(srv.config_path.read_text())
    data["security"] = {"certificate_users": RULES}
    srv.config_path.write_text(tomli_w.dumps(data))
    srv.start()
    srv.by_name = {li["name"]: li for li in srv.listeners}
    srv.user_add("admin1", "unused-password", "mqm")
    yield srv
    srv.stop()


def client_tls(pki, who: str | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=pki["ca"])
    if who is not None:
        ctx.load_cert_chain(*pki[who])
    return ctx


def tls_stomp(srv, pki, who: str | None, listener: str = "REQUIRED") -> RawStomp:
    return RawStomp(srv.by_name[listener]["port"], host="127.0.0.1",
                    tls=client_tls(pki, who), timeout=10)


def connection_user(srv, connected) -> str:
    out = srv.sc(f"DISPLAY CONN({connected['session']}) USERID")
    m = re.search(r"USERID\(([^)]*)\)", out)
    assert m, out
    return m.group(1)


def assert_refused_in_handshake(srv, pki, who: str | None, listener: str = "REQUIRED") -> None:
    """No frame is ever read from the client: the handshake fails, or (TLS 1.3,
    where the client finishes first) the server's alert ends the connection
    before any answer to CONNECT."""
    try:
        c = tls_stomp(srv, pki, who, listener)
    except (ssl.SSLError, ConnectionError):
        return
    try:
        try:
            c.send("CONNECT", {"accept-version": "1.2", "host": "x"})
            frames = c.wait_closed(timeout=10)   # a TimeoutError: it was served
        except (ssl.SSLError, ConnectionError):
            frames = []
        assert frames == [], f"answered: {frames}"
    finally:
        c.close()


def test_required_without_certificate_is_refused_in_the_handshake(mtls_server, pki):
    assert_refused_in_handshake(mtls_server, pki, None)


def test_required_untrusted_certificate_is_refused_in_the_handshake(mtls_server, pki):
    # the same subject as alice's, signed by a CA the listener does not trust
    assert_refused_in_handshake(mtls_server, pki, "rogue")


def test_certificate_maps_to_its_user(mtls_server, pki):
    c = tls_stomp(mtls_server, pki, "alice")
    try:
        f = c.connect()                  # no login: the certificate is the credential
        assert f.command == "CONNECTED"
        assert connection_user(mtls_server, f) == "alice"
        # alice holds no authority record: she is not the owner
        c.send("SEND", {"destination": "/queue/MTLS.Q", "receipt": "r"}, b"x")
        err = c.expect("ERROR")
        assert "2035" in err["message"] and "alice" in err["message"]
    finally:
        c.close()


def test_most_specific_rule_wins(mtls_server, pki):
    # bob's subject matches O=Example (one attribute) and CN=b*,OU=Payments (two)
    c = tls_stomp(mtls_server, pki, "bob")
    try:
        assert connection_user(mtls_server, c.connect()) == "payments"
    finally:
        c.close()


def test_mapped_administrator_works_and_a_login_must_match(mtls_server, pki):
    c = tls_stomp(mtls_server, pki, "admin1")
    try:
        f = c.connect(login="admin1")          # the same user: no passcode needed
        assert f.command == "CONNECTED"
        c.call("SEND", {"destination": "/queue/MTLS.ADMIN", "persistent": "true"}, b"ok")
    finally:
        c.close()
    c = tls_stomp(mtls_server, pki, "alice")
    try:
        f = c.connect(login="admin1", passcode="unused-password")
        assert f.command == "ERROR"
        assert "not the user alice" in f["message"] and "2035" in f["message"]
    finally:
        c.close()


def test_unmapped_certificate_refused_before_any_frame(mtls_server, pki):
    c = tls_stomp(mtls_server, pki, "mallory")
    try:
        frames = c.wait_closed(timeout=10)     # nothing sent: the server speaks first
        assert [f.command for f in frames] == ["ERROR"]
        assert "CN=mallory,O=Elsewhere maps to no user" in frames[0]["message"]
    finally:
        c.close()
    log = mtls_server.qm_dir / "errors" / "HMQERR01.LOG"
    deadline_wait(lambda: "HMQ5541E" in log.read_text(), what="HMQ5541E in the log")


def test_optional_listener(mtls_server, pki):
    # no certificate: CONNECT authenticates as on any listener (anonymous: the owner)
    c = tls_stomp(mtls_server, pki, None, "OPTIONAL")
    try:
        assert c.connect().command == "CONNECTED"
    finally:
        c.close()
    # a trusted certificate that maps to no user: CONNECT authenticates too
    c = tls_stomp(mtls_server, pki, "mallory", "OPTIONAL")
    try:
        assert c.connect(login="admin1", passcode="unused-password").command == "CONNECTED"
    finally:
        c.close()
    c = tls_stomp(mtls_server, pki, "alice", "OPTIONAL")
    try:
        assert connection_user(mtls_server, c.connect()) == "alice"
    finally:
        c.close()
    # an untrusted one is refused even where a certificate is optional
    assert_refused_in_handshake(mtls_server, pki, "rogue", "OPTIONAL")


def test_websocket_with_client_certificate(mtls_server, pki):
    url = ws_url(mtls_server.by_name["WSS"])
    assert url.startswith("wss://")
    cert, key = pki["alice"]
    c = WsStomp(url, sslopt={"ca_certs": pki["ca"], "certfile": cert, "keyfile": key})
    try:
        # a browser-like Origin would need a login; a certificate is one
        f = c.connect()
        assert f.command == "CONNECTED" and connection_user(mtls_server, f) == "alice"
    finally:
        c.close()
    c = WsStomp(url, origin="https://app.example",
                sslopt={"ca_certs": pki["ca"], "certfile": cert, "keyfile": key})
    try:
        assert c.connect().command == "CONNECTED"
    finally:
        c.close()
    # no certificate: the handshake fails, no HTTP request is even read
    with pytest.raises((ssl.SSLError, OSError, websocket.WebSocketException)):
        WsStomp(url, sslopt={"ca_certs": pki["ca"]})


# ------------------------------------------------------------------------- the mapping

def test_subject_patterns():
    cert = {"subject": ((("commonName", "bob"),), (("organizationalUnitName", "Payments"),),
                        (("organizationName", "Example, Inc"),))}

    class Rule:
        def __init__(self, subject, user):
            self.subject, self.user = subject, user
    assert map_certificate_user(cert, [Rule("O=Example\\, Inc", "inc")]).user == "inc"
    assert map_certificate_user(cert, [Rule("o=example*", "any-case")]).user == "any-case"
    assert map_certificate_user(cert, [Rule("CN=*ob", "tail"), Rule("CN=*o*", "mid")]).user \
        == "tail"     # equal attribute counts: more literal characters win
    assert map_certificate_user(cert, [Rule("CN=bob,OU=Sales", "sales")]) is None
    first = map_certificate_user(cert, [Rule("CN=bob", "one"), Rule("CN=BOB", "two")])
    assert first.user == "one" and first.subject == "CN=bob,OU=Payments,O=Example\\, Inc"
    for bad in ("CN", "XX=a", "CN=a*b", "", "CN="):
        with pytest.raises(SubjectPatternError):
            parse_subject_pattern(bad)


def write_config(tmp_path, listeners, security=None) -> None:
    d = tmp_path / "qmgrs" / "QC"
    d.mkdir(parents=True)
    data = {"name": "QC", "listeners": listeners}
    if security is not None:
        data["security"] = security
    (d / "qm.toml").write_text(tomli_w.dumps(data))


@pytest.mark.parametrize("listener,security,words", [
    ({"name": "L", "client_auth": "required"}, None, "needs TLS (tls_cert, tls_key) and tls_ca"),
    ({"name": "L", "client_auth": "sometimes"}, None, "client_auth"),
    ({"name": "L", "transport": "udp"}, None, "transport"),
    ({"name": "L"}, {"certificate_users": [{"subject": "CN=a*b", "user": "u"}]},
     "certificate_users[0]: subject pattern 'CN=a*b'"),
    ({"name": "L"}, {"certificate_users": [{"subject": "CN=a"}]}, "exactly the keys"),
    ({"name": "L"}, {"users": []}, "unknown key security.users"),
    ([{"name": "L", "port": 1},
      {"name": "L", "port": 2, "tls_cert": "c", "tls_key": "k", "tls_ca": "ca",
       "client_auth": "optional"}], None, "two listeners are named 'L' and one has client_auth"),
])
def test_configuration_errors(tmp_path, listener, security, words):
    write_config(tmp_path, listener if isinstance(listener, list) else [listener], security)
    with pytest.raises(ConfigError) as err:
        QMConfig.load("QC", tmp_path)
    assert words in str(err.value)


def test_required_client_certificates_allow_a_remote_listener(tmp_path):
    """A listener off loopback needs connauth = "required", unless every client
    is known by its certificate."""
    from harbormq.stomp.listener import StompService
    remote = {"name": "R", "host": "192.0.2.1", "tls_cert": "c.pem", "tls_key": "k.pem",
              "tls_ca": "ca.pem"}
    write_config(tmp_path, [{**remote, "client_auth": "required"}])
    StompService(None, QMConfig.load("QC", tmp_path), None).check_listeners()
    (tmp_path / "qmgrs" / "QC" / "qm.toml").unlink()
    (tmp_path / "qmgrs" / "QC").rmdir()
    write_config(tmp_path, [{**remote, "client_auth": "optional"}])
    with pytest.raises(ConfigError, match="not a loopback address"):
        StompService(None, QMConfig.load("QC", tmp_path), None).check_listeners()


def test_handshake_refusal_leaves_the_listener_serving(mtls_server, pki):
    for _ in range(5):
        try:
            s = socket.create_connection(("127.0.0.1", mtls_server.by_name["REQUIRED"]["port"]),
                                         timeout=5)
            s.sendall(b"CONNECT\naccept-version:1.2\n\n\0")     # plain text at a TLS port
            s.recv(100)
            s.close()
        except OSError:
            pass
    c = tls_stomp(mtls_server, pki, "alice")
    try:
        assert c.connect().command == "CONNECTED"
    finally:
        c.close()
