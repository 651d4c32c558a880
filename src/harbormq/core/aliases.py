"""Alias queues (QALIAS): another name for a queue, resolved as MQ resolves
names when a queue is opened.

An alias names its TARGET, a local queue or a remote queue definition (not
another alias, as in MQ). A put through the alias takes its defaults
(DEFPSIST, DEFPRTY) from the alias, the first definition met, and is refused
while the alias is PUT(DISABLED) (MQRC 2051), whatever the target says; a get
through it is refused while the alias is GET(DISABLED) (MQRC 2016). Authority
is checked on the alias, the name the application used: the front ends do
that with the name they were given, before they call the core.

An alias whose TARGTYPE is TOPIC names a TOPIC object: a put through it is
a publication on that object's topic string (``topic_of``; the core's
``put`` and STOMP's SEND hand it to publish/subscribe), and a get from it is
refused (MQRC 2085), as a topic holds no messages.

Not here: the put and get paths themselves (``engine.py`` calls
``resolve``).
"""

from __future__ import annotations

from ..errors import GetInhibited, PutInhibited, UnknownObject
from .objects import object_node, topic_key

#: what the target of an alias may be
TARGET_TYPES = ("QLOCAL", "QREMOTE")


def is_alias(objects: dict, name: str) -> bool:
    d = objects.get(name)
    return d is not None and d["type"] == "QALIAS"


def resolve(objects: dict, name: str, purpose: str) -> tuple[str, dict] | None:
    """For a QALIAS ``name`` opened for ``purpose`` ("put" or "get"): (its
    target's name, the alias's attributes); None when ``name`` is no alias.
    Raises when the alias refuses the purpose or its target is not there."""
    d = objects.get(name)
    if d is None or d["type"] != "QALIAS":
        return None
    attrs = d["attrs"]
    if purpose == "put" and attrs["PUT"] != "ENABLED":
        raise PutInhibited(f"puts are inhibited on alias queue {name} (MQRC 2051)", queue=name)
    if purpose == "get" and attrs["GET"] != "ENABLED":
        raise GetInhibited(f"gets are inhibited on alias queue {name} (MQRC 2016)", queue=name)
    target = attrs["TARGET"] or ""
    if attrs.get("TARGTYPE", "QUEUE") == "TOPIC":
        raise UnknownObject(f"alias queue {name} targets topic {target}: a topic holds no "
                            "messages to get, and a put to it is a publication (MQRC 2085 "
                            "UNKNOWN_OBJECT_NAME)", queue=name)
    base = objects.get(target) if target else None
    if base is None or base["type"] not in TARGET_TYPES or \
            (purpose == "get" and base["type"] != "QLOCAL"):
        what = "is not set" if not target else \
            f"{target} is not a local queue" if base is not None and purpose == "get" else \
            f"{target} is not a local or remote queue"
        raise UnknownObject(f"alias queue {name}: its TARGET {what} (MQRC 2082 "
                            "UNKNOWN_ALIAS_BASE_Q)", queue=name)
    return target, attrs


def topic_of(objects: dict, name: str) -> str | None:
    """For a QALIAS ``name`` with TARGTYPE(TOPIC): the topic string a put to it
    publishes on (its TARGET topic object's TOPICSTR); None for any other name.
    Raises while the alias is PUT(DISABLED) or its topic object is not there."""
    d = objects.get(name)
    if d is None or d["type"] != "QALIAS" or d["attrs"].get("TARGTYPE", "QUEUE") != "TOPIC":
        return None
    attrs = d["attrs"]
    if attrs["PUT"] != "ENABLED":
        raise PutInhibited(f"puts are inhibited on alias queue {name} (MQRC 2051)", queue=name)
    topic = objects.get(topic_key(attrs["TARGET"] or ""))
    if topic is None:
        raise UnknownObject(f"alias queue {name}: its TARGET topic object "
                            f"{attrs['TARGET'] or '(blank)'} is not defined (MQRC 2085 "
                            "UNKNOWN_OBJECT_NAME)", queue=name)
    return object_node(topic["attrs"]["TOPICSTR"])
