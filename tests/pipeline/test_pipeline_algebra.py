"""The rebuild set algebra without Spark, on logs written with the codec."""

from __future__ import annotations

import json

import pytest
from support.differential import all_rows
from support.pipeline_logbuilder import LogBuilder

from harbormq.log.records import RecordType
from harbormq.pipeline.algebra import (
    CONTROL_TYPES,
    RebuildError,
    coverage_start,
    plan_targets,
    reference_rebuild,
)


def rebuild(rows, at_lsn, queues=None, history_from=0):
    control = [r for r in rows if r["type"] in CONTROL_TYPES and r["lsn"] <= at_lsn]
    targets = plan_targets(control, at_lsn, queues, history_from)
    return reference_rebuild(rows, at_lsn, targets)


def ids(messages):
    return [m["msg_id"].decode() for m in messages]


def test_committed_puts_minus_committed_gets_in_priority_then_put_order(tmp_path):
    lb = LogBuilder(tmp_path)
    lb.define("Q", 1)
    a = lb.message(1, priority=1); lb.put("Q", 1, a)
    b = lb.message(1, priority=9); lb.put("Q", 1, b, uow=10)
    c = lb.message(1, priority=1); lb.put("Q", 1, c, uow=11)     # backed out
    d = lb.message(1, priority=5); lb.put("Q", 1, d)
    before_commit = lb.lsn - 1
    lb.commit(10)
    comp = lb.compensate_put("Q", 1, c, 11, 0)
    lb.backout(11)
    e = lb.message(1, priority=1); lb.put("Q", 1, e)
    lb.get("Q", 1, d)                                            # auto-committed get
    lb.get("Q", 1, e, rtype=RecordType.MSG_EXPIRE)
    lb.close()
    rows = all_rows(tmp_path)
    assert ids(rebuild(rows, lb.lsn)["Q"]) == ["id-1-2", "id-1-1"]       # b (prio 9), a
    assert ids(rebuild(rows, before_commit)["Q"]) == ["id-1-4", "id-1-1"]  # d, a: b uncommitted
    assert ids(rebuild(rows, comp)["Q"]) == ["id-1-2", "id-1-4", "id-1-1"]


def test_in_doubt_and_in_flight_gets_leave_the_message_locked(tmp_path):
    lb = LogBuilder(tmp_path)
    lb.define("Q", 1)
    a, b, c = (lb.message(1) for _ in range(3))
    for m in (a, b, c):
        lb.put("Q", 1, m)
    lb.get("Q", 1, a, uow=20)
    lb.prepare(20)                                    # in doubt
    lb.get("Q", 1, b, uow=21)                         # in flight
    p = lb.message(1); lb.put("Q", 1, p, uow=21)      # in-flight put: not visible
    g = lb.get("Q", 1, c, uow=22)
    lb.compensate_get("Q", 1, c, 22, g, backout_count=1)
    lb.backout(22)
    lb.close()
    out = rebuild(all_rows(tmp_path), lb.lsn)["Q"]
    assert ids(out) == ["id-1-1", "id-1-2", "id-1-3"]
    assert [m["locked_uow"] for m in out] == [20, 21, None]
    assert [m["backout_count"] for m in out] == [0, 0, 1]


def test_clear_removes_what_was_committed_before_it(tmp_path):
    lb = LogBuilder(tmp_path)
    lb.define("Q", 1)
    lb.put("Q", 1, lb.message(1))
    lb.put("Q", 1, lb.message(1))
    clear = lb.clear("Q", 1)
    lb.put("Q", 1, lb.message(1))
    lb.close()
    rows = all_rows(tmp_path)
    assert ids(rebuild(rows, clear - 1)["Q"]) == ["id-1-1", "id-1-2"]
    assert ids(rebuild(rows, lb.lsn)["Q"]) == ["id-1-3"]


def test_delete_and_redefine_is_a_new_queue(tmp_path):
    lb = LogBuilder(tmp_path)
    lb.define("Q", 1)
    lb.put("Q", 1, lb.message(1))
    gone = lb.delete("Q", 1)
    lb.define("Q", 2)
    lb.put("Q", 2, lb.message(2))
    lb.close()
    rows = all_rows(tmp_path)
    assert ids(rebuild(rows, lb.lsn)["Q"]) == ["id-2-1"]
    with pytest.raises(RebuildError, match="queue Q is not defined at LSN"):
        rebuild(rows, gone, ["Q"])
    assert ids(rebuild(rows, gone - 1, ["Q"])["Q"]) == ["id-1-1"]


def test_rebuild_starts_from_the_latest_complete_image(tmp_path):
    lb = LogBuilder(tmp_path, pages=4)
    lb.define("Q", 1)
    old = [lb.message(1, priority=p) for p in (2, 7)]
    for m in old:
        lb.put("Q", 1, m)
    late = lb.message(1, priority=3)
    lb.put("Q", 1, late, uow=30)           # put before the image, committed after it
    got = lb.get("Q", 1, old[0], uow=31)   # got before the image, committed after it
    begin, end = lb.image("Q", 1, 100, old)
    lb.commit(30)
    lb.commit(31)
    after = lb.message(1, priority=0); lb.put("Q", 1, after)
    half = lb.image("Q", 1, 101, old)[0]   # an image whose END is after the point below
    lb.close()
    rows = all_rows(tmp_path)
    out = rebuild(rows, half, ["Q"])["Q"]
    assert ids(out) == ["id-1-2", "id-1-3", "id-1-4"]      # 7 (image), 3 (late), 0 (after)
    assert out[0]["put_lsn"] is None       # from the image, not from its put record
    assert out[1]["put_lsn"] == next(r["lsn"] for r in rows
                                     if r["type"] == "MSG_PUT" and r["seq"] == late.seq)
    assert got < begin < end
    # the image alone carries the queue when the log read starts after the definition
    assert ids(rebuild(rows, end, ["Q"], history_from=begin)["Q"]) == ["id-1-2", "id-1-1"]


def test_a_clear_after_the_image_empties_it(tmp_path):
    lb = LogBuilder(tmp_path)
    lb.define("Q", 1)
    m = lb.message(1); lb.put("Q", 1, m)
    lb.image("Q", 1, 5, [m])
    lb.clear("Q", 1)
    lb.put("Q", 1, lb.message(1))
    lb.close()
    assert ids(rebuild(all_rows(tmp_path), lb.lsn)["Q"]) == ["id-1-2"]


def test_history_that_does_not_reach_the_definition_is_refused(tmp_path):
    lb = LogBuilder(tmp_path)
    lb.define("Q", 1)
    lb.put("Q", 1, lb.message(1))
    lb.close()
    rows = all_rows(tmp_path)
    with pytest.raises(RebuildError, match="history of queue Q is incomplete"):
        rebuild(rows, lb.lsn, ["Q"], history_from=rows[1]["lsn"])


def test_coverage_starts_after_the_last_gap():
    firsts = [0, 100, 300, 400]
    ends = {0: 100, 100: 200, 300: 400}     # 100..200 then a gap to 300
    assert coverage_start(firsts, ends, 450) == 300
    assert coverage_start(firsts, ends, 150) == 0
    assert coverage_start([0, 100], {0: 100}, 150) == 0


def test_shunt_records_change_no_rebuild(tmp_path):
    """A shunt copies records already in the log (log shunting): a rebuild at any
    point is the same with and without shunts, and a shunt's row is described
    (its copies in ``data``), never counted as a put or a get."""
    out = {}
    for shunted in (False, True):
        lb = LogBuilder(tmp_path / str(shunted))
        lb.define("Q", 1)
        a, b = lb.message(1), lb.message(1)
        lb.put("Q", 1, a)
        lb.put("Q", 1, b)
        p = lb.message(1, b"p" * 500)
        lb.put("Q", 1, p, uow=7)
        lb.get("Q", 1, a, uow=7)
        g = lb.get("Q", 1, b, uow=8)
        lb.compensate_get("Q", 1, b, 8, g, backout_count=1)
        if shunted:
            lb.shunt(7)
            lb.shunt(8, "backing_out")
        points = {"open": lb.lsn - 1}
        lb.commit(7)
        lb.backout(8)
        lb.close()
        points["end"] = lb.lsn - 1
        rows = all_rows(tmp_path / str(shunted))
        out[shunted] = {name: rebuild(rows, at)["Q"] for name, at in points.items()}
        if shunted:
            shunts = [r for r in rows if r["type"] == "UOW_SHUNT"]
            assert [r["uow_id"] for r in shunts] == [7, 8]
            assert all(r["msg_id"] is None and r["seq"] is None for r in shunts)
            seven = json.loads(shunts[0]["data"])
            assert seven["state"] == "active" and seven["parts"] == 1
            assert [(c["type"], c["msg_id"]) for c in seven["copies"]] == [
                ("MSG_PUT", p.msg_id.hex()), ("MSG_GET", a.msg_id.hex())]
            assert seven["copies"][0]["body_size"] == 500
            eight = json.loads(shunts[1]["data"])
            assert [c["type"] for c in eight["copies"]] == ["MSG_GET", "COMPENSATION"]
    assert out[True] == out[False]
    assert ids(out[True]["end"]) == ["id-1-2", "id-1-3"]        # b (count 1), p
    assert [m["backout_count"] for m in out[True]["end"]] == [1, 0]
    assert [m["locked_uow"] for m in out[True]["open"]] == [7, None]
