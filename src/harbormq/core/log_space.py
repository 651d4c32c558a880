"""Log-space flow control on a circular log: producers are held, not failed.

When the circular log has no spare extent left (the active extent is the
last one restart does not need), producers of persistent messages are held
(their SEND or put waits, and a STOMP connection reads nothing more) until a
checkpoint frees an extent; what is left of the active extent goes to what
frees space: consumers' gets, commits, backouts and the checkpoints
themselves (nothing reserves it: only producers of persistent messages stop
writing to it). A backlog building at full speed then slows its producers to the
rate the stores are flushed, as RabbitMQ's disk alarm blocks publishers,
instead of failing them with a full log. Only a producer held for longer
than ``tuning.log_space_wait_ms`` fails (HMQ7463E), when what pins the log
cannot end by itself (a store that cannot be written); when a unit of work
that relief cannot back out pins the log (one in doubt), the held producers
fail at once, told which, as before flow control.

The hold and its release are operator messages (HMQ7461W, HMQ7462I; under a
backlog that lasts, holds come and go several times a second, so one pair per
``_REPORT_S``, the release saying how many holds and how long in all since
the last; a hold of ``_LONG_HOLD_S`` or more is always reported), and a
log-full refusal names what pins the restart point and reaches the operator
log as well as the client (HMQ7463E, at most one line per ``_REPORT_S`` with
the count of refusals since, the ones held back reported when it ends).

``LogSpaceFlowControl`` is a part of the core (``engine.QueueManagerCore``),
which provides what ``LogSpaceHost`` lists. Not here: what frees the space
(the checkpoint in ``checkpoints.py``; the relief that backs out units of
work pinning the log in ``shunting.py``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import LogFull

if TYPE_CHECKING:
    from ..config import QMConfig
    from ..log.manager import RecoveryLog
    from .operator_log import OperatorLog
    from .queue import LocalQueue
    from .uow import UnitOfWork

#: at most one report of holds (HMQ7461W and its HMQ7462I), and one of log-full
#: refusals (HMQ7463E), this often
_REPORT_S = 30.0
#: ... except a hold this long, which is reported whatever came before it
_LONG_HOLD_S = 5.0
#: a held producer looks again (and starts the relief again) this often
_WAIT_SLICE_S = 0.5


class LogSpaceHost(Protocol):
    """What log-space flow control uses of the rest of the core."""
    name: str
    config: QMConfig
    log: RecoveryLog
    oplog: OperatorLog
    loop: asyncio.AbstractEventLoop | None
    queues: dict[str, LocalQueue]
    uows: dict[int, UnitOfWork]
    checkpoint_flushing_since: float | None

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task: ...

    def check_running(self) -> None: ...

    def relieve_log_pressure(self) -> None: ...

    def units_of_work_pinning_log(self) -> list[UnitOfWork]: ...

    def _report_hold(self) -> None: ...

    def _end_hold(self, how: str) -> None: ...

    def _refusal(self) -> LogFull: ...

    def _report_full(self) -> None: ...

    def describe_restart_pin(self) -> str: ...

    def _on_log_full(self, exc: LogFull) -> None: ...

    def _start_hold(self) -> None: ...


class LogSpaceFlowControl:
    """Log-space flow control of the core (a part of ``QueueManagerCore``, which
    is its ``LogSpaceHost``)."""

    def _init_log_space_flow(self) -> None:
        self._log_space_waiters: list[asyncio.Future] = []
        #: when the producers now held began to be (None: none is)
        self._held_since: float | None = None
        #: holds since the last HMQ7461W, and the seconds they lasted
        self._holds, self._held_s = 0, 0.0
        self._hold_reported_at: float | None = None    # the last HMQ7461W
        self._hold_reported = False          # this hold's HMQ7461W was written
        self._full_refusals = 0              # log-full refusals not yet reported
        self._full_last = ""                 # the newest refusal's text
        self._full_reported_at: float | None = None
        self._full_report_due: asyncio.TimerHandle | None = None
        #: relief met a unit of work it cannot back out pinning the log: producers
        #: are refused at once while it does
        self._pinned_by_uow = False
        self.log.describe_pin = self.describe_restart_pin
        self.log.on_full = self._on_log_full

    def log_space_short(self: LogSpaceHost) -> bool:
        """A producer of persistent messages must wait: the circular log has no
        spare extent (a linear log makes new extents as it goes)."""
        return self.log.state.log_type == "circular" and self.log.available_extents() == 0

    async def wait_for_log_space(self: LogSpaceHost, deadline: float) -> None:
        """Hold one producer until the log has a spare extent again, or fail with
        LogFull (naming what pins the log) at ``deadline`` (time.monotonic()).
        It waits in slices, starting the relief again at each (a relief that
        failed, a store that could not be written, is tried again) and failing
        at once when the queue manager stops."""
        counted = False
        while self.log_space_short():
            self.check_running()
            if self._pinned_by_uow:
                if self.units_of_work_pinning_log():
                    # relief found a unit of work it cannot back out: another
                    # round would only spend the last extent (each is a checkpoint)
                    raise self._refusal()
                self._pinned_by_uow = False
            left = deadline - time.monotonic()
            if left <= 0:
                exc = LogFull(f"the circular log of queue manager {self.name} had no spare "
                              f"extent for {self.config.tuning.log_space_wait_ms} ms "
                              f"(tuning.log_space_wait_ms): {self.describe_restart_pin()}",
                              hint="what pins the restart point must end or be written, or "
                              "the queue manager needs more log space")
                self._on_log_full(exc)
                raise exc
            fut = self.loop.create_future()
            self._log_space_waiters.append(fut)
            if not counted:                  # one hold per producer, however many looks
                counted = True
                self._holds += 1
            if self._held_since is None:
                self._start_hold()
            elif not self._hold_reported and \
                    time.monotonic() - self._held_since >= _LONG_HOLD_S:
                self._report_hold()          # a long hold is reported whatever came before
            self.relieve_log_pressure()
            try:
                await asyncio.wait_for(fut, min(left, _WAIT_SLICE_S))
            except TimeoutError:
                pass
            finally:
                if fut in self._log_space_waiters:
                    self._log_space_waiters.remove(fut)

    def _start_hold(self: LogSpaceHost) -> None:
        now = time.monotonic()
        self._held_since = now
        self._hold_reported = False
        if self._hold_reported_at is None or now - self._hold_reported_at >= _REPORT_S:
            self._report_hold()

    def _report_hold(self: LogSpaceHost) -> None:
        self._hold_reported = True
        self._hold_reported_at = time.monotonic()
        self.oplog.emit("HMQ7461W", f"the circular log of queue manager {self.name} "
                            "has no spare extent: producers of persistent messages are "
                            "held until a checkpoint frees one; restart needs the log "
                            f"from LSN {self.log.state.restart_lsn}: "
                            f"{self.describe_restart_pin()}")

    def release_held_producers(self: LogSpaceHost) -> None:
        """After a checkpoint: if the log has a spare extent again, the held
        producers go on."""
        if self._held_since is None or self.log_space_short():
            return
        waiters, self._log_space_waiters = self._log_space_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)
        self._end_hold("a spare extent again")

    def _end_hold(self: LogSpaceHost, how: str) -> None:
        held = time.monotonic() - self._held_since
        self._held_s += held
        self._held_since = None
        if self._hold_reported:
            self.oplog.emit("HMQ7462I", f"the circular log of queue manager {self.name}: "
                            f"{how} after {held:.1f} s; since the last report, producers were "
                            f"held {self._holds} time(s), {self._held_s:.1f} s in all")
            self._holds, self._held_s = 0, 0.0

    def refuse_held_producers(self: LogSpaceHost) -> None:
        """What pins the log is a unit of work that relief cannot back out (in
        doubt, or too new to be a victim): holding producers would not free
        the log, and each relief round would spend what is left of it. The
        held producers fail now, told what pins it, and so does every
        producer that comes while that unit of work still pins the log."""
        self._pinned_by_uow = True
        exc = self._refusal()
        waiters, self._log_space_waiters = self._log_space_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_exception(exc)
        if self._held_since is not None:
            self._end_hold("refused: a unit of work pins the log")

    def _refusal(self: LogSpaceHost) -> LogFull:
        exc = LogFull(f"the circular log of queue manager {self.name} is full: restart needs "
                      f"it from LSN {self.log.state.restart_lsn}: "
                      f"{self.describe_restart_pin()}",
                      hint="the unit of work must be committed, backed out or resolved, or "
                      "the queue manager needs more log space")
        self._on_log_full(exc)
        return exc

    def units_of_work_pinning_log(self: LogSpaceHost) -> list[UnitOfWork]:
        """Units of work that began in the oldest live extent: they keep it
        needed whatever the stores do."""
        chain = self.log.chain()
        if len(chain) < 2 or chain[0].end_lsn is None:
            return []
        return [u for u in self.uows.values() if u.first_lsn and u.first_lsn < chain[0].end_lsn]

    def producers_held(self) -> int:
        return len(self._log_space_waiters)

    def describe_restart_pin(self: LogSpaceHost) -> str:
        """What keeps the oldest live extent needed: units of work that began in
        it, stores with changes from it not yet flushed, the checkpoint in
        progress (the log behind it is freed only when it ends)."""
        chain = self.log.chain()
        oldest_end = chain[0].end_lsn if chain and chain[0].end_lsn else self.log.end_lsn
        pins = []
        uows = sorted(self.units_of_work_pinning_log(), key=lambda u: u.first_lsn)
        pins += [f"unit of work {u.id} ({u.state}, owner {u.owner or '-'}) from LSN "
                 f"{u.first_lsn}" for u in uows[:3]]
        stores = sorted((q for q in self.queues.values()
                         if q.recovery_lsn and q.recovery_lsn < oldest_end),
                        key=lambda q: q.recovery_lsn)
        pins += [f"the store of queue {q.name}, not flushed since LSN {q.recovery_lsn}"
                 for q in stores[:3]]
        if self.checkpoint_flushing_since is not None:
            pins.append("the checkpoint in progress, whose store flush has run for "
                        f"{time.monotonic() - self.checkpoint_flushing_since:.1f} s (the log "
                        "behind it is freed when it ends)")
        elif not pins:
            pins.append(f"the last checkpoint's restart point (LSN {self.log.state.restart_lsn}),"
                        " which the next checkpoint moves on")
        return "; ".join(pins)

    def _on_log_full(self: LogSpaceHost, exc: LogFull) -> None:
        """A log-full refusal reaches the operator log too, summarised: one line
        per ``_FULL_REPORT_S`` with the refusals since the last."""
        self._full_refusals += 1
        self._full_last = exc.message
        now = time.monotonic()
        if self._full_reported_at is not None and now - self._full_reported_at < _REPORT_S:
            if self._full_report_due is None and self.loop is not None:
                # the refusals held back are reported when the period ends
                self._full_report_due = self.loop.call_later(
                    self._full_reported_at + _REPORT_S - now, self._report_full)
            return
        self._report_full()

    def _report_full(self: LogSpaceHost) -> None:
        self._full_report_due = None
        if not self._full_refusals:
            return
        count, self._full_refusals = self._full_refusals, 0
        self._full_reported_at = time.monotonic()
        self.oplog.emit("HMQ7463E", f"{self._full_last} ({count} refusal(s) since the last "
                        "report)")
