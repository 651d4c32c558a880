"""/metrics' figures against the queue manager's own, on a real queue
manager in this process (the embedded API): depths, puts and gets, units of
work, backouts and expiries, the log's bytes, records and forces, the
counters after a restart, the backup record; and a snapshot of many queues
taken in steps between which message traffic runs."""

from __future__ import annotations

import asyncio
import time

from prometheus_client.parser import text_string_to_metric_families

from harbormq.admin.commands import archive_log
from harbormq.backup.history import read_history
from harbormq.backup.take import take_backup
from harbormq.backup.verify import verify_backup
from harbormq.config import QMConfig
from harbormq.http import metrics_snapshot
from harbormq.http.metrics import MetricsEndpoint, backup_record_reader


def scrape(qm, **kw) -> dict:
    """{(family, frozen labels without qmgr): value} of one scrape."""
    endpoint = MetricsEndpoint(qm.core, restart=lambda: qm.restart_report.as_dict(),
                               backups=backup_record_reader(qm.config.qm_dir))
    try:
        text = qm._call(endpoint.scrape(**kw)).decode()
    finally:
        endpoint.close()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "qmgr"))
            out[(s.name, labels)] = s.value
    return out


def q(name: str) -> tuple:
    return (("queue", name),)


def test_queue_figures_equal_the_queue_managers(make_qm, open_qm):
    make_qm()
    qm = open_qm()
    qm.define_queue("M.A")
    qm.define_queue("M.B")
    for i in range(7):
        qm.put("M.A", f"m{i}", persistent=i % 2 == 0)
    for _ in range(3):
        assert qm.get("M.A") is not None
    uow = qm.begin()
    uow.put("M.B", "pending")
    uow.get("M.A")
    m = scrape(qm)
    status = qm.queue_status("M.A")
    assert m[("harbormq_queue_depth", q("M.A"))] == status["CURDEPTH"] == 3
    assert m[("harbormq_queue_puts_total", q("M.A"))] == 7
    assert m[("harbormq_queue_gets_total", q("M.A"))] == 3
    assert m[("harbormq_queue_uncommitted_messages", q("M.A"))] == 1
    assert m[("harbormq_queue_uncommitted_messages", q("M.B"))] == 1
    assert m[("harbormq_queue_depth", q("M.B"))] == 1      # CURDEPTH counts uncommitted puts
    assert m[("harbormq_queue_max_depth", q("M.A"))] == qm.core.queues["M.A"].attrs["MAXDEPTH"]
    assert m[("harbormq_queue_oldest_message_age_seconds", q("M.A"))] > 0
    assert m[("harbormq_queue_oldest_message_age_seconds", q("M.B"))] == 0   # none available
    assert m[("harbormq_units_of_work", (("state", "active"),))] == 1
    uow.backout()
    m = scrape(qm)
    assert m[("harbormq_queue_backouts_total", q("M.A"))] == 1
    assert m[("harbormq_redelivered_messages_total", ())] == 1
    assert m[("harbormq_queue_depth", q("M.A"))] == 4
    assert m[("harbormq_queue_depth", q("M.B"))] == 0
    assert m[("harbormq_units_of_work", (("state", "active"),))] == 0
    # what the log says of itself
    log = qm.core.log
    assert m[("harbormq_log_written_bytes_total", ())] == log.end_lsn
    assert m[("harbormq_log_restart_bytes", ())] == log.end_lsn - log.state.restart_lsn
    assert m[("harbormq_log_written_records_total", ())] == \
        log.records_before_checkpoint + log.records_since_checkpoint > 10
    forces = m[("harbormq_log_forces_total", ())]
    assert forces == m[("harbormq_log_force_duration_seconds_count", ())] >= 4
    assert m[("harbormq_log_force_duration_seconds_bucket", (("le", "+Inf"),))] == forces
    assert m[("harbormq_connections", ())] == len(qm.core.connections) == 1
    assert m[("harbormq_queues", ())] == len(qm.core.queues)
    assert ("harbormq_filesystem_free_bytes", (("path", str(log.dir)), ("role", "log"))) in m


def test_expiry_and_the_dead_letter_queue(make_qm, open_qm):
    make_qm()
    qm = open_qm()
    qm.define_queue("M.EXP")
    qm.put("M.EXP", "soon gone", expiry=0.05)
    qm.put("M.EXP", "stays")
    time.sleep(0.1)
    assert qm.get("M.EXP").body == b"stays"     # the expired one is removed on the way
    qm.put("SYSTEM.DEAD.LETTER.QUEUE", "dead")
    m = scrape(qm)
    assert m[("harbormq_queue_expired_messages_total", q("M.EXP"))] == 1
    assert m[("harbormq_queue_gets_total", q("M.EXP"))] == 1
    assert m[("harbormq_expired_messages_total", ())] == 1
    assert m[("harbormq_dead_lettered_messages_total", ())] == 1


def test_a_restart_starts_the_counters_again_and_reports_its_phases(make_qm, open_qm):
    make_qm()
    qm = open_qm()
    qm.define_queue("M.R")
    for _ in range(5):
        qm.put("M.R", "x", persistent=True)
    qm.close("immediate")
    qm = open_qm()
    m = scrape(qm, patterns=["M.*"])
    assert m[("harbormq_queue_depth", q("M.R"))] == 5
    assert m[("harbormq_queue_puts_total", q("M.R"))] == 0      # redo is not counted
    phases = {dict(labels)["phase"]: v for (name, labels), v in m.items()
              if name == "harbormq_restart_phase_duration_seconds"}
    assert set(phases) == set(qm.restart_report.phases)
    assert abs(m[("harbormq_restart_duration_seconds", ())] - sum(phases.values())) < 1e-3
    # ?queue= kept only M.* rows; the totals still count every queue
    assert not any(name.startswith("harbormq_queue_") and dict(labels)["queue"] == "SYSTEM."
                   "DEAD.LETTER.QUEUE" for name, labels in m)
    assert m[("harbormq_queues", ())] == len(qm.core.queues)


def test_backup_and_verification_times(make_qm, open_qm, tmp_path):
    make_qm()
    qm = open_qm()
    m = scrape(qm)
    assert ("harbormq_backup_last_time_seconds", ()) not in m     # never backed up
    qm.close()
    config = QMConfig.load("QM1")
    before = time.time()
    result = take_backup(config, tmp_path / "bk")
    record = read_history(config.qm_dir)
    assert record["backup"] == str(result.path) and record["backup_time_s"] >= before
    verify_backup(result.path)
    verified = read_history(config.qm_dir)["verified_time_s"]
    assert verified >= record["backup_time_s"]
    qm = open_qm()
    m = scrape(qm)
    assert m[("harbormq_backup_last_time_seconds", ())] == record["backup_time_s"]
    assert m[("harbormq_backup_last_verified_time_seconds", ())] == verified


def test_a_snapshot_of_many_queues_lets_puts_run_between_its_steps(make_qm, open_qm,
                                                                    monkeypatch):
    make_qm()
    qm = open_qm()
    qm.define_queue("M.BUSY")
    core = qm.core
    n = 120

    async def define_many():
        await asyncio.gather(*(core.define_queue(f"M.MANY.{i:05d}", {}) for i in range(n)))
    qm._call(define_many())
    # a step at every look at the clock, every 4 queues (a real step is 4 ms)
    monkeypatch.setattr(metrics_snapshot, "STEP_SECONDS", 0.0)
    monkeypatch.setattr(metrics_snapshot, "CLOCK_EVERY", 4)

    async def race():
        done = []

        async def producer():
            while not done:
                msg, _ = core.put_nowait("M.BUSY", qm._message(
                    "M.BUSY", b"x", False, None, None, None, None, "", "", None))
                await asyncio.sleep(0)
        task = asyncio.ensure_future(producer())
        await asyncio.sleep(0)
        snap = await metrics_snapshot.take_snapshot(core)
        done.append(True)
        await task
        return snap, core.queues["M.BUSY"].depth
    snap, depth_after = qm._call(race())
    assert snap.steps >= n // 4
    busy = snap.queues.row("M.BUSY")
    # puts went on while the snapshot was taken: before and after the queue's row
    assert 0 < busy["depth"] < depth_after


def test_a_linear_logs_archive_backlog_and_reusable_bytes(make_qm, open_qm, tmp_path):
    make_qm(log_type="linear", log_management="manual",
            log_archive_paths=[str(tmp_path / "arch")])
    qm = open_qm()
    qm.define_queue("M.LIN")
    log = qm.core.log
    for _ in range(3):                         # close three extents; none archived
        qm.put("M.LIN", b"x" * 4000, persistent=True)
        qm._call_sync(log.switch_now)
    m = scrape(qm)
    st = log.state
    full = [e for e in st.extents if e.state == "full" and not e.deleted]
    assert len(full) >= 3 and not any(e.archived for e in full)
    assert m[("harbormq_log_archive_backlog_extents", ())] == len(full)
    assert m[("harbormq_log_archive_backlog_bytes", ())] == len(full) * log.extent_size
    assert m[("harbormq_log_extents", (("state", "full"),))] == len(full)
    assert m[("harbormq_log_media_recovery_bytes", ())] == log.end_lsn - st.media_lsn
    needed_from = min(st.restart_lsn, st.media_lsn)
    assert m[("harbormq_log_reusable_bytes", ())] == log.extent_size * sum(
        1 for e in full if e.end_lsn <= needed_from)
    qm._call(archive_log(qm.core))             # ARCHIVE LOG: the backlog goes
    m = scrape(qm)
    assert m[("harbormq_log_archive_backlog_extents", ())] == 0
    assert ("harbormq_filesystem_free_bytes",
            (("path", str(tmp_path / "arch")), ("role", "archive"))) in m
