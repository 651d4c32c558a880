"""Log-space flow control when waiting cannot help: a unit of work in doubt
pins the circular log. A put is refused at once, naming it, and a refusal
writes nothing (each relief round is a checkpoint: rounds that free nothing
would spend the last extent, and then not even the RESOLVE that frees the log
could be written)."""

from __future__ import annotations

import time

import pytest

from harbormq.errors import LogFull


def test_a_put_while_an_in_doubt_unit_of_work_pins_the_log_is_refused_and_writes_nothing(
        make_qm, open_qm):
    make_qm(log_file_pages=32, log_primary=2, log_secondary=1)
    qm = open_qm()
    qm.define_queue("Q1", DEFPSIST="YES", MAXDEPTH=100000)
    log = qm.core.log
    pin = qm.begin("app1")
    for _ in range(3):                     # too big to shunt (HMQ7471W)
        pin.put("Q1", b"in-doubt" * 7500)
    pin.prepare()
    while log.available_extents() > 0:     # up to the last extent: producers are held
        qm.put("Q1", b"y" * 20000)
    t0 = time.monotonic()
    with pytest.raises(LogFull) as first:
        qm.put("Q1", b"held")
    assert time.monotonic() - t0 < 10, "refused once relief found the pin, not at the deadline"
    assert f"unit of work {pin.id} (prepared, owner app1)" in str(first.value)
    end = log.end_lsn
    for _ in range(3):
        with pytest.raises(LogFull):
            qm.put("Q1", b"again")
    assert log.end_lsn == end, "a refusal while the pin lasts writes no checkpoint"
    assert "HMQ7463E" in qm.core.oplog.ids()
    qm.resolve(pin.id, commit=False)       # what frees the log still fits
    qm.checkpoint()
    qm.put("Q1", b"after")
    assert b"after" in [m.body for m in qm.browse("Q1")]
