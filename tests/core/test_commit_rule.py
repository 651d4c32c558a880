"""The commit rule (harbormq/log/replay.py) is written once: restart redo and
media recovery drive it. The pipeline computes the same thing by set algebra
(pipeline/algebra.py). Here all three agree on one log: the rule replayed from
the log's start, the pipeline's plain-Python reference, and the queue manager
that wrote the log. The log holds auto-committed puts and gets, units of work
committed, backed out (with their backout counts) and in flight, and a commit
that decides joined units of work."""

from __future__ import annotations

import random
from dataclasses import replace

from support.differential import all_rows, engine_state

from harbormq.log.records import RecordType, decode_json
from harbormq.log.replay import CommitRule
from harbormq.pipeline.algebra import CONTROL_TYPES, plan_targets, reference_rebuild


class DictEffects:
    """The rule's effects on plain dicts: queue name -> key -> message."""

    def __init__(self):
        self.queues: dict[str, dict] = {}
        self.names: dict[int, str] = {}     # object id -> queue name (live incarnation)

    def target(self, rec):
        return self.names.get(rec.object_id)

    def due(self, target, lsn):
        return True

    def seen_put(self, target, msg):
        pass

    def opened(self, op, rec):
        return True

    def closed(self, op, applied):
        pass

    def put(self, target, msg, lsn):
        self.queues[target][msg.key] = msg

    def delete(self, target, key, lsn, op):
        self.queues[target].pop(key, None)

    def backed_out(self, op, count, lsn):
        msgs = self.queues[op.target]
        if op.key in msgs:
            msgs[op.key] = replace(msgs[op.key], backout_count=count)


def replay(qm) -> dict[str, list[tuple]]:
    """Every queue's committed messages by the rule: (msg_id, priority, seq,
    backout count), in delivery order."""
    effects = DictEffects()
    rule = CommitRule(effects)
    log = qm.core.log
    for rec in log.read_from(log.chain()[0].first_lsn):
        if rule.feed(rec):
            continue
        if rec.type == RecordType.OBJECT_CREATE and \
                decode_json(rec.payload).get("type") == "QLOCAL":
            effects.names[rec.object_id] = rec.object_name
            effects.queues[rec.object_name] = {}
    return {name: [(m.msg_id, m.priority, m.seq, m.backout_count)
                   for _, m in sorted(msgs.items())]
            for name, msgs in effects.queues.items()}


def pipeline_reference(log_dir, at_lsn) -> dict[str, list[tuple]]:
    rows = all_rows(str(log_dir))
    control = [r for r in rows if r["type"] in CONTROL_TYPES and r["lsn"] <= at_lsn]
    targets = plan_targets(control, at_lsn, None, 0)
    got = reference_rebuild(rows, at_lsn, targets)
    return {name: [(m["msg_id"], m["priority"], m["seq"], m["backout_count"]) for m in msgs]
            for name, msgs in got.items()}


def test_the_rule_the_pipeline_and_the_engine_agree(make_qm, open_qm):
    make_qm(log_file_pages=256)
    qm = open_qm()
    rng = random.Random(5)
    for q in ("A", "B"):
        qm.define_queue(q, DEFPSIST="YES", BOTHRESH=0)
    for i in range(60):
        qm.put(rng.choice("AB"), f"auto-{i}".encode(), priority=rng.randrange(10))
    for _ in range(10):
        qm.get("A")
    for i in range(15):                       # units of work: committed or backed out
        uow = qm.begin()
        uow.put("B", f"uow-{i}".encode(), priority=rng.randrange(10))
        uow.get("A")
        uow.commit() if i % 3 else uow.backout()
    for _ in range(4):                        # gets backed out: backout counts
        for _ in range(2):
            uow = qm.begin()
            got = uow.get("B")
            assert got is not None
            uow.backout()
    open_uow = qm.begin()                     # in flight at the end: no effect
    open_uow.put("A", b"in flight")
    open_uow.get("B")

    def deliver(queue):                       # a get under a unit of work of its own
        def run():
            uow = qm.core.begin(owner="joined")
            qm.core.get_nowait(queue, uow)
            return uow
        return qm._call_sync(run)
    d1, d2 = deliver("A"), deliver("A")
    txn = qm.begin()
    txn.put("B", b"decided with two deliveries")
    qm._call(qm.core.commit(txn.uow, joined=[d1, d2]))

    at_lsn, state = engine_state(qm)
    engine = {name: [(m[0], m[1], m[2], m[3]) for m in msgs] for name, msgs in state.items()
              if name in ("A", "B")}
    rule = {name: msgs for name, msgs in replay(qm).items() if name in ("A", "B")}
    reference = {name: msgs for name, msgs in
                 pipeline_reference(qm.config.log_dir, at_lsn).items() if name in ("A", "B")}
    assert rule == engine
    assert reference == engine
    # the same first message got and backed out 8 times
    assert max(m[3] for m in engine["B"]) == 8, "backout counts are part of the comparison"
    open_uow.backout()
