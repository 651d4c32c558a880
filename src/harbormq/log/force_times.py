"""How long the log writer takes to make a batch of records durable: the
forces counted and their durations in fixed buckets (a histogram).

The writer thread records one duration per force (a group commit: the
writes of one batch and their fdatasync), never per record; readers (the
metrics, ``http/metrics.py``) copy the figures from another thread without
a lock, so a copy may be one force behind in one figure: metrics tolerate
that. Not here: the writer itself (``writer.py``).
"""

from __future__ import annotations

from bisect import bisect_left

#: upper bounds (seconds) of the buckets: from a fast NVMe force to a slow disk
BOUNDS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
          0.5, 1.0, 2.5)


class ForceTimes:
    """Forces since the log was opened for writing, with their durations."""

    def __init__(self) -> None:
        self.count = 0
        self.seconds = 0.0
        #: per bucket of BOUNDS (<= its bound), the last one past every bound
        self.buckets = [0] * (len(BOUNDS) + 1)

    def record(self, seconds: float) -> None:
        """(writer thread) One force took ``seconds``."""
        self.buckets[bisect_left(BOUNDS, seconds)] += 1
        self.seconds += seconds
        self.count += 1

    def cumulative(self) -> list[tuple[float, int]]:
        """(bound, forces that took at most that long) for every bound, then
        (inf, every force): a Prometheus histogram's buckets."""
        out, total = [], 0
        for bound, n in zip((*BOUNDS, float("inf")), list(self.buckets), strict=True):
            total += n
            out.append((bound, total))
        return out
