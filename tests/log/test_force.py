"""Forces asked for in one turn of the event loop share one request to the log
writer, but not one future: a caller whose task is cancelled while it waits
must not cancel the force every other caller of that turn waits on."""

from __future__ import annotations

import asyncio

import pytest

from harbormq.errors import LogError
from harbormq.log.records import RecordType


def test_a_cancelled_waiter_cancels_only_its_own_force(make_qm, open_qm):
    make_qm()
    qm = open_qm()

    async def one_turn_three_forces():
        core = qm.core
        lsn = core.append_record(RecordType.QM_START)      # something not yet on disk
        first, second, third = core.log.force(), core.log.force(), core.log.force()

        async def gives_up(fut):
            await fut

        quitter = asyncio.ensure_future(gives_up(first))
        await asyncio.sleep(0)
        quitter.cancel()            # as a connection's task is cancelled when it ends
        synced = await asyncio.wait_for(asyncio.gather(second, third), 10)
        return lsn, first.cancelled(), synced, core.log.synced_lsn
    lsn, first_cancelled, synced, synced_lsn = qm._call(one_turn_three_forces())
    assert first_cancelled
    assert synced == [synced_lsn, synced_lsn] and synced_lsn > lsn


def test_a_record_too_big_for_any_extent_is_refused_whole_wherever_the_log_stands(make_qm,
                                                                                  open_qm):
    """The size check runs only when a record does not fit the active extent
    (the append's hot path skips it otherwise); it must still refuse such a
    record before a switch, in the active extent as the queue manager's start
    left it and in a three-quarters-full one. (The records are QM_START with
    filler payloads: nothing reads them, this queue manager is not restarted.)"""
    make_qm()             # 64-page extents
    qm = open_qm()
    log = qm.core.log

    async def append(payload: bytes):
        return qm.core.append_record(RecordType.QM_START, payload=payload)

    too_big = b"x" * (log.extent_payload + 1)
    for fill in (0, log.extent_payload - 200):
        if fill:                                   # fill the extent to three quarters
            while log._active_limit - log.end_lsn > fill // 4:
                qm._call(append(b"y" * 1000))
        before = (log.end_lsn, log.state.active.number, log.records_since_checkpoint)
        with pytest.raises(LogError, match="cannot fit in an extent") as err:
            qm._call(append(too_big))
        assert err.value.facts.get("reason") == 2030
        assert (log.end_lsn, log.state.active.number, log.records_since_checkpoint) == before
    # a record that fits an extent is still taken (after a switch)
    end = log.end_lsn
    assert qm._call(append(b"z" * (log.extent_payload - 200))) >= end
    assert log.end_lsn > end


def test_one_turn_reaches_the_writer_in_one_hand_off(make_qm, open_qm, monkeypatch):
    """The records appended and the forces asked for in one turn of the loop
    reach the writer thread together: one hand-off carrying the turn's bytes
    and its furthest force, and every force of the turn completes after the
    fsync that covers the last record."""
    make_qm()
    qm = open_qm()
    log = qm.core.log
    writer = log._writer
    hand_offs = []
    real = writer.hand_over

    def counted(force_to=0):
        hand_offs.append((len(writer._staged), force_to))
        real(force_to)
    monkeypatch.setattr(writer, "hand_over", counted)

    async def one_turn():
        lsns = []
        forces = []
        for i in range(10):
            lsns.append(qm.core.append_record(RecordType.QM_START, payload=b"p%d" % i))
            forces.append(log.force())
        end = log.end_lsn
        synced = await asyncio.wait_for(asyncio.gather(*forces), 10)
        return lsns, end, synced

    lsns, end, synced = qm._call(one_turn())
    assert hand_offs == [(10, end)]
    assert all(s >= end for s in synced) and log.synced_lsn >= end > lsns[-1]


def test_the_doorbell_wakes_its_thread_however_the_ring_falls():
    """A ring while the thread sleeps wakes it; a ring between its releasing the
    lock and its read is kept (the eventfd counts it), so no wake-up is lost."""
    import threading
    import time

    from harbormq.log.writer import Doorbell

    bell, lock = Doorbell(), threading.Lock()
    woken = []
    work = []

    def sleeper():
        with lock:
            while len(woken) < 50:
                while not work:
                    bell.wait(lock)
                woken.append(work.pop())

    thread = threading.Thread(target=sleeper, daemon=True)
    thread.start()
    try:
        for i in range(50):
            with lock:
                work.append(i)
                bell.ring()
            if i % 2:                # every other ring finds the thread asleep
                deadline = time.monotonic() + 10
                while len(woken) <= i and time.monotonic() < deadline:
                    time.sleep(0.001)
        thread.join(10)
        assert not thread.is_alive(), f"the thread missed a ring: woken {len(woken)} of 50"
        assert sorted(woken) == list(range(50))
    finally:
        bell.close()
