"""Message ids, as MQ's MsgId: 24 bytes, unique without coordination. Here so
that every part of the core that puts a message gives ids the same way
(``engine.py``'s puts, ``publish.py``'s publications)."""

from __future__ import annotations

import itertools
import os

#: a random part per process, then a counter
_id_prefix = os.urandom(8)
_id_counter = itertools.count(1)


def new_msg_id() -> bytes:
    """24 bytes: 'HMQ' + a per-process random part + a counter."""
    return b"HMQ\0" + _id_prefix + next(_id_counter).to_bytes(8, "big") + b"\0\0\0\0"
