"""Client certificates to users: the subject patterns and the one mapping function.

A listener with mutual TLS (``client_auth`` in qm.toml) knows a client by the
subject of its certificate, once the TLS handshake has proved the client holds
the key and a trusted CA signed it. Which user that client then acts as is
decided here, by rules that pair a subject pattern with a user, as MQ's
channel authentication rule ``SET CHLAUTH TYPE(SSLPEERMAP) SSLPEER(...)
USERSRC(MAP) MCAUSER(...)`` does. Today the rules are qm.toml's
``[[security.certificate_users]]``; CHLAUTH's SSLPEERMAP rules can feed the
same function (``map_certificate_user``) through the ``PeerMapRule`` Protocol.

A pattern is written as SSLPEER is: ``CN=alice,OU=Payments,O=Example``, keys
of ``SUBJECT_KEYS``; a value may begin and/or end with ``*`` (any text), a
comma inside a value is written ``\\,``. A pattern matches a certificate when
every attribute it names is in the subject with a matching value (compared
without regard to case); attributes it does not name may have any value.
When several rules match, the most specific wins: the one naming more
attributes, then the one with more literal (non-``*``) characters, then the
first listed.

Not here: the TLS contexts (``stomp/tlsconfig.py``) and what a mapped user
may do (``authority.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Protocol

#: the subject attributes a pattern may name: its key -> the name Python's
#: ``ssl`` gives it in ``getpeercert()``
SUBJECT_KEYS = {
    "CN": "commonName", "O": "organizationName", "OU": "organizationalUnitName",
    "L": "localityName", "ST": "stateOrProvinceName", "C": "countryName",
    "DC": "domainComponent", "E": "emailAddress", "UID": "userId",
    "SERIALNUMBER": "serialNumber",
}
_SHORT = {v: k for k, v in SUBJECT_KEYS.items()}


class SubjectPatternError(ValueError):
    """A subject pattern that cannot be read; the text names the part."""


@dataclass(frozen=True)
class SubjectPattern:
    """A parsed pattern: ``(key, value)`` pairs, keys as ``getpeercert`` names them."""
    text: str
    parts: tuple[tuple[str, str], ...]

    @property
    def specificity(self) -> tuple[int, int]:
        """More attributes named, then more literal characters: more specific."""
        return len(self.parts), sum(len(v.strip("*")) for _k, v in self.parts)

    def matches(self, attributes: Iterable[tuple[str, str]]) -> bool:
        have = list(attributes)
        return all(any(k == key and _value_matches(want, v) for k, v in have)
                   for key, want in self.parts)


class PeerMapRule(Protocol):
    """A rule that maps a certificate subject to a user: qm.toml's
    ``certificate_users`` entries, and CHLAUTH's SSLPEERMAP rules."""
    subject: str
    user: str


@dataclass(frozen=True)
class CertificateMatch:
    """The user a certificate maps to and the rule that said so."""
    user: str
    rule: str          # the rule's subject pattern, for the operator log
    subject: str       # the certificate's subject, written as a pattern is


def parse_subject_pattern(text: str) -> SubjectPattern:
    """``CN=alice,O=Example`` as a SubjectPattern; SubjectPatternError naming the
    part that is not ``KEY=value`` with a known key, or a misplaced ``*``."""
    parts = []
    for part in _split_unescaped(text):
        key, eq, value = part.partition("=")
        key, value = key.strip().upper(), value.strip()
        if not eq or key not in SUBJECT_KEYS or not value:
            raise SubjectPatternError(
                f"subject pattern {text!r}: {part.strip()!r} is not KEY=value with KEY one of "
                f"{', '.join(SUBJECT_KEYS)}")
        if "*" in value.strip("*") or value.count("*") > 2:
            raise SubjectPatternError(
                f"subject pattern {text!r}: in {part.strip()!r} '*' may only begin or end "
                "the value")
        parts.append((SUBJECT_KEYS[key], value))
    if not parts:
        raise SubjectPatternError(f"subject pattern {text!r} names no attribute "
                                  "(write it as SSLPEER is: CN=name,O=organisation)")
    return SubjectPattern(text, tuple(parts))


def subject_attributes(cert: dict) -> list[tuple[str, str]]:
    """The subject of a certificate as ``ssl``'s ``getpeercert()`` gives it, as
    ``(key, value)`` pairs in order."""
    return [(k, v) for rdn in cert.get("subject", ()) for k, v in rdn]


def subject_text(cert: dict) -> str:
    """A certificate's subject written as a pattern is: ``CN=alice,O=Example``."""
    return ",".join(f"{_SHORT.get(k, k)}={v.replace(',', chr(92) + ',')}"
                    for k, v in subject_attributes(cert))


def map_certificate_user(cert: dict, rules: Iterable[PeerMapRule]) -> CertificateMatch | None:
    """The user the client certificate ``cert`` (``getpeercert()``) acts as: the
    most specific rule whose pattern matches its subject; None when no rule
    does. A rule whose pattern cannot be read matches nothing (configurations
    are checked when they are read: ``parse_subject_pattern``)."""
    attributes = subject_attributes(cert)
    best: tuple[tuple[int, int], PeerMapRule] | None = None
    for rule in rules:
        try:
            pattern = parse_subject_pattern(rule.subject)
        except SubjectPatternError:
            continue
        if pattern.matches(attributes) and (best is None or
                                            pattern.specificity > best[0]):
            best = (pattern.specificity, rule)
    if best is None:
        return None
    return CertificateMatch(best[1].user, best[1].subject, subject_text(cert))


def _value_matches(want: str, have: str) -> bool:
    want, have = want.upper(), have.upper()
    lead, trail = want.startswith("*"), want.endswith("*") and len(want) > 1
    core = want[1 if lead else 0:len(want) - 1 if trail else len(want)]
    if lead and trail:
        return core in have
    if lead:
        return have.endswith(core)
    if trail:
        return have.startswith(core)
    return have == core


def _split_unescaped(text: str) -> list[str]:
    """``text`` split at commas that are not written ``\\,`` (those stay commas)."""
    parts, current, escaped = [], [], False
    for ch in str(text):
        if escaped:
            current.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == ",":
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p for p in parts if p.strip()]
