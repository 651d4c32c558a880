"""Starting a queue manager's server process in the background (``harbormq
start``, ``harbormq activate``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from ..admin.client import call
from ..config import QMConfig
from ..errors import HarbormqError, QueueManagerNotRunning
from ..fsutil import make_dirs, private


def start_in_background(config: QMConfig) -> dict:
    """Spawn the server process of a stopped queue manager and wait until it
    answers on its admin socket; returns its status."""
    qm = config.name
    make_dirs(config.errors_dir)
    out_path = config.errors_dir / "console.log"
    with open(out_path, "ab", opener=private) as out:
        proc = subprocess.Popen([sys.executable, "-m", "harbormq.server", qm],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True,
                                env=dict(os.environ, HARBORMQ_HOME=str(config.home)))
    deadline = time.monotonic() + 600
    while True:
        if proc.poll() is not None:
            tail = out_path.read_text(errors="replace").strip().splitlines()[-5:]
            raise HarbormqError(f"queue manager {qm} failed to start: " +
                                (" | ".join(tail) or f"exit status {proc.returncode}"),
                                msgid="HMQ8042E")
        try:
            status = call(config, {"cmd": "status"}, timeout=2)["status"]
            return status
        except QueueManagerNotRunning:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
