"""Publications in the pipeline: a MSG_PUBLISH record is one row per target in
the ``harbormq-log`` data source (its LSN ties them together, its length on
the first only), a subscription's queue is rebuilt at a past point like any
queue, ``trace`` shows a publication's fan-out, and ``report`` the traffic of
each topic."""

from __future__ import annotations

import pytest
from support.differential import all_rows, engine_state, spark_rebuilt

from harbormq.log.records import Message
from harbormq.pipeline.extents import ScanBounds, plan_extents
from harbormq.pipeline.logdata import LogInput
from harbormq.pipeline.report import run_report
from harbormq.pipeline.rows import read_extent
from harbormq.pipeline.trace import describe_life, format_life, run_trace

TARGETS = ["SUB.A", "SUB.B", "SUB.C"]


def publish(qm, queues, body, topic="news/sport", uow=None):
    msg = Message(body=body, properties={"MQTopicString": topic})
    return qm._call(qm.core.publish(queues, msg, uow.uow if uow is not None else None))


@pytest.fixture
def qm(make_qm, open_qm):
    make_qm(log_file_pages=256)
    qm = open_qm()
    for name in TARGETS:
        qm.define_queue(name, DEFPSIST="YES")
    return qm


def test_one_row_per_target_tied_by_the_lsn(qm):
    msgs = publish(qm, TARGETS, b"x" * 100)
    engine_state(qm)      # (forces the log)
    rows = [r for r in all_rows(qm.config.log_dir) if r["type"] == "MSG_PUBLISH"]
    assert [r["object"] for r in rows] == TARGETS
    assert len({r["lsn"] for r in rows}) == 1
    assert [r["seq"] for r in rows] == [m.seq for m in msgs]
    assert [r["msg_id"] for r in rows] == [m.msg_id for m in msgs]     # one id each
    assert all(r["size"] == 100 and r["body"] == b"x" * 100 for r in rows)
    assert rows[0]["length"] > 100 and [r["length"] for r in rows[1:]] == [0, 0]
    assert dict(rows[0]["properties"]) == {"MQTopicString": "news/sport"}
    # a filter on the object keeps that target's row (the record names no object)
    only_b = [r for p in plan_extents(str(qm.config.log_dir))
              for b in read_extent(p, ScanBounds(objects=frozenset({"SUB.B"})))
              for r in b.to_pylist()]
    assert [(r["type"], r["object"]) for r in only_b if r["type"] == "MSG_PUBLISH"] == \
        [("MSG_PUBLISH", "SUB.B")]


def row(lsn, type_, obj, seq, uow=0, **kw):
    base = {"lsn": lsn, "ts_ns": lsn * 1000, "type": type_, "auto_commit": uow == 0,
            "uow_id": uow, "object": obj, "priority": 0, "seq": seq, "backout_count": None,
            "undone_type": None, "image_id": None,
            "properties": {"MQTopicString": "t/1"}}
    return base | kw


def test_trace_shows_the_fan_out():
    rows = [row(10, "MSG_PUBLISH", "A", 1), row(10, "MSG_PUBLISH", "B", 4),
            row(10, "MSG_PUBLISH", "B", 5), row(20, "MSG_GET", "B", 4),
            row(30, "MSG_GET", "A", 1, uow=9)]
    life = describe_life("01", rows, {9: [{"type": "UOW_BACKOUT", "lsn": 35, "ts_ns": 1}]})
    assert life["events"][0]["event"] == \
        "published to 3 queue(s): put here (priority 0, seq 1) for topic 't/1'"
    assert [(f["queue"], f["seq"], f["became"]) for f in life["fanout"]] == [
        ("A", 1, "on it at the end of the log"), ("B", 4, "got at LSN 20"),
        ("B", 5, "on it at the end of the log")]
    assert life["final"] == "on queue A, B"
    assert "fan-out: 3 target(s)" in format_life(life)
    life = describe_life("01", [row(10, "MSG_PUBLISH", "A", 1, uow=3)],
                         {3: [{"type": "UOW_BACKOUT", "lsn": 12, "ts_ns": 1}]})
    assert life["fanout"][0]["became"].startswith("never on it (the publication was backed out")


def test_rebuild_trace_and_topic_report(tmp_path, spark, qm):
    first = publish(qm, TARGETS, b"one")
    publish(qm, ["SUB.A", "SUB.B"], b"two", topic="news/weather")
    qm.get("SUB.A")
    with qm.begin() as u:
        publish(qm, ["SUB.C"], b"three", uow=u)
    backed = qm.begin()
    publish(qm, TARGETS, b"never", uow=backed)
    past, past_state = engine_state(qm)     # (the backed-out unit still open here)
    backed.backout()
    publish(qm, TARGETS, b"later", topic="other")
    engine_state(qm)
    source = LogInput(log=str(qm.config.log_dir))
    got, _ = spark_rebuilt(spark, source, past, TARGETS)
    assert got == {q: past_state[q] for q in TARGETS}
    assert [len(got[q]) for q in TARGETS] == [1, 2, 2]
    records = source.records(spark)
    life = run_trace(spark, records, first[1].msg_id.hex())   # any target's id
    assert [(f["queue"], f["became"].split(" at LSN")[0]) for f in life["fanout"]] == [
        ("SUB.A", "got"), ("SUB.B", "on it at the end of the log"),
        ("SUB.C", "on it at the end of the log")]
    rep = run_report(spark, records, tmp_path / "report")
    sport, weather = rep["topics"]["news/sport"], rep["topics"]["news/weather"]
    assert (sport["publications"], sport["deliveries"], sport["queues_reached"]) == (2, 4, 3)
    assert (weather["publications"], weather["deliveries"]) == (1, 2)
    assert sport["body_bytes"] == len(b"one") + len(b"three")
    assert sport["log_bytes"] > 0
    assert rep["queues"]["SUB.B"]["depth"][-1] == 3
    assert rep["topics"]["other"]["deliveries"] == 3
