"""MQSC for units of work: DISPLAY UOW (dspmqtrn) and RESOLVE UOW (rsvmqtrn),
run in-process; a resolution is logged and survives restart."""

from __future__ import annotations

from support.log_extents import blocks

from harbormq.admin.commands import run_mqsc
from harbormq.security import Security


def run(qm, text: str) -> dict:
    return qm._call(run_mqsc(qm.core, text, security=Security.for_config(qm.config)))


def prepared(qm, body: bytes, owner: str):
    uow = qm.begin(owner=owner)
    uow.put("Q", body)
    qm._call(qm.core.prepare(uow.uow))
    return uow


def test_in_doubt_units_of_work_are_listed_and_resolved(make_qm, open_qm):
    make_qm()
    qm = open_qm()
    qm.define_queue("Q", DEFPSIST="YES")
    keep = prepared(qm, b"to commit", "xa tm 1")
    drop = prepared(qm, b"to back out", "xa tm 2")
    active = qm.begin(owner="still active")
    active.put("Q", b"active")
    qm.close("immediate")                  # the prepared ones stay in doubt
    qm = open_qm()
    out = run(qm, "DISPLAY UOW(*) WHERE(STATE EQ PREPARED)")
    listed = blocks(out["output"], "HMQ8324I")
    assert sorted(int(b["UOWID"]) for b in listed) == sorted([keep.id, drop.id]), out["output"]
    assert {b["OWNER"] for b in listed} == {"xa tm 1", "xa tm 2"}
    r = run(qm, f"RESOLVE UOW({keep.id}) ACTION(COMMIT)\nRESOLVE UOW({drop.id}) ACTION(BACKOUT)")
    assert r["errors"] == 0 and r["output"].count("HMQ8325I") == 2, r["output"]
    assert [m.body for m in qm.browse("Q")] == [b"to commit"]
    qm.close("preemptive")                 # the outcomes are in the log
    qm = open_qm()
    assert [m.body for m in qm.browse("Q")] == [b"to commit"]
    assert "No units of work found" in run(qm, "DISPLAY UOW(*)")["output"]
    qm.close()


def test_resolve_refuses_what_is_not_in_doubt_and_bad_input(make_qm, open_qm):
    make_qm()
    qm = open_qm()
    qm.define_queue("Q", DEFPSIST="YES")
    active = qm.begin(owner="app")
    active.put("Q", b"x")
    for text, problem in [
        (f"RESOLVE UOW({active.id}) ACTION(COMMIT)", "not in doubt"),
        ("RESOLVE UOW(999) ACTION(BACKOUT)", "no unit of work 999"),
        ("RESOLVE UOW(ABC) ACTION(COMMIT)", "named by its number"),
        (f"RESOLVE UOW({active.id}) ACTION(MAYBE)", "ACTION(COMMIT) or ACTION(BACKOUT)"),
        ("DISPLAY UOW(12345)", "not in the log"),
    ]:
        r = run(qm, text)
        assert r["errors"] == 1 and problem in r["output"], (text, r["output"])
    out = run(qm, f"DISPLAY UOW({active.id}) ALL")["output"]
    [b] = blocks(out, "HMQ8324I")
    assert b["STATE"] == "ACTIVE" and b["OWNER"] == "app" and int(b["FIRSTLSN"]) > 0
    qm.close("immediate")
