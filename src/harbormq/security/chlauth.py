"""Channel authentication records (MQ's CHLAUTH): what a record is, which
record applies to a connection, and MQ's precedence among them.

Pure: no I/O, no state. The records themselves are definitions in the queue
manager's catalog (``CHLAUTH:<id>``, logged like a channel's); the caller
hands them in as their attribute dicts. ``svrconn.py`` applies the outcome
to a STOMP connection; ``admin/`` turns SET CHLAUTH into records.

Record types (``TYPE``):

* ``BLOCKADDR``: addresses refused before anything else (profile ``*`` only);
* ``ADDRESSMAP``, ``USERMAP``, ``SSLPEERMAP``: a connection that matches
  gets its user from ``USERSRC``: ``MAP`` (the record's MCAUSER),
  ``NOACCESS`` (refused) or ``CHANNEL`` (the user it brings: its login, or
  the channel's MCAUSER);
* ``BLOCKUSER``: user ids refused once the user is known.

Precedence (MQ's): among the mapping records, the one whose channel profile
matches the channel most specifically wins (an exact name over a generic
one, a longer generic prefix over a shorter one); between records of the same
profile, SSLPEERMAP before USERMAP before ADDRESSMAP; then the more specific
address (an exact address over a range over a wildcard). For BLOCKUSER only
the record of the most specific matching profile applies.
"""

from __future__ import annotations

import hashlib
import ipaddress
from dataclasses import dataclass

from ..errors import InvalidAttribute

MAPPING_TYPES = ("SSLPEERMAP", "USERMAP", "ADDRESSMAP")
TYPES = MAPPING_TYPES + ("BLOCKUSER", "BLOCKADDR")
USERSRCS = ("MAP", "NOACCESS", "CHANNEL")
ACTIONS = ("ADD", "REPLACE", "REMOVE", "REMOVEALL")
#: in a BLOCKUSER list: any privileged user (the owner, a member of mqm)
MQADMIN = "*MQADMIN"
#: what each type matches on (the fields that name a record, beside its profile)
MATCH_FIELDS = {"ADDRESSMAP": ("ADDRESS",), "USERMAP": ("CLNTUSER", "ADDRESS"),
                "SSLPEERMAP": ("SSLPEER", "ADDRESS"), "BLOCKUSER": (), "BLOCKADDR": ()}


@dataclass(frozen=True)
class Rule:
    """One CHLAUTH record, from its catalog attributes."""
    chlprof: str
    type: str
    address: str = ""
    clntuser: str = ""
    sslpeer: str = ""
    userlist: tuple[str, ...] = ()
    addrlist: tuple[str, ...] = ()
    usersrc: str = ""
    mcauser: str = ""
    chckclnt: str = "ASQMGR"
    warn: bool = False
    descr: str = ""

    @classmethod
    def from_attrs(cls, a: dict) -> "Rule":
        return cls(a.get("CHLPROF", ""), a.get("TYPE", ""), a.get("ADDRESS", ""),
                   a.get("CLNTUSER", ""), a.get("SSLPEER", ""), split_list(a.get("USERLIST")),
                   split_list(a.get("ADDRLIST")), a.get("USERSRC", ""), a.get("MCAUSER", ""),
                   a.get("CHCKCLNT", "ASQMGR") or "ASQMGR", a.get("WARN") == "YES",
                   a.get("DESCR", ""))


def split_list(value) -> tuple[str, ...]:
    if not value:
        return ()
    if isinstance(value, (list, tuple)):
        return tuple(str(v) for v in value if str(v))
    return tuple(v.strip() for v in str(value).split(",") if v.strip())


def rule_id(chlprof: str, rtype: str, address: str = "", clntuser: str = "",
            sslpeer: str = "") -> str:
    """The catalog name of the record these fields name: the same record is
    always the same name, so REPLACE and REMOVE find it. (Addresses and
    profiles hold characters an object name may not.)"""
    text = "\0".join((chlprof, rtype, address, clntuser, sslpeer))
    return "R" + hashlib.sha256(text.encode()).hexdigest()[:32].upper()


def record_attrs(chlprof: str, given: dict) -> dict:
    """The catalog attributes of a SET CHLAUTH record (ACTION ADD or REPLACE)
    from the keywords given; InvalidAttribute names what is missing or wrong."""
    rtype = str(given.get("TYPE") or "").upper()
    if rtype not in TYPES:
        raise InvalidAttribute(f"SET CHLAUTH needs TYPE({'|'.join(TYPES)})"
                               + (f", not TYPE({rtype})" if rtype else ""))
    if not chlprof:
        raise InvalidAttribute("SET CHLAUTH needs a channel profile: SET CHLAUTH('*') or "
                               "SET CHLAUTH(APP.SVRCONN)")
    if rtype == "BLOCKADDR" and chlprof != "*":
        raise InvalidAttribute(f"TYPE(BLOCKADDR) applies to every channel: give "
                               f"SET CHLAUTH('*'), not SET CHLAUTH('{chlprof}')")
    allowed = {"ADDRESSMAP": {"ADDRESS", "USERSRC", "MCAUSER", "CHCKCLNT"},
               "USERMAP": {"CLNTUSER", "ADDRESS", "USERSRC", "MCAUSER", "CHCKCLNT"},
               "SSLPEERMAP": {"SSLPEER", "ADDRESS", "USERSRC", "MCAUSER", "CHCKCLNT"},
               "BLOCKUSER": {"USERLIST"}, "BLOCKADDR": {"ADDRLIST"}}[rtype]
    allowed |= {"TYPE", "ACTION", "DESCR", "WARN"}
    for key in given:
        if key not in allowed:
            raise InvalidAttribute(f"{key} is not valid with TYPE({rtype}); it takes "
                                   f"{', '.join(sorted(allowed - {'TYPE', 'ACTION'}))}")
    attrs = {"CHLPROF": chlprof, "TYPE": rtype, "DESCR": str(given.get("DESCR", ""))}
    warn = str(given.get("WARN", "NO")).upper()
    if warn not in ("YES", "NO"):
        raise InvalidAttribute(f"WARN({warn}) is not valid: choose YES or NO")
    attrs["WARN"] = warn
    if rtype in MAPPING_TYPES:
        first = MATCH_FIELDS[rtype][0]
        if rtype != "ADDRESSMAP" and not given.get(first):
            raise InvalidAttribute(f"TYPE({rtype}) needs {first}(...)")
        if rtype == "ADDRESSMAP" and not given.get("ADDRESS"):
            raise InvalidAttribute("TYPE(ADDRESSMAP) needs ADDRESS(...), e.g. ADDRESS('*') "
                                   "or ADDRESS('192.168.1.*')")
        for key in MATCH_FIELDS[rtype]:
            attrs[key] = str(given.get(key) or "")
        if attrs.get("ADDRESS"):
            check_address_pattern(attrs["ADDRESS"])
        usersrc = str(given.get("USERSRC") or "MAP").upper()
        if usersrc not in USERSRCS:
            raise InvalidAttribute(f"USERSRC({usersrc}) is not valid: choose "
                                   f"{', '.join(USERSRCS)}")
        attrs["USERSRC"] = usersrc
        attrs["MCAUSER"] = str(given.get("MCAUSER") or "")
        if usersrc == "MAP" and not attrs["MCAUSER"]:
            raise InvalidAttribute(f"USERSRC(MAP) needs MCAUSER(...), the user the "
                                   f"connections matching this {rtype} record act as")
        chck = str(given.get("CHCKCLNT") or "ASQMGR").upper()
        if chck not in ("ASQMGR", "REQUIRED", "REQDADM"):
            raise InvalidAttribute(f"CHCKCLNT({chck}) is not valid on a CHLAUTH record: "
                                   "choose ASQMGR, REQUIRED or REQDADM")
        attrs["CHCKCLNT"] = chck
    elif rtype == "BLOCKUSER":
        users = split_list(given.get("USERLIST"))
        if not users:
            raise InvalidAttribute("TYPE(BLOCKUSER) needs USERLIST(user, ...)")
        attrs["USERLIST"] = ",".join(users)
    else:
        addrs = split_list(given.get("ADDRLIST"))
        if not addrs:
            raise InvalidAttribute("TYPE(BLOCKADDR) needs ADDRLIST(address, ...)")
        for a in addrs:
            check_address_pattern(a)
        attrs["ADDRLIST"] = ",".join(addrs)
    return attrs


def record_name(chlprof: str, attrs: dict) -> str:
    """The catalog name of the record a SET CHLAUTH names (its profile, type and
    match fields)."""
    rtype = str(attrs.get("TYPE", "")).upper()
    fields = {k: str(attrs.get(k) or "") for k in MATCH_FIELDS.get(rtype, ())}
    return rule_id(chlprof, rtype, fields.get("ADDRESS", ""), fields.get("CLNTUSER", ""),
                   fields.get("SSLPEER", ""))


# -- matching --------------------------------------------------------------------------

def profile_specificity(profile: str, channel: str) -> int | None:
    """How specifically a channel profile (a name, or a generic name with ``*``)
    matches ``channel``: None for no match; an exact name ranks above every
    generic one, a generic one by its characters other than ``*``."""
    if "*" not in profile:
        return 10_000 if profile == channel else None
    if not _generic(profile, channel):
        return None
    return len(profile.replace("*", ""))


def _generic(pattern: str, text: str) -> bool:
    parts = pattern.split("*")
    if not text.startswith(parts[0]) or not text.endswith(parts[-1]) or \
            len(parts[0]) + len(parts[-1]) > len(text):
        return False
    pos, end = len(parts[0]), len(text) - len(parts[-1])
    for part in parts[1:-1]:
        found = text.find(part, pos, end)
        if found < 0:
            return False
        pos = found + len(part)
    return True


def check_address_pattern(pattern: str) -> None:
    """MQ's address patterns: ``*``, an IPv4 address whose parts may be ``*`` or a
    range ``a-b`` (``192.168.1.*``, ``10.0.0.1-20``; a trailing ``*`` stands for
    the remaining parts), an IPv6 address (``::1``), or an IPv6 prefix ending
    in ``*``. InvalidAttribute names what is wrong."""
    if pattern == "*":
        return
    if ":" in pattern:
        try:
            if not pattern.endswith("*"):
                ipaddress.IPv6Address(pattern)
            return
        except ValueError:
            pass
        raise InvalidAttribute(f"ADDRESS({pattern}) is not an IPv6 address or prefix ending "
                               "in *")
    parts = pattern.split(".")
    if len(parts) > 4 or (len(parts) < 4 and parts[-1] != "*"):
        raise InvalidAttribute(f"ADDRESS({pattern}) is not an IPv4 pattern: four parts "
                               "(192.168.1.10), * or ranges within them (192.168.1.*, "
                               "10.0.0.1-20), or a trailing * (10.*)")
    for part in parts:
        if part == "*":
            continue
        lo, dash, hi = part.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()) or int(lo) > 255 or \
                (dash and not int(lo) <= int(hi) <= 255):
            raise InvalidAttribute(f"ADDRESS({pattern}): {part!r} is not a number 0..255, "
                                   "a range a-b or *")


def address_specificity(pattern: str, host: str) -> int | None:
    """How specifically an address pattern matches ``host`` (None: no match):
    each exact part counts 3, a range 2, ``*`` nothing."""
    host = str(host).strip("[]").split("%")[0]
    try:
        ip = ipaddress.ip_address(host)
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
    except ValueError:
        return None
    if pattern == "*":
        return 0
    if ":" in pattern:
        if ip.version != 6:
            return None
        if pattern.endswith("*"):
            prefix = pattern[:-1].lower()
            return 3 * len(prefix) if ip.exploded.startswith(prefix) or \
                str(ip).startswith(prefix) else None
        return 1000 if ip == ipaddress.IPv6Address(pattern) else None
    if ip.version != 4:
        return None
    octets = str(ip).split(".")
    score = 0
    for i, part in enumerate(pattern.split(".")):
        if part == "*":
            if i == len(pattern.split(".")) - 1:
                return score          # a trailing * matches the rest
            continue
        lo, dash, hi = part.partition("-")
        value = int(octets[i])
        if dash:
            if not int(lo) <= value <= int(hi):
                return None
            score += 2
        elif value != int(lo):
            return None
        else:
            score += 3
    return score


def dn_matches(pattern: str, dn: str | None) -> bool:
    """SSLPEER('CN=app,O=Example'): every attribute the pattern names has that
    value in the peer's distinguished name (a value may end in ``*``)."""
    if not dn:
        return False
    have = _dn_parts(dn)
    for key, value in _dn_parts(pattern).items():
        got = have.get(key)
        if got is None:
            return False
        if not (_generic(value, got) if "*" in value else got == value):
            return False
    return True


def _dn_parts(text: str) -> dict[str, str]:
    out = {}
    for part in str(text).split(","):
        key, eq, value = part.partition("=")
        if eq:
            out[key.strip().upper()] = value.strip()
    return out


# -- which record applies ---------------------------------------------------------------

def blocking_address_rule(rules: list[Rule], host: str) -> Rule | None:
    """The BLOCKADDR record whose list holds ``host``, if any."""
    for r in rules:
        if r.type == "BLOCKADDR" and any(address_specificity(p, host) is not None
                                         for p in r.addrlist):
            return r
    return None


def mapping_rule(rules: list[Rule], channel: str, host: str, clntuser: str | None,
                 sslpeer: str | None) -> Rule | None:
    """The mapping record (ADDRESSMAP, USERMAP, SSLPEERMAP) that applies to a
    connection on ``channel`` from ``host`` bringing user ``clntuser`` and
    certificate ``sslpeer``, by MQ's precedence; None when none matches."""
    best, best_key = None, None
    for r in rules:
        if r.type not in MAPPING_TYPES:
            continue
        prof = profile_specificity(r.chlprof, channel)
        if prof is None:
            continue
        if r.type == "USERMAP" and (not clntuser or r.clntuser != clntuser):
            continue
        if r.type == "SSLPEERMAP" and not dn_matches(r.sslpeer, sslpeer):
            continue
        addr = address_specificity(r.address or "*", host)
        if addr is None:
            continue
        key = (prof, -MAPPING_TYPES.index(r.type), bool(r.address), addr)
        if best_key is None or key > best_key:
            best, best_key = r, key
    return best


def blocking_user_rule(rules: list[Rule], channel: str) -> Rule | None:
    """The BLOCKUSER record of the most specific profile matching ``channel``."""
    best, best_prof = None, None
    for r in rules:
        if r.type != "BLOCKUSER":
            continue
        prof = profile_specificity(r.chlprof, channel)
        if prof is not None and (best_prof is None or prof > best_prof):
            best, best_prof = r, prof
    return best


def user_blocked(rule: Rule | None, user: str, privileged: bool) -> bool:
    if rule is None or not user:
        return False
    return any(u == user or u == "*" or (u.upper() == MQADMIN and privileged)
               for u in rule.userlist)
