"""TLS of the STOMP listeners, TCP and WebSocket alike, and their client certificates.

``listener_tls`` makes a listener's server context from its qm.toml entry: its
certificate and key, and for mutual TLS (``client_auth``) the CAs trusted to
sign client certificates (``tls_ca``). The handshake itself refuses a client
that must present a certificate and does not, or presents one no trusted CA
signed: such a client never reaches STOMP, so no frame of it is read.

``certificate_user`` then says, when a connection is made, who the client's
certificate makes it (``security/certmap.py`` maps the subject to a user),
or why the connection is refused: on a ``client_auth = "required"`` listener
a certificate that maps to no user is refused before any frame too. On an
``"optional"`` one such a client (or one without a certificate) logs in with
CONNECT as on any listener.

Not here: the listeners themselves (``listener.py``, ``websocket.py``).
"""

from __future__ import annotations

import ssl

from ..config import Listener, SecuritySettings
from ..errors import ConfigError
from ..security import CertificateMatch, map_certificate_user, subject_text

_VERIFY = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def listener_tls(li: Listener) -> ssl.SSLContext | None:
    """The server TLS context of listener ``li``; None when it is plain text."""
    if not li.tls:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        ctx.load_cert_chain(li.tls_cert, li.tls_key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"listener {li.name}: cannot load TLS certificate "
                          f"{li.tls_cert} / key {li.tls_key}: {exc}",
                          msgid="HMQ9505E") from None
    if li.client_auth != "none":
        try:
            ctx.load_verify_locations(li.tls_ca)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"listener {li.name}: cannot load the client certificate CAs "
                              f"tls_ca = {li.tls_ca}: {exc}", msgid="HMQ9505E") from None
    ctx.verify_mode = _VERIFY[li.client_auth]
    return ctx


def certificate_user(li: Listener, security: SecuritySettings,
                     peercert: dict | None) -> tuple[CertificateMatch | None, str | None]:
    """For a connection just made on ``li`` whose client presented ``peercert``
    (``getpeercert()``; verified by the handshake, None or empty when there is
    none): ``(the user it maps to, None)``, ``(None, None)`` when CONNECT is to
    authenticate it, or ``(None, why it is refused)``."""
    if li.client_auth == "none":
        return None, None
    if not peercert:
        if li.client_auth == "required":      # the handshake refuses this already
            return None, (f"listener {li.name} requires a client certificate (client_auth "
                          "= \"required\") (MQRC 2035 NOT_AUTHORIZED)")
        return None, None
    match = map_certificate_user(peercert, security.certificate_users)
    if match is None and li.client_auth == "required":
        return None, (f"the client certificate {subject_text(peercert)} maps to no user: no "
                      "security.certificate_users rule matches its subject (MQRC 2035 "
                      "NOT_AUTHORIZED)")
    return match, None
