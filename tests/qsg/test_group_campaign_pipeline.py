"""The pipeline over a queue sharing group (pipeline/group.py), with a real
Spark session: three members' logs (one of them only in its archive) in one
lake ordered by stamp; a shared queue rebuilt at the end equals the
structure in PostgreSQL, and at a past stamp equals the structure as it was
then; the report says which member did what."""

from __future__ import annotations

import json
import random

import psycopg
import pytest
from support.qsg_logs import load, log_group, rows

from harbormq.log import archive
from harbormq.log.reader import read_header
from harbormq.qsg.merge import MemberLog

pytest.importorskip("pyspark")


def available(conninfo: str, queue: str) -> list[int]:
    """The committed messages of a queue in PostgreSQL (gettable, or being got)."""
    return [k for k, (q, state, *_rest) in sorted(rows(conninfo).items())
            if q == queue and state in ("AVAILABLE", "GOT", "PREP_GOT")]


def test_group_lake_rebuild_at_points_and_report(qsg_db, tmp_path, spark):
    from harbormq.pipeline.group import group_ingest, group_rebuild
    members = log_group(qsg_db, tmp_path / "logs", pages=4)
    rng = random.Random(4)
    load(members, rng, 120)
    for m in members:
        m.commit_open()
    at_middle = {q: available(qsg_db, q) for q in ("SQ1", "SQ2")}
    with psycopg.connect(qsg_db) as conn:
        middle_stamp = conn.execute("SELECT last_value FROM hmq_stamp").fetchone()[0]
    load(members, rng, 120)
    for m in members:
        m.commit_open()
        m.flush()
    at_end = {q: available(qsg_db, q) for q in ("SQ1", "SQ2")}
    assert at_end != at_middle
    # QM2's older extents are only in its archive
    arch = tmp_path / "archive"
    files = sorted(members[1].log_dir.glob("S*.LOG"))
    headers = [read_header(p) for p in files]
    assert len(files) >= 2
    for path, h, nxt in zip(files[:-1], headers, headers[1:], strict=False):
        archive.archive_extent(path, h.extent_number, h.first_lsn, nxt.first_lsn, b"{}",
                               [arch], "QM2")
        path.unlink()
    logs = {m.name: MemberLog(m.name, m.log_dir) for m in members}
    logs["QM2"] = MemberLog("QM2", members[1].log_dir, (arch,))

    lake = tmp_path / "lake"
    summary = group_ingest(spark, logs, lake)
    assert set(summary["members"]) == {"QM1", "QM2", "QM3"}
    ordered = spark.read.parquet(str(lake)).select("order_stamp", "member", "lsn").collect()
    keys = [(r["order_stamp"], r["member"], r["lsn"]) for r in ordered]
    assert keys == sorted(keys)
    end = group_rebuild(spark, lake)
    middle = group_rebuild(spark, lake, ["SQ1", "SQ2"], at_stamp=middle_stamp)
    for q in ("SQ1", "SQ2"):
        assert [r["msg_key"] for r in end[q]] == at_end[q], q      # delivery order: FIFO
        assert sorted(r["msg_key"] for r in middle[q]) == at_middle[q], q
    assert "OTHER" in end                    # the other structure's queue, on its own
    # the report through the command line (the same session)
    from harbormq.pipeline.cli import main
    assert main(["group-report", "--lake", str(lake), "--out", str(tmp_path / "report")]) == 0
    report = json.loads((tmp_path / "report" / "group_report.json").read_text())
    with psycopg.connect(qsg_db) as conn:
        for q in ("SQ1", "SQ2"):
            for m in ("QM1", "QM2", "QM3"):
                got = report["queues"][q][m]
                assert got["puts"] >= got["puts_committed"] > 0
                assert got["gets"] >= got["gets_committed"]
        outcomes = conn.execute("SELECT count(*) FROM hmq_uow_outcomes WHERE outcome = "
                                "'backout'").fetchone()[0]
    backed = sum(v["gets_backed_out"] for q in report["queues"].values() for v in q.values())
    assert backed <= outcomes * 4
    for m in members:
        m.store.close()
