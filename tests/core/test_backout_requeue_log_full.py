"""A message that reaches BOTHRESH is moved to its backout queue in a unit of
work of the queue manager's own. When the log is full for that move, the
message stays where it is (HMQ7509W, HMQ7510W) and the backout that triggered
the move still succeeds. The move is backed out at once; if even its BACKOUT
record is refused, it stays in flight, holding the message, until the log
takes that record or restart backs it out. Before, LogFull escaped from the
backout: the caller saw its backout fail, the move's unit of work stayed
active holding the message, and a restart's requeue would have stopped the
restart.

The log's append is made to raise LogFull for chosen records (a circular log
full at that moment, on cue), with the real queue manager."""

from __future__ import annotations

import time

import pytest

from harbormq.core.uow import REQUEUE_OWNER
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
    return [u for u in qm.core.uows.values() if u.owner == REQUEUE_OWNER]


@pytest.mark.parametrize("refused", ["get", "put", "commit"])
def test_a_backout_requeue_the_full_log_refuses_leaves_the_message_where_it_was(
        poison, refused):
    qm, full = poison
    requeue_uow = set()

    def pred(rec) -> bool:
        if rec.type == RecordType.UOW_BEGIN and b"backout-requeue" in rec.payload:
            requeue_uow.add(rec.uow_id)
        if rec.uow_id not in requeue_uow:
            return False
        return rec.type == {"get": RecordType.MSG_GET, "put": RecordType.MSG_PUT,
                            "commit": RecordType.UOW_COMMIT}[refused]
    full(pred)
    uow = qm.begin()
    assert uow.get("Q1").body == b"poison"
    uow.backout()                                    # does not raise
    assert requeue_uow, "the move to the backout queue was not tried"
    ids = qm.core.oplog.ids()
    assert "HMQ7509W" in ids and "HMQ7510W" in ids and "HMQ7508I" not in ids
    assert _requeue_uows(qm) == []
    assert qm.queue_status("BOQ")["CURDEPTH"] == 0
    assert qm.core.queues["BOQ"].uncommitted_puts == 0
    # the message is on Q1, unlocked: the next get takes it
    full(None)
    again = qm.begin()
    got = again.get("Q1")
    assert got is not None and got.body == b"poison" and got.backout_count == 1
    again.commit()
    assert qm.queue_status("Q1")["CURDEPTH"] == 0


def _refuse_the_move_and_its_end(full, app_uow_id: int) -> None:
    """The move's PUT and its BACKOUT are refused (not the application's own)."""
    full(lambda rec: (rec.type == RecordType.MSG_PUT and rec.object_name == "BOQ")
         or (rec.type == RecordType.UOW_BACKOUT and rec.uow_id != app_uow_id))


def _wait(until, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not until():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_requeue_the_log_cannot_end_holds_its_message_until_it_can(poison):
    """Its GET is in the log, and so it stays in flight, holding the message,
    until its BACKOUT can be logged: the next checkpoint (what frees log
    space) backs it out, and the message is free again. (Dropped from memory
    at once, the message could be consumed while the log still says the move
    has it: restart would later give it back.)"""
    qm, full = poison
    uow = qm.begin()
    uow.get("Q1")
    _refuse_the_move_and_its_end(full, uow.id)
    uow.backout()
    assert "HMQ7513W" in qm.core.oplog.ids()
    [held] = _requeue_uows(qm)
    assert held.state == "backing_out"
    assert qm.get("Q1") is None                      # locked by the move
    full(None)
    qm.checkpoint()             # what frees log space: it ends the held move
    assert _wait(lambda: _requeue_uows(qm) == []), "the move was never backed out"
    assert "HMQ7514I" in qm.core.oplog.ids()
    got = qm.get("Q1")
    assert got is not None and got.body == b"poison"
    assert qm.browse("BOQ") == []


@pytest.mark.parametrize("stop", ["immediate", "preemptive", "controlled"])
def test_a_requeue_still_in_flight_at_a_stop_is_backed_out_by_restart(poison, open_qm, stop):
    """The queue manager stops (a controlled stop does not wait for the move)
    while the log still refuses the move's BACKOUT: restart backs the move out.
    The message is then on Q1 or, moved by restart's own requeue, on BOQ:
    once, not twice and not lost."""
    qm, full = poison
    uow = qm.begin()
    uow.get("Q1")
    _refuse_the_move_and_its_end(full, uow.id)
    uow.backout()
    assert [u.state for u in _requeue_uows(qm)] == ["backing_out"]
    qm.close(stop)
    full(None)
    qm = open_qm()
    assert [m.body for m in qm.browse("Q1") + qm.browse("BOQ")] == [b"poison"]


def test_a_move_held_after_another_refusal_is_not_tried_elsewhere(poison):
    """BOQ refuses the move (full), then the log refuses the move's BACKOUT: the
    move holds the message, so the dead-letter queue is not tried (it would
    find the message locked), and HMQ7510W still says where the message is."""
    qm, full = poison
    qm.alter_queue("BOQ", MAXDEPTH=1)
    qm.put("BOQ", b"filler")
    uow = qm.begin()
    uow.get("Q1")
    full(lambda rec: rec.type == RecordType.UOW_BACKOUT and rec.uow_id != uow.id)
    uow.backout()
    ids = qm.core.oplog.ids()
    assert "HMQ7513W" in ids and "HMQ7510W" in ids and "HMQ7508I" not in ids
    assert [u.state for u in _requeue_uows(qm)] == ["backing_out"]
    assert qm.browse("SYSTEM.DEAD.LETTER.QUEUE") == []
    full(None)
    qm.checkpoint()
    assert _wait(lambda: _requeue_uows(qm) == [])
    assert [m.body for m in qm.browse("Q1")] == [b"poison"]
