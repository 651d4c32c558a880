"""Queue managers whose linear log has several closed extents, for the tests of
the log management commands (tests/cli/test_log_cli.py,
tests/admin/test_log_mqsc.py). The log is written in-process, before any
server starts: much faster than over STOMP."""

from __future__ import annotations

import re
from pathlib import Path

from harbormq import QueueManager

#: ``ATTR(value)`` in runmqsc output
ATTR = re.compile(r"([A-Z]+)\(([^()]*)\)")


def fill(qm, n: int = 300, queue: str = "FILL") -> None:
    """About n KiB of log: two or three 32-page extents per 300."""
    for _ in range(n):
        qm.put(queue, b"x" * 1000)
        qm.get(queue)


def write_extents(home: Path, name: str, rounds: int = 1) -> None:
    """Closed extents that nothing needs: the media point follows the images
    taken at the end, the restart point the last checkpoint."""
    with QueueManager.open(name, home=home) as qm:
        if "FILL" not in qm.queue_names():
            qm.define_queue("FILL", DEFPSIST="YES")
        for _ in range(rounds):
            fill(qm)
        qm.image()
        qm.checkpoint()


def pin_media_point(home: Path, name: str) -> None:
    """Closed extents nothing needs, then one that media recovery needs (it
    holds the latest image of KEEP, which holds a message and so is not
    imaged again at the shutdown), then more closed extents."""
    with QueueManager.open(name, home=home) as qm:
        qm.define_queue("FILL", DEFPSIST="YES")
        qm.define_queue("KEEP", DEFPSIST="YES")
        fill(qm)
        qm.put("KEEP", b"kept")
        qm.image()                    # KEEP's image: the media point from now on
        qm.checkpoint()
        fill(qm)


def blocks(output: str, msgid: str) -> list[dict]:
    """Every runmqsc object block with header ``msgid`` as {ATTR: value}."""
    out, current = [], None
    for line in output.splitlines():
        if line.startswith(msgid + ":"):
            current = {}
            out.append(current)
        elif current is not None and line.startswith("   "):
            for k, v in ATTR.findall(line):
                current.setdefault(k, v.strip())
        else:
            current = None
    return out


def one_line(text: str) -> str:
    """Command output with rich's line wrapping undone."""
    return " ".join(text.split())
