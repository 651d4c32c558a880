"""Remote queues: a put to a QREMOTE definition goes to a transmission queue,
wrapped in a transmission header that says where it is going (MQ's MQXQH).

The message on the transmission queue keeps the original's message id,
priority and persistence (so the sender channel and its unit of work treat it
as they would the original); its body is the header and then the original
message's whole encoding, descriptor and body::

    0   8   magic            b"HMQXQH01"
    8   4   header length    n (little-endian)
    12  n   header           JSON: {"rq": queue there, "rqm": queue manager there,
                                    "from_qm": where it was put}
    12+n    the original message (log/records.py ``Message.encode``)
"""

from __future__ import annotations

import functools
import json
import struct
from dataclasses import dataclass

from ..errors import InvalidAttribute, UnknownObject
from ..log.records import Message

XQH_MAGIC = b"HMQXQH01"
_LEN = struct.Struct("<I")


@dataclass(frozen=True)
class TransmissionHeader:
    rq: str
    rqm: str
    from_qm: str


def wrap(msg: Message, header: TransmissionHeader) -> Message:
    """The message to put on the transmission queue."""
    return Message(body=_prefix(header) + msg.encode(),
                   msg_id=msg.msg_id, correl_id=msg.correl_id, priority=msg.priority,
                   persistent=msg.persistent, expiry_ns=msg.expiry_ns, format="MQXMIT")


@functools.lru_cache(maxsize=1024)
def _prefix(header: TransmissionHeader) -> bytes:
    """The magic and the encoded header, cached: a remote queue's puts all
    carry the same one."""
    head = json.dumps({"rq": header.rq, "rqm": header.rqm, "from_qm": header.from_qm},
                      separators=(",", ":")).encode()
    return XQH_MAGIC + _LEN.pack(len(head)) + head


def is_wrapped(body: bytes) -> bool:
    return body[:8] == XQH_MAGIC


def unwrap(body: bytes) -> tuple[TransmissionHeader, Message]:
    """The header and the original message of a transmission queue message;
    ValueError when ``body`` is not one."""
    if len(body) < 12 or body[:8] != XQH_MAGIC:
        raise ValueError("not a transmission message (no transmission header)")
    (n,) = _LEN.unpack_from(body, 8)
    header = _header(bytes(body[12:12 + n]))
    return header, Message.decode(body[12 + n:])


@functools.lru_cache(maxsize=1024)
def _header(head: bytes) -> TransmissionHeader:
    """A header parsed, cached: a channel's messages mostly share a few (one
    per target queue), and a receiver unwraps every one."""
    h = json.loads(head)
    if not isinstance(h, dict) or not isinstance(h.get("rq"), str) or \
            not isinstance(h.get("rqm"), str):
        raise ValueError(f"transmission header {head[:200]!r} does not name the queue "
                         "and the queue manager")
    return TransmissionHeader(h["rq"], h["rqm"], str(h.get("from_qm", "")))


def resolve(objects: dict, name: str) -> tuple[str, TransmissionHeader, dict] | None:
    """For a QREMOTE ``name``: (the transmission queue, the header, its
    attributes); None when ``name`` is not a remote queue definition."""
    d = objects.get(name)
    if d is None or d["type"] != "QREMOTE":
        return None
    attrs = d["attrs"]
    if not attrs["RQMNAME"]:
        raise InvalidAttribute(f"remote queue {name} has no RQMNAME: it says nowhere to go "
                               "(MQRC 2087 UNKNOWN_REMOTE_Q_MGR)")
    xmitq = attrs["XMITQ"] or attrs["RQMNAME"]
    target = objects.get(xmitq)
    if target is None or target["type"] != "QLOCAL":
        raise UnknownObject(f"remote queue {name}: its transmission queue {xmitq} is not "
                            "defined (MQRC 2087 UNKNOWN_REMOTE_Q_MGR)", queue=xmitq)
    if target["attrs"].get("USAGE", "NORMAL") != "XMITQ":
        raise InvalidAttribute(f"remote queue {name}: queue {xmitq} is not a transmission "
                               "queue (define it with USAGE(XMITQ)) (MQRC 2091 XMIT_Q_USAGE_ERROR)")
    return xmitq, TransmissionHeader(attrs["RNAME"] or name, attrs["RQMNAME"], ""), attrs
