"""The MQSC commands of publish/subscribe: DEFINE/ALTER/DELETE/DISPLAY TOPIC,
DEFINE/ALTER/DELETE/DISPLAY SUB, DISPLAY SBSTATUS, DISPLAY TPSTATUS,
DISPLAY PUBSUB and CLEAR TOPICSTR.

``PubSubCommands`` is a base of ``commands.Executor``, whose ``core`` it
uses; the work is the ``PubSub`` service's (``core.pubsub``). The grammar
is in ``mqsc.py``'s tables. Not here: the other commands (``commands.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..core.objects import object_node
from ..errors import HarbormqError, InvalidAttribute, UnknownObject
from ..pubsub.service import PubSub
from ..pubsub.status import Subscription
from ..pubsub.topics import matches
from . import mqsc
from .mqsc import Command, mq_date, mq_time

if TYPE_CHECKING:
    from ..core.engine import QueueManagerCore


class PubSubUnavailable(HarbormqError):
    msgid = "HMQ5805E"


def _expiry(value: str | None) -> int | None:
    """EXPIRY(UNLIMITED | tenths of a second) -> 0 (never) or the number."""
    if value is None:
        return None
    if str(value).upper() == "UNLIMITED":
        return 0
    if not str(value).isdigit() or not 0 < int(value) <= 999_999_999:
        raise InvalidAttribute(f"EXPIRY({value}) is not valid: UNLIMITED or 1..999999999 "
                               "(tenths of a second)")
    return int(value)


class PubSubCommands:
    """The publish/subscribe commands of the MQSC executor."""
    core: QueueManagerCore

    def pubsub_handlers(self) -> dict[tuple[str, str], Callable]:
        return {("DEFINE", "TOPIC"): self.define_topic, ("ALTER", "TOPIC"): self.alter_topic,
                ("DELETE", "TOPIC"): self.delete_topic, ("DISPLAY", "TOPIC"): self.display_topic,
                ("DEFINE", "SUB"): self.define_sub, ("ALTER", "SUB"): self.alter_sub,
                ("DELETE", "SUB"): self.delete_sub, ("DISPLAY", "SUB"): self.display_sub,
                ("DISPLAY", "SBSTATUS"): self.display_sbstatus,
                ("DISPLAY", "TPSTATUS"): self.display_tpstatus,
                ("DISPLAY", "PUBSUB"): self.display_pubsub,
                ("CLEAR", "TOPICSTR"): self.clear_topicstr}

    @property
    def pubsub(self) -> PubSub:
        ps = self.core.pubsub
        if ps is None:
            raise PubSubUnavailable(f"publish/subscribe has not started on queue manager "
                                    f"{self.core.name}")
        return ps

    # -- topic objects -----------------------------------------------------------------

    async def define_topic(self, cmd: Command) -> list[str]:
        replace = "REPLACE" in cmd.flags
        await self.pubsub.define_topic(cmd.name, dict(cmd.attrs), replace=replace)
        return [mqsc.format_message("HMQ8006I", "harbormq topic created" +
                                    (" (REPLACE)." if replace else "."))]

    async def alter_topic(self, cmd: Command) -> list[str]:
        await self.pubsub.alter_topic(cmd.name, dict(cmd.attrs))
        return [mqsc.format_message("HMQ8008I", "harbormq topic changed.")]

    async def delete_topic(self, cmd: Command) -> list[str]:
        await self.pubsub.delete_topic(cmd.name)
        return [mqsc.format_message("HMQ8007I", "harbormq topic deleted.")]

    def display_topic(self, cmd: Command) -> list[str]:
        out = []
        defs = sorted((d for d in self.core.objects.values() if d["type"] == "TOPIC"),
                      key=lambda d: d["name"])
        for d in defs:
            if not mqsc.generic_match(cmd.name, d["name"]):
                continue
            values = {"TOPIC": d["name"], "TYPE": "LOCAL", **d["attrs"]}
            if not mqsc.where_matches(cmd.where, values):
                continue
            shown = mqsc.select_attrs(cmd, mqsc.DISPLAY_TOPIC_ATTRS, ("TOPIC", "TYPE"),
                                      ("TOPICSTR",))
            out.append(mqsc.format_object("HMQ8633I", "Display topic details.",
                                          [(a, values.get(a, "")) for a in shown]))
        if not out:
            if "*" not in cmd.name:
                raise UnknownObject(f"harbormq topic {cmd.name} not found", queue=cmd.name)
            out.append(mqsc.format_message("HMQ8633I", "No topics found."))
        return out

    # -- subscriptions -----------------------------------------------------------------

    async def define_sub(self, cmd: Command) -> list[str]:
        a = cmd.attrs
        ps = self.pubsub
        if cmd.name in ps.subs:
            if "REPLACE" not in cmd.flags:
                raise InvalidAttribute(f"subscription {cmd.name} already exists (MQRC 2432 "
                                       "SUB_ALREADY_EXISTS); give REPLACE to alter it",
                                       msgid="HMQ2432E")
            return await self.alter_sub(cmd)
        if not a.get("TOPICSTR") and not a.get("TOPICOBJ"):
            raise InvalidAttribute(f"DEFINE SUB({cmd.name}) needs TOPICSTR or TOPICOBJ")
        await ps.subscribe(a.get("TOPICSTR"), name=cmd.name, durable=True,
                           selector=a.get("SELECTOR", ""), dest=a.get("DEST") or None,
                           destclass=a.get("DESTCLAS") or None,
                           expiry=_expiry(a.get("EXPIRY")), topicobj=a.get("TOPICOBJ") or None,
                           subtype="ADMIN")
        return [mqsc.format_message("HMQ8094I", "harbormq subscription created.")]

    async def alter_sub(self, cmd: Command) -> list[str]:
        a = cmd.attrs
        ps = self.pubsub
        sub = ps.find(cmd.name)
        for attr, have in (("TOPICSTR", sub.topic), ("TOPICOBJ", sub.topicobj),
                           ("DESTCLAS", sub.destclass), ("SELECTOR", sub.selector)):
            if attr in a and a[attr] != have:
                raise InvalidAttribute(f"subscription {cmd.name}: {attr} cannot be altered "
                                       f"(it is '{have}'); delete the subscription and define "
                                       "it again (MQRC 2435 ALTER_SUB_ERROR)",
                                       msgid="HMQ2435E")
        await ps.alter_subscription(cmd.name, dest=a.get("DEST") or None,
                                    expiry=_expiry(a.get("EXPIRY")))
        return [mqsc.format_message("HMQ8096I", "harbormq subscription changed.")]

    async def delete_sub(self, cmd: Command) -> list[str]:
        await self.pubsub.unsubscribe(cmd.name)
        return [mqsc.format_message("HMQ8095I", "harbormq subscription deleted.")]

    def _subs(self, cmd: Command) -> list[Subscription]:
        ps = self.pubsub
        if "*" not in cmd.name:
            return [ps.find(cmd.name)]
        return sorted((s for s in ps.subs.values() if mqsc.generic_match(cmd.name, s.name)),
                      key=lambda s: s.name)

    @staticmethod
    def sub_values(s: Subscription) -> dict:
        expiry = "UNLIMITED"
        if s.expires_ns:
            expiry = max(0, (s.expires_ns - time.time_ns()) // 100_000_000)
        return {"SUB": s.name, "SUBID": s.sub_id, "TOPICSTR": s.topic,
                "TOPICOBJ": s.topicobj, "DEST": s.dest, "DESTCLAS": s.destclass,
                "SELECTOR": s.selector, "EXPIRY": expiry,
                "DURABLE": "YES" if s.durable else "NO", "SUBTYPE": s.subtype,
                "SUBUSER": s.user, "CRDATE": mq_date(s.created_ns),
                "CRTIME": mq_time(s.created_ns), "ALTDATE": mq_date(s.altered_ns or s.created_ns),
                "ALTTIME": mq_time(s.altered_ns or s.created_ns),
                "LMSGDATE": mq_date(s.last_ns), "LMSGTIME": mq_time(s.last_ns),
                "NUMMSGS": s.delivered, "ACTCONN": s.owner}

    def _display_subs(self, cmd: Command, order: tuple, default: tuple, msgid: str,
                      title: str) -> list[str]:
        out = []
        for s in self._subs(cmd):
            values = self.sub_values(s)
            if not mqsc.where_matches(cmd.where, values):
                continue
            shown = mqsc.select_attrs(cmd, order, ("SUB",), default)
            out.append(mqsc.format_object(msgid, title, [(a, values[a]) for a in shown]))
        if not out:
            out.append(mqsc.format_message(msgid, "No subscriptions found."))
        return out

    def display_sub(self, cmd: Command) -> list[str]:
        return self._display_subs(cmd, mqsc.DISPLAY_SUB_ATTRS, ("SUBID", "TOPICSTR", "DEST",
                                                                 "DESTCLAS", "DURABLE"),
                                  "HMQ8096I", "Display subscription details.")

    def display_sbstatus(self, cmd: Command) -> list[str]:
        return self._display_subs(cmd, mqsc.SBSTATUS_ATTRS, mqsc.SBSTATUS_ATTRS,
                                  "HMQ8099I", "Display subscription status details.")

    # -- status --------------------------------------------------------------------------

    def display_tpstatus(self, cmd: Command) -> list[str]:
        """TYPE(TOPIC): each known topic string matching the name (which may use
        the wildcards) with its resolved attributes; TYPE(SUB): the
        subscriptions on them; TYPE(PUB): what has been published to them."""
        ps = self.pubsub
        ttype = (cmd.attrs.get("TYPE") or "TOPIC").upper()
        if ttype not in ("TOPIC", "SUB", "PUB"):
            raise InvalidAttribute(f"TYPE({ttype}) is not valid for DISPLAY TPSTATUS: use "
                                   "TOPIC, SUB or PUB")
        pattern = cmd.name

        def wanted(topic: str) -> bool:
            return topic == pattern or (topic != "" and "#" not in topic and
                                        "+" not in topic and matches(pattern, topic))
        out = []
        if ttype == "SUB":
            for s in sorted(ps.subs.values(), key=lambda s: (s.topic, s.name)):
                if s.topic != pattern and not wanted(s.topic):
                    continue
                values = dict(self.sub_values(s), TYPE="SUB")
                if mqsc.where_matches(cmd.where, values):
                    shown = mqsc.select_attrs(cmd, mqsc.TPSTATUS_SUB_ATTRS, ("TOPICSTR", "TYPE"),
                                              mqsc.TPSTATUS_SUB_ATTRS)
                    out.append(mqsc.format_object("HMQ8637I", "Display topic status details.",
                                                  [(a, values[a]) for a in shown]))
        elif ttype == "PUB":
            for topic, (count, last) in sorted(ps.published.items()):
                if not wanted(topic):
                    continue
                values = {"TOPICSTR": topic, "TYPE": "PUB", "LPUBDATE": mq_date(last),
                          "LPUBTIME": mq_time(last), "NUMPUBS": count}
                if mqsc.where_matches(cmd.where, values):
                    shown = mqsc.select_attrs(cmd, mqsc.TPSTATUS_PUB_ATTRS, ("TOPICSTR", "TYPE"),
                                              mqsc.TPSTATUS_PUB_ATTRS)
                    out.append(mqsc.format_object("HMQ8637I", "Display topic status details.",
                                                  [(a, values[a]) for a in shown]))
        else:
            retained = ps.retained()
            topics = set(ps.topics.by_topic) | set(retained) | set(ps.published) | \
                {s.topic for s in ps.subs.values()}
            for topic in sorted(t for t in topics if t and wanted(t)):
                node = ps.topics.closest(topic)
                values = {"TOPICSTR": topic, "TYPE": "TOPIC",
                          "ADMIN": node["name"] if node and
                          object_node(node["attrs"]["TOPICSTR"]) == topic else "",
                          **{a: ps.topics.resolve(topic, a)
                             for a in ("DURSUB", "PUB", "SUB", "DEFPSIST", "DEFPRTY")},
                          "RETAINED": "YES" if topic in retained else "NO",
                          "SUBCOUNT": sum(1 for s in ps.subs.values() if s.topic == topic),
                          "PUBCOUNT": ps.published.get(topic, [0])[0]}
                if mqsc.where_matches(cmd.where, values):
                    shown = mqsc.select_attrs(cmd, mqsc.TPSTATUS_TOPIC_ATTRS,
                                              ("TOPICSTR", "TYPE"), mqsc.TPSTATUS_TOPIC_ATTRS)
                    out.append(mqsc.format_object("HMQ8637I", "Display topic status details.",
                                                  [(a, values[a]) for a in shown]))
        if not out:
            out.append(mqsc.format_message("HMQ8637I", "No topic status found."))
        return out

    def display_pubsub(self, cmd: Command) -> list[str]:
        ps = self.pubsub
        ptype = (cmd.attrs.get("TYPE") or "LOCAL").upper()
        if ptype not in ("LOCAL", "ALL"):
            raise InvalidAttribute(f"TYPE({ptype}): this queue manager is in no hierarchy or "
                                   "cluster; use LOCAL or ALL")
        values = {"QMNAME": self.core.name, "TYPE": "LOCAL",
                  "STATUS": "ACTIVE" if not self.core.stopping else "STOPPING",
                  "SUBCOUNT": len(ps.subs), "TPCOUNT": len(ps.topics.by_topic) or 1,
                  "RETCOUNT": len(ps.retained())}
        shown = mqsc.select_attrs(cmd, mqsc.PUBSUB_ATTRS, ("QMNAME", "TYPE"), mqsc.PUBSUB_ATTRS)
        return [mqsc.format_object("HMQ8723I", "Display pub/sub status details.",
                                   [(a, values[a]) for a in shown])]

    async def clear_topicstr(self, cmd: Command) -> list[str]:
        clrtype = (cmd.attrs.get("CLRTYPE") or "RETAINED").upper()
        if clrtype != "RETAINED":
            raise InvalidAttribute(f"CLRTYPE({clrtype}) is not valid: RETAINED")
        scope = (cmd.attrs.get("SCOPE") or "LOCAL").upper()
        if scope != "LOCAL":
            raise InvalidAttribute(f"SCOPE({scope}) is not valid: LOCAL")
        found = await self.pubsub.clear_retained(cmd.name)
        text = "retained publication cleared." if found else \
            f"no retained publication on topic string '{cmd.name}'."
        return [mqsc.format_message("HMQ8634I", f"harbormq {text}")]
