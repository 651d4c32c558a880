"""A checkpoint's table grows with the queues (stores behind the log, media
points): on the smallest extents, 10,000 queues must neither make checkpoints
fail nor stop the queue manager from starting again (it did from about 1,700:
one record bigger than an extent). The table is cut into CHECKPOINT_PART
records (harbormq/log/checkpoint.py); the queues' LMDB environments are kept
open only up to a limit (harbormq/store/stores.py), since 10,000 of them would
need 30,000 file descriptors."""

from __future__ import annotations

import asyncio
import os

import pytest

from harbormq import QueueManager
from harbormq.log.checkpoint import read_checkpoint, split_table, unpack_store_lsns
from harbormq.log.records import RecordType
from harbormq.store import stores

QUEUES = 10_000
SMALLEST_EXTENT = 32   # pages (harbormq create --log-file-pages: 32..65535)


def define_many(qm: QueueManager, names: list[str]) -> None:
    async def define_all():
        for i in range(0, len(names), 20):   # log forces shared by a batch
            await asyncio.gather(*(qm.core.define_queue(n, {"DEFPSIST": "YES"})
                                   for n in names[i:i + 20]))
    qm._call(define_all())


def checkpoint_parts(qm: QueueManager) -> list[int]:
    st = qm.core.log.state
    end = next(qm.core.log.read_from(st.checkpoint_lsn))
    assert end.type == RecordType.CHECKPOINT_END
    table = read_checkpoint(lambda lsn: next(qm.core.log.read_from(lsn), None),
                            st.checkpoint_lsn)
    return table, [r for r in qm.core.log.read_from(table["begin_lsn"])
                   if r.lsn < st.checkpoint_lsn and r.type == RecordType.CHECKPOINT_PART]


@pytest.mark.parametrize("log_type", ["linear", "circular"])
def test_ten_thousand_queues_on_the_smallest_extents(home, make_qm, monkeypatch, log_type):
    # fewer environments open than queues, so the limit is really exercised
    monkeypatch.setattr(stores, "OPEN_ENVIRONMENTS", stores.OpenEnvironments(limit=400))
    make_qm("BIG", log_type=log_type, log_file_pages=SMALLEST_EXTENT)
    names = [f"APP.ORDERS.{i:05d}" for i in range(QUEUES)]
    qm = QueueManager.open("BIG", home=home)
    try:
        define_many(qm, names)
        # every 100th queue gets a message; a put moves that queue's store
        # behind the log until the next flush
        for n in names[::100]:
            qm.put(n, f"kept on {n}".encode())
        qm.checkpoint()
        table, parts = checkpoint_parts(qm)
        if log_type == "linear":     # the media point of every object
            assert len(table["media"]) >= QUEUES, len(table["media"])
            assert parts, "a table of 10,000 media points must be cut into parts"
        recorded = unpack_store_lsns(table["store_lsns"])   # every store's LSN, packed
        assert all(recorded.get(qm.core.queues[n].object_id) ==
                   qm.core.queues[n].store.recovery_lsn for n in names)
        largest = max((len(r.payload) for r in parts), default=0)
        assert largest <= qm.core.log.extent_payload // 4
        assert len(stores.OPEN_ENVIRONMENTS.lru) <= 400
        fds = len(os.listdir("/proc/self/fd"))
        assert fds < 3 * 400 + 200, fds
    finally:
        qm.close()

    # and it starts again, with every queue and every message
    qm = QueueManager.open("BIG", home=home)
    try:
        assert len([n for n in qm.queue_names() if n.startswith("APP.ORDERS.")]) == QUEUES
        for n in names[::100]:
            assert qm.get(n).body == f"kept on {n}".encode()
            assert qm.get(n) is None
        assert len(stores.OPEN_ENVIRONMENTS.lru) <= 400
        qm.checkpoint()
    finally:
        qm.close()


def test_split_table_keeps_every_entry_and_bounds_each_part():
    table = {"begin_lsn": 1, "restart_lsn": 1, "reason": "test",
             "uows": [{"id": i, "first_lsn": i} for i in range(3000)],
             "stores": {f"Q{i}": {"object_id": i, "next_seq": i} for i in range(3000)},
             "media": {f"Q{i}": {"object_id": i, "image_lsn": i} for i in range(3000)}}
    head, parts = split_table(table, 4096)
    assert "uows" not in head and head["reason"] == "test"
    from harbormq.log.records import encode_json
    assert all(len(encode_json(p)) <= 4096 for p in parts)
    merged = {"uows": [], "stores": {}, "media": {}}
    for p in parts:
        merged["uows"] += p.get("uows", [])
        merged["stores"].update(p.get("stores", {}))
        merged["media"].update(p.get("media", {}))
    assert merged == {k: table[k] for k in ("uows", "stores", "media")}
    small = {"begin_lsn": 1, "uows": [], "stores": {}}
    assert split_table(small, 4096) == (small, [])
