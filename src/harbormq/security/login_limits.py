"""The rate limit of failed logins, per peer address.

After ``limit`` failed logins from one address within ``window_s`` seconds,
further logins from that address are refused at once, without a password
check, until the oldest of those failures is ``window_s`` old. A refusal does
not count as a failure: a client that retries while refused is let in again
when the window has passed, and a good login does not wipe the count (a
known account would otherwise let a guesser reset it). The refusal does not
depend on the user named,
so a refused unknown user and a refused known one still look the same.

Pure: the clock is passed in, nothing here sleeps, logs or does I/O (the
front end that authenticates decides what a refusal costs the client and
what reaches the operator log). The peers remembered are bounded: the oldest
entries go first when there are more than ``max_peers``.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from typing import Callable


class LoginFailures:
    def __init__(self, limit: int, window_s: float, *, max_peers: int = 10_000,
                 clock: Callable[[], float] = time.monotonic):
        self.limit = limit
        self.window_s = window_s
        self.max_peers = max_peers
        self.clock = clock
        #: peer address -> times of its failures within the window, oldest first
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def _recent(self, peer: str, now: float) -> deque[float] | None:
        times = self._failures.get(peer)
        if times is None:
            return None
        while times and times[0] <= now - self.window_s:
            times.popleft()
        if not times:
            del self._failures[peer]
            return None
        return times

    def refused_for(self, peer: str) -> float:
        """Seconds until ``peer`` may try a login again; 0 when it may now."""
        if self.limit <= 0:
            return 0.0
        now = self.clock()
        times = self._recent(peer, now)
        if times is None or len(times) < self.limit:
            return 0.0
        return times[-self.limit] + self.window_s - now

    def failed(self, peer: str) -> int:
        """Count a failed login from ``peer``; the failures within the window."""
        now = self.clock()
        times = self._recent(peer, now)
        if times is None:
            times = self._failures[peer] = deque(maxlen=max(1, self.limit))
            while len(self._failures) > self.max_peers:
                self._failures.popitem(last=False)
        else:
            self._failures.move_to_end(peer)
        times.append(now)
        return len(times)
