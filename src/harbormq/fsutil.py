"""Making names and files durable. A power cut keeps file data only where it
was fsynced, and keeps a directory entry (a name created, renamed or removed)
only once that directory was fsynced. Every path harbormq creates, moves or
removes goes through these helpers, so nothing depends on a name the disk may
not have:

* ``make_dirs``: ``mkdir -p`` that fsyncs the parent of every directory it made;
* ``atomic_write``: litestream's publish: write ``*.tmp``, fsync, rename,
  fsync the directory (stale ``*.tmp`` files are swept at start);
* ``rename_durably``, ``remove_tree``: the move or removal, then the fsync of
  the directories whose entries changed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import string
import urllib.parse
from pathlib import Path

#: everything under a queue manager's directories is private to its owner
DIR_MODE = 0o700
FILE_MODE = 0o600


#: characters a name keeps in its file name; every other one is percent-encoded
_FILE_SAFE = frozenset(string.ascii_letters + string.digits + "_-")


def file_name(name: str) -> str:
    """The one mapping from a user-given name (a queue, a queue manager) to the
    name of its file or directory, which can never leave its parent directory
    (MQ mangles such names too). Characters other than letters, digits, '_',
    '-' and a '.' that is not the first are percent-encoded (UTF-8), so the
    result is never empty, '.', '..' or hidden, never holds '/' or NUL, and two
    names never share a file name (``name_of_file`` decodes it). ValueError when
    the result would be longer than a file name may be."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a name must be a non-empty string, not {name!r}")
    out = []
    for i, ch in enumerate(name):
        if ch in _FILE_SAFE or (ch == "." and i > 0):
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))
    mapped = "".join(out)
    if len(mapped) > 255:
        raise ValueError(f"name {name[:60]!r}... is too long for a file name")
    return mapped


def name_of_file(mapped: str) -> str:
    """The name ``file_name`` mapped to ``mapped``."""
    return urllib.parse.unquote(mapped, errors="surrogatepass")


def private(path, flags: int) -> int:
    """``open(..., opener=private)``: a file created 0600, whatever the umask."""
    return os.open(path, flags, FILE_MODE)


def make_private(*paths: Path) -> None:
    """Owner-only permissions on directories made before they were the rule."""
    for p in paths:
        if p.is_dir() and p.stat().st_mode & 0o077:
            os.chmod(p, DIR_MODE)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(path: Path, mode: int = DIR_MODE) -> list[Path]:
    """Create ``path`` and any missing parents, each made durable in its parent
    before the next is created beneath it. Returns the directories created."""
    path = Path(path)
    missing = []
    p = path
    while not p.is_dir():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    created = []
    for d in reversed(missing):
        try:
            d.mkdir(mode=mode)
        except FileExistsError:
            if not d.is_dir():
                raise
            continue
        fsync_dir(d.parent)
        created.append(d)
    return created


def rename_durably(src: Path, dst: Path) -> None:
    """``src.rename(dst)``, durable in both directories once this returns."""
    os.rename(src, dst)
    fsync_dir(Path(dst).parent)
    if Path(src).parent != Path(dst).parent:
        fsync_dir(Path(src).parent)


def remove_tree(path: Path) -> None:
    """Remove a directory tree (if there) and make its removal durable; a tree
    that cannot be removed whole raises (OSError) rather than half-disappear
    silently. Gone already, its parent is still synced: the removal that made
    it go may not have been durable yet."""
    path = Path(path)
    if path.exists():
        shutil.rmtree(path)
    if path.parent.is_dir():
        fsync_dir(path.parent)


def _write_all(fd: int, data) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def atomic_write(path: Path, data: bytes, mode: int = FILE_MODE) -> None:
    """Replace ``path`` with ``data`` so that a crash or a power cut leaves the
    old or the new file, never a mixture, and the new one once this returns."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def copy_durably(src: Path, dst: Path, chunk: int = 4 << 20, *,
                 expect: tuple[int, str] | None = None) -> tuple[int, str]:
    """Replace ``dst`` with a copy of ``src`` as ``atomic_write`` would (a
    temporary file, fsync, rename, directory fsync), without holding it whole
    in memory. Returns (size, SHA-256 of what was copied). With ``expect``
    (size, SHA-256), a copy that differs is removed before it ever has
    ``dst``'s name (the caller sees the difference in what is returned)."""
    dst = Path(dst)
    tmp = dst.with_name(dst.name + ".tmp")
    digest, size = hashlib.sha256(), 0
    with open(src, "rb") as fin:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        try:
            while data := fin.read(chunk):
                digest.update(data)
                size += len(data)
                _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
    if expect is not None and (size, digest.hexdigest()) != expect:
        tmp.unlink()
        return size, digest.hexdigest()
    os.replace(tmp, dst)
    fsync_dir(dst.parent)
    return size, digest.hexdigest()


def sweep_tmp(directory: Path) -> list[Path]:
    """Remove ``*.tmp`` leftovers of interrupted atomic writes."""
    swept = []
    if directory.is_dir():
        for p in directory.glob("*.tmp"):
            p.unlink()
            swept.append(p)
    return swept
