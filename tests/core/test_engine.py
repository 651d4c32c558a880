"""Queue semantics through the Python API: order, limits, units of work,
backout thresholds, expiry, indexes, in-doubt units of work; flushes that fail or
are interrupted, and a full log."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from support.queues import bodies

from harbormq.errors import (
    GetInhibited,
    HarbormqError,
    InvalidAttribute,
    LogFull,
    MessageTooLong,
    ObjectExists,
    ObjectInUse,
    PutInhibited,
    QueueFull,
    UnitOfWorkError,
    UnknownObject,
)
from harbormq.log.records import Message
from harbormq.store.stores import QueueStore


@pytest.fixture
def qm(make_qm, open_qm):
    make_qm()
    qm = open_qm()
    qm.define_queue("Q1", DEFPSIST="YES", MAXDEPTH=100000)
    return qm


def test_priority_then_fifo(qm):
    for i in range(12):
        qm.put("Q1", f"m{i}", priority=i % 4)
    got = [qm.get("Q1") for _ in range(12)]
    assert [(m.priority, m.body.decode()) for m in got] == sorted(
        [(i % 4, f"m{i}") for i in range(12)], key=lambda pm: (-pm[0], int(pm[1][1:])))
    assert qm.get("Q1") is None


def test_defaults_come_from_the_queue(qm):
    qm.define_queue("NP", DEFPSIST="NO", DEFPRTY=7)
    m = qm.put("NP", b"x")
    assert (m.persistent, m.priority) == (False, 7)
    assert len(m.msg_id) == 24
    m2 = qm.put("NP", b"y", persistent=True, priority=1)
    assert (m2.persistent, m2.priority) == (True, 1)


def test_unknown_queue_names_reason_2085(qm):
    with pytest.raises(UnknownObject, match="2085") as e:
        qm.put("NOPE", b"x")
    assert e.value.facts["queue"] == "NOPE"


def test_maxdepth_and_maxmsgl_name_their_reason_codes(qm):
    qm.define_queue("SMALL", MAXDEPTH=2, MAXMSGL=10, DEFPSIST="YES")
    qm.put("SMALL", b"1")
    qm.put("SMALL", b"2")
    with pytest.raises(QueueFull, match="2053"):
        qm.put("SMALL", b"3")
    qm.get("SMALL")
    with pytest.raises(MessageTooLong, match="2030"):
        qm.put("SMALL", b"x" * 11)
    assert qm.queue_status("SMALL")["CURDEPTH"] == 1


def test_uncommitted_puts_count_against_maxdepth(qm):
    qm.define_queue("TWO", MAXDEPTH=2, DEFPSIST="YES")
    uow = qm.begin()
    uow.put("TWO", b"a")
    uow.put("TWO", b"b")
    with pytest.raises(QueueFull):
        qm.put("TWO", b"c")
    uow.backout()
    qm.put("TWO", b"c")


def test_held_producers_are_told_of_room_first_come_one_at_a_time(qm):
    """The queue's line of held producers (STOMP flow control): every way room is
    made tells the first of them, on the next loop turn, and never the second
    while the first is still in line. The API's own put still fails at once."""
    qm.define_queue("LINE", MAXDEPTH=2)
    q = qm.core.queues["LINE"]
    told = []
    qm._call_sync(q.producers.extend, [lambda: told.append("first"),
                                       lambda: told.append("second")])

    def after(op, *args, **kw):
        result = op(*args, **kw)
        qm._call_sync(lambda: None)      # the loop turn that tells the producer
        return result
    qm.put("LINE", b"1")
    uow = qm.begin()
    uow.put("LINE", b"2")
    with pytest.raises(QueueFull, match="2053"):
        after(qm.put, "LINE", b"3")
    assert told == []
    after(uow.backout)                                  # an uncommitted put backed out
    assert told == ["first"]
    qm.put("LINE", b"2")
    assert after(qm.get, "LINE").body == b"1"            # a get outside a unit of work
    assert told == ["first"] * 2
    qm.put("LINE", b"3")
    uow = qm.begin()
    assert after(uow.get, "LINE").body == b"2"
    assert told == ["first"] * 2       # got under a unit of work: still takes its place
    after(uow.commit)                                   # ...until the get commits
    assert told == ["first"] * 3
    qm.put("LINE", b"4")
    after(qm.alter_queue, "LINE", MAXDEPTH=3)           # a larger MAXDEPTH
    assert told == ["first"] * 4
    qm.put("LINE", b"5")
    after(qm.clear_queue, "LINE")                       # CLEAR
    assert told == ["first"] * 5
    qm._call_sync(q.producers.popleft)                  # the first leaves: the next
    qm._call_sync(q.room_check)
    qm._call_sync(lambda: None)
    assert told == ["first"] * 5 + ["second"]


def test_put_and_get_inhibited(qm):
    qm.alter_queue("Q1", PUT="DISABLED")
    with pytest.raises(PutInhibited, match="2051"):
        qm.put("Q1", b"x")
    qm.alter_queue("Q1", PUT="ENABLED", GET="DISABLED")
    qm.put("Q1", b"x")
    with pytest.raises(GetInhibited, match="2016"):
        qm.get("Q1")


def test_bad_attributes_are_named(qm):
    with pytest.raises(InvalidAttribute, match="DEFPRTY"):
        qm.define_queue("BAD", DEFPRTY=12)
    with pytest.raises(InvalidAttribute, match="NOSUCH"):
        qm.define_queue("BAD", NOSUCH=1)
    with pytest.raises(InvalidAttribute, match="name"):
        qm.define_queue("bad name!")
    with pytest.raises(ObjectExists):
        qm.define_queue("Q1")


def test_define_like_and_replace(qm):
    qm.alter_queue("Q1", DESCR="orders", MAXDEPTH=7)
    d = qm.define_queue("Q2", like="Q1")
    assert d["attrs"]["MAXDEPTH"] == 7 and d["attrs"]["DESCR"] == "orders"
    d = qm.define_queue("Q2", replace=True, MAXDEPTH=9)
    assert d["attrs"]["MAXDEPTH"] == 9


def test_unit_of_work_visibility(qm):
    uow = qm.begin()
    uow.put("Q1", b"a")
    assert qm.get("Q1") is None, "an uncommitted put is invisible"
    assert qm.queue_status("Q1")["UNCOM"] == 1
    uow.commit()
    consumer = qm.begin()
    assert consumer.get("Q1").body == b"a"
    assert qm.get("Q1") is None, "a message got under syncpoint is locked"
    consumer.backout()
    again = qm.get("Q1")
    assert again.body == b"a" and again.backout_count == 1


def test_context_manager_commits_or_backs_out(qm):
    with qm.begin() as uow:
        uow.put("Q1", b"kept")
    with pytest.raises(RuntimeError):
        with qm.begin() as uow:
            uow.put("Q1", b"dropped")
            raise RuntimeError("application failure")
    assert bodies(qm.browse("Q1")) == ["kept"]


def test_finished_unit_of_work_refuses_more_work(qm):
    uow = qm.begin()
    uow.put("Q1", b"a")
    uow.commit()
    with pytest.raises(UnitOfWorkError):
        uow.put("Q1", b"b")
    with pytest.raises(UnitOfWorkError):
        uow.commit()


def test_backout_threshold_moves_message_to_boqname(qm):
    qm.define_queue("BOQ", DEFPSIST="YES")
    qm.alter_queue("Q1", BOTHRESH=2, BOQNAME="BOQ")
    qm.put("Q1", b"poison")
    for _ in range(2):
        uow = qm.begin()
        assert uow.get("Q1").body == b"poison"
        uow.backout()
    assert qm.browse("Q1") == []
    moved = qm.get("BOQ")
    assert moved.body == b"poison" and moved.backout_count == 2
    assert moved.properties["HMQ_BACKOUT_QUEUE"] == "Q1"
    assert "HMQ7508I" in qm.core.oplog.ids()


def test_backout_threshold_without_boqname_uses_dead_letter_queue(qm):
    qm.alter_queue("Q1", BOTHRESH=1)
    qm.put("Q1", b"poison")
    uow = qm.begin()
    uow.get("Q1")
    uow.backout()
    assert bodies(qm.browse("SYSTEM.DEAD.LETTER.QUEUE")) == ["poison"]


def test_expired_messages_are_never_returned(qm):
    qm.put("Q1", b"short", expiry=0.05)
    qm.put("Q1", b"long", expiry=60)
    time.sleep(0.1)
    assert bodies(qm.browse("Q1")) == ["long"]
    assert qm.get("Q1").body == b"long"
    assert qm.queue_status("Q1")["CURDEPTH"] == 0


@pytest.mark.parametrize("indxtype", ["NONE", "MSGID", "CORRELID"])
def test_get_by_msgid_and_correlid(qm, indxtype):
    qm.define_queue("IDX", DEFPSIST="YES", INDXTYPE=indxtype)
    for i in range(50):
        qm.put("IDX", f"m{i}", msg_id=f"id-{i}", correl_id=f"c-{i % 5}")
    assert qm.get("IDX", msg_id="id-17").body == b"m17"
    assert bodies(qm.browse("IDX", correl_id="c-3"))[:3] == ["m3", "m8", "m13"]
    assert qm.get("IDX", correl_id="c-3").body == b"m3"
    assert qm.get("IDX", msg_id="id-17") is None
    qm.checkpoint()    # now from the store (and its index) rather than memory
    assert qm.get("IDX", msg_id="id-42").body == b"m42"
    assert qm.get("IDX", correl_id="c-3").body == b"m8"


def test_get_waits_for_a_message(qm):
    def later():
        time.sleep(0.2)
        qm.put("Q1", b"late")
    threading.Thread(target=later).start()
    t0 = time.monotonic()
    m = qm.get("Q1", wait=5)
    assert m.body == b"late" and time.monotonic() - t0 < 4


def test_delete_and_clear(qm):
    qm.put("Q1", b"a")
    with pytest.raises(ObjectInUse, match="PURGE"):
        qm.delete_queue("Q1")
    assert qm.clear_queue("Q1") == 1
    assert qm.browse("Q1") == []
    qm.delete_queue("Q1")
    with pytest.raises(UnknownObject):
        qm.put("Q1", b"x")
    qm.define_queue("Q1", DEFPSIST="YES")   # a new incarnation, empty
    assert qm.browse("Q1") == []


def test_in_doubt_unit_of_work_keeps_messages_locked(qm):
    qm.put("Q1", b"to-move")
    uow = qm.begin()
    uow.get("Q1")
    uow.put("Q1", b"moved")
    uow.prepare()
    assert qm.in_doubt() == [uow.id]
    assert qm.get("Q1") is None
    qm.resolve(uow.id, commit=True)
    assert bodies(qm.browse("Q1")) == ["moved"]


def test_many_messages_survive_flushes_in_order(make_qm, open_qm):
    make_qm()
    qm = open_qm()
    qm.define_queue("BIG", DEFPSIST="YES", MAXDEPTH=1_000_000)
    for i in range(3000):
        qm.put("BIG", f"{i:05d}")
        if i % 1000 == 999:
            qm.checkpoint()
    for i in range(1500):
        assert qm.get("BIG").body == f"{i:05d}".encode()
    qm.close()
    qm = open_qm()
    assert bodies(qm.browse("BIG")) == [f"{i:05d}" for i in range(1500, 3000)]


def test_put_landing_while_clear_is_forced_survives_and_restarts(qm, open_qm):
    import asyncio

    from harbormq.log.records import Message
    for i in range(5):
        qm.put("Q1", f"old{i}")
    core = qm.core

    async def race():
        clearing = asyncio.ensure_future(core.clear_queue("Q1"))
        await asyncio.sleep(0)          # the clear has logged and awaits its force
        assert not clearing.done()
        await core.put("Q1", Message(body=b"new", persistent=True))
        return await clearing
    assert qm._call(race()) == 5
    assert bodies(qm.browse("Q1")) == ["new"]
    qm.close("preemptive")
    qm = open_qm()
    assert bodies(qm.browse("Q1")) == ["new"]


# --- regressions of the durability review: failed and interrupted flushes, a full log

def test_failed_store_write_is_taken_up_by_the_next_flush(make_qm, open_qm, monkeypatch):
    make_qm()
    qm = open_qm()
    qm.define_queue("Q1", DEFPSIST="YES")
    qm.put("Q1", b"A")
    real_apply = QueueStore.apply
    calls = {"n": 0}

    def failing_once(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError("disk full (injected)")
        return real_apply(self, *args, **kwargs)
    monkeypatch.setattr(QueueStore, "apply", failing_once)
    with pytest.raises(OSError):
        qm.flush()
    qm.put("Q1", b"B")
    qm.checkpoint()                       # this flush must carry A as well
    assert bodies(qm.browse("Q1")) == ["A", "B"]
    qm.close("preemptive")
    qm = open_qm()
    assert bodies(qm.browse("Q1")) == ["A", "B"]


def test_stop_during_a_flush_loses_neither_messages_nor_definitions(make_qm, open_qm):
    make_qm()
    qm = open_qm()
    qm.define_queue("Q1", DEFPSIST="YES")
    core = qm.core

    async def stop_mid_flush():
        qm_put = core.put("Q1", Message(body=b"A", persistent=True))
        await qm_put
        await core.define_queue("NEWQ", {"DEFPSIST": "YES"})
        flushing = asyncio.ensure_future(core.flush_all())
        await asyncio.sleep(0)            # the flush has its snapshot and awaits the force
        flushing.cancel()
        await core.put("Q1", Message(body=b"B", persistent=True))
    qm._call(stop_mid_flush())
    qm.close("immediate")
    qm = open_qm()
    assert bodies(qm.browse("Q1")) == ["A", "B"]
    assert "NEWQ" in qm.queue_names()


def test_flush_while_clear_is_forced_keeps_the_later_put(make_qm, open_qm):
    make_qm()
    qm = open_qm()
    qm.define_queue("Q1", DEFPSIST="YES")
    for i in range(3):
        qm.put("Q1", f"old{i}")
    core = qm.core

    async def race():
        clearing = asyncio.ensure_future(core.clear_queue("Q1"))
        await asyncio.sleep(0)             # the clear is logged, its force pending
        putting = asyncio.ensure_future(core.put("Q1", Message(body=b"new", persistent=True)))
        await asyncio.sleep(0)             # the put is committed in memory
        flushing = asyncio.ensure_future(core.flush_all())
        await asyncio.gather(clearing, putting, flushing)
    qm._call(race())
    assert bodies(qm.browse("Q1")) == ["new"]
    qm.close("preemptive")
    qm = open_qm()
    assert bodies(qm.browse("Q1")) == ["new"]


def test_failed_store_clear_is_completed_by_the_next_flush(make_qm, open_qm, monkeypatch):
    make_qm()
    qm = open_qm()
    qm.define_queue("Q1", DEFPSIST="YES")
    for i in range(3):
        qm.put("Q1", f"old{i}")
    qm.checkpoint()
    real_clear = QueueStore.clear
    monkeypatch.setattr(QueueStore, "clear",
                        lambda self, lsn: (_ for _ in ()).throw(OSError("EIO (injected)")))
    with pytest.raises(OSError):
        qm.clear_queue("Q1")
    monkeypatch.setattr(QueueStore, "clear", real_clear)
    qm.put("Q1", b"new")
    qm.checkpoint()
    qm.close("preemptive")
    qm = open_qm()
    assert bodies(qm.browse("Q1")) == ["new"]


def test_log_full_leaves_no_end_record_and_later_puts_survive(make_qm, open_qm):
    make_qm(log_file_pages=32, log_primary=2, log_secondary=1)
    qm = open_qm()
    qm.define_queue("Q1", DEFPSIST="YES", MAXDEPTH=100000)
    log = qm.core.log
    pin = qm.begin("app1")
    for _ in range(3):                     # half the log: too big to shunt (HMQ7471W)
        pin.put("Q1", b"in-doubt" * 7500)
    pin.prepare()                          # in doubt: never backed out by the queue manager
    late = None
    with pytest.raises(LogFull):
        for _ in range(100):
            qm.put("Q1", b"y" * 20000)
            if late is None and log.available_extents() == 0:
                late = qm.begin("app2")    # starts in the newest extent, keeps it needed
                late.put("Q1", b"late-work")
    assert "HMQ7471W" in qm.core.oplog.ids()
    qm.resolve(pin.id, commit=False)
    qm.checkpoint()                        # small records: they still fit
    qm.put("Q1", b"small-acked")
    qm.close("preemptive")
    qm = open_qm()
    assert "small-acked" in bodies(qm.browse("Q1"))


def test_undo_interrupted_by_log_full_does_not_compensate_twice(make_qm, open_qm):
    make_qm()
    qm = open_qm()
    qm.define_queue("Q1", DEFPSIST="YES")
    qm.put("Q1", b"m")
    uow = qm.begin()
    uow.get("Q1")
    uow.put("Q1", b"n")
    core = qm.core
    real = core._compensate
    calls = {"n": 0}

    def full_on_second(u, op, count):
        calls["n"] += 1
        if calls["n"] == 2:
            raise LogFull("injected")
        return real(u, op, count)
    core._compensate = full_on_second
    with pytest.raises(HarbormqError):
        uow.backout()
    core._compensate = real
    uow.backout()                          # goes on where it stopped
    assert [(m.body, m.backout_count) for m in qm.browse("Q1")] == [(b"m", 1)]
    assert qm.queue_status("Q1")["UNCOM"] == 0


def test_a_store_whose_map_fills_grows_it(home, make_qm, open_qm):
    """store_map_size_mb is where a store's LMDB map starts, not a cap: a flush
    that fills it doubles it and goes on (issue: hardening, a full map)."""
    from harbormq.config import QMConfig
    make_qm()
    config = QMConfig.load("QM1", home)
    config.tuning.store_map_size_mb = 1
    config.save()
    qm = open_qm()
    qm.define_queue("BIG", DEFPSIST="YES", MAXDEPTH=10_000)
    bodies = [bytes([i % 251]) * 20_000 for i in range(300)]    # 6 MB in a 1 MB map
    for body in bodies:
        qm.put("BIG", body)
    assert qm.flush() >= 1
    assert qm.core.queues["BIG"].recovery_lsn is None, "the store is not behind the log"
    qm.close()
    qm = open_qm()
    assert [m.body for m in qm.browse("BIG", limit=1000)] == bodies
    qm.close()


def test_a_long_unit_of_work_is_named_every_few_checkpoints(home, make_qm, open_qm):
    """MQ's CSQJ160I (URCHKTH): a unit of work in the log through
    ``tuning.long_uow_checkpoints`` checkpoints is named, with its owner, each
    time that many more pass; one that ends is not."""
    from support.oplog import operator_log
    make_qm()
    qm = open_qm()
    qm.define_queue("Q", DEFPSIST="YES")
    long = qm.begin(owner="batch job 7")
    long.put("Q", b"held")
    short = qm.begin(owner="quick")
    short.put("Q", b"done")
    qm.checkpoint()
    short.commit()
    for _ in range(5):
        qm.checkpoint()
    warned = [t for m, t in operator_log(home, "QM1") if m == "HMQ7465W"]
    assert len(warned) == 2, warned                   # after checkpoints 3 and 6
    assert all(f"unit of work {long.id}" in t and "batch job 7" in t for t in warned)
    assert "through 3 checkpoints" in warned[0] and "through 6 checkpoints" in warned[1]
    qm.close("immediate")       # (a controlled stop waits for the unit of work)


def test_a_stores_known_recovery_lsn_survives_reads_on_other_threads(tmp_path):
    """The recovery LSN a store remembers (what a checkpoint records for it) is
    set by its writes only: reads on other threads while a write commits once
    left it stale (found by review), which would hide a store put back from a
    copy between the stale and the real LSN."""
    import threading

    from harbormq.store.stores import QueueStore
    store = QueueStore(tmp_path / "Q", object_id=7)
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            store.count()
            store.last_key()
    readers = [threading.Thread(target=reader) for _ in range(2)]
    for t in readers:
        t.start()
    try:
        for lsn in range(100, 5100, 100):
            store.apply({}, lsn)
            assert store.recovery_lsn == lsn
    finally:
        stop.set()
        for t in readers:
            t.join()
    assert int(store.get_meta(b"recovery_lsn")) == store.recovery_lsn == 5000
    store.close()


def test_an_exception_leaving_open_backs_out_this_threads_work_and_waits_for_others(
        make_qm, home):
    """Leaving ``with QueueManager.open(...)`` by an exception while a unit of
    work this thread began there is active used to wait forever in the
    controlled stop (only the leaving thread could end it). Its own units of
    work are backed out, whatever owner they were begun with, and the error
    reaches the caller; another thread's unit of work still at work is waited
    for and commits, as in any controlled stop."""
    from harbormq import QueueManager
    from harbormq.errors import QueueFull
    make_qm("QM1")
    with QueueManager.open("QM1", home=home) as qm:
        qm.define_queue("Q1", MAXDEPTH=3)
        qm.define_queue("Q2")
        qm.put("Q1", b"kept", persistent=True)
    done = threading.Event()
    outcome: list = []

    def fill_past_maxdepth():
        try:
            with QueueManager.open("QM1", home=home) as qm:
                other = threading.Thread(target=slow_commit, args=(qm,))
                other.start()
                started.wait(10)
                uow = qm.begin(owner="billing")
                for i in range(5):
                    uow.put("Q1", b"in flight %d" % i, persistent=True)
        except QueueFull as exc:
            outcome.append(exc)
        finally:
            done.set()

    started = threading.Event()

    def slow_commit(qm):
        uow = qm.begin()
        uow.put("Q2", b"committed by the other thread", persistent=True)
        started.set()
        time.sleep(0.5)
        uow.commit()
    threading.Thread(target=fill_past_maxdepth, daemon=True).start()
    assert done.wait(60), "leaving with a unit of work open did not return"
    assert len(outcome) == 1
    with QueueManager.open("QM1", home=home) as qm:
        assert [bytes(m.body) for m in iter(lambda: qm.get("Q1"), None)] == [b"kept"]
        assert [bytes(m.body) for m in iter(lambda: qm.get("Q2"), None)] == [
            b"committed by the other thread"]
        assert qm.restart_report.uows_backed_out == 0     # backed out before the stop
