"""Helpers of the tests that drive real members of a queue sharing group in
this process (tests/qsg): MQSC run on a member, and waiting for what another
member learns by NOTIFY."""

from __future__ import annotations

import time

from harbormq.admin.commands import run_mqsc
from harbormq.security import Security


def run(qm, text: str) -> dict:
    """``text`` run as MQSC on ``qm``, with its own security (the owner)."""
    return qm._call(run_mqsc(qm.core, text, security=Security.for_config(qm.config)))


def wait_for(pred, timeout: float = 5.0) -> bool:
    """Whether ``pred`` comes true within ``timeout`` seconds (polled)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return pred()
