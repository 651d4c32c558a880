"""Giving memory back to the system after a burst.

A burst of messages (200,000 SENDs, a flood of receipts, a slow consumer's
backlog read at last) leaves the process's heap at its high-water mark: the
message bodies and frames were allocated by glibc's malloc, and freed memory
inside its heap is kept for reuse rather than returned. Every
``CHECK_INTERVAL_S`` the process's anonymous resident size (its heap, not
the file pages of the stores and the log, which the kernel reclaims by
itself) is read from ``/proc/self/status``; when it is ``GROWTH_BYTES`` above
what it was after the last return, and no longer growing (the burst has
drained), ``malloc_trim(0)`` hands the free pages of every malloc arena back
(glibc only; elsewhere nothing is done). It runs on the event loop and takes
a few milliseconds for hundreds of megabytes. A return of 8 MB or more is
reported (HMQ9561I, with the sizes before and after).

Not here: bounding what a connection may hold in the first place
(``transport.py``: owed output, ``frames.py``: the frame limits).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
from typing import Callable

CHECK_INTERVAL_S = 5.0
#: growth since the last return that is worth a trim
GROWTH_BYTES = 16 * 1024 * 1024
#: a return at least this large is reported
REPORTED_BYTES = 8 * 1024 * 1024


def _load_trim():
    """glibc's malloc_trim, or None (another C library, or none found)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def anonymous_bytes() -> int:
    """This process's anonymous resident memory, RssAnon (0 where /proc is not
    there)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def return_memory() -> bool:
    """Hand the heap's free pages back to the system now; False where it cannot."""
    trim = _TRIM
    if trim is None:
        return False
    trim(0)
    return True


_TRIM = _load_trim()


class MemoryReturn:
    """The periodic check of one process (the STOMP service starts and stops it)."""

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 report: Callable[[str, str], None] | None = None):
        self.loop = loop
        self.report = report
        self.baseline = anonymous_bytes()
        self._last = self.baseline
        self._timer: asyncio.TimerHandle | None = None
        #: how many times memory was returned (for tests and DISPLAY)
        self.returns = 0

    def start(self) -> None:
        if _TRIM is not None and self.baseline:
            self._timer = self.loop.call_later(CHECK_INTERVAL_S, self._check)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check(self) -> None:
        now = anonymous_bytes()
        if now > self.baseline + GROWTH_BYTES and now <= self._last:
            return_memory()
            self.returns += 1
            self.baseline = anonymous_bytes()
            if self.report is not None and now - self.baseline >= REPORTED_BYTES:
                self.report("HMQ9561I", f"{(now - self.baseline) >> 20} MB of memory freed "
                            f"after a burst returned to the system (heap {now >> 20} MB -> "
                            f"{self.baseline >> 20} MB)")
            now = self.baseline
        elif now < self.baseline:
            self.baseline = now
        self._last = now
        self._timer = self.loop.call_later(CHECK_INTERVAL_S, self._check)
