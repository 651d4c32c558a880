"""``harbormq backup QM --to DIR [--incremental] [--keep N]`` (docs/backup.md).

Hot (the queue manager running: a fuzzy backup, redbook §2.3.1 method 2) or
cold (stopped: its instance lock held throughout, so it cannot start).

A hot full backup:
1. asks the queue manager (admin socket) to checkpoint: the control file on
   disk then names the recovery point R, the checkpoint's restart LSN, before
   any store is copied;
2. copies qm.toml, users and authority records, the catalog, then every
   queue's store as a consistent LMDB snapshot, copying each extent of the
   log from R on as soon as it is closed (between two stores): a closed extent
   is stable, and copied early it is never lost to log management or to a
   circular log's reuse;
3. asks the queue manager to switch the log: the extent being written is
   closed, so every effect a copied store can hold (its recovery LSN is at
   most the log's end when it was copied) lies in a closed extent ending at E;
4. copies the remaining extents up to E (one deleted by log management
   meanwhile is taken from the archive, checked against the archive's
   manifest; a circular extent reused before it was copied fails the backup);
5. restores the result into scratch space and starts it (a trial restore,
   ``trial.py``): rolled forward from R to E it gives each queue's depth and
   content hash at E, the backup's consistency point;
6. writes the manifest and renames ``NAME.part`` to ``NAME``: only then is it
   a backup.

An incremental backup copies the configuration and the extents from the end
of the previous backup to a new switch, and names the previous backup (and
its manifest's SHA-256); a restore reads the chain back to the full backup.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..config import QMConfig
from ..crashpoints import crash_point
from ..errors import BackupError, LogCorrupt, QueueManagerNotRunning, QueueManagerRunning
from ..fsutil import file_name, fsync_dir, make_dirs, remove_tree, rename_durably
from ..log import archive
from ..log.control import ExtentInfo, encode_copy
from ..log.manager import RecoveryLog
from ..log.reader import ExtentReader
from ..log.records import extent_file_name
from ..qmgr.lifecycle import InstanceLock
from . import manifest as mf
from .copying import Copier, Pacer, Progress
from .history import record_backup
from .materialize import CONTROL_COPY
from .trial import trial_restore

#: ask(request) -> the running queue manager's reply (its "result");
#: QueueManagerNotRunning when it is not running
Ask = Callable[[dict], dict]


@dataclass
class BackupResult:
    path: Path
    kind: str
    mode: str
    bytes: int
    seconds: float
    copy_seconds: float
    trial_seconds: float
    first_lsn: int
    end_lsn: int
    removed: list[str] = field(default_factory=list)
    #: seconds --max-rate held the backup back
    paced_seconds: float = 0.0

    @property
    def mb_s(self) -> float:
        return self.bytes / 1e6 / max(1e-9, self.copy_seconds)


class _RootLock:
    """One backup (or rotation) of a queue manager's backups at a time."""

    def __init__(self, root: Path):
        self.path = root / mf.LOCK
        self.fd: int | None = None

    def __enter__(self):
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise BackupError(f"another backup of this queue manager is running in "
                              f"{self.path.parent}", path=str(self.path.parent),
                              hint="wait for it to end") from None
        self.fd = fd
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def sweep_leftovers(root: Path) -> list[str]:
    """Directories of backups that were killed (``.part``), of scratch restores
    (``.trial``) and of rotations cut short (``.deleting``): never a backup,
    removed (under the root's lock: no backup is using them)."""
    gone = []
    for p in sorted(Path(root).iterdir()):
        if p.is_dir() and p.name.endswith((mf.PART, ".trial", mf.DELETING)):
            remove_tree(p)
            gone.append(p.name)
    return gone


class _Backup:
    def __init__(self, config: QMConfig, part: Path, copier: Copier, start_lsn: int):
        self.config = config
        self.part = part
        self.copier = copier
        self.start_lsn = start_lsn
        self.files: list[dict] = []
        self.extents: dict[int, dict] = {}      # first LSN -> entry
        self.log = RecoveryLog(config.log_dir, config.name, config.log_dual_dir)

    def control(self):
        self.log.state = self.log.control.load(repair=False)
        return self.log.state

    def add(self, rel: str, kind: str, size: int, sha: str, **extra) -> None:
        self.files.append({"path": rel, "kind": kind, "size": size, "sha256": sha, **extra})

    def copy_config(self) -> None:
        c = self.config
        for src, rel, kind in ((c.config_path, "config/qm.toml", "config"),
                               (c.users_path, "config/users.json", "users"),
                               (c.authrecs_path, "config/authrecs.json", "authrecs")):
            if src.exists():
                size, sha = self.copier.copy_file(src, self.part / rel)
                self.add(rel, kind, size, sha)

    def copy_stores(self, between=None) -> None:
        c = self.config
        size, sha = self.copier.copy_store(c.catalog_dir, self.part / "qmgr")
        self.add("qmgr/data.mdb", "catalog", size, sha)
        qdir = c.queues_dir
        for d in sorted(qdir.iterdir()) if qdir.is_dir() else []:
            # '#': a media recovery's work or evidence; '.orphan': kept aside
            if not d.is_dir() or "#" in d.name or d.name.endswith(".orphan") or \
                    not (d / "data.mdb").exists():
                continue
            try:
                size, sha = self.copier.copy_store(d, self.part / "queues" / d.name)
            except BackupError:
                if not (d / "data.mdb").exists():
                    continue     # deleted meanwhile: restart redoes its DELETE
                raise
            from ..fsutil import name_of_file
            self.add(f"queues/{d.name}/data.mdb", "store", size, sha, queue=name_of_file(d.name))
            crash_point("backup.mid_copy")
            if between is not None:
                between()

    def copy_closed_extents(self, upto: int | None = None) -> None:
        """Every closed extent from ``start_lsn`` on (to ``upto``) not copied yet.

        A circular log's extent freed by a checkpoint since the backup began
        (the restart point moved past it: a checkpoint right after the
        backup's switch frees the extent just closed) is still what the
        backup needs: while it is not reused it keeps its LSNs, and the copy
        counts only if it reads whole (``_copy_extent``)."""
        st = self.control()
        for e in sorted(st.extents, key=lambda e: e.first_lsn):
            if e.state not in ("full", "free") or e.end_lsn is None or \
                    e.end_lsn <= self.start_lsn or \
                    e.first_lsn in self.extents or (upto is not None and e.first_lsn >= upto):
                continue
            self._copy_extent(e)

    def _copy_extent(self, e: ExtentInfo, *, open_extent: bool = False) -> None:
        name = extent_file_name(e.number)
        rel = f"log/{name}"
        dst = self.part / rel
        size = sha = None
        if not e.deleted and self.log.extent_present(e):
            src = self.log.extent_copies(e)[0][1] if open_extent else \
                self.log.readable_extent(e)
            size, sha = self.copier.copy_file(src, dst)
            if not open_extent:
                now = self.control()
                again = next((x for x in now.extents if x.number == e.number), None)
                if again is not None and again.first_lsn == e.first_lsn and \
                        again.state == "free":
                    # freed meanwhile, perhaps being reused (zero-filled before the
                    # control file says so): the copy counts only if it reads whole
                    _check_extent_records(dst, e)
                elif again is None or again.first_lsn != e.first_lsn or again.state != "full":
                    raise BackupError(
                        f"log extent {name} (LSN {e.first_lsn}..{e.end_lsn}) was reused by "
                        "the circular log while it was being copied: the log wrapped during "
                        "the backup", path=str(src),
                        hint="give the queue manager more log space, back up while it is "
                             "less busy, or take a cold backup")
                _check_extent_copy(dst, e)
        if size is None:
            size, sha = self._from_archive(e, dst)
        end = e.end_lsn
        if open_extent:
            reader = ExtentReader(dst, newest=True)
            for _rec in reader.records():
                pass
            end = reader.end.lsn
        self.extents[e.first_lsn] = {"number": e.number, "first_lsn": e.first_lsn,
                                     "end_lsn": None if open_extent else e.end_lsn,
                                     "log_end": end, "file": rel, "archived": e.archived}
        self.add(rel, "extent", size, sha, number=e.number)

    def _from_archive(self, e: ExtentInfo, dst: Path) -> tuple[int, str]:
        name = extent_file_name(e.number)
        problems = []
        for src, entry in archive.find(self.config.log_archive_paths, self.config.name,
                                       e.number):
            if entry.first_lsn != e.first_lsn:
                continue
            size, sha = self.copier.copy_file(src, dst, expect=(entry.size, entry.sha256))
            if (size, sha) == (entry.size, entry.sha256):
                return size, sha
            problems.append(f"{src} fails its SHA-256")
        raise BackupError(f"log extent {name} (LSN {e.first_lsn}..{e.end_lsn}) is needed by "
                          "the backup but is no longer in the log directory, and no archive "
                          "holds a good copy" + (f" ({'; '.join(problems)})" if problems else ""),
                          lsn=e.first_lsn,
                          hint="keep the log from the backup's recovery point until the "
                               "backup ends (log management 'manual', or an archive path)")

    def save_control(self) -> None:
        st = self.control()
        from ..fsutil import atomic_write
        make_dirs((self.part / CONTROL_COPY).parent)
        atomic_write(self.part / CONTROL_COPY, encode_copy(st))
        size, sha = mf.file_sha256(self.part / CONTROL_COPY)
        self.add(CONTROL_COPY, "control", size, sha)


def _check_extent_records(path: Path, e: ExtentInfo) -> None:
    """Every record of the copy, its LSN and CRC, to the EXTENT_END the control
    file names: a copy that met the extent's reuse (zeros, a new cycle's
    records) fails."""
    try:
        reader = ExtentReader(path, newest=False)
        for _rec in reader.records():
            pass
        ok = reader.header.first_lsn == e.first_lsn and reader.end is not None and \
            reader.end.how == "extent_end" and reader.end.lsn == e.end_lsn
    except LogCorrupt:
        ok = False
    if not ok:
        raise BackupError(f"log extent {extent_file_name(e.number)} (LSN {e.first_lsn}.."
                          f"{e.end_lsn}) was reused by the circular log while it was being "
                          "copied: the log wrapped during the backup", path=str(path),
                          hint="give the queue manager more log space, back up while it is "
                               "less busy, or take a cold backup")


def _check_extent_copy(path: Path, e: ExtentInfo) -> None:
    """The copy's header is the extent's (number, first LSN): a circular
    extent reused under us would show another."""
    reader = ExtentReader(path, newest=False)
    if reader.header.first_lsn != e.first_lsn or reader.header.extent_number != e.number:
        raise BackupError(f"the copy of log extent {extent_file_name(e.number)} starts at LSN "
                          f"{reader.header.first_lsn}, the control file says {e.first_lsn}: "
                          "it was reused while it was copied", path=str(path))


def take_backup(config: QMConfig, to: Path, *, incremental: bool = False,
                keep: int | None = None, ask: Ask | None = None,
                progress: Progress | None = None, max_rate: float | None = None
                ) -> BackupResult:
    """``max_rate``: bytes a second the backup may stream (None: as fast as it
    can); copies, and the trial restore's copies, replay and hashing. An I/O
    error (a full disk, EIO) is a BackupError naming the file."""
    try:
        return _take_backup(config, to, incremental=incremental, keep=keep, ask=ask,
                            progress=progress, max_rate=max_rate)
    except OSError as exc:
        raise BackupError(f"the backup could not be taken: {exc}", path=exc.filename,
                          hint="nothing was published; what was written is left in a .part "
                               "directory that the next backup removes") from None


def _take_backup(config: QMConfig, to: Path, *, incremental: bool, keep: int | None,
                 ask: Ask | None, progress: Progress | None, max_rate: float | None
                 ) -> BackupResult:
    if keep is not None and keep < 1:
        raise BackupError(f"--keep {keep}: keep at least one backup")
    if max_rate is not None and max_rate <= 0:
        raise BackupError(f"--max-rate {max_rate / 1e6:g}: the rate must be above 0 MB/s")
    root = Path(to).absolute() / file_name(config.name)
    make_dirs(root)
    with _RootLock(root):
        sweep_leftovers(root)
        previous = None
        if incremental:
            found = mf.good_backups(root, config.name)
            if not found:
                raise BackupError(f"no backup of queue manager {config.name} in {root} to "
                                  "base an incremental backup on", path=str(root),
                                  hint=f"take a full backup first: harbormq backup "
                                       f"{config.name} --to {to}")
            previous = found[-1]
        kind = "incremental" if incremental else "full"
        name = mf.backup_name(kind)
        part = root / (name + mf.PART)
        make_dirs(part)
        started_ns = time.time_ns()
        t0 = time.monotonic()
        pacer = Pacer(max_rate)
        copier = Copier(progress, uncached=True, pacer=pacer)
        hot = True
        try:
            if ask is None:
                raise QueueManagerNotRunning("no admin connection")
            ask({"cmd": "ping"})
        except QueueManagerNotRunning:
            hot = False
        if hot:
            facts = _hot(config, part, copier, previous, ask)
        else:
            lock = InstanceLock(config)
            try:
                lock.acquire()
            except QueueManagerRunning:
                raise BackupError(
                    f"queue manager {config.name} holds its lock but does not answer on its "
                    "admin socket (starting or stopping?): no backup taken",
                    hint="try again once it has started or ended") from None
            try:
                facts = _cold(config, part, copier, previous)
            finally:
                lock.release()
        copy_seconds = time.monotonic() - t0
        bk: _Backup = facts.pop("backup")
        m = {
            "format": mf.FORMAT, "version": mf.FORMAT_VERSION, "name": name,
            "qm_name": config.name, "kind": kind, "mode": "hot" if hot else "cold",
            "created_ns": started_ns,
            "source": {"home": str(config.home), "qm_dir": str(config.qm_dir),
                       "log_dir": str(config.log_dir),
                       "dual_dir": str(config.log_dual_dir) if config.log_dual_dir else None,
                       "archive_paths": [str(p) for p in config.log_archive_paths],
                       "host": socket.gethostname()},
            "previous": None if previous is None else {
                "name": previous[0].name, "manifest_sha256": mf.manifest_sha256(previous[0])},
            "base": name if previous is None else previous[1]["base"],
            "lsn": facts["lsn"], "consistency_lsn": facts["lsn"]["end"],
            "extents": [bk.extents[k] for k in sorted(bk.extents)],
            "files": bk.files, "bytes": copier.bytes,
        }
        # the trial restore: only a backup shown to restore is published
        t1 = time.monotonic()
        chain = ([] if previous is None else mf.resolve_chain(previous[0])) + [(part, m)]
        states = trial_restore(chain, root / (name + ".trial"), pacer)
        trial_seconds = time.monotonic() - t1
        m.update(queues=states["queues"], definitions_sha256=states["definitions_sha256"],
                 trial=states["restart"], copy_seconds=round(copy_seconds, 3),
                 trial_seconds=round(trial_seconds, 3), finished_ns=time.time_ns())
        mf.write_manifest(part, m)
        fsync_dir(part)
        final = root / name
        rename_durably(part, final)
        record_backup(config.qm_dir, final, m["finished_ns"])
        try:
            removed = rotate(root, config.name, keep) if keep else []
        except OSError as exc:
            raise BackupError(f"backup {final} was taken, but removing older backups "
                              f"(--keep {keep}) failed: {exc}", path=exc.filename) from None
        return BackupResult(final, kind, m["mode"], copier.bytes, time.monotonic() - t0,
                            copy_seconds, trial_seconds,
                            m["extents"][0]["first_lsn"] if m["extents"] else 0,
                            facts["lsn"]["end"], removed, pacer.slept)


def _chain_lsn(previous) -> dict:
    return dict(previous[1]["lsn"])


def _hot(config: QMConfig, part: Path, copier: Copier, previous, ask: Ask) -> dict:
    if previous is None:
        point = ask({"cmd": "backup_point", "checkpoint": True})
        lsn = {"checkpoint": point["checkpoint_lsn"], "recovery": point["restart_lsn"],
               "media": point["media_lsn"]}
        start = point["restart_lsn"]
    else:
        lsn = _chain_lsn(previous)
        start = previous[1]["lsn"]["end"]
    bk = _Backup(config, part, copier, start)
    bk.copy_config()
    if previous is None:
        bk.copy_closed_extents()
        bk.copy_stores(between=bk.copy_closed_extents)
    closed = ask({"cmd": "backup_point", "switch": True})["closed"]
    end = closed["end_lsn"]
    bk.copy_closed_extents(upto=end)
    bk.save_control()
    _check_covered(bk, start, end)
    lsn["end"] = end
    return {"backup": bk, "lsn": lsn}


def _cold(config: QMConfig, part: Path, copier: Copier, previous) -> dict:
    bk = _Backup(config, part, copier, 0)
    st = bk.control()
    if previous is None:
        lsn = {"checkpoint": st.checkpoint_lsn, "recovery": st.restart_lsn,
               "media": st.media_lsn}
        bk.start_lsn = st.restart_lsn
    else:
        lsn = _chain_lsn(previous)
        bk.start_lsn = previous[1]["lsn"]["end"]
    bk.copy_config()
    if previous is None:
        bk.copy_stores()
    bk.copy_closed_extents()
    active = st.active
    bk._copy_extent(active, open_extent=True)
    end = bk.extents[active.first_lsn]["log_end"]
    bk.save_control()
    _check_covered(bk, bk.start_lsn, end)
    lsn["end"] = end
    return {"backup": bk, "lsn": lsn}


def _given_up_between(bk: _Backup, pos: int, first: int) -> bool:
    """A conditional restart gave up the log from inside the extent ending at
    ``pos`` (or at it) and went on at ``first``: the gap is no hole."""
    st = bk.log.state if bk.log is not None else None
    return st is not None and any(d["from"] <= pos <= d["to"] and d["to"] == first
                                  for d in st.discarded)


def _check_covered(bk: _Backup, start: int, end: int) -> None:
    """The copied extents join up from ``start`` to ``end``."""
    pos = None
    for first in sorted(bk.extents):
        e = bk.extents[first]
        if pos is None:
            if first > start:
                break
            pos = e["log_end"]
            continue
        if first != pos and not _given_up_between(bk, pos, first):
            break
        pos = e["log_end"]
    if pos is None or pos < end:
        circular = bk.log.state is not None and bk.log.state.log_type == "circular"
        raise BackupError(
            f"the backup's extents do not cover the log from LSN {start} to {end} (they "
            f"reach {pos if pos is not None else 'nothing from the recovery point'})"
            + (": the circular log reused an extent the backup needed before it was copied "
               "(the log wrapped during the backup)" if circular else ""), lsn=pos,
            hint="give the queue manager more log space (larger or more extents), back up "
                 "while it is less busy, or take a cold backup" if circular else None)


def rotate(root: Path, qm_name: str, keep: int) -> list[str]:
    """--keep N: remove all but the newest N backups, oldest first, never a full
    backup a kept incremental needs, and never the newest good full backup.
    Each goes by a rename to ``.deleting`` first: a removal cut short never
    leaves something that looks like a backup."""
    backups = mf.good_backups(root, qm_name)
    if len(backups) <= keep:
        return []
    by_name = {p.name: m for p, m in backups}
    kept = {p.name for p, _ in backups[-keep:]}
    fulls = [p.name for p, m in backups if m["kind"] == "full"]
    if fulls:
        kept.add(fulls[-1])
    for name in list(kept):
        m = by_name[name]
        while m["kind"] == "incremental" and m["previous"]["name"] in by_name:
            kept.add(m["previous"]["name"])
            m = by_name[m["previous"]["name"]]
    removed = []
    for p, _ in backups:
        if p.name in kept:
            continue
        aside = p.with_name(p.name + mf.DELETING)
        rename_durably(p, aside)
        remove_tree(aside)
        removed.append(p.name)
    return removed
