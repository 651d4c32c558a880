"""Users of a queue manager and their scrypt password hashes.

One file per queue manager (mode 0600, replaced atomically with fsync)::

    qmgrs/<QM>/users.json      {"version": 1, "users": {NAME: {"hash": ..., "groups": [...]}}}

Passwords are stored as scrypt hashes: ``scrypt$<n>$<r>$<p>$<salt hex>$<hash hex>``,
the parameters travelling with the hash so they can be raised later without
invalidating stored users. Who a user may be, and what the group ``mqm``
means, is the principal model of ``harbormq.security``; what a user may do is
``authority.py``.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from pathlib import Path

from .errors import SecurityError, UnknownUser, UserExists
from .files import CachedJsonFile

USER_RE = re.compile(r"^[A-Za-z0-9._@-]{1,64}$")
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


class UserStore:
    """Users and their scrypt password hashes (``users.json``)."""

    def __init__(self, path: Path):
        self.file = CachedJsonFile(path)

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
