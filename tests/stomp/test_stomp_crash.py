"""The crash harness extended to STOMP (issue 3 §6): 8 producers and 8
consumers (tests/support/stomp_crash_workload.py, one child process, raw STOMP
frames) against a ``harbormq start --foreground`` server that is SIGKILLed at
random moments under load and restarted; the clients reconnect (a new port
every time) and go on. Receipts are the ground truth;
tests/support/stomp_crash_checks.py has the rules.

``--crash-runs N`` sets the number of SIGKILLs (default 30 here);
``HARBORMQ_CRASH_SEED`` fixes the seed, printed with the summary and on failure.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest
import support
from support.procs import PYTHON
from support.stomp_crash_checks import BOQ, QUEUES, drain, journal_size, read_journals, verify
from support.stomp_helpers import QMServer

WORKLOAD = Path(support.__file__).resolve().with_name("stomp_crash_workload.py")
DEFAULT_KILLS = 30
SEED = int(os.environ.get("HARBORMQ_CRASH_SEED") or random.randrange(1 << 30))
SUMMARY: dict = {}


@pytest.fixture(scope="module", autouse=True)
def _report(request):
    yield
    if not SUMMARY:
        return
    pm = request.config.pluginmanager
    tr, capture = pm.get_plugin("terminalreporter"), pm.get_plugin("capturemanager")
    text = ("stomp crash harness: " + ", ".join(f"{k} {v}" for k, v in SUMMARY.items()) +
            f"; seed {SEED}")
    if tr is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            tr.write_line("")
            tr.write_line(text)


def kill_count(request) -> int:
    n = request.config.getoption("--crash-runs")
    return DEFAULT_KILLS if n is None else n


def test_stomp_random_sigkills_under_load(tmp_path, request):
    kills_wanted = kill_count(request)
    rng = random.Random(SEED)
    srv = QMServer(tmp_path / "hmq", "QC")
    srv.create(log_file_pages=512)
    srv.start()
    srv.sc(f"DEFINE QLOCAL({BOQ}) MAXDEPTH(999999999)\n" + "\n".join(
        f"DEFINE QLOCAL({q}) DEFPSIST(YES) MAXDEPTH(999999999) BOTHRESH(3) BOQNAME({BOQ})"
        for q in QUEUES))
    journal, stop = tmp_path / "journal", tmp_path / "stop"
    journal.mkdir()
    wl_out = open(tmp_path / "workload.out", "wb")
    wl = subprocess.Popen([PYTHON, str(WORKLOAD), "--qm-dir", str(srv.qm_dir),
                           "--journal", str(journal), "--stop", str(stop),
                           "--seed", str(SEED)], env=srv.env, stdout=wl_out,
                          stderr=subprocess.STDOUT)
    wl_out.close()
    kills = 0
    t0 = time.monotonic()
    try:
        for _ in range(kills_wanted):
            # under load: the clients have reconnected and made progress
            size = journal_size(journal)
            end = time.monotonic() + 60
            while journal_size(journal) < size + 4096:
                assert wl.poll() is None, (tmp_path / "workload.out").read_text()
                assert time.monotonic() < end, "no progress after a restart"
                time.sleep(0.02)
            time.sleep(rng.uniform(0.0, 0.8))
            srv.kill()
            kills += 1
            srv.start()
        time.sleep(0.5)
        stop.touch()
        wl.wait(timeout=120)
        out = (tmp_path / "workload.out").read_text()
        assert wl.returncode == 0, f"workload: {out}"
    finally:
        if wl.poll() is None:
            os.kill(wl.pid, signal.SIGKILL)
            wl.wait()
        srv.kill()
    left = drain(srv.name, srv.home)
    events = read_journals(journal)
    violations, stats = verify(events, left)
    SUMMARY.update({"SIGKILLs": kills, "seconds": round(time.monotonic() - t0, 1),
                    **{k: stats[k] for k in ("receipted", "acked", "left on queues",
                                             "redelivered same incarnation",
                                             "redelivered after restart", "nack", "drop",
                                             "tx commit unknown",
                                             "unreceipted delivered then lost in a crash",
                                             "tx seen, then taken back by a crash",
                                             "moved to the backout queue",
                                             "backout count lower after a restart")}})
    assert kills == kills_wanted
    assert stats["receipted"] > 50 * kills_wanted // 10, stats
    assert stats["acked"] > 0 and stats["redelivered after restart"] > 0, stats
    assert not violations, (f"seed {SEED}: {len(violations)} violations:\n" +
                            "\n".join(violations[:40]))


def test_verify_catches_violations():
    """The checker itself: a lost message, a double ACK, a vanished delivery and a
    half-visible transaction are all reported."""
    ev = [
        {"t": "send", "wid": "a", "tx": None, "ts": 1, "port": 1, "who": "p"},
        {"t": "rcpt", "wid": "a", "ts": 2, "port": 1, "who": "p"},
        {"t": "send", "wid": "b", "tx": None, "ts": 3, "port": 1, "who": "p"},
        {"t": "rcpt", "wid": "b", "ts": 4, "port": 1, "who": "p"},
        {"t": "dlv", "wid": "b", "redelivered": "false", "boc": 0, "ts": 5, "port": 1},
        {"t": "ack-attempt", "wids": ["b"], "ts": 6, "port": 1},
        {"t": "acked", "wids": ["b"], "ts": 7, "port": 1},
        {"t": "acked", "wids": ["b"], "ts": 8, "port": 1},
        {"t": "send", "wid": "c", "tx": None, "ts": 9, "port": 1},
        {"t": "rcpt", "wid": "c", "ts": 9, "port": 1},
        {"t": "dlv", "wid": "c", "redelivered": "false", "boc": 0, "ts": 10, "port": 1},
        {"t": "send", "wid": "f", "tx": None, "ts": 9, "port": 1},
        {"t": "dlv", "wid": "f", "redelivered": "false", "boc": 0, "ts": 10, "port": 2},
        {"t": "send", "wid": "g", "tx": None, "ts": 9, "port": 1},
        {"t": "dlv", "wid": "g", "redelivered": "false", "boc": 0, "ts": 10, "port": 1},
        {"t": "send", "wid": "d1", "tx": "T", "ts": 11, "port": 1},
        {"t": "send", "wid": "d2", "tx": "T", "ts": 12, "port": 1},
        {"t": "commit-attempt", "tx": "T", "wids": ["d1", "d2"], "ts": 13, "port": 1},
        {"t": "send", "wid": "h1", "tx": "U", "ts": 11, "port": 1},
        {"t": "send", "wid": "h2", "tx": "U", "ts": 12, "port": 1},
        {"t": "commit-attempt", "tx": "U", "wids": ["h1", "h2"], "ts": 13, "port": 1},
        {"t": "dlv", "wid": "h1", "redelivered": "false", "boc": 0, "ts": 14, "port": 1},
        {"t": "send", "wid": "e", "tx": None, "ts": 14, "port": 1},
        {"t": "dlv", "wid": "e", "redelivered": "false", "boc": 0, "ts": 15, "port": 1},
        {"t": "dlv", "wid": "e", "redelivered": "false", "boc": 0, "ts": 16, "port": 1},
    ]
    for e in ev:
        e.setdefault("who", "x")
    v, stats = verify(ev, [("d1", "CRASH.Q0", 0), ("e", "CRASH.Q0", 1)])
    text = "\n".join(v)
    assert "f was delivered" in text and "g was delivered" not in text
    assert stats["unreceipted delivered then lost in a crash"] == 2     # g and h1
    assert "LOST: a" in text
    assert "b acknowledged (ACK receipted) 2 times" in text
    assert "c was delivered, never acknowledged, and is gone" in text
    assert "transaction T" in text and "transaction U" not in text
    assert stats["tx seen, then taken back by a crash"] == 1
    assert "e redelivered by the same server" in text
