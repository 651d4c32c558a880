"""The edges of conditional restart and reset-log (a review found each of
these; each test failed before its fix): a point the log can no longer
restart from, a start that dies while carrying the cut out, archiving,
scrubbing, backing up and ingesting a log with a cut, a degraded dual log,
and reset-log's crash windows and ids."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import tomllib

import pytest
import tomli_w
from support.lost_log import lose_the_log
from test_crestart import bodies, crestart, log_end

from harbormq import QueueManager
from harbormq.cli.main import main
from harbormq.config import QMConfig
from harbormq.errors import HarbormqError
from harbormq.log.archive import archive_dir, scrub
from harbormq.log.control import ControlFile
from harbormq.log.manager import RecoveryLog
from harbormq.log.records import EXTENT_HEADER_SIZE, extent_file_name
from harbormq.qmgr import log_offline


def run(capsys, *args) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(list(map(str, args)))
    out = capsys.readouterr()
    return rc, " ".join((out.out + out.err).split())


def active(qm) -> int:
    return qm._call_sync(lambda: qm.core.log.state.active.number)


@pytest.mark.parametrize("shunting", [False, True])
def test_a_point_whose_restart_extent_was_reused_is_refused(make_qm, open_qm, home, capsys,
                                                            shunting):
    """Circular log: the checkpoint before the point needs an extent a later
    checkpoint freed. Carried out, the cut could never be restarted from: it
    is refused. With log shunting the long unit of work was copied forward, the
    checkpoint needs no freed extent, and the same point is carried out."""
    make_qm(log_type="circular", log_primary=3, log_secondary=2)
    config_path = QMConfig.load("QM1").config_path
    data = tomllib.loads(config_path.read_text())
    data.setdefault("tuning", {})["shunt_checkpoints"] = 3 if shunting else 0
    config_path.write_text(tomli_w.dumps(data))
    qm = open_qm()
    qm.define_queue("ORDERS", DEFPSIST="YES")
    qm.define_queue("BULK", DEFPSIST="YES")
    qm.checkpoint()
    i = 0
    while active(qm) < 1:
        qm.put("BULK", f"b{i}".ljust(2000, "."))
        i += 1
    u = qm.begin()
    u.put("ORDERS", "u0")                   # its first LSN in extent 1
    while active(qm) < 2:
        qm.put("BULK", f"b{i}".ljust(2000, "."))
        i += 1
    qm.checkpoint()                         # its restart point: extent 1 (unless shunted)
    u.commit()
    point = log_end(qm)
    qm.put("ORDERS", "after the point")
    qm.checkpoint()                         # extents 0 and 1 freed
    qm.close("immediate")
    rc, out = run(capsys, "log", "crestart", "QM1", "--end-lsn", point, "--yes")
    if not shunting:
        assert rc == 1 and "HMQ7132E" in out and "no longer in the log" in out, out
        qm = open_qm()                      # nothing was recorded: it starts as before
        assert "after the point" in bodies(qm, "ORDERS")
        qm.close()
        return
    assert rc == 0, out
    qm = open_qm()
    assert not qm.core.queues["ORDERS"].damaged or \
        "given up" in qm.core.queues["ORDERS"].damage_reason
    qm.close()


def _build_for_apply(make_qm, open_qm):
    make_qm(log_type="linear")
    qm = open_qm()
    qm.define_queue("ORDERS", DEFPSIST="YES")
    for i in range(10):
        qm.put("ORDERS", f"m{i}")
    point = log_end(qm)
    for i in range(200):
        qm.put("ORDERS", f"b{i}".ljust(2000, "."))
    qm.close("immediate")
    return point


def test_a_start_killed_while_carrying_it_out_cannot_be_cancelled(make_qm, open_qm, home,
                                                                  capsys):
    point = _build_for_apply(make_qm, open_qm)
    rc, out = crestart(capsys, "--end-lsn", point, "--yes")
    assert rc == 0, out
    env = dict(os.environ, HARBORMQ_HOME=str(home), HARBORMQ_CRASH_AT="crestart.mid_apply")
    code = "from harbormq.api import QueueManager\nQueueManager.open('QM1').close('immediate')\n"
    assert subprocess.run([sys.executable, "-c", code], env=env).returncode == -9
    rc, out = run(capsys, "log", "crestart", "QM1", "--cancel")
    assert rc == 1 and "can only be finished" in out, out
    qm = open_qm()
    assert bodies(qm, "ORDERS") == [f"m{i}" for i in range(10)]
    qm.close()


def test_a_full_disk_while_carrying_it_out_is_named_and_finished_later(
        make_qm, open_qm, home, capsys, monkeypatch):
    point = _build_for_apply(make_qm, open_qm)
    rc, out = crestart(capsys, "--end-lsn", point, "--yes")
    assert rc == 0, out
    real = os.posix_fallocate

    def full(fd, off, size):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(HarbormqError) as exc:
        QueueManager.open("QM1", home=home)
    assert exc.value.msgid == "HMQ7132E" and "No space left" in exc.value.message
    monkeypatch.setattr(os, "posix_fallocate", real)
    qm = open_qm()
    assert bodies(qm, "ORDERS") == [f"m{i}" for i in range(10)]
    qm.close()


def test_a_cut_extent_damaged_after_the_cut_can_be_archived(make_qm, open_qm, home, tmp_path,
                                                           capsys):
    archive = tmp_path / "archive"
    make_qm(log_type="linear", log_management="archive", log_archive_paths=[str(archive)])
    qm = open_qm()
    qm.define_queue("ORDERS", DEFPSIST="YES")
    for i in range(5):
        qm.put("ORDERS", f"m{i}")
    point = log_end(qm)
    for i in range(20):
        qm.put("ORDERS", f"x{i}".ljust(500, "."))
    qm.close("immediate")
    with open(QMConfig.load("QM1").log_dir / extent_file_name(0), "r+b") as f:
        f.seek(EXTENT_HEADER_SIZE + point + 3000)      # the reason for the cut
        f.write(b"\xff" * 32)
    with pytest.raises(HarbormqError):
        open_qm()
    rc, out = crestart(capsys, "--end-lsn", point, "--yes")
    assert rc == 0, out
    qm = open_qm()
    assert bodies(qm, "ORDERS") == [f"m{i}" for i in range(5)]
    qm._call(qm.core.log_management.archive_now())
    qm.close()
    assert (archive_dir(archive, "QM1") / extent_file_name(0)).exists(), "the cut extent"
    assert all(r["bad"] is None for r in scrub([archive], "QM1"))


@pytest.mark.parametrize("boundary", [True, False])
def test_scrub_accepts_the_gap_of_a_conditional_restart(make_qm, open_qm, home, tmp_path,
                                                        capsys, boundary):
    """At an extent boundary (the active log lost, --end-extent), or inside an
    extent archived before the cut: the next archived extent starts at H."""
    archive = tmp_path / "archive"
    make_qm(log_type="linear", log_management="archive", log_archive_paths=[str(archive)])
    qm = open_qm()
    qm.define_queue("ORDERS", DEFPSIST="YES")
    qm.put("ORDERS", "m0")
    point = log_end(qm)
    qm.put("ORDERS", "m1")
    last = qm._call(qm.core.log_management.archive_now())[-1]
    qm.put("ORDERS", "m2")
    qm.close()
    if boundary:
        rc, out = crestart(capsys, "--end-extent", last, "--yes")
    else:
        rc, out = crestart(capsys, "--end-lsn", point, "--yes")
    assert rc == 0, out
    qm = open_qm()
    assert bodies(qm, "ORDERS") == (["m0", "m1"] if boundary else ["m0"])
    qm.put("ORDERS", "after")
    qm._call(qm.core.log_management.archive_now())
    qm.close()
    reports = scrub([archive], "QM1")
    assert all(r["bad"] is None for r in reports), reports
    assert sum(r["extents"] for r in reports) >= 2


def test_a_degraded_dual_copy_is_not_written_by_the_cut(make_qm, open_qm, home, tmp_path,
                                                        capsys):
    make_qm(log_type="linear", log_dual_path=tmp_path / "dual")
    qm = open_qm()
    qm.define_queue("ORDERS", DEFPSIST="YES")
    qm.put("ORDERS", "m0")
    point = log_end(qm)
    qm.put("ORDERS", "m1")
    qm.close("immediate")
    config = QMConfig.load("QM1")
    cf = ControlFile(config.log_dir, config.log_dual_dir)
    st = cf.load(repair=False)
    st.degraded, st.degraded_lsn, st.sequence = "dual", 0, st.sequence + 1
    cf.write(st)
    rc, out = crestart(capsys, "--end-lsn", point, "--yes")
    assert rc == 0, out
    shutil.rmtree(config.log_dual_dir)        # the given-up copy's disk is gone
    qm = open_qm()
    assert bodies(qm, "ORDERS") == ["m0"]
    qm.close()


def test_a_backup_across_a_cut_restores(make_qm, open_qm, home, tmp_path, capsys):
    """An in-doubt unit of work kept across the cut pins the restart point
    before it: the backup holds the cut extent and the gap."""
    from support.procs import child_env, hmq

    from harbormq.backup.take import take_backup
    make_qm(log_type="linear")
    qm = open_qm()
    qm.define_queue("ORDERS", DEFPSIST="YES")
    qm.put("ORDERS", "m0")
    u = qm.begin(owner="xa")
    u.put("ORDERS", "indoubt")
    u.prepare()
    point = log_end(qm)
    qm.put("ORDERS", "lost")
    qm.close("immediate")
    rc, out = crestart(capsys, "--end-lsn", point, "--yes")
    assert rc == 0, out
    qm = open_qm()
    qm.put("ORDERS", "after")
    qm.close()
    bk = take_backup(QMConfig.load("QM1"), tmp_path / "bk")
    home2 = tmp_path / "home2"
    home2.mkdir()
    hmq(child_env(home2), "restore", "QM1", "--from", str(bk.path), "--port", "0")
    with QueueManager.open("QM1", home=home2) as qm2:
        assert bodies(qm2, "ORDERS") == ["m0", "after"]
        assert qm2.in_doubt()


def test_the_lake_hides_rows_ingested_before_the_cut(tmp_path, spark, make_qm, open_qm, home,
                                                     capsys):
    from harbormq.pipeline.ingest import Lake, run_ingest
    make_qm(log_type="linear")
    qm = open_qm()
    qm.define_queue("ORDERS", DEFPSIST="YES")
    for i in range(5):
        qm.put("ORDERS", f"m{i}")
    point = log_end(qm)
    for i in range(5):
        qm.put("ORDERS", f"lost{i}")
    qm.close("immediate")
    log, lake = str(QMConfig.load("QM1").log_dir), str(tmp_path / "lake")
    run_ingest(spark, log, lake)                 # the nightly ingest
    rc, out = crestart(capsys, "--end-lsn", point, "--yes")
    assert rc == 0, out
    qm = open_qm()
    resumed = qm._call_sync(lambda: qm.core.log.state.discarded[0]["to"])
    qm.put("ORDERS", "after")
    qm.close()
    run_ingest(spark, log, lake)
    lsns = [r.lsn for r in Lake(lake).records(spark).select("lsn").collect()]
    assert not [x for x in lsns if point <= x < resumed], "a given-up row is in the lake"
    assert max(lsns) >= resumed


def _reset_setup(make_qm, open_qm):
    make_qm(log_type="linear")
    qm = open_qm()
    qm.define_queue("ORDERS", DEFPSIST="YES")
    ids = []
    for i in range(5):
        u = qm.begin()
        u.put("ORDERS", f"m{i}".ljust(3000))
        u.commit()
        ids.append(u.uow.id)
    for _ in range(3):
        qm._call_sync(qm.core.log.switch_now)
    qm.close("immediate")
    return ids


def test_reset_log_never_reuses_unit_of_work_ids(make_qm, open_qm, home, capsys):
    ids = _reset_setup(make_qm, open_qm)
    lose_the_log()
    rc, out = run(capsys, "reset-log", "QM1", "--yes")
    assert rc == 0, out
    qm = open_qm()
    u = qm.begin()
    u.put("ORDERS", "new")
    u.commit()
    assert u.uow.id > max(ids)
    qm.close()


def test_reset_log_killed_after_creating_the_log_still_takes_images(make_qm, open_qm, home,
                                                                    capsys):
    _reset_setup(make_qm, open_qm)
    lose_the_log()
    real = RecoveryLog.create.__func__

    def create_then_die(cls, *a, **k):
        real(cls, *a, **k)
        raise SystemExit("killed")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(RecoveryLog, "create", classmethod(create_then_die))
        with pytest.raises(SystemExit):
            log_offline.reset_log_stopped(QMConfig.load("QM1"), write=True)
    qm = open_qm()
    assert len(bodies(qm, "ORDERS")) == 5
    qm.close()
    shutil.rmtree(QMConfig.load("QM1").queue_dir("ORDERS"))   # a store lost later
    qm = open_qm()
    assert len(bodies(qm, "ORDERS")) == 5, "recreated from the image the first start took"
    qm.close()


def test_reset_log_killed_after_renaming_the_old_files_starts_as_high(make_qm, open_qm, home,
                                                                     capsys):
    _reset_setup(make_qm, open_qm)
    config = QMConfig.load("QM1")
    for p in config.log_dir.glob("S*.LOG"):
        p.unlink()                           # the extents lost, the control file kept
    rc, first = run(capsys, "reset-log", "QM1")
    assert rc == 0, first

    def die(cls, *a, **k):
        raise SystemExit("killed")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(RecoveryLog, "create", classmethod(die))
        with pytest.raises(SystemExit):
            log_offline.reset_log_stopped(config, write=True)
    rc, again = run(capsys, "reset-log", "QM1")
    assert rc == 0, again
    assert first.split(";")[0] == again.split(";")[0], (first, again)
