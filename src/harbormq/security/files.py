"""The small JSON files of security: read again only when changed, written
atomically with mode 0600.

``users.json`` and ``authrecs.json`` are looked at (a stat) on every
authentication and authority check, because another process (``harbormq user
add``) may replace them while the queue manager runs. What the files hold is
in ``users.py`` and ``authority.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..fsutil import atomic_write, make_dirs
from .errors import SecurityError


def _read_json(path: Path, what: str) -> dict:
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError:
        return {}
    except (ValueError, OSError) as exc:
        raise SecurityError(f"{what} file {path} cannot be read: {exc}", path=str(path)) \
            from None


def _write_json(path: Path, data: dict) -> None:
    make_dirs(path.parent)
    atomic_write(path, json.dumps(data, indent=1, sort_keys=True).encode() + b"\n")
    os.chmod(path, 0o600)


class CachedJsonFile:
    """Re-read a small JSON file only when it changed on disk (another process,
    ``harbormq user add``, may edit it while the queue manager runs)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._stamp: tuple | None = None
        self._data: dict = {}

    def _stat(self) -> tuple | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def load(self, what: str) -> dict:
        stamp = self._stat()
        if stamp != self._stamp:
            self._data = _read_json(self.path, what)
            self._stamp = stamp
        return self._data

    def save(self, data: dict) -> None:
        _write_json(self.path, data)
        self._data = data
        self._stamp = self._stat()
