"""Giving memory back to the system after a burst.

A burst of messages (200,000 SENDs, a flood of receipts, a slow consumer's
backlog read at last) leaves the process's heap at its high-water mark: the
message bodies and frames were allocated by glibc's malloc, and freed memory
inside its heap is kept for reuse rather than returned. Every
``CHECK_INTERVAL_S`` the resident size is read (``/proc/self/statm``); when
it is ``GROWTH_BYTES`` above what it was after the last return, and no longer
growing (the burst has drained), ``malloc_trim(0)`` hands the free pages back
(glibc only; elsewhere nothing is done). It runs on the event loop and takes
a few milliseconds for hundreds of megabytes.

Not here: bounding what a connection may hold in the first place
(``transport.py``: owed output, ``frames.py``: the frame limits).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import os

CHECK_INTERVAL_S = 5.0
#: growth since the last return that is worth a trim
GROWTH_BYTES = 32 * 1024 * 1024


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


def resident_bytes() -> int:
    """This process's resident set size (0 where /proc is not there)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
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

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.baseline = resident_bytes()
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
        now = resident_bytes()
        if now > self.baseline + GROWTH_BYTES and now <= self._last:
            return_memory()
            self.returns += 1
            self.baseline = resident_bytes()
            now = self.baseline
        elif now < self.baseline:
            self.baseline = now
        self._last = now
        self._timer = self.loop.call_later(CHECK_INTERVAL_S, self._check)
