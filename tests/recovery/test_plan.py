"""Plan, then apply (recovery/plan.py): what a recreate reads, computed before
anything changes, and ``harbormq recreate --dry-run`` printing it."""

from __future__ import annotations

from support.procs import hmq

from harbormq.recovery.plan import ExtentFact, recreate_plan

CHAIN = [ExtentFact(0, 0, 1000, True), ExtentFact(1, 1000, 2000, False),
         ExtentFact(2, 2000, 3000, True), ExtentFact(3, 3000, None, True)]


def test_the_plan_reads_from_the_extent_holding_the_replay_start_to_the_end():
    p = recreate_plan("Q", {"image_lsn": 2500, "replay_from": 2100}, CHAIN, 3500)
    assert p.extents == ("S0000002.LOG", "S0000003.LOG") and p.missing == ()
    assert p.runnable and "replay LSN 2100 to 3500" in p.describe()


def test_a_missing_extent_makes_the_plan_not_runnable():
    p = recreate_plan("Q", {"image_lsn": 1500, "replay_from": 1200}, CHAIN, 3500)
    assert p.extents == ("S0000001.LOG", "S0000002.LOG", "S0000003.LOG")
    assert p.missing == ("S0000001.LOG",) and not p.runnable
    assert "NOT RUNNABLE: missing S0000001.LOG" in p.describe()


def test_a_replay_older_than_the_log_is_not_runnable():
    chain = CHAIN[2:]
    p = recreate_plan("Q", {"image_lsn": 900, "replay_from": 900}, chain, 3500)
    assert p.before_log and not p.runnable


def test_dry_run_prints_the_plan_and_changes_nothing(make_qm, open_qm, home, python_env):
    make_qm(log_type="linear", log_file_pages=32)
    qm = open_qm()
    qm.define_queue("PLAN.Q", DEFPSIST="YES")
    for _ in range(200):
        qm.put("PLAN.Q", b"x" * 512)
    qm.image("queue", "PLAN.Q")
    for i in range(50):
        qm.put("PLAN.Q", f"after-{i}".encode())
    before = [m.msg_id for m in qm.browse("PLAN.Q")]
    plan, = qm.recreate("queue", "PLAN.Q", dry_run=True)
    assert plan["object"] == "PLAN.Q" and plan["runnable"] and plan["extents"]
    assert plan["replay_from"] <= plan["image_lsn"] <= plan["to_lsn"]
    assert [m.msg_id for m in qm.browse("PLAN.Q")] == before
    assert "HMQ7474I" not in qm.core.oplog.ids()          # nothing was recreated
    qm.close()
    # the command needs a running queue manager: start one for it
    hmq(python_env, "start", "QM1")
    try:
        out = hmq(python_env, "recreate", "QM1", "--type", "queue", "PLAN.Q", "--dry-run")
        text = " ".join(out.stdout.split())
        assert "HMQ7478I Plan: PLAN.Q: image at LSN" in text and "NOT RUNNABLE" not in text
    finally:
        hmq(python_env, "stop", "QM1", "--wait")
