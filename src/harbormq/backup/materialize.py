"""Building a stopped queue manager out of a chain of backups and log extents:
what a restore writes (into staging directories it then renames into place)
and what a trial restore writes into scratch space (``verify``, and every
backup before it is published).

The result is a queue manager whose next start rolls forward: its control
file names the backup's checkpoint and recovery point (taken before any
store was copied), and lists the extents from the one holding the recovery
point to the newest one given, the newest as the active extent. Restart
(``recovery/restart.py``, unchanged) then redoes every effect at or above
each store's own recovery LSN from the recovery point to the end of those
extents, and backs out what was in flight there. A newest extent that ends
with EXTENT_END (a closed one) is treated as after a crash mid-switch: the
log goes on in a new extent.
"""

from __future__ import annotations

import json
import os
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import tomli_w

from ..config import queue_dir_name
from ..errors import BackupChainBroken, BackupDamaged
from ..fsutil import FILE_MODE, atomic_write, fsync_dir, make_dirs
from ..log.control import ControlFile, ControlState, ExtentInfo, decode_copy
from ..log.records import EXTENT_HEADER_SIZE, ExtentHeader, extent_file_name
from ..store.stores import CatalogStore, QueueStore
from .copying import Copier

#: where the backup keeps the control file as it was read at its end
CONTROL_COPY = "log/control.backup"


@dataclass
class ExtentCopy:
    """One extent a restore puts in the log directory, and where it comes from."""
    number: int
    first_lsn: int
    #: None: the newest extent of a stopped queue manager, copied as it was (open)
    end_lsn: int | None
    path: Path
    size: int | None
    sha256: str | None
    origin: str
    archived: bool = False

    @property
    def name(self) -> str:
        return extent_file_name(self.number)


def backup_extents(chain: list[tuple[Path, dict]]) -> list[ExtentCopy]:
    """The extents of a chain of backups (full first), from the one holding the
    full backup's recovery point to the newest backup's end, each from the
    newest backup that holds it (a stopped queue manager's open extent copied
    by one backup and closed by the next); BackupChainBroken names a gap."""
    by_first: dict[int, ExtentCopy] = {}
    for path, m in chain:
        files = {f["path"]: f for f in m["files"]}
        for e in m["extents"]:
            f = files[e["file"]]
            by_first[e["first_lsn"]] = ExtentCopy(
                e["number"], e["first_lsn"], e["end_lsn"], path / e["file"], f["size"],
                f["sha256"], f"backup {path.name}", bool(e.get("archived")))
    full = chain[0][1]
    recovery, end = full["lsn"]["recovery"], chain[-1][1]["lsn"]["end"]
    start = [x for x in by_first.values() if x.first_lsn <= recovery and
             (x.end_lsn is None or x.end_lsn > recovery)]
    if not start:
        raise BackupChainBroken(f"backup {chain[0][0].name} has no log extent holding its "
                                f"recovery point (LSN {recovery})", lsn=recovery)
    out = [max(start, key=lambda x: x.first_lsn)]
    # a conditional restart's gap: the log goes on at H after an extent cut at E
    gaps = {d["from"]: d["to"] for d in control_base(chain).discarded}
    while out[-1].end_lsn is not None and out[-1].end_lsn < end:
        nxt = by_first.get(out[-1].end_lsn)
        if nxt is None:
            resumed = next((h for e_, h in gaps.items() if e_ <= out[-1].end_lsn <= h), None)
            nxt = by_first.get(resumed) if resumed is not None else None
        if nxt is None:
            raise BackupChainBroken(
                f"the log extent from LSN {out[-1].end_lsn} (after {out[-1].name} of "
                f"{out[-1].origin}) is missing from the chain of backups ending with "
                f"{chain[-1][0].name}, which needs the log to LSN {end}",
                lsn=out[-1].end_lsn)
        out.append(nxt)
    return out


def read_toml(backup_dir: Path) -> dict:
    return tomllib.loads((Path(backup_dir) / "config" / "qm.toml").read_text())


def trial_toml(data: dict) -> dict:
    """qm.toml for a trial restore in scratch space: the log single and in the
    scratch home, nothing archived or imaged (the source's archive must never
    see a scratch queue manager's extents), no listener that could collide."""
    data = json.loads(json.dumps(data))
    log = data.setdefault("log", {})
    for key in ("path", "dual_path", "archive_path"):
        log.pop(key, None)
    if log.get("type") == "linear":
        log["management"] = "manual"
    else:
        log.pop("management", None)
    data.setdefault("image", {})["schedule"] = "manual"
    for li in data.get("listeners", []):
        li["port"] = 0
    return data


def control_base(chain: list[tuple[Path, dict]]) -> ControlState:
    """The control file as the newest backup of the chain read it."""
    path = chain[-1][0] / CONTROL_COPY
    try:
        return decode_copy(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise BackupDamaged(f"{path} is not a readable control file ({exc})", path=str(path),
                            file=CONTROL_COPY) from None


def restored_control(chain: list[tuple[Path, dict]], extents: list[ExtentCopy], name: str,
                     *, dual: bool, renamed: bool) -> ControlState:
    base = control_base(chain)
    lsn = chain[0][1]["lsn"]
    # extents a conditional restart closed at its cut (log/crestart.py): still cut
    cut_at = {e.number: e.end_lsn for e in base.extents if e.cut and e.end_lsn is not None}
    entries = []
    for i, x in enumerate(extents):
        last = i == len(extents) - 1
        cut = not last and x.number in cut_at
        entries.append(ExtentInfo(number=x.number, first_lsn=x.first_lsn,
                                  end_lsn=None if last else cut_at[x.number] if cut
                                  else x.end_lsn, cut=cut,
                                  state="active" if last else "full",
                                  archived=x.archived and not renamed and not last))
    used = {x.number for x in extents}
    if base.log_type == "linear" and not renamed:
        # the archive inventory of the source: older extents a media recovery
        # of the restored queue manager can still recall from its archive
        for e in base.extents:
            if e.state == "full" and e.archived and e.end_lsn is not None and \
                    e.end_lsn <= extents[0].first_lsn and e.number not in used:
                entries.append(ExtentInfo(number=e.number, first_lsn=e.first_lsn,
                                          end_lsn=e.end_lsn, state="full", archived=True,
                                          deleted=True))
                used.add(e.number)
    if base.log_type == "circular":
        # free extents to go on in (restart switches out of a closed newest one)
        limit = base.primary + base.secondary
        want = min(limit, max(base.primary, len(extents) + 1))
        for n in range(limit):
            if len(entries) >= want:
                break
            if n not in used:
                entries.append(ExtentInfo(number=n, first_lsn=0, state="free"))
                used.add(n)
    return ControlState(qm_name=name, log_type=base.log_type, pages=base.pages,
                        primary=base.primary, secondary=base.secondary, extents=entries,
                        next_extent_number=max(used) + 1, checkpoint_lsn=lsn["checkpoint"],
                        restart_lsn=lsn["recovery"], media_lsn=lsn["media"], sequence=1,
                        dual=dual, discarded=list(base.discarded),
                        id_floor=dict(base.id_floor), restored_ns=time.time_ns())


def _rename_authrecs(data: bytes, old: str, new: str) -> bytes:
    d = json.loads(data)
    for r in d.get("records", []):
        if str(r.get("objtype", "")).upper() == "QMGR" and r.get("profile") == old:
            r["profile"] = new
    return json.dumps(d, indent=1, sort_keys=True).encode() + b"\n"


def _rename_stores(qm_dir: Path, name: str) -> None:
    stores = [CatalogStore(qm_dir / "qmgr")] if (qm_dir / "qmgr" / "data.mdb").exists() else []
    stores += [QueueStore(p) for p in sorted((qm_dir / "queues").iterdir())
               if (p / "data.mdb").exists()]
    for store in stores:
        try:
            store.set_owner(name)
        finally:
            store.close()


def _rewrite_header(path: Path, name: str) -> None:
    """An extent copied under a new queue manager name gets that name in its
    header (the records are unchanged; the header has its own CRC)."""
    fd = os.open(path, os.O_RDWR)
    try:
        head = ExtentHeader.decode(os.pread(fd, EXTENT_HEADER_SIZE, 0))
        new = ExtentHeader(head.extent_number, head.first_lsn, head.created_ns, name,
                           head.pages).encode()
        os.pwrite(fd, new, 0)
        os.fsync(fd)
    finally:
        os.close(fd)


def materialize(chain: list[tuple[Path, dict]], extents: list[ExtentCopy], *, name: str,
                qm_dir: Path, log_dir: Path, dual_dir: Path | None, toml_data: dict,
                copier: Copier) -> ControlState:
    """Write the queue manager: stores of the full backup, configuration, users
    and authority records of the newest backup, the extents, the control file.
    Every file durable, every backup file checked against its SHA-256 as it is
    copied (BackupDamaged names one that changed since the plan)."""
    full_dir, full = chain[0]
    newest_dir, newest = chain[-1]
    old = full["qm_name"]
    renamed = name != old
    make_dirs(qm_dir / "queues")
    make_dirs(log_dir)
    if dual_dir is not None:
        make_dirs(dual_dir)

    def copy(src_dir: Path, entry: dict, dst: Path) -> None:
        size, sha = copier.copy_file(src_dir / entry["path"], dst,
                                     expect=(entry["size"], entry["sha256"]))
        if (size, sha) != (entry["size"], entry["sha256"]):
            raise BackupDamaged(f"backup {src_dir.name}: {entry['path']} fails its SHA-256 "
                                "(it changed after the restore was planned)",
                                path=str(src_dir / entry["path"]), file=entry["path"])

    for entry in full["files"]:
        if entry["kind"] == "catalog":
            copy(full_dir, entry, qm_dir / "qmgr" / "data.mdb")
        elif entry["kind"] == "store":
            copy(full_dir, entry, qm_dir / "queues" / queue_dir_name(entry["queue"]) /
                 "data.mdb")
    fsync_dir(qm_dir / "queues")
    if renamed:         # every store records the queue manager it belongs to
        _rename_stores(qm_dir, name)
    for entry in newest["files"]:
        if entry["kind"] in ("users", "authrecs"):
            dst = qm_dir / Path(entry["path"]).name
            copy(newest_dir, entry, dst)
            if renamed and entry["kind"] == "authrecs":
                atomic_write(dst, _rename_authrecs(dst.read_bytes(), old, name), FILE_MODE)
    data = dict(toml_data, name=name)
    for x in extents:
        dst = log_dir / x.name
        if x.sha256 is not None:
            size, sha = copier.copy_file(x.path, dst, expect=(x.size, x.sha256))
            if (size, sha) != (x.size, x.sha256):
                raise BackupDamaged(f"{x.path} ({x.origin}) fails its SHA-256 (it changed "
                                    "after the restore was planned)", path=str(x.path))
        else:
            copier.copy_file(x.path, dst)
        if renamed:
            _rewrite_header(dst, name)
        if dual_dir is not None:
            copier.copy_file(dst, dual_dir / x.name)
    state = restored_control(chain, extents, name, dual=dual_dir is not None,
                             renamed=renamed)
    ControlFile(log_dir, dual_dir).write(state)
    # last: a queue manager exists once its qm.toml does
    atomic_write(qm_dir / "qm.toml", tomli_w.dumps(data).encode(), FILE_MODE)
    return state
