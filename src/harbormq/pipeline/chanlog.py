"""Channel batches read back from a queue manager's log.

A channel leaves no record type of its own in the log (``CHANNEL_SYNC`` is
reserved and unused): each side replaces its synchronisation data, a message
on SYSTEM.CHANNEL.SYNCQ whose body is JSON (channel, side, sequence number
and LUWID of the batch, partner), inside the batch's own unit of work
(channels/sync.py). So a unit of work holding such a put *is* a batch, and
its other records are the batch's messages: on the sender the gets from the
transmission queue (less the ones it dead-lettered, a get and a put in the
same unit), on the receiver the puts to the target queues and the
dead-letter queue. Its UOW_PREPARE / UOW_COMMIT / UOW_BACKOUT say when it
was in doubt and how it ended. A sync put in a unit of work without
messages is a RESET CHANNEL.

Reading the sync data needs message bodies: from a log (``includeBody``) or
a lake ingested ``--with-bodies``.
"""

from __future__ import annotations

from ..core.objects import CHANNEL_SYNCQ
from ..errors import HarbormqError
from .extents import plan_extents
from .logdata import LogInput

SDR, RCVR = "SDR", "RCVR"
SYNC_SCHEMA = ("channel STRING, side STRING, seq LONG, luwid STRING, partner STRING, "
               "reset BOOLEAN")
END_TYPES = ("UOW_PREPARE", "UOW_COMMIT", "UOW_BACKOUT")


class ChannelLogError(HarbormqError):
    msgid = "HMQ7641E"


def qm_name_of(source: LogInput) -> str:
    """The queue manager whose log ``source`` is (its extents' headers, or the
    lake's manifest); one input is one queue manager."""
    if source.qm_name:
        return source.qm_name
    if source.lake is not None:
        from .ingest import Lake
        name = Lake(source.lake).manifest()["qm_name"]
        if not name:
            raise ChannelLogError(f"the lake {source.lake} holds no records yet",
                                  hint="run 'harbormq pipeline ingest' first")
        return name
    names = sorted({p.qm_name for p in plan_extents(source.log)})
    if len(names) != 1:
        raise ChannelLogError(
            f"--log {source.log} holds the extents of {len(names)} queue managers "
            f"({', '.join(names) or 'none'}); give each queue manager's log as its own --log",
            hint="one --log per queue manager; commas join a log and its archive")
    return names[0]


def sync_records(spark, source: LogInput, uows: list[int] | None = None):
    """The sync data puts (one per batch or reset) with the JSON parsed:
    lsn, ts_ns, uow_id and the SYNC_SCHEMA fields."""
    from pyspark.sql import functions as F

    from .ingest import LakeError
    try:
        df = source.records(spark, include_body=True, columns=[
            "lsn", "ts_ns", "type", "uow_id", "object", "body"])
    except LakeError:
        raise ChannelLogError(
            f"the lake {source.lake} holds no message bodies, and the channels' "
            f"synchronisation data are message bodies (on {CHANNEL_SYNCQ})",
            hint="read the log with --log, or ingest the lake with --with-bodies") from None
    df = df.filter((F.col("object") == CHANNEL_SYNCQ) & (F.col("type") == "MSG_PUT"))
    if uows is not None:
        df = df.filter(F.col("uow_id").isin(uows))
    return df.select("lsn", "ts_ns", "uow_id",
                     F.from_json(F.col("body").cast("string"), SYNC_SCHEMA).alias("s")) \
        .select("lsn", "ts_ns", "uow_id", "s.*")


def batch_rows(spark, source: LogInput, qm: str) -> dict:
    """Every batch and reset of every channel in one queue manager's log, one
    dict per sync put; and the times of the queue manager's restarts."""
    from pyspark.sql import functions as F
    narrow = source.records(spark, columns=[
        "lsn", "ts_ns", "type", "auto_commit", "uow_id", "object", "properties"])
    sync = sync_records(spark, source).cache()
    try:
        uows = sync.select("uow_id").distinct()
        mine = narrow.join(F.broadcast(uows), "uow_id")

        def first(kind, col):
            return F.min(F.when(F.col("type") == kind, F.col(col)))
        ends = (mine.filter(F.col("type").isin(*END_TYPES)).groupBy("uow_id")
                .agg(first("UOW_PREPARE", "lsn").alias("prepare_lsn"),
                     first("UOW_PREPARE", "ts_ns").alias("prepare_ns"),
                     first("UOW_COMMIT", "lsn").alias("commit_lsn"),
                     first("UOW_COMMIT", "ts_ns").alias("commit_ns"),
                     first("UOW_BACKOUT", "lsn").alias("backout_lsn"),
                     first("UOW_BACKOUT", "ts_ns").alias("backout_ns")))
        is_put = F.col("type") == "MSG_PUT"
        dead = is_put & F.col("properties").getItem("DLH_REASON").isNotNull()
        msgs = (mine.filter(F.col("type").isin("MSG_GET", "MSG_PUT") & ~F.col("auto_commit")
                            & (F.col("object") != CHANNEL_SYNCQ))
                .groupBy("uow_id")
                .agg(F.sum(F.when(F.col("type") == "MSG_GET", 1).otherwise(0)).alias("gets"),
                     F.sum(F.when(is_put, 1).otherwise(0)).alias("puts"),
                     F.sum(F.when(dead, 1).otherwise(0)).alias("dead_letters"),
                     F.min("ts_ns").alias("first_msg_ns")))
        rows = [r.asDict() for r in sync.join(ends, "uow_id", "left")
                .join(msgs, "uow_id", "left").orderBy("lsn").collect()]
    finally:
        sync.unpersist()
    span = narrow.agg(F.min("ts_ns"), F.max("ts_ns")).first()
    starts = [r[0] for r in narrow.filter("type = 'QM_START'").select("ts_ns")
              .orderBy("ts_ns").collect()]
    for r in rows:
        r["qm"] = qm
        gets, puts = r.pop("gets") or 0, r.pop("puts") or 0
        r["dead_letters"] = r["dead_letters"] or 0
        # the sender's own dead letters (no transmission header) were got and put
        r["messages"] = gets - puts if r["side"] == SDR else puts
        r["kind"] = "reset" if gets == 0 and puts == 0 else "batch"
        r["seq_first"] = r["seq"] - r["messages"] + 1
        r["outcome"] = ("committed" if r["commit_lsn"] is not None else
                        "backed out" if r["backout_lsn"] is not None else
                        "in doubt" if r["prepare_lsn"] is not None else "in flight")
        r["end_ns"] = r["commit_ns"] if r["commit_ns"] is not None else r["backout_ns"]
    return {"qm": qm, "batches": rows, "restarts_ns": starts,
            "first_ns": span[0], "last_ns": span[1]}


def messages_of_batch(records, uow_id: int) -> list[dict]:
    """The batch's messages in order (its unit of work's gets or puts, not the
    sync data), for numbering one of them."""
    from pyspark.sql import functions as F
    return [r.asDict() for r in records.filter(
        (F.col("uow_id") == uow_id) & F.col("type").isin("MSG_GET", "MSG_PUT")
        & (F.col("object") != CHANNEL_SYNCQ))
        .select("lsn", "type", "msg_id").orderBy("lsn").collect()]


def message_seq(side: str, batch_seq: int, msgs: list[dict],
                msg_id: bytes) -> tuple[int, int] | None:
    """(the sequence number of ``msg_id``, the batch's first) in a batch whose
    last number is ``batch_seq``: the sender sent its gets in LSN order, less
    those it put on the dead-letter queue; the receiver put each message
    (target or dead-letter queue) in the order received."""
    if side == SDR:
        dlq = {m["msg_id"] for m in msgs if m["type"] == "MSG_PUT"}
        sent = [m["msg_id"] for m in msgs if m["type"] == "MSG_GET" and m["msg_id"] not in dlq]
    else:
        sent = [m["msg_id"] for m in msgs if m["type"] == "MSG_PUT"]
    if msg_id not in sent:
        return None
    first = batch_seq - len(sent) + 1
    return first + sent.index(msg_id), first
