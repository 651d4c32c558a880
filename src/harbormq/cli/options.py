"""What several command groups of ``harbormq`` parse alike: a time given on
the command line (``log crestart --end-time``, ``dump-config --at-time``).

``log dump --since`` reads its times otherwise (UTC when no zone is given,
epoch seconds too: ``log/inspect.py``).
"""

from __future__ import annotations

import click


def parse_time(text: str) -> int:
    """An ISO 8601 time in nanoseconds since the epoch; local time when it names no
    zone."""
    from datetime import datetime
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not an ISO 8601 time "
                                 "(e.g. 2026-11-24T10:15:00+00:00)") from None
    return int(when.timestamp() * 1e9) if when.tzinfo else int(when.astimezone().timestamp() * 1e9)
