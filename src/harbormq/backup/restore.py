"""``harbormq restore QM --from BACKUP [--archive DIR ...] [--as NEWNAME]
[--port P] [--replace] [--dry-run]`` (docs/backup.md).

Planned first, then applied. The plan (``plan_restore``, all that
``--dry-run`` does) reads and checks everything and changes nothing:
* the chain of backups (the full one and each incremental up to BACKUP),
  every file of each against its size and SHA-256 (a failing file is named);
* the log: the backups' extents from the full backup's recovery point, then
  each archived extent that continues it (checked against the archive's
  manifest), then the closed extents of the source's log directory when it
  is on this machine (and its open extent when the source is stopped);
  an extent missing from the chain is named;
* what is lost: the newest log known (the archive's copy of the control
  file, the source's control file) against the end of what is restored;
* the target: its name, home, directories (log paths relocated), that no
  queue manager runs there, that nothing is overwritten without --replace.

Applying writes the queue manager into staging directories beside the
target's (``#restoring``), every file durable and checked as it is copied,
then renames them into place, the queue manager's own directory (with
qm.toml) last. With --replace the old queue manager is first set aside
(``#replaced``: its qm.toml removed first, so it no longer exists) and
removed at the end. The restored queue manager's next start rolls forward
from the recovery point through every extent restored.

Point in time (``--to-time``, ``--to-lsn``) plugs in at the end of the plan:
the extents are cut at the one holding the LSN, and a conditional restart
(``harbormq log crestart QM --end-lsn N``, recorded in the control file)
makes the next start end the log there. Until that exists they are refused.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from ..config import QMConfig, harbormq_home, qm_dir
from ..core.objects import check_name
from ..crashpoints import crash_point
from ..errors import (
    ConfigError,
    HarbormqError,
    QueueManagerNotFound,
    RestoreRefused,
)
from ..fsutil import file_name, fsync_dir, remove_tree, rename_durably
from ..log import archive, crestart
from ..log.control import ControlFile, decode_copy
from ..log.manager import RecoveryLog
from ..log.reader import ExtentReader
from ..log.records import extent_file_name
from ..qmgr.lifecycle import InstanceLock, running_pid
from . import manifest as mf
from .copying import Copier, Progress
from .materialize import ExtentCopy, backup_extents, materialize, read_toml

STAGING, REPLACED = "#restoring", "#replaced"


@dataclass
class RestorePlan:
    qm_name: str
    target: str
    home: Path
    chain: list[tuple[Path, dict]]
    extents: list[ExtentCopy]
    backup_end: int
    end_lsn: int
    qm_dir: Path
    log_dir: Path
    dual_dir: Path | None
    toml: dict
    replace: bool
    old_dirs: list[Path] = field(default_factory=list)
    old_config: QMConfig | None = None
    newest_known: tuple[int, str] | None = None
    relocated: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    checked_bytes: int = 0
    #: a point in time: the log is cut there by a conditional restart recorded
    #: in the restored control file (log/crestart.py), carried out at the next start
    to_lsn: int | None = None
    to_time_ns: int | None = None
    to_text: str = ""

    @property
    def lost(self) -> str:
        if self.newest_known is None or self.newest_known[0] <= self.end_lsn:
            return "nothing known to be lost (no newer log is known)"
        lsn, where = self.newest_known
        return (f"the log from LSN {self.end_lsn} to at least LSN {lsn} ({where}) is not "
                "available: what was logged there is lost")

    def lines(self) -> list[str]:
        full = self.chain[0][1]
        out = [f"HMQ8605I Restore plan for queue manager {self.qm_name}"
               + (f" as {self.target}" if self.target != self.qm_name else "")
               + f" into {self.home}:"]
        for path, m in self.chain:
            out.append(f"  backup {path} ({m['kind']}, {m['mode']}, LSN "
                       f"{m['lsn']['recovery'] if m['kind'] == 'full' else ''}"
                       f"..{m['lsn']['end']})")
        out.append(f"  files checked: {self.checked_bytes / 1e6:.1f} MB, every SHA-256 good")
        out.append(f"  recovery point LSN {full['lsn']['recovery']} (checkpoint "
                   f"{full['lsn']['checkpoint']}); the backups reach LSN {self.backup_end}")
        by_origin: dict[str, list[str]] = {}
        for x in self.extents:
            by_origin.setdefault(x.origin, []).append(x.name)
        for origin, names in by_origin.items():
            span = names[0] if len(names) == 1 else f"{names[0]}..{names[-1]}"
            out.append(f"  extents {span} ({len(names)}) from {origin}")
        if self.to_text:
            out.append(f"  roll forward to {self.to_text} at the next start (a conditional "
                       f"restart gives up the log after it; the log available reaches LSN "
                       f"{self.end_lsn})")
        else:
            out.append(f"  roll forward to LSN {self.end_lsn} at the next start "
                       f"({self.end_lsn - self.backup_end} bytes of log after the backup)")
        out.append(f"  lost: {self.lost}")
        out.append(f"  queue manager directory {self.qm_dir}")
        out.append(f"  log directory {self.log_dir}"
                   + (f", dual copy {self.dual_dir}" if self.dual_dir else ""))
        out += [f"  {r}" for r in self.relocated]
        if self.old_dirs:
            out.append("  replaces: " + ", ".join(map(str, self.old_dirs)))
        out += [f"  note: {n}" for n in self.notes]
        return out


def _refuse(text: str, hint: str | None = None, **facts) -> RestoreRefused:
    return RestoreRefused(text + "; nothing was changed", hint=hint, **facts)


def _relocate(path: str | None, source_home: Path, home: Path, old: str, new: str
              ) -> Path | None:
    """A directory of the source's qm.toml as it is on the target: under the
    source's home, at the same place under the target's; elsewhere, kept
    (another disk), with a last part naming the queue manager renamed."""
    if not path:
        return None
    p = Path(path)
    try:
        p = home / p.relative_to(source_home)
    except ValueError:
        pass
    if new != old and p.name == file_name(old):
        p = p.with_name(file_name(new))
    return p


def _non_empty(d: Path | None) -> bool:
    return d is not None and d.exists() and (not d.is_dir() or any(d.iterdir()))


def plan_restore(qm_name: str, backup: Path, *, home: Path | None = None,
                 as_name: str | None = None, archives: list[Path] | tuple = (),
                 port: int | None = None, replace: bool = False,
                 log_path: Path | None = None, dual_path: Path | None = None,
                 to_time: str | None = None, to_lsn: int | None = None,
                 progress: Progress | None = None) -> RestorePlan:
    if to_time is not None and to_lsn is not None:
        raise _refuse("give --to-time or --to-lsn, not both")
    to_time_ns = None
    if to_time is not None:
        try:
            when = datetime.fromisoformat(to_time)
        except ValueError:
            raise _refuse(f"--to-time {to_time!r} is not an ISO 8601 time (e.g. "
                          "2026-11-24T10:15:00+00:00)") from None
        to_time_ns = int((when if when.tzinfo else when.astimezone()).timestamp() * 1e9)
    home = Path(home).absolute() if home else harbormq_home().absolute()
    backup = Path(backup).absolute()
    if not backup.is_dir():
        raise _refuse(f"{backup} is not a backup directory", path=str(backup))
    if backup.name.endswith(mf.PART):
        raise _refuse(f"{backup} is a backup that was never completed (a .part directory is "
                      "one being written, or one cut short): it is never restored",
                      path=str(backup), hint="restore from a complete backup beside it")
    if not (backup / mf.MANIFEST).exists():
        # a directory of backups: its newest complete one
        candidates = mf.good_backups(backup / file_name(qm_name), qm_name) or \
            mf.good_backups(backup, qm_name)
        if not candidates:
            raise _refuse(f"{backup} holds no complete backup of queue manager {qm_name}",
                          path=str(backup))
        backup = candidates[-1][0]
    chain = mf.resolve_chain(backup)
    newest = chain[-1][1]
    source = newest["qm_name"]
    if source != qm_name:
        raise _refuse(f"{backup} is a backup of queue manager {source}, not {qm_name}",
                      hint=f"to restore it under the name {qm_name}: 'harbormq restore "
                           f"{source} --from {backup} --as {qm_name}'")
    target = as_name or qm_name
    check_name(target, "queue manager")
    # every file of every backup, before anything is written
    copier = Copier(progress)
    checked = 0
    for path, m in chain:
        checked += mf.check_files(path, m)
    extents = backup_extents(chain)
    backup_end = newest["lsn"]["end"]

    # the target and its directories
    toml = read_toml(chain[-1][0])
    toml["name"] = target
    source_home = Path(newest["source"]["home"])
    log = toml.setdefault("log", {})
    relocated = []
    old_log, old_dual = log.get("path"), log.get("dual_path")
    new_log = Path(log_path).absolute() if log_path else \
        _relocate(old_log, source_home, home, qm_name, target)
    new_dual = Path(dual_path).absolute() if dual_path else \
        _relocate(old_dual, source_home, home, qm_name, target)
    for key, old, new in (("log.path", old_log, new_log), ("log.dual_path", old_dual, new_dual)):
        if new is None:
            log.pop(key.split(".")[1], None)
        else:
            log[key.split(".")[1]] = str(new)
        if str(new) != str(old) and (old or new):
            relocated.append(f"{key}: {old or '(default)'} -> {new or '(default)'}")
    if port is not None:
        listeners = toml.get("listeners") or [{}]
        listeners[0]["port"] = port
        toml["listeners"] = listeners
    target_cfg = _check_toml(toml, target)
    tqm = qm_dir(home, target)
    tlog = new_log or home / "log" / file_name(target)
    tdual = new_dual

    pid = running_pid(QMConfig(name=target, home=home))
    if pid is not None:
        raise _refuse(f"queue manager {target} is running on the target (process {pid})",
                      hint=f"stop it first: harbormq stop {target}")
    old_cfg, old_dirs = None, []
    if (tqm / "qm.toml").exists() or _non_empty(tqm):
        if not replace:
            raise _refuse(f"queue manager {target} already exists in {home}",
                          hint="give --replace to replace it with the backup")
        try:
            old_cfg = QMConfig.load(target, home)
        except (ConfigError, QueueManagerNotFound):
            old_cfg = None
        old_dirs = [tqm]
        if old_cfg is not None:
            old_dirs += [d for d in (old_cfg.log_dir, old_cfg.log_dual_dir) if d is not None]
    for d, what in ((tlog, "log directory"), (tdual, "dual log directory")):
        if _non_empty(d) and d not in old_dirs:
            if replace and old_cfg is None and d == home / "log" / file_name(target):
                old_dirs.append(d)     # the default log of a target whose qm.toml is gone
                continue
            raise _refuse(f"the {what} {d} of the restored queue manager is not empty",
                          hint="give --replace to replace the queue manager whose it is, or "
                               "--log-path/--log-dual-path for another directory")
    plan = RestorePlan(qm_name=qm_name, target=target, home=home, chain=chain,
                       extents=extents, backup_end=backup_end, end_lsn=backup_end,
                       qm_dir=tqm, log_dir=tlog, dual_dir=tdual, toml=toml, replace=replace,
                       old_dirs=old_dirs, old_config=old_cfg, relocated=relocated,
                       checked_bytes=checked)
    del target_cfg, copier
    _roll_forward(plan, [Path(a).absolute() for a in archives] or
                  [Path(p) for p in newest["source"].get("archive_paths", [])])
    if to_lsn is not None:
        if to_lsn < backup_end:
            raise _refuse(f"LSN {to_lsn} lies before the end of the backup (LSN {backup_end}): "
                          "its stores may already hold effects up to there",
                          hint="choose a point at or after it, or an older backup")
        if to_lsn < plan.end_lsn:
            plan.to_lsn, plan.to_text = to_lsn, f"LSN {to_lsn}"
        else:
            plan.notes.append(f"LSN {to_lsn} is at or past the end of the log available "
                              f"(LSN {plan.end_lsn}): restored to the end")
    elif to_time_ns is not None:
        plan.to_time_ns, plan.to_text = to_time_ns, f"the time {to_time}"
    return plan


def _record_point_in_time(plan: RestorePlan, log_dir: Path, dual_dir: Path | None) -> None:
    """The point is a conditional restart recorded in the restored log (in its
    staging directories, before anything is swapped in): planned on that log,
    refused with nothing changed when it falls before the end of the backup."""
    log = RecoveryLog(log_dir, plan.target, dual_dir)
    log.open()
    try:
        p = crestart.plan(log, end_lsn=plan.to_lsn, end_time_ns=plan.to_time_ns,
                          requested=f"restore to {plan.to_text}")
    except crestart.CrestartError as exc:
        if "nothing to give up" in exc.message:
            plan.notes.append(f"{plan.to_text} is at or past the end of the log available: "
                              "restored to the end")
            return
        raise _refuse(f"restore to {plan.to_text}: {exc.message}") from None
    if p.cut_lsn < plan.backup_end:
        raise _refuse(f"{plan.to_text} lies before the end of the backup (LSN "
                      f"{plan.backup_end}): its stores may already hold effects up to there",
                      hint="choose a later point, or an older backup")
    crestart.record(log, p)
    plan.notes.append("at the next start: " + p.summary())


def _check_toml(toml: dict, name: str) -> QMConfig:
    """The restored qm.toml passes the same checks as any (in a scratch home)."""
    import tempfile

    import tomli_w
    with tempfile.TemporaryDirectory(prefix="hmq-restore-check-") as tmp:
        d = qm_dir(Path(tmp), name)
        d.mkdir(parents=True)
        (d / "qm.toml").write_text(tomli_w.dumps(toml))
        try:
            return QMConfig.load(name, Path(tmp))
        except ConfigError as exc:
            raise _refuse(f"the restored qm.toml would not be valid: {exc.message}") from None


def _archive_entries(dirs: list[Path], qm_name: str) -> tuple[dict, list[tuple[Path, bytes]]]:
    """{first LSN: [(file, entry)]} of every archive given (a path as in qm.toml,
    or a queue manager's folder in it), and their copies of the control file."""
    found: dict[int, list] = {}
    controls = []
    for base in dirs:
        d = base if (base / archive.MANIFEST).exists() else archive.archive_dir(base, qm_name)
        for entry, _ in archive.read_manifest(d):
            found.setdefault(entry.first_lsn, []).append((d / entry.name, entry))
        if (d / archive.CONTROL_COPY).exists():
            controls.append((d / archive.CONTROL_COPY, (d / archive.CONTROL_COPY).read_bytes()))
    return found, controls


def _roll_forward(plan: RestorePlan, archives: list[Path]) -> None:
    """Extend the plan's extents through the archive, then the source's log
    directory, and say what newer log is known."""
    qm_name, chain = plan.qm_name, plan.chain
    cur = plan.extents[-1]
    newest: list[tuple[int, str]] = []
    found, controls = _archive_entries(archives, qm_name)
    # the next extent; or the same one closed, for a stopped queue manager's
    # open extent copied by a cold backup
    while (key := _next_key(cur)) in found:
        problems = []
        for path, entry in found[key]:
            try:
                size, sha = mf.file_sha256(path)
            except FileNotFoundError:
                problems.append(f"{path} is missing")
                continue
            if (size, sha) != (entry.size, entry.sha256):
                problems.append(f"{path} fails its SHA-256")
                continue
            cur = _extend(plan, cur, ExtentCopy(entry.number, entry.first_lsn, entry.end_lsn,
                                                path, size, sha, f"archive {path.parent}",
                                                archived=True))
            plan.checked_bytes += size
            break
        else:
            raise _refuse(f"archived log extent {found[key][0][1].name} (LSN "
                          f"{key}..) cannot be used: {'; '.join(problems)}",
                          hint="put a good copy back (the other archive path, another "
                               "backup), or restore from an older point")
    for path, data in controls:
        try:
            st = decode_copy(data)
        except ValueError:
            continue
        known = max((e.end_lsn or e.first_lsn for e in st.extents
                     if e.state in ("full", "active")), default=0)
        newest.append((known, f"the archive's control file {path}"))
    src_log = chain[-1][1]["source"]["log_dir"]
    src_dual = chain[-1][1]["source"].get("dual_dir")
    _from_log_dir(plan, Path(src_log), Path(src_dual) if src_dual else None, newest)
    plan.end_lsn = plan.extents[-1].end_lsn if plan.extents[-1].end_lsn is not None else \
        _open_end(plan.extents[-1])
    if newest:
        plan.newest_known = max(newest)


def _next_key(cur: ExtentCopy) -> int:
    """The first LSN of the extent that continues ``cur``: the next one, or
    (``cur`` open) the same extent, with more in it."""
    return cur.end_lsn if cur.end_lsn is not None else cur.first_lsn


def _extend(plan: RestorePlan, cur: ExtentCopy, nxt: ExtentCopy) -> ExtentCopy:
    if cur.end_lsn is None:
        plan.extents[-1] = nxt         # an open copy superseded by a fuller one
    else:
        plan.extents.append(nxt)
    return nxt


def _open_end(x: ExtentCopy) -> int:
    reader = ExtentReader(x.path, newest=True)
    for _rec in reader.records():
        pass
    return reader.end.lsn


def _from_log_dir(plan: RestorePlan, log_dir: Path, dual_dir: Path | None,
                  newest: list) -> None:
    """The source's own log directory, when it is on this machine: its closed
    extents that continue the chain, and its open extent if it is stopped."""
    qm_name = plan.qm_name
    if not (log_dir / "control.1").exists() and not (log_dir / "control.2").exists():
        return
    try:
        log = RecoveryLog(log_dir, qm_name, dual_dir if dual_dir and dual_dir.is_dir() else None)
        log.state = ControlFile(log.dir, log.dual_dir).load(repair=False)
    except HarbormqError as exc:
        plan.notes.append(f"the source's log directory {log_dir} was not read: {exc.message}")
        return
    if log.state.qm_name != qm_name:
        return
    home_of = Path(plan.chain[-1][1]["source"]["home"])
    source_running = running_pid(QMConfig(name=qm_name, home=home_of)) is not None
    active = log.state.active
    newest.append((active.first_lsn, f"the log directory {log_dir} (its current extent "
                                     f"{extent_file_name(active.number)} starts there)"))
    cur = plan.extents[-1]
    for e in log.chain():
        if e.first_lsn != _next_key(cur) or not log.extent_present(e):
            continue
        if e.state == "full":
            try:
                path = log.readable_extent(e)
            except HarbormqError as exc:
                plan.notes.append(f"{extent_file_name(e.number)} of {log_dir} cannot be read: "
                                  f"{exc.message}")
                return
            cur = _extend(plan, cur, ExtentCopy(e.number, e.first_lsn, e.end_lsn, path, None,
                                                None, f"the log directory {log_dir}",
                                                archived=e.archived))
        elif not source_running:
            path = log.extent_copies(e)[0][1]
            cur = _extend(plan, cur, ExtentCopy(e.number, e.first_lsn, None, path, None, None,
                                                f"the log directory {log_dir} (its open "
                                                "extent)"))
        else:
            plan.notes.append(f"{qm_name} is running: its open extent "
                              f"{extent_file_name(e.number)} is not restored")
            break
    if cur.end_lsn is None:
        newest.append((_open_end(cur), f"the end of the log in {log_dir}"))


def apply_restore(plan: RestorePlan, progress: Progress | None = None) -> dict:
    """Write the planned queue manager (see the module docstring)."""
    targets = [plan.log_dir] + ([plan.dual_dir] if plan.dual_dir else []) + [plan.qm_dir]
    staging = {t: t.with_name(t.name + STAGING) for t in targets}
    copier = Copier(progress)
    for s in staging.values():
        remove_tree(s)         # a restore cut short before
    try:
        materialize(plan.chain, plan.extents, name=plan.target, qm_dir=staging[plan.qm_dir],
                    log_dir=staging[plan.log_dir],
                    dual_dir=staging[plan.dual_dir] if plan.dual_dir else None,
                    toml_data=plan.toml, copier=copier)
        if plan.to_lsn is not None or plan.to_time_ns is not None:
            _record_point_in_time(plan, staging[plan.log_dir],
                                  staging[plan.dual_dir] if plan.dual_dir else None)
        # the restored qm.toml names the final directories, not the staging ones
    except BaseException:
        for s in staging.values():
            remove_tree(s)
        raise
    lock = None
    aside = []
    if plan.old_dirs:
        if (plan.qm_dir / "qm.toml").exists() or plan.qm_dir.exists():
            lock = InstanceLock(QMConfig(name=plan.target, home=plan.home))
            try:
                lock.acquire()
            except HarbormqError:
                for s in staging.values():
                    remove_tree(s)
                raise _refuse(f"queue manager {plan.target} started meanwhile") from None
        old_toml = plan.qm_dir / "qm.toml"
        if old_toml.exists():
            old_toml.unlink()          # first: the old queue manager no longer exists
            fsync_dir(plan.qm_dir)
        for d in plan.old_dirs:
            if d.exists():
                a = d.with_name(d.name + REPLACED)
                remove_tree(a)
                rename_durably(d, a)
                aside.append(a)
    crash_point("restore.mid_swap")
    for t in targets:                  # the queue manager's directory last
        os.makedirs(t.parent, mode=0o700, exist_ok=True)
        rename_durably(staging[t], t)
    if lock is not None:
        lock.release()
    for a in aside:
        remove_tree(a)
    return {"target": plan.target, "qm_dir": str(plan.qm_dir), "log_dir": str(plan.log_dir),
            "bytes": copier.bytes, "extents": len(plan.extents), "end_lsn": plan.end_lsn,
            "mb_s": copier.report()["mb_s"], "replaced": [str(a) for a in plan.old_dirs]}

