"""Authority records (MQ's OAM, simplified): profiles, generic names, the
authority store and the check made on every operation.

One file per queue manager (mode 0600, replaced atomically with fsync)::

    qmgrs/<QM>/authrecs.json   {"version": 1, "records": [{"profile", "objtype",
                                 "entity_type", "entity", "authorities"}]}

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

The queue manager's owner and a member of the group ``mqm`` hold every
authority without a record. Who a connection is (its principal) is decided
in ``harbormq.security``, not here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .errors import InvalidAuthority, NotAuthorized, SecurityError
from .files import CachedJsonFile

#: an administrator's group: every authority, no record needed
ADMIN_GROUP = "mqm"
OBJTYPES = ("QUEUE", "QMGR", "TOPIC")
#: authorities that apply to each object type
VALID = {
    "QUEUE": ("BROWSE", "GET", "INQ", "PUT", "SET", "CHG", "CLR", "DLT", "DSP", "CRT"),
    "QMGR": ("CONNECT", "INQ", "SET", "CHG", "DSP", "CTRL", "CRT"),
    # topic objects (pubsub/): publish, subscribe, resume a durable subscription
    "TOPIC": ("PUB", "SUB", "RESUME", "CHG", "CLR", "CRT", "CTRL", "DLT", "DSP"),
}
#: MQ's grouped authorities, expanded within what applies to the object type
GROUPS = {
    "ALLADM": {"CHG", "CLR", "DLT", "DSP", "CTRL"},
    "ALLMQI": {"CONNECT", "BROWSE", "GET", "INQ", "PUT", "SET", "PUB", "SUB", "RESUME"},
    "ALL": {"CHG", "CLR", "DLT", "DSP", "CTRL", "CONNECT", "BROWSE", "GET", "INQ", "PUT",
            "SET", "CRT", "PUB", "SUB", "RESUME"},
    "NONE": set(),
}
#: display order (MQ's AUTHLIST order, roughly)
ORDER = ("BROWSE", "CHG", "CLR", "CONNECT", "CRT", "CTRL", "DLT", "DSP", "GET", "INQ", "PUB",
         "PUT", "RESUME", "SET", "SUB")
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
    if not profile or not re.match(r"^[A-Za-z0-9._/%*?-]{1,48}$", profile):
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
        self.file = CachedJsonFile(path)
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
        data = {"version": 1, "records": [r.as_dict() for r in records]}
        self.file.save(data)
        self._records = records
        self._loaded_from = data
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
            raise SecurityError(f"OBJTYPE({objtype}) is not supported: use QUEUE, QMGR or "
                                "TOPIC")
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

    def visible(self, user: str | None, groups, objtype: str, names,
                authority: str) -> list[str]:
        """The names of ``names`` on which ``user`` holds ``authority``, as
        ``check`` decides each: for an administrator in one step (a list of
        10,000 queues is one check, not 10,000)."""
        objtype = self._objtype(objtype)
        wanted = expand(objtype, [authority])
        if user is not None and user == self.owner or ADMIN_GROUP in (groups or ()):
            return list(names)
        return [n for n in names if wanted <= self.authorities(user, groups, objtype, n)]

    def require(self, user: str | None, groups, objtype: str, name: str,
                authority: str) -> None:
        if not self.check(user, groups, objtype, name, authority):
            raise not_authorized(user, objtype, name, authority)


def not_authorized(user, objtype: str, name: str, authority: str) -> NotAuthorized:
    return NotAuthorized(f"user {user or '(anonymous)'} is not authorized to "
                         f"{str(authority).upper()} on {str(objtype).upper()} {name} "
                         "(MQRC 2035 NOT_AUTHORIZED)", user=user, object=name,
                         authority=str(authority).upper())
