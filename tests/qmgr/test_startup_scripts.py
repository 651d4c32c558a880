"""Startup scripts: MQSC files run at every start after restart recovery and
before the STOMP listeners open, each command's outcome in the operator log;
a failing command stops the start only with ``on_error = "stop"``.
"""

from __future__ import annotations

import tomllib

import pytest
import tomli_w
from support.stomp_helpers import QMServer


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = QMServer(tmp_path_factory.mktemp("startup") / "hmq", "QSU")
    s.create()
    yield s
    s.stop()


def oplog(s: QMServer) -> str:
    return (s.qm_dir / "errors" / "HMQERR01.LOG").read_text()


def set_startup(s: QMServer, **startup) -> None:
    data = tomllib.loads(s.config_path.read_text())
    data["startup"] = startup
    s.config_path.write_text(tomli_w.dumps(data))


def test_the_startup_folder_runs_in_name_order_at_every_start(srv):
    folder = srv.qm_dir / "startup"
    folder.mkdir()
    (folder / "20-alter.mqsc").write_text("ALTER QLOCAL(START.Q) MAXDEPTH(7)\n")
    (folder / "10-define.mqsc").write_text("* the queues\nDEFINE QLOCAL(START.Q) REPLACE\n")
    srv.start()
    try:
        assert "MAXDEPTH(7)" in srv.sc("DISPLAY QLOCAL(START.Q) MAXDEPTH")
        log = oplog(srv)
        assert "HMQ8893I startup script 10-define.mqsc line 2: DEFINE QLOCAL(START.Q) " \
               "REPLACE: HMQ8006I: harbormq queue created" in log, log[-2000:]
        assert log.index("10-define.mqsc") < log.index("20-alter.mqsc")
        assert "startup scripts: 2 command(s) run, 0 failed" in log
        srv.sc("ALTER QLOCAL(START.Q) MAXDEPTH(99)")
    finally:
        srv.stop()
    srv.start()          # again at the next start
    try:
        assert "MAXDEPTH(7)" in srv.sc("DISPLAY QLOCAL(START.Q) MAXDEPTH")
    finally:
        srv.stop()
        for f in folder.iterdir():
            f.unlink()


def test_a_failing_command_does_not_stop_the_start_by_default(srv):
    (srv.qm_dir / "startup" / "a.mqsc").write_text(
        "DEFINE QLOCAL(BEFORE.Q) REPLACE\nALTER QLOCAL(NO.SUCH.Q) MAXDEPTH(1)\n"
        "DEFINE QLOCL(TYPO.Q)\nDEFINE QLOCAL(AFTER.Q) REPLACE\n")
    srv.start()
    try:
        out = srv.sc("DISPLAY QLOCAL(*)")
        assert "BEFORE.Q" in out and "AFTER.Q" in out
        log = oplog(srv)
        assert "HMQ8894E startup script a.mqsc line 2: ALTER QLOCAL(NO.SUCH.Q) MAXDEPTH(1) " \
               "failed" in log, log[-2000:]
        assert "HMQ8894E startup script a.mqsc line 3" in log and "HMQ8405E" in log
        assert "startup scripts: 4 command(s) run, 2 failed" in log
    finally:
        srv.stop()


def test_a_failing_command_stops_the_start_where_configured(srv):
    (srv.qm_dir / "conf").mkdir()
    (srv.qm_dir / "conf" / "strict.mqsc").write_text(
        "DEFINE QLOCAL(STRICT.Q) REPLACE\nALTER QLOCAL(NO.SUCH.Q) MAXDEPTH(1)\n"
        "DEFINE QLOCAL(NEVER.Q)\n")
    set_startup(srv, scripts=["conf/strict.mqsc"], on_error="stop")
    status, out = srv.start_failure()
    assert status != 0
    assert "HMQ8895E" in out and "strict.mqsc line 2" in out, out
    assert not (srv.qm_dir / "listeners.json").exists()      # no listener opened
    set_startup(srv, scripts=["conf/strict.mqsc"], on_error="continue")
    srv.start()
    try:
        out = srv.sc("DISPLAY QLOCAL(*)")
        assert "STRICT.Q" in out and "NEVER.Q" in out
    finally:
        srv.stop()
