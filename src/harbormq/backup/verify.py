"""``harbormq backup verify BACKUP``: verification by trial restore.

1. The manifest of BACKUP and of every backup before it in its chain: each
   reads and passes its own SHA-256, and the chain links (names and manifest
   hashes) hold.
2. Every file each manifest lists: there, of its size and SHA-256. The first
   that is not is named (HMQ8602E): one byte flipped anywhere in a backup is
   found here, in the file that holds it.
3. The log: the extents join up from the full backup's recovery point to the
   backup's end (a gap is named, HMQ8603E).
4. A trial restore into scratch space, rolled forward to the backup's
   consistency point (the end of its log), and every queue's depth and
   content hash, and the definitions' hash, compared with the manifest
   (HMQ8608E names the queues that differ).

BACKUP may also be a queue manager's backup folder (``DIR/QM`` of ``harbormq
backup QM --to DIR``): ``backups_to_verify`` picks its newest backup, or every
one.
"""

from __future__ import annotations

import time
from pathlib import Path

from ..errors import BackupDamaged, VerifyMismatch
from ..fsutil import make_dirs
from . import manifest as mf
from .copying import Copier, Progress
from .history import record_verified
from .materialize import backup_extents
from .trial import trial_restore


def verify_backup(backup: Path, *, scratch: Path | None = None,
                  progress: Progress | None = None) -> dict:
    backup = Path(backup).absolute()
    chain = mf.resolve_chain(backup)
    copier = Copier(progress)
    checked = 0
    last = [time.monotonic()]

    def counted(n: int) -> None:
        now = time.monotonic()
        copier.counted(n, now - last[0], "check")
        last[0] = now

    for path, m in chain:
        checked += mf.check_files(path, m, counted)
    extents = backup_extents(chain)
    m = chain[-1][1]
    base = Path(scratch).absolute() if scratch else backup.parent
    make_dirs(base)
    states = trial_restore(chain, base / f".verify-{backup.name}.trial")
    problems = []
    want, got = m["queues"], states["queues"]
    for name in sorted(set(want) | set(got)):
        w, g = want.get(name), got.get(name)
        if w == g:
            continue
        if w is None:
            problems.append(f"queue {name} is restored but not in the manifest")
        elif g is None:
            problems.append(f"queue {name} of the manifest is not restored")
        else:
            same = g.get("content_sha256") == w.get("content_sha256")
            problems.append(f"queue {name}: depth {g.get('depth')} (manifest "
                            f"{w.get('depth')}), content hash "
                            f"{'the same' if same else 'different'}"
                            + (f", damaged: {g['damaged']}" if "damaged" in g else ""))
    if states["definitions_sha256"] != m["definitions_sha256"]:
        problems.append("the object definitions differ from the manifest's")
    if problems:
        raise VerifyMismatch(f"backup {backup.name}: the trial restore (rolled forward to LSN "
                             f"{states['restart']['end_lsn']}) does not give what the "
                             "manifest lists: " + "; ".join(problems), path=str(backup))
    record_verified(m, backup, time.time_ns())
    return {"backup": str(backup), "chain": [p.name for p, _ in chain],
            "files_bytes": checked, "extents": len(extents), "queues": got,
            "consistency_lsn": m["consistency_lsn"], "restart": states["restart"]}


def backups_to_verify(path: Path, *, every: bool = False) -> list[Path]:
    """What ``backup verify PATH`` verifies, oldest first: PATH when it is a
    backup (it has a manifest, or is named as one: a missing manifest is then
    damage, named by the verification), else the newest backup of the queue
    manager's backup folder PATH, or every one with ``every``. BackupDamaged
    when PATH is neither, saying which backups it holds."""
    path = Path(path)
    if (path / mf.MANIFEST).exists() or mf.NAME_RE.match(path.name):
        return [path]
    held = mf.list_backups(path)
    if held:
        return held if every else held[-1:]
    raise _not_a_backup(path)


def _not_a_backup(path: Path) -> BackupDamaged:
    """Why ``path`` holds nothing to verify, with the backup folders under it (a
    directory given to ``backup --to`` holds one per queue manager)."""
    if not path.is_dir():
        return BackupDamaged(f"{path} is not a backup: it "
                             f"{'is a file' if path.exists() else 'does not exist'}",
                             path=str(path))
    if path.name.endswith(mf.PART):
        return BackupDamaged(f"{path} is a backup that was never completed (a .part directory "
                             "is one being written, or one cut short)", path=str(path),
                             hint="verify a complete backup beside it")
    folders = [(d, len(mf.list_backups(d))) for d in sorted(path.iterdir()) if d.is_dir()]
    folders = [(d, n) for d, n in folders if n]
    text = f"{path} is not a backup (it has no {mf.MANIFEST}) and holds no backup"
    if not folders:
        return BackupDamaged(text, path=str(path))
    return BackupDamaged(text + "; the backup folders in it: " +
                         ", ".join(f"{d.name} ({n} backup(s))" for d, n in folders),
                         path=str(path),
                         hint=f"verify a queue manager's backups: harbormq backup verify "
                              f"{folders[0][0]}")
