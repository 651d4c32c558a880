"""What a queue holds, seen from a test: the small views the tests compare."""

from __future__ import annotations


def bodies(msgs) -> list[str]:
    """The bodies of ``msgs`` (messages, e.g. a browse), decoded."""
    return [m.body.decode() for m in msgs]


def queue_bodies(qm, queue: str) -> list[bytes]:
    """The bodies ``queue`` holds, in delivery order."""
    return [m.body for m in qm.browse(queue)]


def bodies_with_backouts(qm, queue: str) -> list[tuple[str, int]]:
    """(body, backout count) of every message ``queue`` holds, in delivery order."""
    return [(m.body.decode(), m.backout_count) for m in qm.browse(queue)]


def full_contents(qm, queue: str) -> list[tuple]:
    """What a queue holds, in delivery order, with what a recreate must keep."""
    return [(m.msg_id, m.body, m.priority, m.backout_count, m.correl_id, m.properties)
            for m in qm.browse(queue)]
