"""Regressions for the durability review: each test is a sequence that once lost
an acknowledged message or left a queue manager unable to start."""

from __future__ import annotations

import asyncio

import pytest

from harbormq.errors import HarbormqError, LogFull
from harbormq.log.records import Message
from harbormq.store.stores import QueueStore


def bodies(msgs):
    return [m.body.decode() for m in msgs]


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


def test_log_full_leaves_no_end_record_and_later_puts_survive(make_qm, open_qm):
    make_qm(log_file_pages=32, log_primary=2, log_secondary=1)
    qm = open_qm()
    qm.define_queue("Q1", DEFPSIST="YES", MAXDEPTH=100000)
    log = qm.core.log
    pin = qm.begin("app1")
    pin.put("Q1", b"in-doubt")
    pin.prepare()                          # in doubt: never backed out by the queue manager
    late = None
    with pytest.raises(LogFull):
        for _ in range(100):
            qm.put("Q1", b"y" * 20000)
            if late is None and log.available_extents() == 0:
                late = qm.begin("app2")    # starts in the newest extent, keeps it needed
                late.put("Q1", b"late-work")
    qm.resolve(pin.id, commit=False)
    qm.checkpoint()                        # small records: they still fit
    qm.put("Q1", b"small-acked")
    qm.close("preemptive")
    qm = open_qm()
    assert "small-acked" in bodies(qm.browse("Q1"))


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


def test_delete_and_define_of_a_name_then_crash_restarts(make_qm, open_qm, home):
    make_qm()
    qm = open_qm()
    qm.define_queue("Q1", DEFPSIST="YES")
    qm.put("Q1", b"first life")
    qm.checkpoint()                      # the catalog on disk knows the first Q1
    qm.delete_queue("Q1", purge=True)
    qm.define_queue("Q1", DEFPSIST="YES")
    qm.put("Q1", b"second life")
    qm.close("preemptive")               # the catalog still says: the first Q1
    for _ in range(2):
        qm = open_qm()
        assert bodies(qm.browse("Q1")) == ["second life"]
        assert "HMQ7472E" not in qm.core.oplog.ids()
        qm.close()


def test_forced_delete_whose_store_is_gone_is_completed_at_restart(make_qm, open_qm):
    make_qm()
    qm = open_qm()
    qm.define_queue("Q1", DEFPSIST="YES")
    qm.checkpoint()
    qm.delete_queue("Q1")                # forced, store directory removed
    qm.close("preemptive")               # before the catalog flush
    qm = open_qm()
    assert "Q1" not in qm.queue_names()
    qm.define_queue("Q1", DEFPSIST="YES")
    qm.put("Q1", b"new")
    qm.close()
    qm = open_qm()
    assert bodies(qm.browse("Q1")) == ["new"]


def test_restart_forces_the_log_before_redo_writes_any_store(make_qm, open_qm, monkeypatch):
    from harbormq.log.manager import RecoveryLog
    make_qm()
    qm = open_qm()
    qm.define_queue("Q1", DEFPSIST="YES")
    qm.put("Q1", b"m")
    qm.close("preemptive")              # the put's effect is not in the store yet
    events = []
    real_durable, real_apply = RecoveryLog.make_durable, QueueStore.apply
    monkeypatch.setattr(RecoveryLog, "make_durable",
                        lambda self: (events.append("log forced"), real_durable(self))[1])
    monkeypatch.setattr(QueueStore, "apply",
                        lambda self, *a, **k: (events.append("store write"),
                                               real_apply(self, *a, **k))[1])
    qm = open_qm()
    assert bodies(qm.browse("Q1")) == ["m"]
    assert "store write" in events
    assert events.index("log forced") < events.index("store write")


def test_hole_in_an_unforced_write_followed_by_valid_records_is_a_torn_tail(make_qm, open_qm,
                                                                            home):
    """Power loss during one write: the device kept later pages, lost an earlier
    one. Nothing from the hole on was ever forced, so it is a torn tail."""
    from harbormq.log.control import ControlFile
    from harbormq.log.reader import ExtentReader
    from harbormq.log.records import RecordType
    make_qm(log_type="linear")
    qm = open_qm()
    qm.define_queue("Q1", DEFPSIST="YES")
    qm.put("Q1", b"acked")
    uow = qm.begin()
    for i in range(3):
        uow.put("Q1", f"unforced{i}")     # written at the stop, forced by nobody
    qm.close("preemptive")
    log_dir = home / "log" / "QM1"
    path = log_dir / f"S{ControlFile(log_dir).load().active.number:07d}.LOG"
    recs = list(ExtentReader(path, newest=True).records())
    begin = next(r for r in recs if r.type == RecordType.UOW_BEGIN)
    later = [r for r in recs if r.lsn > begin.lsn]
    assert later and all(r.synced_lsn <= begin.lsn for r in later)
    offset = 4096 + begin.lsn - recs[0].lsn
    with open(path, "r+b") as f:           # the hole: the UOW's first record is lost
        f.seek(offset)
        f.write(bytes(begin.length))
    qm = open_qm()
    assert bodies(qm.browse("Q1")) == ["acked"]
    assert qm.restart_report.torn_tail is not None


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


def test_nonpersistent_messages_of_a_redefined_queue_are_discarded(make_qm, open_qm,
                                                                  monkeypatch):
    from harbormq.store.stores import CatalogStore
    make_qm()
    qm = open_qm()
    qm.define_queue("Q1", DEFPSIST="YES")
    qm.checkpoint()                       # the catalog on disk: the first Q1
    qm.delete_queue("Q1", purge=True)
    qm.define_queue("Q1", DEFPSIST="YES")
    qm.put("Q1", b"np", persistent=False)
    qm.put("Q1", b"p-acked", persistent=True)
    monkeypatch.setattr(CatalogStore, "apply",
                        lambda self, *a, **k: (_ for _ in ()).throw(OSError("injected")))
    with pytest.raises(OSError):
        qm.flush()                        # queue stores written, the catalog not
    qm.close("preemptive")
    monkeypatch.undo()
    qm = open_qm()
    assert bodies(qm.browse("Q1")) == ["p-acked"]
    assert qm.restart_report.nonpersistent_discarded == 1
    assert "HMQ7472E" not in qm.core.oplog.ids()
