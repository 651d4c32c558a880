"""What several command groups of ``harbormq`` share in their options: the
plan-first pair ``--dry-run`` / ``--yes`` (the convention is written out in
``cli/__init__.py``), and a time given on the command line (``log crestart
--end-time``, ``dump-config --at-time``).

``log dump --since`` reads its times otherwise (UTC when no zone is given,
epoch seconds too: ``log/inspect.py``).
"""

from __future__ import annotations

import sys
from typing import Callable, TypeVar

import click

#: how a plan-first command goes on once it has its plan (``plan_first``)
ACT, PLAN, ASK = "act", "plan", "ask"

T = TypeVar("T")


def dry_run_option(help_text: str):
    return click.option("--dry-run", is_flag=True, help=help_text)


def yes_option(help_text: str):
    return click.option("--yes", is_flag=True, help=help_text)


def plan_first(dry_run: bool, yes: bool, *, unattended: str = PLAN) -> str:
    """What a plan-first command does: PLAN with ``--dry-run`` (print the plan,
    change nothing), ACT with ``--yes`` (carry it out without asking), else
    ASK (print the plan, then ask) when someone can answer on a terminal.
    Off a terminal nobody can: ``unattended`` says what the command did there
    before it asked (PLAN, or ACT for ``log delete``), so scripts go on as
    they did."""
    if dry_run and yes:
        raise click.UsageError("give --dry-run (print the plan) or --yes (carry it out "
                               "without asking), not both")
    if dry_run:
        return PLAN
    if yes:
        return ACT
    return ASK if _stdin_is_a_terminal() else unattended


def confirmed(question: str) -> bool:
    """The operator's answer, no by default (asked on stderr: standard output
    may be a plan in JSON)."""
    return click.confirm(question, default=False, err=True)


def plan_then_act(work: Callable[[bool], T], show: Callable[[T], None], how: str,
                  question: str) -> bool:
    """Print the plan ``work(write)`` returns and carry it out as ``how`` says:
    ACT in one pass (``work(True)`` plans and does it), PLAN only prints, ASK
    prints the plan and, once confirmed, calls ``work(True)``, printing what
    it did when that differs from the plan (a name taken only when it is
    done). Returns whether the plan was carried out."""
    shown = work(how == ACT)
    show(shown)
    if how != ASK or not confirmed(question):
        return how == ACT
    done = work(True)
    if done != shown:
        show(done)
    return True


def _stdin_is_a_terminal() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except ValueError:                 # closed
        return False


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
