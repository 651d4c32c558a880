"""TLS on channels: CipherSpecs, the key repository and the peer checks.

A channel whose SSLCIPH is not blank speaks TLS (Python's ``ssl``), on both
sides, with the same CipherSpec. Each queue manager has one key repository
(MQ's SSLKEYR, a QMGR attribute; blank: ``qmgrs/<QM>/ssl``), a directory of
PEM files::

    cert.pem   this queue manager's certificate (its chain may follow it)
    key.pem    its private key (unencrypted)
    ca.pem     the certificate authorities it trusts for its partners

Both sides present their certificate and verify the other's against their
own ``ca.pem`` (a receiver always asks for the sender's). Host names are not
checked: a queue manager is known by its certificate's subject, which SSLPEER
can require (``CN=QMA,O=Example``; ``*`` at the end of a value matches any
ending).
"""

from __future__ import annotations

import ssl
from pathlib import Path

from ..core.objects import PEER_KEYS, SSLCIPHS, parse_sslpeer
from ..errors import HarbormqError

#: what SSLCIPH may say: (lowest TLS version, highest, OpenSSL cipher name).
#: Python's ssl module cannot pin one TLS 1.3 cipher suite (it has no
#: set_ciphersuites), so TLS 1.3 is offered as ANY_TLS13, as MQ names it.
CIPHERSPECS = {
    "ANY_TLS12_OR_HIGHER": (ssl.TLSVersion.TLSv1_2, None, None),
    "ANY_TLS13": (ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_3, None),
    "ECDHE_RSA_AES_128_GCM_SHA256": (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_2,
                                     "ECDHE-RSA-AES128-GCM-SHA256"),
    "ECDHE_RSA_AES_256_GCM_SHA384": (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_2,
                                     "ECDHE-RSA-AES256-GCM-SHA384"),
    "ECDHE_RSA_CHACHA20_POLY1305_SHA256": (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_2,
                                           "ECDHE-RSA-CHACHA20-POLY1305"),
}
assert set(CIPHERSPECS) == set(SSLCIPHS) - {""}, "core/objects.py lists the same CipherSpecs"
KEY_FILES = ("cert.pem", "key.pem", "ca.pem")
HANDSHAKE_TIMEOUT = 30.0


class KeyRepositoryError(HarbormqError):
    """The key repository cannot give a TLS context (a file missing or bad)."""
    msgid = "HMQ9133E"


class CipherSpecMismatch(HarbormqError):
    msgid = "HMQ9131E"


class PeerNameMismatch(HarbormqError):
    msgid = "HMQ9134E"


def repository(qm_dir: Path, sslkeyr: str) -> Path:
    return Path(sslkeyr) if sslkeyr else Path(qm_dir) / "ssl"


def context(keyr: Path, spec: str, *, server: bool) -> ssl.SSLContext:
    """A TLS context for one side of a channel with CipherSpec ``spec``, its
    certificate and trusted CAs from the key repository ``keyr``."""
    lo, hi, ciphers = CIPHERSPECS[spec]
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False          # a queue manager is its certificate's subject
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.minimum_version = lo
    if hi is not None:
        ctx.maximum_version = hi
    if ciphers:
        ctx.set_ciphers(ciphers)
    cert, key, ca = (keyr / f for f in KEY_FILES)
    for f in (cert, key, ca):
        if not f.is_file():
            raise KeyRepositoryError(f"key repository {keyr}: {f.name} is missing (it needs "
                                     "cert.pem, key.pem and ca.pem; SSLKEYR names the "
                                     "directory)", path=str(f))
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise KeyRepositoryError(f"key repository {keyr}: cannot load cert.pem with key.pem: "
                                 f"{exc}", path=str(cert)) from None
    try:
        ctx.load_verify_locations(ca)
    except (OSError, ssl.SSLError) as exc:
        raise KeyRepositoryError(f"key repository {keyr}: cannot load ca.pem: {exc}",
                                 path=str(ca)) from None
    return ctx


_SHORT = {v: k for k, v in PEER_KEYS.items()}


def subject(cert: dict) -> str:
    """A certificate's subject as SSLPEER writes it: ``CN=QMA,O=Example``."""
    return ",".join(f"{_SHORT.get(k, k)}={v}" for rdn in cert.get("subject", ()) for k, v in rdn)


def check_session(sslobj, spec: str, sslpeer: str, who: str) -> str:
    """After the handshake: the negotiated protocol and cipher are what
    ``spec`` asks for, and the partner's certificate subject matches SSLPEER.
    Returns a description of the session for the operator log."""
    version, cipher = sslobj.version(), sslobj.cipher()[0]
    lo, hi, ciphers = CIPHERSPECS[spec]
    ok = (version == "TLSv1.3") if hi == ssl.TLSVersion.TLSv1_3 else \
        (cipher == ciphers) if ciphers else version in ("TLSv1.2", "TLSv1.3")
    if not ok:
        raise CipherSpecMismatch(f"the TLS session with {who} uses {version} {cipher}, not "
                                 f"the CipherSpec SSLCIPH({spec})")
    cert = sslobj.getpeercert() or {}
    if sslpeer:
        have = [(k, v) for rdn in cert.get("subject", ()) for k, v in rdn]
        for key, want in parse_sslpeer(sslpeer):
            if not any(k == key and _value_matches(want, v) for k, v in have):
                raise PeerNameMismatch(f"the certificate of {who} ({subject(cert)}) does not "
                                       f"match SSLPEER({sslpeer}) (MQ's AMQ9636)")
    return f"{version} {cipher}, partner certificate {subject(cert)}"


def _value_matches(want: str, have: str) -> bool:
    if want.endswith("*"):
        return have.upper().startswith(want[:-1].upper())
    return have.upper() == want.upper()


def describe_failure(exc: BaseException) -> str:
    """An SSL error in words an operator can act on."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (f"certificate verify failed: {exc.verify_message}: the partner's certificate "
                "is not signed by a CA this side trusts (ca.pem), or is not valid now")
    if "UNKNOWN_CA" in str(exc).upper() or "BAD_CERTIFICATE" in str(exc).upper():
        return (f"the partner refused this side's certificate ({exc}): it is not signed by a "
                "CA the partner trusts (its ca.pem)")
    if isinstance(exc, (ConnectionError, EOFError)) or "EOF" in str(exc):
        return ("the partner closed the connection during or straight after the TLS "
                "handshake: it did not accept this side's certificate (not signed by a CA in "
                "its ca.pem?), or it ended at that moment; its error log says which")
    return str(exc)
