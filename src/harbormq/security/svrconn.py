"""Who a client connection is, the MQ way: the server-connection channel of
its listener, channel authentication (CHLAUTH) and connection
authentication (CONNAUTH, an AUTHINFO of AUTHTYPE(IDPWOS)).

A STOMP listener is harbormq's server-connection channel: qm.toml's
``[[listeners]] channel`` names a ``CHLTYPE(SVRCONN)`` channel (default
``SYSTEM.DEF.SVRCONN``) whose MCAUSER, MAXINST, MAXINSTC and MAXMSGL govern
the listener's connections. ``ClientAdmission.admit`` is the one call the
STOMP CONNECT makes: it returns the ``Principal`` the connection acts as or
raises the refusal, in this order (docs/security.md):

1. BLOCKADDR: the client's address refused outright (MQRC 2059);
2. the channel: defined and SVRCONN (MQRC 2540), MAXINST and MAXINSTC
   (MQRC 2537);
3. connection authentication: a login is checked against harbormq's users
   unless CHCKCLNT is NONE; REQUIRED (or qm.toml's ``connauth = "required"``,
   a floor) refuses a connection without one (MQRC 2035);
4. the mapping record (ADDRESSMAP, USERMAP, SSLPEERMAP) by MQ's precedence
   (``chlauth.py``): NOACCESS refuses, MAP gives its MCAUSER, CHANNEL the user
   the connection brings;
5. the user: a MAP record's MCAUSER, else the channel's MCAUSER, else the
   login; an anonymous connection brings its OS user (identified on
   loopback, ``peers.py``) only where a record with USERSRC(CHANNEL) matches
   it: the default record for loopback addresses, which an administrator can
   remove. With CHLAUTH(DISABLED) the OS user is taken as it is;
6. REQDADM: a privileged user (the owner, a member of mqm) must have logged
   in; BLOCKUSER: the user (and the login) against the most specific
   BLOCKUSER record.

The catalog (``Catalog``: the core's ``objects``) holds the channels, the
AUTHINFO objects and the CHLAUTH records; the AUTHINFO in force is the one
``Security.refresh_connauth`` last read (at start and REFRESH SECURITY), as
in MQ, where a changed AUTHINFO applies after REFRESH SECURITY TYPE(CONNAUTH).

Not here: users and passwords (``users.py``), authority records
(``authority.py``), the loopback lookup (``peers.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from .authority import ADMIN_GROUP
from .certmap import CertificateMatch
from .chlauth import (
    Rule,
    blocking_address_rule,
    blocking_user_rule,
    mapping_rule,
    user_blocked,
)
from .errors import ConnectionRefused, NotAuthorized, UnknownUser
from .peers import is_loopback
from .principal import Principal
from .users import UserStore


class CatalogView(Protocol):
    """What admission reads of the queue manager's definitions (the core's
    catalog: ``core.objects.SecurityCatalog``); attribute dicts, MQSC names."""
    def qmgr_attrs(self) -> Mapping[str, object]: ...

    def channel_attrs(self, name: str) -> Mapping[str, object] | None: ...

    def authinfo_attrs(self, name: str) -> Mapping[str, object] | None: ...

    def chlauth_records(self) -> list[Mapping[str, object]]: ...


#: the server-connection channel of a listener that names none (MQ's default)
DEFAULT_SVRCONN = "SYSTEM.DEF.SVRCONN"


class SecurityHost(Protocol):
    """What admission uses of the ``Security`` facade."""
    users: UserStore
    owner: str
    connauth: "ConnauthPolicy | None"
    stopped_channels: set[str]

    def owner_principal(self) -> Principal: ...

    def anonymous_principal(self, peer: tuple, local: tuple | None) -> Principal: ...

    def certificate_principal(self, certified: CertificateMatch,
                              login: str | None) -> Principal: ...


class ClientConnection(Protocol):
    """The connection being admitted (the core's ``Connection``)."""
    conn_id: str
    listener: str


@dataclass(frozen=True)
class ConnauthPolicy:
    """The connection authentication in force (REFRESH SECURITY reads it again)."""
    authinfo: str = ""
    chckclnt: str = "OPTIONAL"
    adoptctx: str = "YES"

    @classmethod
    def from_catalog(cls, catalog: CatalogView) -> "ConnauthPolicy":
        name = str(catalog.qmgr_attrs().get("CONNAUTH") or "")
        if not name:
            return cls("", "NONE")          # CONNAUTH(' '): no user ids checked
        attrs = catalog.authinfo_attrs(name)
        if attrs is None:
            # MQ refuses every client then; so does harbormq, saying why
            return cls(name, "MISSING")
        return cls(name, str(attrs.get("CHCKCLNT", "OPTIONAL")),
                   str(attrs.get("ADOPTCTX", "YES")))


def listener_channels(listeners: Iterable) -> dict[str, str]:
    """The SVRCONN channel of each STOMP listener of qm.toml, by listener name."""
    return {li.name: (getattr(li, "channel", "") or DEFAULT_SVRCONN) for li in listeners}


def rules_of(catalog: CatalogView) -> list[Rule]:
    return [Rule.from_attrs(dict(a)) for a in catalog.chlauth_records()]


def _host(peer: tuple) -> str:
    return str(peer[0]) if peer else ""


class ClientAdmission:
    """Admits the connections of the STOMP listeners (one per server process).

    ``live`` gives the ids of the connections open now; the instances of a
    channel are the admitted ones among them (so a closed connection frees
    its instance without telling anyone). ``emit`` writes an operator message."""

    def __init__(self, security: SecurityHost, catalog: CatalogView, channels: dict[str, str], *,
                 live: Callable[[], Iterable[str]], connauth_floor: str = "optional",
                 emit: Callable[[str, str], None] = lambda msgid, text: None):
        self.security = security
        self.catalog = catalog
        self.channels = channels
        self.live = live
        self.connauth_floor = connauth_floor
        self.emit = emit
        #: conn_id -> (channel, client address) of the admitted connections
        self.instances: dict[str, tuple[str, str]] = {}

    def channel_of(self, listener: str) -> str:
        return self.channels.get(listener, DEFAULT_SVRCONN)

    def instances_of(self, channel: str) -> list[tuple[str, str]]:
        live = set(self.live())
        for conn_id in [c for c in self.instances if c not in live]:
            del self.instances[conn_id]
        return [(c, addr) for c, (ch, addr) in self.instances.items() if ch == channel]

    async def admit(self, conn: ClientConnection, login: str | None, passcode: str | None,
                    peer: tuple, local: tuple | None, *, sslpeer: str | None = None,
                    certified: CertificateMatch | None = None,
                    run: Callable[[Callable[[], Principal]], Awaitable[Principal]] | None = None,
                    login_required: bool = False) -> Principal:
        """Admit a CONNECT (steps 1-6 of the module's docstring): the principal
        it acts as, or the refusal (a SecurityError naming why, with its MQRC).
        ``certified``: the user a client certificate maps to (mutual TLS), who
        needs no password; its subject is the SSLPEER CHLAUTH records match.
        ``run``: how the password or OS user check runs off the loop (the
        caller's threads; default: the loop's executor). ``login_required``:
        this connection must log in whatever CONNAUTH says (a browser's)."""
        catalog = self.catalog
        channel = self.channel_of(conn.listener)
        host = _host(peer)
        where = f"{host} on channel {channel}"
        chlauth_on = catalog.qmgr_attrs().get("CHLAUTH", "ENABLED") != "DISABLED"
        rules = rules_of(catalog) if chlauth_on else []
        try:
            blocked = blocking_address_rule(rules, host)
            if blocked is not None:
                self._refuse("HMQ9782E", blocked, f"connection from {host} refused: the address "
                             "is blocked by a CHLAUTH TYPE(BLOCKADDR) record (MQRC 2059 "
                             "Q_MGR_NOT_AVAILABLE)")
            attrs = catalog.channel_attrs(channel)
            if attrs is None or attrs.get("CHLTYPE") != "SVRCONN":
                what = "is not defined" if attrs is None else \
                    f"is a {attrs.get('CHLTYPE')} channel, not SVRCONN"
                raise ConnectionRefused(f"connection from {host} refused: channel {channel} "
                                        f"{what} (MQRC 2540 UNKNOWN_CHANNEL_NAME)",
                                        msgid="HMQ2540E", hint="DEFINE CHANNEL(" + channel +
                                        ") CHLTYPE(SVRCONN), or name another channel in "
                                        "the listener's qm.toml entry")
            if channel in self.security.stopped_channels:
                raise ConnectionRefused(f"connection from {host} refused: channel {channel} "
                                        "is stopped (MQRC 2537 CHANNEL_NOT_AVAILABLE)",
                                        msgid="HMQ2537E", hint=f"START CHANNEL({channel})")
            attrs = dict(attrs)
            self._count_instance(conn.conn_id, channel, host, attrs)
        except ConnectionRefused as exc:
            self.emit(exc.msgid, exc.message)
            raise
        try:
            # scrypt and the /proc lookup take milliseconds: off the loop
            if certified is not None and sslpeer is None:
                sslpeer = certified.subject
            check = partial(self._identify, channel, attrs, rules if chlauth_on else None,
                            login, passcode, peer, local, sslpeer, where, certified,
                            login_required)
            if run is None:
                principal = await asyncio.get_running_loop().run_in_executor(None, check)
            else:
                principal = await run(check)
        except BaseException as exc:
            self.instances.pop(conn.conn_id, None)
            if isinstance(exc, ConnectionRefused):
                self.emit(exc.msgid, exc.message)
            raise
        principal.channel = channel
        principal.max_msg_length = int(attrs.get("MAXMSGL") or 0)
        return principal

    def _count_instance(self, conn_id: str, channel: str, host: str, attrs: dict) -> None:
        mine = self.instances_of(channel)
        maxinst, maxinstc = int(attrs.get("MAXINST", 999_999_999)), \
            int(attrs.get("MAXINSTC", 999_999_999))
        if len(mine) >= maxinst:
            raise ConnectionRefused(f"connection from {host} refused: channel {channel} has "
                                    f"its MAXINST({maxinst}) instances running (MQRC 2537 "
                                    "CHANNEL_NOT_AVAILABLE)", msgid="HMQ2537E")
        if sum(1 for _c, addr in mine if addr == host) >= maxinstc:
            raise ConnectionRefused(f"connection from {host} refused: channel {channel} has "
                                    f"its MAXINSTC({maxinstc}) instances from {host} running "
                                    "(MQRC 2537 CHANNEL_NOT_AVAILABLE)", msgid="HMQ2537E")
        self.instances[conn_id] = (channel, host)

    def _refuse(self, msgid: str, rule: Rule, text: str) -> None:
        if rule.warn:            # WARN(YES): reported, not enforced
            self.emit(msgid.replace("E", "W", 1) if msgid.endswith("E") else msgid,
                      f"{text}; WARN(YES): allowed")
            return
        raise ConnectionRefused(text, msgid=msgid)

    def _identify(self, channel: str, chl: dict, rules: list[Rule] | None, login: str | None,
                  passcode: str | None, peer: tuple, local: tuple | None, sslpeer: str | None,
                  where: str, certified: CertificateMatch | None = None,
                  login_required: bool = False) -> Principal:
        """Steps 3-6 (``rules`` None: CHLAUTH(DISABLED))."""
        sec = self.security
        chlauth_on = rules is not None
        rules = rules or []
        policy = sec.connauth or ConnauthPolicy()
        if policy.chckclnt == "MISSING":
            raise NotAuthorized(f"connection from {where} refused: the queue manager's CONNAUTH "
                                f"names AUTHINFO {policy.authinfo}, which is not defined "
                                "(MQRC 2035 NOT_AUTHORIZED)", msgid="HMQ5534E")
        check = policy.chckclnt
        if self.connauth_floor == "required" and check != "NONE":
            check = "REQUIRED"
        if login_required:
            check = "REQUIRED"
        if check == "NONE":
            login = None                # MQ: credentials given are ignored
        authenticated = None
        if certified is not None:       # mutual TLS: the certificate is the credential
            authenticated = sec.certificate_principal(certified, login)
        elif login:
            if not sec.users.verify(login, passcode or ""):
                raise NotAuthorized(f"user id {login} authentication failed "
                                    "(MQRC 2035 NOT_AUTHORIZED)", msgid="HMQ5534E", user=login)
            authenticated = Principal(login, tuple(sec.users.groups_of(login)))
        # the user id the client brings: its login, else (anonymous) its OS user
        anonymous, unidentified = None, None
        if authenticated is None:
            try:
                anonymous = sec.anonymous_principal(peer, local) if is_loopback(_host(peer)) \
                    else None
            except NotAuthorized as exc:
                unidentified = exc
        brought = authenticated or anonymous
        rule = mapping_rule(rules, channel, _host(peer), brought.user if brought else None,
                            sslpeer)
        if rule is not None and rule.chckclnt in ("REQUIRED", "REQDADM") and check != "NONE":
            check = rule.chckclnt if check != "REQUIRED" else check
        if check == "REQUIRED" and authenticated is None:
            raise NotAuthorized("a user id and password are required on channel "
                                f"{channel} (CHCKCLNT(REQUIRED), or connauth required in "
                                "qm.toml) (MQRC 2035 NOT_AUTHORIZED)", msgid="HMQ5534E")
        if rule is not None and rule.usersrc == "NOACCESS":
            self._refuse("HMQ9777E", rule, f"connection from {where} refused by CHLAUTH "
                         f"record {rule.type} of profile '{rule.chlprof}' with "
                         "USERSRC(NOACCESS) (MQRC 2035 NOT_AUTHORIZED)")
        if rule is not None and rule.usersrc == "MAP":
            principal = self.principal_named(rule.mcauser)
        elif chl.get("MCAUSER"):
            principal = self.principal_named(chl["MCAUSER"])
        elif authenticated is not None:
            principal = authenticated
        elif chlauth_on and (rule is None or rule.usersrc != "CHANNEL"):
            raise NotAuthorized(f"anonymous connection from {where} refused: no CHLAUTH record "
                                "gives it a user id (the default rule for loopback addresses "
                                "was removed?) (MQRC 2035 NOT_AUTHORIZED)", msgid="HMQ5534E",
                                hint="log in (STOMP login and passcode), or SET CHLAUTH "
                                     "TYPE(ADDRESSMAP) ... USERSRC(CHANNEL) for the address")
        elif not is_loopback(_host(peer)):
            raise NotAuthorized("a user id and password are required from a non-loopback "
                                f"address ({where}) (MQRC 2035 NOT_AUTHORIZED)",
                                msgid="HMQ5534E")
        elif anonymous is None:
            raise unidentified
        else:
            principal = anonymous
        privileged = principal.owner or ADMIN_GROUP in principal.groups
        if check == "REQDADM" and privileged and authenticated is None:
            raise NotAuthorized(f"connection from {where} refused: user {principal.user} is "
                                "privileged and CHCKCLNT(REQDADM) requires it to log in "
                                "(MQRC 2035 NOT_AUTHORIZED)", msgid="HMQ5534E")
        block = blocking_user_rule(rules, channel)
        for user, priv in ((principal.user, privileged),
                           (brought.user if brought else "", False)):
            if user_blocked(block, user, priv):
                self._refuse("HMQ9776E", block, f"connection from {where} refused: user id "
                             f"{user} is blocked by the CHLAUTH TYPE(BLOCKUSER) record of "
                             f"profile '{block.chlprof}' (MQRC 2035 NOT_AUTHORIZED)")
        return principal

    def principal_named(self, name: str) -> Principal:
        """The principal an MCAUSER names: the owner's name is the owner; a
        harbormq user has its groups; the user mqm is in group mqm (MQ's
        administrator); any other name has exactly its own authority records."""
        sec = self.security
        if name == sec.owner:
            p = sec.owner_principal()
            return Principal(p.user, p.groups, owner=True)
        try:
            groups = tuple(sec.users.groups_of(name))
        except UnknownUser:
            groups = ()
        if name == ADMIN_GROUP and ADMIN_GROUP not in groups:
            groups += (ADMIN_GROUP,)
        return Principal(name, groups)
