"""A unit of work whose COMMIT also decides other units of work ("joined"): how a
STOMP transaction acknowledges deliveries that were each got under a unit of
work of their own. The transaction's COMMIT record is the decision; restart
honours it even when the joined units' own COMMIT records never reached the
log, and writes those records."""

import pytest

from harbormq.errors import LogFull, UnitOfWorkError
from harbormq.log.records import RecordType, decode_json, encode_json


def _records(qm, rtype):
    return [r for r in qm.core.log.read_from(qm.core.log.chain()[0].first_lsn)
            if r.type == rtype]


def _deliver(qm, queue):
    """A delivery on a client-acknowledged subscription: a get under its own UOW."""
    def run():
        uow = qm.core.begin(owner="STOMP test")
        msg, _ = qm.core.get_nowait(queue, uow)
        return uow, msg
    return qm._call_sync(run)


def test_commit_decides_joined_units_atomically(make_qm, open_qm):
    make_qm()
    qm = open_qm()
    qm.define_queue("IN", DEFPSIST="YES")
    qm.define_queue("OUT", DEFPSIST="YES")
    for i in range(3):
        qm.put("IN", f"m{i}")
    d1, m1 = _deliver(qm, "IN")
    d2, m2 = _deliver(qm, "IN")
    txn = qm.begin(owner="STOMP test tx")
    txn.put("OUT", b"reply")
    qm._call(qm.core.commit(txn.uow, joined=[d1, d2]))
    assert [m.body for m in qm.browse("IN")] == [b"m2"]
    assert [m.body for m in qm.browse("OUT")] == [b"reply"]
    assert d1.state == d2.state == "committed"
    commits = _records(qm, RecordType.UOW_COMMIT)
    decision = next(r for r in commits if r.uow_id == txn.id)
    assert decode_json(decision.payload) == {"joined": [d1.id, d2.id]}
    own = [r for r in commits if r.uow_id in (d1.id, d2.id)]
    assert len(own) == 2 and all(r.lsn > decision.lsn for r in own)
    qm.close("preemptive")
    qm = open_qm()
    assert [m.body for m in qm.browse("IN")] == [b"m2"]
    assert [m.body for m in qm.browse("OUT")] == [b"reply"]


def test_restart_commits_joined_units_whose_own_commit_is_missing(make_qm, open_qm):
    make_qm()
    qm = open_qm()
    qm.define_queue("IN", DEFPSIST="YES")
    qm.define_queue("OUT", DEFPSIST="YES")
    qm.put("IN", b"acked")
    qm.put("IN", b"stays")
    delivery, _ = _deliver(qm, "IN")
    txn = qm.begin(owner="STOMP test tx")
    txn.put("OUT", b"reply")

    def crash_after_decision():
        # what commit_nowait writes first; the crash comes before the joined
        # unit's own COMMIT record
        core = qm.core
        core.append_record(RecordType.UOW_COMMIT, uow_id=txn.id, prev_lsn=txn.uow.last_lsn,
                           payload=encode_json({"joined": [delivery.id]}))
        return core.log.force()
    qm._call(_on_loop(crash_after_decision))
    qm.close("preemptive")

    qm = open_qm()
    assert [m.body for m in qm.browse("IN")] == [b"stays"], "the joined get was not committed"
    assert [m.body for m in qm.browse("OUT")] == [b"reply"]
    assert qm.restart_report.uows_backed_out == 0
    own = [r for r in _records(qm, RecordType.UOW_COMMIT) if r.uow_id == delivery.id]
    assert len(own) == 1, "restart must write the joined unit's own COMMIT record"
    qm.close("preemptive")
    qm = open_qm()      # a second restart agrees and writes nothing more for it
    assert [m.body for m in qm.browse("IN")] == [b"stays"]
    assert len([r for r in _records(qm, RecordType.UOW_COMMIT)
                if r.uow_id == delivery.id]) == 1


def test_without_the_decision_record_joined_units_are_backed_out(make_qm, open_qm):
    make_qm()
    qm = open_qm()
    qm.define_queue("IN", DEFPSIST="YES", BOTHRESH=0)
    qm.put("IN", b"m")
    delivery, _ = _deliver(qm, "IN")
    txn = qm.begin()
    txn.put("IN", b"never")
    qm._call(_on_loop(qm.core.log.force))
    qm.close("preemptive")
    qm = open_qm()
    msgs = qm.browse("IN")
    assert [m.body for m in msgs] == [b"m"]
    assert msgs[0].backout_count == 1, "the delivery's get was backed out at restart"
    assert delivery.id not in [u.id for u in qm.core.uows.values()]


def test_commit_is_refused_when_a_joined_unit_was_backed_out(make_qm, open_qm):
    make_qm()
    qm = open_qm()
    qm.define_queue("IN", DEFPSIST="YES")
    qm.put("IN", b"m")
    delivery, _ = _deliver(qm, "IN")
    qm._call(qm.core.backout(delivery, reason="released log space"))
    txn = qm.begin()
    txn.put("IN", b"reply")
    with pytest.raises(UnitOfWorkError, match=str(delivery.id)):
        qm._call(qm.core.commit(txn.uow, joined=[delivery]))
    assert txn.state == "active", "nothing may commit when the decision is refused"
    txn.backout()
    assert [m.body for m in qm.browse("IN")] == [b"m"]


async def _on_loop(fn):
    """Call ``fn`` on the queue manager's loop and await the future it returns."""
    return await fn()


def test_a_full_log_after_the_decision_still_commits_every_joined_unit(make_qm, open_qm):
    """The transaction's COMMIT record is the decision: once it is in the log, a
    LogFull on a joined unit's own COMMIT record must not leave that unit
    active (backed out later, its message delivered again) while restart would
    commit it."""
    make_qm()
    qm = open_qm()
    qm.define_queue("IN", DEFPSIST="YES")
    for i in range(3):
        qm.put("IN", f"m{i}")
    d1, _ = _deliver(qm, "IN")
    d2, _ = _deliver(qm, "IN")
    txn = qm.begin(owner="STOMP test tx")
    log = qm.core.log
    append = log.append

    def full_at_d2_commit(rec):
        if rec.type == RecordType.UOW_COMMIT and rec.uow_id == d2.id:
            raise LogFull("the circular log is full (test)")
        return append(rec)
    log.append = full_at_d2_commit
    try:
        qm._call(qm.core.commit(txn.uow, joined=[d1, d2]))
    finally:
        log.append = append
    assert d1.state == d2.state == "committed"
    assert d2.id not in qm.core.uows
    assert [m.body for m in qm.browse("IN")] == [b"m2"]
    qm.close("preemptive")
    qm = open_qm()
    assert [m.body for m in qm.browse("IN")] == [b"m2"]
    qm.close("preemptive")
