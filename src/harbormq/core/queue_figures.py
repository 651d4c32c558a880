"""Figures of one local queue that take a walk of its keys to find, computed
one way for DISPLAY QSTATUS (``admin/commands.py``) and the metrics
(``http/metrics_snapshot.py``). The plain counters (depth, puts, gets) are
attributes of ``LocalQueue`` (``queue.py``) and need nothing here.
"""

from __future__ import annotations

from ..log.records import key_parts
from .queue import LocalQueue

#: a bit for each priority a key can have (0 to 9): the walk stops once it
#: has met one of each
ALL_PRIORITIES = (1 << 10) - 1


def oldest_put_ns(q: LocalQueue, now_ns: int, scan_limit: int) -> int:
    """Put time of the oldest message a get could take (0 if none): MQ's
    MSGAGE. Keys sort by priority then put sequence, so the oldest is the
    first available message of some priority band: the walk looks up one
    message per band and stops after ``scan_limit`` keys."""
    found = 0                   # a bit per priority met (no set: the metrics call
    oldest = 0                  # this for every queue holding messages)
    for walked, key in enumerate(q.iter_keys()):
        if walked >= scan_limit or found == ALL_PRIORITIES:
            break
        prio, _seq = key_parts(key)
        if found >> prio & 1 or key in q.locked:
            continue
        msg = q.lookup(key)
        if msg is None or msg.expired(now_ns):
            continue
        found |= 1 << prio
        if not oldest or msg.put_time_ns < oldest:
            oldest = msg.put_time_ns
    return oldest
