"""Figures of one local queue that take a walk of its keys to find, computed
one way for DISPLAY QSTATUS (``admin/commands.py``) and the metrics
(``http/metrics_snapshot.py``). The plain counters (depth, puts, gets) are
attributes of ``LocalQueue`` (``queue.py``) and need nothing here.
"""

from __future__ import annotations

from ..log.records import key_parts
from .queue import LocalQueue

#: priorities a key can have: the walk stops once it has met one of each
PRIORITIES = 10


def oldest_put_ns(q: LocalQueue, now_ns: int, scan_limit: int) -> int:
    """Put time of the oldest message a get could take (0 if none): MQ's
    MSGAGE. Keys sort by priority then put sequence, so the oldest is the
    first available message of some priority band: the walk looks up one
    message per band and stops after ``scan_limit`` keys."""
    found: set[int] = set()
    oldest = 0
    for walked, key in enumerate(q.iter_keys()):
        if walked >= scan_limit or len(found) == PRIORITIES:
            break
        prio, _seq = key_parts(key)
        if prio in found or key in q.locked:
            continue
        msg = q.lookup(key)
        if msg is None or msg.expired(now_ns):
            continue
        found.add(prio)
        if not oldest or msg.put_time_ns < oldest:
            oldest = msg.put_time_ns
    return oldest
