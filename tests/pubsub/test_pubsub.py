"""Publish/subscribe on an embedded queue manager: publications under units of
work, retained publications, durable and non-durable subscriptions across a
restart, orphan managed queues, authority, and every bad input of issue 29
with its clear error (nothing lost)."""

from __future__ import annotations

import pytest
from support.oplog import operator_log

from harbormq.core.objects import DURABLE_SUBSCRIBER_QUEUE, RETAINED_PUB_QUEUE
from harbormq.core.selectors import SelectorError
from harbormq.errors import PutInhibited, UnknownObject
from harbormq.log.records import Message
from harbormq.pubsub.errors import (
    DurabilityNotAllowed,
    NoSubscription,
    PublicationFailure,
    SubInhibited,
    SubNameError,
    SubscriptionExists,
    TopicStringError,
)
from harbormq.security import Principal, Security
from harbormq.security.errors import NotAuthorized


@pytest.fixture
def qm(make_qm, open_qm):
    make_qm()
    return open_qm()


def ps(qm):
    return qm.core.pubsub


def sub(qm, topic, **kw):
    return qm._call(ps(qm).subscribe(topic, **kw))


def pub(qm, topic, body, *, persistent=True, retain=False, user=None) -> int:
    return qm._call(ps(qm).publish(topic, Message(body.encode(), persistent=persistent),
                                   user=user, retain=retain))


def bodies(qm, queue) -> list[str]:
    return [m.body.decode() for m in qm.browse(queue)]


def test_a_publication_reaches_every_matching_subscription_with_its_topic(qm):
    exact = sub(qm, "news/sport", name="EXACT", durable=True)
    wild = sub(qm, "news/#", name="WILD", durable=True)
    other = sub(qm, "weather/+", name="OTHER", durable=True)
    assert pub(qm, "news/sport", "goal") == 2
    assert bodies(qm, exact.dest) == bodies(qm, wild.dest) == ["goal"]
    assert bodies(qm, other.dest) == []
    msg = qm.browse(wild.dest)[0]
    assert msg.properties["MQTopicString"] == "news/sport" and msg.persistent
    assert pub(qm, "nobody/listens", "x") == 0


def test_publish_in_a_unit_of_work_commit_on_all_backout_on_none(qm):
    subs = [sub(qm, "orders/#", name=f"S{i}", durable=True) for i in range(3)]
    core = qm.core

    async def publish_then(commit: bool, body: bytes):
        uow = core.begin("test")
        count, forced = ps(qm).publish_nowait("orders/new", Message(body), uow)
        assert count == 3 and forced is None
        # nothing is visible before the outcome
        assert all(not core.browse(s.dest) for s in subs)
        if commit:
            await core.commit(uow)
        else:
            await core.backout(uow)
    qm._call(publish_then(False, b"backed-out"))
    assert all(bodies(qm, s.dest) == [] for s in subs)
    qm._call(publish_then(True, b"committed"))
    assert all(bodies(qm, s.dest) == ["committed"] for s in subs)


def test_a_retained_publication_comes_first_to_a_new_subscription_and_is_replaced(qm):
    assert pub(qm, "prices/gold", "1800", retain=True) == 0
    assert pub(qm, "prices/gold", "1850", retain=True) == 0      # replaces it
    pub(qm, "prices/silver", "24", retain=True)
    s = sub(qm, "prices/gold", name="GOLD", durable=True)
    pub(qm, "prices/gold", "1900")                               # not retained
    msgs = qm.browse(s.dest)
    assert [m.body for m in msgs] == [b"1850", b"1900"]
    assert msgs[0].properties["MQIsRetained"] is True
    assert "MQIsRetained" not in msgs[1].properties
    assert qm.core.queue(RETAINED_PUB_QUEUE).curdepth == 2        # one per topic string
    allp = sub(qm, "prices/+", name="ALL", durable=True)
    assert sorted(bodies(qm, allp.dest)) == ["1850", "24"]
    assert qm._call(ps(qm).clear_retained("prices/gold")) is True
    assert qm._call(ps(qm).clear_retained("prices/gold")) is False
    assert sorted(ps(qm).retained()) == ["prices/silver"]


def test_a_retained_publication_backed_out_leaves_the_old_one(qm):
    pub(qm, "t/r", "old", retain=True)
    core = qm.core

    async def retain_then_backout():
        uow = core.begin("test")
        ps(qm).publish_nowait("t/r", Message(b"new"), uow, retain=True)
        await core.backout(uow)
    qm._call(retain_then_backout())
    assert [m.body for m in ps(qm).retained().values()] == [b"old"]


def test_durable_subscriptions_and_retained_publications_survive_a_restart(make_qm, open_qm,
                                                                          home):
    make_qm()
    qm = open_qm()
    durable = sub(qm, "a/#", name="KEEP", durable=True)
    provided_q = "MINE"
    qm.define_queue(provided_q, DEFPSIST="YES")
    sub(qm, "a/b", name="PROV", durable=True, dest=provided_q)
    transient = sub(qm, "a/b", owner="conn-1")
    pub(qm, "a/b", "before", retain=True)
    assert bodies(qm, transient.dest) == ["before"]
    qm.close()
    qm = open_qm()
    assert sorted(ps(qm).subs) == ["KEEP", "PROV"]
    assert ps(qm).subs["KEEP"].dest == durable.dest
    assert ps(qm).subs["PROV"].dest == provided_q and not ps(qm).subs["PROV"].managed
    # the non-durable subscription ended with the queue manager, its queue too
    assert transient.dest not in qm.core.queues
    assert any(m == "HMQ5803W" and transient.dest in t for m, t in operator_log(home))
    assert any(m == "HMQ5801I" and "2 durable subscriptions, 1 retained" in t
               for m, t in operator_log(home))
    pub(qm, "a/b", "after")
    assert bodies(qm, durable.dest) == ["before", "after"]
    assert bodies(qm, provided_q) == ["before", "after"]


def test_an_orphan_managed_queue_is_deleted_at_restart(make_qm, open_qm, home):
    """A crash between a managed queue's creation and its status message leaves
    the queue alone: the next start deletes it and says so."""
    make_qm()
    qm = open_qm()
    qm.define_queue("SYSTEM.MANAGED.DURABLE.CUTSHORT", DEFPSIST="YES")
    qm.put("SYSTEM.MANAGED.DURABLE.CUTSHORT", b"stray", persistent=True)
    kept = sub(qm, "x", name="KEPT", durable=True)
    qm.close()
    qm = open_qm()
    assert "SYSTEM.MANAGED.DURABLE.CUTSHORT" not in qm.core.queues
    assert kept.dest in qm.core.queues
    assert any(m == "HMQ5803W" and "CUTSHORT" in t and "1 messages" in t
               for m, t in operator_log(home))


def test_non_durable_subscriptions_end_with_their_owner(qm):
    a = sub(qm, "chat/#", owner="conn-A")
    b = sub(qm, "chat/#", owner="conn-A")
    c = sub(qm, "chat/#", owner="conn-B")
    assert pub(qm, "chat/room1", "hi") == 3
    # a persistent publication goes to a temporary managed queue as non-persistent
    assert not qm.browse(a.dest)[0].persistent
    assert qm._call(ps(qm).end_owner("conn-A")) == 2
    assert a.dest not in qm.core.queues and b.dest not in qm.core.queues
    assert pub(qm, "chat/room1", "again") == 1
    assert bodies(qm, c.dest) == ["hi", "again"]


def test_a_managed_queue_goes_only_with_its_subscription(qm):
    from harbormq.errors import ObjectInUse
    s = sub(qm, "m/q", name="MQ1", durable=True)
    with pytest.raises(ObjectInUse, match="managed queue of subscription MQ1.*2042"):
        qm.delete_queue(s.dest, purge=True)
    assert s.dest in qm.core.queues
    qm._call(ps(qm).unsubscribe("MQ1"))
    assert s.dest not in qm.core.queues


def test_resubscribing_under_the_name_resumes_and_unsubscribe_deletes(qm):
    first = sub(qm, "r/t", name="R", durable=True)
    pub(qm, "r/t", "meanwhile")
    again = sub(qm, "r/t", name="R", durable=True)
    assert again is first and bodies(qm, again.dest) == ["meanwhile"]
    with pytest.raises(SubscriptionExists, match="2432"):
        sub(qm, "r/other", name="R", durable=True)
    qm._call(ps(qm).unsubscribe("R"))
    assert first.dest not in qm.core.queues
    assert qm.core.queue(DURABLE_SUBSCRIBER_QUEUE).curdepth == 0
    with pytest.raises(NoSubscription, match="2428"):
        qm._call(ps(qm).unsubscribe("R"))


def test_bad_input_gets_a_clear_error_and_loses_nothing(qm):
    s = sub(qm, "safe/#", name="SAFE", durable=True)
    pub(qm, "safe/x", "kept")
    for topic in ("safe//x", "safe/#", "safe/+/x", "", "/".join(["l"] * 100_000)):
        with pytest.raises(TopicStringError, match="2425"):
            pub(qm, topic, "bad")
    with pytest.raises(SubNameError, match="needs a name"):
        sub(qm, "safe/x", durable=True)
    with pytest.raises(SelectorError, match="position 5"):
        sub(qm, "safe/x", name="SEL", selector="a = = 1")
    with pytest.raises(UnknownObject, match="2085"):
        sub(qm, "safe/x", name="NODEST", durable=True, dest="NO.SUCH.QUEUE")
    qm._call(ps(qm).define_topic("CLOSED", {"TOPICSTR": "closed", "SUB": "INHIBITED",
                                            "PUB": "INHIBITED"}))
    with pytest.raises(SubInhibited, match="2503"):
        sub(qm, "closed/x", name="C1", durable=True)
    with pytest.raises(PutInhibited, match="2051.*CLOSED|CLOSED.*2051"):
        pub(qm, "closed/x", "no")
    qm._call(ps(qm).define_topic("NODUR", {"TOPICSTR": "nodur", "DURSUB": "NO"}))
    with pytest.raises(DurabilityNotAllowed, match="2436"):
        sub(qm, "nodur/x", name="D1", durable=True)
    sub(qm, "nodur/x", owner="c")          # a non-durable one is allowed there
    assert bodies(qm, s.dest) == ["kept"]
    assert sorted(ps(qm).subs) == ["SAFE", "c:" + next(
        n.split(":", 1)[1] for n in ps(qm).subs if n.startswith("c:"))]


def test_a_deleted_dest_fails_a_persistent_publication_to_a_durable_subscription(qm):
    """MQ's PMSGDLV(ALLDUR): a durable subscriber that cannot take a persistent
    publication fails it, and nothing is published; NPMSGDLV(ALLAVAIL): a
    non-persistent one goes to whoever can take it."""
    qm.define_queue("GONE", DEFPSIST="YES")
    ok = sub(qm, "d/#", name="OK", durable=True)
    sub(qm, "d/#", name="BROKEN", durable=True, dest="GONE")
    qm.delete_queue("GONE")
    with pytest.raises(PublicationFailure, match="BROKEN.*GONE.*2502"):
        pub(qm, "d/x", "persistent")
    assert bodies(qm, ok.dest) == []
    assert pub(qm, "d/x", "non-persistent", persistent=False) == 1
    assert bodies(qm, ok.dest) == ["non-persistent"]


def test_publish_and_subscribe_need_pub_and_sub_authority_on_a_topic_object(qm):
    Security.for_config(qm.config).authorities.set("SPORT", "TOPIC", principal="bob",
                                                   add=["SUB"])
    bob = Principal("bob")
    with pytest.raises(NotAuthorized, match="SUB on TOPIC SYSTEM.BASE.TOPIC"):
        sub(qm, "sport/x", name="B1", durable=True, user=bob)
    qm._call(ps(qm).define_topic("SPORT", {"TOPICSTR": "sport"}))
    s = sub(qm, "sport/tennis", name="B1", durable=True, user=bob)
    assert s.user == "bob"
    with pytest.raises(NotAuthorized, match="SUB on TOPIC"):       # no resuming it either
        sub(qm, "sport/tennis", name="B1", durable=True, user=Principal("eve"))
    with pytest.raises(NotAuthorized, match="PUB on TOPIC SPORT"):
        pub(qm, "sport/tennis", "x", user=bob)
    Security.for_config(qm.config).authorities.set("SYSTEM.BASE.TOPIC", "TOPIC",
                                                   principal="bob", add=["PUB"])
    assert pub(qm, "sport/tennis", "x", user=bob) == 1     # granted higher up the tree


def test_topic_defaults_give_persistence_and_priority(qm):
    qm._call(ps(qm).define_topic("P", {"TOPICSTR": "p", "DEFPSIST": "YES", "DEFPRTY": 6}))
    assert ps(qm).topic_defaults("p/q", None, None) == (6, True)
    assert ps(qm).topic_defaults("other", None, None) == (0, False)
    assert ps(qm).topic_defaults("p/q", 2, False) == (2, False)


def test_a_subscriptions_selector_takes_only_the_publications_it_selects(make_qm, open_qm):
    """SELECTOR on a subscription (SQL-92 on the publication's properties), kept
    across a restart with the subscription."""
    make_qm()
    qm = open_qm()
    picky = sub(qm, "orders/#", name="BIG", durable=True, selector="size > 10 AND region = 'eu'")
    every = sub(qm, "orders/#", name="ALL", durable=True)
    for size, region in ((5, "eu"), (50, "eu"), (50, "us"), (11, "eu")):
        qm._call(ps(qm).publish("orders/new", Message(f"{size}{region}".encode(),
                 persistent=True, properties={"size": size, "region": region})))
    assert bodies(qm, picky.dest) == ["50eu", "11eu"]
    assert len(bodies(qm, every.dest)) == 4
    qm.close()
    qm = open_qm()
    assert ps(qm).find("BIG").selector == "size > 10 AND region = 'eu'"
    qm._call(ps(qm).publish("orders/new", Message(b"12eu", persistent=True,
                                                  properties={"size": 12, "region": "eu"})))
    qm._call(ps(qm).publish("orders/new", Message(b"1eu", persistent=True,
                                                  properties={"size": 1, "region": "eu"})))
    assert bodies(qm, picky.dest) == ["50eu", "11eu", "12eu"]


def test_a_retained_publication_alone_is_forced_before_publish_returns(qm):
    """No subscriber: the retained publication's replacement (a get and a put)
    is one unit of work, committed and forced before the publisher is told."""
    pub(qm, "alone/t", "first", retain=True)
    pub(qm, "alone/t", "second", retain=True)
    log = qm.core.log
    assert log.synced_lsn >= log.end_lsn
    assert [m.body for m in qm.browse(RETAINED_PUB_QUEUE)
            if m.properties.get("MQTopicString") == "alone/t"] == [b"second"]


def test_a_selector_reads_the_publications_header_fields(qm):
    s = sub(qm, "hdr/t", name="HDR", durable=True,
            selector="JMSTimestamp > 0 AND JMSMessageID LIKE 'ID:%'")
    pub(qm, "hdr/t", "seen")
    assert bodies(qm, s.dest) == ["seen"]


def test_a_dest_that_is_an_alias_of_a_remote_queue_gets_a_wrapped_put(qm):
    from harbormq.core import remote
    qm.define_queue("XQ", USAGE="XMITQ")
    qm.define("QREMOTE", "FAR", RNAME="IN", RQMNAME="QMB", XMITQ="XQ")
    qm.define("QALIAS", "FAR.ALIAS", TARGET="FAR")
    qm.define_queue("NEAR")
    sub(qm, "wire/t", name="FARSUB", durable=True, dest="FAR.ALIAS")
    sub(qm, "wire/t", name="NEARSUB", durable=True, dest="NEAR")
    assert pub(qm, "wire/t", "over") == 2
    [wrapped] = qm.browse("XQ")
    assert remote.is_wrapped(wrapped.body)
    assert bodies(qm, "NEAR") == ["over"]
