"""The text of ``/metrics`` rendered in a process of its own: ``RenderProcess``.

prometheus_client renders in Python: 0.12 to 0.14 s of CPU for 10,000
queues. In a thread of the queue manager's process it holds the GIL for most
of that, and the loop waits for it in switch intervals (5 ms each), which
shows in the receipts' p99 while a scrape runs (docs/http-metrics.md). Here
the snapshot (plain data: ``metrics_snapshot.Snapshot``) is pickled to a
worker process, ``python -m harbormq.http.metrics_process``, which renders
it (``metrics_render.render``, gzipped when asked) and sends the bytes back;
the thread that asks only waits on a pipe, without the GIL, and the render
uses the machine's other core.

The worker is started at the first scrape and kept. It reads requests on
its stdin and ends at end of file: when the queue manager closes the
endpoint, or dies (its end of the pipe closes with it). A worker that dies
or answers nonsense is stopped and started again at the next request; one
that cannot be started at all leaves the render to the calling thread
(``render_here``), so a scrape never fails for want of a process.

Frames on both pipes: an 8-byte little-endian length, then that many bytes.
A request is ``pickle((snapshot, backups, gzipped))``; an answer's first
byte is ``0`` (the text follows) or ``1`` (the render's error, as text).

Not here: what is rendered (``metrics_render.py``), the snapshot
(``metrics_snapshot.py``), the endpoint (``metrics.py``).
"""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
import threading
from typing import IO

from ..errors import HarbormqError
from .metrics_render import render

LENGTH = struct.Struct("<Q")
OK, FAILED = 0, 1
#: how long a worker has to end when asked (its stdin closed)
STOP_S = 5.0


class RenderFailed(HarbormqError):
    msgid = "HMQ8951E"


def render_here(snap, backups: dict | None, gzipped: bool) -> bytes:
    """The render in the calling thread (no worker process)."""
    return render(snap, backups=backups, gzipped=gzipped)


class RenderProcess:
    """One worker process rendering scrapes, one request at a time (see the
    module). ``render`` is called from a thread, never from the loop."""

    def __init__(self, name: str):
        self.name = name
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        #: set when a worker could not be started: render in the caller from then on
        self.unavailable: str | None = None

    def render(self, snap, backups: dict | None, gzipped: bool) -> bytes:
        request = pickle.dumps((snap, backups, gzipped), protocol=pickle.HIGHEST_PROTOCOL)
        with self._lock:
            if self.unavailable is None:
                proc = self._started()
                if proc is not None:
                    try:
                        _write_frame(proc.stdin, request)
                        answer = _read_frame(proc.stdout)
                    except (OSError, EOFError, ValueError):
                        self._stop()                  # a new one at the next request
                    else:
                        if answer[:1] == bytes([OK]):
                            return answer[1:]
                        raise RenderFailed(f"/metrics could not be rendered: "
                                           f"{answer[1:].decode(errors='replace')}")
        return render_here(snap, backups, gzipped)

    def _started(self) -> subprocess.Popen | None:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._stop()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "harbormq.http.metrics_process"],
                # not the queue manager's stderr: a test or a supervisor reading it
                # to its end must not wait for the worker (its errors come back in
                # its answers)
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                env={**os.environ, "HARBORMQ_METRICS_WORKER": self.name},
                close_fds=True)
        except OSError as exc:
            self.unavailable = f"cannot start the render process: {exc}"
            return None
        return self._proc

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            proc.stdin.close()          # the worker ends at end of file
        except OSError:
            pass
        try:
            proc.wait(STOP_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()

    def close(self) -> None:
        with self._lock:
            self._stop()


def _write_frame(out: IO[bytes], data: bytes) -> None:
    out.write(LENGTH.pack(len(data)))
    out.write(data)
    out.flush()


def _read_frame(inp: IO[bytes]) -> bytes:
    head = _read_exact(inp, LENGTH.size)
    return _read_exact(inp, LENGTH.unpack(head)[0])


def _read_exact(inp: IO[bytes], n: int) -> bytes:
    data = inp.read(n)
    if data is None or len(data) != n:
        raise EOFError("the render process's pipe ended")
    return data


def serve(inp: IO[bytes], out: IO[bytes]) -> None:
    """The worker: render each request until end of file."""
    while True:
        try:
            request = _read_frame(inp)
        except EOFError:
            return
        try:
            snap, backups, gzipped = pickle.loads(request)
            answer = bytes([OK]) + render(snap, backups=backups, gzipped=gzipped)
        except Exception as exc:  # noqa: BLE001 - the endpoint reports it
            answer = bytes([FAILED]) + f"{type(exc).__name__}: {exc}".encode()
        _write_frame(out, answer)


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
