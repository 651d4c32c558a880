"""The topic tree: topic strings, their wildcards, the subscriptions hung on
its nodes, and the attributes of administrative nodes (TOPIC objects).

A topic string has levels separated by ``/``. A subscription's string may use
MQ's topic wildcards, each a whole level: ``#`` any number of levels (none
included) and ``+`` exactly one. A publication's string has neither, and no
empty level. Strings are at most ``MAX_TOPIC_LENGTH`` characters (MQ's
10,240), so a tree is at most 5,120 levels deep; nothing here recurses.

A subscription without a wildcard is kept by its topic string alone (one
dict entry: most subscriptions, and a million of them load in seconds); one
with a wildcard hangs on a node of the tree. Matching looks the
publication's string up once, then walks the tree along the publication's
levels only (each node's literal child, its ``+`` child and its ``#``
child): its cost grows with the subscriptions that match and the wildcard
nodes on the path, never with the subscriptions elsewhere.

An attribute of a node resolves to the closest administrative node at or
above it whose value is not ASPARENT; SYSTEM.BASE.TOPIC (the root, topic
string '') has a value for every one. For a subscription with wildcards, the
node is the part of its string before the first wildcard (as in MQ).

Not here: subscriptions' storage and delivery (``service.py``,
``status.py``), TOPIC definitions themselves (``core/objects.py``).
"""

from __future__ import annotations

from typing import Generic, TypeVar

from ..core.objects import BASE_TOPIC_ATTRS, object_node
from .errors import TopicStringError

MAX_TOPIC_LENGTH = 10_240
MULTI, SINGLE = "#", "+"

T = TypeVar("T")


def _check_common(topic: str, what: str) -> list[str]:
    if not isinstance(topic, str) or not topic:
        raise TopicStringError(f"{what}: the topic string is empty (MQRC 2425 "
                               "TOPIC_STRING_ERROR)")
    if len(topic) > MAX_TOPIC_LENGTH:
        raise TopicStringError(f"{what}: the topic string has {len(topic)} characters, more "
                               f"than {MAX_TOPIC_LENGTH} (MQRC 2425 TOPIC_STRING_ERROR)")
    if "\0" in topic:
        raise TopicStringError(f"{what}: the topic string holds a NUL character (MQRC 2425 "
                               "TOPIC_STRING_ERROR)")
    levels = topic.split("/")
    for i, level in enumerate(levels):
        if not level:
            raise TopicStringError(f"{what}: topic string {_short(topic)!r} has an empty level "
                                   f"(level {i + 1} of {len(levels)}) (MQRC 2425 "
                                   "TOPIC_STRING_ERROR)")
    return levels


def _short(topic: str) -> str:
    return topic if len(topic) <= 80 else topic[:60] + "..." + topic[-12:]


def publish_levels(topic: str) -> list[str]:
    """The levels of a topic string published to; TopicStringError naming what
    is wrong: empty, too long, an empty level, a wildcard."""
    levels = _check_common(topic, "publish")
    if MULTI in topic or SINGLE in topic:
        bad = next(i for i, lv in enumerate(levels) if MULTI in lv or SINGLE in lv)
        raise TopicStringError(f"publish: topic string {_short(topic)!r} holds a wildcard "
                               f"('{levels[bad][:20]}' at level {bad + 1}); a publication "
                               "names one topic (MQRC 2425 TOPIC_STRING_ERROR)")
    return levels


def subscribe_levels(topic: str) -> list[str]:
    """The levels of a subscription's topic string (wildcards allowed, each a
    whole level)."""
    levels = _check_common(topic, "subscribe")
    for i, level in enumerate(levels):
        if (MULTI in level or SINGLE in level) and level not in (MULTI, SINGLE):
            raise TopicStringError(f"subscribe: level {i + 1} of topic string "
                                   f"{_short(topic)!r} mixes a wildcard with other characters "
                                   f"('{level[:20]}'); # and + must be a whole level "
                                   "(MQRC 2425 TOPIC_STRING_ERROR)")
    return levels


def object_levels(topic: str) -> list[str]:
    """A TOPIC object's TOPICSTR: a node, with no wildcard (``object_node``)."""
    levels = _check_common(object_node(topic), "TOPICSTR")
    if MULTI in topic or SINGLE in topic:
        raise TopicStringError(f"TOPICSTR({_short(topic)}): a topic object names one node, "
                               "without wildcards (MQRC 2425 TOPIC_STRING_ERROR)")
    return levels


def admin_node_of(topic: str) -> str:
    """The node a subscription's attributes come from: its string up to the
    first wildcard level ('' for the root)."""
    levels = topic.split("/")
    for i, level in enumerate(levels):
        if level in (MULTI, SINGLE):
            return "/".join(levels[:i])
    return topic


def matches(pattern: str, topic: str) -> bool:
    """One subscription string against one topic (retained publications, of
    which there are few); the tree does the same for many at once."""
    tree: TopicTree[int] = TopicTree()
    tree.add(pattern, 1)
    return bool(tree.match(topic))


class _Node:
    __slots__ = ("children", "items")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.items: dict = {}        # key -> item hung here (subscriptions by name)


class TopicTree(Generic[T]):
    """Items (subscriptions) by topic string: those without a wildcard in a
    dict, the others hung on the node of their string, wildcards being nodes
    like other levels; ``match`` finds every item whose string matches a
    publication's."""

    def __init__(self) -> None:
        self.root = _Node()
        self.exact: dict[str, tuple | dict] = {}
        self.count = 0
        #: the nodes the last ``match`` walked (what its cost grows with)
        self.walked = 0

    def add(self, topic: str, key, item: T | None = None) -> None:
        item = key if item is None else item
        if MULTI not in topic and SINGLE not in topic:
            # one item by a string is kept as (key, item): a dict per string
            # would be most of the memory of a million subscriptions
            exact = self.exact
            cur = exact.get(topic)
            if cur is None:
                exact[topic] = (key, item)
                self.count += 1
                return
            if type(cur) is tuple:
                if cur[0] == key:
                    exact[topic] = (key, item)
                    return
                cur = exact[topic] = {cur[0]: cur[1]}
            items = cur
        else:
            node = self.root
            for level in topic.split("/"):
                child = node.children.get(level)
                if child is None:
                    child = node.children[level] = _Node()
                node = child
            items = node.items
        if key not in items:
            self.count += 1
        items[key] = item

    def remove(self, topic: str, key) -> None:
        """Take ``key`` off its topic string, and prune the nodes left empty."""
        if MULTI not in topic and SINGLE not in topic:
            cur = self.exact.get(topic)
            if type(cur) is tuple:
                if cur[0] == key:
                    del self.exact[topic]
                    self.count -= 1
            elif cur is not None and cur.pop(key, None) is not None:
                self.count -= 1
                if not cur:
                    del self.exact[topic]
            return
        path = [self.root]
        for level in topic.split("/"):
            node = path[-1].children.get(level)
            if node is None:
                return
            path.append(node)
        if path[-1].items.pop(key, None) is None:
            return
        self.count -= 1
        levels = topic.split("/")
        for i in range(len(levels), 0, -1):
            node = path[i]
            if node.items or node.children:
                break
            del path[i - 1].children[levels[i - 1]]

    def match(self, topic: str, levels: list[str] | None = None) -> list[T]:
        """Every item whose string matches the publication ``topic`` (whose
        ``levels`` the caller may have split already)."""
        exact = self.exact.get(topic)
        out: list[T] = [] if exact is None else [exact[1]] if type(exact) is tuple else \
            list(exact.values())
        if not self.root.children:
            self.walked = 1
            return out
        if levels is None:
            levels = topic.split("/")
        n = len(levels)
        seen: set[tuple[int, int]] = set()
        stack: list[tuple[_Node, int]] = [(self.root, 0)]
        while stack:
            node, i = stack.pop()
            mark = (id(node), i)
            if mark in seen:
                continue
            seen.add(mark)
            children = node.children
            if i == n:
                out.extend(node.items.values())
            else:
                child = children.get(levels[i])
                if child is not None:
                    stack.append((child, i + 1))
                child = children.get(SINGLE)
                if child is not None:
                    stack.append((child, i + 1))
            multi = children.get(MULTI)
            if multi is not None:
                # '#' takes levels i.. j-1 for every j from i (none) to the end
                for j in range(i, n + 1):
                    stack.append((multi, j))
        self.walked = len(seen) + 1
        return out


class TopicAttributes:
    """The administrative nodes: topic string -> TOPIC definition, and the
    resolution of an attribute to the closest one above with a value."""

    def __init__(self) -> None:
        self.by_topic: dict[str, dict] = {}

    def set(self, definition: dict) -> None:
        self.by_topic[object_node(definition["attrs"]["TOPICSTR"])] = definition

    def drop(self, topicstr: str) -> None:
        self.by_topic.pop(object_node(topicstr), None)

    def nodes_above(self, topic: str):
        """The administrative nodes at or above ``topic``, closest first (the
        root last)."""
        by_topic = self.by_topic
        d = by_topic.get(topic)
        if d is not None:
            yield d
        end = len(topic)
        while end > 0:
            end = topic.rfind("/", 0, end)
            if end < 0:
                break
            d = by_topic.get(topic[:end])
            if d is not None:
                yield d
        if topic:
            d = by_topic.get("")
            if d is not None:
                yield d

    def resolve(self, topic: str, attr: str):
        for d in self.nodes_above(topic):
            value = d["attrs"].get(attr, "ASPARENT")
            if value != "ASPARENT":
                return value
        return BASE_TOPIC_ATTRS[attr]

    def closest(self, topic: str) -> dict | None:
        """The administrative node a topic string belongs to (its TOPIC object)."""
        return next(self.nodes_above(topic), None)
