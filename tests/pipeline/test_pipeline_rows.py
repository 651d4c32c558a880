"""The harbormq-log data source without Spark: planning, decoding to rows,
torn tails and corruption, filter pushdown."""

from __future__ import annotations

import json

import pytest
from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In, LessThan, StringStartsWith
from support.pipeline_logbuilder import LogBuilder, offset_of

from harbormq.errors import ConfigError, LogCorrupt
from harbormq.log.records import Message, RecordType
from harbormq.pipeline.extents import ScanBounds, plan_extents
from harbormq.pipeline.rows import SCHEMA, read_extent
from harbormq.pipeline.source import HarbormqLogReader


def rows_of(path, bounds=None, include_body=False):
    return [r for p in plan_extents(str(path)) if (bounds or ScanBounds()).keeps_extent(p)
            for b in read_extent(p, bounds, include_body=include_body) for r in b.to_pylist()]


@pytest.fixture
def small_log(tmp_path):
    """Q1 (object 7): two auto puts, a UOW put+get committed, an image, a checkpoint,
    spread over several extents."""
    lb = LogBuilder(tmp_path / "log", pages=2)
    lb.define("Q1", 7)
    m1 = lb.message(7, b"body-1", priority=3, correl_id=b"c1", properties={"n": 1, "s": "x"},
                    expiry_ns=123, reply_to="R", format="MQSTR")
    put1 = lb.put("Q1", 7, m1)
    for _ in range(100):
        lb.put("Q1", 7, lb.message(7, b"x" * 200))
    m2 = lb.message(7, b"body-2")
    lb.put("Q1", 7, m2, uow=5)
    get_lsn = lb.get("Q1", 7, m1, uow=5)
    lb.commit(5)
    lb.image("Q1", 7, 1, [m2])
    lb.checkpoint(restart_lsn=put1)
    lb.close()
    return {"dir": tmp_path / "log", "builder": lb, "put1": put1, "get": get_lsn, "m1": m1}


def test_rows_follow_the_schema_and_type_each_record(small_log):
    rows = rows_of(small_log["dir"], include_body=True)
    assert [r["lsn"] for r in rows] == sorted(r["lsn"] for r in rows)
    assert set(rows[0]) == {f.name for f in SCHEMA}
    put = next(r for r in rows if r["lsn"] == small_log["put1"])
    assert put["type"] == "MSG_PUT" and put["auto_commit"] is True and put["object"] == "Q1"
    assert put["msg_id"] == small_log["m1"].msg_id and put["correl_id"] == b"c1"
    assert (put["priority"], put["seq"], put["expiry_ns"]) == (3, 1, 123)
    assert put["body"] == b"body-1" and put["size"] == 6
    assert dict(put["properties"]) == {"n": "1", "s": "x"}
    assert json.loads(put["properties_json"]) == {"n": 1, "s": "x"}
    assert (put["reply_to"], put["format"]) == ("R", "MQSTR")
    get = next(r for r in rows if r["lsn"] == small_log["get"])
    assert get["type"] == "MSG_GET" and get["uow_id"] == 5 and not get["auto_commit"]
    assert get["prev_lsn"] > 0 and get["msg_id"] == small_log["m1"].msg_id
    chunk = next(r for r in rows if r["type"] == "MEDIA_IMAGE_CHUNK")
    assert chunk["image_id"] == 1 and chunk["image_messages"][0]["body"] == b"body-2"
    cp = next(r for r in rows if r["type"] == "CHECKPOINT_END")
    assert cp["restart_lsn"] == small_log["put1"] and json.loads(cp["data"])["begin_lsn"]
    assert any(r["type"] == "EXTENT_END" for r in rows)
    for r in rows:     # offset and extent locate the record in its file
        assert r["offset"] >= 4096 and r["timestamp"] is not None


def test_bodies_only_when_asked(small_log):
    rows = rows_of(small_log["dir"])
    assert all(r["body"] is None for r in rows)
    assert next(r for r in rows if r["type"] == "MSG_PUT")["size"] == 6


def test_columns_are_the_same_values_as_in_whole_rows(tmp_path):
    """Asking for some columns decodes less (the fixed fields of a payload when no
    descriptor column is asked) but never changes a value: every record type,
    several column sets, small batches so that runs are cut mid-way."""
    lb = LogBuilder(tmp_path / "log", pages=2)
    lb.define("Q1", 7)
    msgs = [lb.message(7, b"b%d" % i, priority=i % 10, correl_id=b"c%d" % i,
                       properties={"i": i} if i % 3 else {}, expiry_ns=i, reply_to="R" * (i % 2),
                       format="F") for i in range(60)]
    for m in msgs[:40]:
        lb.put("Q1", 7, m)
    lb.put("Q1", 7, msgs[40], uow=5)
    get = lb.get("Q1", 7, msgs[0], uow=5)
    lb.get("Q1", 7, msgs[1], rtype=RecordType.MSG_EXPIRE)
    lb.compensate_get("Q1", 7, msgs[0], 5, get, backout_count=1)
    lb.backout(5)
    lb.image("Q1", 7, 1, msgs[41:45])
    lb.checkpoint(restart_lsn=get)
    lb.put("Q1", 7, msgs[45], uow=6)
    lb.shunt(6)
    lb.commit(6)
    lb.close()
    plans = plan_extents(str(tmp_path / "log"))
    whole = [r for p in plans for b in read_extent(p, include_body=True, batch_rows=7)
             for r in b.to_pylist()]
    assert {r["type"] for r in whole} >= {"MSG_PUT", "MSG_GET", "MSG_EXPIRE", "COMPENSATION",
                                          "MEDIA_IMAGE_CHUNK", "CHECKPOINT_END", "UOW_SHUNT"}
    for columns in (["lsn", "type", "priority", "seq", "backout_count", "undone_type"],
                    ["seq", "msg_id", "size", "persistent", "put_time_ns", "expiry_ns"],
                    ["body", "correl_id", "properties", "object", "offset"],
                    ["undone_lsn", "undo_next_lsn"], ["image_id", "data", "restart_lsn"],
                    ["timestamp", "extent", "auto_commit", "image_messages"]):
        got = [r for p in plans for b in read_extent(p, include_body=True, columns=columns,
                                                     batch_rows=7) for r in b.to_pylist()]
        assert got == [{c: r[c] for c in columns} for r in whole], columns


def test_corrupt_record_mid_log_names_extent_offset_and_lsn(small_log):
    plans = plan_extents(str(small_log["dir"]))
    assert len(plans) >= 5
    victim = plans[1]
    raw = bytearray(open(victim.path, "rb").read())
    raw[4096 + 70] ^= 0xFF                 # inside the first record's name/payload
    open(victim.path, "wb").write(bytes(raw))
    with pytest.raises(LogCorrupt) as info:
        list(read_extent(victim))
    text = str(info.value)
    assert "S0000001.LOG" in text and "offset 4096" in text and f"LSN {victim.first_lsn}" in text


def test_torn_tail_of_the_newest_extent_ends_the_log(tmp_path):
    lb = LogBuilder(tmp_path / "log", pages=4)
    lb.define("Q1", 1)
    lsns = [lb.put("Q1", 1, lb.message(1)) for _ in range(5)]
    path = lb.close()
    raw = bytearray(path.read_bytes())
    last = offset_of(lsns[-1], 0)
    raw[last + 20] ^= 0xFF                 # the last record is torn: never forced
    path.write_bytes(bytes(raw))
    rows = rows_of(tmp_path / "log")
    assert [r["lsn"] for r in rows if r["type"] == "MSG_PUT"] == lsns[:-1]


def test_torn_record_followed_by_a_record_forced_after_it_is_corruption(tmp_path):
    lb = LogBuilder(tmp_path / "log", pages=4)
    lb.define("Q1", 1)
    lsns = [lb.put("Q1", 1, lb.message(1)) for _ in range(5)]
    path = lb.close()
    raw = bytearray(path.read_bytes())
    raw[offset_of(lsns[1], 0) + 20] ^= 0xFF   # later records say it had been forced
    path.write_bytes(bytes(raw))
    with pytest.raises(LogCorrupt, match=f"LSN {lsns[1]}"):
        rows_of(tmp_path / "log")


def test_planning_skips_extents_outside_lsn_and_time_bounds(small_log):
    plans = plan_extents(str(small_log["dir"]))
    mid = plans[2]
    b = ScanBounds(lsn_min=mid.first_lsn, lsn_stop=mid.next_lsn)
    assert [p for p in plans if b.keeps_extent(p)] == [mid]
    t = ScanBounds(ts_min=mid.first_ts_ns, ts_max=mid.first_ts_ns)
    kept = [p for p in plans if t.keeps_extent(p)]
    assert mid in kept and len(kept) <= 2         # the one before may end at that instant
    rows = rows_of(small_log["dir"], b)
    assert rows and all(mid.first_lsn <= r["lsn"] < mid.next_lsn for r in rows)


def test_push_filters_handles_lsn_time_object_and_returns_the_rest(small_log):
    reader = HarbormqLogReader({"path": str(small_log["dir"])})
    plans = plan_extents(str(small_log["dir"]))
    f_lo = GreaterThanOrEqual(("lsn",), plans[2].first_lsn)
    f_hi = LessThan(("lsn",), plans[3].first_lsn)
    f_obj = In(("object",), ("Q1", "Q2"))
    f_type = EqualTo(("type",), "MSG_PUT")
    f_like = StringStartsWith(("object",), "Q")
    rest = list(reader.pushFilters([f_lo, f_hi, f_obj, f_type, f_like]))
    assert rest == [f_type, f_like]
    parts = reader.partitions()
    assert [p.plan.first_lsn for p in parts] == [plans[2].first_lsn]
    rows = [r for p in parts for b in reader.read(p) for r in b.to_pylist()]
    assert rows and all(plans[2].first_lsn <= r["lsn"] < plans[3].first_lsn and
                        r["object"] == "Q1" for r in rows)


def test_resume_starts_at_a_record_boundary(small_log):
    plans = plan_extents(str(small_log["dir"]))
    rows = rows_of(small_log["dir"])
    inside = [r for r in rows if plans[1].first_lsn <= r["lsn"] < plans[1].next_lsn]
    resume = inside[3]["lsn"]
    got = [r["lsn"] for b in read_extent(plans[1], resume_lsn=resume) for r in b.to_pylist()]
    assert got == [r["lsn"] for r in inside[3:]]


def test_bad_input_gets_clear_errors(tmp_path):
    with pytest.raises(ConfigError, match="no log extents at"):
        plan_extents(str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no log extents with data"):
        plan_extents(str(tmp_path / "empty"))
    with pytest.raises(ConfigError, match="includeBody must be true or false"):
        HarbormqLogReader({"path": str(tmp_path), "includeBody": "yes"})
    with pytest.raises(ConfigError, match="needs a path"):
        HarbormqLogReader({})


def test_several_queue_managers_need_a_choice(tmp_path):
    a = LogBuilder(tmp_path / "a", qm_name="QMA")
    a.define("Q", 1)
    a.close()
    b = LogBuilder(tmp_path / "b", qm_name="QMB", start_ns=1_800_000_000_000_000_000)
    b.lsn = 1 << 30                 # another log, other LSNs
    b._new_extent()
    b.define("Q", 1)
    b.close()
    both = f"{tmp_path / 'a'},{tmp_path / 'b'}/S0000001.LOG"
    with pytest.raises(ConfigError, match="several queue managers"):
        HarbormqLogReader({"path": both}).partitions()
    parts = HarbormqLogReader({"path": both, "qmName": "QMB"}).partitions()
    assert [p.plan.qm_name for p in parts] == ["QMB"]


def test_message_columns_use_the_codec(small_log):
    m = Message(body=b"z", msg_id=b"i", priority=9, seq=4, properties={"k": [1, 2]})
    assert Message.decode(m.encode()).properties == {"k": [1, 2]}


def test_extents_of_a_lake_become_merged_lsn_ranges():
    from harbormq.pipeline.logdata import lsn_ranges
    firsts = [0, 100, 200, 300, 400]
    assert lsn_ranges(firsts, [100, 200, 400]) == [(100, 300), (400, None)]
    assert lsn_ranges(firsts, [0]) == [(0, 100)]
    assert lsn_ranges(firsts, []) == []
