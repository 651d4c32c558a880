"""MQSC for log management: ARCHIVE LOG, SET LOG ARCHIVED and DISPLAY LOG, parsed,
run in-process, and run over the admin socket of a real queue manager."""

from __future__ import annotations

import pytest
from support.log_extents import blocks, write_extents
from support.stomp_helpers import QMServer

from harbormq.admin.commands import run_mqsc
from harbormq.admin.mqsc import MqscSyntaxError, parse_command, parse_script
from harbormq.log import archive
from harbormq.log.records import extent_file_name
from harbormq.security import Security

# -- parsing ------------------------------------------------------------------------------


def test_parse_the_log_commands():
    assert (parse_command("archive log").verb, parse_command("ARC LOG").objtype) == \
        ("ARCHIVE", "LOG")
    cmd = parse_command("set log archived(s0000003.log)")
    assert (cmd.verb, cmd.objtype, cmd.attrs) == ("SET", "LOG", {"ARCHIVED": "S0000003.LOG"})
    cmd = parse_command("DIS LOG EXTENT ARCHIVED WHERE(ARCHIVED EQ NO)")
    assert cmd.flags == ["EXTENT", "ARCHIVED"] and cmd.where == ("ARCHIVED", "EQ", "NO")


@pytest.mark.parametrize("text, expected", [
    ("ARCHIVE LOG MODE(QUIESCE)", "ARCHIVE LOG takes no keywords, found MODE"),
    ("SET LOG MAXARCH(10)", "expected a keyword of SET LOG (ARCHIVED), found MAXARCH"),
    ("ARCHIVE QLOCAL(Q1)", "expected LOG after ARCHIVE, found QLOCAL"),
    ("DIS LOG WHERE(CURRLOG EQ X)", "expected an attribute to filter on, found CURRLOG"),
])
def test_log_command_syntax_errors_name_what_was_expected(text, expected):
    [err] = parse_script(text)
    assert isinstance(err, MqscSyntaxError) and expected in str(err), err


# -- in-process ---------------------------------------------------------------------------

def run(qm, text: str) -> dict:
    return qm._call(run_mqsc(qm.core, text, security=Security.for_config(qm.config)))


def test_display_log_and_refusals_on_a_circular_log(make_qm, open_qm):
    make_qm("QC", log_file_pages=32)
    qm = open_qm("QC")
    out = run(qm, "DISPLAY LOG")
    assert out["errors"] == 0, out["output"]
    [log] = blocks(out["output"], "HMQ8322I")
    assert log["LOGTYPE"] == "CIRCULAR" and log["LOGMGMT"] == "" and log["ARCHPATH"] == ""
    assert log["CURRLOG"] == extent_file_name(qm.core.log.state.active.number)
    for text in ("ARCHIVE LOG", "SET LOG ARCHIVED(S0000000.LOG)"):
        r = run(qm, text)
        assert r["errors"] == 1 and "needs a linear log: the log of queue manager QC is " \
            "circular" in r["output"], r["output"]


def test_archive_log_without_an_archive_path_is_refused_before_the_switch(make_qm, open_qm):
    make_qm("QL", log_type="linear", log_file_pages=32)
    qm = open_qm("QL")
    active = qm.core.log.state.active.number
    r = run(qm, "ARCHIVE LOG")
    assert r["errors"] == 1 and "HMQ8101E: queue manager QL has no log archive path" \
        in r["output"] and "log.archive_path" in r["output"], r["output"]
    assert qm.core.log.state.active.number == active, "the active extent stays open"
    r = run(qm, "SET LOG")
    assert r["errors"] == 1 and "SET LOG needs ARCHIVED(extent)" in r["output"]


# -- a real queue manager -----------------------------------------------------------------

def test_archive_log_then_display_log_shows_every_closed_extent_archived(home, make_qm,
                                                                          tmp_path):
    arch = tmp_path / "arch"
    make_qm("QS", log_type="linear", log_file_pages=32, log_management="archive",
            log_archive_paths=[arch], port=0)
    write_extents(home, "QS")
    srv = QMServer(home, "QS").start()
    try:
        out = srv.sc("DISPLAY LOG")
        [log] = blocks(out, "HMQ8322I")
        active = log["CURRLOG"]
        assert (log["LOGTYPE"], log["LOGMGMT"], log["ARCHPATH"], log["MAXARCH"]) == \
            ("LINEAR", "ARCHIVE", str(arch), "500"), log
        extents = {b["EXTENT"]: b for b in blocks(out, "HMQ8323I")}
        assert extents[active]["STATUS"] == "ACTIVE" and extents[active]["ARCHIVED"] == "NO"
        assert sum(b["STATUS"] == "FULL" for b in extents.values()) >= 2

        out = srv.sc("ARCHIVE LOG")
        following = extent_file_name(int(active[1:8]) + 1)
        assert f"HMQ7480I: log extent {active} closed and ready for archive; {following} " \
               "is now the current extent." in out, out
        assert f"HMQ7481I: log extent(s) {active} archived to {arch}." in out or \
            f", {active} archived to {arch}." in out, out

        out = srv.sc("DISPLAY LOG")
        [log] = blocks(out, "HMQ8322I")
        assert log["CURRLOG"] == following and log["ARCHLOG"] == "", log
        extents = {b["EXTENT"]: b for b in blocks(out, "HMQ8323I")}
        full = [n for n, b in extents.items() if b["STATUS"] == "FULL"]
        assert active in full and all(extents[n]["ARCHIVED"] == "YES" for n in full), extents
        assert [e.name for e, _ in archive.read_manifest(archive.archive_dir(arch, "QS"))] \
            == full
        for n in full:                  # archive mode: deleted once archived and unneeded
            b = extents[n]
            assert b["ONDISK"] == ("NO" if b["DELETED"] == "YES" else "YES"), b
            assert b["DELETED"] == "NO" or b["NEEDED"] == "NO", b
        [only] = blocks(srv.sc("DIS LOG WHERE(STATUS EQ ACTIVE)"), "HMQ8323I")
        assert only["EXTENT"] == following
        [sel] = blocks(srv.sc(f"DIS LOG ARCHIVED WHERE(EXTENT EQ {active})"), "HMQ8323I")
        assert sel == {"EXTENT": active, "ARCHIVED": "YES"}

        bad = srv.sc("SET LOG ARCHIVED(S9999999.LOG)", check=False)
        assert "HMQ8147E: log extent S9999999.LOG is not in the log of queue manager QS" \
            in bad, bad
        bad = srv.sc(f"SET LOG ARCHIVED({following})", check=False)
        assert f"HMQ8147E: log extent {following} is active, not closed" in bad, bad
        again = srv.sc(f"SET LOG ARCHIVED({active})")          # as MQ: no error
        assert f"HMQ7481I: log extent {active} marked archived." in again
    finally:
        srv.stop()
