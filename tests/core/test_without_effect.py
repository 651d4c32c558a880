"""Records without effect (log/replay.py ``without_effect``): restart redo
skips a message put and got again within a stretch of the log. Skipping must
change nothing: the rule fed every record and the rule fed what is not skipped
end with the same queues, sequence numbers and open units of work, whatever
the stretches, and from a crashed queue manager restart gives the same state
with skipping on and off, also after a second crash."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import textwrap

import pytest
from support.differential import engine_state
from support.procs import child_env

from harbormq import QueueManager
from harbormq.log import reader
from harbormq.log.records import (
    AUTO_COMMIT,
    LogRecord,
    Message,
    MessageRef,
    RecordType,
    decode_json,
    encode_json,
)
from harbormq.log.replay import CommitRule, without_effect
from harbormq.recovery import restart

T = RecordType


# --- the rule, fed in stretches ----------------------------------------------------------

class QueueEffects:
    """The rule's effects on plain dicts, with a store recovery LSN per object
    (``due_from``) as restart has it, and sequence numbers as it keeps them."""

    def __init__(self, due_from: dict[int, int], stores: dict[int, dict] | None = None,
                 below: bool = False):
        self.due_from = due_from
        #: object id -> key -> (msg id, backout count): each store as it was at its LSN
        self.queues: dict[int, dict] = {oid: dict(m) for oid, m in (stores or {}).items()}
        self.next_seq: dict[int, int] = {}
        self.below = below      # effects below the LSNs instead: what the stores hold

    def target(self, rec):
        return rec.object_id if rec.object_id in self.queues else None

    def due(self, oid, lsn):
        return (lsn >= self.due_from.get(oid, 0)) != self.below

    def seen_put(self, oid, msg):
        self.next_seq[oid] = max(self.next_seq.get(oid, 1), msg.seq + 1)

    def opened(self, op, rec):
        return True

    def closed(self, op, applied):
        pass

    def put(self, oid, msg, lsn):
        self.queues[oid][msg.key] = (msg.msg_id, msg.backout_count)

    def delete(self, oid, key, lsn, op):
        self.queues[oid].pop(key, None)

    def backed_out(self, op, count, lsn):
        msgs = self.queues[op.target]
        if op.key in msgs:
            msgs[op.key] = (msgs[op.key][0], count)


def replay(records, due_from, stretch: int | None, stores=None):
    """(queues, next sequence numbers, open units of work, records skipped) of
    the rule fed ``records`` onto ``stores``; ``stretch``: records a stretch,
    skipping what ``without_effect`` names in each (None: every record fed)."""
    fx = QueueEffects(due_from, stores)
    rule = CommitRule(fx)
    skipped = 0
    while records and records[0].type is T.OBJECT_CREATE:     # the queues, made before
        fx.queues.setdefault(records[0].object_id, {})
        records = records[1:]
    step = stretch or len(records)
    for start in range(0, len(records), step):
        part = records[start:start + step]
        skip = without_effect(part, rule.open, due_from) if stretch else set()
        skipped += len(skip)
        for rec in part:
            if rec.lsn in skip:
                if rec.type is T.MSG_PUT and rec.object_id in fx.queues:
                    seq = Message.decode(rec.payload).seq
                    fx.next_seq[rec.object_id] = max(fx.next_seq.get(rec.object_id, 1), seq + 1)
                continue
            if not rule.feed(rec) and rec.type is T.OBJECT_CREATE:
                fx.queues.setdefault(rec.object_id, {})
    units = {u.id: (u.state, sorted((op.kind, op.key) for op in u.ops.values()))
             for u in rule.open.values()}
    return fx.queues, fx.next_seq, units, skipped


class LogBuilder:
    """Records of a made-up log, LSNs in order."""

    def __init__(self):
        self.records: list[LogRecord] = []
        self.lsn = 100
        self.seq: dict[int, int] = {}

    def add(self, rtype, uow=0, oid=0, payload=b"", flags=0) -> LogRecord:
        rec = LogRecord(rtype, uow_id=uow, object_id=oid, object_name=f"Q{oid}" if oid else "",
                        payload=payload, flags=flags, lsn=self.lsn, length=64)
        self.lsn += 64
        self.records.append(rec)
        return rec

    def create(self, oid):
        self.add(T.OBJECT_CREATE, oid=oid, payload=encode_json({"type": "QLOCAL"}))

    def put(self, oid, uow=0) -> Message:
        self.seq[oid] = self.seq.get(oid, 0) + 1
        msg = Message(body=b"m", msg_id=b"id%d" % self.seq[oid], seq=self.seq[oid],
                      priority=self.seq[oid] % 10)
        self.add(T.MSG_PUT, uow, oid, msg.encode(), 0 if uow else AUTO_COMMIT)
        return msg

    def get(self, oid, msg, uow=0, rtype=T.MSG_GET):
        ref = MessageRef(msg.seq, msg.priority, msg.msg_id).encode()
        self.add(rtype, uow, oid, ref, 0 if uow else AUTO_COMMIT)


def _units_log():
    """Two queues, puts and gets auto-committed and in units of work of every
    kind: plain, backed out with compensations, prepared, joined, in flight."""
    b = LogBuilder()
    b.create(1)
    b.create(2)
    m1 = b.put(1)                                  # auto put, auto get: a plain pair
    b.get(1, m1)
    b.add(T.UOW_BEGIN, 10, payload=encode_json({"owner": "p"}))
    m2 = b.put(1, 10)
    b.add(T.UOW_COMMIT, 10)
    b.add(T.UOW_BEGIN, 11, payload=encode_json({"owner": "g"}))
    b.get(1, m2, 11)                               # unit 11: a plain get of m2
    b.add(T.UOW_COMMIT, 11)
    m3 = b.put(2)
    b.add(T.UOW_BEGIN, 12)                         # a get backed out: m3 stays
    b.get(2, m3, 12)
    b.add(T.COMPENSATION, 12, payload=_compensation(b.records[-1].lsn, m3, 1))
    b.add(T.UOW_BACKOUT, 12)
    b.add(T.UOW_BEGIN, 13)                         # prepared: in doubt at the end
    m4 = b.put(2)
    b.add(T.UOW_BEGIN, 14)
    b.get(2, m4, 14)                               # (its put is not committed)
    b.add(T.UOW_PREPARE, 13)
    b.add(T.UOW_BEGIN, 15)                         # joined into 16's commit
    m5 = b.put(1)
    b.get(1, m5, 15)
    b.add(T.UOW_BEGIN, 16)
    b.add(T.UOW_COMMIT, 16, payload=encode_json({"joined": [15]}))
    m6 = b.put(2)                                  # got twice: one backed out
    b.add(T.UOW_BEGIN, 17)
    b.get(2, m6, 17)
    b.add(T.COMPENSATION, 17, payload=_compensation(b.records[-1].lsn, m6, 1))
    b.add(T.UOW_BACKOUT, 17)
    b.get(2, m6)
    b.add(T.UOW_BEGIN, 19)                         # prepared, then committed
    m8 = b.put(1, 19)
    b.add(T.UOW_PREPARE, 19)
    b.add(T.UOW_COMMIT, 19)
    b.get(1, m8)
    m7 = b.put(1)                                  # got by a unit in flight at the end
    b.add(T.UOW_BEGIN, 18)
    b.get(1, m7, 18)
    return b


def _compensation(undone_lsn, msg, count) -> bytes:
    from harbormq.log.records import COMPENSATION
    return COMPENSATION.pack(int(T.MSG_GET), undone_lsn, 0, msg.seq, msg.priority,
                             len(msg.msg_id), count) + msg.msg_id


def test_only_plain_pairs_and_their_units_are_skipped():
    b = _units_log()
    skip = without_effect(b.records[2:], {}, {1: 0, 2: 0})
    kinds = sorted((r.type.name, r.uow_id) for r in b.records if r.lsn in skip)
    # m1 (auto/auto) and m2 (unit 10 / unit 11), with both units whole; not m8,
    # put by a unit that was prepared before it committed
    assert kinds == sorted([("MSG_PUT", 0), ("MSG_GET", 0),
                            ("UOW_BEGIN", 10), ("MSG_PUT", 10), ("UOW_COMMIT", 10),
                            ("UOW_BEGIN", 11), ("MSG_GET", 11), ("UOW_COMMIT", 11)])


def test_nothing_is_skipped_where_the_put_is_not_due_or_the_object_unknown():
    b = _units_log()
    records = b.records[2:]
    m1_put, m2_commit = records[0], records[4]
    assert m2_commit.type is T.UOW_COMMIT
    # m1's put is below its store's LSN (m2's commit is not): m1's pair stays
    assert without_effect(records, {}, {1: m1_put.lsn + 1, 2: 0}) == \
        {r.lsn for r in records[2:8]}
    assert without_effect(records, {}, {1: m2_commit.lsn + 1, 2: 0}) == set()
    assert without_effect(records, {}, {2: 0}) == set()
    assert without_effect(b.records, {}, {1: 0, 2: 0}) == set()   # (made in the stretch)


def test_the_put_of_a_unit_is_due_from_its_commit_not_its_record():
    b = _units_log()
    records = b.records[2:]
    m2_put, m2_commit = records[3], records[4]
    assert (m2_put.type, m2_commit.type) == (T.MSG_PUT, T.UOW_COMMIT)
    assert m2_put.lsn in without_effect(records, {}, {1: m2_put.lsn + 1, 2: 0})
    assert m2_put.lsn in without_effect(records, {}, {1: m2_commit.lsn, 2: 0})
    assert m2_put.lsn not in without_effect(records, {}, {1: m2_commit.lsn + 1, 2: 0})


def test_no_pair_where_the_get_comes_first_or_a_message_is_got_twice():
    b = LogBuilder()
    m1 = Message(body=b"m", msg_id=b"early", seq=1, priority=4)
    b.get(1, m1)                                   # (a log no queue manager writes)
    b.add(T.MSG_PUT, 0, 1, m1.encode(), AUTO_COMMIT)
    m2 = b.put(1)
    b.get(1, m2)
    b.get(1, m2)
    m3 = b.put(1)                                  # the control: a pair
    b.get(1, m3)
    assert without_effect(b.records, {}, {1: 0}) == {r.lsn for r in b.records[-2:]}


def test_a_unit_open_when_the_stretch_starts_or_begun_before_it_is_not_plain():
    b = _units_log()
    records = b.records[2:]
    assert {r.uow_id for r in records if r.lsn in without_effect(records, {10: None},
                                                                 {1: 0, 2: 0})} == {0}
    later = [r for r in records if r.lsn > records[2].lsn]     # after unit 10's BEGIN
    assert without_effect(later, {}, {1: 0, 2: 0}) == set()


@pytest.mark.parametrize("stretch", [1, 2, 3, 5, 8, 13, 50])
def test_skipping_in_stretches_of_every_size_changes_nothing(stretch):
    b = _units_log()
    due = {1: 0, 2: 0}
    whole = replay(b.records, due, None)
    skipping = replay(b.records, due, stretch)
    assert skipping[:3] == whole[:3]
    if stretch >= 50:
        assert skipping[3] == 8


def _random_log(seed: int) -> LogBuilder:
    """A random mix over three queues, one of them deleted and made again."""
    rng = random.Random(seed)
    b = LogBuilder()
    oids = [1, 2, 3]
    for oid in oids:
        b.create(oid)
    queued: dict[int, list[Message]] = {oid: [] for oid in oids}
    uow_id = 100
    for step in range(400):
        oid = rng.choice(oids)
        action = rng.random()
        if action < 0.35:
            queued[oid].append(b.put(oid))
        elif action < 0.55 and queued[oid]:
            b.get(oid, queued[oid].pop(0), rtype=rng.choice((T.MSG_GET, T.MSG_EXPIRE)))
        elif action < 0.9:
            uow_id += 1
            b.add(T.UOW_BEGIN, uow_id)
            ops = []
            for _ in range(rng.randint(1, 4)):
                if rng.random() < 0.5 or not queued[oid]:
                    ops.append(("put", b.put(oid, uow_id)))
                else:
                    msg = queued[oid].pop(0)
                    b.get(oid, msg, uow_id)
                    ops.append(("get", msg, b.records[-1].lsn))
            outcome = rng.random()
            if outcome < 0.7:
                b.add(T.UOW_COMMIT, uow_id)
                queued[oid] += [op[1] for op in ops if op[0] == "put"]
            elif outcome < 0.9:
                for op in reversed(ops):
                    if op[0] == "get":
                        b.add(T.COMPENSATION, uow_id, payload=_compensation(op[2], op[1], 1))
                        queued[oid].insert(0, op[1])
                b.add(T.UOW_BACKOUT, uow_id)
            else:
                b.add(T.UOW_PREPARE, uow_id)       # in doubt for good: its gets stay taken
        elif step % 97 == 0:
            b.add(T.OBJECT_ALTER, oid=oid, payload=encode_json({"type": "QLOCAL"}))
        if step == 200:                            # queue 3 deleted; 4 made
            b.add(T.OBJECT_DELETE, oid=3)
            oids[2] = 4
            queued[4] = []
            b.create(4)
    return b


@pytest.mark.parametrize("seed", range(6))
def test_random_logs_replay_the_same_skipping_or_not(seed):
    b = _random_log(seed)
    rng = random.Random(seed)
    lsns = [r.lsn for r in b.records]
    due = {1: 0, 2: rng.choice(lsns[len(lsns) // 4:]), 3: 0, 4: 0}   # one flushed part way
    # that store holds the effects below its LSN, as restart finds it
    fx = QueueEffects(due, below=True)
    rule = CommitRule(fx)
    for rec in b.records:
        if not rule.feed(rec) and rec.type is T.OBJECT_CREATE:
            fx.queues.setdefault(rec.object_id, {})
    stores = {1: {}, 2: fx.queues[2], 3: {}, 4: {}}
    assert stores[2], "the flushed store holds messages"
    whole = replay(b.records, due, None, stores)
    for stretch in (7, 60, 250, len(b.records)):
        got = replay(b.records, due, stretch, stores)
        assert got[:3] == whole[:3], f"stretch {stretch}"
    assert replay(b.records, due, len(b.records), stores)[3] > 50   # (a real share skipped)


def test_a_commit_naming_joined_units_is_read_once_per_stretch():
    b = _units_log()
    commit = next(r for r in b.records if r.uow_id == 16 and r.type is T.UOW_COMMIT)
    assert decode_json(commit.payload) == {"joined": [15]}
    assert not {r.lsn for r in b.records if r.uow_id in (15, 16)} & \
        without_effect(b.records[2:], {}, {1: 0, 2: 0})


# --- restart of a crashed queue manager ----------------------------------------------------

WORKLOAD = textwrap.dedent("""
    import os, random, sys
    from harbormq import QueueManager
    qm = QueueManager.open("QM1")
    rng = random.Random(int(sys.argv[1]))
    for name in ("A", "B", "C"):
        qm.define_queue(name, DEFPSIST="YES", BOTHRESH=0, MAXDEPTH=100000)
    held = []
    for step in range(int(sys.argv[2])):
        q = rng.choice("ABC")
        r = rng.random()
        if r < 0.3:
            qm.put(q, b"auto %d" % step, priority=rng.randrange(10))
        elif r < 0.45:
            qm.get(q)
        elif r < 0.5:
            qm.put(q, b"short-lived %d" % step, expiry=0.001)
        elif r < 0.9:
            outcome = rng.random()
            names = "ABC" if outcome < 0.95 else "AB"    # (C is deleted half way)
            u = qm.begin()
            for i in range(rng.randint(1, 5)):
                if rng.random() < 0.55:
                    u.put(rng.choice(names), b"uow %d.%d" % (step, i),
                          priority=rng.randrange(10))
                else:
                    u.get(rng.choice(names))
            if outcome < 0.75:
                u.commit()
            elif outcome < 0.95:
                u.backout()
            else:
                held.append(u)
        elif r < 0.92 and len(held) < 3:
            u = qm.begin()
            u.put("A", b"in doubt %d" % step)
            u.get("B")
            u.prepare()
            held.append(u)
        if step == int(sys.argv[2]) // 2:
            qm.delete_queue("C", purge=True)
            qm.define_queue("C", DEFPSIST="YES", BOTHRESH=0)
    os._exit(9)      # a crash: no checkpoint, stores not flushed, units left open
""")


def _state(qm: QueueManager) -> dict:
    _lsn, queues = engine_state(qm)

    def more():
        core = qm.core
        return ({name: q.next_seq for name, q in core.queues.items()},
                sorted((u.id, u.state, len(u.ops)) for u in core.uows.values()))
    seqs, uows = qm._call_sync(more)
    return {"queues": queues, "next_seq": seqs, "uows": uows}


def _restart(home, monkeypatch, skip: bool):
    monkeypatch.setattr(restart, "SKIP_WITHOUT_EFFECT", skip)
    qm = QueueManager.open("QM1", home=home)
    try:
        return _state(qm), qm.restart_report
    finally:
        qm.close("immediate")


@pytest.mark.parametrize("seed", [1, 2])
def test_restart_skipping_or_not_gives_the_same_queue_manager(make_qm, home, tmp_path,
                                                              monkeypatch, seed):
    make_qm(log_type="linear", log_file_pages=2048, checkpoint_records=10**9)
    from harbormq.config import QMConfig
    cfg = QMConfig.load("QM1", home)
    cfg.tuning.flush_interval_ms = 10**9
    cfg.tuning.flush_max_entries = 10**9
    cfg.save()
    done = subprocess.run([sys.executable, "-c", WORKLOAD, str(seed), "1500"],
                          env=child_env(home), capture_output=True, text=True, timeout=300)
    assert done.returncode == 9, done.stderr[-3000:]
    # small stretches, and flushes at every stretch's end: the state a flush writes
    # between stretches must be the log's (a second crash restarts from it)
    monkeypatch.setattr(restart, "REDO_STRETCH_BYTES", 4096)
    monkeypatch.setattr(reader, "MOST_RUN", 16)     # a stretch: several batches
    monkeypatch.setattr(restart, "REDO_FLUSH_ENTRIES", 1)
    copies = {}
    for skip in (False, True):
        copies[skip] = tmp_path / f"home-{skip}"
        shutil.copytree(home, copies[skip])
    plain, plain_report = _restart(copies[False], monkeypatch, skip=False)
    flush = restart.Restart._flush_during_redo
    flushed = []

    def counted(self, lsn):
        flushed.append(lsn)
        flush(self, lsn)
    monkeypatch.setattr(restart.Restart, "_flush_during_redo", counted)
    skipped, report = _restart(copies[True], monkeypatch, skip=True)
    monkeypatch.setattr(restart.Restart, "_flush_during_redo", flush)
    assert len(flushed) >= 4, flushed      # (the last one is after redo's end)
    assert plain_report.records_skipped == 0
    assert report.records_skipped > 500, report.as_dict()
    assert report.warnings == plain_report.warnings == []
    assert skipped == plain
    assert any(plain["queues"].values()) and plain["uows"], "the comparison has substance"
    # opened again (a queue whose every message was skipped was not flushed: its
    # next sequence number comes from the restart's checkpoint)
    reopened, _ = _restart(copies[True], monkeypatch, skip=True)
    assert reopened == plain
    # a crash during redo just after a flush between two stretches: the stores
    # then hold the state at that LSN, from which the next restart redoes
    last = len(flushed) - 1
    for crash_at in sorted({1, 2, 3, last // 3, last // 2, 2 * last // 3, last} - {0}):
        crashed = tmp_path / f"home-crashed-{crash_at}"
        shutil.copytree(home, crashed)
        monkeypatch.setattr(restart.Restart, "_flush_during_redo",
                            _crashing_after(flush, crash_at))
        with pytest.raises(Exception) as crash:
            _restart(crashed, monkeypatch, skip=True)
        assert crash.errisinstance(CrashDuringRedo) or "CrashDuringRedo" in repr(crash.value), \
            crash.value
        monkeypatch.setattr(restart.Restart, "_flush_during_redo", flush)
        # skipping again (its stores now have recovery LSNs inside the log), or not
        again, again_report = _restart(crashed, monkeypatch, skip=crash_at % 2 == 1)
        assert again_report.warnings == [], crash_at
        assert again == plain, crash_at


class CrashDuringRedo(Exception):
    pass


def _crashing_after(flush, count: int):
    """``Restart._flush_during_redo`` that raises after its ``count``-th flush."""
    flushes = []

    def flush_then_crash(self, lsn):
        flush(self, lsn)
        flushes.append(lsn)
        if len(flushes) == count:
            raise CrashDuringRedo(lsn)
    return flush_then_crash


def test_a_publication_and_its_unit_are_never_skipped():
    """A unit of work whose only operation is a publication keeps its BEGIN and
    COMMIT (else its targets stay pending), and the get of a published message
    is no pair: skipping or not, the same queues."""
    from harbormq.log.records import PublicationTarget, encode_publication
    b = LogBuilder()
    b.create(1)
    b.create(2)
    msg = Message(body=b"pub", msg_id=b"pub")
    b.add(T.UOW_BEGIN, 20, payload=encode_json({"owner": "publisher"}))
    b.add(T.MSG_PUBLISH, 20, payload=encode_publication(
        msg, [PublicationTarget(1, "Q1", 7), PublicationTarget(2, "Q2", 3)]))
    b.add(T.UOW_COMMIT, 20)
    b.add(T.MSG_PUBLISH, payload=encode_publication(msg, [PublicationTarget(1, "Q1", 8)]),
          flags=AUTO_COMMIT)
    b.get(1, Message(msg_id=b"pub", seq=8))
    assert without_effect(b.records, {}, {1: 0, 2: 0}) == set()
    full = replay(b.records, {1: 0, 2: 0}, None)
    assert full[0] == {1: {Message(seq=7).key: (b"pub", 0)}, 2: {Message(seq=3).key: (b"pub", 0)}}
    assert replay(b.records, {1: 0, 2: 0}, 2)[:3] == full[:3]
