"""The MQSC commands of structure backup and recovery (admin/cfstruct_commands.py)
on two real queue managers of one group: BACKUP CFSTRUCT on one writes into
its own log, RESET CFSTRUCT ACTION(FAIL) on the other discards the
structure, RECOVER CFSTRUCT reads the backup from the first one's log and
prints its plan, progress and result; DISPLAY CFSTATUS in its three types."""

from __future__ import annotations

import re

import psycopg
import pytest
from support.log_extents import blocks

from harbormq.admin.commands import run_mqsc
from harbormq.log.records import Message, RecordType
from harbormq.qsg import group as qgroup
from harbormq.qsg.errors import CFStructFailed
from harbormq.qsg.structure import StructureStore
from harbormq.security import Security


class Session:
    """The member's session as the commands use it (core.qsg): conninfo, name."""

    def __init__(self, conninfo: str, member: str):
        self.conninfo = conninfo
        self.member = member


def run(qm, text: str) -> dict:
    return qm._call(run_mqsc(qm.core, text, security=Security.for_config(qm.config)))


@pytest.fixture
def two(qsg_db, make_qm, open_qm):
    qms = []
    for name in ("QM1", "QM2"):
        make_qm(name)
        qgroup.join(qsg_db, "QSG1", name)
        qm = open_qm(name)
        qm.core.qsg = Session(qsg_db, name)
        qms.append(qm)
    with psycopg.connect(qsg_db, autocommit=True) as conn:
        qgroup.define_structure(conn, "APP1", {"RECAUTO": "NO"})
    store = StructureStore(qsg_db, "QM1")
    yield qms, store
    store.close()


def put(store, n: int) -> None:
    for i in range(n):
        store.put("APP1", "SQ", Message(body=f"m{i}".encode(), msg_id=f"{i:024d}".encode(),
                                        persistent=True), None)


def test_backup_reset_recover_and_display(two, qsg_db):
    (qm1, qm2), store = two
    put(store, 25)
    out = run(qm2, "BACKUP CFSTRUCT(APP1)")
    assert out["errors"] == 0 and "HMQ5320I" in out["output"], out["output"]
    assert "25 messages" in out["output"]
    # the backup is in QM2's log
    kinds = [r.type for r in qm2.core.log.view().read_from(0)]
    assert RecordType.CFSTRUCT_BACKUP_END in kinds

    backup = blocks(run(qm1, "DISPLAY CFSTATUS(APP1) TYPE(BACKUP)")["output"], "HMQ8701I")
    assert backup[0]["QMNAME"] == "QM2" and backup[0]["BKUPMSGS"] == "25"
    assert backup[0]["LOGS"] == "QM1,QM2" and backup[0]["BKUPDATE"]

    out = run(qm1, "RESET CFSTRUCT(APP1) ACTION(FAIL)")
    assert out["errors"] == 0 and "25 messages discarded" in out["output"], out["output"]
    summary = blocks(run(qm1, "DISPLAY CFSTATUS(*)")["output"], "HMQ8701I")
    assert (summary[0]["STATUS"], summary[0]["ENTSUSED"]) == ("FAILED", "0")
    assert summary[0]["FAILDATE"]
    store.forget_structures()
    with pytest.raises(CFStructFailed, match="MQRC 2373"):
        store.check_usable("APP1")

    out = run(qm1, "RECOVER CFSTRUCT(APP1)")
    assert out["errors"] == 0, out["output"]
    text = out["output"]
    plan_at, progress_at, done_at = (text.index("HMQ5322I"), text.index("HMQ5323I"),
                                     text.index("HMQ5324I"))
    assert plan_at < progress_at < done_at                  # plan, progress, result
    assert "backup" in text[plan_at:progress_at] and "estimated" in text[plan_at:progress_at]
    assert "25 messages" in text[done_at:]
    summary = blocks(run(qm2, "DISPLAY CFSTATUS(APP1) TYPE(SUMMARY)")["output"], "HMQ8701I")
    assert (summary[0]["STATUS"], summary[0]["ENTSUSED"]) == ("ACTIVE", "25")
    store.forget_structures()
    assert sorted(m.body for m in store.browse("SQ")) == sorted(f"m{i}".encode()
                                                                for i in range(25))
    connect = blocks(run(qm1, "DISPLAY CFSTATUS(APP1) TYPE(CONNECT)")["output"], "HMQ8701I")
    assert [b["QMNAME"] for b in connect] == ["QM1", "QM2"]
    # the operator log has the plan and the outcome
    oplog = (qm1.config.errors_dir / "HMQERR01.LOG").read_text()
    assert "HMQ5322I" in oplog and "HMQ5324I" in oplog


def test_bad_input_is_refused_with_nothing_changed(two, qsg_db):
    (qm1, _qm2), store = two
    put(store, 3)
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
    del qm1.core.qsg
    out = run(qm1, "DISPLAY CFSTATUS(*)")
    assert out["errors"] == 1 and "HMQ5330E" in out["output"]
