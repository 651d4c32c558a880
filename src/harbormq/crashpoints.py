"""Named crash points for the crash harness, and delay points for slow disks.

Set ``HARBORMQ_CRASH_AT=name`` (or ``name:N`` to crash at the N-th time the
point is reached) and the process SIGKILLs itself there. Unset, every call is
a dictionary-free no-op. The names are the durability boundaries of the
system, so the tests can aim at exactly the windows that matter.

Set ``HARBORMQ_DELAY_AT=name:MS`` and every pass through the delay point
``name`` sleeps MS milliseconds first: a slow disk under that write, on cue
(``store.flush``: each store write of a flush, on its I/O thread).
"""

from __future__ import annotations

import os
import signal
import time

POINTS = (
    "log.after_write_before_fsync",     # bytes written to the extent, not yet forced
    "log.after_fsync_before_ack",       # forced, waiters not yet told
    "checkpoint.mid",                   # stores flushed, checkpoint end record not written
    "store.mid_flush",                  # inside a store's write transaction
    "extent.mid_switch",                # new extent initialised, control file not updated
    "control.mid_rewrite",              # first control-file copy replaced, second not
    "restart.mid_redo",                 # during forward recovery
    "restart.mid_undo",                 # during backward recovery, after some compensation
    "media.mid_image",                  # a media image's chunk appended, its END not yet
    "media.mid_swap",                   # recreate: old store moved aside, new one not in place
    "channel.sender_prepared",          # a batch in doubt at the sender, END_BATCH not sent
    "channel.sender_confirmed",         # the receiver confirmed, the sender not committed
    "channel.receiver_before_commit",   # a batch's messages put, not committed
    "channel.receiver_committed",       # committed, CONFIRM not sent
    "crestart.mid_apply",               # conditional restart: extents set aside, the new
                                        # extent made, the control file not yet written
    "backup.mid_copy",                  # a backup: a store copied into the .part, more to come
    "restore.mid_swap",                 # a restore: the old target set aside, the new not in place
    "standby.after_fetch",              # standby replay: an archived extent copied in, the
                                        # control file not yet listing it
    "publish.appended",                 # a publication's MSG_PUBLISH appended, no queue changed
    "publish.applied",                  # (outside a unit of work) on every queue, not forced
    "publish.forced",                   # forced, the publisher not yet told
    "trigger.before_commit",            # a put and its trigger message logged in their
                                        # unit of work, the commit not yet
    "pubsub.managed_queue_made",        # a subscription's managed queue defined, its status
                                        # message not yet put
    "pubsub.status_removed",            # a subscription's status message taken, its managed
                                        # queue not yet deleted
)

DELAY_POINTS = (
    "store.flush",                      # a store's write transaction of a flush, before it
    "restart.redo_batch",               # a batch of records redone (on the loop: a slow
                                        # redo, between two of restart's pauses)
)

_target, _, _count = (os.environ.get("HARBORMQ_CRASH_AT") or "").partition(":")
_remaining = int(_count) if _count else 1
if _target and _target not in POINTS:
    raise SystemExit(f"HARBORMQ_CRASH_AT names an unknown crash point {_target!r}; "
                     f"known: {', '.join(POINTS)}")


def crash_point(name: str) -> None:
    global _remaining
    if name != _target:
        return
    _remaining -= 1
    if _remaining <= 0:
        os.kill(os.getpid(), signal.SIGKILL)


_delay_target, _, _delay_ms = (os.environ.get("HARBORMQ_DELAY_AT") or "").partition(":")
if _delay_target and _delay_target not in DELAY_POINTS:
    raise SystemExit(f"HARBORMQ_DELAY_AT names an unknown delay point {_delay_target!r}; "
                     f"known: {', '.join(DELAY_POINTS)}")
_delay_s = float(_delay_ms or 0) / 1000


def delay_point(name: str) -> None:
    """Sleep here when HARBORMQ_DELAY_AT names this point (on the loop thread
    only where the loop is meant to wait: restart's steps)."""
    if name == _delay_target:
        time.sleep(_delay_s)
