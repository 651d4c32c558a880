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

``read_all`` reads a whole status queue back at start: keys from the queue,
messages from its store in batches of ``READ_BATCH`` per transaction.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field

from ..core.objects import DURABLE_SUBSCRIBER_QUEUE, RETAINED_PUB_QUEUE
from ..core.queue import LocalQueue
from ..log.records import Message

READ_BATCH = 10_000
STATUS_QUEUE_ATTRS = {"DEFPSIST": "YES", "INDXTYPE": "MSGID", "MAXDEPTH": 999_999_999}
#: message properties of a publication (MQ's names)
TOPIC_PROPERTY = "MQTopicString"
RETAINED_PROPERTY = "MQIsRetained"


def subscription_msg_id(name: str) -> bytes:
    return hashlib.sha256(b"SUB\0" + name.encode()).digest()[:24]


def retained_msg_id(topic: str) -> bytes:
    return hashlib.sha256(b"RETAINED\0" + topic.encode()).digest()[:24]


@dataclass
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
    sub_id: bytes = b""
    created_ns: int = field(default_factory=time.time_ns)
    altered_ns: int = 0
    #: run time only (DISPLAY SBSTATUS): publications delivered, the last one's time
    delivered: int = field(default=0, compare=False)
    last_ns: int = field(default=0, compare=False)

    def encode(self) -> bytes:
        return json.dumps({"n": self.name, "t": self.topic, "d": self.dest,
                           "c": self.destclass, "y": self.subtype, "s": self.selector,
                           "e": self.expires_ns, "u": self.user, "o": self.topicobj,
                           "i": self.sub_id.hex(), "ct": self.created_ns,
                           "at": self.altered_ns}, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, body: bytes) -> "Subscription":
        r = json.loads(body)
        return cls(r["n"], r["t"], r["d"], r["c"], True, r["y"], r["s"], r["e"], r["u"], "",
                   r["o"], bytes.fromhex(r["i"]), r["ct"], r["at"])

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


STATUS_QUEUES = (DURABLE_SUBSCRIBER_QUEUE, RETAINED_PUB_QUEUE)
