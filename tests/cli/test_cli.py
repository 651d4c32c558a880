"""The harbormq command, run as a real process against real queue managers."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time

import psutil
import pytest
from support.procs import PYTHON, hmq

from harbormq import QueueManager
from harbormq.config import QMConfig
from harbormq.qmgr import lifecycle as qmgr


def test_create_start_status_stop_delete(python_env, home):
    hmq(python_env, "create", "QM1", "--log", "linear", "--log-file-pages", "64")
    assert (home / "qmgrs" / "QM1" / "qm.toml").exists()
    assert (home / "log" / "QM1" / "S0000000.LOG").stat().st_size == 64 * 4096

    out = hmq(python_env, "start", "QM1").stdout
    assert "HMQ8003I" in out and "restart extent S0000000.LOG" in out
    try:
        sock = home / "qmgrs" / "QM1" / "admin.sock"
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600
        again = hmq(python_env, "start", "QM1", check=False)
        assert again.returncode == 1 and "already running" in again.stderr
        status = json.loads(hmq(python_env, "status", "QM1", "--json").stdout)
        assert status[0]["state"] == "running" and status[0]["log_type"] == "linear"
        deleting = hmq(python_env, "delete", "QM1", check=False)
        assert deleting.returncode == 1 and "running" in deleting.stderr
    finally:
        hmq(python_env, "stop", "QM1", "--wait")
    status = json.loads(hmq(python_env, "status", "QM1", "--json").stdout)
    assert status[0]["state"] == "ended"
    assert "HMQ8004I" in (home / "qmgrs" / "QM1" / "errors" / "HMQERR01.LOG").read_text()
    hmq(python_env, "delete", "QM1")
    assert not (home / "qmgrs" / "QM1").exists() and not (home / "log" / "QM1").exists()


def test_stop_when_not_running_and_unknown_queue_manager(python_env, home):
    hmq(python_env, "create", "QM1", "--log-file-pages", "32")
    r = hmq(python_env, "stop", "QM1", check=False)
    assert r.returncode == 1 and "HMQ8146E" in r.stderr and "not running" in r.stderr
    r = hmq(python_env, "start", "NOPE", check=False)
    assert r.returncode == 1 and "does not exist" in r.stderr


@pytest.mark.parametrize("name", ["[/x]", "[bold]Q", ":x:"])
def test_an_error_naming_something_that_looks_like_markup_names_it_as_given(python_env, name):
    """Errors print names as they are: '[/x]' once raised rich's MarkupError (a
    traceback instead of the error), '[bold]Q' was printed as 'Q', ':x:' as an
    emoji."""
    r = hmq(python_env, "start", name, check=False)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"HMQ8118E: queue manager {name} does not exist" in r.stderr
    r = hmq(python_env, "create", name, check=False)
    assert r.returncode == 1 and f"HMQ8405E: queue manager name '{name}' is not valid" in \
        r.stderr.replace("\n", " ")


def test_a_path_is_printed_as_given(python_env, tmp_path):
    """':x:' in a path printed as an emoji, '[bold]' vanished."""
    home = tmp_path / "home:x:[bold]y"
    home.mkdir()
    r = hmq(dict(python_env, HARBORMQ_HOME=str(home)), "status")
    # (rich folds a line longer than 80 columns off a terminal: newlines only)
    assert "No queue managers in" in r.stdout and str(home) in r.stdout.replace("\n", ""), \
        r.stdout


def test_bad_log_file_pages_is_named(python_env):
    r = hmq(python_env, "create", "QM1", "--log-file-pages", "20", check=False)
    assert r.returncode == 1
    assert "--log-file-pages 20 is out of range" in r.stderr


def test_immediate_and_preemptive_stop(python_env, home):
    hmq(python_env, "create", "QM1", "--log-file-pages", "32")
    hmq(python_env, "start", "QM1")
    hmq(python_env, "stop", "QM1", "--immediate", "--wait")
    hmq(python_env, "start", "QM1")
    out = hmq(python_env, "stop", "QM1", "--preemptive").stdout
    assert "HMQ8004I" in out
    with QueueManager.open("QM1", home=home) as qm:   # restarts cleanly
        assert "SYSTEM.DEAD.LETTER.QUEUE" in qm.queue_names()


def test_sigkilled_server_restarts(python_env, home):
    hmq(python_env, "create", "QM1", "--log-file-pages", "32")
    with QueueManager.open("QM1", home=home) as qm:
        qm.define_queue("Q1", DEFPSIST="YES")
        qm.put("Q1", b"kept")
    hmq(python_env, "start", "QM1")
    pid = int((home / "qmgrs" / "QM1" / "qm.lock").read_text())
    os.kill(pid, 9)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
            time.sleep(0.05)
        except ProcessLookupError:
            break
    out = hmq(python_env, "start", "QM1").stdout   # stale socket and lock are handled
    assert "HMQ8003I" in out
    hmq(python_env, "stop", "QM1", "--wait")
    with QueueManager.open("QM1", home=home) as qm:
        assert [m.body for m in qm.browse("Q1")] == [b"kept"]


def test_log_dump_filters_and_map(python_env, home):
    hmq(python_env, "create", "QM1", "--log", "linear", "--log-file-pages", "32")
    with QueueManager.open("QM1", home=home) as qm:
        qm.define_queue("A", DEFPSIST="YES")
        qm.define_queue("B", DEFPSIST="YES")
        for i in range(300):
            qm.put("A" if i % 2 else "B", b"x" * 1500, correl_id=f"c{i}")
        uow = qm.begin()
        uow.put("A", b"in-uow")
        uow.commit()
        uow_id = uow.id

    records = [json.loads(line) for line in
               hmq(python_env, "log", "dump", "QM1", "--json").stdout.splitlines()]
    lsns = [r["lsn"] for r in records]
    assert lsns == sorted(lsns) and len(set(lsns)) == len(lsns)
    assert {"OBJECT_CREATE", "MSG_PUT", "UOW_BEGIN", "UOW_COMMIT", "CHECKPOINT_END",
            "EXTENT_END"} <= {r["type"] for r in records}

    only_a = [json.loads(line) for line in hmq(
        python_env, "log", "dump", "QM1", "--json", "--queue", "A").stdout.splitlines()]
    assert only_a and all(r["object"] == "A" for r in only_a)

    in_uow = [json.loads(line) for line in hmq(
        python_env, "log", "dump", "QM1", "--json", "--uow", str(uow_id)).stdout.splitlines()]
    assert [r["type"] for r in in_uow] == ["UOW_BEGIN", "MSG_PUT", "UOW_COMMIT"]

    mid = lsns[len(lsns) // 2]
    window = [json.loads(line) for line in hmq(
        python_env, "log", "dump", "QM1", "--json", "--from-lsn", str(mid + 1), "--to-lsn",
        str(lsns[-5])).stdout.splitlines()]
    assert window and all(mid < r["lsn"] < lsns[-5] for r in window)

    future = hmq(python_env, "log", "dump", "QM1", "--json", "--since", "2999-01-01").stdout
    assert future == ""

    text = hmq(python_env, "log", "dump", "QM1").stdout
    assert "MSG_PUT" in text and "LSN" in text

    m = json.loads(hmq(python_env, "log", "map", "QM1", "--json").stdout)
    assert m["log_type"] == "linear" and len(m["extents"]) >= 3
    firsts = [e["first_lsn"] for e in m["extents"]]
    assert firsts == sorted(firsts)
    for a, b in zip(m["extents"], m["extents"][1:], strict=False):
        assert a["end_lsn"] == b["first_lsn"], "extent LSN ranges join up"
    assert m["restart_extent"] and m["media_extent"] == "S0000000.LOG"
    assert "restart LSN" in hmq(python_env, "log", "map", "QM1").stdout


def test_log_dump_while_running(python_env, home):
    hmq(python_env, "create", "QM1", "--log-file-pages", "32")
    hmq(python_env, "start", "QM1")
    try:
        out = hmq(python_env, "log", "dump", "QM1", "--json").stdout
        types = [json.loads(line)["type"] for line in out.splitlines()]
        assert "QM_START" in types
    finally:
        hmq(python_env, "stop", "QM1", "--wait")


def test_tour_runs_and_verifies(python_env, tmp_path):
    r = hmq(python_env, "tour", "--workdir", str(tmp_path / "tour"), "--seconds", "2",
            timeout=300)
    assert "OK: every acknowledged persistent message is there exactly once" in r.stdout
    assert "SIGKILL" in r.stdout and "HMQ7229I" in r.stdout


def test_preemptive_stop_never_signals_a_process_it_cannot_prove(make_qm, home, python_env):
    """A lock held with a pid file that is not a number once became kill(-1)."""
    make_qm()
    qm = QueueManager.open("QM1", home=home)       # this process holds the lock
    try:
        lock = home / "qmgrs" / "QM1" / "qm.lock"
        lock.write_text("not-a-pid\n")
        r = subprocess.run([PYTHON, "-m", "harbormq", "stop", "QM1", "--preemptive"],
                           env=python_env, capture_output=True, text=True, timeout=60)
        said = " ".join((r.stdout + r.stderr).split())      # (the console wraps lines)
        assert r.returncode != 0
        assert "HMQ8027E" in said and "nothing was killed" in said
        config = qm.config
        assert not qmgr.is_instance(config, -1) and not qmgr.is_instance(config, os.getpid())
    finally:
        qm.close("immediate")


@pytest.mark.parametrize("cmdline, proven", [
    (["/usr/bin/python3", "-m", "harbormq", "start", "QM1", "--foreground"], True),
    (["/venv/bin/harbormq", "start", "QM1"], True),
    (["/usr/bin/python3", "-m", "harbormq.server", "QM1"], True),     # what start spawns
    # another harbormq command holding the lock a moment (found by review): never killed
    (["/venv/bin/harbormq", "log", "delete", "QM1", "--through", "S0000003.LOG"], False),
    (["/usr/bin/python3", "my_app.py", "QM1", "harbormq"], False),
])
def test_only_a_started_queue_manager_is_proven(make_qm, home, monkeypatch, cmdline, proven):
    config = QMConfig.load(make_qm(), home)
    monkeypatch.setattr(qmgr, "running_pid", lambda _config: 4242)

    class FakeProcess:
        def __init__(self, pid):
            assert pid == 4242

        def cmdline(self):
            return cmdline
    monkeypatch.setattr(psutil, "Process", FakeProcess)     # is_instance imports it
    assert qmgr.is_instance(config, 4242) is proven
