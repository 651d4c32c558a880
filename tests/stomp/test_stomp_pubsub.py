"""Publish/subscribe over STOMP (issue 29): SEND and SUBSCRIBE on ``/topic/``
with a real stomp.py client (raw frames where the exact ERROR matters).

Both durable conventions (RabbitMQ's ``durable:true``/``persistent:true`` with
the id, ActiveMQ's ``client-id`` + ``activemq.subscriptionName``), resuming
after a reconnect with what was published meanwhile, UNSUBSCRIBE that deletes
and one that keeps, non-durable subscriptions ended by the connection's end,
retained publications first, publications in a transaction (COMMIT, ABORT),
ack modes on a topic subscription, an MQSC subscription read through its
DEST, authority, and every bad input of the issue, each an ERROR naming it
with nothing lost.

Every test uses topic strings and subscription names of its own, so tests
sharing the session's server do not see each other's publications.
Not here: SIGKILLs (test_stomp_pubsub_crash.py), the topic tree itself (tests/pubsub/).
"""

from __future__ import annotations

import re

from support.stomp_helpers import (
    bodies,
    deadline_wait,
    depth,
    expect_error,
    quiet,
    subscribe,
)


def sub_names(server) -> set[str]:
    out = server.sc("DISPLAY SUB(*)")
    return set(re.findall(r"\bSUB\(([^)]*)\)", out))


def managed_queues(server) -> set[str]:
    out = server.sc("DISPLAY QLOCAL('SYSTEM.MANAGED.*')", check=False)   # none: an error
    return set(re.findall(r"QUEUE\((SYSTEM\.MANAGED\.[^)]*)\)", out))


def hang_up(c) -> None:
    """stomp.py's DISCONNECT, waiting until the server has closed (stomp.py
    does not wait for its receipt)."""
    c.disconnect()
    c.col.wait(lambda: c.col.disconnected, what="the server's close")


def publish(c, topic: str, body: str, **headers) -> None:
    """A receipted SEND to /topic/<topic> with the raw client."""
    c.call("SEND", {"destination": f"/topic/{topic}", **headers}, body.encode())


def topic_sub(c, topic: str, sub_id: str, ack: str = "client-individual", **headers):
    return c.call("SUBSCRIBE", {"destination": f"/topic/{topic}", "id": sub_id, "ack": ack,
                                **headers})


def test_publication_reaches_every_matching_subscription_with_its_topic(server, conns):
    c = conns.stomp(server.port)
    for sub_id, pattern in (("exact", "ps1/sport/tennis"), ("plus", "ps1/+/tennis"),
                            ("hash", "ps1/#"), ("other", "ps1/news")):
        c.subscribe(f"/topic/{pattern}", sub_id, ack="auto", headers={"receipt": sub_id})
        c.col.wait_receipt(sub_id)
    c.send("/topic/ps1/sport/tennis", "ace", receipt="p1")
    c.col.wait_receipt("p1")
    c.col.wait_messages(3)
    got = c.col.take()
    assert sorted(m.headers["subscription"] for m in got) == ["exact", "hash", "plus"]
    for m in got:
        # the topic published to, whatever the subscription's wildcards
        assert m.headers["destination"] == "/topic/ps1/sport/tennis"
        assert m.body == "ace" and "retained" not in m.headers
        assert "MQTopicString" not in m.headers
    quiet_stomp(c)


def quiet_stomp(c, t: float = 0.3) -> None:
    import time
    time.sleep(t)
    assert c.col.take() == [], "unexpected MESSAGE frames"


def test_rabbitmq_durable_subscription_resumes_with_what_was_published_meanwhile(server,
                                                                                   conns):
    s = conns.stomp(server.port)
    s.subscribe("/topic/ps2/prices", "rabbit-ps2", ack="client-individual",
                headers={"durable": "true", "auto-delete": "false", "receipt": "sub"})
    s.col.wait_receipt("sub")
    assert "rabbit-ps2" in sub_names(server)
    p = conns.stomp(server.port)
    p.send("/topic/ps2/prices", "one", receipt="p1")
    p.col.wait_receipt("p1")
    first = s.col.wait_messages(1)[0]
    s.ack(first.headers["ack"])
    hang_up(s)                         # a disconnect keeps a durable subscription
    for i, body in enumerate(["two", "three", "four"]):
        p.send("/topic/ps2/prices", body, receipt=f"m{i}")
        p.col.wait_receipt(f"m{i}")
    assert "rabbit-ps2" in sub_names(server)
    # persistent:true is RabbitMQ's alias of durable:true
    s2 = conns.stomp(server.port)
    s2.subscribe("/topic/ps2/prices", "rabbit-ps2", ack="client-individual",
                 headers={"persistent": "true"})
    got = s2.col.wait_messages(3)
    assert [m.body for m in got] == ["two", "three", "four"]
    assert all(m.headers["redelivered"] == "false" for m in got)
    # UNSUBSCRIBE with the durable header deletes it, its queue with it
    dest = server.sc("DISPLAY SUB('rabbit-ps2') DEST")
    queue = re.search(r"DEST\(([^)]*)\)", dest).group(1)
    for m in got:
        s2.ack(m.headers["ack"])
    s2.unsubscribe("rabbit-ps2", headers={"durable": "true", "receipt": "gone"})
    s2.col.wait_receipt("gone")
    assert "rabbit-ps2" not in sub_names(server)
    deadline_wait(lambda: queue not in managed_queues(server), 10, what=f"{queue} deleted")


def test_activemq_durable_subscription_resumes_and_unsubscribe_by_name_deletes(server, conns):
    def connect():
        return conns.stomp(server.port, headers={"client-id": "amq-ps3"})
    s = connect()
    s.subscribe("/topic/ps3/orders", "1", ack="client",
                headers={"activemq.subscriptionName": "orders", "receipt": "sub"})
    s.col.wait_receipt("sub")
    assert "amq-ps3:orders" in sub_names(server)
    # a plain UNSUBSCRIBE keeps it: publications go on collecting
    s.unsubscribe("1", headers={"receipt": "u1"})
    s.col.wait_receipt("u1")
    p = conns.stomp(server.port)
    for i in range(3):
        p.send("/topic/ps3/orders", f"o{i}", receipt=f"p{i}")
        p.col.wait_receipt(f"p{i}")
    hang_up(s)
    s = connect()
    s.subscribe("/topic/ps3/orders", "2", ack="client",
                headers={"activemq.subscriptionName": "orders"})
    got = s.col.wait_messages(3)
    assert [m.body for m in got] == ["o0", "o1", "o2"]
    s.ack(got[-1].headers["ack"])                 # cumulative: all three
    hang_up(s)
    # ActiveMQ's way to delete: UNSUBSCRIBE naming it, no subscriber active
    s = connect()
    s.unsubscribe("2", headers={"activemq.subscriptionName": "orders", "receipt": "del"})
    s.col.wait_receipt("del")
    assert "amq-ps3:orders" not in sub_names(server)
    # the same name again is a new subscription: nothing old on it
    p.send("/topic/ps3/orders", "before", receipt="b")
    p.col.wait_receipt("b")
    s.subscribe("/topic/ps3/orders", "3", ack="auto",
                headers={"activemq.subscriptionName": "orders", "receipt": "again"})
    s.col.wait_receipt("again")
    p.send("/topic/ps3/orders", "after", receipt="a")
    assert [m.body for m in s.col.wait_messages(1)] == ["after"]
    s.unsubscribe("3", headers={"activemq.subscriptionName": "orders"})


def test_non_durable_subscription_ends_with_its_connection(server, conns):
    before = managed_queues(server)
    c = conns.raw(server.port)
    topic_sub(c, "ps4/live", "nd")
    p = conns.raw(server.port)
    publish(p, "ps4/live", "while-subscribed")
    assert bodies(c.messages(1)) == [b"while-subscribed"]    # left unacknowledged
    mine = managed_queues(server) - before
    assert len(mine) == 1 and next(iter(mine)).startswith("SYSTEM.MANAGED.NDURABLE.")
    c.send("DISCONNECT", {"receipt": "bye"})
    c.wait_closed()
    deadline_wait(lambda: not (managed_queues(server) & mine), 10,
                  what="the non-durable subscription's queue deleted")
    assert not any(n.startswith("STOMP") for n in sub_names(server) if "ps4" in n)
    # a new subscriber sees only what comes after it
    publish(p, "ps4/live", "nobody-listening")
    c2 = conns.raw(server.port)
    topic_sub(c2, "ps4/live", "nd")
    quiet(c2)
    # an UNSUBSCRIBE ends a non-durable one too
    c2.call("UNSUBSCRIBE", {"id": "nd"})
    deadline_wait(lambda: not (managed_queues(server) - before), 10,
                  what="the queue of the unsubscribed subscription deleted")


def test_retained_publication_arrives_first_marked_and_replaced(server, conns):
    p = conns.raw(server.port)
    publish(p, "ps5/weather", "rain", retain="true")
    publish(p, "ps5/weather", "sun", retain="true")          # replaces it
    publish(p, "ps5/weather", "not-kept")                    # not retained
    c = conns.raw(server.port)
    topic_sub(c, "ps5/#", "w", ack="auto")
    first = c.messages(1)[0]
    assert first.body == b"sun" and first["retained"] == "true"
    assert first["destination"] == "/topic/ps5/weather"
    quiet(c)
    publish(p, "ps5/weather", "live")
    live = c.messages(1)[0]
    assert live.body == b"live" and "retained" not in live.headers


def test_publications_in_a_transaction_commit_on_all_and_abort_on_none(server, conns):
    a, b = conns.raw(server.port), conns.raw(server.port)
    topic_sub(a, "ps6/tx", "a", ack="auto")
    topic_sub(b, "ps6/tx", "b", ack="auto", durable="true")
    p = conns.stomp(server.port)
    p.begin("t1")
    p.send("/topic/ps6/tx", "aborted", transaction="t1")
    p.abort("t1")
    p.begin("t2")
    p.send("/topic/ps6/tx", "c1", transaction="t2")
    p.send("/topic/ps6/tx", "c2", transaction="t2", headers={"retain": "true"})
    quiet(a)                                      # nothing before the COMMIT
    p.commit("t2", headers={"receipt": "c"})
    p.col.wait_receipt("c")
    assert bodies(a.messages(2)) == [b"c1", b"c2"]
    assert bodies(b.messages(2)) == [b"c1", b"c2"]
    quiet(a)
    quiet(b)
    # the retained publication is the committed one
    c = conns.raw(server.port)
    topic_sub(c, "ps6/tx", "late", ack="auto")
    assert bodies(c.messages(1)) == [b"c2"]
    b.call("UNSUBSCRIBE", {"id": "b", "durable": "true"})


def test_topic_subscription_keeps_ack_modes_prefetch_and_redelivery(server, conns):
    c = conns.raw(server.port)
    topic_sub(c, "ps7/work", "w", durable="true", **{"prefetch-count": "2"})
    p = conns.raw(server.port)
    for i in range(4):
        publish(p, "ps7/work", f"j{i}", persistent="false", priority="7")
    got = c.messages(2)
    quiet(c)                                           # the window is 2
    assert bodies(got) == [b"j0", b"j1"]
    assert got[0]["persistent"] == "false" and got[0]["priority"] == "7"
    # (call returns the MESSAGEs that came before its RECEIPT)
    rest = c.call("NACK", {"id": got[0]["ack"]})
    rest += c.call("ACK", {"id": got[1]["ack"]})
    acked = 0
    while len(rest) < 3:
        rest += c.messages(1)
        while acked < len(rest):
            rest += c.call("ACK", {"id": rest[acked]["ack"]})
            acked += 1
    # the NACKed one comes again, marked; every one exactly once more
    assert sorted(bodies(rest)) == [b"j0", b"j2", b"j3"]
    assert [m["redelivered"] for m in rest if m.body == b"j0"] == ["true"]
    quiet(c)
    c.call("UNSUBSCRIBE", {"id": "w", "durable": "true"})


def test_mqsc_subscription_is_consumed_through_its_destination_queue(server, conns):
    server.sc("DEFINE QLOCAL(PS8.DEST)\n"
              "DEFINE SUB(PS8.ADMIN) TOPICSTR('ps8/audit') DEST(PS8.DEST) DESTCLAS(PROVIDED)")
    p = conns.raw(server.port)
    publish(p, "ps8/audit", "entry")
    assert depth(server, "PS8.DEST") == 1
    c = conns.raw(server.port)
    subscribe(c, "PS8.DEST", ack="auto")
    m = c.messages(1)[0]
    assert m.body == b"entry" and m["destination"] == "/queue/PS8.DEST"
    # a queue subscription's UNSUBSCRIBE stays a queue's, whatever else it carries
    c.call("UNSUBSCRIBE", {"id": "s1", "persistent": "false"})
    publish(p, "ps8/audit", "kept")
    quiet(c)
    assert depth(server, "PS8.DEST") == 1
    server.sc("DELETE SUB(PS8.ADMIN)")


def test_a_durable_subscription_has_one_subscriber_at_a_time(server, conns):
    a = conns.raw(server.port)
    topic_sub(a, "ps9/one", "ps9-sub", durable="true")
    b = conns.raw(server.port)
    b.send("SUBSCRIBE", {"destination": "/topic/ps9/one", "id": "ps9-sub", "durable": "true"})
    expect_error(b, "2429", "ps9-sub")
    # nor may another connection delete it while it is consumed
    d = conns.raw(server.port)
    d.send("UNSUBSCRIBE", {"id": "ps9-sub", "durable": "true"})
    expect_error(d, "2429")
    assert "ps9-sub" in sub_names(server)
    a.call("UNSUBSCRIBE", {"id": "ps9-sub", "durable": "true"})
    assert "ps9-sub" not in sub_names(server)


def test_publish_and_subscribe_need_authority_on_the_topic(server, conns):
    server.user_add("carol", "carolpw")
    c = conns.raw(server.port, login="carol", passcode="carolpw")
    c.send("SEND", {"destination": "/topic/ps10/x"}, b"x")
    expect_error(c, "2035", "PUB", "TOPIC")
    c = conns.raw(server.port, login="carol", passcode="carolpw")
    c.send("SUBSCRIBE", {"destination": "/topic/ps10/x", "id": "1"})
    expect_error(c, "2035", "SUB", "TOPIC")
    server.sc("DEFINE TOPIC(PS10) TOPICSTR('ps10')\n"
              "SET AUTHREC PROFILE(PS10) OBJTYPE(TOPIC) PRINCIPAL('carol') AUTHADD(PUB,SUB)")
    c = conns.raw(server.port, login="carol", passcode="carolpw")
    topic_sub(c, "ps10/x", "1", ack="auto")
    publish(c, "ps10/x", "granted")
    assert bodies(c.messages(1)) == [b"granted"]


def test_bad_input_gets_an_error_naming_it_and_loses_nothing(server, conns):
    keep = conns.raw(server.port)
    topic_sub(keep, "ps11/#", "keep", durable="true")
    p = conns.raw(server.port)
    publish(p, "ps11/ok", "before")
    cases = [
        # (frame, headers, what the ERROR must name)
        ("SEND", {"destination": "/topic/ps11//empty"}, ["2425", "empty level"]),
        ("SEND", {"destination": "/topic/ps11/+/x"}, ["2425", "wildcard"]),
        ("SEND", {"destination": "/topic/ps11/#"}, ["2425", "wildcard"]),
        ("SEND", {"destination": "/topic/ps11/" + "a/" * 6_000 + "z"}, ["2425", "10240"]),
        # 100,000 levels: over the frame's header limit before it is a topic string
        ("SEND", {"destination": "/topic/ps11/" + "a/" * 100_000 + "z"}, ["exceed"]),
        ("SEND", {"destination": "/topic/"}, ["2425", "empty"]),
        ("SEND", {"destination": "/topic/ps11/ok", "retain": "maybe"}, ["retain"]),
        ("SUBSCRIBE", {"destination": "/topic/ps11/a//b", "id": "x"}, ["2425", "empty level"]),
        ("SUBSCRIBE", {"destination": "/topic/ps11/a#", "id": "x"}, ["2425", "whole level"]),
        ("SUBSCRIBE", {"destination": "/topic/ps11/a", "id": "x",
                       "activemq.subscriptionName": "n"}, ["2440", "client-id"]),
        ("SUBSCRIBE", {"destination": "/topic/ps11/a", "id": "x",
                       "activemq.subscriptionName": ""}, ["2440"]),
        ("UNSUBSCRIBE", {"id": "never-made", "durable": "true"}, ["2428", "never-made"]),
        # a selector belongs to the subscription, and must parse
        ("SUBSCRIBE", {"destination": "/topic/ps11/a", "id": "x",
                       "selector": "JMSCorrelationID = = 'c'"}, ["2459", "position"]),
    ]
    for command, headers, fragments in cases:
        c = conns.raw(server.port)
        c.send(command, headers, b"lost?" if command == "SEND" else b"")
        expect_error(c, *fragments)
    # STOMP 1.0: a durable SUBSCRIBE without an id has no name
    c = conns.raw(server.port, version="1.0")
    c.send("SUBSCRIBE", {"destination": "/topic/ps11/a", "durable": "true"})
    expect_error(c, "2440")
    # SUB(INHIBITED) and PUB(INHIBITED) on a topic object
    server.sc("DEFINE TOPIC(PS11.NOSUB) TOPICSTR('ps11/nosub') SUB(INHIBITED)\n"
              "DEFINE TOPIC(PS11.NOPUB) TOPICSTR('ps11/nopub') PUB(INHIBITED)")
    c = conns.raw(server.port)
    c.send("SUBSCRIBE", {"destination": "/topic/ps11/nosub/x", "id": "x"})
    expect_error(c, "2503", "SUB(INHIBITED)")
    c = conns.raw(server.port)
    c.send("SEND", {"destination": "/topic/ps11/nopub", "receipt": "r"}, b"lost?")
    err = expect_error(c, "2051", "PUB(INHIBITED)")
    assert err["receipt-id"] == "r"
    # nothing refused was published, nothing earlier was lost
    publish(p, "ps11/ok", "after")
    got = keep.messages(2)
    assert bodies(got) == [b"before", b"after"]
    quiet(keep)
    for m in got:
        keep.call("ACK", {"id": m["ack"]})
    keep.call("UNSUBSCRIBE", {"id": "keep", "durable": "true"})


def test_a_send_to_an_alias_of_a_topic_is_a_publication_there(server, conns):
    """QALIAS TARGTYPE(TOPIC) (MQ's way to let a queue application publish)."""
    server.sc("DEFINE TOPIC(PS20.T) TOPICSTR('ps20/prices')\n"
              "DEFINE QALIAS(PS20.ALIAS) TARGET(PS20.T) TARGTYPE(TOPIC)")
    c = conns.stomp(server.port)
    c.subscribe("/topic/ps20/#", "watch", ack="auto", headers={"receipt": "w"})
    c.col.wait_receipt("w")
    c.send("/queue/PS20.ALIAS", "42.5", receipt="p")
    c.col.wait_receipt("p")
    c.col.wait_messages(1)
    [m] = c.col.take()
    assert m.body == "42.5" and m.headers["destination"] == "/topic/ps20/prices"
