"""TLS on channels between two real queue manager processes: certificates
from a throwaway CA made with the openssl binary, each queue manager's key
repository a directory (SSLKEYR, or qmgrs/<QM>/ssl by default); both ends
must name the same CipherSpec; the receiver verifies the sender's
certificate (and SSLPEER), the sender the receiver's. A refused channel
stops with an operator message, and its messages wait on the transmission
queue: nothing is lost."""

from __future__ import annotations

import subprocess
from pathlib import Path

from test_channels import pair, receive_all, send_all, wait_until

OPENSSL = "/usr/bin/openssl"
LEAF_EXT = ("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth,clientAuth\n")


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run([OPENSSL, *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(where: Path, name: str) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
            "ca.pem", "-days", "2", "-subj", f"/CN={name}", cwd=where)
    return where


def key_repository(repo: Path, ca: Path, cn: str, *, trusts: Path | None = None) -> Path:
    """cert.pem + key.pem for ``cn`` signed by ``ca``; ca.pem: the CA of
    ``trusts`` (default: ``ca``)."""
    repo.mkdir(parents=True, exist_ok=True)
    (repo / "ext.cnf").write_text(LEAF_EXT)
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "key.pem", "-out", "req.csr",
            "-subj", f"/CN={cn}/O=harbormq tests", cwd=repo)
    openssl("x509", "-req", "-in", "req.csr", "-CA", str(ca / "ca.pem"), "-CAkey",
            str(ca / "ca.key"), "-CAcreateserial", "-out", "cert.pem", "-days", "2",
            "-extfile", "ext.cnf", cwd=repo)
    (repo / "ca.pem").write_bytes(((trusts or ca) / "ca.pem").read_bytes())
    return repo


def tls_pair(tmp_path, spec: str, *, a_ca: str = "ca1", sslpeer: str = "CN=QMA"):
    """QMA and QMB with key repositories (QMA's in its default place, QMB's
    named by SSLKEYR), both channel ends SSLCIPH(spec)."""
    a, b, port = pair(tmp_path, batchsz=5, shortrty=0)
    ca1, ca2 = make_ca(tmp_path / "ca1", "CA one"), make_ca(tmp_path / "ca2", "CA two")
    key_repository(a.qm_dir / "ssl", ca1 if a_ca == "ca1" else ca2, "QMA", trusts=ca1)
    key_repository(tmp_path / "keys-b", ca1, "QMB")
    b.sc(f"ALTER QMGR SSLKEYR('{tmp_path / 'keys-b'}')\n"
         f"ALTER CHANNEL(QMA.TO.QMB) CHLTYPE(RCVR) SSLCIPH({spec}) SSLPEER('{sslpeer}')")
    a.sc(f"ALTER CHANNEL(QMA.TO.QMB) CHLTYPE(SDR) SSLCIPH({spec}) SSLPEER('CN=QMB')")
    return a, b, (ca1, ca2)


def wait_status(srv, status: str, timeout: float = 60) -> None:
    wait_until(lambda: f"STATUS({status})" in srv.sc("DISPLAY CHSTATUS(QMA.TO.QMB)"), timeout,
               f"STATUS({status}) on {srv.name}")


def errlog(srv) -> str:
    return (srv.qm_dir / "errors" / "HMQERR01.LOG").read_text()


def test_messages_flow_over_tls(tmp_path):
    """TLS 1.2 with one pinned CipherSpec, then TLS 1.3 (ANY_TLS13): every
    message arrives once, in order, and both logs name the session."""
    a, b, _ = tls_pair(tmp_path, "ECDHE_RSA_AES_128_GCM_SHA256")
    try:
        bodies = [f"m{i}" for i in range(12)]
        send_all(a.port, "/queue/TO.B", bodies)
        assert receive_all(b.port, "IN", 12) == bodies
        assert "TLSv1.2 ECDHE-RSA-AES128-GCM-SHA256" in errlog(b)
        assert "CN=QMA" in errlog(b) and "CN=QMB" in errlog(a)
        a.sc("STOP CHANNEL(QMA.TO.QMB)")
        wait_status(b, "INACTIVE")
        a.sc("ALTER CHANNEL(QMA.TO.QMB) CHLTYPE(SDR) SSLCIPH(ANY_TLS13)")
        b.sc("ALTER CHANNEL(QMA.TO.QMB) CHLTYPE(RCVR) SSLCIPH(ANY_TLS13)")
        a.sc("START CHANNEL(QMA.TO.QMB)")
        more = [f"n{i}" for i in range(7)]
        send_all(a.port, "/queue/TO.B", more)
        assert receive_all(b.port, "IN", 7) == more
        assert "TLSv1.3" in errlog(b)
        assert "LSTSEQNO(19)" in b.sc("DISPLAY CHSTATUS(QMA.TO.QMB) ALL")
    finally:
        a.stop()
        b.stop()


def test_a_plaintext_sender_to_a_tls_receiver_is_refused_and_loses_nothing(tmp_path):
    """The sender without SSLCIPH (and then with another CipherSpec) is refused
    by the receiver, naming both CipherSpecs; the sender stops, its messages
    wait; set right, the channel delivers each exactly once."""
    a, b, _ = tls_pair(tmp_path, "ECDHE_RSA_AES_256_GCM_SHA384")
    try:
        a.sc("ALTER CHANNEL(QMA.TO.QMB) CHLTYPE(SDR) SSLCIPH('')")
        send_all(a.port, "/queue/TO.B", ["p0", "p1", "p2"])
        wait_status(a, "STOPPED")
        log = errlog(a)
        assert "HMQ9131E" in log and "SSLCIPH(ECDHE_RSA_AES_256_GCM_SHA384)" in log, log[-2000:]
        assert "connected without TLS" in log
        assert "HMQ9131E" in errlog(b)
        assert "CURDEPTH(3)" in a.sc("DISPLAY QLOCAL(QMB) CURDEPTH")
        assert "CURDEPTH(0)" in b.sc("DISPLAY QLOCAL(IN) CURDEPTH")

        a.sc("ALTER CHANNEL(QMA.TO.QMB) CHLTYPE(SDR) SSLCIPH(ANY_TLS13)\n"
             "START CHANNEL(QMA.TO.QMB)")
        wait_status(a, "STOPPED")
        assert "the sender on QMA has SSLCIPH(ANY_TLS13)" in errlog(a)

        a.sc("ALTER CHANNEL(QMA.TO.QMB) CHLTYPE(SDR) SSLCIPH(ECDHE_RSA_AES_256_GCM_SHA384)\n"
             "START CHANNEL(QMA.TO.QMB)")
        assert receive_all(b.port, "IN", 3) == ["p0", "p1", "p2"]
        assert "CURDEPTH(0)" in a.sc("DISPLAY QLOCAL(QMB) CURDEPTH")
    finally:
        a.stop()
        b.stop()


def test_a_certificate_from_an_untrusted_ca_is_refused(tmp_path):
    """QMA's certificate is signed by a CA QMB does not trust: the TLS 1.3
    handshake fails, both sides say so, the sender stops, nothing is lost.
    Re-issued by the trusted CA but for another name, SSLPEER refuses it."""
    a, b, (ca1, _ca2) = tls_pair(tmp_path, "ANY_TLS13", a_ca="ca2")
    try:
        send_all(a.port, "/queue/TO.B", ["c0", "c1"])
        wait_status(a, "STOPPED")
        log_a, log_b = errlog(a), errlog(b)
        assert "HMQ9132E" in log_a and "not signed by a CA" in log_a, log_a[-2000:]
        assert "HMQ9132E" in log_b and "certificate verify failed" in log_b, log_b[-2000:]
        assert "CURDEPTH(2)" in a.sc("DISPLAY QLOCAL(QMB) CURDEPTH")

        key_repository(a.qm_dir / "ssl", ca1, "QMX")       # trusted CA, wrong name
        a.sc("START CHANNEL(QMA.TO.QMB)")
        wait_status(a, "STOPPED")
        assert "HMQ9134E" in errlog(a) and "SSLPEER(CN=QMA)" in errlog(a)
        assert "CURDEPTH(2)" in a.sc("DISPLAY QLOCAL(QMB) CURDEPTH")

        b.sc("ALTER CHANNEL(QMA.TO.QMB) CHLTYPE(RCVR) SSLPEER('CN=QM*')")
        a.sc("START CHANNEL(QMA.TO.QMB)")
        assert receive_all(b.port, "IN", 2) == ["c0", "c1"]
    finally:
        a.stop()
        b.stop()
