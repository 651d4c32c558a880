"""Reading a queue manager's operator log (errors/HMQERR01.LOG) from a test."""

from __future__ import annotations

from pathlib import Path


def operator_log(home: Path, qm: str = "QM1") -> list[tuple[str, str]]:
    """(message id, text) of every entry in the queue manager's HMQERR01.LOG."""
    path = home / "qmgrs" / qm / "errors" / "HMQERR01.LOG"
    out = []
    for line in path.read_text().splitlines():
        _stamp, msgid, text = line.split(" ", 2)
        out.append((msgid, text))
    return out
