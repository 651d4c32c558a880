"""``/metrics`` rendered in a process of its own (``http/metrics_process.py``):
the same bytes as a render in the caller, from a worker that is not this
process, started again after it dies, ended when the endpoint closes."""

from __future__ import annotations

import gzip
import os

from test_metrics_render import snapshot

from harbormq.http.metrics_process import RenderProcess, render_here

BACKUPS = {"backup_time_s": 1.69e9, "verified_time_s": 1.695e9}


def test_the_worker_renders_what_the_caller_would():
    snap = snapshot()
    process = RenderProcess("QM1")
    try:
        text = process.render(snap, BACKUPS, False)
        assert process._proc is not None and process._proc.pid != os.getpid()
        assert process.unavailable is None
        assert text == render_here(snap, BACKUPS, False)
        assert b"harbormq_queue_depth{" in text
        assert gzip.decompress(process.render(snap, BACKUPS, True)) == text
    finally:
        process.close()


def test_a_worker_that_dies_is_replaced_and_the_scrape_still_answers():
    snap = snapshot()
    process = RenderProcess("QM1")
    try:
        first = process.render(snap, None, False)
        dead = process._proc
        dead.kill()
        dead.wait()
        assert process.render(snap, None, False) == first      # rendered here meanwhile
        assert process.render(snap, None, False) == first      # by a new worker
        assert process._proc is not None and process._proc.pid != dead.pid
    finally:
        process.close()
    assert process._proc is None
