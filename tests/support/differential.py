"""The pipeline checked against the engine: every row of a log as the pipeline
reads it, and the engine's persistent state at a known LSN."""

from __future__ import annotations

from harbormq.pipeline.extents import plan_extents
from harbormq.pipeline.rebuild import events, plan, spark_rebuild
from harbormq.pipeline.rows import read_extent


def all_rows(spec):
    """Every record of the extents under ``spec`` (a log directory, or several
    comma-separated; str or Path) as pipeline rows, bodies included."""
    return [r for p in plan_extents(str(spec)) for b in read_extent(p, include_body=True)
            for r in b.to_pylist()]


def force_log(qm) -> None:
    async def force():
        await qm.core.log.force()
    qm._call(force())


def engine_state(qm) -> tuple[int, dict]:
    """(LSN, queue -> [(msg_id, priority, seq, backout_count, locked uow)]) of the
    persistent messages, in delivery order, with every record on disk."""
    force_log(qm)

    def snap():
        core = qm.core
        state = {}
        for name, q in core.queues.items():
            msgs = []
            for key in q.iter_keys():
                m = q.lookup(key)
                if m is not None and m.persistent:
                    msgs.append((m.msg_id, m.priority, m.seq, m.backout_count,
                                 q.locked.get(key)))
            state[name] = msgs
        return core.log.end_lsn - 1, state
    return qm._call_sync(snap)


def spark_rebuilt(spark, source, lsn: int, queues, plan_queues=None):
    """The Spark rebuild at ``lsn`` as ({queue: [(msg_id, priority, seq, backout
    count, locked uow)]}, a list for each of ``queues``; the planned targets).
    Every surviving message has its row (spark_rebuild's count)."""
    records = events(spark, source, lsn)
    targets = plan(spark, source, records, lsn, plan_queues)
    result, surviving = spark_rebuild(spark, source, records, lsn, targets)
    rows = result.collect()
    assert len(rows) == surviving
    got: dict = {q: [] for q in queues}
    for r in rows:
        got[r["queue"]].append((r["msg_id"], r["priority"], r["seq"], r["backout_count"],
                                r["locked_uow"]))
    records.unpersist()
    return got, targets
