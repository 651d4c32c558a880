"""MSGAGE's walk (``core/queue_figures.oldest_put_ns``): the oldest message a get
could take is the first available one of some priority band, and the walk
seeks from band to band instead of reading a deep band to its end."""

from __future__ import annotations

import time

from harbormq import QueueManager
from harbormq.core.queue_figures import oldest_put_ns


def _oldest(qm: QueueManager, queue: str, scan_limit: int) -> int:
    q = qm.core.queues[queue]
    return qm._call_sync(lambda: oldest_put_ns(q, time.time_ns(), scan_limit))


def test_the_oldest_message_behind_a_deep_band_of_higher_priority(make_qm, home):
    make_qm()
    qm = QueueManager.open("QM1", home=home)
    try:
        qm.define_queue("AGES", MAXDEPTH="5000")
        oldest = qm.put("AGES", b"old", priority=0, persistent=False)
        with qm.begin() as u:
            for _ in range(500):
                u.put("AGES", b"new", priority=5, persistent=False)
        # the 500 of priority 5 come first in delivery order; a walk of 20 keys
        # reaches the priority 0 band only by seeking to it
        assert _oldest(qm, "AGES", scan_limit=20) == oldest.put_time_ns
    finally:
        qm.close()


def test_locked_and_taken_heads_are_stepped_over_within_a_band(make_qm, home):
    make_qm()
    qm = QueueManager.open("QM1", home=home)
    try:
        qm.define_queue("AGES")
        first, second, third = (qm.put("AGES", body, priority=3, persistent=False)
                                for body in (b"1", b"2", b"3"))
        qm.put("AGES", b"high", priority=8, persistent=False)
        u = qm.begin()
        assert u.get("AGES").body == b"high"       # locked by the unit of work
        assert u.get("AGES").body == b"1"
        assert _oldest(qm, "AGES", scan_limit=100) == second.put_time_ns
        u.backout()
        assert _oldest(qm, "AGES", scan_limit=100) == first.put_time_ns
        assert qm.get("AGES").body == b"high" and qm.get("AGES").body == b"1"
        assert qm.get("AGES").body == b"2"
        assert _oldest(qm, "AGES", scan_limit=100) == third.put_time_ns
        assert qm.get("AGES").body == b"3"
        assert _oldest(qm, "AGES", scan_limit=100) == 0
    finally:
        qm.close()
