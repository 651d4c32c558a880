"""The MQSC commands of structure backup and recovery (admin/cfstruct_commands.py)
on two real queue managers of one group: BACKUP CFSTRUCT on one writes into
its own log, RESET CFSTRUCT ACTION(FAIL) on the other discards the
structure, RECOVER CFSTRUCT reads the backup from the first one's log and
prints its plan, progress and result; DISPLAY CFSTATUS in its three types."""

from __future__ import annotations

import re

import pytest
from support.log_extents import blocks
from support.qsg_members import run, wait_for

from harbormq.errors import HarbormqError
from harbormq.log.records import RecordType
from harbormq.qsg.errors import CFStructFailed
from harbormq.qsg.structure import StructureStore


@pytest.fixture
def two(qsg_db, make_qm, open_qm):
    """Two real members; SQ a shared queue on APP1 (RECAUTO(NO): recovered by hand)."""
    for name in ("QM1", "QM2"):
        make_qm(name, qsg="QSG1", qsg_db=qsg_db)
    qm1, qm2 = open_qm("QM1"), open_qm("QM2")
    r = run(qm1, "DEFINE CFSTRUCT(APP1) CFLEVEL(5) RECOVER(YES) RECAUTO(NO)\n"
                 "DEFINE QLOCAL(SQ) QSGDISP(SHARED) CFSTRUCT(APP1) DEFPSIST(YES)\n")
    assert r["errors"] == 0, r["output"]
    assert wait_for(lambda: "SQ" in qm2.core.shared_queues)
    store = StructureStore(qsg_db, "QM1")
    yield (qm1, qm2), store
    store.close()


def bodies(store) -> list[bytes]:
    store.forget_structures()
    return sorted(m.body for m in store.browse("SQ"))


def test_backup_reset_recover_and_display(two, qsg_db):
    (qm1, qm2), store = two
    for i in range(25):
        (qm1 if i % 2 else qm2).put("SQ", f"m{i}".encode())
    out = run(qm2, "BACKUP CFSTRUCT(APP1)")
    assert out["errors"] == 0 and "HMQ5320I" in out["output"], out["output"]
    assert "25 messages" in out["output"]
    # the backup is in QM2's log
    kinds = [r.type for r in qm2.core.log.view().read_from(0)]
    assert RecordType.CFSTRUCT_BACKUP_END in kinds

    backup = blocks(run(qm1, "DISPLAY CFSTATUS(APP1) TYPE(BACKUP)")["output"], "HMQ8701I")
    assert backup[0]["QMNAME"] == "QM2" and backup[0]["BKUPMSGS"] == "25"
    assert backup[0]["LOGS"] == "QM1,QM2" and backup[0]["BKUPDATE"]

    # after the backup: gets by one member, puts by the other, in the logs only
    for _ in range(5):
        assert qm1.get("SQ") is not None
    for i in range(25, 35):
        qm2.put("SQ", f"m{i}".encode())
    expected = bodies(store)
    assert len(expected) == 30
    out = run(qm1, "RESET CFSTRUCT(APP1) ACTION(FAIL)")
    assert out["errors"] == 0 and "30 messages discarded" in out["output"], out["output"]
    summary = blocks(run(qm1, "DISPLAY CFSTATUS(*)")["output"], "HMQ8701I")
    assert (summary[0]["STATUS"], summary[0]["ENTSUSED"]) == ("FAILED", "0")
    assert summary[0]["FAILDATE"]
    store.forget_structures()
    with pytest.raises(CFStructFailed, match="MQRC 2373"):
        store.check_usable("APP1")
    with pytest.raises(HarbormqError, match="2373"):
        qm2.put("SQ", b"refused")

    out = run(qm1, "RECOVER CFSTRUCT(APP1)")
    assert out["errors"] == 0, out["output"]
    text = out["output"]
    plan_at, progress_at, done_at = (text.index("HMQ5322I"), text.index("HMQ5323I"),
                                     text.index("HMQ5324I"))
    assert plan_at < progress_at < done_at                  # plan, progress, result
    assert "backup" in text[plan_at:progress_at] and "estimated" in text[plan_at:progress_at]
    assert "30 messages" in text[done_at:]
    summary = blocks(run(qm2, "DISPLAY CFSTATUS(APP1) TYPE(SUMMARY)")["output"], "HMQ8701I")
    assert (summary[0]["STATUS"], summary[0]["ENTSUSED"]) == ("ACTIVE", "30")
    assert bodies(store) == expected
    # the members serve it again: every message once
    got = []
    while (m := qm2.get("SQ")) is not None:
        got.append(m.body)
    assert sorted(got) == expected
    connect = blocks(run(qm1, "DISPLAY CFSTATUS(APP1) TYPE(CONNECT)")["output"], "HMQ8701I")
    assert [b["QMNAME"] for b in connect] == ["QM1", "QM2"]
    # the operator log has the plan and the outcome
    oplog = (qm1.config.errors_dir / "HMQERR01.LOG").read_text()
    assert "HMQ5322I" in oplog and "HMQ5324I" in oplog


def test_bad_input_is_refused_with_nothing_changed(two, qsg_db):
    (qm1, _qm2), store = two
    for i in range(3):
        qm1.put("SQ", f"m{i}".encode())
    for text, why in (("RECOVER CFSTRUCT(APP1)", "only a failed structure"),
                      ("RECOVER CFSTRUCT(NOPE)", "MQRC 2349"),
                      ("RESET CFSTRUCT(APP1)", "ACTION\\(FAIL\\)"),
                      ("BACKUP CFSTRUCT(APP1) EXCLINT(X)", "EXCLINT"),
                      ("DISPLAY CFSTATUS(NOPE)", "MQRC 2349"),
                      ("DISPLAY CFSTATUS(APP1) TYPE(SMDS)", "TYPE\\(SMDS\\)")):
        out = run(qm1, text)
        assert out["errors"] == 1, (text, out["output"])
        assert re.search(why, out["output"]), (text, out["output"])
    assert store.depth("SQ") == 3
    group, qm1.core.group = qm1.core.group, None
    out = run(qm1, "DISPLAY CFSTATUS(*)")
    qm1.core.group = group
    assert out["errors"] == 1 and "HMQ5330E" in out["output"]


def test_running_members_recover_a_recauto_structure_by_themselves(two, qsg_db):
    """RECAUTO(YES): after RESET CFSTRUCT ACTION(FAIL), one of the running members
    (their group services run the watch) recovers the structure with no operator."""
    (qm1, qm2), store = two
    r = run(qm1, "DEFINE CFSTRUCT(AUTO1) CFLEVEL(5) RECOVER(YES) RECAUTO(YES)\n"
                 "DEFINE QLOCAL(SQA) QSGDISP(SHARED) CFSTRUCT(AUTO1) DEFPSIST(YES)\n")
    assert r["errors"] == 0, r["output"]
    assert wait_for(lambda: "SQA" in qm2.core.shared_queues)
    for i in range(12):
        (qm1 if i % 2 else qm2).put("SQA", f"a{i}".encode())
    assert run(qm2, "BACKUP CFSTRUCT(AUTO1)")["errors"] == 0
    qm1.put("SQA", b"after the backup")
    out = run(qm1, "RESET CFSTRUCT(AUTO1) ACTION(FAIL)")
    assert out["errors"] == 0 and "13 messages discarded" in out["output"], out["output"]

    def status() -> tuple[str, str]:
        s = blocks(run(qm1, "DISPLAY CFSTATUS(AUTO1) TYPE(SUMMARY)")["output"], "HMQ8701I")
        return s[0]["STATUS"], s[0]["ENTSUSED"]
    assert wait_for(lambda: status() == ("ACTIVE", "13"), timeout=30), status()
    oplogs = "".join((qm.config.errors_dir / "HMQERR01.LOG").read_text() for qm in (qm1, qm2))
    assert "recovered automatically" in oplogs
    got = []
    while (m := qm1.get("SQA")) is not None:
        got.append(m.body)
    assert sorted(got) == sorted([f"a{i}".encode() for i in range(12)] + [b"after the backup"])
