"""The group's log lake: the logs of every member of a queue sharing group in
one Parquet dataset, in the group's order (docs/pipeline.md, "A queue
sharing group"); a shared queue rebuilt at a past point from it; and a
report of which member did what to each shared queue.

* ``group_ingest`` reads every member's extents on the executors (the
  extents are found on the driver by ``qsg/merge.py``: log directory, then
  archive) and keeps the records about shared messages and units of work:
  SHARED_PUT, SHARED_GET (their stamp, message key, structure, id and
  priority), UOW_COMMIT, UOW_BACKOUT, UOW_PREPARE, COMPENSATION. Every row
  gets ``order_stamp``: its own stamp, or for a record without one the
  highest stamp before it in its member's log (a window per member, as
  ``merge.merged`` carries it), and the lake is written sorted by
  (order_stamp, member, lsn): one ordered log of the group.
* ``group_rebuild``: the messages a shared queue held at a stamp or a time,
  by set algebra: puts committed by then (auto-committed, or in a unit of
  work whose COMMIT record is at or before the point) less gets committed by
  then, a get undone by a COMPENSATION not counted. It is the commit rule's
  result for a log read from the structure's first use (the structure
  backups are not read here: ``qsg/structure_recovery.py`` uses them).
* ``group_report``: per shared queue and member: puts and gets made and
  committed, gets backed out, first and last time.

Not here: the single queue manager's log (``ingest.py``, ``rebuild.py``,
``report.py``); merging in Python for a recovery (``qsg/merge.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..log.reader import ExtentReader
from ..log.records import AUTO_COMMIT, Compensation, LogRecord, MessageRef, RecordType
from ..log.records import SharedChange as _Change
from ..qsg.merge import MemberLog, plan_member
from .session import Progress

T = RecordType
#: the record types the lake keeps
KEPT = {T.SHARED_PUT: "SHARED_PUT", T.SHARED_GET: "SHARED_GET", T.UOW_COMMIT: "UOW_COMMIT",
        T.UOW_BACKOUT: "UOW_BACKOUT", T.UOW_PREPARE: "UOW_PREPARE",
        T.COMPENSATION: "COMPENSATION"}

COLUMNS = ("member", "lsn", "ts_ns", "type", "uow_id", "auto_commit", "queue", "structure",
           "stamp", "msg_key", "msg_id", "priority", "size", "undone_lsn", "backout_count")


def group_schema():
    from pyspark.sql import types as S
    return S.StructType([
        S.StructField("member", S.StringType(), False),
        S.StructField("lsn", S.LongType(), False),
        S.StructField("ts_ns", S.LongType(), False),
        S.StructField("type", S.StringType(), False),
        S.StructField("uow_id", S.LongType(), True),
        S.StructField("auto_commit", S.BooleanType(), False),
        S.StructField("queue", S.StringType(), True),
        S.StructField("structure", S.StringType(), True),
        S.StructField("stamp", S.LongType(), True),
        S.StructField("msg_key", S.LongType(), True),
        S.StructField("msg_id", S.BinaryType(), True),
        S.StructField("priority", S.IntegerType(), True),
        S.StructField("size", S.IntegerType(), True),
        S.StructField("undone_lsn", S.LongType(), True),
        S.StructField("backout_count", S.IntegerType(), True),
    ])


def record_row(member: str, rec: LogRecord) -> tuple | None:
    """One lake row for ``rec``, or None for a record the lake does not keep."""
    name = KEPT.get(rec.type)
    if name is None:
        return None
    stamp = key = msg_id = priority = size = undone = count = structure = None
    queue = rec.object_name or None
    if rec.type == T.SHARED_PUT or rec.type == T.SHARED_GET:
        c = _Change.decode(rec.payload)
        stamp, key, structure = c.stamp, c.msg_key, c.structure
        if rec.type == T.SHARED_PUT:
            m = c.message(with_body=False)
            msg_id, priority, size = m.msg_id, m.priority, len(rec.payload)
        else:
            ref = MessageRef.decode(c.body)
            msg_id, priority = ref.msg_id, ref.priority
    elif rec.type == T.COMPENSATION:
        comp = Compensation.decode(rec.payload)
        undone, count = comp.undone_lsn, comp.backout_count
        key = comp.ref.seq
    return (member, rec.lsn, rec.timestamp_ns, name, rec.uow_id or None,
            bool(rec.flags & AUTO_COMMIT), queue, structure, stamp, key, msg_id, priority, size,
            undone, count)


def read_member_extent(task: tuple) -> list[tuple]:
    """Executor side: the kept rows of one extent of one member's log."""
    member, path, newest, from_lsn = task
    reader = ExtentReader(Path(path), newest=newest)
    out = []
    start = from_lsn if from_lsn > reader.header.first_lsn else None
    for batch in reader.batches(start):
        for rec in batch:
            row = record_row(member, rec)
            if row is not None:
                out.append(row)
    return out


def group_ingest(spark, members: dict[str, MemberLog], lake: Path,
                 progress: Progress | None = None) -> dict:
    """Every member's log into the group's lake at ``lake`` (written anew).
    Archived extents are read where they are."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    progress = progress or Progress("group-ingest", 2)
    tasks = []
    for name, member in sorted(members.items()):
        plan = plan_member(member, 0)
        tasks += [(name, str(e.path), e.newest, 0) for e in plan.extents]
    progress.stage(f"reading {len(tasks)} extents of {len(members)} members")
    rdd = spark.sparkContext.parallelize(tasks, max(1, len(tasks))).flatMap(read_member_extent)
    df = spark.createDataFrame(rdd, group_schema())
    carried = Window.partitionBy("member").orderBy("lsn").rowsBetween(
        Window.unboundedPreceding, Window.currentRow)
    df = df.withColumn("order_stamp", F.coalesce(F.max("stamp").over(carried), F.lit(0)))
    progress.stage(f"writing the lake {lake}")
    df.orderBy("order_stamp", "member", "lsn").write.mode("overwrite").parquet(str(lake))
    written = spark.read.parquet(str(lake))
    counts = {r["member"]: r["count"] for r in written.groupBy("member").count().collect()}
    return {"lake": str(lake), "members": counts, "extents": len(tasks)}


def _effects(spark, lake: Path, at_stamp: int | None, at_time_ns: int | None):
    """The committed puts and gets of every shared queue by the point, each
    with the stamp and time of its decision."""
    from pyspark.sql import functions as F
    d = spark.read.parquet(str(lake))
    commits = (d.filter(F.col("type") == "UOW_COMMIT")
               .select("member", "uow_id", F.col("order_stamp").alias("decided_stamp"),
                       F.col("ts_ns").alias("decided_ns")))
    undone = (d.filter(F.col("type") == "COMPENSATION")
              .select("member", F.col("undone_lsn").alias("lsn")))
    changes = d.filter(F.col("type").isin("SHARED_PUT", "SHARED_GET"))
    auto = (changes.filter("auto_commit")
            .withColumn("decided_stamp", F.col("stamp")).withColumn("decided_ns", F.col("ts_ns")))
    in_uow = (changes.filter(~F.col("auto_commit")).join(commits, ["member", "uow_id"])
              .join(undone, ["member", "lsn"], "left_anti"))
    eff = auto.unionByName(in_uow)
    if at_stamp is not None:
        eff = eff.filter(F.col("decided_stamp") <= at_stamp)
    if at_time_ns is not None:
        eff = eff.filter(F.col("decided_ns") <= at_time_ns)
    return eff


def group_rebuild(spark, lake: Path, queues: list[str] | None = None, *,
                  at_stamp: int | None = None, at_time_ns: int | None = None
                  ) -> dict[str, list[dict]]:
    """The messages each shared queue (of ``queues``, or every one) held at the
    point (the end of the lake when none is given), in delivery order:
    priority, then key (FIFO in the group). One Spark job for all of them."""
    from pyspark.sql import functions as F
    eff = _effects(spark, lake, at_stamp, at_time_ns)
    if queues is not None:
        eff = eff.filter(F.col("queue").isin(list(queues)))
    puts = eff.filter(F.col("type") == "SHARED_PUT")
    gets = eff.filter(F.col("type") == "SHARED_GET").select("msg_key")
    left = (puts.join(gets, "msg_key", "left_anti")
            .select("queue", "msg_key", "msg_id", "priority", "stamp",
                    F.col("member").alias("put_by"), "ts_ns"))
    out: dict[str, list[dict]] = {q: [] for q in queues or ()}
    for r in left.orderBy("queue", F.desc("priority"), "msg_key").collect():
        row = r.asDict()
        out.setdefault(row.pop("queue"), []).append(row)
    return out


def group_report(spark, lake: Path, out: Path | None = None) -> dict:
    """Which member did what to each shared queue: puts and gets made, puts
    and gets committed, gets backed out, first and last time; written to
    ``out/group_report.json`` when ``out`` is given."""
    from pyspark.sql import functions as F
    d = spark.read.parquet(str(lake))
    made = (d.filter(F.col("type").isin("SHARED_PUT", "SHARED_GET"))
            .groupBy("queue", "member")
            .agg(F.sum(F.when(F.col("type") == "SHARED_PUT", 1).otherwise(0)).alias("puts"),
                 F.sum(F.when(F.col("type") == "SHARED_GET", 1).otherwise(0)).alias("gets"),
                 F.min("ts_ns").alias("first_ns"), F.max("ts_ns").alias("last_ns")))
    eff = _effects(spark, lake, None, None)
    done = (eff.groupBy("queue", "member")
            .agg(F.sum(F.when(F.col("type") == "SHARED_PUT", 1).otherwise(0))
                 .alias("puts_committed"),
                 F.sum(F.when(F.col("type") == "SHARED_GET", 1).otherwise(0))
                 .alias("gets_committed")))
    gets = d.filter(F.col("type") == "SHARED_GET").select("member", "lsn", "queue")
    backed = (d.filter(F.col("type") == "COMPENSATION")
              .select("member", F.col("undone_lsn").alias("lsn"))
              .join(gets, ["member", "lsn"]).groupBy("queue", "member")
              .agg(F.count("*").alias("gets_backed_out")))
    rows = (made.join(done, ["queue", "member"], "left").join(backed, ["queue", "member"], "left")
            .fillna(0, ["puts_committed", "gets_committed", "gets_backed_out"])
            .orderBy("queue", "member").collect())
    report = {"queues": {}}
    for r in rows:
        report["queues"].setdefault(r["queue"], {})[r["member"]] = {
            k: int(r[k]) for k in ("puts", "gets", "puts_committed", "gets_committed",
                                   "gets_backed_out", "first_ns", "last_ns")}
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "group_report.json").write_text(json.dumps(report, indent=1))
    return report
