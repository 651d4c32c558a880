"""A store's directory: set aside when damaged (kept as evidence, never
destroyed), replaced whole by a rebuilt one, and checked at restart."""

from __future__ import annotations

from pathlib import Path

from ..crashpoints import crash_point
from ..errors import StoreDamaged
from ..fsutil import fsync_dir, rename_durably
from .stores import QueueStore

#: suffixes of a store's work and evidence directories: '#' is never in a queue's
#: directory name (``config.queue_dir_name``), so they cannot meet a real queue
REBUILDING, REPLACED, DAMAGED = "#recreate", "#replaced", "#damaged."


def replace_dir(new: Path, final: Path, *, keep_old: bool) -> None:
    """Put a rebuilt store in place. A damaged old store is kept aside
    (``NAME#damaged.N``) as evidence; a healthy one is removed once the new
    one is there."""
    aside = final.with_name(final.name + REPLACED)
    QueueStore.destroy(aside)
    if final.exists():
        if keep_old:
            set_aside(final)
        else:
            rename_durably(final, aside)
    crash_point("media.mid_swap")
    new.rename(final)
    fsync_dir(final.parent)
    QueueStore.destroy(aside)


def check_store(store: QueueStore, log_end_for, verify_limit_mb: int,
                discarded_at=lambda lsn: None, owner: str | None = None) -> str | None:
    """Why a queue store opened at restart is damaged, or None.
    ``log_end_for(lsn)``: where the log ends, or an LSN it reaches at or past
    ``lsn``. ``discarded_at(lsn)``: the conditional restart whose given-up log
    the store holds effects of (``ControlState.discarded_at``)."""
    try:
        if store.damaged:
            return store.damaged
        if owner is not None and store.owner not in (None, owner):
            return f"it belongs to queue manager {store.owner}, not {owner}"
        lsn = store.recovery_lsn
        why = lsn_problem(lsn, log_end_for(lsn), discarded_at)
        if why:
            return why
        data = store.path / "data.mdb"
        if data.stat().st_size <= verify_limit_mb << 20:
            store.verify()
    except (StoreDamaged, OSError) as exc:
        return exc.message if isinstance(exc, StoreDamaged) else str(exc)
    return None


def lsn_problem(lsn: int, end_lsn: int, discarded_at) -> str | None:
    """Why a store's recovery LSN cannot belong to this log, or None."""
    if lsn > end_lsn:
        return f"its recovery LSN {lsn} lies beyond the end of the log (LSN {end_lsn})"
    d = discarded_at(lsn)
    if d is not None:
        return (f"its recovery LSN {lsn} lies in the log given up by a conditional restart "
                f"(LSN {d['from']} to {d['to']}): it holds effects of that log")
    return None


def set_aside(path: Path) -> Path:
    """Keep a damaged store's files for inspection, never destroy them."""
    n = 1
    while (aside := path.with_name(f"{path.name}{DAMAGED}{n}")).exists():
        n += 1
    rename_durably(path, aside)
    return aside
