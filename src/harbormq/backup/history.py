"""The backup record of a queue manager: when its last backup was taken and
when a backup of it was last verified, kept in its own directory
(``qmgrs/<QM>/backup-history.json``) so that the running queue manager can
report them (``/metrics``, the console) without knowing where its backups go.

``take.py`` records a backup once it is published (its trial restore made
it a verified one too); ``verify.py`` records a verification when the
backup's queue manager lives on this machine (the manifest's ``qm_dir``
holds a qm.toml of the same name). The record is written atomically and is
advice only: losing it loses no backup, and a write that fails is ignored.

Not here: the backups themselves (``manifest.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..fsutil import atomic_write

FILE = "backup-history.json"


def read_history(qm_dir: Path) -> dict | None:
    """The record (``backup_time_s``, ``backup``, ``verified_time_s``,
    ``verified``), or None when there is none or it cannot be read."""
    try:
        d = json.loads((Path(qm_dir) / FILE).read_text())
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) else None


def _update(qm_dir: Path, **facts) -> None:
    qm_dir = Path(qm_dir)
    if not (qm_dir / "qm.toml").exists():
        return                  # not a queue manager of this machine
    d = read_history(qm_dir) or {}
    d.update(facts)
    try:
        atomic_write(qm_dir / FILE, json.dumps(d, sort_keys=True, indent=1).encode())
    except OSError:
        pass                    # advice only: the backup itself is what counts


def record_backup(qm_dir: Path, backup: Path, finished_ns: int) -> None:
    """A backup was published (and verified by its trial restore)."""
    _update(qm_dir, backup_time_s=finished_ns / 1e9, backup=str(backup),
            verified_time_s=finished_ns / 1e9, verified=str(backup))


def record_verified(manifest: dict, backup: Path, when_ns: int) -> None:
    """``backup verify`` found ``backup`` good."""
    source = manifest.get("source") or {}
    qm_dir = source.get("qm_dir")
    if qm_dir and (Path(qm_dir) / "qm.toml").is_file():
        _update(Path(qm_dir), verified_time_s=when_ns / 1e9, verified=str(backup))
