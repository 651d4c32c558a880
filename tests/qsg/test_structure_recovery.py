"""BACKUP CFSTRUCT, RESET CFSTRUCT ACTION(FAIL) and RECOVER CFSTRUCT
(qsg/structure_recovery.py) against a real PostgreSQL: three members put and
get on shared queues, with units of work committed, backed out, in flight
and in doubt, around a fuzzy backup; the structure is failed and rebuilt
from the backup and the merged logs of all members, and must come back
exactly: every committed message once, with its queue, body and backout
count, and every undecided unit of work's rows as they were. Also with the
backup only on an archived extent of a member that is down."""

from __future__ import annotations

import asyncio
import random
import shutil
import threading

import pytest
from support.qsg_logs import BuilderLog, LogMember, archive_all, load, log_group, rows

from harbormq.errors import LogMissing
from harbormq.qsg import structure_recovery as sr
from harbormq.qsg.errors import CFStructFailed
from harbormq.qsg.merge import MemberLog


@pytest.fixture
def members(qsg_db, tmp_path):
    made = log_group(qsg_db, tmp_path / "logs", app1_recauto="NO")
    yield made
    for m in made:
        m.store.close()


def backup(member: LogMember, conninfo: str, exclint: int = 0) -> sr.BackupResult:
    log = BuilderLog(member)
    return asyncio.run(sr.backup_structure(log, log.force, conninfo, "APP1", exclint))


def fail_and_recover(conninfo, members, tmp_path, logs=None) -> sr.RecoveryResult:
    for m in members:
        m.flush()
    with sr.connect(conninfo) as conn:
        sr.fail_structure(conn, "APP1")
        logs = logs or {m.name: MemberLog(m.name, m.log_dir) for m in members}
        plan = sr.plan_recovery(conn, "APP1", "NORMAL", logs)
        assert plan.runnable, plan.lines()
        return sr.recover_structure(conn, plan, tmp_path / "scratch", logs=logs)


def test_reset_fail_under_load_then_recover_gives_back_exactly_the_structure(
        qsg_db, members, tmp_path):
    rng = random.Random(7)
    open_before = load(members, rng, 150)
    # the backup is taken while two other members go on working (fuzzy)
    busy = threading.Thread(target=load, args=(members[::2], random.Random(8), 120))
    busy.start()
    result = backup(members[1], qsg_db)
    busy.join()
    assert result.messages > 0 and result.replay_stamp <= result.backup_id
    open_after = load(members, rng, 150)
    # some of the units of work left open are prepared (in doubt), some stay in flight
    for i, ((_name, uow), m) in enumerate(sorted({**open_before, **open_after}.items())):
        if i % 2 == 0:
            m.prepare(uow)
    expected = rows(qsg_db)
    other = rows(qsg_db, "APP2")
    assert len(expected) > 20
    assert {r[1] for r in expected.values()} >= {"AVAILABLE", "GOT", "PUT"}

    members[0].flush()
    with sr.connect(qsg_db) as conn:
        assert sr.fail_structure(conn, "APP1") == len(expected)
    assert rows(qsg_db) == {}
    with pytest.raises(CFStructFailed, match="MQRC 2373"):
        members[2].store.forget_structures()
        members[2].store.check_usable("APP1")
    members[0].store.forget_structures()

    for m in members:
        m.flush()
    logs = {m.name: MemberLog(m.name, m.log_dir) for m in members}
    with sr.connect(qsg_db) as conn:
        plan = sr.plan_recovery(conn, "APP1", "NORMAL", logs)
        text = "\n".join(plan.lines())
        assert f"backup {result.backup_id} by QM2" in text and "estimated" in text
        said = []
        done = sr.recover_structure(conn, plan, tmp_path / "scratch",
                                    progress=lambda *a: said.append(a), logs=logs)
    assert rows(qsg_db) == expected
    assert rows(qsg_db, "APP2") == other
    assert done.messages == len(expected) and done.bytes_read == plan.bytes
    assert {s[0] for s in said} == {"QM1", "QM2", "QM3"}
    # usable again: a member gets a committed message
    members[2].store.forget_structures()
    assert members[2].store.check_usable("APP1")


def test_every_committed_message_back_exactly_once_after_many_gets(qsg_db, members, tmp_path):
    rng = random.Random(11)
    load(members, rng, 100)
    backup(members[0], qsg_db, exclint=0)
    load(members, rng, 200)
    for m in members:       # nothing left open: the committed state only
        m.commit_open()
    expected = rows(qsg_db)
    fail_and_recover(qsg_db, members, tmp_path)
    after = rows(qsg_db)
    assert after == expected
    bodies = [r[5] for r in after.values()]
    assert len(bodies) == len(set(bodies))


def test_exclint_leaves_recent_messages_to_the_logs(qsg_db, members, tmp_path):
    for i in range(10):
        members[0].put("APP1", "SQ1", f"recent-{i}".encode())
    result = backup(members[1], qsg_db, exclint=60)
    assert result.messages == 0 and result.left_out == 10
    expected = rows(qsg_db)
    fail_and_recover(qsg_db, members, tmp_path)
    assert rows(qsg_db) == expected


def test_purge_empties_the_structure(qsg_db, members, tmp_path):
    load(members, random.Random(3), 40)
    with sr.connect(qsg_db) as conn:
        sr.fail_structure(conn, "APP1")
        plan = sr.plan_recovery(conn, "APP1", "PURGE", {})
        assert "TYPE(PURGE)" in plan.lines()[0]
        done = sr.recover_structure(conn, plan, tmp_path / "scratch")
        assert sr.structure_row(conn, "APP1")["status"] == "ACTIVE"
    assert done.messages == 0 and rows(qsg_db) == {}


def test_recover_refuses_an_active_structure_and_bad_input(qsg_db, members):
    with sr.connect(qsg_db) as conn:
        with pytest.raises(sr.StructureRecoveryError, match="only a failed structure"):
            sr.plan_recovery(conn, "APP1", "NORMAL", {})
        with pytest.raises(sr.StructureRecoveryError, match="TYPE\\(FAST\\) is not valid"):
            sr.plan_recovery(conn, "APP1", "FAST", {})
        with pytest.raises(sr.CFStructError, match="MQRC 2349"):
            sr.fail_structure(conn, "NOPE")
    with pytest.raises(sr.StructureRecoveryError, match="EXCLINT\\(5000\\)"):
        backup(members[0], qsg_db, exclint=5000)


def test_backup_only_in_the_archive_of_a_member_that_is_down(qsg_db, members, tmp_path):
    rng = random.Random(5)
    load(members, rng, 80)
    result = backup(members[0], qsg_db)
    members[0].log.switch()            # the backup's extent is closed, then archived
    load(members, rng, 150)
    for m in members:
        m.commit_open()
        m.flush()
    expected = rows(qsg_db)
    # QM1 (whose log holds the backup) is down and its log directory is lost;
    # its closed extents are in its archive, its newest one copied there too
    qm1 = members[0]
    arch = tmp_path / "archive"
    assert len(list(qm1.log_dir.glob("S*.LOG"))) >= 2, "the backup must be on an archived extent"
    headers = archive_all(qm1, arch)
    assert headers[0].first_lsn <= result.start_lsn      # the backup is on an archived extent
    shutil.rmtree(qm1.log_dir)
    logs = {m.name: MemberLog(m.name, m.log_dir) for m in members[1:]}
    logs["QM1"] = MemberLog("QM1", None, (arch,))
    with sr.connect(qsg_db) as conn:
        sr.fail_structure(conn, "APP1")
        plan = sr.plan_recovery(conn, "APP1", "NORMAL", logs)
        assert plan.members["QM1"].to_recall and "to recall from its archive" in \
            "\n".join(plan.lines())
        said = []
        sr.recover_structure(conn, plan, tmp_path / "scratch",
                             say=lambda mid, text: said.append(mid), logs=logs)
    assert "HMQ7484I" in said                       # recalled, hash checked
    assert rows(qsg_db) == expected
    assert not (tmp_path / "scratch").exists()      # the recalled copies removed


def test_a_member_whose_log_is_nowhere_stops_the_recovery_before_any_change(
        qsg_db, members, tmp_path):
    load(members, random.Random(9), 30)
    backup(members[0], qsg_db)
    for m in members:
        m.flush()
    shutil.rmtree(members[2].log_dir)
    logs = {m.name: MemberLog(m.name, m.log_dir) for m in members}
    with sr.connect(qsg_db) as conn:
        sr.fail_structure(conn, "APP1")
        plan = sr.plan_recovery(conn, "APP1", "NORMAL", logs)
        assert not plan.runnable and "QM3" in plan.missing
        assert any("member QM3: NOT READABLE" in line for line in plan.lines())
        with pytest.raises(LogMissing, match="QM3"):
            sr.recover_structure(conn, plan, tmp_path / "scratch", logs=logs)
        assert sr.structure_row(conn, "APP1")["status"] == "FAILED"
