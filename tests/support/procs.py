"""Child processes of the tests: the interpreter, the source tree they import
harbormq from, their environment, and the harbormq command.

Imported by the STOMP crash workload child too (through support.stomp_helpers),
so it imports nothing from pytest."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PYTHON = sys.executable
#: the worktree's src/, first on every child's PYTHONPATH
SRC = Path(__file__).resolve().parents[2] / "src"


def child_env(home: Path) -> dict:
    """Environment for a child Python process that uses harbormq under ``home``
    (no crash point armed)."""
    env = dict(os.environ)
    env["HARBORMQ_HOME"] = str(home)
    env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("HARBORMQ_CRASH_AT", None)
    return env


def hmq(env, *args, timeout=120, check=True):
    """``python -m harbormq ARGS`` in ``env``; an AssertionError with its output
    if it fails and ``check``."""
    proc = subprocess.run([PYTHON, "-m", "harbormq", *args], env=env, capture_output=True,
                          text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"harbormq {' '.join(args)} exited {proc.returncode}:\n"
                             f"{proc.stdout}\n{proc.stderr}")
    return proc
