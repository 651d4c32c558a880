"""Two members of one group in one process (the embedded API): created with
``create --qsg``, a structure and a shared queue defined in MQSC on one and
used from the other; units of work on shared queues alone and mixed with
local queues; RECOVER(NO); non-persistent messages across a restart; the
records each member logs; leaving and the refusals that change nothing."""

from __future__ import annotations

import psycopg
import pytest
from support.qsg_members import wait_for

from harbormq.admin.commands import run_mqsc
from harbormq.errors import UnitOfWorkError
from harbormq.log.records import RecordType, SharedChange
from harbormq.qmgr import lifecycle as qmgr
from harbormq.qsg import group as qgroup
from harbormq.qsg.errors import (
    CFNotAvailable,
    GroupDatabaseError,
    GroupError,
    SharedPersistentNotAllowed,
)


def mqsc(qm, text: str) -> dict:
    return qm._call(run_mqsc(qm.core, text, security=None))


def shared_records(qm) -> list:
    """The SHARED_PUT and SHARED_GET records in ``qm``'s log (its whole log)."""
    log = qm.core.log
    return [r for r in log.read_from(log.chain()[0].first_lsn)
            if r.type in (RecordType.SHARED_PUT, RecordType.SHARED_GET)]


@pytest.fixture
def members(home, make_qm, open_qm, qsg_db):
    make_qm("QM1", qsg="QSG1", qsg_db=qsg_db)
    make_qm("QM2", qsg="QSG1", qsg_db=qsg_db)
    qm1, qm2 = open_qm("QM1"), open_qm("QM2")
    r = mqsc(qm1, "DEFINE CFSTRUCT(APP1) CFLEVEL(5) RECOVER(YES)\n"
                  "DEFINE QLOCAL(SQ) QSGDISP(SHARED) CFSTRUCT(APP1) DEFPSIST(YES)\n"
                  "DEFINE QLOCAL(LQ) DEFPSIST(YES)\n")
    assert r["errors"] == 0, r["output"]
    yield qm1, qm2


def test_a_shared_queue_defined_on_one_member_is_served_by_the_other(members):
    qm1, qm2 = members
    assert wait_for(lambda: "SQ" in qm2.core.shared_queues)
    qm1.put("SQ", b"one")
    qm1.put("SQ", b"two", priority=5)
    assert qm2.get("SQ").body == b"two"
    assert qm2.get("SQ").body == b"one"
    assert qm2.get("SQ") is None
    out = mqsc(qm2, "DISPLAY QLOCAL(SQ) ALL\nDISPLAY GROUP\nDISPLAY CFSTRUCT(*)\n"
                    "DISPLAY QMSTATUS\n")["output"]
    assert "QSGDISP(SHARED)" in out and "CFSTRUCT(APP1)" in out
    assert "QMNAME(QM1)" in out and "QMNAME(QM2)" in out and "STATUS(ACTIVE)" in out
    assert "RECOVER(YES)" in out and "QSGNAME(QSG1)" in out and "QSGNUM(2)" in out


def test_each_member_logs_its_own_changes_with_stamps_in_group_order(members):
    qm1, qm2 = members
    put = qm1.put("SQ", b"logged")
    got = qm2.get("SQ")
    assert got.msg_id == put.msg_id and got.seq == put.seq
    [p] = shared_records(qm1)
    [g] = shared_records(qm2)
    assert p.type == RecordType.SHARED_PUT and g.type == RecordType.SHARED_GET
    pc, gc = SharedChange.decode(p.payload), SharedChange.decode(g.payload)
    assert pc.msg_key == gc.msg_key == put.seq
    assert (pc.member, gc.member) == (1, 2)
    assert pc.structure == gc.structure == "APP1"
    assert gc.stamp > pc.stamp
    assert pc.message().body == b"logged"


def test_uncommitted_puts_are_invisible_and_a_backout_gives_gets_back(members):
    qm1, qm2 = members
    with qm1.begin() as uow:
        uow.put("SQ", b"later")
        assert qm2.get("SQ") is None
    assert qm2.get("SQ").body == b"later"
    qm1.put("SQ", b"again")
    uow = qm2.begin()
    assert uow.get("SQ").body == b"again"
    assert qm1.get("SQ") is None
    uow.backout()
    m = qm1.get("SQ")
    assert m.body == b"again" and m.backout_count == 1
    # the outcomes PostgreSQL kept for QM1's restart go once its log holds them
    with psycopg.connect(qm1.core.config.qsg.db) as conn:
        count = "SELECT count(*) FROM hmq_uow_outcomes WHERE member = 'QM1'"
        assert conn.execute(count).fetchone()[0] >= 1
        qm1._call(qm1.core.group.forget_outcomes())
        assert conn.execute(count).fetchone()[0] == 0


def test_a_unit_of_work_mixing_local_and_shared_queues_commits_both(members):
    qm1, qm2 = members
    qm1.put("LQ", b"local-in")
    with qm1.begin() as uow:
        assert uow.get("LQ").body == b"local-in"
        uow.put("SQ", b"moved")
    assert qm1.get("LQ") is None
    assert qm2.get("SQ").body == b"moved"
    # and one backed out leaves both as they were
    qm2.put("SQ", b"stay")
    uow = qm1.begin()
    uow.get("SQ")
    uow.put("LQ", b"not-here")
    uow.backout()
    assert qm1.get("LQ") is None
    assert qm2.get("SQ").body == b"stay"


def test_recover_no_structures_refuse_persistent_messages(members):
    qm1, _qm2 = members
    r = mqsc(qm1, "DEFINE CFSTRUCT(NOREC) RECOVER(NO)\n"
                  "DEFINE QLOCAL(SQN) QSGDISP(SHARED) CFSTRUCT(NOREC)\n")
    assert r["errors"] == 0, r["output"]
    with pytest.raises(SharedPersistentNotAllowed, match="MQRC 2048"):
        qm1.put("SQN", b"p", persistent=True)
    qm1.put("SQN", b"np", persistent=False)
    assert qm1.get("SQN").body == b"np"


def test_bad_definitions_are_refused_and_change_nothing(members):
    qm1, qm2 = members
    r = mqsc(qm1, "DEFINE QLOCAL(SQX) QSGDISP(SHARED) CFSTRUCT(NOPE)\n")
    assert r["errors"] == 1 and "not defined" in r["output"]
    r = mqsc(qm1, "DEFINE QLOCAL(SQY) QSGDISP(SHARED)\n")
    assert r["errors"] == 1 and "CFSTRUCT" in r["output"]
    r = mqsc(qm1, "DELETE CFSTRUCT(APP1)\n")
    assert r["errors"] == 1 and "2346" in r["output"]
    assert set(qm2.core.shared_queues) == {"SQ"}


def test_non_persistent_shared_messages_survive_a_member_restart(home, members, open_qm):
    qm1, qm2 = members
    qm1.put("SQ", b"np", persistent=False)
    qm1.close("immediate")
    qm1 = open_qm("QM1")
    assert qm1.get("SQ").body == b"np"


def test_joins_refused_change_nothing(home, make_qm, qsg_db, postgres):
    make_qm("QM1", qsg="QSG1", qsg_db=qsg_db)
    with pytest.raises(GroupError, match="belongs to queue sharing group QSG1"):
        make_qm("QM2", qsg="OTHER", qsg_db=qsg_db)
    assert not (home / "qmgrs" / "QM2").exists()
    bad = f"host=127.0.0.1 port={postgres.port} user=postgres dbname=nosuch connect_timeout=2"
    with pytest.raises(GroupDatabaseError):
        make_qm("QM3", qsg="QSG1", qsg_db=bad)
    with psycopg.connect(qsg_db) as conn:
        assert [m["name"] for m in qgroup.members(conn)] == ["QM1"]


def test_a_member_leaves_when_deleted_and_the_group_goes_last(home, make_qm, qsg_db):
    make_qm("QM1", qsg="QSG1", qsg_db=qsg_db)
    make_qm("QM2", qsg="QSG1", qsg_db=qsg_db)
    with pytest.raises(GroupError, match="still has members"):
        qgroup.delete_group(qsg_db, "QSG1")
    qmgr.delete("QM1", home=home)
    qmgr.delete("QM2", home=home)
    qgroup.delete_group(qsg_db, "QSG1")
    with psycopg.connect(qsg_db) as conn:
        assert qgroup.schema_state(conn) == (None, None)


def test_a_unit_of_work_is_refused_after_its_rows_were_backed_out_by_a_peer(members):
    qm1, qm2 = members
    qm2.put("SQ", b"x")
    uow = qm1.begin()
    uow.get("SQ")
    # as a peer would after the connection was lost: the rows backed out
    grp = qm1.core.group
    grp.session.backout(uow.id)
    qm1._call_sync(grp._reconnected)
    with pytest.raises(UnitOfWorkError, match="backed out by a peer"):
        uow.commit()


def test_losing_postgresql_fails_shared_queues_alone_and_they_come_back(make_qm, open_qm,
                                                                       private_postgres):
    pg = private_postgres
    db = pg.create_database("cfconlos")
    make_qm("QM1", qsg="QSG1", qsg_db=db)
    qm = open_qm("QM1")
    r = mqsc(qm, "DEFINE CFSTRUCT(APP1)\nDEFINE QLOCAL(SQ) QSGDISP(SHARED) CFSTRUCT(APP1)\n"
                 "DEFINE QLOCAL(LQ)\n")
    assert r["errors"] == 0, r["output"]
    qm.put("SQ", b"before", persistent=True)
    pg.kill()
    for _ in range(2):        # the lost connection, then no connection at all
        with pytest.raises(CFNotAvailable, match="MQRC 2345"):
            qm.put("SQ", b"during", persistent=True)
    qm.put("LQ", b"local", persistent=True)          # local queues keep working
    assert qm.get("LQ").body == b"local"
    out = mqsc(qm, "DISPLAY QMSTATUS\n")["output"]
    assert "QSGSTAT(DISCONNECTED)" in out
    pg.start()
    assert qm.get("SQ").body == b"before"             # reconnected by itself
    qm.put("SQ", b"after", persistent=True)
    assert qm.get("SQ").body == b"after"


def uow_records(qm, uow_id: int) -> list[str]:
    log = qm.core.log
    return [r.type.name for r in log.read_from(log.chain()[0].first_lsn) if r.uow_id == uow_id]


def test_restart_finishes_what_postgresql_decided_and_resolves_prepared_rows(make_qm, open_qm,
                                                                             qsg_db):
    make_qm("QM1", qsg="QSG1", qsg_db=qsg_db)
    qm = open_qm("QM1")
    r = mqsc(qm, "DEFINE CFSTRUCT(APP1)\nDEFINE QLOCAL(SQ) QSGDISP(SHARED) CFSTRUCT(APP1)\n"
                 "DEFINE QLOCAL(LQ) DEFPSIST(YES)\n")
    assert r["errors"] == 0, r["output"]
    qm.put("LQ", b"l1"); qm.put("LQ", b"l2")
    group = qm.core.group
    # 1. shared only: PostgreSQL decided (committed), the crash came before the COMMIT record
    decided = qm.begin()
    decided.put("SQ", b"decided", persistent=True)
    qm._call_sync(group.commit, decided.id)
    # 2. mixed, prepared in PostgreSQL, the crash came before the COMMIT record
    prepared = qm.begin()
    assert prepared.get("LQ").body == b"l1"
    prepared.put("SQ", b"prepared-only", persistent=True)
    qm._call_sync(group.prepare, prepared.id, qm.core.log.end_lsn)
    # 3. mixed, its COMMIT forced, the crash came before the rows were applied
    group.resolve_later = lambda *a: None
    committed = qm.begin()
    assert committed.get("LQ").body == b"l2"
    committed.put("SQ", b"committed", persistent=True)
    committed.commit()
    qm.close("immediate")

    qm = open_qm("QM1")
    assert "UOW_COMMIT" in uow_records(qm, decided.id)       # restart wrote the decision
    assert "UOW_BACKOUT" in uow_records(qm, prepared.id)
    bodies = sorted(qm.get("SQ").body for _ in range(2))
    assert bodies == [b"committed", b"decided"]
    assert qm.get("SQ") is None
    assert qm.get("LQ").body == b"l1" and qm.get("LQ") is None
