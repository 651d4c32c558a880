"""Object definitions: the queue manager object and local queues (QLOCAL).

Attributes use MQSC names. A definition is a plain dict (it is logged as JSON
in OBJECT_CREATE/ALTER records and kept in the catalog store)::

    {"type": "QLOCAL", "name": "Q1", "object_id": 7, "create_lsn": 4242,
     "attrs": {"DESCR": "", "DEFPSIST": "NO", ...}}
"""

from __future__ import annotations

import re

from ..errors import InvalidAttribute

QMGR_OBJECT = "QMGR"
DEFAULT_LOCAL_QUEUE = "SYSTEM.DEFAULT.LOCAL.QUEUE"
DEAD_LETTER_QUEUE = "SYSTEM.DEAD.LETTER.QUEUE"

NAME_RE = re.compile(r"^[A-Za-z0-9._/%]{1,48}$")

#: QLOCAL attributes and their MQ defaults
QLOCAL_DEFAULTS = {
    "DESCR": "",
    "DEFPSIST": "NO",          # MQ's default: messages are non-persistent unless asked
    "DEFPRTY": 0,
    "MAXDEPTH": 5000,
    "MAXMSGL": 4 * 1024 * 1024,
    "INDXTYPE": "NONE",
    "BOTHRESH": 0,
    "BOQNAME": "",
    "GET": "ENABLED",
    "PUT": "ENABLED",
}

QMGR_DEFAULTS = {
    "DESCR": "",
    "DEADQ": DEAD_LETTER_QUEUE,
    "MAXMSGL": 4 * 1024 * 1024,
}

_CHOICES = {
    "DEFPSIST": ("YES", "NO"),
    "INDXTYPE": ("NONE", "MSGID", "CORRELID"),
    "GET": ("ENABLED", "DISABLED"),
    "PUT": ("ENABLED", "DISABLED"),
}
_RANGES = {
    "DEFPRTY": (0, 9),
    "MAXDEPTH": (0, 999_999_999),
    "MAXMSGL": (0, 100 * 1024 * 1024),
    "BOTHRESH": (0, 999_999_999),
}


def check_name(name: str, what: str = "queue") -> str:
    """MQ's rules for object and queue manager names: 1 to 48 characters from
    A-Z a-z 0-9 . _ / %, and (ours) never "." or "..", which read as paths."""
    if not isinstance(name, str) or not NAME_RE.match(name) or name in (".", ".."):
        raise InvalidAttribute(f"{what} name {name!r} is not valid: use 1 to 48 characters "
                               "from A-Z a-z 0-9 . _ / %, not '.' or '..' alone")
    return name


def validate(attrs: dict, defaults: dict, what: str) -> dict:
    """Normalise attribute names and values; raise naming the bad one."""
    out = {}
    for raw_key, value in attrs.items():
        key = str(raw_key).upper()
        if key not in defaults:
            raise InvalidAttribute(f"{what} has no attribute {raw_key!r}; known: "
                                   f"{', '.join(sorted(defaults))}")
        if key in _CHOICES:
            v = str(value).upper() if not isinstance(value, bool) else \
                ("YES" if value else "NO") if key == "DEFPSIST" else \
                ("ENABLED" if value else "DISABLED")
            if v not in _CHOICES[key]:
                raise InvalidAttribute(f"{key}({value}) is not valid: choose one of "
                                       f"{', '.join(_CHOICES[key])}")
            out[key] = v
        elif key in _RANGES:
            try:
                v = int(value)
            except (TypeError, ValueError):
                raise InvalidAttribute(f"{key}({value}) is not a number") from None
            lo, hi = _RANGES[key]
            if not lo <= v <= hi:
                raise InvalidAttribute(f"{key}({value}) is out of range {lo}..{hi}")
            out[key] = v
        elif key in ("BOQNAME", "DEADQ"):
            out[key] = check_name(str(value), key) if value else ""
        else:
            out[key] = str(value)
    return out
