"""Users, connection authentication and authority records (MQ's OAM, simplified).

Files of one queue manager (both mode 0600, replaced atomically with fsync)::

    qmgrs/<QM>/users.json      {"version": 1, "users": {NAME: {"hash": ..., "groups": [...]}}}
    qmgrs/<QM>/authrecs.json   {"version": 1, "records": [{"profile", "objtype",
                                 "entity_type", "entity", "authorities"}]}

Passwords are stored as scrypt hashes: ``scrypt$<n>$<r>$<p>$<salt hex>$<hash hex>``,
the parameters travelling with the hash so they can be raised later without
invalidating stored users.

Principal model (see docs/administration.md):

* the OS user that owns the queue manager (whoever can reach the 0600 admin
  socket) has every authority;
* an anonymous STOMP connection, allowed only on a loopback listener with
  ``connauth = "optional"``, acts as the OS user at the other end, as an MQ
  local bindings application does. On Linux the client's socket is found in
  /proc/net/tcp or /proc/net/tcp6 (local address = our peer's, remote address
  = ours), and its uid column is the uid of the process that created it. The
  owner's uid (the uid the queue manager runs as) is the owner; any other uid
  is the principal of its user name, holding exactly the authority records
  that name it or, when a harbormq user of that name exists, its groups;
  normally none, so it is refused with MQRC 2035. When the user at the other
  end cannot be identified (not Linux, /proc unreadable, the socket gone) the
  connection is refused (HMQ5540E, MQRC 2035): fail closed, log in instead.
  The choice, against requiring a login by default: local tools, scripts and
  the tour keep working without passwords for the owner, and no other user
  can borrow the owner's authority;
* an authenticated user is checked against the authority records: no record,
  no authority, except for a member of the group ``mqm``, an administrator.

Authority records: one per (profile, object type, principal or group). A
profile is an object name or a generic profile:

* ``?``  any one character except ``.``
* ``*``  any characters (none included) within one qualifier (not ``.``)
* ``**`` any characters, ``.`` included (MQ: any number of qualifiers)

For every entity a user stands for (the user as principal, then each of its
groups), the record of the *most specific* matching profile that names that
entity decides; the user holds the union over its entities. Most specific:
profiles are compared character by character from the left, a literal
character beats ``?``, which beats ``*``, which beats ``**``; the first
difference decides (MQ compares profiles the same way). An exact profile
beats every generic one. So ``SET AUTHREC PROFILE(PAY.SECRET) PRINCIPAL(app)
AUTHRMV(ALL)`` next to ``PROFILE(PAY.*) PRINCIPAL(app) AUTHADD(ALL)``
withholds PAY.SECRET from app.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import os
import pwd
import re
import secrets
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from .errors import ConfigError, HarbormqError
from .fsutil import atomic_write, make_dirs

# -- errors ---------------------------------------------------------------------------


class SecurityError(HarbormqError):
    msgid = "HMQ8880E"


class UnknownUser(SecurityError):
    msgid = "HMQ8881E"


class UserExists(SecurityError):
    msgid = "HMQ8882E"


class NotAuthorized(SecurityError):
    """MQRC 2035 NOT_AUTHORIZED: authentication failed or an authority is missing."""
    msgid = "HMQ2035E"
    reason = 2035


class InvalidAuthority(SecurityError):
    msgid = "HMQ8883E"


# -- users ----------------------------------------------------------------------------

USER_RE = re.compile(r"^[A-Za-z0-9._@-]{1,64}$")
ADMIN_GROUP = "mqm"
#: scrypt cost: 16 MiB of memory and ~50 ms per hash
SCRYPT_N, SCRYPT_R, SCRYPT_P, SCRYPT_DKLEN = 1 << 14, 8, 1, 32


def hash_password(password: str, *, n: int = SCRYPT_N, r: int = SCRYPT_R,
                  p: int = SCRYPT_P) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, dklen=SCRYPT_DKLEN,
                            maxmem=128 * n * r * p + (1 << 20))
    return f"scrypt${n}${r}${p}${salt.hex()}${digest.hex()}"


def check_password(password: str, stored: str) -> bool:
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        n, r, p = int(n), int(r), int(p)
        salt_b, digest_b = bytes.fromhex(salt), bytes.fromhex(digest)
    except ValueError:
        return False
    if scheme != "scrypt":
        return False
    got = hashlib.scrypt(password.encode(), salt=salt_b, n=n, r=r, p=p, dklen=len(digest_b),
                         maxmem=128 * n * r * p + (1 << 20))
    return hmac.compare_digest(got, digest_b)


def _read_json(path: Path, what: str) -> dict:
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError:
        return {}
    except (ValueError, OSError) as exc:
        raise SecurityError(f"{what} file {path} cannot be read: {exc}", path=str(path)) \
            from None


def _write_json(path: Path, data: dict) -> None:
    make_dirs(path.parent)
    atomic_write(path, json.dumps(data, indent=1, sort_keys=True).encode() + b"\n")
    os.chmod(path, 0o600)


class _CachedFile:
    """Re-read a small JSON file only when it changed on disk (another process,
    ``harbormq user add``, may edit it while the queue manager runs)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._stamp: tuple | None = None
        self._data: dict = {}

    def _stat(self) -> tuple | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def load(self, what: str) -> dict:
        stamp = self._stat()
        if stamp != self._stamp:
            self._data = _read_json(self.path, what)
            self._stamp = stamp
        return self._data

    def save(self, data: dict) -> None:
        _write_json(self.path, data)
        self._data = data
        self._stamp = self._stat()


class UserStore:
    """Users and their scrypt password hashes (``users.json``)."""

    def __init__(self, path: Path):
        self.file = _CachedFile(path)

    @property
    def path(self) -> Path:
        return self.file.path

    def _users(self) -> dict:
        return self.file.load("users").get("users", {})

    def _save(self, users: dict) -> None:
        self.file.save({"version": 1, "users": users})

    def names(self) -> list[str]:
        return sorted(self._users())

    def exists(self, name: str) -> bool:
        return name in self._users()

    def add(self, name: str, password: str, groups=()) -> None:
        if not isinstance(name, str) or not USER_RE.match(name):
            raise SecurityError(f"user name {name!r} is not valid: use 1 to 64 characters "
                                "from A-Z a-z 0-9 . _ @ -")
        if not password:
            raise SecurityError(f"the password of user {name} must not be empty")
        for g in groups:
            if not USER_RE.match(g):
                raise SecurityError(f"group name {g!r} is not valid")
        users = dict(self._users())
        if name in users:
            raise UserExists(f"user {name} already exists in {self.path}",
                             hint=f"delete it first with 'harbormq user delete QM {name}'")
        users[name] = {"hash": hash_password(password), "groups": sorted(set(groups))}
        self._save(users)

    def delete(self, name: str) -> None:
        users = dict(self._users())
        if name not in users:
            raise UnknownUser(f"user {name} is not defined in {self.path}")
        del users[name]
        self._save(users)

    def verify(self, name: str, password: str) -> bool:
        """True when ``name`` exists and ``password`` is its password (the hash is
        computed even for an unknown user, so timing does not tell them apart)."""
        entry = self._users().get(name)
        if entry is None:
            check_password(password, _DUMMY_HASH)
            return False
        return check_password(password, entry["hash"])

    def groups_of(self, name: str) -> list[str]:
        entry = self._users().get(name)
        if entry is None:
            raise UnknownUser(f"user {name} is not defined in {self.path}")
        return list(entry.get("groups", []))


_DUMMY_HASH = "scrypt$16384$8$1$" + "00" * 16 + "$" + "00" * 32

# -- authorities ----------------------------------------------------------------------

OBJTYPES = ("QUEUE", "QMGR")
#: authorities that apply to each object type
VALID = {
    "QUEUE": ("BROWSE", "GET", "INQ", "PUT", "SET", "CHG", "CLR", "DLT", "DSP", "CRT"),
    "QMGR": ("CONNECT", "INQ", "SET", "CHG", "DSP", "CTRL", "CRT"),
}
#: MQ's grouped authorities, expanded within what applies to the object type
GROUPS = {
    "ALLADM": {"CHG", "CLR", "DLT", "DSP", "CTRL"},
    "ALLMQI": {"CONNECT", "BROWSE", "GET", "INQ", "PUT", "SET"},
    "ALL": {"CHG", "CLR", "DLT", "DSP", "CTRL", "CONNECT", "BROWSE", "GET", "INQ", "PUT",
            "SET", "CRT"},
    "NONE": set(),
}
#: display order (MQ's AUTHLIST order, roughly)
ORDER = ("BROWSE", "CHG", "CLR", "CONNECT", "CRT", "CTRL", "DLT", "DSP", "GET", "INQ", "PUT",
         "SET")
#: alternative spellings accepted on input
ALIASES = {"BROWSE": "BROWSE", "INQUIRE": "INQ", "INQ": "INQ", "ADMIN": "ALLADM",
           "DISPLAY": "DSP", "CHANGE": "CHG", "CLEAR": "CLR", "DELETE": "DLT",
           "CREATE": "CRT", "CONTROL": "CTRL"}


def expand(objtype: str, names) -> set[str]:
    """Authority names (groups and aliases allowed) as the set of single
    authorities that apply to ``objtype``; an authority that does not apply
    to it is an error, a group takes what applies."""
    out: set[str] = set()
    for raw in names:
        name = ALIASES.get(str(raw).upper(), str(raw).upper())
        if name in GROUPS:
            out |= GROUPS[name] & set(VALID[objtype])
        elif name in VALID[objtype]:
            out.add(name)
        elif name in ORDER:
            raise InvalidAuthority(f"authority {name} does not apply to OBJTYPE({objtype}); "
                                   f"valid: {', '.join(VALID[objtype])}")
        else:
            raise InvalidAuthority(f"unknown authority {raw!r}; valid: "
                                   f"{', '.join(VALID[objtype])}, ALLADM, ALLMQI, ALL, NONE")
    return out


def _profile_tokens(profile: str) -> list[str]:
    tokens, i = [], 0
    while i < len(profile):
        if profile.startswith("**", i):
            tokens.append("**")
            i += 2
        else:
            tokens.append(profile[i])
            i += 1
    return tokens


_RANK = {"?": 1, "*": 2, "**": 3}


def is_generic(profile: str) -> bool:
    return any(c in profile for c in "*?")


def profile_matches(profile: str, name: str) -> bool:
    """``**`` any characters, ``*`` any run without a dot, ``?`` one character
    other than a dot. Matched by one pass per token over the positions of the
    name (at most 48 × 48 steps): a regex of ``.*`` per ``**`` backtracks
    exponentially, and a record with many of them stalled every authority
    check (found by fuzzing DISPLAY AUTHREC)."""
    if not is_generic(profile):
        return profile == name
    n = len(name)
    reach = [True] + [False] * n        # reach[j]: the tokens so far match name[:j]
    for tok in _profile_tokens(profile):
        nxt = [False] * (n + 1)
        if tok in ("**", "*"):
            run = False
            for j in range(n + 1):
                if tok == "*" and j > 0 and name[j - 1] == ".":
                    run = False
                run = run or reach[j]
                nxt[j] = run
        else:
            for j in range(n):
                if reach[j] and (name[j] == tok or tok == "?" and name[j] != "."):
                    nxt[j + 1] = True
        reach = nxt
    return reach[n]


def specificity(profile: str) -> tuple:
    """Sort key: smaller is more specific (an exact profile is smallest)."""
    if not is_generic(profile):
        return (0,)
    return (1, tuple(_RANK.get(t, 0) for t in _profile_tokens(profile)))


def check_profile(profile: str) -> str:
    if not profile or not re.match(r"^[A-Za-z0-9._/%*?]{1,48}$", profile):
        raise SecurityError(f"profile {profile!r} is not valid: 1 to 48 characters, "
                            "queue name characters and the wildcards * ** ?")
    return profile


@dataclass(frozen=True)
class AuthRecord:
    profile: str
    objtype: str
    entity_type: str           # "principal" | "group"
    entity: str
    authorities: frozenset

    def as_dict(self) -> dict:
        return {"profile": self.profile, "objtype": self.objtype,
                "entity_type": self.entity_type, "entity": self.entity,
                "authorities": sorted(self.authorities, key=ORDER.index)}

    @property
    def authlist(self) -> list[str]:
        return sorted(self.authorities, key=ORDER.index) or ["NONE"]


class AuthorityStore:
    """Authority records (``authrecs.json``) and the check made on every operation."""

    def __init__(self, path: Path, *, owner: str | None = None):
        self.file = _CachedFile(path)
        #: the OS user owning the queue manager: every authority
        self.owner = owner
        self._cache: dict = {}
        self._records: list[AuthRecord] = []
        self._loaded_from: dict | None = None

    @property
    def path(self) -> Path:
        return self.file.path

    def _all(self) -> list[AuthRecord]:
        data = self.file.load("authority records")
        if data is not self._loaded_from:
            self._records = [AuthRecord(r["profile"], r["objtype"], r["entity_type"],
                                        r["entity"], frozenset(r["authorities"]))
                             for r in data.get("records", [])]
            self._loaded_from = data
            self._cache = {}
        return self._records

    def _save(self, records: list[AuthRecord]) -> None:
        records = sorted(records, key=lambda r: (r.objtype, r.profile, r.entity_type, r.entity))
        self.file.save({"version": 1, "records": [r.as_dict() for r in records]})
        self._records = records
        self._loaded_from = self.file._data
        self._cache = {}

    @staticmethod
    def _entity(principal: str | None, group: str | None) -> tuple[str, str]:
        if bool(principal) == bool(group):
            raise SecurityError("name exactly one of PRINCIPAL and GROUP")
        return ("principal", principal) if principal else ("group", group)

    @staticmethod
    def _objtype(objtype: str) -> str:
        t = str(objtype).upper()
        if t not in OBJTYPES:
            raise SecurityError(f"OBJTYPE({objtype}) is not supported: use QUEUE or QMGR")
        return t

    def set(self, profile: str, objtype: str, principal: str | None = None,
            group: str | None = None, add=(), remove=()) -> AuthRecord:
        """SET AUTHREC: add then remove authorities on one record (created if
        missing; a record left with no authority stays, as AUTHLIST(NONE))."""
        objtype = self._objtype(objtype)
        check_profile(profile)
        etype, entity = self._entity(principal, group)
        plus, minus = expand(objtype, add), expand(objtype, remove)
        records = list(self._all())
        current = frozenset()
        for r in records:
            if (r.profile, r.objtype, r.entity_type, r.entity) == (profile, objtype, etype,
                                                                  entity):
                current = r.authorities
                records.remove(r)
                break
        rec = AuthRecord(profile, objtype, etype, entity, frozenset((current | plus) - minus))
        records.append(rec)
        self._save(records)
        return rec

    def delete(self, profile: str, objtype: str, principal: str | None = None,
               group: str | None = None) -> AuthRecord:
        objtype = self._objtype(objtype)
        etype, entity = self._entity(principal, group)
        records = list(self._all())
        for r in records:
            if (r.profile, r.objtype, r.entity_type, r.entity) == (profile, objtype, etype,
                                                                  entity):
                records.remove(r)
                self._save(records)
                return r
        raise SecurityError(f"no authority record for profile {profile} OBJTYPE({objtype}) "
                            f"{etype.upper()}({entity})", msgid="HMQ8884E")

    def records(self, profile: str = "*", objtype: str | None = None,
                principal: str | None = None, group: str | None = None) -> list[AuthRecord]:
        """Records whose profile name matches ``profile`` (itself generic: ``*``
        lists every record; a profile is matched as text, so PROFILE(Q.*) finds
        the record of profile ``Q.*``)."""
        objtype = self._objtype(objtype) if objtype else None
        out = []
        for r in self._all():
            if objtype and r.objtype != objtype:
                continue
            if principal and (r.entity_type, r.entity) != ("principal", principal):
                continue
            if group and (r.entity_type, r.entity) != ("group", group):
                continue
            if profile not in ("*", "**") and r.profile != profile and \
                    not (is_generic(profile) and profile_matches(profile, r.profile)):
                continue
            out.append(r)
        return out

    def authorities(self, user: str | None, groups, objtype: str, name: str) -> set[str]:
        """What ``user`` (with ``groups``) may do on object ``name``."""
        objtype = self._objtype(objtype)
        groups = tuple(sorted(set(groups or ())))
        if user is not None and user == self.owner or ADMIN_GROUP in groups:
            return set(VALID[objtype])
        key = (user, groups, objtype, name)
        records = self._all()
        hit = self._cache.get(key)
        if hit is not None:
            return set(hit)
        entities = ([("principal", user)] if user else []) + [("group", g) for g in groups]
        held: set[str] = set()
        for etype, entity in entities:
            best = None
            for r in records:
                if r.objtype != objtype or (r.entity_type, r.entity) != (etype, entity):
                    continue
                if not profile_matches(r.profile, name):
                    continue
                if best is None or specificity(r.profile) < specificity(best.profile):
                    best = r
            if best is not None:
                held |= best.authorities
        self._cache[key] = frozenset(held)
        return held

    def check(self, user: str | None, groups, objtype: str, name: str,
              authority: str) -> bool:
        wanted = expand(self._objtype(objtype), [authority])
        return wanted <= self.authorities(user, groups, objtype, name)

    def require(self, user: str | None, groups, objtype: str, name: str,
                authority: str) -> None:
        if not self.check(user, groups, objtype, name, authority):
            raise not_authorized(user, objtype, name, authority)


def not_authorized(user, objtype: str, name: str, authority: str) -> NotAuthorized:
    return NotAuthorized(f"user {user or '(anonymous)'} is not authorized to "
                         f"{str(authority).upper()} on {str(objtype).upper()} {name} "
                         "(MQRC 2035 NOT_AUTHORIZED)", user=user, object=name,
                         authority=str(authority).upper())


# -- connection authentication ------------------------------------------------------

def is_loopback(host: str) -> bool:
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def check_listener(host: str, connauth: str) -> None:
    """A queue manager refuses a non-loopback listener unless authentication is
    required (anonymous connections are for loopback only)."""
    if connauth not in ("optional", "required"):
        raise ConfigError(f"connauth must be 'optional' or 'required', not {connauth!r}")
    if connauth != "required" and not is_loopback(host):
        raise ConfigError(f"listener on {host} is not a loopback address: set connauth = "
                          "\"required\" to serve it (anonymous connections are allowed on "
                          "loopback listeners only)")


# -- the OS user at the other end of a loopback TCP connection ------------------------
#
# TCP has no SO_PEERCRED, but on Linux the kernel lists every socket of the
# network namespace in /proc/net/tcp and /proc/net/tcp6, with the uid that
# created it. The client's socket is the one whose local address is our peer's
# address and whose remote address is ours. One line of those files:
#
#   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
#    3: 0100007F:C488 0100007F:EA60 01 00000000:00000000 00:00000000 00000000  1001   0 48213
#
# An address is hex, each 32-bit word in the kernel's (host) byte order: IPv4
# 127.0.0.1 is 0100007F on a little-endian machine; IPv6 is four such words.
# The port is plain big-endian hex. st is the TCP state, uid the socket's owner
# (the fsuid of the process that created it; only root can change it), inode 0
# means no process holds the socket any more (TIME_WAIT, an orphan): such an
# entry names no live process and reports uid 0, so it never identifies anyone.

#: TCP states (include/net/tcp_states.h) whose entries never identify a peer
_TCP_TIME_WAIT, _TCP_LISTEN = 0x06, 0x0A
PROC_NET = Path("/proc/net")


class PeerUnknown(Exception):
    """The OS user at the other end of a connection cannot be identified (the
    text says why). Authentication turns it into a refusal."""


@dataclass(frozen=True)
class ProcTcpEntry:
    """One socket of /proc/net/tcp or /proc/net/tcp6 (IPv4-mapped IPv6
    addresses given as IPv4)."""
    local: tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]
    remote: tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]
    state: int
    uid: int
    inode: int


def _plain_address(addr) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


def endpoint(host: str, port: int) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    """``(address, port)`` as the /proc parser gives it: a socket address from
    asyncio (an IPv6 scope such as ``%lo`` dropped, IPv4-mapped made IPv4)."""
    return _plain_address(ipaddress.ip_address(str(host).strip("[]").split("%")[0])), int(port)


def _proc_endpoint(text: str):
    host, port = text.split(":")
    if len(host) == 8:
        packed = struct.pack("=I", int(host, 16))
    elif len(host) == 32:
        packed = b"".join(struct.pack("=I", int(host[i:i + 8], 16)) for i in range(0, 32, 8))
    else:
        raise ValueError(f"address {host!r} is neither IPv4 nor IPv6")
    return _plain_address(ipaddress.ip_address(packed)), int(port, 16)


def parse_proc_net_tcp(line: str) -> ProcTcpEntry | None:
    """One line of /proc/net/tcp or /proc/net/tcp6; None for the header line or
    a line that does not parse."""
    fields = line.split()
    if len(fields) < 10 or not fields[0].endswith(":"):
        return None
    try:
        return ProcTcpEntry(_proc_endpoint(fields[1]), _proc_endpoint(fields[2]),
                            int(fields[3], 16), int(fields[7]), int(fields[9]))
    except ValueError:
        return None


def socket_owner_uid(lines: Iterable[str], local, remote) -> int | None:
    """The uid owning the live socket whose local address is ``local`` and whose
    remote address is ``remote`` (``endpoint`` pairs), among ``lines`` of
    /proc/net/tcp[6]; None when there is none. Sockets of several uids
    matching (impossible for one live connection) raise PeerUnknown."""
    needle = f":{local[1]:04X} "           # the local port: skip other lines unparsed
    uids = set()
    for line in lines:
        if needle not in line:
            continue
        e = parse_proc_net_tcp(line)
        if e is None or e.local != local or e.remote != remote:
            continue
        if e.inode == 0 or e.state in (_TCP_TIME_WAIT, _TCP_LISTEN):
            continue
        uids.add(e.uid)
    if len(uids) > 1:
        raise PeerUnknown(f"sockets of several users ({', '.join(map(str, sorted(uids)))}) "
                          f"have the address {_show(local)} towards {_show(remote)}")
    return uids.pop() if uids else None


def _show(ep) -> str:
    addr, port = ep
    return f"[{addr}]:{port}" if addr.version == 6 else f"{addr}:{port}"


def loopback_peer_uid(peer: tuple, local: tuple, *, proc_net: Path | None = None) -> int:
    """The uid of the process at the other end of a loopback TCP connection, from
    the addresses as our socket sees them (``peer``: getpeername, ``local``:
    getsockname, ``(host, port, ...)``). PeerUnknown when it cannot be told: not
    Linux, /proc unreadable, or the client's socket not found (it closed
    meanwhile, or lives in another network namespace)."""
    if proc_net is None:
        if not sys.platform.startswith("linux"):
            raise PeerUnknown(f"the peer of a TCP connection can be identified on Linux only, "
                              f"not on {sys.platform}")
        proc_net = PROC_NET
    try:
        them, us = endpoint(*peer[:2]), endpoint(*local[:2])
    except (TypeError, ValueError) as exc:
        raise PeerUnknown(f"not a TCP connection ({peer!r} to {local!r}): {exc}") from None
    # the client's socket is usually of the family we see it in; an IPv6 socket
    # connected to an IPv4 address (v4-mapped) is listed in tcp6
    files = ("tcp", "tcp6") if them[0].version == 4 else ("tcp6", "tcp")
    unreadable = []
    for name in files:
        try:
            with open(Path(proc_net) / name, encoding="ascii", errors="replace") as f:
                uid = socket_owner_uid(f, them, us)
        except FileNotFoundError:             # no IPv6 in this kernel
            continue
        except OSError as exc:
            unreadable.append(f"{Path(proc_net) / name}: {exc.strerror or exc}")
            continue
        if uid is not None:
            return uid
    if unreadable:
        raise PeerUnknown(f"cannot read {'; '.join(unreadable)}")
    raise PeerUnknown(f"no socket of this machine is connected from {_show(them)} to "
                      f"{_show(us)} (the client may have closed it)")


def os_owner() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


@dataclass
class Principal:
    """Who a connection acts as."""
    user: str
    groups: tuple[str, ...] = ()
    #: connected without a login (its OS user identified it)
    anonymous: bool = False
    #: the queue manager's owner: every authority, never checked
    owner: bool = False


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
                     peer: tuple, local: tuple | None = None) -> Principal:
        """A STOMP CONNECT's login/passcode; ``peer`` and ``local`` are the
        connection's addresses as our socket sees them (``(host, port, ...)``).

        With a login: that harbormq user, or MQRC 2035. Without one: refused
        (MQRC 2035) unless connauth is optional and the peer is on loopback;
        then the OS user at the other end (``anonymous_principal``)."""
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
