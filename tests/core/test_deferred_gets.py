"""Deferred gets: a STOMP delivery's get under a unit of work of its own is
logged at its commit on a queue with HARDENBO(NO), the default; the engine
seen directly (``get_nowait(defer=True)``), its log read back record by record."""

from __future__ import annotations

import pytest

from harbormq.log.reader import ExtentReader
from harbormq.log.records import Message, RecordFlag, RecordType


@pytest.fixture
def qm(make_qm, open_qm):
    make_qm()
    qm = open_qm()
    qm.define_queue("Q1", DEFPSIST="YES")
    qm.define_queue("HB", DEFPSIST="YES", HARDENBO="YES")
    return qm


def records_after(qm, lsn: int) -> list:
    """The records from ``lsn`` on, all in the active extent (a short test)."""
    log = qm.core.log

    async def force():
        await log.force()
    qm._call(force())
    active = log.state.active
    assert active.first_lsn <= lsn, "the records looked at are all in one extent"
    records = ExtentReader(log.extent_path(active.number), newest=True).records()
    return [r for r in records if r.lsn >= lsn]


def deliver(qm, queue: str):
    """What a client-ack STOMP delivery does: a unit of work of its own, a deferred get."""
    core = qm.core

    def run():
        uow = core.begin(owner="STOMP test")
        msg, _ = core.get_nowait(queue, uow, defer=True)
        return uow, msg
    return qm._call_sync(run)


def kinds(records) -> list[str]:
    return [r.type.name for r in records]


def test_a_delivery_acknowledged_alone_is_one_record(qm, open_qm):
    qm.put("Q1", b"m")
    mark = qm.core.log.end_lsn
    uow, msg = deliver(qm, "Q1")
    assert records_after(qm, mark) == [], "nothing is logged at the delivery"
    assert qm.get("Q1") is None, "the delivered message is locked"
    assert uow.first_lsn == 0, "it holds no log"
    qm._call(qm.core.commit(uow))
    [rec] = records_after(qm, mark)
    assert rec.type == RecordType.MSG_GET and rec.flags & RecordFlag.AUTO_COMMIT
    assert rec.object_name == "Q1" and rec.uow_id == 0
    qm.close("immediate")
    assert open_qm().browse("Q1") == []


def test_a_deferred_delivery_backed_out_writes_nothing_and_counts_in_memory(qm, open_qm):
    qm.put("Q1", b"m")
    mark = qm.core.log.end_lsn
    uow, _ = deliver(qm, "Q1")
    qm._call(qm.core.backout(uow))
    assert records_after(qm, mark) == []
    assert [(m.body, m.backout_count) for m in qm.browse("Q1")] == [(b"m", 1)]
    assert qm.queue_status("Q1")["UNCOM"] == 0
    qm.close()              # controlled: the count reaches the store at the flush
    assert [m.backout_count for m in open_qm().browse("Q1")] == [1]


def test_acks_in_a_transaction_become_its_own_records(qm, open_qm):
    qm.put("Q1", b"a")
    qm.put("Q1", b"b")
    mark = qm.core.log.end_lsn
    (d1, _), (d2, _) = deliver(qm, "Q1"), deliver(qm, "Q1")
    core = qm.core
    tx = qm._call_sync(core.begin, "STOMP test tx")
    qm._call_sync(core.put_nowait, "Q1", Message(body=b"c", persistent=True), tx)
    qm._call(core.commit(tx, joined=[d1, d2]))
    recs = records_after(qm, mark)
    assert kinds(recs) == ["UOW_BEGIN", "MSG_PUT", "MSG_GET", "MSG_GET", "UOW_COMMIT"]
    assert {r.uow_id for r in recs} == {tx.id}, "the deliveries log nothing of their own"
    assert not recs[-1].payload, "no joined unit to name: all is in this unit"
    assert (d1.state, d2.state) == ("committed", "committed")
    assert not qm.core.queues["Q1"].locked
    qm.close("immediate")
    assert [m.body for m in open_qm().browse("Q1")] == [b"c"]


def test_a_joined_transaction_backed_out_gives_the_messages_back_counted(qm):
    qm.put("Q1", b"a")
    d, _ = deliver(qm, "Q1")
    core = qm.core
    tx = qm._call_sync(core.begin, "STOMP test tx")
    qm._call_sync(core._log_deferred, d, tx)     # as a COMMIT does before its record
    assert d.ops == [] and len(tx.ops) == 1
    qm._call(core.backout(tx))                   # (as if the COMMIT record failed)
    assert [(m.body, m.backout_count) for m in qm.browse("Q1")] == [(b"a", 1)]
    assert qm.get("Q1").body == b"a"


def test_hardenbo_logs_the_delivery_when_it_is_made(qm, open_qm):
    qm.put("HB", b"h")
    mark = qm.core.log.end_lsn
    uow, _ = deliver(qm, "HB")
    assert kinds(records_after(qm, mark)) == ["UOW_BEGIN", "MSG_GET"]
    assert uow.first_lsn, "it holds the log from its get"
    qm.close("immediate")   # a crash with the delivery in flight: restart backs it out
    assert [(m.body, m.backout_count) for m in open_qm().browse("HB")] == [(b"h", 1)]


def test_a_prepared_delivery_is_logged_before_its_prepare(qm, open_qm):
    qm.put("Q1", b"p")
    mark = qm.core.log.end_lsn
    uow, _ = deliver(qm, "Q1")
    qm._call(qm.core.prepare(uow))
    recs = records_after(qm, mark)
    assert kinds(recs) == ["UOW_BEGIN", "MSG_GET", "UOW_PREPARE"]
    qm.close("immediate")
    qm = open_qm()
    assert qm.in_doubt() == [uow.id] and qm.get("Q1") is None
    qm.resolve(uow.id, commit=True)
    assert qm.browse("Q1") == []


def test_logged_at_commit_a_get_takes_its_place_after_the_units_earlier_records(qm):
    """A backout undoes the ops last first, each compensation naming the next
    record to undo: the ops must stay in LSN order once the get is logged."""
    qm.put("Q1", b"old")
    uow, _ = deliver(qm, "Q1")
    core = qm.core
    qm._call_sync(core.put_nowait, "Q1", Message(body=b"new", persistent=True), uow)
    qm._call_sync(core._log_deferred, uow, uow)   # as a COMMIT does before its record
    lsns = [op.lsn for op in uow.ops]
    assert [op.kind for op in uow.ops] == ["put", "get"] and lsns == sorted(lsns)
    qm._call(core.backout(uow))
    assert [(m.body, m.backout_count) for m in qm.browse("Q1")] == [(b"old", 1)]
