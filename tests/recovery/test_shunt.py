"""Log shunting (docs/design-notes.md, "Log shunting"): on a circular log a
long unit of work's records are copied forward at checkpoints, so the log
wraps under other traffic while the unit stays open, and backout (at run time
or at restart), redo after its commit, and an in-doubt unit's restart never
need an extent that has been reused.

The scenarios (a) to (d) fail on a queue manager without shunting: the unit
of work pins its first extent, so the log fills, and the queue manager backs
it out (HMQ7469W: the application's next call gets MQRC 2003) or, in doubt,
the log is full (MQRC 2102) and the traffic fails."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.oplog import operator_log
from support.queues import bodies_with_backouts

from harbormq.config import QMConfig
from harbormq.errors import HarbormqError, LogFull
from harbormq.log.records import RecordType
from harbormq.store.stores import QueueStore

PAGES = 32                  # the smallest extents: 128 KiB; 3 primary + 2 secondary
BIG = 20_000                # bytes of each of the long unit's puts
APP_AFTER_BACKOUT = [("app-0", 1), ("app-1", 1), ("app-2", 1), ("app-3", 0)]


def make(make_qm, home, *, checkpoint_records: int = 10_000, **tuning) -> None:
    make_qm(log_file_pages=PAGES, log_primary=3, log_secondary=2,
            checkpoint_records=checkpoint_records)
    config = QMConfig.load("QM1", home)
    for key, value in tuning.items():
        setattr(config.tuning, key, value)
    config.save()


def ids(home) -> list[str]:
    return [m for m, _ in operator_log(home, "QM1")]


def setup_queues(qm) -> None:
    for q in ("APP", "OUT", "FLOW"):
        qm.define_queue(q, DEFPSIST="YES", MAXDEPTH=100_000, BOTHRESH=0)
    for i in range(4):
        qm.put("APP", f"app-{i}".encode())


def body(i: int) -> bytes:
    return bytes((i * 7 + j) % 251 for j in range(BIG))


def start_long_unit(qm, owner: str = "long-batch"):
    """A unit of work that gets two messages and puts two large ones."""
    uow = qm.begin(owner=owner)
    assert uow.get("APP").body == b"app-0"
    uow.put("OUT", body(0))
    assert uow.get("APP").body == b"app-1"
    uow.put("OUT", body(1))
    return uow


def more_work(uow) -> None:
    """The unit goes on working (without shunting it has been backed out by
    now: MQRC 2003)."""
    uow.put("OUT", body(2))
    assert uow.get("APP").body == b"app-2"


def wrap(qm, times: int) -> None:
    """Traffic of its own through the circular log (puts and gets in units of
    work) until the log has gone round its five extents ``times`` times."""
    log = qm.core.log
    target = log.end_lsn + times * 5 * log.extent_size
    payload = b"t" * 3000
    while log.end_lsn < target:
        with qm.begin(owner="traffic") as u:
            for _ in range(6):
                u.put("FLOW", payload)
        with qm.begin(owner="traffic") as u:
            for _ in range(6):
                assert u.get("FLOW") is not None


def gone_from_log(qm, lsn: int) -> bool:
    """No extent of the log holds ``lsn`` any more: it has been reused."""
    return qm.core.log.extent_of(lsn) is None


def check_shunted_past(qm, home, uow, begin: int) -> None:
    assert "HMQ7469W" not in ids(home) and "HMQ7463E" not in ids(home)
    assert "HMQ7470I" in ids(home)
    assert gone_from_log(qm, begin), "the extent of its first record has been reused"
    assert qm.core.log.state.restart_lsn > begin
    assert uow.uow.begin == begin < uow.uow.first_lsn


def long_unit_through_wraps(qm, home, owner: str = "long-batch"):
    """The long unit of work, open while the log wraps 10 times, then working on."""
    uow = start_long_unit(qm, owner)
    begin = uow.uow.first_lsn
    wrap(qm, 10)
    more_work(uow)
    check_shunted_past(qm, home, uow, begin)
    return uow, begin


def never_flush(make_qm, home) -> None:
    """Stores are written only by checkpoints (the lazy flush never runs)."""
    make(make_qm, home, flush_interval_ms=10**9, flush_max_entries=10**9)


def test_a_long_unit_of_work_outlives_10_wraps_and_backs_out(make_qm, open_qm, home):
    """(a) Puts and gets open while the log wraps 10 times, then the
    application backs the unit out: every got message is back with its backout
    count, no put survives."""
    make(make_qm, home)
    qm = open_qm()
    setup_queues(qm)
    uow, _ = long_unit_through_wraps(qm, home)
    uow.backout()
    assert bodies_with_backouts(qm, "APP") == APP_AFTER_BACKOUT
    assert qm.browse("OUT") == []
    qm.close()
    qm = open_qm()
    assert bodies_with_backouts(qm, "APP") == APP_AFTER_BACKOUT
    assert qm.browse("OUT") == [] and qm.queue_status("OUT")["UNCOM"] == 0


def test_restart_backs_out_a_shunted_unit_of_work(make_qm, open_qm, home):
    """(b) The queue manager stops without a checkpoint while the long unit is
    open: restart reads the log from after the unit's first record (that
    extent is reused) and backs it out from its shunt."""
    make(make_qm, home)
    qm = open_qm()
    setup_queues(qm)
    uow, begin = long_unit_through_wraps(qm, home)
    qm.close("preemptive")
    qm = open_qm()
    report = qm.restart_report
    assert report.redo_start_lsn > begin
    assert report.uows_in_flight == 1 and report.uows_backed_out == 1
    assert report.compensations_written == 6         # 3 gets and 3 puts undone
    assert bodies_with_backouts(qm, "APP") == APP_AFTER_BACKOUT
    assert qm.browse("OUT") == [] and qm.queue_status("OUT")["UNCOM"] == 0
    assert not {"HMQ7512W", "HMQ7501E", "HMQ6767E"} & set(ids(home))
    qm.close("preemptive")                           # again: the same state
    qm = open_qm()
    assert bodies_with_backouts(qm, "APP") == APP_AFTER_BACKOUT
    assert qm.browse("OUT") == []


def test_restart_redoes_a_committed_shunted_unit_from_its_shunt(make_qm, open_qm, home):
    """(c) The long unit commits and the queue manager stops before any store is
    written: restart redoes its puts from the shunt (the original put records
    are gone), bodies intact, and its gets."""
    never_flush(make_qm, home)
    qm = open_qm()
    setup_queues(qm)
    uow, begin = long_unit_through_wraps(qm, home)
    uow.commit()
    out = qm.core.queues["OUT"]
    assert qm._call_sync(out.store.count) == 0 and out.recovery_lsn is not None, \
        "the committed puts are not in the store yet"
    qm.close("preemptive")
    qm = open_qm()
    assert qm.restart_report.redo_start_lsn > begin
    assert [m.body for m in qm.browse("OUT")] == [body(0), body(1), body(2)]
    assert bodies_with_backouts(qm, "APP") == [("app-3", 0)]
    qm.close("preemptive")
    qm = open_qm()
    assert [m.body for m in qm.browse("OUT")] == [body(0), body(1), body(2)]
    assert bodies_with_backouts(qm, "APP") == [("app-3", 0)]


#: the child killed by SIGKILL: the long unit through 10 wraps, then the kill
#: with it open, or right after its commit returned (no store written)
KILLED_CHILD = """
import os, signal, sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from harbormq import QueueManager
from recovery import test_shunt as t
from support.differential import force_log
qm = QueueManager.open("QM1")
t.setup_queues(qm)
uow, begin = t.long_unit_through_wraps(qm, Path(os.environ["HARBORMQ_HOME"]))
if {commit!r}:
    uow.commit()
force_log(qm)        # (an open unit's last records are forced by nobody else)
print(begin, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("commit", [False, True], ids=["open", "committed"])
def test_sigkilled_with_a_shunted_unit(make_qm, open_qm, home, python_env, commit):
    """(b) and (c) with a real kill of the process: restart backs the open unit
    out, or redoes the committed one from its shunt (no store has its puts)."""
    never_flush(make_qm, home)
    child = KILLED_CHILD.format(tests=str(Path(__file__).resolve().parents[1]), commit=commit)
    proc = subprocess.run([sys.executable, "-c", child], env=python_env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    begin = int(proc.stdout.split()[-1])
    out = QueueStore(QMConfig.load("QM1", home).queue_dir("OUT"))
    assert out.count() == 0, "nothing of the long unit reached a store"
    out.close()
    qm = open_qm()
    assert qm.restart_report.redo_start_lsn > begin
    if commit:
        assert [m.body for m in qm.browse("OUT")] == [body(0), body(1), body(2)]
        assert bodies_with_backouts(qm, "APP") == [("app-3", 0)]
    else:
        assert qm.restart_report.uows_backed_out == 1
        assert bodies_with_backouts(qm, "APP") == APP_AFTER_BACKOUT
        assert qm.browse("OUT") == []


def test_an_in_doubt_shunted_unit_survives_restart_and_resolves(make_qm, open_qm, home):
    """(d) A prepared unit of work (never backed out by the queue manager) is
    shunted while the log wraps, stays in doubt across restarts with its
    messages locked and its puts invisible, is shunted again after the restart
    (the log wraps again), and RESOLVE commits it."""
    never_flush(make_qm, home)
    qm = open_qm()
    setup_queues(qm)
    uow = start_long_unit(qm, "xa-coordinator")
    begin = uow.uow.first_lsn
    wrap(qm, 5)
    more_work(uow)
    uow.prepare()
    wrap(qm, 5)
    check_shunted_past(qm, home, uow, begin)
    qm.close("preemptive")
    for _ in range(2):
        qm = open_qm()
        assert qm.in_doubt() == [uow.id]
        assert qm.restart_report.redo_start_lsn > begin
        assert bodies_with_backouts(qm, "APP") == [("app-3", 0)]     # app-0..2 locked
        assert qm.browse("OUT") == []
        status = qm.queue_status("OUT")
        assert status["UNCOM"] == 3 and status["CURDEPTH"] == 3
        wrap(qm, 3)                               # it pins nothing after the restart either
        assert "HMQ7463E" not in ids(home)
        qm.close("preemptive")
    qm = open_qm()
    qm.resolve(uow.id, commit=True)
    assert [m.body for m in qm.browse("OUT")] == [body(0), body(1), body(2)]
    assert bodies_with_backouts(qm, "APP") == [("app-3", 0)]
    qm.close("preemptive")
    qm = open_qm()
    assert [m.body for m in qm.browse("OUT")] == [body(0), body(1), body(2)]
    assert bodies_with_backouts(qm, "APP") == [("app-3", 0)]
    assert qm.in_doubt() == []


def test_a_backout_cut_short_is_shunted_with_its_compensations(make_qm, open_qm, home):
    """A backout the log cuts short (LogFull between two compensations) leaves
    the unit being backed out; its shunt carries the remaining operations and
    the gets already compensated with their compensations. Restart, reading
    only from after its first record, finishes the backout: each message once,
    with a backout count of one."""
    never_flush(make_qm, home)
    qm = open_qm()
    setup_queues(qm)
    uow = start_long_unit(qm)
    begin = uow.uow.first_lsn
    more_work(uow)
    core = qm.core
    real, calls = core._compensate, []

    def full_on_third(u, op, count):
        calls.append(op.kind)
        if len(calls) == 3:
            raise LogFull("injected")
        return real(u, op, count)
    core._compensate = full_on_third
    with pytest.raises(HarbormqError):
        uow.backout()
    core._compensate = real
    # undone last first: app-2 back with its count, body 2 dropped; the rest pending
    assert calls == ["get", "put", "put"] and uow.uow.state == "backing_out"
    assert len(uow.uow.ops) == 4 and len(uow.uow.undone) == 2
    wrap(qm, 10)
    check_shunted_past(qm, home, uow, begin)
    shunt = next(qm.core.log.read_from(uow.uow.first_lsn))
    assert shunt.type == RecordType.UOW_SHUNT
    qm.close("preemptive")
    qm = open_qm()
    assert qm.restart_report.redo_start_lsn > begin
    assert qm.restart_report.uows_backed_out == 1
    assert bodies_with_backouts(qm, "APP") == APP_AFTER_BACKOUT
    assert qm.browse("OUT") == [] and qm.queue_status("OUT")["UNCOM"] == 0


def test_a_unit_is_shunted_after_three_checkpoints_in_an_older_extent(make_qm, open_qm, home):
    """The rule: a unit of work is shunted by a checkpoint that begins in a
    later extent than the one restart needs it from, once it has lived
    through ``tuning.shunt_checkpoints`` checkpoints (3) since it began or was
    last shunted, and not before (the log has spare extents here)."""
    make(make_qm, home)
    qm = open_qm()
    setup_queues(qm)
    uow = start_long_unit(qm)
    begin = uow.uow.first_lsn
    for _ in range(3):
        qm.checkpoint()                  # three checkpoints, all in its own extent
    assert "HMQ7470I" not in ids(home)
    log = qm.core.log
    while log.extent_of(log.end_lsn).first_lsn <= begin:
        qm.put("FLOW", b"f" * 3000)      # into the next extent: its switch checkpoints
    assert log.available_extents() >= 2
    qm.checkpoint()                      # (after the switch's own, which it waits for)
    assert ids(home).count("HMQ7470I") == 1
    first = uow.uow.first_lsn
    assert first > begin and qm.core.last_checkpoint["restart_lsn"] > begin
    assert [(u["first_lsn"], u["begin_lsn"]) for u in qm.core.last_checkpoint["uows"]] == \
        [(first, begin)]
    for _ in range(3):
        qm.checkpoint()                  # in the extent of its shunt: nothing to gain
    assert uow.uow.first_lsn == first and ids(home).count("HMQ7470I") == 1
    uow.backout()
    assert bodies_with_backouts(qm, "APP")[:2] == [("app-0", 1), ("app-1", 1)]


def test_shunting_off_keeps_the_old_behaviour(make_qm, open_qm, home):
    """tuning.shunt_checkpoints = 0: no shunt; the log fills and the long unit
    of work is backed out to release log space (HMQ7469W)."""
    make(make_qm, home, shunt_checkpoints=0)
    qm = open_qm()
    setup_queues(qm)
    uow = start_long_unit(qm)
    wrap(qm, 2)
    assert "HMQ7469W" in ids(home) and "HMQ7470I" not in ids(home)
    with pytest.raises(HarbormqError, match="2003"):
        uow.commit()


def test_media_recovery_replays_through_a_shunt(make_qm, open_qm):
    """Media recovery drives the same commit rule: a recreate whose replay
    starts at a unit's shunt (the unit was in flight at the image, and its
    shunt is where restart needs it from) rebuilds the unit's puts and gets
    from the shunt. A linear log does not shunt on its own (the rule is for
    circular logs), so the test writes the shunt as a checkpoint would."""
    make_qm(log_type="linear", log_file_pages=PAGES)
    qm = open_qm()
    qm.define_queue("Q1", DEFPSIST="YES", BOTHRESH=0)
    for i in range(6):
        qm.put("Q1", f"m{i}".encode())
    later = qm.begin(owner="committed after the image")
    later.put("Q1", body(0))
    later.get("Q1")
    back = qm.begin(owner="backed out after the image")
    back.get("Q1")
    for u in (later, back):
        assert qm._call_sync(qm.core._shunt, u.uow)
    qm.image("queue", "Q1")
    replay_from = qm.core.media_points["Q1"]["replay_from"]
    assert replay_from == later.uow.first_lsn > later.uow.begin, "the replay starts at the shunt"
    later.commit()
    back.backout()
    expected = [(m.body, m.backout_count) for m in qm.browse("Q1")]
    assert (body(0), 0) in expected and ("m1".encode(), 1) in expected
    qm.recreate("queue", "Q1")
    assert [(m.body, m.backout_count) for m in qm.browse("Q1")] == expected
