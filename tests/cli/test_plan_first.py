"""The plan-first convention (cli/__init__.py, docs/administration.md):
``--dry-run`` prints the plan and changes nothing, ``--yes`` carries it out
without asking, and without either a command that destroys or gives up data
asks on a terminal. In-process (CliRunner), the terminal faked; against a
running queue manager, ``log delete --dry-run`` as a real process."""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner
from support.log_extents import one_line, write_extents
from support.stomp_helpers import QMServer

from harbormq import QueueManager
from harbormq.cli import options
from harbormq.cli.main import cli
from harbormq.config import QMConfig
from harbormq.log.control import ControlFile
from harbormq.log.inspect import log_map


@pytest.fixture
def terminal(monkeypatch):
    """Someone at a terminal answers the question."""
    monkeypatch.setattr(options, "_stdin_is_a_terminal", lambda: True)


def run(*args, answer: str | None = None) -> str:
    r = CliRunner().invoke(cli, list(args), input=answer)
    assert r.exit_code == 0 and r.exception is None, (args, r.output, r.exception)
    return one_line(r.output)


def on_disk(home, qm: str) -> list[str]:
    return sorted(p.name for p in (home / "log" / qm).glob("S*.LOG"))


def deletable(home, qm: str) -> list[str]:
    return [e["extent"] for e in log_map(QMConfig.load(qm, home))["extents"]
            if e["state"] == "full" and e["needed"] == "none" and not e["deleted"]]


@pytest.mark.parametrize("args", [
    ["log", "crestart", "QM1", "--end-lsn", "0"],
    ["log", "rebuild-control", "QM1"],
    ["reset-log", "QM1"],
    ["log", "delete", "QM1", "--all"],
])
def test_dry_run_with_yes_is_refused(args):
    r = CliRunner().invoke(cli, [*args, "--dry-run", "--yes"])
    assert r.exit_code == 2 and "not both" in r.output, r.output


def test_log_delete_dry_run_then_asked(make_qm, home, terminal):
    make_qm("QL", log_type="linear", log_file_pages=32)
    write_extents(home, "QL")
    files = on_disk(home, "QL")
    going = deletable(home, "QL")
    assert len(going) >= 2, going

    out = run("log", "delete", "QL", "--all", "--dry-run")
    assert f"Log extent(s) {', '.join(going)} would be deleted" in out, out
    assert "Nothing deleted" in out and on_disk(home, "QL") == files

    out = run("log", "delete", "QL", "--all", answer="n\n")
    assert f"Delete {len(going)} log extent(s) of QL?" in out, out
    assert "Nothing deleted" in out and on_disk(home, "QL") == files

    out = run("log", "delete", "QL", "--through", going[0], answer="y\n")
    assert f"HMQ7482I Log extent(s) {going[0]} deleted" in out, out
    assert on_disk(home, "QL") == [f for f in files if f != going[0]]

    out = run("log", "delete", "QL", "--all", "--yes")          # no question
    assert "Delete" not in out and f"HMQ7482I Log extent(s) {', '.join(going[1:])} " \
        "deleted" in out, out


def test_log_delete_dry_run_of_a_running_queue_manager(make_qm, home):
    make_qm("QS", log_type="linear", log_file_pages=32, port=0)
    write_extents(home, "QS")
    going = deletable(home, "QS")
    srv = QMServer(home, "QS")
    srv.start()
    try:
        files = on_disk(home, "QS")
        out = one_line(srv.cli("log", "delete", "QS", "--all", "--dry-run").stdout)
        assert f"Log extent(s) {', '.join(going)} would be deleted" in out, out
        assert on_disk(home, "QS") == files
        refused = srv.cli("log", "delete", "QS", "--through", "S0000999.LOG", "--dry-run",
                          check=False)
        assert refused.returncode == 1 and "S0000999.LOG is not in the log" in \
            one_line(refused.stderr), refused.stderr
    finally:
        srv.stop()


def test_crestart_dry_run_and_asked(make_qm, home, terminal):
    make_qm("QM1", log_type="linear")
    with QueueManager.open("QM1", home=home) as qm:
        qm.define_queue("ORDERS", DEFPSIST="YES")
        qm.put("ORDERS", b"kept")
        point = qm._call_sync(lambda: qm.core.log.end_lsn)
        qm.put("ORDERS", b"given up")
    log_dir = QMConfig.load("QM1", home).log_dir

    def recorded():
        return ControlFile(log_dir).load(repair=False).crestart

    for how in (["--dry-run"], []):
        out = run("log", "crestart", "QM1", "--end-lsn", str(point), *how, answer="n\n")
        assert f"Cut at LSN {point}" in out and "Nothing recorded" in out, out
        assert recorded() is None
    out = run("log", "crestart", "QM1", "--end-lsn", str(point), answer="y\n")
    assert "Record this conditional restart of QM1?" in out, out
    assert "HMQ7130W Recorded" in out and recorded()["cut_lsn"] == point


def test_rebuild_control_and_reset_log_dry_run_then_asked(make_qm, home, terminal):
    make_qm("QM1", log_type="linear")
    with QueueManager.open("QM1", home=home) as qm:
        qm.define_queue("Q1", DEFPSIST="YES")
        qm.put("Q1", b"kept")
    log_dir = QMConfig.load("QM1", home).log_dir
    for copy in ("control.1", "control.2"):
        (log_dir / copy).unlink()

    out = run("log", "rebuild-control", "QM1", "--dry-run")
    assert "Nothing written" in out and not (log_dir / "control.1").exists()
    out = run("log", "rebuild-control", "QM1", answer="y\n")
    assert "HMQ7123W" in out and (log_dir / "control.1").exists(), out

    shutil.rmtree(log_dir)                          # every copy of the log lost
    out = run("reset-log", "QM1", "--dry-run")
    assert "Nothing changed" in out and not log_dir.exists(), out
    out = run("reset-log", "QM1", answer="n\n")
    assert "Start a new log for QM1?" in out and "Nothing changed" in out, out
    assert not log_dir.exists()
    out = run("reset-log", "QM1", answer="y\n")
    assert "HMQ7135W The log of QM1 was reset." in out, out
    with QueueManager.open("QM1", home=home) as qm:
        assert [m.body for m in qm.browse("Q1")] == [b"kept"]
