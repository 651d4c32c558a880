"""Users, connection authentication and authority records (MQ's OAM, simplified).

This package is a helper beside the layers: it imports no layer. Its modules,
by job:

* ``users.py``: users and their scrypt password hashes (``users.json``);
* ``authority.py``: authority records, generic profiles and the check made on
  every operation (``authrecs.json``);
* ``peers.py``: the loopback rule and the OS user at the other end of a
  loopback TCP connection (``/proc/net/tcp``);
* ``login_limits.py``: the rate limit of failed logins per peer address;
* ``certmap.py``: client certificates to users (subject patterns, the
  mapping MQ's SSLPEERMAP rules make);
* ``chlauth.py``: channel authentication records (CHLAUTH) and their
  precedence; ``svrconn.py``: a client connection admitted the MQ way (its
  SVRCONN channel, CHLAUTH, CONNAUTH), the one call a STOMP CONNECT makes;
* ``files.py``: the JSON files both stores keep; ``errors.py``: the errors.

Here: ``Security``, the facade a queue manager holds (its users, its
authority records, and authentication of a connection), and ``Principal``,
who a connection acts as. Other layers import from ``harbormq.security``
only the names in ``__all__``.

Principal model (see docs/administration.md):

* the OS user that owns the queue manager (whoever can reach the 0600 admin
  socket) has every authority;
* an anonymous STOMP connection, allowed only on a loopback listener with
  ``connauth = "optional"``, acts as the OS user at the other end, as an MQ
  local bindings application does (``peers.py`` finds its uid). The
  owner's uid (the uid the queue manager runs as) is the owner; any other uid
  is the principal of its user name, holding exactly the authority records
  that name it or, when a harbormq user of that name exists, its groups;
  normally none, so it is refused with MQRC 2035. When the user at the other
  end cannot be identified (not Linux, /proc unreadable, the socket gone) the
  connection is refused (HMQ5540E, MQRC 2035): fail closed, log in instead.
  The choice, against requiring a login by default: local tools, scripts and
  the tour keep working without passwords for the owner, and no other user
  can borrow the owner's authority;
* a client of a mutual TLS listener whose certificate maps to a user
  (``certmap.py``) acts as that user, as if it had logged in;
* an authenticated user is checked against the authority records: no record,
  no authority, except for a member of the group ``mqm``, an administrator.
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path
from typing import Callable

from . import chlauth
from .authority import ADMIN_GROUP, AuthorityStore
from .certmap import CertificateMatch, PeerMapRule, map_certificate_user, subject_text
from .errors import (
    ConnectionRefused,
    InvalidAuthority,
    NotAuthorized,
    SecurityError,
    UnknownUser,
    UserExists,
)
from .login_limits import LoginFailures
from .peers import PeerUnknown, check_listener, is_loopback, loopback_peer_uid
from .principal import Principal
from .svrconn import CatalogView, ClientAdmission, ConnauthPolicy, listener_channels
from .users import UserStore

#: what other layers use: the facade, its stores, the errors, the listener check,
#: the CHLAUTH records (the module ``chlauth``) and the client admission
__all__ = [
    "AuthorityStore", "CatalogView", "CertificateMatch", "ClientAdmission", "ConnauthPolicy",
    "ConnectionRefused", "chlauth", "InvalidAuthority", "LoginFailures", "NotAuthorized",
    "PeerMapRule", "PeerUnknown", "Principal", "Security", "SecurityError", "UnknownUser",
    "UserExists", "UserStore", "check_listener", "listener_channels", "loopback_peer_uid",
    "map_certificate_user", "os_owner", "subject_text",
]


def os_owner() -> str:
    """The name of the OS user this process runs as: a queue manager's owner."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


class Security:
    """The users and the authority records of one queue manager.

    ``owner`` is the OS user owning the queue manager (by default the one this
    process runs as) and ``owner_uid`` its uid (by default this process's
    effective uid: the uid its sockets and files belong to). ``peer_uid`` finds
    the uid at the other end of a loopback connection (``loopback_peer_uid``;
    the tests give their own)."""

    def __init__(self, users: UserStore, authorities: AuthorityStore, owner: str | None = None,
                 *, owner_uid: int | None = None,
                 peer_uid: Callable[[tuple, tuple], int] = loopback_peer_uid):
        self.users = users
        self.authorities = authorities
        self.owner = owner or os_owner()
        self.owner_uid = os.geteuid() if owner_uid is None else owner_uid
        self.authorities.owner = self.owner
        self.peer_uid = peer_uid
        #: the connection authentication in force: read at start and by
        #: REFRESH SECURITY (None: not read yet, OPTIONAL as before)
        self.connauth: ConnauthPolicy | None = None
        #: server-connection channels STOP CHANNEL stopped (until START CHANNEL)
        self.stopped_channels: set[str] = set()

    def refresh_connauth(self, catalog: CatalogView) -> ConnauthPolicy:
        """REFRESH SECURITY TYPE(CONNAUTH): the queue manager's CONNAUTH and its
        AUTHINFO read again; they apply to connections from now on."""
        self.connauth = ConnauthPolicy.from_catalog(catalog)
        return self.connauth

    @classmethod
    def for_config(cls, config) -> "Security":
        return cls.for_dir(config.qm_dir)

    @classmethod
    def for_dir(cls, qm_dir: Path, owner: str | None = None, **kw) -> "Security":
        qm_dir = Path(qm_dir)
        return cls(UserStore(qm_dir / "users.json"), AuthorityStore(qm_dir / "authrecs.json"),
                   owner, **kw)

    def owner_principal(self) -> Principal:
        return Principal(self.owner, (ADMIN_GROUP,), anonymous=True, owner=True)

    def authenticate(self, user: str | None, password: str | None, *, connauth: str,
                     peer: tuple, local: tuple | None = None,
                     certified: CertificateMatch | None = None) -> Principal:
        """A STOMP CONNECT's login/passcode; ``peer`` and ``local`` are the
        connection's addresses as our socket sees them (``(host, port, ...)``).

        With a client certificate mapped to a user (``certified``, mutual TLS):
        that user, whatever connauth says; a login naming another user is
        refused (MQRC 2035). With a login: that harbormq user, or MQRC 2035.
        Without one: refused (MQRC 2035) unless connauth is optional and the
        peer is on loopback; then the OS user at the other end
        (``anonymous_principal``)."""
        if certified is not None:
            return self.certificate_principal(certified, user)
        if not user:
            peer_host = str(peer[0])
            if connauth != "optional" or not is_loopback(peer_host):
                raise NotAuthorized("a user id and password are required on this listener "
                                    "(connauth required, or a non-loopback client) "
                                    "(MQRC 2035 NOT_AUTHORIZED)", msgid="HMQ5534E")
            return self.anonymous_principal(peer, local)
        if not self.users.verify(user, password or ""):
            raise NotAuthorized(f"user id {user} authentication failed "
                                "(MQRC 2035 NOT_AUTHORIZED)", msgid="HMQ5534E", user=user)
        return Principal(user, tuple(self.users.groups_of(user)))

    def certificate_principal(self, certified: CertificateMatch,
                              login: str | None) -> Principal:
        """The user a client certificate maps to, with the groups of the harbormq
        user of that name if there is one (else none: only the authority records
        naming it). The certificate is the credential: a passcode is not
        asked for, and a login must name the same user."""
        if login and login != certified.user:
            raise NotAuthorized(f"login {login} is not the user {certified.user} that the "
                                f"client certificate ({certified.subject}) maps to "
                                "(MQRC 2035 NOT_AUTHORIZED)", msgid="HMQ5534E", user=login)
        try:
            groups = self.users.groups_of(certified.user)
        except UnknownUser:
            groups = []
        return Principal(certified.user, tuple(groups))

    def anonymous_principal(self, peer: tuple, local: tuple | None) -> Principal:
        """An anonymous loopback connection acts as the OS user at the other end,
        as an MQ local bindings application does: the owner's uid is the owner;
        another uid is the principal of that user's name, with the groups of
        the harbormq user of that name if there is one, and so exactly the
        authority records naming it or them. When the user cannot be
        identified the connection is refused (HMQ5540E, MQRC 2035): log in."""
        host = f"[{peer[0]}]" if ":" in str(peer[0]) else str(peer[0])
        where = f"{host}:{peer[1]}" if len(peer) > 1 else host
        try:
            if local is None:
                raise PeerUnknown("the connection's own address is not known")
            uid = self.peer_uid(peer, local)
            if uid == self.owner_uid:
                return self.owner_principal()
            try:
                name = pwd.getpwuid(uid).pw_name
            except KeyError:
                raise PeerUnknown(f"its uid {uid} has no user name") from None
            if name == self.owner:
                raise PeerUnknown(f"its uid {uid} has the owner's user name {name} but not "
                                  f"the owner's uid {self.owner_uid}")
        except PeerUnknown as exc:
            raise NotAuthorized(f"anonymous connection from {where} refused: the OS user at "
                                f"the other end cannot be identified ({exc}) "
                                "(MQRC 2035 NOT_AUTHORIZED)", msgid="HMQ5540E",
                                hint="log in: send a user id and password (STOMP login and "
                                     "passcode)") from None
        try:
            groups = self.users.groups_of(name)
        except UnknownUser:
            groups = []                       # the usual case: no harbormq user of that name
        return Principal(name, tuple(groups), anonymous=True)

    @staticmethod
    def is_os_user(name: str) -> bool:
        """A user of this machine: a principal its anonymous loopback connections
        act as."""
        try:
            pwd.getpwnam(name)
        except (KeyError, ValueError):
            return False
        return True

    def check(self, principal: Principal, objtype: str, name: str, authority: str) -> bool:
        return self.authorities.check(principal.user, principal.groups, objtype, name,
                                      authority)

    def require(self, principal: Principal, objtype: str, name: str, authority: str) -> None:
        self.authorities.require(principal.user, principal.groups, objtype, name, authority)

    def visible(self, principal: Principal, objtype: str, names, authority: str) -> list[str]:
        """The names of ``names`` on which ``principal`` holds ``authority``."""
        return self.authorities.visible(principal.user, principal.groups, objtype, names,
                                        authority)
