"""``PubSub``: the publish/subscribe service of one queue manager, over its
core (``core.pubsub`` once started). The front ends (STOMP's ``/topic/``,
MQSC, the API) call it on the queue manager's loop.

The contract:

* ``await PubSub.start(core)`` (``qmgr/`` calls it once restart recovery is
  over, before any listener opens): reads back the TOPIC objects, the
  durable subscriptions and the retained publications, deletes orphan
  managed queues, and says so in the operator log (HMQ5801I).
  ``await ready()`` creates the status queues and SYSTEM.BASE.TOPIC where
  missing (the server calls it before its listeners open; a subscribe, a
  topic definition and ``publish(retain=True)`` call it too).
* ``publish_nowait(topic, msg, uow, *, user, retain) -> (count, forced)``:
  one synchronous step. ``msg`` (its priority and persistence resolved:
  ``topic_defaults``) is put on the queue of every matching subscription,
  under ``uow``, or, without one, atomically on its own with ``forced`` the
  future of the force to await before acknowledging (None: nothing to
  wait for). ``count`` is the number of subscriptions it went to; the
  message carries the property ``MQTopicString``. ``retain``: it also
  replaces the topic's retained publication, in the same unit of work.
  ``async publish(...)`` does both steps.
* ``await subscribe(topic, *, name, durable, selector, user, owner, dest,
  destclass, expiry, topicobj) -> Subscription``: ``sub.dest`` is the queue
  a consumer reads (a managed queue, SYSTEM.MANAGED.DURABLE.<id> or
  SYSTEM.MANAGED.NDURABLE.<id>, or the provided DEST). A durable
  subscription needs a name; subscribing again under the name of a
  subscription on the same topic string resumes it (the same object). The
  matching retained publications are on its queue first, marked
  ``MQIsRetained``.
* ``await unsubscribe(name)`` deletes one (its managed queue with it);
  ``await end_owner(owner)`` deletes every non-durable subscription of a
  connection (call it at the connection's end).
* ``user``: a ``security.Principal`` whose authority (PUB, SUB on the TOPIC
  objects at or above the topic, as MQ checks them) is checked; None: the
  caller is trusted (the owner, MQSC).

Delivery follows MQ's defaults PMSGDLV(ALLDUR) and NPMSGDLV(ALLAVAIL): a
persistent publication fails (MQRC 2502, nothing put) when a durable
subscription's queue cannot take it; any other subscription that cannot
take one is passed over. Not here: the tree (``topics.py``), the status
queues' layout (``status.py``), the MQSC commands (``admin/``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import os
import time
from typing import TYPE_CHECKING

from ..core.msgid import new_msg_id
from ..core.objects import (
    BASE_TOPIC,
    BASE_TOPIC_ATTRS,
    DURABLE_SUBSCRIBER_QUEUE,
    MANAGED_QUEUE_PREFIX,
    QLOCAL_DEFAULTS,
    RETAINED_PUB_QUEUE,
    object_node,
)
from ..core.queue import MessageMatch
from ..core.selectors import compile_selector
from ..crashpoints import crash_point
from ..errors import HarbormqError, ObjectExists, ObjectInUse, PutInhibited, UnknownObject
from ..log.records import Message
from ..security import Security
from ..security.authority import not_authorized
from .errors import (
    DurabilityNotAllowed,
    NoSubscription,
    PublicationFailure,
    SubInhibited,
    SubNameError,
    SubscriptionExists,
    TopicStringError,
)
from .status import (
    RETAINED_PROPERTY,
    STATUS_QUEUE_ATTRS,
    STATUS_QUEUES,
    TOPIC_PROPERTY,
    Subscription,
    read_all,
    read_bodies,
    retained_msg_id,
    status_message,
    subscription_msg_id,
)
from .topics import (
    TopicAttributes,
    TopicTree,
    admin_node_of,
    matches,
    object_levels,
    publish_levels,
    subscribe_levels,
)

if TYPE_CHECKING:
    from ..core.engine import QueueManagerCore
    from ..core.uow import UnitOfWork
    from ..security import Principal

MANAGED_DURABLE = MANAGED_QUEUE_PREFIX + "DURABLE."
MANAGED_NDURABLE = MANAGED_QUEUE_PREFIX + "NDURABLE."
#: a managed queue takes its attributes from this queue when it is defined
#: (MQ's model for durable subscriptions), else from the defaults below
DURABLE_MODEL = "SYSTEM.DURABLE.MODEL.QUEUE"
MANAGED_QUEUE_ATTRS = {"DEFPSIST": "YES", "MAXDEPTH": 999_999_999}
#: how long an unsubscribe keeps trying to delete a managed queue its consumer
#: still holds open (then the next restart deletes it as an orphan)
DELETE_RETRY_S = 60


def _is_remote(core: QueueManagerCore, name: str) -> bool:
    """A put to ``name`` is wrapped for a transmission queue (a QREMOTE, or an
    alias of one)."""
    return core.output_queue(name).header is not None


def put_to_queues(core: QueueManagerCore, queues: list[str], msg: Message,
                  uow: UnitOfWork | None):
    """The one place a publication reaches its queues: the local ones through
    the core's ``publish_nowait``, one log record holding the body once; a
    remote queue (a DEST on another queue manager) by a put of its own, as its
    copy is wrapped for a transmission queue (``records_needed`` counts them).
    Returns the force future of a persistent publication outside a unit of
    work (None under one, or non-persistent)."""
    remote = [name for name in queues if _is_remote(core, name)]
    local = [name for name in queues if name not in remote]
    forced = core.publish_nowait(local, msg, uow)[1] if local else None
    for name in remote:
        forced = core.put_nowait(name, dataclasses.replace(msg), uow)[1] or forced
    return forced


def records_needed(core: QueueManagerCore, queues: list[str]) -> int:
    """How many log records ``put_to_queues`` writes for ``queues``."""
    remote = sum(1 for name in queues if _is_remote(core, name))
    return remote + (1 if len(queues) > remote else 0)


def retained_copy(m: Message, *, persistent: bool) -> Message:
    """A retained publication as a new subscription receives it."""
    return Message(body=m.body, correl_id=m.correl_id, priority=m.priority,
                   persistent=persistent, expiry_ns=m.expiry_ns, reply_to=m.reply_to,
                   format=m.format, properties=dict(m.properties, **{RETAINED_PROPERTY: True}))


class PubSub:
    def __init__(self, core: QueueManagerCore, security: Security | None = None):
        self.core = core
        self.security = security
        self.tree: TopicTree[Subscription] = TopicTree()
        self.subs: dict[str, Subscription] = {}
        self.topics = TopicAttributes()
        self.by_owner: dict[str, set[str]] = {}
        #: managed queue -> the subscription it belongs to
        self.managed_by: dict[str, str] = {}
        #: names being created or deleted (between their awaits)
        self._busy: set[str] = set()
        self._ids = 0
        self.publications = 0
        #: topic string -> [publications, the last one's time] (DISPLAY TPSTATUS)
        self.published: dict[str, list[int]] = {}
        self.started_s = 0.0

    # -- start -------------------------------------------------------------------------

    @classmethod
    async def start(cls, core: QueueManagerCore, *, security: Security | None = None
                    ) -> "PubSub":
        """Read back what exists (nothing is created: see ``ready``)."""
        t0 = time.monotonic()
        self = cls(core, security if security is not None else Security.for_config(core.config))
        for d in core.objects.values():
            if d["type"] == "TOPIC":
                self.topics.set(d)
        durable = self._load_subscriptions()
        if durable:
            # what is loaded now lives as long as the queue manager: out of the
            # collector's sight, a million subscriptions no longer make every
            # full collection (and the publications that trigger it) slow
            gc.freeze()
        retained = core.queues[RETAINED_PUB_QUEUE].curdepth \
            if RETAINED_PUB_QUEUE in core.queues else 0
        orphans = await self._delete_orphans()
        self.started_s = time.monotonic() - t0
        if durable or retained or orphans or len(self.topics.by_topic) > 1:
            core.oplog.emit("HMQ5801I", f"publish/subscribe started: {durable} durable "
                            f"subscriptions, {retained} retained publications and "
                            f"{len(self.topics.by_topic)} topic objects read back in "
                            f"{self.started_s:.2f} s" +
                            (f"; {orphans} orphan managed queues deleted" if orphans else ""))
        core.pubsub = self
        return self

    async def ready(self) -> None:
        """Create the status queues and SYSTEM.BASE.TOPIC where missing: at the
        server's start (before its listeners open) and at the first
        subscription or topic definition (an embedded queue manager that never
        uses publish/subscribe has none of them, as it has no channel sync
        queue)."""
        core = self.core
        for name in STATUS_QUEUES:
            if name not in core.queues:
                await core.define_queue(name, dict(STATUS_QUEUE_ATTRS, DESCR=(
                    "durable subscriptions" if name == DURABLE_SUBSCRIBER_QUEUE else
                    "retained publications")))
        if f"TOPIC:{BASE_TOPIC}" not in core.objects:
            self.topics.set(await core.define_object("TOPIC", BASE_TOPIC, BASE_TOPIC_ATTRS))

    def _load_subscriptions(self) -> int:
        if DURABLE_SUBSCRIBER_QUEUE not in self.core.queues:
            return 0
        q = self.core.queue(DURABLE_SUBSCRIBER_QUEUE)
        n = 0
        decode, attach = Subscription.decode, self._attach
        for body in read_bodies(q):
            try:
                sub = decode(body)
            except (ValueError, IndexError, UnicodeDecodeError) as exc:
                self.core.oplog.emit("HMQ5802E", f"a message on {DURABLE_SUBSCRIBER_QUEUE} is "
                                     f"not a subscription ({exc!r}); it is left there")
                continue
            attach(sub)
            n += 1
        return n

    async def _delete_orphans(self) -> int:
        """Managed queues no subscription names: a crash between a managed
        queue's creation and its status message (or between a status
        message's removal and its queue's deletion); every non-durable one."""
        orphans = [n for n in self.core.queues
                   if n.startswith((MANAGED_DURABLE, MANAGED_NDURABLE)) and
                   n not in self.managed_by]
        for name in orphans:
            depth = self.core.queues[name].curdepth
            await self.core.delete_queue(name, purge=True)
            self.core.oplog.emit("HMQ5803W", f"managed queue {name} belongs to no subscription "
                                 f"(a subscription's creation or deletion was cut short, or it "
                                 f"was non-durable); deleted with its {depth} messages")
        return len(orphans)

    # -- topic objects -----------------------------------------------------------------

    async def define_topic(self, name: str, attrs: dict, *, replace: bool = False) -> dict:
        core = self.core
        await self.ready()
        key = f"TOPIC:{name}"
        old = core.objects.get(key)
        topicstr = attrs.get("TOPICSTR")
        if old is not None and replace:
            if topicstr is not None and topicstr != old["attrs"]["TOPICSTR"]:
                raise TopicStringError(f"topic {name}: TOPICSTR cannot change (it is "
                                       f"'{old['attrs']['TOPICSTR']}'); delete and define it")
        elif old is None or not replace:
            if old is not None:
                raise ObjectExists(f"topic {name} already exists (use REPLACE to change it) "
                                   "(MQRC 2100)", queue=name)
            if not topicstr:
                raise TopicStringError(f"DEFINE TOPIC({name}) needs TOPICSTR, the node of the "
                                       "topic tree it stands for")
            object_levels(topicstr)
            other = self.topics.by_topic.get(object_node(topicstr))
            if other is not None:
                raise ObjectExists(f"topic string '{topicstr}' already has topic object "
                                   f"{other['name']} (MQRC 2100)", queue=name)
        d = await core.define_object("TOPIC", name, attrs, replace=replace)
        self.topics.set(d)
        return d

    async def alter_topic(self, name: str, attrs: dict) -> dict:
        await self.ready()
        old = self.core.definition("TOPIC", name)
        if "TOPICSTR" in attrs and attrs["TOPICSTR"] != old["attrs"]["TOPICSTR"]:
            raise TopicStringError(f"topic {name}: TOPICSTR cannot be altered; delete the topic "
                                   "object and define it again")
        d = await self.core.alter_object("TOPIC", name, attrs)
        self.topics.set(d)
        return d

    async def delete_topic(self, name: str) -> None:
        if name == BASE_TOPIC:
            raise ObjectInUse(f"{BASE_TOPIC} is the root of the topic tree and cannot be "
                              "deleted", queue=name)
        d = self.core.definition("TOPIC", name)
        await self.core.delete_object("TOPIC", name)
        self.topics.drop(d["attrs"]["TOPICSTR"])

    def topic_string(self, topicobj: str | None, topic: str | None) -> str:
        """MQ's rule: the TOPIC object's TOPICSTR, then '/' and ``topic``."""
        if not topicobj:
            return topic or ""
        base = object_node(self.core.definition("TOPIC", topicobj)["attrs"]["TOPICSTR"])
        if not topic:
            return base
        return f"{base}/{topic}" if base else topic

    def topic_defaults(self, topic: str, priority: int | None, persistent: bool | None):
        """A publication's priority and persistence where its publisher left
        them to the topic (DEFPRTY, DEFPSIST resolved up the tree)."""
        if priority is None:
            priority = int(self.topics.resolve(topic, "DEFPRTY"))
        if persistent is None:
            persistent = self.topics.resolve(topic, "DEFPSIST") == "YES"
        return priority, persistent

    def _authorize(self, user: Principal | None, topic: str, authority: str) -> None:
        """MQ's rule: the authority held on any TOPIC object at or above the
        topic's node grants it."""
        if user is None or user.owner or self.security is None:
            return
        nodes = list(self.topics.nodes_above(topic))
        for d in nodes:
            if self.security.check(user, "TOPIC", d["name"], authority):
                return
        raise not_authorized(user.user, "TOPIC", nodes[0]["name"] if nodes else BASE_TOPIC,
                             authority)

    # -- publish -----------------------------------------------------------------------

    async def publish(self, topic: str, msg: Message, uow: UnitOfWork | None = None, *,
                      user: Principal | None = None, retain: bool = False) -> int:
        if retain:
            await self.ready()
        count, forced = self.publish_nowait(topic, msg, uow, user=user, retain=retain)
        if forced is not None:
            await forced
        return count

    def publish_nowait(self, topic: str, msg: Message, uow: UnitOfWork | None = None, *,
                       user: Principal | None = None, retain: bool = False):
        core = self.core
        core.check_running()
        levels = publish_levels(topic)
        if self.topics.resolve(topic, "PUB") == "INHIBITED":
            node = self.topics.closest(topic)
            raise PutInhibited(f"publications are inhibited on topic '{topic}' (PUB(INHIBITED) "
                               f"on topic object {node['name'] if node else BASE_TOPIC}) "
                               "(MQRC 2051 PUT_INHIBITED)", queue=topic)
        self._authorize(user, topic, "PUB")
        msg.properties = dict(msg.properties, **{TOPIC_PROPERTY: topic})
        msg.raw = msg._key = None
        now = time.time_ns()
        # the header fields a subscription's selector may read (JMSMessageID,
        # JMSTimestamp) are set before the subscriptions are judged
        msg.msg_id = msg.msg_id or new_msg_id()
        msg.put_time_ns = now
        kept, passed_over = [], []      # queues taking the message as it is / non-persistent
        delivered = []
        for sub in self.tree.match(topic, levels):
            if sub.expires_ns and sub.expires_ns <= now:
                self._expire(sub)
                continue
            if sub.selector and not self._selects(sub, msg):
                continue
            why = self._cannot_take(sub.dest, msg)
            if why is not None:
                if sub.durable and msg.persistent:
                    raise PublicationFailure(
                        f"publication to '{topic}' failed: durable subscription {sub.name} "
                        f"cannot take it on queue {sub.dest}: {why}; nothing was published "
                        "(MQRC 2502 PUBLICATION_FAILURE)", queue=sub.dest)
                continue
            if msg.persistent and not sub.durable and sub.managed:
                passed_over.append(sub.dest)    # a temporary queue: non-persistent copies
            else:
                kept.append(sub.dest)
            delivered.append(sub)
        parts = [(queues, m) for queues, m in (
            (kept, msg), (passed_over, dataclasses.replace(msg, persistent=False))) if queues]
        # more than one record outside a unit of work (a retained publication
        # replaced is a get and a put): one of our own makes them atomic, and
        # its commit is the force the publisher waits for
        steps = sum(records_needed(core, queues) for queues, _m in parts) + (2 if retain else 0)
        own = None
        if uow is None and steps > 1:
            own = uow = core.begin(owner="publish")
        forced = None
        try:
            if retain:
                self._retain(topic, msg, uow)
            for queues, m in parts:
                forced = put_to_queues(core, queues, m, uow) or forced
        except BaseException:
            if own is not None:
                core.undo(own)
            raise
        if own is not None:
            forced = core.commit_nowait(own)
        for sub in delivered:
            sub.delivered += 1
            sub.last_ns = now
        self.publications += 1
        stats = self.published.get(topic)
        if stats is None:
            self.published[topic] = [1, now]
        else:
            stats[0] += 1
            stats[1] = now
        return len(delivered), forced

    @staticmethod
    def _selects(sub: Subscription, msg: Message) -> bool:
        """The subscription's SELECTOR is true of the publication (SQL-92 on its
        properties and header fields, ``core/selectors.py``); compiled on first
        use after a restart."""
        if sub.compiled is None:
            sub.compiled = compile_selector(sub.selector)
        return sub.compiled.matches(msg)

    def _cannot_take(self, dest: str, msg: Message) -> str | None:
        """Why a put of ``msg`` to ``dest`` would fail now (None: it would not)."""
        core = self.core
        try:
            target = core.output_queue(dest)
            core.check_put_to(target, msg)
        except HarbormqError as exc:
            return exc.message
        if target.queue.full:
            return f"queue {target.queue.name} is full (MQRC 2053 Q_FULL)"
        return None

    def _retain(self, topic: str, msg: Message, uow: UnitOfWork) -> None:
        """Replace the topic's retained publication under ``uow`` (a
        non-persistent one is lost at a restart, as in MQ)."""
        core = self.core
        if RETAINED_PUB_QUEUE not in core.queues:
            raise UnknownObject(f"a retained publication needs {RETAINED_PUB_QUEUE}, which "
                                "this queue manager does not have yet: 'await "
                                "pubsub.ready()' (the server does at its start) or publish "
                                "with 'await pubsub.publish(...)' once", queue=RETAINED_PUB_QUEUE)
        mid = retained_msg_id(topic)
        while core.get_nowait(RETAINED_PUB_QUEUE, uow, match=MessageMatch(msg_id=mid))[0]:
            pass
        core.put_nowait(RETAINED_PUB_QUEUE, dataclasses.replace(msg, msg_id=mid), uow)

    def retained(self, pattern: str | None = None) -> dict[str, Message]:
        """The retained publications (topic string -> message) whose topic
        matches ``pattern`` (every one when None); the newest of a topic."""
        out: dict[str, Message] = {}
        if RETAINED_PUB_QUEUE not in self.core.queues:
            return out
        for m in read_all(self.core.queue(RETAINED_PUB_QUEUE)):
            topic = m.properties.get(TOPIC_PROPERTY)
            if not topic or (pattern is not None and not matches(pattern, topic)):
                continue
            if topic not in out or out[topic].put_time_ns <= m.put_time_ns:
                out[topic] = m
        return out

    async def clear_retained(self, topic: str) -> bool:
        """CLEAR TOPICSTR(...) CLRTYPE(RETAINED): True when there was one."""
        publish_levels(topic)
        core = self.core
        if RETAINED_PUB_QUEUE not in core.queues:
            return False
        uow = core.begin(owner="clear retained")
        found = False
        mid = retained_msg_id(topic)
        while core.get_nowait(RETAINED_PUB_QUEUE, uow, match=MessageMatch(msg_id=mid))[0]:
            found = True
        await core.commit(uow)
        return found

    # -- subscribe ---------------------------------------------------------------------

    def _new_id(self) -> str:
        self._ids += 1
        return os.urandom(6).hex().upper() + f"{self._ids:04X}"

    async def subscribe(self, topic: str | None, *, name: str | None = None,
                        durable: bool = False, selector: str = "",
                        user: Principal | None = None, owner: str = "",
                        dest: str | None = None, destclass: str | None = None,
                        expiry: int | None = None, topicobj: str | None = None,
                        subtype: str = "API") -> Subscription:
        core = self.core
        core.check_running()
        topic = self.topic_string(topicobj, topic)
        subscribe_levels(topic)
        # a selector that does not parse: MQRC 2459 naming the position
        compiled = compile_selector(selector) if selector else None
        if durable and not name:
            raise SubNameError("a durable subscription needs a name (MQRC 2440 "
                               "SUB_NAME_ERROR)")
        if name is not None and (not isinstance(name, str) or not name or len(name) > 10_240
                                 or "\0" in name):
            raise SubNameError(f"subscription name {str(name)[:40]!r} is not valid: 1 to "
                               "10240 characters, no NUL (MQRC 2440 SUB_NAME_ERROR)")
        existing = self.subs.get(name) if name else None
        if existing is not None:
            if existing.durable == durable and existing.topic == topic:
                self._authorize(user, admin_node_of(topic), "SUB")
                return existing      # resumed
            raise SubscriptionExists(f"subscription {name} already exists on topic string "
                                     f"'{existing.topic}'" +
                                     (" (durable)" if existing.durable else "") +
                                     "; unsubscribe it first (MQRC 2432 SUB_ALREADY_EXISTS)")
        node = admin_node_of(topic)
        if self.topics.resolve(node, "SUB") == "INHIBITED":
            raise SubInhibited(f"subscriptions are inhibited on topic '{topic}' "
                               "(SUB(INHIBITED)) (MQRC 2503 SUB_INHIBITED)")
        if durable and self.topics.resolve(node, "DURSUB") != "YES":
            raise DurabilityNotAllowed(f"durable subscriptions are not allowed on topic "
                                       f"'{topic}' (DURSUB(NO)) (MQRC 2436 "
                                       "DURABILITY_NOT_ALLOWED)")
        self._authorize(user, node, "SUB")
        destclass = (destclass or ("PROVIDED" if dest else "MANAGED")).upper()
        if destclass not in ("MANAGED", "PROVIDED"):
            raise SubscriptionExists(f"DESTCLAS({destclass}) is not valid: MANAGED or PROVIDED",
                                     msgid="HMQ8405E")
        if destclass == "PROVIDED":
            if not dest:
                raise UnknownObject("DESTCLAS(PROVIDED) needs DEST, the queue the "
                                    "publications go to (MQRC 2085)")
            core.output_queue(dest)      # UnknownObject (MQRC 2085) names it
        elif dest:
            raise UnknownObject(f"DEST({dest}) is given with DESTCLAS(MANAGED): give "
                                "DESTCLAS(PROVIDED), or no DEST for a managed queue")
        name = name or f"{owner or 'API'}:{self._new_id()}"
        await self.ready()
        if name in self._busy:
            raise SubscriptionExists(f"subscription {name} is being created or deleted "
                                     "(MQRC 2429 SUBSCRIPTION_IN_USE)")
        sub = Subscription(name, topic, dest or "", destclass, durable, subtype,
                           selector=selector, compiled=compiled,
                           expires_ns=time.time_ns() + expiry * 100_000_000 if expiry else 0,
                           user=user.user if user else "", owner="" if durable else owner,
                           topicobj=topicobj or "", sub_id=os.urandom(24).hex().upper())
        self._busy.add(name)
        try:
            if sub.managed:
                sub.dest = await self._create_managed_queue(sub)
                crash_point("pubsub.managed_queue_made")
            await self._commit_subscription(sub)
        finally:
            self._busy.discard(name)
        return sub

    async def _create_managed_queue(self, sub: Subscription) -> str:
        """The queue first, forced (a crash after it leaves an orphan the next
        start deletes), then the subscription's status message."""
        prefix = MANAGED_DURABLE if sub.durable else MANAGED_NDURABLE
        name = prefix + self._new_id()
        model = self.core.objects.get(DURABLE_MODEL)
        attrs = {k: v for k, v in (model["attrs"] if model else MANAGED_QUEUE_ATTRS).items()
                 if k in QLOCAL_DEFAULTS}
        attrs["DESCR"] = f"managed queue of subscription {sub.name}"[:64]
        await self.core.define_queue(name, attrs)
        return name

    async def _commit_subscription(self, sub: Subscription) -> None:
        """The status message (durable) and the retained publications, in one
        unit of work; the subscription takes publications from its commit on."""
        core = self.core
        retained = self.retained(sub.topic)
        if not sub.durable and not retained:
            self._attach(sub)
            return
        uow = core.begin(owner=f"subscribe {sub.name[:64]}")
        try:
            if sub.durable:
                core.put_nowait(DURABLE_SUBSCRIBER_QUEUE, status_message(sub), uow)
            temporary = not sub.durable and sub.managed
            for m in sorted(retained.values(), key=lambda m: m.put_time_ns):
                core.put_nowait(sub.dest, retained_copy(
                    m, persistent=m.persistent and not temporary), uow)
            forced = core.commit_nowait(uow)
        except BaseException:
            if uow.state == "active":
                core.undo(uow)
            if sub.managed:
                await self._drop_queue(sub.dest)
            raise
        self._attach(sub)     # in the commit's step: no publication comes before it
        if forced is not None:
            await forced

    def _attach(self, sub: Subscription) -> None:
        self.subs[sub.name] = sub
        self.tree.add(sub.topic, sub.name, sub)
        if sub.destclass == "MANAGED":
            self.managed_by[sub.dest] = sub.name
        if sub.owner:
            self.by_owner.setdefault(sub.owner, set()).add(sub.name)

    def _detach(self, sub: Subscription) -> None:
        if self.subs.get(sub.name) is sub:
            del self.subs[sub.name]
            self.tree.remove(sub.topic, sub.name)
            if self.managed_by.get(sub.dest) == sub.name:
                del self.managed_by[sub.dest]
        if sub.owner:
            names = self.by_owner.get(sub.owner)
            if names is not None:
                names.discard(sub.name)
                if not names:
                    del self.by_owner[sub.owner]

    def check_deletable(self, queue: str) -> None:
        """(the core, at DELETE QLOCAL) A managed queue goes with its
        subscription only, as in MQ."""
        name = self.managed_by.get(queue)
        if name is not None:
            raise ObjectInUse(f"queue {queue} is the managed queue of subscription {name}: "
                              f"delete the subscription (DELETE SUB) and it goes with it "
                              "(MQRC 2042 OBJECT_IN_USE)", queue=queue)

    def find(self, name: str) -> Subscription:
        sub = self.subs.get(name)
        if sub is None:
            raise NoSubscription(f"subscription {name} does not exist (MQRC 2428 "
                                 "NO_SUBSCRIPTION)")
        return sub

    async def alter_subscription(self, name: str, *, dest: str | None = None,
                                 expiry: int | None = None) -> Subscription:
        """ALTER SUB: a provided DEST, the EXPIRY (the status message replaced in
        one unit of work)."""
        core = self.core
        core.check_running()
        sub = self.find(name)
        changed = dataclasses.replace(sub)
        if dest is not None and dest != sub.dest:
            if sub.managed:
                raise UnknownObject(f"subscription {name} has a managed queue: its DEST cannot "
                                    "change")
            core.output_queue(dest)
            changed.dest = dest
        if expiry is not None:
            changed.expires_ns = time.time_ns() + expiry * 100_000_000 if expiry else 0
        changed.altered_ns = time.time_ns()
        if changed.durable:
            uow = core.begin(owner=f"alter subscription {name[:64]}")
            core.get_nowait(DURABLE_SUBSCRIBER_QUEUE, uow,
                            match=MessageMatch(msg_id=subscription_msg_id(name)))
            core.put_nowait(DURABLE_SUBSCRIBER_QUEUE, status_message(changed), uow)
            forced = core.commit_nowait(uow)
        else:
            forced = None
        self._detach(sub)
        self._attach(changed)
        if forced is not None:
            await forced
        return changed

    async def unsubscribe(self, name: str, *, user: Principal | None = None) -> None:
        """Delete a subscription: it takes no more publications; its status
        message goes (forced), then its managed queue with what is on it."""
        core = self.core
        core.check_running()
        sub = self.find(name)
        if name in self._busy:
            raise SubscriptionExists(f"subscription {name} is being created or deleted "
                                     "(MQRC 2429 SUBSCRIPTION_IN_USE)")
        self._busy.add(name)
        try:
            self._detach(sub)
            if sub.durable:
                _msg, forced = core.get_nowait(DURABLE_SUBSCRIBER_QUEUE, None,
                                               match=MessageMatch(
                                                   msg_id=subscription_msg_id(name)))
                if forced is not None:
                    await forced
            if sub.managed:
                crash_point("pubsub.status_removed")
                await self._drop_queue(sub.dest)
        finally:
            self._busy.discard(name)

    async def _drop_queue(self, name: str) -> None:
        """Delete a managed queue; while a consumer still has it open, try again
        in the background (a restart deletes it as an orphan otherwise)."""
        try:
            await self.core.delete_queue(name, purge=True)
        except ObjectInUse:
            self.core.spawn(self._drop_later(name))
        except UnknownObject:
            pass

    async def _drop_later(self, name: str) -> None:
        for _ in range(DELETE_RETRY_S):
            await asyncio.sleep(1)
            if name not in self.core.queues or self.core.stopping:
                return
            try:
                await self.core.delete_queue(name, purge=True)
                return
            except ObjectInUse:
                continue
        self.core.oplog.emit("HMQ5804W", f"managed queue {name} of a deleted subscription is "
                             f"still in use after {DELETE_RETRY_S} s; the next restart "
                             "deletes it")

    async def end_owner(self, owner: str) -> int:
        """The connection ``owner`` ended: its non-durable subscriptions end."""
        names = sorted(self.by_owner.get(owner, ()))
        for name in names:
            if name in self.subs:
                await self.unsubscribe(name)
        return len(names)

    def _expire(self, sub: Subscription) -> None:
        """A subscription past its EXPIRY is deleted when met."""
        if sub.name not in self._busy:
            self._detach(sub)
            self.subs[sub.name] = sub        # until the unsubscribe has it
            self.core.spawn(self.unsubscribe(sub.name))
