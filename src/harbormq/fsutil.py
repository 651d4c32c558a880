"""Publishing files durably, litestream style: write ``*.tmp``, fsync, rename,
fsync the directory. Stale ``*.tmp`` files are swept at start."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new
    file, never a mixture."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def sweep_tmp(directory: Path) -> list[Path]:
    """Remove ``*.tmp`` leftovers of interrupted atomic writes."""
    swept = []
    if directory.is_dir():
        for p in directory.glob("*.tmp"):
            p.unlink()
            swept.append(p)
    return swept
