"""The topic tree: topic strings and their wildcards, matching through the tree,
and attribute resolution to the closest administrative node above."""

from __future__ import annotations

import pytest

from harbormq.core.objects import BASE_TOPIC_ATTRS
from harbormq.pubsub.errors import TopicStringError
from harbormq.pubsub.topics import (
    MAX_TOPIC_LENGTH,
    TopicAttributes,
    TopicTree,
    admin_node_of,
    matches,
    object_levels,
    publish_levels,
    subscribe_levels,
)


def tree_of(*patterns: str) -> TopicTree:
    tree = TopicTree()
    for p in patterns:
        tree.add(p, p)
    return tree


def matched(tree: TopicTree, topic: str) -> list[str]:
    return sorted(tree.match(topic))


@pytest.mark.parametrize("pattern, topic, expected", [
    ("a/b/c", "a/b/c", True),
    ("a/b/c", "a/b", False),
    ("a/+/c", "a/x/c", True),
    ("a/+/c", "a/x/y/c", False),
    ("a/#", "a", True),              # '#' takes no level too
    ("a/#", "a/b/c/d", True),
    ("#", "x/y", True),
    ("a/#/d", "a/d", True),
    ("a/#/d", "a/b/c/d", True),
    ("a/#/d", "a/b/c/e", False),
    ("+/+", "a/b", True),
    ("+/+", "a", False),
    ("+", "a", True),
    ("a/+/#", "a/b", True),
    ("a/+/#", "a", False),
    ("#/z", "z", True),
])
def test_wildcards_match_as_mq_topic_wildcards(pattern, topic, expected):
    assert matches(pattern, topic) is expected
    assert (matched(tree_of(pattern), topic) == [pattern]) is expected


def test_a_publication_finds_every_matching_subscription_once():
    tree = tree_of("a/b", "a/+", "a/#", "#", "a/#/#", "+/b", "b/#", "a/b/c")
    assert matched(tree, "a/b") == sorted(["a/b", "a/+", "a/#", "#", "a/#/#", "+/b"])
    assert matched(tree, "b") == ["#", "b/#"]


def test_non_matching_subscriptions_are_never_visited():
    """The walk follows the publication's levels only: 50,000 subscriptions
    elsewhere in the tree change neither the result nor the nodes walked."""
    tree = tree_of("news/sport", "news/#", "news/+/x")
    before = matched(tree, "news/sport")
    walked = tree.walked
    for i in range(50_000):
        tree.add(f"other/{i}/+", f"o{i}")
        tree.add(f"news/{i}", f"n{i}")
        tree.add(f"news/{i}/#", f"w{i}")
    assert matched(tree, "news/sport") == before == ["news/#", "news/sport"]
    assert tree.walked == walked
    assert tree.count == 150_003


def test_several_items_on_one_string_and_their_removal():
    tree = TopicTree()
    tree.add("a/b", "k1", 1)
    tree.add("a/b", "k1", 11)          # the same key again replaces it
    assert tree.match("a/b") == [11] and tree.count == 1
    tree.add("a/b", "k2", 2)
    assert sorted(tree.match("a/b")) == [2, 11] and tree.count == 2
    tree.remove("a/b", "k1")
    tree.remove("a/b", "nope")
    assert tree.match("a/b") == [2] and tree.count == 1
    tree.remove("a/b", "k2")
    assert tree.exact == {} and tree.count == 0


def test_removing_a_subscription_prunes_its_empty_nodes():
    tree = tree_of("a/+/c", "a/+", "a/b")
    tree.remove("a/+/c", "a/+/c")
    assert "c" not in tree.root.children["a"].children["+"].children
    tree.remove("a/+", "a/+")
    tree.remove("a/b", "a/b")
    assert tree.root.children == {} and tree.exact == {} and tree.count == 0
    tree.remove("x/y", "x/y")      # absent: nothing happens
    assert tree.count == 0


@pytest.mark.parametrize("topic, what", [
    ("", "empty"),
    ("a//b", "empty level"),
    ("/a", "empty level"),
    ("a/", "empty level"),
    ("a/#", "wildcard"),
    ("a/+/b", "wildcard"),
    ("a/b#", "wildcard"),
    ("x" * (MAX_TOPIC_LENGTH + 1), "more than"),
    ("/".join(["l"] * 100_000), "more than"),
    ("a\0b", "NUL"),
])
def test_a_publication_topic_with_a_wildcard_or_empty_level_is_refused_by_name(topic, what):
    with pytest.raises(TopicStringError, match="2425") as exc:
        publish_levels(topic)
    assert what in str(exc.value)


def test_subscription_wildcards_must_be_whole_levels():
    assert subscribe_levels("a/#/+") == ["a", "#", "+"]
    with pytest.raises(TopicStringError, match="whole level"):
        subscribe_levels("a/b#")
    with pytest.raises(TopicStringError, match="empty level"):
        subscribe_levels("a//#")
    # the longest strings allowed are taken, and matched without recursion
    deep = "/".join(["x"] * (MAX_TOPIC_LENGTH // 2))
    assert len(subscribe_levels(deep)) == MAX_TOPIC_LENGTH // 2
    assert matched(tree_of(deep, "#"), deep) == sorted([deep, "#"])


def test_attributes_resolve_to_the_closest_administrative_node_above():
    topics = TopicAttributes()
    topics.set({"name": "SYSTEM.BASE.TOPIC", "attrs": dict(BASE_TOPIC_ATTRS)})
    topics.set({"name": "SPORT", "attrs": {"TOPICSTR": "sport", "PUB": "INHIBITED",
                                           "DEFPRTY": "ASPARENT", "DEFPSIST": "YES"}})
    topics.set({"name": "TENNIS", "attrs": {"TOPICSTR": "sport/tennis", "PUB": "ENABLED",
                                            "DEFPRTY": 7, "DEFPSIST": "ASPARENT"}})
    assert topics.resolve("sport/football/results", "PUB") == "INHIBITED"
    assert topics.resolve("sport/tennis/results", "PUB") == "ENABLED"
    assert topics.resolve("sport/tennis/results", "DEFPSIST") == "YES"    # from SPORT
    assert topics.resolve("sport/tennis", "DEFPRTY") == 7
    assert topics.resolve("sport", "DEFPRTY") == 0                        # from the base
    assert topics.resolve("news", "PUB") == "ENABLED"
    assert topics.closest("sport/tennis/x")["name"] == "TENNIS"
    assert topics.closest("sportsman")["name"] == "SYSTEM.BASE.TOPIC"    # not a prefix level
    assert admin_node_of("sport/+/results") == "sport"
    assert admin_node_of("#") == ""
    empty = TopicAttributes()         # no base topic defined yet: MQ's defaults
    assert empty.resolve("a/b", "SUB") == "ENABLED"


def test_a_topic_objects_trailing_slash_names_the_node_above_it():
    """MQ's developer configuration: TOPICSTR('dev/') stands for the topics under dev/."""
    assert object_levels("dev/") == ["dev"]
    nodes = TopicAttributes()
    nodes.set({"name": "DEV.BASE.TOPIC", "attrs": {"TOPICSTR": "dev/", "DEFPRTY": 7}})
    assert nodes.closest("dev/orders")["name"] == "DEV.BASE.TOPIC"
    assert nodes.resolve("dev/orders", "DEFPRTY") == 7
    nodes.drop("dev/")
    assert nodes.closest("dev/orders") is None
    with pytest.raises(TopicStringError, match="empty level"):
        object_levels("dev//")
