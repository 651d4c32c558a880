"""A backup's manifest and the directory of backups (docs/backup.md).

A backup is a directory named by the time it was taken, as ZODB's repozo
names its files (UTC, to the microsecond so that two backups in one second
never collide), with its kind after a dot::

    <to>/<QM>/2026-05-01-10-22-33-482917.full     a full backup
    <to>/<QM>/2026-05-01-11-00-02-001200.incr     an incremental one
    <to>/<QM>/2026-05-01-11-30-00-000000.full.part   being written (or killed): never a backup
    <to>/<QM>/backup.lock                          one backup or rotation at a time

``manifest.json`` lists every other file of the backup with its size and
SHA-256, and carries its own SHA-256 (``manifest_sha256``, of the manifest
encoded without that field). The file must be exactly the canonical encoding
of what it says: any byte changed in it, even blanks, makes it fail, so a
damaged manifest is named as such and never taken for a damaged file it
lists. It is written last, inside the ``.part`` directory, before the rename
that publishes the backup.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from pathlib import Path

from ..errors import BackupChainBroken, BackupDamaged
from ..fsutil import atomic_write, file_sha256

FORMAT = "harbormq-backup"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
LOCK = "backup.lock"
PART = ".part"
DELETING = ".deleting"
KINDS = {"full": "full", "incremental": "incr"}
#: a complete backup's directory name (a .part or .deleting one never matches)
NAME_RE = re.compile(r"^\d{4}(-\d\d){5}-\d{6}\.(full|incr)$")


def backup_name(kind: str, now_ns: int | None = None) -> str:
    now_ns = time.time_ns() if now_ns is None else now_ns
    stamp = time.strftime("%Y-%m-%d-%H-%M-%S", time.gmtime(now_ns // 1_000_000_000))
    return f"{stamp}-{now_ns // 1000 % 1_000_000:06d}.{KINDS[kind]}"


def _canonical(d: dict) -> bytes:
    return json.dumps(d, sort_keys=True, indent=1, ensure_ascii=True).encode() + b"\n"


def encode_manifest(manifest: dict) -> bytes:
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    sealed = dict(body, manifest_sha256=hashlib.sha256(_canonical(body)).hexdigest())
    return _canonical(sealed)


def write_manifest(directory: Path, manifest: dict) -> None:
    atomic_write(Path(directory) / MANIFEST, encode_manifest(manifest))


def read_manifest(directory: Path) -> dict:
    """The manifest of the backup in ``directory``; BackupDamaged naming the
    file when it is missing, unreadable, not canonical or fails its hash."""
    path = Path(directory) / MANIFEST
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise BackupDamaged(f"{path} is missing: {directory} is not a complete backup",
                            path=str(path)) from None
    try:
        d = json.loads(data)
        if not isinstance(d, dict):
            raise ValueError("not a JSON object")
    except (ValueError, UnicodeDecodeError) as exc:
        raise BackupDamaged(f"{path} is damaged: not a readable manifest ({exc})",
                            path=str(path), file=MANIFEST) from None
    if d.get("format") != FORMAT:
        raise BackupDamaged(f"{path} is not a harbormq backup manifest", path=str(path),
                            file=MANIFEST)
    if encode_manifest(d) != data:
        raise BackupDamaged(f"{path} is damaged: it fails its own SHA-256 (changed after it "
                            "was written)", path=str(path), file=MANIFEST)
    if d.get("version") != FORMAT_VERSION:
        raise BackupDamaged(f"{path} has format version {d.get('version')!r}; this harbormq "
                            f"reads version {FORMAT_VERSION}", path=str(path), file=MANIFEST)
    return d


def manifest_sha256(directory: Path) -> str:
    return hashlib.sha256((Path(directory) / MANIFEST).read_bytes()).hexdigest()


def check_files(directory: Path, manifest: dict, progress=None) -> int:
    """Every file the manifest lists: there, of its size, of its SHA-256.
    BackupDamaged names the first that is not. Returns the bytes checked."""
    directory = Path(directory)
    total = 0
    for entry in manifest["files"]:
        path = directory / entry["path"]
        try:
            size, sha = file_sha256(path)
        except FileNotFoundError:
            raise BackupDamaged(f"backup {directory.name}: {entry['path']} is missing",
                                path=str(path), file=entry["path"]) from None
        if size != entry["size"]:
            raise BackupDamaged(f"backup {directory.name}: {entry['path']} is {size} bytes, the "
                                f"manifest says {entry['size']}", path=str(path),
                                file=entry["path"])
        if sha != entry["sha256"]:
            raise BackupDamaged(f"backup {directory.name}: {entry['path']} fails its SHA-256 "
                                f"({sha[:16]}.., the manifest says {entry['sha256'][:16]}..)",
                                path=str(path), file=entry["path"])
        total += size
        if progress is not None:
            progress(size)
    return total


def list_backups(root: Path) -> list[Path]:
    """The complete backups in ``root`` (by name: never a .part), oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and NAME_RE.match(p.name))


def good_backups(root: Path, qm_name: str) -> list[tuple[Path, dict]]:
    """(directory, manifest) of every complete backup of ``qm_name`` in
    ``root`` whose manifest reads, oldest first."""
    out = []
    for p in list_backups(root):
        try:
            m = read_manifest(p)
        except BackupDamaged:
            continue
        if m.get("qm_name") == qm_name:
            out.append((p, m))
    return out


def resolve_chain(directory: Path) -> list[tuple[Path, dict]]:
    """The backups a restore of ``directory`` reads: its full backup, then each
    incremental up to it, oldest first. Each incremental names the one before
    it and that one's manifest SHA-256: a link missing or changed is
    BackupChainBroken."""
    directory = Path(directory)
    chain = [(directory, read_manifest(directory))]
    while chain[0][1]["kind"] == "incremental":
        path, m = chain[0]
        prev = m["previous"]
        prev_dir = path.parent / prev["name"]
        if not prev_dir.is_dir():
            raise BackupChainBroken(
                f"incremental backup {path.name} follows {prev['name']}, which is not in "
                f"{path.parent}", path=str(prev_dir),
                hint="put that backup back beside it, or restore from a full backup")
        try:
            sha = manifest_sha256(prev_dir)
        except FileNotFoundError:
            sha = None
        if sha != prev["manifest_sha256"]:
            # a damaged manifest says so first; otherwise it is another backup
            read_manifest(prev_dir)
            raise BackupChainBroken(
                f"incremental backup {path.name} follows {prev['name']}, but the backup of "
                f"that name in {path.parent} is not the one it was taken after (its "
                "manifest differs)", path=str(prev_dir))
        chain.insert(0, (prev_dir, read_manifest(prev_dir)))
        if len(chain) > 100_000:
            raise BackupChainBroken(f"the chain of backups before {directory.name} loops")
    return chain
