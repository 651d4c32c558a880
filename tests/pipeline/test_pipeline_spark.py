"""The pipeline on a real local Spark session: the differential test against the
engine, images, ingest, report, trace and corruption.

The Spark part is kept small: one session (conftest ``spark``), few actions."""

from __future__ import annotations

import json
import random
import shutil
import time

import pytest
from support.differential import all_rows, engine_state, force_log, spark_rebuilt
from support.pipeline_logbuilder import LogBuilder
from support.report_page import check_report_page

from harbormq.errors import HarbormqError, LogFull, ObjectInUse, UnitOfWorkError
from harbormq.pipeline.algebra import CONTROL_TYPES, plan_targets, reference_rebuild
from harbormq.pipeline.extents import plan_extents
from harbormq.pipeline.ingest import Lake, run_ingest
from harbormq.pipeline.logdata import LogInput
from harbormq.pipeline.rebuild import run_rebuild
from harbormq.pipeline.report import run_report
from harbormq.pipeline.rows import read_extent
from harbormq.pipeline.trace import run_trace

QUEUES = [f"Q{i}" for i in range(5)]


def archive_full_extents(qm, archive, done: set) -> None:
    """What an operator's log archiving keeps: every extent once it is full,
    before the circular log reuses it."""
    force_log(qm)
    for e in qm._call_sync(lambda: [(x.number, x.first_lsn, x.state)
                                    for x in qm.core.log.state.extents]):
        number, first, state = e
        if state == "full" and first not in done:
            shutil.copyfile(qm.core.log.extent_path(number), archive / f"A{first:016d}.LOG")
            done.add(first)


def run_workload(qm, archive, seed: int, ops: int, snap_at: set[int]):
    rng = random.Random(seed)
    for i, name in enumerate(QUEUES):
        attrs = {"DEFPSIST": "YES"}
        if i == 1:
            attrs.update(BOTHRESH=2, BOQNAME="Q4")   # backed out twice: moved to Q4
        qm.define_queue(name, **attrs)
    archived: set[int] = set()
    open_uows, in_doubt, snaps = [], [], []
    for step in range(ops):
        q = rng.choice(QUEUES)
        r = rng.random()
        try:
            if r < 0.35:
                qm.put(q, rng.randbytes(rng.randint(0, 300)), priority=rng.randint(0, 9),
                       persistent=rng.random() < 0.8,
                       expiry=0.001 if rng.random() < 0.03 else None,
                       properties={"step": step} if rng.random() < 0.3 else None)
            elif r < 0.5:
                qm.get(q)
            elif r < 0.62 or not open_uows:
                u = qm.begin()
                open_uows.append(u)
                for _ in range(rng.randint(1, 4)):
                    if rng.random() < 0.6:
                        u.put(rng.choice(QUEUES), b"u" * rng.randint(1, 100),
                              priority=rng.randint(0, 9), persistent=rng.random() < 0.85)
                    else:
                        u.get(rng.choice(QUEUES))
            elif r < 0.85:
                u = open_uows.pop(rng.randrange(len(open_uows)))
                choice = rng.random()
                if choice < 0.55:
                    u.commit()
                elif choice < 0.9 or len(in_doubt) > 3:
                    u.backout()
                else:
                    u.prepare()
                    in_doubt.append((u, step))
            elif r < 0.9 and in_doubt:
                u, since = in_doubt[0]
                if step - since > 25:           # in doubt for a while, then resolved
                    in_doubt.pop(0)
                    qm.resolve(u.id, commit=rng.random() < 0.5)
            elif r < 0.93:
                qm.clear_queue(q)
            elif r < 0.95:
                qm.delete_queue("Q3", purge=True)
                qm.define_queue("Q3", DEFPSIST="YES")
            elif r < 0.97:
                qm.checkpoint()
        except (ObjectInUse, UnitOfWorkError, LogFull):
            pass       # busy queue, a UOW backed out by the queue manager, log relief
        if step % 20 == 0:
            archive_full_extents(qm, archive, archived)
        if step in snap_at:
            snaps.append(engine_state(qm))
    archive_full_extents(qm, archive, archived)
    return snaps, open_uows, in_doubt


def test_rebuild_matches_the_engine_at_several_points(make_qm, open_qm, home, tmp_path, spark):
    make_qm("QM1", log_file_pages=32, log_primary=3, log_secondary=2, checkpoint_records=200)
    qm = open_qm("QM1")
    archive = tmp_path / "archive"
    archive.mkdir()
    snaps, open_uows, in_doubt = run_workload(qm, archive, seed=4, ops=1500,
                                              snap_at={400, 800, 1200, 1499})
    log_dir = qm.config.log_dir
    first_lsns = {p.first_lsn for p in plan_extents(str(log_dir))}
    assert min(first_lsns) > 0, "the circular log wrapped: its first extents were reused"
    assert any(locked for _lsn, st in snaps for msgs in st.values()
               for *_x, locked in msgs), "some snapshot has messages locked by a UOW"
    source = f"{archive},{log_dir}"
    lake = tmp_path / "lake"
    rows = all_rows(source)
    log_input = LogInput(log=source)
    for i, (lsn, engine) in enumerate(snaps):
        expected = {name: [(m[0], m[1], m[2], m[3], m[4]) for m in msgs]
                    for name, msgs in engine.items()}
        control = [r for r in rows if r["type"] in CONTROL_TYPES and r["lsn"] <= lsn]
        targets = plan_targets(control, lsn, None, 0)
        ref = reference_rebuild(rows, lsn, targets)
        assert {q: [(m["msg_id"], m["priority"], m["seq"], m["backout_count"],
                     m["locked_uow"]) for m in msgs] for q, msgs in ref.items()} == expected
        if i % 2 == 1:       # Spark at two of the points (the latest and an earlier one)
            got = spark_state(spark, log_input, lsn, expected)
            assert got == expected
            assert sum(len(v) for v in got.values()) > 20
        if i == 1:           # the same from a lake of the whole log, before its end
            run_ingest(spark, source, lake, with_bodies=True)
            assert spark_state(spark, LogInput(lake=str(lake)), lsn, expected) == expected
    for u in open_uows:
        u.backout()
    for u, _ in in_doubt:
        qm.resolve(u.id, commit=False)


def spark_state(spark, source: LogInput, lsn: int, queues) -> dict:
    """The Spark rebuild at ``lsn`` as {queue: [(msg_id, priority, seq, backout
    count, locked uow)]}, a list for each of ``queues``."""
    return spark_rebuilt(spark, source, lsn, queues)[0]


@pytest.fixture
def image_log(tmp_path):
    lb = LogBuilder(tmp_path / "log", pages=4)
    lb.define("Q", 1)
    old = [lb.message(1, priority=p, body=b"old%d" % p) for p in (2, 7, 4)]
    for m in old:
        lb.put("Q", 1, m)
    lb.put("Q", 1, late := lb.message(1, priority=3), uow=30)
    lb.get("Q", 1, old[0], uow=31)
    begin, end = lb.image("Q", 1, 100, old)
    lb.commit(30)
    lb.commit(31)
    lb.put("Q", 1, lb.message(1, priority=0))
    lb.close()
    return tmp_path / "log", late


def test_spark_rebuild_from_an_image_equals_the_reference(image_log, spark, tmp_path):
    log, _late = image_log
    source = LogInput(log=str(log))
    rows = all_rows(str(log))
    at = rows[-1]["lsn"]
    summary = run_rebuild(spark, source, at_lsn=at, queues=["Q"], out=tmp_path / "out")
    assert summary["queues"]["Q"]["image_id"] == 100
    control = [r for r in rows if r["type"] in CONTROL_TYPES]
    ref = reference_rebuild(rows, at, plan_targets(control, at, ["Q"], 0))["Q"]
    lines = (tmp_path / "out" / "Q.hmqload").read_text().splitlines()
    assert json.loads(lines[0])["at_lsn"] == at and json.loads(lines[-1]) == {
        "end": True, "messages": len(ref)}
    assert [bytes.fromhex(json.loads(x)["msg_id"]) for x in lines[1:-1]] == \
        [m["msg_id"] for m in ref]
    import pyarrow.parquet as pq
    table = pq.read_table(tmp_path / "out" / "messages").to_pylist()
    assert [r["msg_id"] for r in sorted(table, key=lambda r: r["position"])] == \
        [m["msg_id"] for m in ref]


def test_a_survivor_the_second_read_does_not_give_back_fails_the_rebuild(image_log, spark,
                                                                       tmp_path):
    """Which messages survive is decided on narrow rows; their bodies come from a
    second read. When that read lacks one (the log changed between the reads),
    the rebuild fails and writes nothing: a join used to drop the message."""
    from harbormq.pipeline.algebra import RebuildError
    log, _late = image_log
    rows = all_rows(str(log))
    last_put = [r["lsn"] for r in rows if r["type"] == "MSG_PUT"][-1]   # it survives

    class LogChangedBetweenReads(LogInput):
        def records(self, spark, *, include_body=False, **options):
            df = super().records(spark, include_body=include_body, **options)
            return df.filter(f"lsn <> {last_put}") if include_body else df

    with pytest.raises(RebuildError, match="found 4 surviving message.s., but the second "
                                           "read of their put records .or image entries. gave 3"):
        run_rebuild(spark, LogChangedBetweenReads(log=str(log)), at_lsn=rows[-1]["lsn"],
                    queues=["Q"], out=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_load_file_puts_a_queue_back_in_order(image_log, spark, tmp_path, make_qm, open_qm):
    from harbormq.unload.loadfile import load_file_into
    log, _ = image_log
    rows = all_rows(str(log))
    run_rebuild(spark, LogInput(log=str(log)), at_lsn=rows[-1]["lsn"], queues=["Q"],
                out=tmp_path / "out")
    make_qm("QM2")
    qm = open_qm("QM2")
    qm.define_queue("RESTORED", DEFPSIST="YES")
    result = load_file_into(qm, "RESTORED", tmp_path / "out" / "Q.hmqload")
    expected = [json.loads(x) for x in
                (tmp_path / "out" / "Q.hmqload").read_text().splitlines()[1:-1]]
    assert result["loaded"] == len(expected) == 4
    got = [qm.get("RESTORED") for _ in expected]
    assert [m.msg_id.hex() for m in got] == [e["msg_id"] for e in expected]
    assert [m.body for m in got][0] == b"old7"


def test_ingest_is_incremental_and_idempotent(tmp_path, spark, make_qm, open_qm):
    make_qm("QM1", log_file_pages=32, log_type="linear")
    qm = open_qm("QM1")
    qm.define_queue("Q", DEFPSIST="YES")
    for i in range(600):
        qm.put("Q", b"x" * 200, priority=i % 10)
    force_log(qm)
    log, lake = str(qm.config.log_dir), tmp_path / "lake"
    first = run_ingest(spark, log, lake, with_bodies=True)
    again = run_ingest(spark, log, lake, with_bodies=True)
    assert first["records"] > 600 and first["extents"] >= 2
    # only the active extent is read again, from where it stopped: nothing new
    assert again == {"batch": None, "records": 0, "extents": 1}
    for _ in range(50):                 # the active extent grows (and may switch)
        qm.get("Q")
    force_log(qm)
    with pytest.raises(HarbormqError, match="keep --with-bodies the same"):
        run_ingest(spark, log, lake)
    third = run_ingest(spark, log, lake, with_bodies=True)
    assert third["records"] >= 50
    lake_df = Lake(lake).records(spark)
    log_df = LogInput(log=log).records(spark)
    assert lake_df.count() == log_df.count()
    assert lake_df.select("lsn").distinct().count() == lake_df.count()   # no duplicates
    m = Lake(lake).manifest()
    assert len(m["batches"]) == 2 and all(e["ingested_lsn"] > e["first_lsn"]
                                          for e in m["extents"].values())
    days = [p.name for p in (lake / "records").iterdir() if p.name.startswith("day=")]
    assert days and all((lake / "records" / d / "type=MSG_PUT").is_dir() for d in days)
    # the lake answers a rebuild the same as the log
    end = qm._call_sync(lambda: qm.core.log.end_lsn - 1)
    a = run_rebuild(spark, LogInput(lake=str(lake)), at_lsn=end, queues=["Q"],
                    out=tmp_path / "a")
    b = run_rebuild(spark, LogInput(log=log), at_lsn=end, queues=["Q"], out=tmp_path / "b")
    assert a["queues"]["Q"]["messages"] == b["queues"]["Q"]["messages"] == 550
    assert (tmp_path / "a" / "Q.hmqload").read_text() == \
        (tmp_path / "b" / "Q.hmqload").read_text()


def test_report_and_trace(tmp_path, spark, make_qm, open_qm, browser):
    make_qm("QM1")
    qm = open_qm("QM1")
    qm.define_queue("Q", DEFPSIST="YES")
    msg = qm.put("Q", b"traced")
    with qm.begin() as u:
        u.put("Q", b"other")
    u = qm.begin()
    assert u.get("Q").msg_id == msg.msg_id
    u.backout()
    u = qm.begin()
    u.get("Q")
    u.prepare()
    qm.checkpoint()
    time.sleep(0.01)
    records = LogInput(log=str(qm.config.log_dir)).records(spark)
    life = run_trace(spark, records, msg.msg_id.hex())
    kinds = [e["event"] for e in life["events"]]
    assert kinds[0].startswith("put") and "get backed out (backout count 1)" in kinds
    assert life["events"][-1]["outcome"] == "in doubt at the end of the log"
    assert life["final"] == "on queue Q"
    with pytest.raises(HarbormqError, match="no log record names message"):
        run_trace(spark, records, "00ff")
    rep = run_report(spark, records, tmp_path / "report")
    assert rep["uows"]["by_outcome"] == {"committed": 1, "backed out": 1, "in doubt": 1}
    assert rep["uows"]["in_doubt_at_end"] == [u.id]
    assert rep["retention"] and all(c["log_bytes_needed"] >= 0 for c in rep["retention"])
    assert rep["queues"]["Q"]["depth"][-1] == 2
    for f in ("report.json", "retention.png", "uow_durations.png", "queue_Q.png",
              "index.html"):
        assert (tmp_path / "report" / f).stat().st_size > 100
    # the page for people, in a real browser (tests/support/report_page.py)
    assert check_report_page(browser, tmp_path / "report", rep)["Q"][1:3] == ["2", "0"]
    qm.resolve(u.id, commit=False)


def corrupt_log(log, puts: int, victim: int):
    """A log of ``puts`` puts in extents of two pages, extent ``victim`` corrupt at
    its first record; returns the plans."""
    lb = LogBuilder(log, pages=2)
    lb.define("Q", 1)
    for _ in range(puts):
        lb.put("Q", 1, lb.message(1, body=b"y" * 200))
    lb.close()
    plans = plan_extents(str(log))
    raw = bytearray(open(plans[victim].path, "rb").read())
    raw[4096 + 100] ^= 0x55
    open(plans[victim].path, "wb").write(bytes(raw))
    return plans


def test_a_corrupt_extent_fails_the_job_naming_it(tmp_path, spark):
    victim = corrupt_log(tmp_path / "log", 80, 1)[1]
    with pytest.raises(Exception, match=r"HMQ7501E: log extent S0000001.LOG is corrupt at "
                                        rf"offset 4096 \(LSN {victim.first_lsn}\)"):
        LogInput(log=str(tmp_path / "log")).records(spark).count()


def test_pushed_down_filters_skip_whole_extents(tmp_path, spark):
    """A corrupt older extent fails any read of it; filters that exclude it must
    leave it unopened, through Spark's own pushdown."""
    import datetime as dt
    plans = corrupt_log(tmp_path / "log", 80, 0)
    df = LogInput(log=str(tmp_path / "log")).records(spark)
    later = plans[2]
    expected = sum(1 for r in all_rows_from(plans[2:]))
    assert df.filter(f"lsn >= {later.first_lsn}").count() == expected
    since = dt.datetime.fromtimestamp(later.first_ts_ns / 1e9, dt.timezone.utc)
    assert df.filter(f"ts_ns >= {later.first_ts_ns}").count() == expected
    # timestamp comparisons skip extents but are left to Spark to evaluate
    assert df.filter(df.timestamp >= since).count() == expected
    with pytest.raises(Exception, match="HMQ7501E"):
        df.filter(f"lsn < {later.first_lsn}").count()


def all_rows_from(plans):
    return [r for p in plans for b in read_extent(p) for r in b.to_pylist()]


def test_a_point_in_time_is_found_without_reading_older_extents(tmp_path, spark):
    """--at-time resolves to the last record at or before the time by decoding
    from the extent that holds it on: an older extent, here corrupt, is never
    opened."""
    from harbormq.pipeline.rebuild import resolve_point
    plans = corrupt_log(tmp_path / "log", 120, 0)
    assert len(plans) >= 4
    rows = all_rows_from(plans[1:])
    at = rows[len(rows) * 2 // 3]["ts_ns"] + 500_000         # between two records
    expected = max(r["lsn"] for r in rows if r["ts_ns"] <= at)
    source = LogInput(log=str(tmp_path / "log"))
    records = source.records(spark, columns=["lsn", "ts_ns"])
    assert resolve_point(spark, records, None, at, source.point_floor(at)) == expected
    with pytest.raises(Exception, match="HMQ7501E"):     # the whole log: it is read
        resolve_point(spark, records, None, at)


def test_a_point_in_time_is_the_last_record_at_or_before_it_wherever_it_falls(tmp_path,
                                                                              spark):
    """The same point as a scan of every record gives: before the first record, at
    and around extent boundaries, after the last, and in an extent whose clock
    stepped back after its first record (the last record at or before the time
    is then older than that first record)."""
    from harbormq.pipeline.rebuild import RebuildError, resolve_point
    lb = LogBuilder(tmp_path / "log", pages=2)
    lb.define("Q", 1)
    while lb.extent < 1:
        lb.put("Q", 1, lb.message(1, body=b"y" * 200))
    t1 = lb.now                              # the first record of extent 1
    lb.now = t1 - 5_000_000                  # the clock steps back 5 ms...
    lb.put("Q", 1, lb.message(1, body=b"y" * 200))
    lb.put("Q", 1, lb.message(1, body=b"y" * 200))
    lb.now = t1 + 10_000_000                 # ...and then forward
    while lb.extent < 3:
        lb.put("Q", 1, lb.message(1, body=b"y" * 200))
    lb.close()
    plans = plan_extents(str(tmp_path / "log"))
    rows = all_rows_from(plans)
    source = LogInput(log=str(tmp_path / "log"))
    records = source.records(spark, columns=["lsn", "ts_ns"])
    # not t1 - 1: the stepped-back records would be the point, in an extent whose
    # first record is later, and time pushdown skips such extents (it assumes the
    # clock never steps back across extents, docs/pipeline.md)
    times = [t1, t1 + 1, t1 + 1_000_000, rows[-1]["ts_ns"], rows[-1]["ts_ns"] + 1]
    for p in plans[2:]:
        times += [p.first_ts_ns - 1, p.first_ts_ns, p.first_ts_ns + 1]
    for at in times:
        expected = max(r["lsn"] for r in rows if r["ts_ns"] <= at)
        assert resolve_point(spark, records, None, at, source.point_floor(at)) == expected, at
    before = rows[0]["ts_ns"] - 1
    with pytest.raises(RebuildError, match="no log record is as old"):
        resolve_point(spark, records, None, before, source.point_floor(before))
