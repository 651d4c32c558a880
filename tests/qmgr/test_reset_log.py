"""``harbormq reset-log`` (z/OS: a new log and RESETPAGE): every copy of the
log is lost, the stores are whole. A new log starts above every LSN the
stores know; the queues keep what they held at the clean stop; what is left
of the old log is kept aside. And the queue manager's name, recorded in the
control file, every extent and every store, is checked: one queue manager's
log or store is never taken for another's."""

from __future__ import annotations

import shutil

import pytest
from support.lost_log import lose_the_log
from support.oplog import operator_log

from harbormq.cli.main import main
from harbormq.config import QMConfig

BOTH_LOGS = pytest.mark.parametrize("log_type", ["circular", "linear"])


def bodies(qm, queue):
    return [m.body.decode() for m in qm.browse(queue, limit=100_000)]


def reset(capsys, *args, name="QM1"):
    capsys.readouterr()
    rc = main(["reset-log", name, *args])
    out = capsys.readouterr()
    return rc, " ".join((out.out + out.err).split())


@BOTH_LOGS
def test_a_new_log_from_cleanly_stopped_stores(make_qm, open_qm, home, capsys, log_type):
    make_qm(log_type=log_type)
    qm = open_qm()
    qm.define_queue("ORDERS", DEFPSIST="YES")
    for i in range(20):
        qm.put("ORDERS", f"m{i}")
    qm.get("ORDERS")
    uow = qm.begin()
    uow.get("ORDERS")          # in flight at the stop: its message stays
    qm.close("immediate")
    rc, out = reset(capsys)
    assert rc == 1 and "not lost" in out, out
    log_dir = lose_the_log()
    rc, out = reset(capsys)
    assert rc == 0 and "Nothing changed" in out, out
    assert (log_dir / "control.1").read_bytes() == b"\0" * 100
    rc, out = reset(capsys, "--yes")
    assert rc == 0, out
    assert [m for m, _ in operator_log(home, "QM1")].count("HMQ7135W") == 1
    [kept] = [p for p in log_dir.iterdir() if p.name.startswith("control.1.reset.")]
    assert kept.read_bytes() == b"\0" * 100, "what was left is kept"
    qm = open_qm()
    assert bodies(qm, "ORDERS") == [f"m{i}" for i in range(1, 20)]
    st = qm._call_sync(lambda: qm.core.log.state)
    assert min(e.first_lsn for e in st.extents) > 0, "the new log starts above the old"
    assert not st.images_needed
    qm.put("ORDERS", "after")
    qm.close("immediate")
    qm = open_qm()
    assert bodies(qm, "ORDERS") == [f"m{i}" for i in range(1, 20)] + ["after"]
    if log_type == "linear":        # the new log can recreate: it has images
        qm.close()
        shutil.rmtree(QMConfig.load("QM1").queue_dir("ORDERS"))
        qm = open_qm()
        assert bodies(qm, "ORDERS") == [f"m{i}" for i in range(1, 20)] + ["after"]
    qm.close()


def test_refused_after_a_crash_unless_forced(make_qm, open_qm, home, capsys):
    make_qm(log_type="linear")
    qm = open_qm()
    qm.define_queue("ORDERS", DEFPSIST="YES")
    qm.put("ORDERS", "m0")
    qm.close()
    qm = open_qm()          # started: no longer a clean stop
    qm.put("ORDERS", "m1")
    qm.checkpoint()
    qm.close("preemptive")  # no checkpoint, nothing recorded: as a crash
    lose_the_log()
    rc, out = reset(capsys, "--yes")
    assert rc == 1 and "HMQ7136E" in out and "not stopped cleanly" in out, out
    rc, out = reset(capsys, "--yes", "--force")
    assert rc == 0 and "WARNING" in out, out
    qm = open_qm()
    assert bodies(qm, "ORDERS") == ["m0", "m1"]
    qm.close()


def test_another_queue_managers_log_or_store_is_refused(make_qm, open_qm, home, capsys):
    make_qm("QMA", log_type="linear")
    make_qm("QMB", log_type="linear")
    for name in ("QMA", "QMB"):
        qm = open_qm(name)
        qm.define_queue("ORDERS", DEFPSIST="YES")
        qm.put("ORDERS", f"from {name}")
        qm.close()
    a, b = QMConfig.load("QMA"), QMConfig.load("QMB")
    # QMB's store put in QMA's place: damaged (recreated from QMA's own log)
    shutil.rmtree(a.queue_dir("ORDERS"))
    shutil.copytree(b.queue_dir("ORDERS"), a.queue_dir("ORDERS"))
    qm = open_qm("QMA")
    assert bodies(qm, "ORDERS") == ["from QMA"]
    said = [t for m, t in operator_log(home, "QMA") if m == "HMQ7472E"]
    assert said and "belongs to queue manager QMB" in said[0], said
    qm.close()
    # QMB's log in QMA's place: refused, nothing changed
    saved = a.log_dir.with_name("saved-log")
    shutil.move(a.log_dir, saved)
    shutil.copytree(b.log_dir, a.log_dir)
    with pytest.raises(Exception) as exc:
        open_qm("QMA")
    assert "belongs to queue manager QMB" in str(exc.value)
    shutil.rmtree(a.log_dir)
    shutil.move(saved, a.log_dir)
    qm = open_qm("QMA")
    assert bodies(qm, "ORDERS") == ["from QMA"]
    qm.close()


def test_dump_config_reads_the_definitions_after_a_reset(make_qm, open_qm, home, capsys):
    """The catalog's recovery LSN belongs to the old log, below the new one:
    dump-config reads the new log from where restart does, not from there."""
    make_qm()
    qm = open_qm()
    qm.define_queue("ORDERS", DEFPSIST="YES", MAXDEPTH=777)
    qm.close()
    lose_the_log()
    rc, out = reset(capsys, "--yes")
    assert rc == 0, out
    capsys.readouterr()
    assert main(["dump-config", "QM1"]) == 0     # stopped, straight after the reset
    script = capsys.readouterr().out
    assert "DEFINE QLOCAL('ORDERS')" in script and "MAXDEPTH(777)" in script, script
    qm = open_qm()
    qm.define_queue("LATER")
    qm.close("immediate")                       # in the new log only, not in the catalog
    capsys.readouterr()
    assert main(["dump-config", "QM1"]) == 0
    script = capsys.readouterr().out
    assert "DEFINE QLOCAL('ORDERS')" in script and "DEFINE QLOCAL('LATER')" in script, script
