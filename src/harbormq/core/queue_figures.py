"""Figures of one local queue that take a walk of its keys to find, computed
one way for DISPLAY QSTATUS (``admin/commands.py``) and the metrics
(``http/metrics_snapshot.py``). The plain counters (depth, puts, gets) are
attributes of ``LocalQueue`` (``queue.py``) and need nothing here.
"""

from __future__ import annotations

from .queue import LocalQueue

#: the first byte of a key is its priority band (9 - priority, 0 to 9)
LAST_BAND = 9


def oldest_put_ns(q: LocalQueue, now_ns: int, scan_limit: int) -> int:
    """Put time of the oldest message a get could take (0 if none): MQ's
    MSGAGE. Keys sort by priority then put sequence, so the oldest is the
    first available message of some priority band: the walk looks up the
    first available message of a band, then seeks to the next band (the rest
    of the band is younger), and stops after ``scan_limit`` keys in all (the
    locked and expired ones it steps over)."""
    oldest, walked = 0, 0
    start: bytes | None = None
    while True:
        next_band = None
        for key in q.iter_keys(start):
            walked += 1
            if walked > scan_limit:
                return oldest
            if key in q.locked:
                continue
            msg = q.lookup(key)
            if msg is None or msg.expired(now_ns):
                continue
            if not oldest or msg.put_time_ns < oldest:
                oldest = msg.put_time_ns
            next_band = key[0] + 1
            break
        if next_band is None or next_band > LAST_BAND:
            return oldest
        start = bytes([next_band])
