"""The operator log: ``qmgrs/<QM>/errors/HMQERR01.LOG`` (MQ's AMQERR01.LOG).

One entry per line: ``<UTC time> <message id> <text>``. When HMQERR01.LOG
passes ``max_bytes`` it becomes HMQERR02.LOG, HMQERR02 becomes HMQERR03, and
the oldest is dropped, as MQ rotates its error logs. Entries also go to a
console when one is attached (rich, or a server's plain lines), and to any
listeners (tests, the tour).
"""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path
from typing import Callable

from ..fsutil import fsync_dir, make_dirs, private

FILES = ("HMQERR01.LOG", "HMQERR02.LOG", "HMQERR03.LOG")
#: errors and warnings stand out on a console (a rich console; a plain one ignores it)
_STYLES = {"E": "bold red", "W": "yellow"}


class OperatorLog:
    def __init__(self, errors_dir: Path | None, console=None, max_bytes: int = 2 * 1024 * 1024):
        self.dir = Path(errors_dir) if errors_dir else None
        self.console = console
        self.max_bytes = max_bytes
        self.listeners: list[Callable[[str, str], None]] = []
        self.entries: list[tuple[str, str]] = []   # this process's entries, newest last
        if self.dir:
            make_dirs(self.dir)

    def emit(self, msgid: str, text: str) -> None:
        self.entries.append((msgid, text))
        del self.entries[:-1000]
        if self.dir:
            stamp = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")
            line = f"{stamp} {msgid} {' '.join(text.split())}\n"
            path = self.dir / FILES[0]
            try:
                rotated = path.exists() and path.stat().st_size + len(line) > self.max_bytes
                if rotated:
                    self._rotate()
                new = rotated or not path.exists()
                with open(path, "a", encoding="utf-8", opener=private) as f:
                    f.write(line)
                if new:     # lines are written, not forced; the file's name is made durable
                    fsync_dir(self.dir)
            except OSError:
                pass  # the operator log must never stop the queue manager
        if self.console is not None:
            # never as markup or emoji codes: the text carries names, paths and
            # logins, and a '[' in one would be read as a tag (or raise, losing
            # the message), a ':x:' as an emoji
            self.console.print(f"{msgid} {text}", style=_STYLES.get(msgid[-1:]), markup=False,
                               emoji=False, highlight=False)
        for listener in self.listeners:
            listener(msgid, text)

    def _rotate(self) -> None:
        for i in range(len(FILES) - 1, 0, -1):
            src = self.dir / FILES[i - 1]
            if src.exists():
                os.replace(src, self.dir / FILES[i])

    def ids(self) -> list[str]:
        return [m for m, _ in self.entries]
