"""The ``rebuild`` job: the committed contents of queues at a point in the log.

The algebra is written down in algebra.py; here it runs as Spark joins that
parallelise by message: per-UOW outcomes (one row per COMMIT), puts and
removals joined to them, image messages exploded, then an anti-join of the
removals. Only the per-queue plan (incarnation, image, clear) and the extent
bounds are collected to the driver.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from ..errors import ConfigError
from ..fsutil import atomic_write, make_dirs
from ..log.records import EXTENT_HEADER_SIZE
from ..unload.loadfile import write_load_file
from .algebra import (
    CONTROL_TYPES,
    MESSAGE_FIELDS,
    RebuildError,
    Target,
    coverage_start,
    plan_targets,
)
from .logdata import LogInput
from .session import Progress

#: columns of a rebuilt queue, in this order (Parquet and the load file)
OUTPUT_COLUMNS = ("queue", "position", "object_id") + MESSAGE_FIELDS + (
    "put_lsn", "commit_lsn", "locked_uow")


def resolve_point(spark, records, at_lsn: int | None, at_time_ns: int | None,
                  lsn_floor: int | None = None) -> int:
    """The LSN of the point: ``at_lsn`` itself, or the last record at or before a time.

    ``lsn_floor``: an LSN that record is known not to lie below
    (``LogInput.point_floor``), so that the scan skips every extent before it.
    An LSN, not a time: a record after it may be older than it."""
    if (at_lsn is None) == (at_time_ns is None):
        raise ConfigError("give exactly one of --at-lsn and --at-time", msgid="HMQ7602E")
    if at_lsn is not None:
        return at_lsn
    if lsn_floor is not None:
        records = records.filter(f"lsn >= {lsn_floor}")
    row = records.filter(f"ts_ns <= {at_time_ns}").agg({"lsn": "max"}).first()
    if row[0] is None:
        raise RebuildError(f"no log record is as old as {at_time_ns} ns since the epoch: the "
                           "log read starts later", hint="add archived extents to the path")
    return row[0]


#: what the set algebra reads of each record: no bodies, no descriptors
EVENT_COLUMNS = ["lsn", "offset", "length", "type", "auto_commit", "uow_id", "object_id",
                 "object", "data", "image_id", "image_messages", "undone_type", "undone_lsn",
                 "priority", "seq", "backout_count"]
EVENT_TYPES = ("MSG_PUT", "MSG_PUBLISH", "MSG_GET", "MSG_EXPIRE", "COMPENSATION", "UOW_BEGIN",
               "UOW_COMMIT", "UOW_BACKOUT", "MEDIA_IMAGE_CHUNK") + CONTROL_TYPES


def events(spark, source: LogInput, at_lsn: int):
    """The records a rebuild reads up to the point, narrow (EVENT_COLUMNS, no
    bodies). From a log they are cached: every later step reads this instead
    of decoding again (each reference to a Python data source is a scan of its
    own). From a lake they are not: each step's query reads only its columns
    and record types from Parquet, with ``lsn <= point`` pushed down. Bodies
    and descriptors are read later, only for the messages that survive."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    records = source.records(spark, columns=EVENT_COLUMNS)
    records = (records.filter(f"lsn <= {at_lsn}").filter(records.type.isin(*EVENT_TYPES))
               # only the planning reads names (of objects created, altered, imaged):
               # message rows match by object id and need not carry a string
               .withColumn("object", F.when(F.col("type").isin(*CONTROL_TYPES),
                                            F.col("object"))))
    if source.rereads_cheaply:
        return records
    return records.persist(StorageLevel.MEMORY_AND_DISK)


def plan(spark, source: LogInput, records, at_lsn: int, queues: list[str] | None
         ) -> list[Target]:
    firsts, ends = source.extent_bounds(records)
    history_from = coverage_start(firsts, ends, at_lsn)
    types = ", ".join(f"'{t}'" for t in CONTROL_TYPES if t != "EXTENT_END")
    control = [r.asDict() for r in records.filter(f"lsn <= {at_lsn} AND type IN ({types})")
               .select("lsn", "type", "object_id", "object", "data", "image_id").collect()]
    targets = plan_targets(control, at_lsn, queues, history_from)
    if history_from > firsts[0] or firsts[0] > 0:
        _check_uows_begin_in_history(records, at_lsn, history_from, targets)
    return targets


def _check_uows_begin_in_history(records, at_lsn: int, history_from: int,
                                 targets: list[Target]) -> None:
    """A unit of work that committed after a queue's floor but began before the
    log read starts may have puts or gets we cannot see: refuse, never guess."""
    floor = min((t.floor_lsn for t in targets), default=at_lsn)
    inside = records.filter(f"lsn >= {history_from} AND lsn <= {at_lsn}")
    commits = inside.filter(f"type = 'UOW_COMMIT' AND lsn > {floor}").select("uow_id", "lsn")
    begins = inside.filter("type = 'UOW_BEGIN'").select("uow_id")
    orphan = commits.join(begins, "uow_id", "left_anti").first()
    if orphan is not None:
        raise RebuildError(f"unit of work {orphan['uow_id']} committed at LSN {orphan['lsn']} "
                           f"but began before LSN {history_from}, where the log read starts",
                           lsn=orphan["lsn"], hint="add the archived extents to the path")


def spark_rebuild(spark, source: LogInput, records, at_lsn: int, targets: list[Target]):
    """The rebuilt queues as one DataFrame (OUTPUT_COLUMNS), in delivery order,
    and how many messages survive (the rows it must have).

    ``records``: ``events(...)`` at ``at_lsn``. Which messages survive is
    decided on those narrow rows; then the extents holding the survivors' put
    records (or image chunks) are read again with bodies, and only those. A
    survivor whose record that second read does not give back has no row (a
    join): ``run_rebuild`` compares the rows it writes with the count."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    tdf = spark.createDataFrame(
        [(t.object_id, t.queue, t.floor_lsn, t.image_id) for t in targets],
        "object_id INT, queue STRING, floor_lsn BIGINT, image_id BIGINT")
    oids = [t.object_id for t in targets] or [-1]
    upto = records.filter(F.col("lsn") <= at_lsn)
    mine = upto.filter(F.col("object_id").isin(oids))
    commits = (upto.filter("type = 'UOW_COMMIT'")
               .select("uow_id", F.col("lsn").alias("commit_lsn")))
    ended = (upto.filter("type IN ('UOW_COMMIT', 'UOW_BACKOUT')").select("uow_id")
             .distinct())

    def with_effect(df):
        """Rows of auto-committed records take effect at their LSN, others at COMMIT."""
        df = df.join(commits, "uow_id", "left")
        return df.withColumn("effect_lsn", F.when(F.col("auto_commit"), F.col("lsn"))
                             .otherwise(F.col("commit_lsn")))

    key = ["object_id", "priority", "seq"]
    first = (F.col("lsn") - F.col("offset") + F.lit(EXTENT_HEADER_SIZE)).alias("extent_first")
    removals = with_effect(mine.filter("type IN ('MSG_GET', 'MSG_EXPIRE')"))
    removed = removals.filter("effect_lsn IS NOT NULL").select(*key)
    # (a publication's rows are its targets' puts: one per queue, at one LSN)
    puts = (with_effect(mine.filter("type IN ('MSG_PUT', 'MSG_PUBLISH')"))
            .join(F.broadcast(tdf), "object_id")
            .filter(F.col("effect_lsn") > F.col("floor_lsn"))
            .select("queue", *key, "backout_count", first, F.col("lsn").alias("record_lsn"),
                    F.lit(None).cast("int").alias("pos"), F.col("lsn").alias("put_lsn"),
                    F.col("effect_lsn").alias("commit_lsn")))
    image = (mine.filter("type = 'MEDIA_IMAGE_CHUNK'")
             .join(F.broadcast(tdf.filter("image_id IS NOT NULL")), ["object_id", "image_id"])
             .select("queue", "object_id", first, F.col("lsn").alias("record_lsn"),
                     F.posexplode("image_messages").alias("pos", "m"))
             .select("queue", "object_id", "m.priority", "m.seq", "m.backout_count",
                     "extent_first", "record_lsn", "pos",
                     F.lit(None).cast("bigint").alias("put_lsn"),
                     F.lit(None).cast("bigint").alias("commit_lsn")))
    undone = mine.filter("type = 'COMPENSATION'").select(F.col("undone_lsn").alias("lsn"))
    locked = (removals.filter("effect_lsn IS NULL")
              .join(ended, "uow_id", "left_anti")
              .join(undone, "lsn", "left_anti")
              .select(*key, F.col("uow_id").alias("locked_uow")))
    counts = (mine.filter("type = 'COMPENSATION' AND undone_type = 'MSG_GET'")
              .join(F.broadcast(tdf.select("object_id", "floor_lsn")), "object_id")
              .filter(F.col("lsn") > F.col("floor_lsn"))
              .groupBy(*key).agg(F.max_by("backout_count", "lsn").alias("undo_count")))
    survivors = (puts.unionByName(image)
                 .join(removed, key, "left_anti")
                 .join(locked, key, "left")
                 .join(counts, key, "left")
                 .withColumn("backout_count", F.coalesce("undo_count", "backout_count"))
                 .drop("undo_count"))
    # computed once: both the extent list below and the final join read it
    # (a local checkpoint is released with the DataFrame; a cache would stay)
    survivors = survivors.localCheckpoint(eager=True)
    surviving = survivors.count()
    needed = [r[0] for r in survivors.select("extent_first").distinct().collect()]
    full = (source.records(spark, include_body=True, extents=needed)
            .filter(F.col("lsn") <= at_lsn)
            .filter("type IN ('MSG_PUT', 'MSG_PUBLISH', 'MEDIA_IMAGE_CHUNK')"))
    payload = [c for c in MESSAGE_FIELDS if c not in key and c != "backout_count"]
    # (by object and seq too: a publication's targets share its LSN)
    put_payload = (full.filter("type IN ('MSG_PUT', 'MSG_PUBLISH')")
                   .select(F.col("lsn").alias("record_lsn"), "object_id", "seq", *payload))
    image_payload = (full.filter("type = 'MEDIA_IMAGE_CHUNK'")
                     .select(F.col("lsn").alias("record_lsn"),
                             F.posexplode("image_messages").alias("pos", "m"))
                     .select("record_lsn", "pos", *[F.col(f"m.{c}").alias(c) for c in payload]))
    msgs = (survivors.filter("pos IS NULL").drop("pos")
            .join(put_payload, ["record_lsn", "object_id", "seq"])
            .unionByName(survivors.filter("pos IS NOT NULL")
                         .join(image_payload, ["record_lsn", "pos"]).drop("pos")))
    order = Window.partitionBy("queue").orderBy(F.desc("priority"), F.asc("seq"))
    return (msgs.withColumn("position", F.row_number().over(order))
            .select(*OUTPUT_COLUMNS).orderBy("queue", "position")), surviving


def run_rebuild(spark, source: LogInput, *, at_lsn: int | None = None,
                at_time_ns: int | None = None, queues: list[str] | None = None,
                out: Path, progress: Progress | None = None) -> dict:
    """Rebuild, write ``out/messages`` (Parquet, by queue) and one load file per
    queue (``out/QUEUE.hmqload``); returns the summary also written as JSON."""
    progress = progress or Progress("rebuild", 5)
    point = resolve_point(spark, source.records(spark, columns=["lsn", "ts_ns"]), at_lsn,
                          at_time_ns, None if at_time_ns is None else
                          source.point_floor(at_time_ns))
    records = events(spark, source, point)
    if source.rereads_cheaply:
        progress.stage(f"point: LSN {point}; reading the lake")
    else:
        progress.stage(f"point: LSN {point}; decoded {records.count()} record(s) (no bodies)")
    targets = plan(spark, source, records, point, queues)
    progress.stage(f"planned {len(targets)} queue(s): " + ", ".join(
        f"{t.queue} (from LSN {t.floor_lsn}{', image %d' % t.image_id if t.image_id else ''})"
        for t in targets))
    result, surviving = spark_rebuild(spark, source, records, point, targets)
    result = result.cache()
    found = result.count()      # (fills the cache the writes below read)
    if found != surviving:
        # never a rebuild that silently lacks messages: nothing is written
        raise RebuildError(
            f"the rebuild at LSN {point} found {surviving} surviving message(s), but the "
            f"second read of their put records (or image entries) gave {found}: the log "
            "changed between its two reads, or a record read once could not be read again",
            hint="run the rebuild again; if it fails the same way, check the extents with "
                 "'harbormq log dump'")
    out = Path(out)
    make_dirs(out, mode=0o755)     # its load files are durable: so is their directory
    result.write.mode("overwrite").partitionBy("queue").parquet(str(out / "messages"))
    progress.stage("wrote Parquet (by queue)")
    # one ordered pass over the result: rows come by queue, then position
    counts = {queue: write_load_file(out / f"{queue}.hmqload", queue, point, rows)
              for queue, rows in itertools.groupby(result.toLocalIterator(),
                                                   key=lambda r: r["queue"])}
    summary = {"at_lsn": point, "queues": {}}
    for t in targets:
        if t.queue not in counts:      # an empty queue still gets its (empty) load file
            counts[t.queue] = write_load_file(out / f"{t.queue}.hmqload", t.queue, point, [])
        summary["queues"][t.queue] = {"messages": counts[t.queue], "object_id": t.object_id,
                                      "floor_lsn": t.floor_lsn, "image_id": t.image_id,
                                      "load_file": f"{t.queue}.hmqload"}
    progress.stage("wrote load files")
    result.unpersist()
    records.unpersist()
    atomic_write(out / "rebuild.json", (json.dumps(summary, indent=2) + "\n").encode(),
                 mode=0o644)
    progress.stage(f"done: {sum(q['messages'] for q in summary['queues'].values())} message(s)")
    return summary
