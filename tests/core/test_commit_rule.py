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


def replay(qm, records=None) -> dict[str, list[tuple]]:
    """Every queue's committed messages by the rule: (msg_id, priority, seq,
    backout count), in delivery order (``records``: the log, by default read
    from the oldest extent it still needs)."""
    effects = DictEffects()
    rule = CommitRule(effects)
    log = qm.core.log
    for rec in records if records is not None else log.read_from(log.chain()[0].first_lsn):
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



def test_publications_the_rule_the_pipeline_and_the_engine_agree(make_qm, open_qm):
    """MSG_PUBLISH records (one message on several queues) among puts and gets:
    auto-committed, in units of work committed, backed out (one compensation
    for the record) and in flight, a queue named twice, a target got again;
    and a publication whose target queue was deleted and defined again (the
    new incarnation must not take it)."""
    from harbormq.log.records import Message
    make_qm(log_file_pages=256)
    qm = open_qm()
    rng = random.Random(7)
    for q in ("A", "B", "C", "GONE"):
        qm.define_queue(q, DEFPSIST="YES", BOTHRESH=0)

    def publish(queues, body, uow=None):
        msg = Message(body=body, priority=rng.randrange(10))
        return qm._call(qm.core.publish(queues, msg, uow.uow if uow else None))

    for i in range(20):
        publish(rng.sample(["A", "B", "C"], rng.randrange(1, 4)), f"auto-{i}".encode())
        qm.put(rng.choice("ABC"), f"put-{i}".encode())
    publish(["A", "A", "B"], b"twice on A")
    publish(["GONE", "C"], b"to a queue deleted later")
    for _ in range(5):
        qm.get("B")
    for i in range(9):
        uow = qm.begin()
        publish(["A", "C"], f"uow-{i}".encode(), uow)
        uow.put("B", f"uow-put-{i}".encode())
        uow.get("C")
        publish(["B"], f"uow-b-{i}".encode(), uow)
        uow.commit() if i % 3 else uow.backout()
    qm.delete_queue("GONE", purge=True)
    qm.define_queue("GONE", DEFPSIST="YES")
    publish(["GONE"], b"new incarnation")
    open_uow = qm.begin()
    publish(["A", "B", "C"], b"in flight", open_uow)

    at_lsn, state = engine_state(qm)
    names = ("A", "B", "C", "GONE")
    engine = {name: [(m[0], m[1], m[2], m[3]) for m in msgs] for name, msgs in state.items()
              if name in names}
    rule = {name: msgs for name, msgs in replay(qm).items() if name in names}
    reference = {name: msgs for name, msgs in
                 pipeline_reference(qm.config.log_dir, at_lsn).items() if name in names}
    assert engine["GONE"] and len(engine["A"]) > 20
    assert rule == engine
    assert reference == engine
    open_uow.backout()

# --- log shunting ---------------------------------------------------------------------------

class RecordingEffects:
    """Every effect the rule applies, in order: (kind, object id, key, LSN, detail)."""

    def __init__(self, oids):
        self.oids = set(oids)
        self.effects = []

    def target(self, rec):
        return rec.object_id if rec.object_id in self.oids else None

    def due(self, target, lsn):
        return True

    def seen_put(self, target, msg):
        pass

    def opened(self, op, rec):
        return True

    def closed(self, op, applied):
        pass

    def put(self, target, msg, lsn):
        self.effects.append(("put", target, msg.key, lsn, msg.body))

    def delete(self, target, key, lsn, op):
        self.effects.append(("delete", target, key, lsn, None))

    def backed_out(self, op, count, lsn):
        self.effects.append(("backout", op.target, op.key, lsn, count))


def run_rule(records, oids, from_lsn=0):
    """(effects, units of work open at the end) of the rule fed ``records`` from
    ``from_lsn`` on, as restart redo reads them from a restart point."""
    fx = RecordingEffects(oids)
    rule = CommitRule(fx)
    for rec in records:
        if rec.lsn >= from_lsn:
            rule.feed(rec)
    units = {u.id: (u.state, sorted((op.kind, op.key) for op in u.ops.values()))
             for u in rule.open.values()}
    return fx.effects, units, rule


def test_the_rule_from_every_restart_point_of_a_log_with_shunts(make_qm, open_qm, home):
    """A circular log (large enough not to wrap, so that it can also be read from
    its start) where long units of work are shunted: committed, backed out, in
    doubt, in flight, and a delivery decided by another unit's COMMIT. The rule
    replayed from every checkpoint's restart point, as restart redo reads the
    log, gives every effect from that point on exactly as the replay from the
    start does, and leaves the same units open with the same operations; the
    replay from the start, the pipeline (which does not read shunts) and the
    engine agree."""
    from harbormq.config import QMConfig
    make_qm(log_file_pages=32, log_primary=24, log_secondary=2, checkpoint_records=100)
    config = QMConfig.load("QM1", home)
    config.tuning.flush_interval_ms = 10**9        # stores written by checkpoints only
    config.save()
    qm = open_qm()
    rng = random.Random(11)
    log = qm.core.log

    def big(tag):
        return tag.encode() * (8000 // len(tag))

    def traffic(extents):
        end = log.end_lsn + extents * log.extent_size
        while log.end_lsn < end:
            with qm.begin(owner="traffic") as u:
                for _ in range(6):
                    u.put("F", b"f" * 2500, priority=rng.randrange(10))
            with qm.begin(owner="traffic") as u:
                for _ in range(6):
                    u.get("F")

    qm.define_queue("F", DEFPSIST="YES", MAXDEPTH=100_000)
    traffic(1)              # extent 0, the first to be reused (the history starts after it)
    start = log.state.active.first_lsn
    for q in ("A", "B"):
        qm.define_queue(q, DEFPSIST="YES", BOTHRESH=0, MAXDEPTH=100_000)
    for i in range(30):
        qm.put("A", f"a-{i}".encode(), priority=rng.randrange(10))

    def deliver(queue):
        def run():
            uow = qm.core.begin(owner="joined")
            qm.core.get_nowait(queue, uow)
            return uow
        return qm._call_sync(run)

    commits = qm.begin(owner="commits later")
    commits.get("A")
    commits.put("B", big("c1"), priority=3)
    backs = qm.begin(owner="backs out later")
    backs.get("A")
    backs.put("B", big("b1"))
    doubt = qm.begin(owner="in doubt")
    doubt.get("A")
    doubt.put("B", big("d1"))
    flight = qm.begin(owner="in flight")
    flight.put("B", big("f1"))
    flight.get("A")
    delivery = deliver("A")
    traffic(4)
    commits.put("B", big("c2"))
    commits.get("A")
    backs.get("A")
    doubt.put("B", big("d2"))
    doubt.prepare()
    traffic(4)
    commits.commit()
    backs.backout()
    txn = qm.begin(owner="decides the delivery")
    txn.put("B", b"decided")
    qm._call(qm.core.commit(txn.uow, joined=[delivery]))
    traffic(2)
    qm.checkpoint()

    long_units = [commits.uow, backs.uow, doubt.uow, flight.uow, delivery]
    assert all(u.shunts >= 1 for u in long_units), [(u.id, u.shunts) for u in long_units]
    at_lsn, state = engine_state(qm)
    records = whole_log(log, start)
    assert any(r.type == RecordType.UOW_SHUNT for r in records)
    oids = {qm.core.queues[q].object_id: q for q in ("A", "B", "F")}

    full, full_units, _ = run_rule(records, oids)
    # (begin, restart point) of every checkpoint: restart redo reads from the
    # restart point and must reproduce every effect from the checkpoint's begin
    # on (those before it are in the stores its flush wrote, or the restart
    # point is older than them)
    checkpoints = sorted((head["begin_lsn"], head["restart_lsn"]) for head in (
        decode_json(r.payload) for r in records if r.type == RecordType.CHECKPOINT_END)
        if head["restart_lsn"] >= start)
    assert len(checkpoints) >= 10
    relied_on_a_shunt = 0
    for begin, point in checkpoints:
        effects, units, rule = run_rule(records, oids, point)
        assert [e for e in effects if e[3] >= begin] == [e for e in full if e[3] >= begin], \
            f"from LSN {point} (checkpoint begun at {begin})"
        assert units == full_units, f"from LSN {point}"
        # a unit the reading rebuilt from a shunt: begun before the reading started
        relied_on_a_shunt += any(u.begin_lsn < point for u in rule.open.values()) or (
            commits.uow.begin < point and any(e[4] == big("c1") for e in effects))
    assert relied_on_a_shunt >= 3, "restart points past the first record of shunted units"
    assert set(full_units) == {doubt.uow.id, flight.uow.id}
    assert full_units[doubt.uow.id][0] == "prepared"

    engine = {name: [(m[0], m[1], m[2], m[3]) for m in msgs] for name, msgs in state.items()
              if name in ("A", "B")}
    rule = {name: msgs for name, msgs in replay(qm, records).items() if name in ("A", "B")}
    reference = {name: msgs for name, msgs in
                 pipeline_reference(qm.config.log_dir, at_lsn).items() if name in ("A", "B")}
    assert rule == engine
    assert reference == engine
    flight.backout()


def whole_log(log, start: int):
    """Every record from LSN ``start`` (where an extent begins), read from the
    extent files: a circular log that has not gone round its extents still
    holds those its checkpoints freed (only the first one is reused early: an
    unused extent and the first one both start at LSN 0, and the lower number
    is taken first)."""
    from harbormq.log.reader import ExtentReader
    active = log.state.active.number
    extents = sorted((e for e in log.state.extents if e.first_lsn >= start),
                     key=lambda e: e.first_lsn)
    records = []
    for e in extents:
        records += list(ExtentReader(log.extent_path(e.number),
                                     newest=e.number == active).records())
    assert records[0].lsn == start and all(b.lsn == a.end_lsn for a, b in
                                           zip(records, records[1:], strict=False)), \
        "the log has not been reused since LSN start: it is read whole from there"
    return records


def _shunt_log(tmp_path, *, parts=None, backing_out=False):
    """A unit of work 9 on queue Q (object 1): two puts and a get, shunted in
    parts; then a put and its COMMIT. ``parts``: the first shunt is cut short
    there (a crash between its records), and a second, whole one follows."""
    from support.pipeline_logbuilder import LogBuilder
    lb = LogBuilder(tmp_path, pages=16)
    lb.define("Q", 1)
    old = lb.message(1)
    lb.put("Q", 1, old)
    gone = lb.message(1)
    lb.put("Q", 1, gone)
    p1 = lb.message(1, b"x" * 3000)
    lb.put("Q", 1, p1, uow=9)
    got = lb.get("Q", 1, old, uow=9)
    p2 = lb.message(1, b"y" * 3000)
    lb.put("Q", 1, p2, uow=9)
    lb.get("Q", 1, gone, uow=9)
    if backing_out:
        lb.compensate_get("Q", 1, old, 9, got, backout_count=1)
    cut = lb.shunt(9, "backing_out" if backing_out else "active", limit=4000, parts=parts)
    whole = lb.shunt(9, "backing_out" if backing_out else "active", limit=4000) \
        if parts is not None else cut
    p3 = lb.message(1, b"z")
    lb.put("Q", 1, p3, uow=9)
    lb.backout(9) if backing_out else lb.commit(9)
    lb.close()
    return lb, cut, whole


def _records(tmp_path):
    from harbormq.log.reader import ExtentReader
    out = []
    for path in sorted(tmp_path.glob("S*.LOG")):
        out += list(ExtentReader(path, newest=True).records())
    return out


def test_a_shunt_in_parts_rebuilds_the_unit_read_from_it(tmp_path):
    lb, shunt, _ = _shunt_log(tmp_path)
    records = _records(tmp_path)
    parts = [r for r in records if r.type == RecordType.UOW_SHUNT]
    assert len(parts) == 2, "two 3000-byte puts (with a get each) in 4000-byte parts"
    full, _, _ = run_rule(records, {1})
    from_shunt, units, rule = run_rule(records, {1}, shunt)
    assert from_shunt == [e for e in full if e[3] >= shunt] and units == {}
    assert sorted(e[0] for e in from_shunt) == ["delete", "delete", "put", "put", "put"]
    # a reading that starts inside the shunt does not take its later parts for a
    # whole: the unit is known only from its records read after it
    assert [e[0] for e in run_rule(records, {1}, parts[1].lsn)[0]] == ["put"]


def test_a_shunt_cut_short_is_ignored(tmp_path):
    """A crash between the parts of a shunt leaves it incomplete: the reading that
    starts there takes the unit from the next whole shunt."""
    lb, cut, whole = _shunt_log(tmp_path, parts=1)
    records = _records(tmp_path)
    assert cut < whole
    full, _, _ = run_rule(records, {1})
    assert run_rule(records, {1}, cut)[0] == [e for e in full if e[3] >= cut]
    assert run_rule(records, {1}, whole)[0] == [e for e in full if e[3] >= whole]
    assert len([e for e in full if e[3] >= cut]) == 5


def test_a_shunt_of_a_unit_being_backed_out_carries_its_compensations(tmp_path):
    """The backout count a compensation set before the shunt is an effect at the
    compensation's LSN: a reading from the shunt that is due there (a store
    older than it) applies it from the copy."""
    lb, shunt, _ = _shunt_log(tmp_path, backing_out=True)
    records = _records(tmp_path)
    full, _, _ = run_rule(records, {1})
    assert [e[0] for e in full if e[0] != "put" or e[3] < shunt] == ["put", "put", "backout"]
    fx = RecordingEffects({1})
    rule = CommitRule(fx)
    for rec in records:
        if rec.lsn >= shunt:
            rule.feed(rec)
    assert [(e[0], e[4]) for e in fx.effects] == [("backout", 1)], \
        "the compensation copied in the shunt, at its own LSN"
    assert fx.effects[0][3] < shunt and rule.open == {}


def test_a_reading_that_starts_between_a_get_and_its_compensation(tmp_path):
    """A reading (a restart point a store holds back) that starts after a get of
    a unit being backed out and at its compensation: the compensation is read
    before the rule knows the get; the shunt then brings the get back from its
    copy, and its compensation's copy with it, so the backout count is applied
    once and the get is not left pending to be backed out again."""
    from support.pipeline_logbuilder import LogBuilder
    lb = LogBuilder(tmp_path, pages=16)
    lb.define("Q", 1)
    old = lb.message(1)
    lb.put("Q", 1, old)
    got = lb.get("Q", 1, old, uow=9)
    p = lb.message(1, b"p")
    put = lb.put("Q", 1, p, uow=9)
    comp = lb.compensate_get("Q", 1, old, 9, got, backout_count=1)
    shunt = lb.shunt(9, "backing_out")
    lb.compensate_put("Q", 1, p, 9, put)
    lb.backout(9)
    lb.close()
    records = _records(tmp_path)
    full, _, _ = run_rule(records, {1})
    assert [e[0] for e in full] == ["put", "backout"]
    assert got < comp < shunt
    effects, units, _ = run_rule(records, {1}, comp)
    assert effects == [e for e in full if e[3] >= comp] and units == {}
