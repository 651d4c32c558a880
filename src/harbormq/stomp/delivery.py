"""Subscriptions and deliveries of a STOMP connection.

A subscription with ``ack:auto`` gets messages outside any unit of work: the
message is gone when it is sent. With ``ack:client`` or
``ack:client-individual`` each delivery is a get under a unit of work of its
own, owned by the connection; ACK commits it (inside a transaction, at the
transaction's COMMIT, decided by its COMMIT record); NACK, UNSUBSCRIBE, a
lost connection or a crash backs it out and redelivers the message, or moves
it at BOTHRESH. Its get is logged at the ACK (one record; in a transaction,
as one of the transaction's records), or, from a queue with HARDENBO(YES),
when it is delivered: only then does a crash count the backout. At most
``prefetch-count`` deliveries of a subscription await acknowledgement; with
``ack:auto`` the transport's write buffer is the window.

The subscriptions on a queue share its messages: each is a consumer of the
queue (``LocalQueue.dispatch``), served one message at a time in turn among
those with room, the one that made room first served first. A ``selector``
header (SQL-92, ``core/selectors.py``) limits what a subscription takes;
messages it does not select stay for the others.

A subscription to a ``/topic/`` destination is made by ``topics.py`` and
read here from its subscription's queue like any other; its MESSAGEs name
the topic each was published to and mark a retained publication.
"""

from __future__ import annotations

import asyncio
import re
from collections import OrderedDict
from dataclasses import dataclass, field

from ..core.queue import LocalQueue, MessageMatch
from ..core.selectors import Selector, SelectorError, compile_selector
from ..core.uow import UnitOfWork
from ..errors import HarbormqError
from ..log.records import Message
from .frames import Frame, escape
from .message_codec import message_frame
from .topics import TOPIC_PREFIX, publication_headers
from .transport import MAX_HELD, ProtocolError

_SELECTOR = re.compile(r"^\s*(JMSCorrelationID|JMSMessageID)\s*=\s*'((?:[^']|'')*)'\s*$",
                       re.IGNORECASE)
#: frames built before they go to the socket (whose write buffer is the bound)
_FLUSH_FRAMES = 64


@dataclass(slots=True)
class Delivery:
    ack_id: str
    msg_hex: str
    sub: "Subscription"
    uow: UnitOfWork
    #: the transaction whose COMMIT will acknowledge (or NACK) it, if any
    txn: str | None = None


@dataclass(eq=False)
class Subscription:
    """One SUBSCRIBE: a consumer of its queue (``core.queue.Consumer``)."""
    id: str
    queue: str
    ack: str                              # auto | client | client-individual
    prefetch: int
    match: MessageMatch | Selector | None
    #: the connection it delivers on
    conn: "DeliveryMixin"
    outstanding: "OrderedDict[str, Delivery]" = field(default_factory=OrderedDict)
    #: the queue it consumes from (the one it registered with)
    q: LocalQueue | None = None
    #: "MESSAGE", then its subscription and destination headers
    frame_prefix: str = ""
    #: a topic subscription's queue: each MESSAGE names its topic (topics.py)
    topic: bool = False

    def has_room(self) -> bool:
        return self.conn._has_room(self)

    def take(self) -> bool:
        return self.conn._take(self)


class DeliveryMixin:
    """SUBSCRIBE, UNSUBSCRIBE, ACK, NACK and the deliveries they govern (part of
    StompConnection: the session supplies the core, the queue lookups, the
    transactions and the transport)."""

    def _init_deliveries(self) -> None:
        self.subscriptions: dict[str, Subscription] = {}
        self.deliveries: dict[str, Delivery] = {}     # ack id -> delivery (1.2)
        self.by_msg_id: dict[str, Delivery] = {}      # message-id -> delivery (1.0/1.1)
        self._ack_seq = 0

    def _writable(self) -> None:
        for sub in list(self.subscriptions.values()):
            self._pump(sub)

    def _pump(self, sub: Subscription) -> None:
        """The subscription may have room again: in its queue's line."""
        if sub.q is not None and self.subscriptions.get(sub.id) is sub:
            sub.q.consumer_ready(sub)

    def on_subscribe(self, frame: Frame):
        if (making := self.temp_queues.rewrite(frame, ("destination",))) is not None:
            return making
        if frame.headers.get("destination", "").startswith(TOPIC_PREFIX):
            return self._subscribe_topic(frame)     # topics.py
        name = self._queue_name(frame)
        sub_id, ack = self._new_subscription(frame)
        self._authorize(name, "get")
        define = self._needs_define(name)
        if define is not None:
            return define
        self._open_subscription(frame, sub_id, ack, name)
        return None

    def _new_subscription(self, frame: Frame) -> tuple[str, str]:
        """A SUBSCRIBE's subscription id and ack mode, checked: the id free,
        the connection under its limit."""
        sub_id = frame.headers.get("id")
        if sub_id is None:
            if self.version != "1.0":
                self._required(frame, "id")
            sub_id = frame.headers["destination"]
        if sub_id in self.subscriptions:
            raise ProtocolError(f"subscription id {sub_id!r} is already in use on this "
                                "connection")
        if len(self.subscriptions) >= self.settings.max_subscriptions:
            raise ProtocolError(f"this connection has {len(self.subscriptions)} "
                                "subscriptions, the limit (stomp.max_subscriptions)")
        ack = frame.headers.get("ack", "auto")
        if ack not in ("auto", "client", "client-individual"):
            raise ProtocolError(f"ack mode {ack!r} is not one of auto, client, "
                                "client-individual")
        return sub_id, ack

    def _open_subscription(self, frame: Frame, sub_id: str, ack: str, queue: str, *,
                           topic: bool = False) -> Subscription:
        """Start delivering from ``queue`` (it exists) to subscription ``sub_id``;
        ``topic``: it is a topic subscription's queue, whose MESSAGEs each name
        the topic they were published to."""
        prefetch = self._prefetch(frame)
        # a topic subscription's selector is the subscription's own (pubsub/)
        match = None if topic else self._selector(frame.headers.get("selector"))
        q = self.core.input_queue(queue)       # an alias: its target, from now on
        sub = Subscription(sub_id, q.name, ack, prefetch, match, self, q=q, topic=topic)
        sub.frame_prefix = f"MESSAGE\nsubscription:{escape(sub_id, self.version)}\n"
        if not topic:
            sub.frame_prefix += f"destination:{escape('/queue/' + queue, self.version)}\n"
        self.subscriptions[sub_id] = sub
        self.info.open(q.name, "input")
        self._receipt(frame, None)
        q.add_consumer(sub)
        return sub

    def _prefetch(self, frame: Frame) -> int:
        raw = frame.headers.get("prefetch-count", frame.headers.get("activemq.prefetchSize"))
        if raw is None:
            return self.settings.default_prefetch
        try:
            value = int(raw)
        except ValueError:
            raise ProtocolError(f"prefetch-count {raw!r} is not a number") from None
        if not 1 <= value <= self.settings.max_prefetch:
            raise ProtocolError(f"prefetch-count {value} is out of range "
                                f"1-{self.settings.max_prefetch} (stomp.max_prefetch)")
        return value

    @staticmethod
    def _selector(text: str | None) -> MessageMatch | Selector | None:
        """The subscription's match: by message or correlation id when the
        selector is exactly that (the queue's index may serve it), else the
        compiled selector; None for none (or a blank one)."""
        if text is None or not text.strip():
            return None
        m = _SELECTOR.match(text)
        if m is None:
            try:
                return compile_selector(text)
            except SelectorError as exc:
                raise ProtocolError(f"SUBSCRIBE: {exc.message}", msgid=exc.msgid) from None
        field_name, value = m.group(1).lower(), m.group(2).replace("''", "'")
        if field_name == "jmsmessageid":
            hex_id = value[3:] if value.upper().startswith("ID:") else value
            try:
                return MessageMatch(msg_id=bytes.fromhex(hex_id))
            except ValueError:
                raise ProtocolError(f"JMSMessageID {value!r} is not a message id "
                                    "(hex, as sent in message-id)") from None
        return MessageMatch(correl_id=value.encode())

    def on_unsubscribe(self, frame: Frame):
        if self._is_topic_unsubscribe(frame):
            return self._unsubscribe_topic(frame)   # topics.py
        sub_id = frame.headers.get("id")
        if sub_id is None:
            if self.version != "1.0":
                self._required(frame, "id")
            sub_id = frame.headers.get("destination", "")
        sub = self.subscriptions.get(sub_id)
        if sub is None:
            raise ProtocolError(f"UNSUBSCRIBE: no subscription {sub_id!r} on this connection")
        self._end_subscription(sub)
        self._receipt(frame, None)
        return None

    def _end_subscription(self, sub: Subscription) -> None:
        self.subscriptions.pop(sub.id, None)
        if sub.q is not None:
            sub.q.remove_consumer(sub)
        self.info.close(sub.queue, "input")
        for d in list(sub.outstanding.values()):
            if d.txn is not None and d.txn in self.transactions:
                continue    # its transaction decides it at COMMIT or ABORT
            self._forget(d)
            self._back_out(d.uow)

    def _has_room(self, sub: Subscription) -> bool:
        """The subscription's window has room and the connection takes frames."""
        if self._closing or self._write_paused or self.subscriptions.get(sub.id) is not sub:
            return False
        if len(self._held) >= MAX_HELD:
            self._held_full = True    # _release_held calls _writable again
            return False
        return sub.ack == "auto" or len(sub.outstanding) < sub.prefetch

    def _take(self, sub: Subscription) -> bool:
        """Get and deliver the first message the subscription selects (its queue
        calls this when it is the subscription's turn and it has room)."""
        core = self.core
        uow = None
        try:
            if sub.ack == "auto":
                msg, _forced = core.get_nowait(sub.queue, None, match=sub.match)
            else:
                uow = core.begin(owner=self._owner)
                msg, _forced = core.get_nowait(sub.queue, uow, match=sub.match, defer=True)
                if msg is None:
                    core.discard_empty(uow)
        except HarbormqError as exc:
            if uow is not None and uow.first_lsn and not uow.ops:
                # (HARDENBO) its BEGIN is logged, its GET was not: LogFull
                self._back_out(uow)
            elif uow is not None and not uow.ops:
                core.discard_empty(uow)
            self.fail(f"subscription {sub.id} on {sub.queue}: {exc}")
            return False
        if msg is None:
            return False
        self._deliver(sub, msg, uow)
        if len(self._out) >= _FLUSH_FRAMES or self.transport.get_write_buffer_size() > 256 * 1024:
            # to the socket now: past its limit it pauses writing, and then
            # has_room keeps this subscription out of the line
            self._flush()
        return True

    def _deliver(self, sub: Subscription, msg: Message, uow: UnitOfWork | None) -> None:
        """Send one MESSAGE (its bytes: ``message_codec.message_frame``), once
        what it shows cannot be taken back by a crash."""
        msg_hex = msg.msg_id.hex()
        ack_header = None
        if uow is not None:
            self._ack_seq += 1
            ack_id = f"{self.info.conn_id}-{self._ack_seq}"
            d = Delivery(ack_id, msg_hex, sub, uow)
            sub.outstanding[ack_id] = d
            self.deliveries[ack_id] = d
            self.by_msg_id[msg_hex] = d
            if self.version == "1.2":
                ack_header = ack_id
        version = self.version
        frame = message_frame(sub.frame_prefix, msg_hex, ack_header, msg, version,
                              publication_headers(msg, version) if sub.topic else None)
        # never show a message that a crash could still take back: a persistent
        # message leaves once its put is on disk, and with ack:auto its get (a
        # client-ack delivery's get is logged at its ACK unless HARDENBO)
        log = self.core.log
        forced = log.force() if msg.persistent and log.synced_lsn < log.end_lsn else None
        self._send_after(forced, frame)

    def _forget(self, d: Delivery) -> None:
        d.sub.outstanding.pop(d.ack_id, None)
        self.deliveries.pop(d.ack_id, None)
        self.by_msg_id.pop(d.msg_hex, None)

    def _acked(self, frame: Frame) -> list[Delivery]:
        """The deliveries an ACK or NACK covers: one, or with ack:client every
        earlier delivery of the subscription too (cumulative)."""
        if self.version == "1.2":
            ack_id = self._required(frame, "id")
            d = self.deliveries.get(ack_id)
            what = f"id {ack_id!r}"
        else:
            msg_id = self._required(frame, "message-id")
            d = self.by_msg_id.get(msg_id)
            what = f"message-id {msg_id!r}"
        if d is None:
            raise ProtocolError(f"{frame.command}: {what} is not a delivery awaiting "
                                "acknowledgement on this connection")
        if d.sub.ack != "client":
            return [d]
        covered = []
        for other in d.sub.outstanding.values():
            covered.append(other)
            if other is d:
                break
        return covered

    def _defer_to_transaction(self, frame: Frame, covered: list[Delivery], verdicts: str) -> bool:
        """An ACK or NACK inside a transaction is carried out at its COMMIT:
        record it there (``verdicts``: "acks" or "nacks"); False outside one."""
        if "transaction" not in frame.headers:
            return False
        txn = self._transaction(frame)
        for d in covered:
            if d.txn is None:
                d.txn = txn.name
                getattr(txn, verdicts).append(d)
        self._receipt(frame, None)
        return True

    def on_ack(self, frame: Frame):
        covered = self._acked(frame)
        if self._defer_to_transaction(frame, covered, "acks"):
            return None
        covered = [d for d in covered if d.txn is None]
        forced = None
        for d in covered:
            # forgotten only once committed: if the commit fails (LogFull), the
            # connection ends and backs out what it still holds. A delivery
            # logged at its ACK holds no log, so nothing else would ever
            # release it.
            f = self.core.commit_nowait(d.uow)
            self._forget(d)
            forced = f or forced
        self._receipt(frame, forced)
        self._refill(covered)
        return None

    def on_nack(self, frame: Frame):
        if self.version == "1.0":
            raise ProtocolError("NACK is not part of STOMP 1.0 (connect with "
                                "accept-version 1.1 or 1.2)")
        covered = self._acked(frame)
        if self._defer_to_transaction(frame, covered, "nacks"):
            return None
        covered = [d for d in covered if d.txn is None]
        for d in covered:
            self._forget(d)
            self._back_out(d.uow)
        self._receipt(frame, None)
        self._refill(covered)
        return None

    def _refill(self, done: list[Delivery]) -> None:
        for sub in {id(d.sub): d.sub for d in done}.values():
            self._pump(sub)

    def _back_out(self, uow: UnitOfWork) -> None:
        if uow.state in ("active", "prepared"):
            task = self.loop.create_task(self.core.backout(uow))
            self.service.backouts.add(task)
            task.add_done_callback(self._backout_done)

    def _backout_done(self, task: asyncio.Task) -> None:
        self.service.backouts.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.core.oplog.emit("HMQ9503E", f"STOMP connection {self.info.conn_id}: "
                                 f"backout failed: {task.exception()!r}")
