"""Forces asked for in one turn of the event loop share one request to the log
writer, but not one future: a caller whose task is cancelled while it waits
must not cancel the force every other caller of that turn waits on."""

from __future__ import annotations

import asyncio

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
