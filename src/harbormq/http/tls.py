"""TLS of the HTTP listener with the queue manager's key material.

The key repository is the one the channels use (MQ's SSLKEYR, a QMGR
attribute; blank: ``qmgrs/<QM>/ssl``): its ``cert.pem`` and ``key.pem`` serve
HTTPS. qm.toml's ``[web] tls_cert`` and ``tls_key`` name other PEM files
instead. Client certificates are not asked for: a request authenticates
with HTTP basic (``auth.py``). Not here: the channels' TLS
(``channels/tls.py``), the STOMP listeners' (``stomp/tlsconfig.py``).
"""

from __future__ import annotations

import ssl
from pathlib import Path

from ..config import QMConfig
from ..errors import ConfigError


def key_repository(qm_dir: Path, sslkeyr: str) -> Path:
    """Where the key repository is: SSLKEYR, or ``qmgrs/<QM>/ssl`` when blank."""
    return Path(sslkeyr) if sslkeyr else Path(qm_dir) / "ssl"


def web_tls(config: QMConfig, sslkeyr: str) -> ssl.SSLContext | None:
    """The listener's server context; None when ``[web] tls`` is off."""
    if not config.web.tls:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    load_web_certificate(ctx, config, sslkeyr)
    return ctx


def uses_key_repository(config: QMConfig) -> bool:
    """The certificate comes from the key repository (SSLKEYR, a QMGR
    attribute that restart recovers), not from qm.toml's files."""
    return config.web.tls and not config.web.tls_cert


def load_web_certificate(ctx: ssl.SSLContext, config: QMConfig, sslkeyr: str) -> None:
    """Load the certificate and key into ``ctx`` (again: new handshakes then
    present them)."""
    web = config.web
    if web.tls_cert:
        cert, key = Path(web.tls_cert), Path(web.tls_key)
        where = "web.tls_cert / web.tls_key"
    else:
        keyr = key_repository(config.qm_dir, sslkeyr)
        cert, key = keyr / "cert.pem", keyr / "key.pem"
        where = f"the key repository {keyr} (SSLKEYR)"
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"web: cannot load the TLS certificate {cert} and key {key} of "
                          f"{where}: {exc}", msgid="HMQ9505E") from None
