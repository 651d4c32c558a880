"""The status queues of publish/subscribe, as MQ keeps them.

* SYSTEM.DURABLE.SUBSCRIBER.QUEUE: one persistent message per durable or
  administrative subscription, its message id derived from the
  subscription's name, its body the subscription (``Subscription.encode``).
* SYSTEM.RETAINED.PUB.QUEUE: one persistent message per topic string with a
  retained publication, its message id derived from the topic string, its
  body and properties the publication's (``MQTopicString`` among them).

Each is replaced (got, then put) inside the unit of work that changes it: a
subscribe or unsubscribe, a retained publish. Being queues, they are
logged, imaged, recreated, backed up, restored, replayed by a standby and
read by the pipeline like any other. Both have INDXTYPE(MSGID), so a
replacement finds the old message through the index.

``read_bodies`` reads a whole status queue back at start, straight from its
store; ``read_all`` reads one through the queue (keys from the queue,
messages from its store in batches of ``READ_BATCH`` per transaction).
"""

from __future__ import annotations

import hashlib
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from crc32c import crc32c

from ..core.objects import DURABLE_SUBSCRIBER_QUEUE, RETAINED_PUB_QUEUE
from ..core.queue import LocalQueue
from ..core.selectors import Selector
from ..log.records import MSG_FIXED, Message
from ..store.stores import SEAL, unseal

READ_BATCH = 10_000
STATUS_QUEUE_ATTRS = {"DEFPSIST": "YES", "INDXTYPE": "MSGID", "MAXDEPTH": 999_999_999}
#: message properties of a publication (MQ's names)
TOPIC_PROPERTY = "MQTopicString"
RETAINED_PROPERTY = "MQIsRetained"


def subscription_msg_id(name: str) -> bytes:
    return hashlib.sha256(b"SUB\0" + name.encode()).digest()[:24]


def retained_msg_id(topic: str) -> bytes:
    return hashlib.sha256(b"RETAINED\0" + topic.encode()).digest()[:24]


#: a status message's body: these fields joined by NUL (no topic string,
#: name or user holds one), the first being the layout's version
FIELDS_V1 = "S1"
_SEP = "\0"


@dataclass(slots=True, eq=False)
class Subscription:
    """One subscription. ``dest`` is the queue its publications are put on
    (the managed queue's name for DESTCLAS(MANAGED)): what a consumer reads."""
    name: str
    topic: str
    dest: str
    destclass: str = "MANAGED"      # MANAGED | PROVIDED
    durable: bool = True
    subtype: str = "API"            # API | ADMIN (DEFINE SUB)
    selector: str = ""
    #: the subscription itself expires (MQ's EXPIRY, tenths of a second), as an
    #: absolute time in ns; 0: never
    expires_ns: int = 0
    user: str = ""
    #: a non-durable subscription's owner (a connection id): it ends with it
    owner: str = ""
    topicobj: str = ""
    #: MQ's SUBID (48 hex digits)
    sub_id: str = ""
    created_ns: int = field(default_factory=time.time_ns)
    altered_ns: int = 0
    #: run time only (DISPLAY SBSTATUS): publications delivered, the last one's time
    delivered: int = 0
    last_ns: int = 0
    #: run time only: ``selector`` compiled (``core/selectors.py``), on first use
    compiled: Selector | None = None

    def encode(self) -> bytes:
        return _SEP.join((FIELDS_V1, self.name, self.topic, self.dest, self.destclass,
                          self.subtype, self.selector, str(self.expires_ns), self.user,
                          self.topicobj, self.sub_id, str(self.created_ns),
                          str(self.altered_ns))).encode()

    @classmethod
    def decode(cls, body: bytes) -> "Subscription":
        f = body.decode().split(_SEP)
        if f[0] != FIELDS_V1 or len(f) != 13:
            raise ValueError(f"not a subscription of layout {FIELDS_V1}: {body[:40]!r}")
        # (a million of these are read at a start: the few distinct values of
        # dest, destclass and subtype are shared, and "0" needs no int())
        intern = sys.intern
        return cls(f[1], f[2], intern(f[3]), intern(f[4]), True, intern(f[5]), f[6],
                   int(f[7]) if f[7] != "0" else 0, f[8], "", f[9], f[10], int(f[11]),
                   int(f[12]) if f[12] != "0" else 0)

    @property
    def managed(self) -> bool:
        return self.destclass == "MANAGED"


def status_message(sub: Subscription) -> Message:
    return Message(body=sub.encode(), msg_id=subscription_msg_id(sub.name), persistent=True)


def read_all(q: LocalQueue) -> list[Message]:
    """Every committed message of ``q`` (locked ones too: an unfinished unit of
    work's get is undone at its backout), in delivery order, read in bulk."""
    out: list[Message] = []
    batch: list[bytes] = []

    def take() -> None:
        stored = [k for k in batch if k not in q.dirty and k not in q.flushing]
        found = q.store.get_many(stored) if stored and not q.store_hidden else {}
        for key in batch:
            msg = found.get(key)
            if msg is None:
                msg = q.lookup(key)
            if msg is not None:
                out.append(msg)
        batch.clear()

    for key in q.iter_keys():
        batch.append(key)
        if len(batch) >= READ_BATCH:
            take()
    take()
    return out


def read_bodies(q: LocalQueue) -> Iterator[bytes]:
    """The body of every committed message of ``q``, in no particular order:
    at start (every store flushed by restart) straight from the store in one
    read transaction, each value's seal checked and its body sliced out of
    the message's layout (``MSG_FIXED``) without decoding the rest; else
    through ``read_all``."""
    store = q.store
    if q.dirty or q.flushing or q.store_hidden:
        yield from (m.body for m in read_all(q))
        return
    fixed, size, seal, seal_size = MSG_FIXED.unpack_from, MSG_FIXED.size, SEAL.unpack_from, \
        SEAL.size
    with store.pinned() as env, env.begin(db=store.db("msgs"), buffers=True) as txn:
        for key, value in txn.cursor():
            # unseal's check, on the buffers themselves: no copy but the body's
            if seal(value, 0)[0] != crc32c(value[seal_size:], crc32c(key)):
                unseal(key, value, store.path)      # raises StoreDamaged naming the key
            *_, lmid, lcid, lrep, lfmt, lprops, lbody = fixed(value, seal_size)
            start = seal_size + size + lmid + lcid + lrep + lfmt + lprops
            yield bytes(value[start:start + lbody])


STATUS_QUEUES = (DURABLE_SUBSCRIBER_QUEUE, RETAINED_PUB_QUEUE)



def subscription_attrs(body: bytes) -> tuple[str, dict]:
    """A status message as the name and MQSC attributes that define its
    subscription again (``harbormq dump-config``)."""
    sub = Subscription.decode(body)
    attrs = {"TOPICSTR": sub.topic}
    if not sub.managed:
        attrs.update(DEST=sub.dest, DESTCLAS="PROVIDED")
    if sub.selector:
        attrs["SELECTOR"] = sub.selector
    if sub.expires_ns:
        attrs["EXPIRY"] = max(1, (sub.expires_ns - time.time_ns()) // 100_000_000)
    return sub.name, attrs
