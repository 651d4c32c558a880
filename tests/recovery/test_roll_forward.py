"""A store put back from an older copy is brought forward by the log, never
silently stale (MQ's restart reads page 0 of every page set and starts redo
at the oldest of their RBAs: redbook §2.1.3).

Every checkpoint records each store's recovery LSN as written; a store found
older at restart was put back from a copy, and redo goes back for it to the
restart point of a checkpoint taken before its LSN. When the log on disk no
longer reaches back that far, the store is damaged (HMQ6767E): recreated from
its media image on a linear log, reported on a circular one."""

from __future__ import annotations

import shutil

import pytest
from support.oplog import operator_log

BOTH_LOGS = pytest.mark.parametrize("log_type", ["circular", "linear"])


def messages(qm, queue):
    return [m.body.decode() for m in qm.browse(queue, limit=100_000)]


def said(home, msgid, name="QM1"):
    return [t for m, t in operator_log(home, name) if m == msgid]


@BOTH_LOGS
def test_a_store_put_back_from_an_older_copy_is_brought_forward(make_qm, open_qm, home,
                                                                 tmp_path, log_type):
    """The issue's own scenario: 10 put, the store copied, 10 more put and 3
    got, three checkpoints, the old copy put back, restart. The queue once held
    the first 10 and nothing said anything."""
    make_qm(log_type=log_type)
    qm = open_qm()
    qm.define_queue("ORDERS", DEFPSIST="YES")
    other = [f"o{i}" for i in range(5)]
    qm.define_queue("OTHER", DEFPSIST="YES")
    for i in range(10):
        qm.put("ORDERS", f"m{i}")
    store = qm.core.config.queue_dir("ORDERS")
    qm.close()
    copy = tmp_path / "ORDERS.copy"
    shutil.copytree(store, copy)

    qm = open_qm()
    for i in range(10, 20):
        qm.put("ORDERS", f"m{i}")
    for body in other:
        qm.put("OTHER", body)
    assert [qm.get("ORDERS").body.decode() for _ in range(3)] == ["m0", "m1", "m2"]
    for _ in range(3):
        qm.checkpoint()
    qm.close()

    shutil.rmtree(store)
    shutil.copytree(copy, store)
    qm = open_qm()
    assert messages(qm, "ORDERS") == [f"m{i}" for i in range(3, 20)]
    assert messages(qm, "OTHER") == other, "a store that was not put back is redone once"
    warned = said(home, "HMQ7234W")
    assert warned and "queue ORDERS" in warned[0], warned
    qm.close()
    # and the store is current now: the next restart finds nothing to bring forward
    qm = open_qm()
    assert messages(qm, "ORDERS") == [f"m{i}" for i in range(3, 20)]
    assert len(said(home, "HMQ7234W")) == 1
    qm.close()


def test_an_idle_store_is_not_taken_for_an_old_copy(make_qm, open_qm, home):
    """A queue nobody used since long before the last checkpoint keeps its old
    recovery LSN: that is what the checkpoint saw written, so restart reads no
    further back for it."""
    make_qm()
    qm = open_qm()
    qm.define_queue("IDLE", DEFPSIST="YES")
    qm.define_queue("BUSY", DEFPSIST="YES")
    qm.put("IDLE", b"kept")
    qm.flush()
    for i in range(200):
        qm.put("BUSY", f"b{i}")
        qm.get("BUSY")
    qm.checkpoint()
    qm.close("preemptive")
    qm = open_qm()
    assert messages(qm, "IDLE") == ["kept"]
    assert not said(home, "HMQ7234W")
    qm.close()


@pytest.mark.parametrize("log_type", ["circular", "linear"])
def test_a_copy_older_than_the_log_on_disk_is_damaged_not_stale(make_qm, open_qm, home,
                                                                 tmp_path, log_type):
    """Once the log from the copy's LSN is gone (reused on a circular log,
    deleted on a linear one), the copy cannot be brought forward: HMQ6767E, and
    the queue is damaged (circular) or recreated from its media image and the
    log (linear), never used as it is."""
    make_qm(log_type=log_type, log_file_pages=32, log_primary=2, log_secondary=1)
    qm = open_qm()
    qm.define_queue("ORDERS", DEFPSIST="YES")
    qm.define_queue("FILL", DEFPSIST="YES")
    qm.put("ORDERS", b"first")
    store = qm.core.config.queue_dir("ORDERS")
    qm.close()
    copy = tmp_path / "ORDERS.copy"
    shutil.copytree(store, copy)

    qm = open_qm()
    qm.put("ORDERS", b"second")
    for _ in range(800):          # several extents of log: the copy's LSN is left behind
        qm.put("FILL", b"x" * 1000)
        qm.get("FILL")
    if log_type == "linear":
        qm.image()                # media recovery needs nothing older than this
    qm.checkpoint()
    log = qm.core.log
    oldest_needed = log.extent_of(log.state.restart_lsn).number
    if log_type == "linear":
        media = log.extent_of(log.state.media_lsn).number
        oldest_needed = min(oldest_needed, media)
    qm.close()
    if log_type == "linear":      # what `harbormq log need` allows the operator to delete
        for e in log.state.extents:
            if e.number < oldest_needed:
                log.extent_path(e.number).unlink(missing_ok=True)

    shutil.rmtree(store)
    shutil.copytree(copy, store)
    qm = open_qm()
    errors = said(home, "HMQ6767E")
    assert errors and "queue ORDERS" in errors[0] and "older copy" in errors[0], errors
    if log_type == "linear":
        assert messages(qm, "ORDERS") == ["first", "second"], "recreated from its image"
    else:
        from harbormq.errors import ObjectDamaged
        with pytest.raises(ObjectDamaged):
            qm.browse("ORDERS")
    qm.close()
