"""A message that reaches BOTHRESH is moved to its backout queue in a unit of
work of the queue manager's own. When the log is full for that move, the
message stays where it is (HMQ7509W, HMQ7510W), the backout that triggered
the move still succeeds, and nothing is left locked or in flight. Before,
LogFull escaped from the backout: the caller saw its backout fail, the
move's unit of work stayed active holding the message, and a restart's
requeue would have stopped the restart.

The log's append is made to raise LogFull for chosen records (a circular log
full at that moment, on cue), with the real queue manager."""

from __future__ import annotations

import pytest

from harbormq.errors import LogFull
from harbormq.log.records import RecordType


@pytest.fixture
def poison(make_qm, open_qm):
    """(queue manager, full(pred)): Q1 with BOTHRESH(1) and BOQNAME(BOQ), one
    persistent message on it; ``full`` makes every record for which ``pred``
    is true fail with LogFull."""
    make_qm()
    qm = open_qm()
    qm.define_queue("BOQ", DEFPSIST="YES")
    qm.define_queue("Q1", DEFPSIST="YES", BOTHRESH=1, BOQNAME="BOQ")
    qm.put("Q1", b"poison")
    failing = {"pred": None}
    append = qm.core.log.append

    def append_or_full(rec):
        if failing["pred"] is not None and failing["pred"](rec):
            raise LogFull("the circular log is full (injected)")
        return append(rec)
    qm.core.log.append = append_or_full
    yield qm, lambda pred: failing.update(pred=pred)
    failing["pred"] = None


def _requeue_uows(qm) -> list:
    return [u for u in qm.core.uows.values() if u.owner == "backout-requeue"]


@pytest.mark.parametrize("refused", ["put", "put and backout", "commit"])
def test_a_backout_requeue_the_full_log_refuses_leaves_the_message_where_it_was(
        poison, refused):
    qm, full = poison
    requeue_uow = set()

    def pred(rec) -> bool:
        if rec.type == RecordType.UOW_BEGIN and b"backout-requeue" in rec.payload:
            requeue_uow.add(rec.uow_id)
        if rec.uow_id not in requeue_uow:
            return False
        if refused == "commit":
            return rec.type == RecordType.UOW_COMMIT
        return rec.type == RecordType.MSG_PUT or (
            refused == "put and backout" and rec.type == RecordType.UOW_BACKOUT)
    full(pred)
    uow = qm.begin()
    assert uow.get("Q1").body == b"poison"
    uow.backout()                                    # does not raise
    assert requeue_uow, "the move to the backout queue was not tried"
    ids = qm.core.oplog.ids()
    assert "HMQ7509W" in ids and "HMQ7510W" in ids and "HMQ7508I" not in ids
    assert _requeue_uows(qm) == []
    assert qm.queue_status("BOQ")["CURDEPTH"] == 0
    # the message is on Q1, unlocked: the next get takes it
    full(None)
    again = qm.begin()
    got = again.get("Q1")
    assert got is not None and got.body == b"poison" and got.backout_count == 1
    again.commit()
    assert qm.queue_status("Q1")["CURDEPTH"] == 0


def test_after_a_refused_requeue_a_restart_finds_the_message_once(poison, open_qm):
    """The move's records written before the log filled (its BEGIN and GET,
    with no BACKOUT when that was refused too) end as an unfinished unit of
    work: restart backs it out. The message is then on Q1 or, moved by
    restart's own requeue, on BOQ: once, not twice and not lost."""
    qm, full = poison
    uow = qm.begin()
    uow.get("Q1")
    full(lambda rec: (rec.type == RecordType.MSG_PUT and rec.object_name == "BOQ")
         or (rec.type == RecordType.UOW_BACKOUT and rec.uow_id != uow.id))
    uow.backout()
    assert "HMQ7509W" in qm.core.oplog.ids()
    full(None)
    qm.close("immediate")
    qm = open_qm()
    assert [m.body for m in qm.browse("Q1") + qm.browse("BOQ")] == [b"poison"]
