"""Publish/subscribe over STOMP: ``/topic/<topic string>`` destinations.

* SEND to ``/topic/...`` publishes through the queue manager's ``PubSub``
  service (``core.pubsub``, pubsub/service.py): in the SEND's transaction
  when it names one, else on its own with its RECEIPT once it is on disk.
  ``retain:true`` makes it the topic's retained publication. Persistence and
  priority are the SEND's headers, else the topic's DEFPSIST and DEFPRTY.
* SUBSCRIBE to ``/topic/...`` (MQ's wildcards ``#`` and ``+`` allowed) makes
  a subscription whose queue the connection then reads like any queue
  (delivery.py: ack modes, prefetch, redelivery unchanged). It is
  non-durable (ended by UNSUBSCRIBE or the connection's end) unless the
  SUBSCRIBE follows one of the two durable conventions:

  - RabbitMQ's: ``durable:true`` (or ``persistent:true``), the subscription
    named by its ``id``;
  - ActiveMQ's: ``activemq.subscriptionName:NAME`` with ``client-id`` on
    CONNECT, the subscription named ``<client-id>:<NAME>``.

  A durable subscription outlives its connection and the queue manager;
  subscribing again under its name resumes it, with what was published
  meanwhile. UNSUBSCRIBE carrying the same durable headers deletes it (also
  when it is not active on the connection); a plain UNSUBSCRIBE or the
  connection's end only stops its deliveries. A durable subscription is
  consumed by one subscriber at a time (MQRC 2429 SUBSCRIPTION_IN_USE).

Each MESSAGE of a topic subscription names the topic it was published to in
``destination``, and a retained publication carries ``retained:true``.

Not here: the topic tree, the subscriptions and their queues (pubsub/), the
deliveries themselves (delivery.py), the SEND headers' parsing (connection.py).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from ..errors import QueueManagerStopping, UnknownObject
from ..pubsub.errors import NoSubscription, SubNameError, SubscriptionError
from ..pubsub.status import RETAINED_PROPERTY, TOPIC_PROPERTY
from .frames import Frame, escape
from .transport import ProtocolError

TOPIC_PREFIX = "/topic/"
#: a publication's message properties (set by pubsub/), sent as the MESSAGE's
#: destination and retained headers instead
PUBLICATION_PROPERTIES = frozenset({TOPIC_PROPERTY, RETAINED_PROPERTY})
#: SUBSCRIBE / UNSUBSCRIBE headers of the two durable conventions
DURABLE_HEADERS = ("durable", "persistent")          # RabbitMQ's (alias)
ACTIVEMQ_NAME = "activemq.subscriptionName"          # ActiveMQ's, with CONNECT's client-id
#: MQRC 2440 SUB_NAME_ERROR, as pubsub/ words it
_NO_NAME = "(MQRC 2440 SUB_NAME_ERROR)"


class SubscriptionInUse(SubscriptionError):
    """A durable subscription another subscriber is consuming (MQRC 2429)."""
    msgid = "HMQ2429E"
    reason = 2429


@dataclass
class TopicSubscription:
    """A STOMP subscription id's subscription in pubsub/."""
    name: str
    durable: bool


def publication_headers(msg, version: str) -> list[str]:
    """The MESSAGE header lines a publication adds: the topic it was published
    to (the subscription's string may hold wildcards), and the retained mark."""
    props = msg.properties
    out = ["destination:", escape(TOPIC_PREFIX + str(props.get(TOPIC_PROPERTY, "")), version),
           "\n"]
    if props.get(RETAINED_PROPERTY):
        out.append("retained:true\n")
    return out


def _flag(frame: Frame, name: str) -> bool:
    value = frame.headers.get(name)
    if value is None:
        return False
    lowered = value.lower()
    if lowered not in ("true", "false"):
        raise ProtocolError(f"{frame.command}: {name} {value!r} must be true or false")
    return lowered == "true"


class TopicsMixin:
    """SEND, SUBSCRIBE and UNSUBSCRIBE on ``/topic/`` destinations (part of
    StompConnection: the session supplies the core, the transactions, the
    message building and the receipts; delivery.py the subscriptions)."""

    def _init_topics(self) -> None:
        #: CONNECT's client-id: the first part of ActiveMQ-style subscription names
        self.client_id = ""
        #: STOMP subscription id -> its pub/sub subscription
        self.topic_subscriptions: dict[str, TopicSubscription] = {}
        #: (frame, result) of a SUBSCRIBE's or UNSUBSCRIBE's asynchronous step,
        #: for the frame's second dispatch (transport.py dispatches it again)
        self._topic_step: tuple[Frame, object] | None = None

    def _pubsub(self):
        pubsub = self.core.pubsub
        if pubsub is None:
            raise UnknownObject(f"queue manager {self.core.name} has no publish/subscribe "
                                "service running: /topic/ destinations are not available")
        return pubsub

    @staticmethod
    def _topic_string(frame: Frame) -> str:
        # the topic string is checked by pubsub/ (empty levels, wildcards in a
        # publication, its length), each failure naming MQRC 2425
        return frame.headers["destination"][len(TOPIC_PREFIX):]

    # -- publish ----------------------------------------------------------------------

    def _publish(self, frame: Frame):
        pubsub = self._pubsub()
        topic = self._topic_string(frame)
        txn = self._transaction(frame) if "transaction" in frame.headers else None
        retain = _flag(frame, "retain")
        msg = self._message_from(frame, pubsub.topic_defaults, topic)
        msg.properties.pop("retain", None)
        if msg.persistent and self.core.log_space_short():
            return self._wait_for_log_space()     # connection.py: then dispatched again
        self._log_space_deadline = None
        _count, forced = pubsub.publish_nowait(topic, msg, txn.uow if txn else None,
                                               user=self._principal, retain=retain)
        self._receipt(frame, forced)
        return None

    # -- subscribe --------------------------------------------------------------------

    def _durable_name(self, frame: Frame, sub_id: str | None) -> str | None:
        """The durable subscription the headers name (None: non-durable);
        SubNameError when they ask for one without naming it."""
        h = frame.headers
        if ACTIVEMQ_NAME in h:
            name = h[ACTIVEMQ_NAME]
            if not name:
                raise SubNameError(f"{frame.command}: {ACTIVEMQ_NAME} is empty: a "
                                            f"durable subscription needs a name {_NO_NAME}")
            if not self.client_id:
                raise SubNameError(
                    f"{frame.command}: a durable subscription named by {ACTIVEMQ_NAME} needs "
                    f"a client-id header on CONNECT (its name is client-id:name) {_NO_NAME}")
            return f"{self.client_id}:{name}"
        if any(_flag(frame, k) for k in DURABLE_HEADERS):
            if not sub_id:
                raise SubNameError(
                    f"{frame.command}: a durable subscription (durable:true) is named by its "
                    f"id header, and this frame has none {_NO_NAME}")
            return sub_id
        return None

    def _subscribe_topic(self, frame: Frame):
        """First pass: check, then return the coroutine that makes the
        subscription (the frame is dispatched again once it is done); second
        pass: deliver from its queue."""
        pubsub = self._pubsub()
        sub_id, ack = self._new_subscription(frame)
        made = self._step_result(frame)
        if made is not None:
            self.topic_subscriptions[sub_id] = TopicSubscription(made.name, made.durable)
            self._open_subscription(frame, sub_id, ack, made.dest, topic=True)
            return None
        topic = self._topic_string(frame)
        name = self._durable_name(frame, frame.headers.get("id"))
        if name is not None:
            self._claim_durable(name)
        return self._make_subscription(frame, pubsub, topic, name)

    def _claim_durable(self, name: str) -> None:
        """One subscriber at a time per durable subscription, as MQ's
        exclusive opens of it (MQRC 2429)."""
        holder = self.service.durable_in_use.get(name)
        if holder is not None:
            raise SubscriptionInUse(f"durable subscription {name} is being consumed by "
                                    "another subscriber (MQRC 2429 SUBSCRIPTION_IN_USE)")
        # taken now: another SUBSCRIBE under the name while this one awaits is refused
        self.service.durable_in_use[name] = self

    async def _make_subscription(self, frame: Frame, pubsub, topic: str,
                                 name: str | None) -> None:
        durable = name is not None
        try:
            sub = await pubsub.subscribe(topic, name=name, durable=durable,
                                         selector=frame.headers.get("selector", ""),
                                         user=self._principal, owner=self._owner)
        except BaseException:
            if durable:
                self._release_durable(name)
            raise
        if self._closing:
            # the connection ended while the subscription was being made
            self._release_topic_subscription(TopicSubscription(sub.name, durable))
            return
        self._topic_step = (frame, sub)

    def _step_result(self, frame: Frame):
        """What the asynchronous step of ``frame`` left (None: it has not run)."""
        step = self._topic_step
        if step is not None and step[0] is frame:
            self._topic_step = None
            return step[1]
        return None

    # -- unsubscribe ------------------------------------------------------------------

    def _is_topic_unsubscribe(self, frame: Frame) -> bool:
        h = frame.headers
        sub_id = h.get("id")
        if sub_id in self.topic_subscriptions or self._topic_step is not None:
            return True
        # a durable subscription not active here, deleted by name
        return sub_id not in self.subscriptions and (
            ACTIVEMQ_NAME in h or any(k in h for k in DURABLE_HEADERS))

    def _unsubscribe_topic(self, frame: Frame):
        if self._step_result(frame) is not None:
            self._receipt(frame, None)      # the deletion is done
            return None
        sub_id = frame.headers.get("id")
        if sub_id is None and self.version != "1.0":
            self._required(frame, "id")
        active = self.topic_subscriptions.get(sub_id)
        # (a non-durable subscription ends whatever durable headers say)
        delete = None if active and not active.durable else self._durable_name(frame, sub_id)
        if active is not None:
            if delete is not None and delete != active.name:
                raise ProtocolError(f"UNSUBSCRIBE: subscription {sub_id!r} is durable "
                                    f"subscription {active.name}, not {delete}")
            del self.topic_subscriptions[sub_id]
            sub = self.subscriptions.get(sub_id)
            if sub is not None:
                self._end_subscription(sub)
            if active.durable:
                self._release_durable(active.name)
            else:
                delete = active.name     # a non-durable subscription ends with its UNSUBSCRIBE
        elif delete is None:
            raise ProtocolError(f"UNSUBSCRIBE: no subscription {sub_id!r} on this connection")
        elif self.service.durable_in_use.get(delete) is not None:
            raise SubscriptionInUse(f"durable subscription {delete} is being consumed by "
                                    "another subscriber (MQRC 2429 SUBSCRIPTION_IN_USE)")
        if delete is None:
            self._receipt(frame, None)       # durable, kept: only its deliveries stop
            return None
        return self._delete_subscription(frame, delete)

    async def _delete_subscription(self, frame: Frame, name: str) -> None:
        await self._backouts_done(list(self.service.backouts))
        await self._pubsub().unsubscribe(name, user=self._principal)
        self._topic_step = (frame, name)

    # -- the connection's end ---------------------------------------------------------

    def _release_durable(self, name: str) -> None:
        if self.service.durable_in_use.get(name) is self:
            del self.service.durable_in_use[name]

    def _release_topic_subscription(self, ts: TopicSubscription) -> None:
        if ts.durable:
            self._release_durable(ts.name)
        else:
            self._spawn_topic_work(lambda before: self._unsubscribe_later(ts.name, before))

    async def _unsubscribe_later(self, name: str, before: list) -> None:
        await self._backouts_done(before)
        await self._pubsub().unsubscribe(name)

    def _end_topic_subscriptions(self) -> None:
        """The connection ends (its deliveries already ended and backed out):
        its durable subscriptions are free for another subscriber, its
        non-durable ones end once the backouts are done."""
        subs, self.topic_subscriptions = self.topic_subscriptions, {}
        for ts in subs.values():
            if ts.durable:
                self._release_durable(ts.name)
        if any(not ts.durable for ts in subs.values()):
            self._spawn_topic_work(self._end_owner)

    async def _end_owner(self, before: list) -> None:
        await self._backouts_done(before)
        await self._pubsub().end_owner(self._owner)

    @staticmethod
    async def _backouts_done(before: list) -> None:
        """The backouts begun ``before`` are over: a subscription's queue is
        deleted only once no unit of work holds a message of it."""
        if before:
            await asyncio.gather(*before, return_exceptions=True)

    def _spawn_topic_work(self, make) -> None:
        """Run ``make(before)`` as a task StompService.stop() awaits; ``before``
        lists the tasks begun until now (awaited in creation order, never in
        a circle)."""
        task = self.loop.create_task(make(list(self.service.backouts)))
        self.service.backouts.add(task)     # StompService.stop() awaits them too
        task.add_done_callback(self._topic_work_done)

    def _topic_work_done(self, task: asyncio.Task) -> None:
        self.service.backouts.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        # a stopping queue manager ends every non-durable subscription anyway;
        # one already gone (its owner's end and its own raced) is what was wanted
        if exc is not None and not isinstance(exc, (QueueManagerStopping, NoSubscription)):
            self.core.oplog.emit("HMQ9550W", f"STOMP connection {self.info.conn_id}: ending its "
                                 f"topic subscriptions failed: {exc!r}")
