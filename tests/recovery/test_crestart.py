"""Conditional restart (z/OS's CRESTART): ``harbormq log crestart`` gives up
the log after a point, says exactly what that loses, and the next start
carries it out (log/crestart.py, docs/administration.md).

The ground truth here is what the queue manager had acknowledged when the
point was written: after the conditional restart, every queue holds exactly
that, whatever the stores had been flushed with since; the units of work
committed later are gone whole, those in flight at the point are backed out,
and nothing of the given-up log is ever applied again (not by the first
restart, not by one after a crash)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from support.oplog import operator_log

from harbormq.cli.main import main
from harbormq.config import QMConfig
from harbormq.log.control import ControlFile

BOTH_LOGS = pytest.mark.parametrize("log_type", ["circular", "linear"])


def bodies(qm, queue):
    return [m.body.decode() for m in qm.browse(queue, limit=100_000)]


def said(home, msgid, name="QM1"):
    return [t for m, t in operator_log(home, name) if m == msgid]


def log_end(qm) -> int:
    return qm._call_sync(lambda: qm.core.log.end_lsn)


def control(home, name="QM1"):
    config = QMConfig.load(name)
    return ControlFile(config.log_dir).load(repair=False)


def crestart(capsys, *args) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(["log", "crestart", "QM1", *map(str, args)])
    out = capsys.readouterr()
    return rc, out.out + out.err


def work_after_the_point(qm, bulk=True):
    """A unit of work that puts 5 and gets m0, m1; an auto-committed put; a
    new queue; a unit of work left in flight; and more than an extent of
    puts on BULK, so that whole extents are given up."""
    uow = qm.begin(owner="app1")
    for i in range(5):
        uow.put("ORDERS", f"n{i}")
    assert [uow.get("ORDERS").body.decode() for _ in range(2)] == ["m0", "m1"]
    uow.commit()
    qm.put("ORDERS", "x0")
    qm.define_queue("LATE", DEFPSIST="YES")
    qm.put("LATE", "late0")
    for i in range(200 if bulk else 0):
        qm.put("BULK", f"b{i}".ljust(2000, "."))
    open_uow = qm.begin(owner="app2")
    open_uow.put("ORDERS", "never")
    return open_uow


def build(make_qm, open_qm, log_type, **options):
    make_qm(log_type=log_type, **options)
    qm = open_qm()
    qm.define_queue("ORDERS", DEFPSIST="YES")
    qm.define_queue("BULK", DEFPSIST="YES")
    for i in range(10):
        qm.put("ORDERS", f"m{i}")
    point = log_end(qm)
    # (a circular log would reuse the extents before the point)
    work_after_the_point(qm, bulk=log_type == "linear")
    qm.checkpoint()          # the stores now hold effects of the log after the point
    qm.close("immediate")
    return point


def test_linear_conditional_restart_loses_exactly_what_it_says(make_qm, open_qm, home,
                                                               capsys):
    point = build(make_qm, open_qm, "linear")

    rc, out = crestart(capsys, "--end-lsn", point)
    assert rc == 0, out
    assert "Nothing recorded" in out
    assert control(home).crestart is None, "without --yes nothing is recorded"
    rc, out = crestart(capsys, "--end-lsn", point, "--json")
    plan = json.loads(out[out.index("{"):out.rindex("}") + 1])
    assert plan["cut_lsn"] == point
    assert plan["puts_lost"] == {"ORDERS": 6, "LATE": 1, "BULK": 200}, plan["puts_lost"]
    assert plan["discarded_extents"], "whole extents are given up"
    assert plan["gets_undone"] == {"ORDERS": 2}
    [lost] = plan["uows_lost"]
    assert lost["owner"] == "app1" and lost["queues"] == {"ORDERS": {"puts": 5, "gets": 2}}
    assert [d["object"] for d in plan["definitions"]] == ["LATE"]
    assert plan["resume_lsn"] > plan["log_end_lsn"]

    rc, out = crestart(capsys, "--end-lsn", point, "--yes")
    assert rc == 0 and "Recorded" in out, out
    assert control(home).crestart["cut_lsn"] == point
    assert said(home, "HMQ7130W")

    qm = open_qm()
    assert bodies(qm, "ORDERS") == [f"m{i}" for i in range(10)]
    assert bodies(qm, "BULK") == []
    assert "LATE" not in qm.core.objects
    applied = said(home, "HMQ7131W")
    assert applied and f"LSN {point}" in applied[0], applied
    st = qm._call_sync(lambda: qm.core.log.state)
    assert st.discarded and st.discarded[0]["from"] == point and st.crestart is None
    log_dir = QMConfig.load("QM1").log_dir
    assert [p.name for p in log_dir.glob("crestart.*.json")], "the whole plan is kept"
    assert sorted(p.name.split(".given-up")[0] for p in log_dir.glob("S*.LOG.given-up.*")) \
        == plan["discarded_extents"], "every given-up extent is kept"
    # the log goes on, and again after a restart
    qm.put("ORDERS", "after")
    qm.close("immediate")
    qm = open_qm()
    assert bodies(qm, "ORDERS") == [f"m{i}" for i in range(10)] + ["after"]
    qm.close()
    qm = open_qm()
    assert bodies(qm, "ORDERS") == [f"m{i}" for i in range(10)] + ["after"]
    assert len(said(home, "HMQ7131W")) == 1, "carried out once"
    qm.close()


def test_circular_conditional_restart_marks_stores_from_the_given_up_log_damaged(
        make_qm, open_qm, home, capsys):
    """A circular log has no media images: a store flushed from the given-up
    log cannot be brought back to the point, so it is damaged, never used. A
    point before the last change of definitions is refused (the catalog could
    not be rebuilt: the queue manager could not start)."""
    point = build(make_qm, open_qm, "circular")
    before = control(home).sequence
    rc, out = crestart(capsys, "--end-lsn", point, "--yes")
    assert rc == 1 and "HMQ7132E" in out and "definitions" in out, out
    assert control(home).sequence == before
    make_qm("QM2", log_type="circular")
    qm = open_qm("QM2")
    qm.define_queue("ORDERS", DEFPSIST="YES")
    for i in range(10):
        qm.put("ORDERS", f"m{i}")
    point = log_end(qm)
    qm.put("ORDERS", "x0")
    qm.checkpoint()
    qm.close("immediate")
    capsys.readouterr()
    assert main(["log", "crestart", "QM2", "--end-lsn", str(point)]) == 0
    assert "ORDERS" in capsys.readouterr().out, "the plan names the store to be damaged"
    assert main(["log", "crestart", "QM2", "--end-lsn", str(point), "--yes"]) == 0
    qm = open_qm("QM2")
    q = qm.core.queues["ORDERS"]
    assert q.damaged and "given up by a conditional restart" in q.damage_reason, \
        q.damage_reason
    assert said(home, "HMQ7473W", "QM2")
    qm.close()


@BOTH_LOGS
def test_a_store_the_given_up_log_never_changed_is_kept(make_qm, open_qm, home, capsys,
                                                        log_type):
    """A store written after the point only with changes from before it (a
    checkpoint flushed it) is as it was at the point: kept, not damaged."""
    make_qm(log_type=log_type)
    qm = open_qm()
    qm.define_queue("ORDERS", DEFPSIST="YES")
    qm.define_queue("IDLE", DEFPSIST="YES")
    for i in range(10):
        qm.put("ORDERS", f"m{i}")
        qm.put("IDLE", f"i{i}")
    point = log_end(qm)
    qm.put("ORDERS", "x0")
    qm.checkpoint()
    qm.close("immediate")
    rc, out = crestart(capsys, "--end-lsn", point, "--json")
    plan = json.loads(out[out.index("{"):out.rindex("}") + 1])
    assert plan["touched"] == ["ORDERS"]
    assert list(plan["stores_past_point"]) == ["ORDERS"], plan["stores_past_point"]
    rc, out = crestart(capsys, "--end-lsn", point, "--yes")
    assert rc == 0, out
    qm = open_qm()
    assert not qm.core.queues["IDLE"].damaged
    assert bodies(qm, "IDLE") == [f"i{i}" for i in range(10)]
    if log_type == "linear":
        assert bodies(qm, "ORDERS") == [f"m{i}" for i in range(10)]
    else:
        assert qm.core.queues["ORDERS"].damaged
    qm.close()


def test_end_time_cuts_at_the_first_record_after_it(make_qm, open_qm, home, capsys):
    make_qm(log_type="linear")
    qm = open_qm()
    qm.define_queue("ORDERS", DEFPSIST="YES")
    for i in range(5):
        qm.put("ORDERS", f"m{i}")
    time.sleep(0.05)
    when = time.time()
    time.sleep(0.05)
    for i in range(5, 8):
        qm.put("ORDERS", f"m{i}")
    qm.close("immediate")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(when)) + \
        f".{int(when % 1 * 1e6):06d}+00:00"
    rc, out = crestart(capsys, "--end-time", stamp, "--yes")
    assert rc == 0, out
    qm = open_qm()
    assert bodies(qm, "ORDERS") == [f"m{i}" for i in range(5)]
    qm.close()


def test_bad_requests_change_nothing(make_qm, open_qm, home, capsys):
    make_qm(log_type="linear")
    qm = open_qm()
    qm.define_queue("ORDERS", DEFPSIST="YES")
    qm.put("ORDERS", "m0")
    end = log_end(qm)
    qm.close()
    before = control(home).sequence
    rc, out = crestart(capsys, "--end-lsn", end + 10**6, "--yes")
    assert rc == 1 and "HMQ7132E" in out, out
    rc, out = crestart(capsys, "--end-lsn", 0, "--yes")
    assert rc == 1 and "reset-log" in out, out
    rc, out = crestart(capsys, "--end-time", "yesterday", "--yes")
    assert rc != 0 and "ISO 8601" in out, out
    rc, out = crestart(capsys)
    assert rc != 0 and "exactly one" in out
    assert control(home).sequence == before and control(home).crestart is None
    rc, out = crestart(capsys, "--end-lsn", 200, "--yes")
    assert rc == 0, out
    rc, out = crestart(capsys, "--end-lsn", 200, "--yes")
    assert rc == 1 and "already recorded" in out, out
    rc, out = crestart(capsys, "--cancel")
    assert rc == 0 and "cancelled" in out
    assert control(home).crestart is None
    qm = open_qm()
    assert bodies(qm, "ORDERS") == ["m0"], "a cancelled conditional restart does nothing"
    qm.close()


def _start_in_child(home, crash_at: str | None) -> int:
    env = dict(os.environ, HARBORMQ_HOME=str(home))
    if crash_at:
        env["HARBORMQ_CRASH_AT"] = crash_at
    code = ("from harbormq.api import QueueManager\n"
            "qm = QueueManager.open('QM1')\nqm.close('immediate')\n")
    return subprocess.run([sys.executable, "-c", code], env=env, timeout=120).returncode


@pytest.mark.parametrize("crash_at", ["crestart.mid_apply", "control.mid_rewrite",
                                      "media.mid_swap", "checkpoint.mid"])
def test_a_crash_during_the_conditional_restart_changes_nothing(make_qm, open_qm, home,
                                                                capsys, crash_at):
    """Killed while carrying it out (or in the restart that follows), the next
    start finishes it: the same queues, the given-up log never applied, the
    given-up extents kept once."""
    point = build(make_qm, open_qm, "linear")
    rc, out = crestart(capsys, "--end-lsn", point, "--yes")
    assert rc == 0, out
    rc = _start_in_child(home, crash_at)
    assert rc == -9, f"the start was not killed at {crash_at} (exit {rc})"
    qm = open_qm()
    assert bodies(qm, "ORDERS") == [f"m{i}" for i in range(10)]
    assert bodies(qm, "BULK") == []
    assert "LATE" not in qm.core.objects
    st = qm._call_sync(lambda: qm.core.log.state)
    assert len(st.discarded) == 1 and st.crestart is None
    log_dir = QMConfig.load("QM1").log_dir
    assert len(list(log_dir.glob("crestart.*.json"))) == 1
    given_up = [p.name for p in log_dir.glob("S*.LOG.given-up.*")]
    assert len(given_up) == len(set(n.split(".")[0] for n in given_up)), given_up
    qm.put("ORDERS", "after")
    qm.close("immediate")
    qm = open_qm()
    assert bodies(qm, "ORDERS") == [f"m{i}" for i in range(10)] + ["after"]
    qm.close()


def test_the_active_log_lost_conditional_restart_from_the_archive(make_qm, open_qm, home,
                                                                  tmp_path, capsys):
    """The seed scenario: the disk holding the log dies. The archive holds the
    extents up to the last ARCHIVE LOG and a copy of the control file; the
    operator puts the control file back, gives up what was never archived,
    and the queue manager comes back as it was at that archive point, its
    stores recreated from their media images."""
    archive = tmp_path / "archive"
    make_qm(log_type="linear", log_management="archive", log_archive_paths=[str(archive)])
    qm = open_qm()
    qm.define_queue("ORDERS", DEFPSIST="YES")
    for i in range(20):
        qm.put("ORDERS", f"m{i}")
    for _ in range(3):
        qm.get("ORDERS")
    last_archived = qm._call(qm.core.log_management.archive_now())[-1]
    for i in range(20, 30):
        qm.put("ORDERS", f"m{i}")
    qm.checkpoint()
    qm.close()
    config = QMConfig.load("QM1")
    for p in list(config.log_dir.iterdir()):       # the log's disk is gone
        if p.is_file():
            p.unlink()
    qm_archive = next(p for p in archive.iterdir() if p.is_dir())
    for name in ("control.1", "control.2"):
        (config.log_dir / name).write_bytes((qm_archive / "control.archived").read_bytes())
    rc, out = crestart(capsys, "--end-extent", last_archived, "--yes")
    assert rc == 0, out
    assert "Not readable" in out, out
    qm = open_qm()
    assert bodies(qm, "ORDERS") == [f"m{i}" for i in range(3, 20)]
    assert said(home, "HMQ7474I"), "the store was recreated from its image"
    qm.put("ORDERS", "after")
    qm.close()
    qm = open_qm()
    assert bodies(qm, "ORDERS")[-1] == "after"
    qm.close()


def test_the_pipeline_reads_no_given_up_record(make_qm, open_qm, home, capsys):
    """The pipeline reads extent files, not the control file: it learns the
    cut from the LOG_CRESTART record the log goes on with."""
    from harbormq.pipeline.extents import plan_extents
    from harbormq.pipeline.rows import read_extent
    point = build(make_qm, open_qm, "linear")
    assert main(["log", "crestart", "QM1", "--end-lsn", str(point), "--yes"]) == 0
    qm = open_qm()
    resume = qm._call_sync(lambda: qm.core.log.state.discarded[0]["to"])
    qm.put("ORDERS", "after")
    qm.close()
    lsns = []
    for plan in plan_extents(str(QMConfig.load("QM1").log_dir)):
        for batch in read_extent(plan):
            lsns += batch.column("lsn").to_pylist()
    assert lsns and lsns == sorted(lsns)
    assert not [x for x in lsns if point <= x < resume], "a given-up record was read"
    assert max(lsns) > resume


@pytest.mark.parametrize("crash_at", ["crestart.mid_apply", "control.mid_rewrite",
                                      "media.mid_swap"])
def test_a_power_cut_during_the_conditional_restart_changes_nothing(tmp_path, monkeypatch,
                                                                    capsys, crash_at):
    """As above, but the kill is a power cut (tests/support/lazyfs.py): what the
    conditional restart had not made durable is gone, its renames included."""
    from support.lazyfs import LazyFS

    from harbormq import QueueManager
    from harbormq.fsutil import fsync_dir
    from harbormq.qmgr import lifecycle

    seed = int(os.environ.get("HARBORMQ_CRASH_SEED") or 7)
    with LazyFS(tmp_path / "lazyfs") as fs:
        home = fs.mount / "hmq"
        home.mkdir()
        fsync_dir(fs.mount)
        monkeypatch.setenv("HARBORMQ_HOME", str(home))
        opened = []

        def open_(name="QM1"):
            opened.append(QueueManager.open(name, home=home))
            return opened[-1]

        point = build(lambda **o: lifecycle.create("QM1", home=home, log_file_pages=64, **o),
                      open_, "linear")
        rc, out = crestart(capsys, "--end-lsn", point, "--yes")
        assert rc == 0, out
        assert _start_in_child(home, crash_at) == -9
        fs.cut(seed, torn=True)
        qm = open_()
        try:
            assert bodies(qm, "ORDERS") == [f"m{i}" for i in range(10)]
            assert bodies(qm, "BULK") == []
            st = qm._call_sync(lambda: qm.core.log.state)
            assert len(st.discarded) == 1 and st.crestart is None
            qm.put("ORDERS", "after")
        finally:
            qm.close("immediate")
        fs.cut(seed + 1, torn=True)
        qm = open_()
        try:
            assert bodies(qm, "ORDERS") == [f"m{i}" for i in range(10)] + ["after"]
        finally:
            qm.close()
