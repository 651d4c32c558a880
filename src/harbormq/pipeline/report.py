"""The ``report`` job: log retention, units of work, queue activity, topics.

Written to OUT as ``report.json`` and PNG plots (``retention.png``,
``uow_durations.png``, ``queue_<name>.png``), plus ``index.html`` that shows
them together (``report_page.py`` draws them). Spark aggregates; only
per-checkpoint, per-UOW-summary and per-bucket rows reach the driver.

Queue series use time buckets: the narrowest of 1 s, 5 s, 15 s, one minute
or a multiple of minutes such that a log spans at most MAX_BUCKETS of them
(rates are always given per minute). A message counts in the depth at the end of every
bucket between the commit of its put and the commit of its removal; the
oldest message age at a bucket end is that time minus the oldest put time
among them. The log read may start after some messages were put: their
depth is not known, so depth counts from the start of the log read.
"""

from __future__ import annotations

import json
from pathlib import Path

from .report_page import summary, write_page
from .session import Progress

MAX_BUCKETS = 240
TOP_UOWS = 10
NS_MIN = 60 * 1_000_000_000


def bucket_width(span_ns: int) -> int:
    """The narrowest bucket (ns) that cuts ``span_ns`` into at most MAX_BUCKETS."""
    for seconds in (1, 5, 15, 60):
        if span_ns <= MAX_BUCKETS * seconds * 1_000_000_000:
            return seconds * 1_000_000_000
    return -(-span_ns // MAX_BUCKETS // NS_MIN) * NS_MIN


def run_report(spark, records, out: Path, progress: Progress | None = None) -> dict:
    from pyspark.sql import functions as F
    progress = progress or Progress("report", 6)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    records = records.drop("body", "image_messages").cache()
    span = records.agg(F.min("ts_ns"), F.max("ts_ns"), F.min("lsn"), F.count("*")).first()
    t0, t1, first_lsn, total = span
    report = {"records": total, "first_ts_ns": t0, "last_ts_ns": t1, "first_lsn": first_lsn}

    # (a) log retention at each checkpoint
    extents = sorted(r[0] for r in records.select(
        (F.col("lsn") - F.col("offset") + 4096).alias("first")).distinct().collect())
    cps = [r.asDict() for r in records.filter("type = 'CHECKPOINT_END'")
           .select("lsn", "ts_ns", "restart_lsn").orderBy("lsn").collect()]
    for c in cps:
        c["log_bytes_needed"] = c["lsn"] - c["restart_lsn"]
        c["restart_extent_first_lsn"] = max((f for f in extents if f <= c["restart_lsn"]),
                                            default=None)
    report["retention"] = cps
    progress.stage(f"retention: {len(cps)} checkpoint(s)")

    # (b) units of work
    uow = (records.filter("uow_id > 0 AND NOT auto_commit")
           .groupBy("uow_id")
           .agg(F.min("ts_ns").alias("first_ns"), F.max("ts_ns").alias("last_ns"),
                F.max(F.when(F.col("type") == "UOW_BEGIN", 1).otherwise(0)).alias("begun"),
                F.max(F.when(F.col("type") == "UOW_COMMIT", 1).otherwise(0)).alias("committed"),
                F.max(F.when(F.col("type") == "UOW_BACKOUT", 1).otherwise(0)).alias("backed_out"),
                F.max(F.when(F.col("type") == "UOW_PREPARE", 1).otherwise(0)).alias("prepared"),
                F.sum(F.when(F.col("type").isin("MSG_PUT", "MSG_PUBLISH", "MSG_GET"), 1)
                      .otherwise(0))
                .alias("operations"))
           .withColumn("duration_ms", (F.col("last_ns") - F.col("first_ns")) / 1e6)
           .withColumn("outcome", F.when(F.col("committed") == 1, "committed")
                       .when(F.col("backed_out") == 1, "backed out")
                       .when(F.col("prepared") == 1, "in doubt").otherwise("in flight"))).cache()
    ended = uow.filter("outcome IN ('committed', 'backed out') AND begun = 1")
    quantiles = ended.approxQuantile("duration_ms", [0.5, 0.9, 0.99, 1.0], 0.001) \
        if ended.first() is not None else []
    hist_rows = (ended.withColumn("b", F.floor(F.log10(F.greatest(F.col("duration_ms"),
                                                                     F.lit(0.001)))))
                 .groupBy("b").count().orderBy("b").collect())
    report["uows"] = {
        "by_outcome": {r["outcome"]: r["count"] for r in uow.groupBy("outcome").count()
                       .collect()},
        "duration_ms_quantiles": dict(zip(["p50", "p90", "p99", "max"], quantiles,
                                          strict=False)),
        "duration_ms_histogram_log10": {int(r["b"]): r["count"] for r in hist_rows},
        "longest": [r.asDict() for r in ended.orderBy(F.desc("duration_ms"))
                    .select("uow_id", "duration_ms", "outcome", "operations")
                    .limit(TOP_UOWS).collect()],
        "in_doubt_at_end": [r[0] for r in uow.filter("outcome = 'in doubt'")
                            .select("uow_id").orderBy("uow_id").collect()],
        "in_flight_at_end": [r[0] for r in uow.filter("outcome = 'in flight'")
                             .select("uow_id").orderBy("uow_id").collect()],
    }
    uow.unpersist()
    progress.stage(f"units of work: {report['uows']['by_outcome']}")

    # (c) queues
    width = bucket_width(t1 - t0 + 1)
    report["bucket_seconds"] = width / 1e9
    report["queues"] = _queue_series(records, t0, width)
    progress.stage(f"queues: {len(report['queues'])}")

    # (d) topics: publications by their topic string
    report["topics"] = topic_traffic(records)
    progress.stage(f"topics: {len(report['topics'])}")
    records.unpersist()
    report["summary"] = summary(report)
    write_page(report, out)
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    progress.stage(f"wrote {out / 'report.json'}, plots and index.html")
    return report


def _queue_series(records, t0: int, width: int) -> dict:
    from pyspark.sql import functions as F
    commits = records.filter("type = 'UOW_COMMIT'").select(
        "uow_id", F.col("ts_ns").alias("commit_ns"))
    # (a publication's rows are puts, one per target queue)
    ops = (records.filter("type IN ('MSG_PUT', 'MSG_PUBLISH', 'MSG_GET', 'MSG_EXPIRE')")
           .join(commits, "uow_id", "left")
           .withColumn("effect_ns", F.when(F.col("auto_commit"), F.col("ts_ns"))
                       .otherwise(F.col("commit_ns")))
           .filter("effect_ns IS NOT NULL")
           .withColumn("bucket", F.floor((F.col("effect_ns") - t0) / width)))
    rates = (ops.groupBy("object", "bucket", "type").count().collect())
    puts = ops.filter("type IN ('MSG_PUT', 'MSG_PUBLISH')").select(
        "object", "object_id", "priority", "seq", "put_time_ns", F.col("bucket").alias("pb"))
    gone = ops.filter("type NOT IN ('MSG_PUT', 'MSG_PUBLISH')").select(
        "object_id", "priority", "seq", F.col("bucket").alias("rb"))
    last = F.lit((records.agg(F.max("ts_ns")).first()[0] - t0) // width + 1)
    alive = (puts.join(gone, ["object_id", "priority", "seq"], "left")
             .withColumn("rb", F.coalesce("rb", last))
             .filter("rb > pb")
             .withColumn("bucket", F.explode(F.sequence("pb", F.col("rb") - 1)))
             .groupBy("object", "bucket")
             .agg(F.count("*").alias("depth"), F.min("put_time_ns").alias("oldest_put_ns"))
             .collect())
    out: dict[str, dict] = {}

    def series(q):
        return out.setdefault(q, {"bucket_start_ns": {}, "puts": {}, "gets": {}, "depth": {},
                                  "oldest_age_s": {}})
    for r in rates:
        s = series(r["object"])
        key = "puts" if r["type"] in ("MSG_PUT", "MSG_PUBLISH") else "gets"
        s[key][int(r["bucket"])] = s[key].get(int(r["bucket"]), 0) + r["count"]
    for r in alive:
        s = series(r["object"])
        b = int(r["bucket"])
        s["depth"][b] = r["depth"]
        s["oldest_age_s"][b] = (t0 + (b + 1) * width - r["oldest_put_ns"]) / 1e9
    for s in out.values():
        buckets = sorted(set(s["puts"]) | set(s["gets"]) | set(s["depth"]))
        s["buckets"] = buckets
        s["bucket_start_ns"] = [t0 + b * width for b in buckets]
        per_min = width / NS_MIN
        s["puts_per_minute"] = [s["puts"].get(b, 0) / per_min for b in buckets]
        s["gets_per_minute"] = [s["gets"].get(b, 0) / per_min for b in buckets]
        s["puts_total"], s["gets_total"] = sum(s["puts"].values()), sum(s["gets"].values())
        s["depth"] = [s["depth"].get(b, 0) for b in buckets]
        s["oldest_age_s"] = [s["oldest_age_s"].get(b) for b in buckets]
        del s["puts"], s["gets"]
    return out


#: the message property that names a publication's topic string (pub/sub sets it)
TOPIC_PROPERTY = "MQTopicString"


def topic_traffic(records) -> dict:
    """Per topic string, what was published to it and committed: publications
    (the publications' own message ids), deliveries (a message on one subscription's queue: a
    MSG_PUBLISH target, or a put of its own carrying the topic, as to a
    remote destination), the queues they reached, body bytes (once per
    publication), log bytes of the MSG_PUBLISH records, first and last time."""
    from pyspark.sql import functions as F
    commits = records.filter("type = 'UOW_COMMIT'").select("uow_id", F.lit(True).alias("done"))
    topic = F.col("properties").getItem(TOPIC_PROPERTY)
    # a target's id is the publication's with the target's number in its last
    # four bytes (log.records.target_msg_id): the publication is that stem
    stem = F.when((F.col("type") == "MSG_PUBLISH") & (F.length("msg_id") == 24),
                  F.concat(F.substring("msg_id", 1, 20), F.lit(bytes(4))))
    rows = (records.filter("type IN ('MSG_PUT', 'MSG_PUBLISH')")
            .withColumn("topic", topic).filter("topic IS NOT NULL")
            .withColumn("publication", F.coalesce(stem, F.col("msg_id")))
            .join(commits, "uow_id", "left")
            .filter(F.col("auto_commit") | F.col("done").isNotNull()))
    per_publication = (rows.groupBy("topic", "publication")
                       .agg(F.first("size").alias("size"),
                            F.sum(F.when(F.col("type") == "MSG_PUBLISH", F.col("length"))
                                  .otherwise(0)).alias("log_bytes")))
    bytes_by_topic = {r["topic"]: r for r in per_publication.groupBy("topic").agg(
        F.sum("size").alias("body_bytes"), F.sum("log_bytes").alias("log_bytes")).collect()}
    out = {}
    for r in (rows.groupBy("topic")
              .agg(F.countDistinct("publication").alias("publications"),
                   F.count("*").alias("deliveries"),
                   F.countDistinct("object").alias("queues_reached"),
                   F.min("ts_ns").alias("first_ns"), F.max("ts_ns").alias("last_ns"))
              .orderBy("topic").collect()):
        b = bytes_by_topic[r["topic"]]
        out[r["topic"]] = {"publications": r["publications"], "deliveries": r["deliveries"],
                           "queues_reached": r["queues_reached"],
                           "body_bytes": b["body_bytes"], "log_bytes": b["log_bytes"],
                           "first_ns": r["first_ns"], "last_ns": r["last_ns"]}
    return out
