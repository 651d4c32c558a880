"""QSGDISP(GROUP) objects kept in PostgreSQL and copied to every member as
QSGDISP(COPY) (qsg/copies.py, admin/groupdisp_commands.py), on real members
of one group: the copy made on the defining member at once and on the other
by its NOTIFY, kept across a restart, made by a member started later,
refreshed when the group object changes (a copy changed by hand too),
deleted with it (a copy queue holding messages kept, as MQ's NOPURGE), the
changes made while a member was down applied at its start; DISPLAY's
QSGDISP; bad input refused with nothing changed in the group or a member."""

from __future__ import annotations

import re
import time

import psycopg
import pytest
from support.log_extents import blocks
from support.qsg_members import run, wait_for


def copy_of(qm, key: str) -> dict | None:
    d = qm.core.objects.get(key)
    return d if d is not None and d.get("qsgdisp") == "COPY" else None


def group_rows(db: str) -> list[tuple]:
    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute("SELECT objtype, name, qsgdisp, attrs FROM hmq_definitions "
                            "ORDER BY objtype, name").fetchall()


GROUP_SCRIPT = """\
DEFINE QLOCAL(GQ) QSGDISP(GROUP) MAXDEPTH(77) DESCR('group queue') DEFPSIST(YES)
DEFINE QREMOTE(GR) QSGDISP(GROUP) RNAME(THERE) RQMNAME(QMX)
DEFINE QALIAS(GA) QSGDISP(GROUP) TARGET(GQ)
DEFINE QMODEL(GM) QSGDISP(GROUP) DEFTYPE(PERMDYN)
DEFINE PROCESS(GP) QSGDISP(GROUP) APPLICID('/bin/true')
DEFINE NAMELIST(GN) QSGDISP(GROUP) NAMES(A, B)
DEFINE CHANNEL(QMX.TO.QMY) CHLTYPE(RCVR) QSGDISP(GROUP)
DEFINE TOPIC(GT) QSGDISP(GROUP) TOPICSTR('group/prices') DEFPSIST(YES)
"""
KEYS = ("GQ", "GR", "GA", "GM", "PROCESS:GP", "NAMELIST:GN", "CHANNEL:QMX.TO.QMY", "TOPIC:GT")


def tree_has(qm, topicstr: str, name: str) -> bool:
    d = qm.core.pubsub.topics.by_topic.get(topicstr)
    return d is not None and d["name"] == name


@pytest.fixture
def group(qsg_db, make_qm, open_qm):
    for name in ("QM1", "QM2", "QM3"):
        make_qm(name, qsg="QSG1", qsg_db=qsg_db)
    return open_qm("QM1"), open_qm("QM2"), open_qm


def test_group_objects_are_copied_kept_refreshed_and_deleted(group, qsg_db):
    qm1, qm2, open_qm = group
    r = run(qm1, GROUP_SCRIPT)
    assert r["errors"] == 0, r["output"]
    # the defining member has its copies when the command answers; the other by NOTIFY
    assert all(copy_of(qm1, k) for k in KEYS), [k for k in KEYS if not copy_of(qm1, k)]
    assert wait_for(lambda: all(copy_of(qm2, k) for k in KEYS)), \
        [k for k in KEYS if not copy_of(qm2, k)]
    assert copy_of(qm2, "GQ")["attrs"]["MAXDEPTH"] == 77
    assert copy_of(qm2, "NAMELIST:GN")["attrs"]["NAMES"] == ["A", "B"]
    assert {(t, n, d) for t, n, d, _a in group_rows(qsg_db)} == {
        ("QLOCAL", "GQ", "GROUP"), ("QREMOTE", "GR", "GROUP"), ("QALIAS", "GA", "GROUP"),
        ("QMODEL", "GM", "GROUP"), ("PROCESS", "GP", "GROUP"), ("NAMELIST", "GN", "GROUP"),
        ("CHANNEL", "QMX.TO.QMY", "GROUP"), ("TOPIC", "GT", "GROUP")}
    # a topic object's copy is in the running topic tree of each member
    assert tree_has(qm1, "group/prices", "GT") and wait_for(lambda: tree_has(qm2, "group/prices",
                                                                             "GT"))
    shown = blocks(run(qm2, "DISPLAY TOPIC(GT) QSGDISP(ALL) TOPICSTR")["output"], "HMQ8633I")
    assert [(b["TOPIC"], b["QSGDISP"], b["TOPICSTR"]) for b in shown] == [
        ("GT", "COPY", "group/prices")]
    shown = blocks(run(qm2, "DISPLAY TOPIC(GT) QSGDISP(ALL) TOPICSTR")["output"], "HMQ8409I")
    assert [(b["TOPIC"], b["QSGDISP"], b["TOPICSTR"]) for b in shown] == [
        ("GT", "GROUP", "group/prices")]

    # a copy queue is a local queue of its member: messages of its own, persistent
    qm2.put("GQ", b"on the copy of QM2")
    # DISPLAY: COPY by default, GROUP on asking, both with ALL
    shown = blocks(run(qm2, "DISPLAY QLOCAL(GQ)")["output"], "HMQ8409I")
    assert [(b["QUEUE"], b["QSGDISP"]) for b in shown] == [("GQ", "COPY")]
    shown = blocks(run(qm2, "DISPLAY QLOCAL(GQ) QSGDISP(GROUP) MAXDEPTH")["output"], "HMQ8409I")
    assert [(b["QUEUE"], b["QSGDISP"], b["MAXDEPTH"]) for b in shown] == [("GQ", "GROUP", "77")]
    shown = blocks(run(qm2, "DISPLAY QLOCAL(G*) QSGDISP(ALL)")["output"], "HMQ8409I")
    assert sorted(b["QSGDISP"] for b in shown) == ["COPY", "GROUP"]
    out = run(qm2, "DISPLAY PROCESS(GP) QSGDISP(QMGR)")
    assert out["errors"] == 1 and "not found" in out["output"], out["output"]
    shown = blocks(run(qm2, "DISPLAY CHANNEL(*) QSGDISP(COPY)")["output"], "HMQ8409I")
    assert [(b["CHANNEL"], b["QSGDISP"]) for b in shown] == [("QMX.TO.QMY", "COPY")]

    # the copy and its message survive QM2's restart
    qm2.close("controlled")
    qm2 = open_qm("QM2")
    assert copy_of(qm2, "GQ") is not None and copy_of(qm2, "GQ")["attrs"]["MAXDEPTH"] == 77
    assert all(copy_of(qm2, k) for k in KEYS)
    assert qm2.core.queues["GQ"].depth == 1
    assert tree_has(qm2, "group/prices", "GT")

    # ALTER of a copy needs QSGDISP(COPY); the group object's change overwrites it
    out = run(qm2, "ALTER QLOCAL(GQ) MAXDEPTH(5)")
    assert out["errors"] == 1 and "QSGDISP(COPY)" in out["output"] and "2085" in out["output"]
    assert copy_of(qm2, "GQ")["attrs"]["MAXDEPTH"] == 77
    assert run(qm2, "ALTER QLOCAL(GQ) QSGDISP(COPY) MAXDEPTH(5)")["errors"] == 0
    assert copy_of(qm2, "GQ")["attrs"]["MAXDEPTH"] == 5
    assert copy_of(qm1, "GQ")["attrs"]["MAXDEPTH"] == 77          # QM1's copy untouched
    # DEFINE ... QSGDISP(COPY) REPLACE makes it the group object's again (REPLACE needed)
    out = run(qm2, "DEFINE PROCESS(GP) QSGDISP(COPY)")
    assert out["errors"] == 1 and "use REPLACE" in out["output"], out["output"]
    assert run(qm2, "ALTER PROCESS(GP) QSGDISP(COPY) USERDATA('by hand')")["errors"] == 0
    out = run(qm2, "DEFINE PROCESS(GP) QSGDISP(COPY) REPLACE")
    assert out["errors"] == 0 and "refreshed on QM2" in out["output"], out["output"]
    assert copy_of(qm2, "PROCESS:GP")["attrs"]["USERDATA"] == ""
    # (changed from the second member: any member changes the group's objects)
    r = run(qm2, "ALTER QLOCAL(GQ) QSGDISP(GROUP) MAXDEPTH(88)\n"
                 "DEFINE QREMOTE(GR) QSGDISP(GROUP) REPLACE RNAME(ELSEWHERE) RQMNAME(QMX)\n")
    assert r["errors"] == 0, r["output"]
    assert copy_of(qm2, "GQ")["attrs"]["MAXDEPTH"] == 88
    assert wait_for(lambda: copy_of(qm1, "GQ")["attrs"]["MAXDEPTH"] == 88)
    assert wait_for(lambda: copy_of(qm1, "GR")["attrs"]["RNAME"] == "ELSEWHERE")
    assert copy_of(qm2, "GQ")["attrs"]["DESCR"] == "group queue"   # the rest kept
    assert qm2.core.queues["GQ"].depth == 1                       # the message too

    # changes made while QM2 is down reach it at its start
    qm2.close("controlled")
    assert run(qm1, "ALTER PROCESS(GP) QSGDISP(GROUP) USERDATA('while QM2 was down')\n"
                    "DELETE NAMELIST(GN) QSGDISP(GROUP)\n")["errors"] == 0
    assert copy_of(qm1, "NAMELIST:GN") is None
    qm2 = open_qm("QM2")
    assert copy_of(qm2, "PROCESS:GP")["attrs"]["USERDATA"] == "while QM2 was down"
    assert copy_of(qm2, "NAMELIST:GN") is None and "NAMELIST:GN" not in qm2.core.objects

    # a member started later gets every copy, as the group has it now
    qm3 = open_qm("QM3")
    assert copy_of(qm3, "GQ")["attrs"]["MAXDEPTH"] == 88
    assert copy_of(qm3, "PROCESS:GP")["attrs"]["USERDATA"] == "while QM2 was down"
    assert copy_of(qm3, "NAMELIST:GN") is None

    # DELETE ... QSGDISP(GROUP): the group object and the copies; a copy queue that
    # holds a message is kept (MQ's NOPURGE), said in its operator log
    r = run(qm1, "DELETE QLOCAL(GQ) QSGDISP(GROUP)\nDELETE QALIAS(GA) QSGDISP(GROUP)\n"
                 "DELETE TOPIC(GT) QSGDISP(GROUP)\n")
    assert r["errors"] == 0, r["output"]
    assert "GQ" not in qm1.core.objects and "GA" not in qm1.core.objects
    assert wait_for(lambda: "GQ" not in qm3.core.objects and "GA" not in qm2.core.objects)
    assert wait_for(lambda: "TOPIC:GT" not in qm2.core.objects)
    assert not tree_has(qm1, "group/prices", "GT") and not tree_has(qm2, "group/prices", "GT")
    assert wait_for(lambda: "HMQ5341W" in (qm2.config.errors_dir / "HMQERR01.LOG").read_text())
    assert copy_of(qm2, "GQ") is not None and qm2.core.queues["GQ"].depth == 1
    assert ("QLOCAL", "GQ") not in {(t, n) for t, n, _d, _a in group_rows(qsg_db)}
    # the copy left behind goes by DELETE ... QSGDISP(COPY) PURGE, on that member alone
    r = run(qm2, "DELETE QLOCAL(GQ) QSGDISP(COPY) PURGE")
    assert r["errors"] == 0, r["output"]
    assert "GQ" not in qm2.core.objects and "GQ" not in qm2.core.queues
    # ... and the deletions are kept across a restart
    qm3.close("controlled")
    qm3 = open_qm("QM3")
    assert "GQ" not in qm3.core.objects and copy_of(qm3, "GR") is not None


def test_bad_input_is_refused_with_nothing_changed(group, qsg_db, make_qm, open_qm):
    qm1, qm2, _open = group
    r = run(qm1, "DEFINE CFSTRUCT(APP1) RECAUTO(NO)\n"
                 "DEFINE QLOCAL(SQ) QSGDISP(SHARED) CFSTRUCT(APP1)\n"
                 "DEFINE QLOCAL(LQ)\n"
                 "DEFINE TOPIC(LT) TOPICSTR('local/one')\n"
                 "DEFINE PROCESS(GP) QSGDISP(GROUP) APPLICID('/bin/true')\n")
    assert r["errors"] == 0, r["output"]
    assert wait_for(lambda: copy_of(qm2, "PROCESS:GP") is not None)
    rows = group_rows(qsg_db)
    objects1, objects2 = dict(qm1.core.objects), dict(qm2.core.objects)
    for text, why in (
            ("DEFINE QLOCAL(GQ) QSGDISP(GROUP) MAXDEPTH(X)", r"MAXDEPTH\(X\) is not a number"),
            ("DEFINE QLOCAL(GQ) QSGDISP(GROUP) NOSUCH(1)", r"NOSUCH"),
            ("DEFINE QLOCAL(GQ) QSGDISP(BOGUS)", r"QSGDISP\(BOGUS\) is not valid"),
            ("DEFINE QALIAS(GA) QSGDISP(SHARED) TARGET(LQ)", r"QSGDISP\(SHARED\) is not valid"),
            ("ALTER QLOCAL(SQ) QSGDISP(SHARED) MAXDEPTH(9)", r"QSGDISP\(SHARED\) is not valid"),
            # a name this member holds as its own object: no copy could be made here
            ("DEFINE QALIAS(LQ) QSGDISP(GROUP) TARGET(SQ)", r"QSGDISP\(QMGR\).*MQRC 2100"),
            # a shared queue's name, for a group queue of any type
            ("DEFINE QALIAS(SQ) QSGDISP(GROUP) TARGET(LQ)", r"MQRC 2100"),
            ("DEFINE PROCESS(GP) QSGDISP(GROUP)", r"defined in the group already"),
            ("DEFINE PROCESS(GP) APPLICID('/bin/false')", r"copy of a group object.*2100"),
            ("ALTER PROCESS(GP) APPLICID('/bin/false')", r"QSGDISP\(COPY\).*2085"),
            ("DELETE PROCESS(GP)", r"QSGDISP\(COPY\).*2085"),
            ("ALTER PROCESS(NOPE) QSGDISP(GROUP) APPLICID('x')", r"not defined in the group"),
            ("DELETE PROCESS(NOPE) QSGDISP(GROUP)", r"not defined in the group.*2085"),
            ("DELETE QLOCAL(LQ) QSGDISP(COPY)", r"QSGDISP\(COPY\) is not defined.*2085"),
            ("DEFINE NAMELIST(NL) QSGDISP(COPY)", r"not defined in the group.*2085"),
            ("DEFINE QMODEL(GM) QSGDISP(GROUP) DEFTYPE(PREDEFINED)",
             r"DEFTYPE\(PREDEFINED\) is not valid"),
            ("DEFINE QLOCAL(GQ) QSGDISP(GROUP) DEFPSIST(MAYBE)", r"DEFPSIST\(MAYBE\)"),
            ("DEFINE TOPIC(GT) QSGDISP(GROUP)", r"needs TOPICSTR"),
            # a topic string a topic object of this member's own stands for
            ("DEFINE TOPIC(GT) QSGDISP(GROUP) TOPICSTR('local/one')", r"already has topic "
             r"object LT.*2100")):
        out = run(qm1, text)
        assert out["errors"] == 1, (text, out["output"])
        assert re.search(why, out["output"]), (text, out["output"])
    assert group_rows(qsg_db) == rows
    assert dict(qm1.core.objects) == objects1
    time.sleep(0.3)           # a NOTIFY would have reached QM2 by now
    assert dict(qm2.core.objects) == objects2

    # a queue manager of no group: refused, nothing defined
    make_qm("LONE")
    lone = open_qm("LONE")
    before = dict(lone.core.objects)
    out = run(lone, "DEFINE QLOCAL(GQ) QSGDISP(GROUP)")
    assert out["errors"] == 1 and "HMQ5304E" in out["output"], out["output"]
    assert dict(lone.core.objects) == before


def test_unreachable_database_is_mqrc_2345_and_nothing_changes(tmp_path, private_postgres,
                                                              make_qm, open_qm):
    pg = private_postgres
    db = pg.create_database("qsg_groupdisp")
    make_qm("QM1", qsg="QSG1", qsg_db=db)
    qm1 = open_qm("QM1")
    before = dict(qm1.core.objects)
    pg.stop()
    out = run(qm1, "DEFINE PROCESS(GP) QSGDISP(GROUP) APPLICID('/bin/true')")
    assert out["errors"] == 1 and "2345" in out["output"], out["output"]
    assert dict(qm1.core.objects) == before
    pg.start()
    assert group_rows(db) == []
    r = run(qm1, "DEFINE PROCESS(GP) QSGDISP(GROUP) APPLICID('/bin/true')")
    assert r["errors"] == 0, r["output"]
    assert copy_of(qm1, "PROCESS:GP") is not None
