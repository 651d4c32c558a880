"""Publications (MSG_PUBLISH, one record for N queues) through recovery:
media recovery of one target queue (only its own target of each publication),
a store put back behind the log on one target only, a long unit of work with
a publication shunted on a circular log (restart backs it out or redoes it
from the shunt), and SIGKILL at every named point of a publish: after the
caller was told it is on every target exactly once; otherwise on all or none."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys

import pytest
from recovery import test_shunt as shunt
from support.queues import full_contents, queue_bodies

from harbormq.config import QMConfig
from harbormq.log.records import Message
from harbormq.store.stores import QueueStore

TARGETS = ["S1", "S2", "S3"]


def publish(qm, queues, body, uow=None, *, priority=0):
    msg = Message(body=body, priority=priority, properties={"MQTopicString": "t/x"})
    return qm._call(qm.core.publish(queues, msg, uow.uow if uow is not None else None))


def store_dir(home, queue: str):
    return home / "qmgrs" / "QM1" / "queues" / queue


def test_recreating_one_target_takes_only_its_own_share(make_qm, open_qm, home):
    make_qm(log_type="linear")
    qm = open_qm()
    for name in TARGETS + ["OTHER"]:
        qm.define_queue(name, DEFPSIST="YES")
    for i in range(10):
        publish(qm, TARGETS, b"before-%d" % i, priority=i % 10)
    qm.image("queue", "S2")
    for i in range(10):
        publish(qm, TARGETS if i % 2 else ["S1", "S3"], b"after-%d" % i)
        qm.put("OTHER", b"plain-%d" % i)
    with qm.begin() as u:
        publish(qm, ["S2", "S2", "OTHER"], b"twice in a unit", u)
    backed = qm.begin()
    publish(qm, TARGETS, b"backed out", backed)
    backed.backout()
    for _ in range(3):
        qm.get("S2")
    doubt = qm.begin()
    publish(qm, TARGETS, b"in doubt", doubt)
    doubt.prepare()
    expected = {n: full_contents(qm, n) for n in TARGETS + ["OTHER"]}
    qm.close()

    shutil.rmtree(store_dir(home, "S2"))      # lost while stopped: recreated at start
    qm = open_qm()
    for name in TARGETS + ["OTHER"]:
        assert full_contents(qm, name) == expected[name], name
    assert qm.in_doubt() == [doubt.id]
    assert qm.queue_status("S2")["UNCOM"] == 1
    qm.resolve(doubt.id, commit=True)
    assert all(queue_bodies(qm, n)[-1] == b"in doubt" for n in TARGETS)
    s2 = queue_bodies(qm, "S2")
    assert s2.count(b"twice in a unit") == 2 and b"backed out" not in s2


def test_a_target_store_behind_the_log_is_brought_forward_alone(make_qm, open_qm, home):
    """One target's store put back from an older copy (its recovery LSN before
    a publication, the other targets' past it): restart redoes the publication
    for that target only, and no target gets it twice."""
    make_qm(log_type="linear")
    qm = open_qm()
    for name in TARGETS:
        qm.define_queue(name, DEFPSIST="YES")
    publish(qm, TARGETS, b"first")
    qm.checkpoint()
    qm.close()
    saved = home.parent / "S3.saved"
    shutil.copytree(store_dir(home, "S3"), saved)
    qm = open_qm()
    publish(qm, TARGETS, b"second")
    qm.checkpoint()                   # every store now past the second publication
    qm.close()
    shutil.rmtree(store_dir(home, "S3"))
    shutil.move(saved, store_dir(home, "S3"))
    qm = open_qm()
    for name in TARGETS:
        assert queue_bodies(qm, name) == [b"first", b"second"], name


# --- a publication in a shunted unit of work ------------------------------------------------

def long_unit_with_a_publication(qm, home):
    uow = shunt.start_long_unit(qm)
    publish(qm, ["OUT", "PUB"], shunt.body(9), uow)
    begin = uow.uow.first_lsn
    shunt.wrap(qm, 10)
    shunt.more_work(uow)
    shunt.check_shunted_past(qm, home, uow, begin)
    return uow, begin


@pytest.mark.parametrize("commit", [False, True], ids=["backed-out", "committed"])
def test_a_shunted_publication_is_undone_or_redone_from_its_shunt(make_qm, open_qm, home,
                                                                  commit):
    shunt.never_flush(make_qm, home)
    qm = open_qm()
    shunt.setup_queues(qm)
    qm.define_queue("PUB", DEFPSIST="YES")
    uow, begin = long_unit_with_a_publication(qm, home)
    if commit:
        uow.commit()
    qm.close("preemptive")
    qm = open_qm()
    assert qm.restart_report.redo_start_lsn > begin
    out = [shunt.body(0), shunt.body(1), shunt.body(9), shunt.body(2)]
    if commit:
        assert [m.body for m in qm.browse("OUT")] == out
        assert [m.body for m in qm.browse("PUB")] == [shunt.body(9)]
    else:
        assert qm.restart_report.uows_backed_out == 1
        # 3 gets, 3 puts, and one compensation for the whole publication
        assert qm.restart_report.compensations_written == 7
        assert qm.browse("OUT") == [] and qm.browse("PUB") == []
        assert qm.queue_status("PUB")["UNCOM"] == 0
    qm.close("preemptive")
    qm = open_qm()
    assert len(qm.browse("PUB")) == (1 if commit else 0)


# --- SIGKILL at each named point of a publish ---------------------------------------------

#: the child: publishes with receipts (the API's return after the force) and
#: prints each one told, then is killed at the crash point
PUBLISHER = """
import sys
from harbormq import QueueManager
from harbormq.log.records import Message
qm = QueueManager.open("QM1")
for name in {targets!r}:
    qm.define_queue(name, DEFPSIST="YES", MAXDEPTH=100000)
for i in range(40):
    if {in_uow!r}:
        u = qm.begin()
        qm._call(qm.core.publish({targets!r}, Message(body=b"p%d" % i), u.uow))
        u.commit()
    else:
        qm._call(qm.core.publish({targets!r}, Message(body=b"p%d" % i)))
    print("told", i, flush=True)
print("done", flush=True)
"""

#: (point, the pass it kills at, in a unit of work): a publication in a unit
#: of work reaches the queues at its COMMIT (no publish.applied nor .forced)
CRASH_POINTS = [("publish.appended", 5, False), ("publish.applied", 7, False),
                ("publish.forced", 9, False), ("log.after_write_before_fsync", 12, False),
                ("log.after_fsync_before_ack", 12, False), ("publish.appended", 5, True),
                ("log.after_write_before_fsync", 12, True),
                ("log.after_fsync_before_ack", 12, True)]


@pytest.mark.parametrize("point,nth,in_uow", CRASH_POINTS,
                         ids=[f"{p}-{'uow' if u else 'auto'}" for p, _, u in CRASH_POINTS])
def test_sigkill_at_a_publish_point(make_qm, open_qm, home, python_env, point, nth, in_uow):
    make_qm()
    env = dict(python_env, HARBORMQ_CRASH_AT=f"{point}:{nth}")
    proc = subprocess.run([sys.executable, "-c",
                           PUBLISHER.format(targets=TARGETS, in_uow=in_uow)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    told = [int(line.split()[1]) for line in proc.stdout.splitlines()
            if line.startswith("told")]
    qm = open_qm()
    contents = [[int(b[1:]) for b in queue_bodies(qm, name)] for name in TARGETS]
    # all targets the same: the publication is on all of them or on none
    assert contents[0] == contents[1] == contents[2]
    got = contents[0]
    assert got == sorted(set(got)), "each publication once, in order"
    assert got[:len(told)] == told, "every publication the caller was told of is there"
    assert len(got) <= len(told) + 1, "at most the one in progress beyond them"
    for name in TARGETS:
        assert qm.queue_status(name)["UNCOM"] == 0


def test_a_restart_after_a_kill_reads_every_publication_of_a_store_never_written(
        make_qm, home, python_env):
    """Stores never flushed before the kill: everything comes from redo."""
    make_qm()
    config = QMConfig.load("QM1", home)
    config.tuning.flush_interval_ms = 10**9
    config.tuning.flush_max_entries = 10**9
    config.save()
    env = dict(python_env, HARBORMQ_CRASH_AT="publish.forced:30")
    proc = subprocess.run([sys.executable, "-c",
                           PUBLISHER.format(targets=TARGETS, in_uow=False)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    store = QueueStore(config.queue_dir("S1"))
    assert store.count() == 0
    store.close()
    from harbormq import QueueManager
    qm = QueueManager.open("QM1", home=home)
    try:
        for name in TARGETS:
            assert queue_bodies(qm, name) == [b"p%d" % i for i in range(30)]
    finally:
        qm.close("immediate")




# --- power cuts (lazyfs) while publishing ---------------------------------------------------

#: the child on the lazyfs home: publishes from number FIRST on, outside and in
#: units of work, and appends each one it was told of to the journal (off the
#: cut disk), until it is killed
CUT_PUBLISHER = """
import sys
from harbormq import QueueManager
from harbormq.log.records import Message
qm = QueueManager.open("QM1", home={home!r})
journal = open({journal!r}, "a", buffering=1)
i = {first!r}
while True:
    if i % 3 == 0:
        u = qm.begin()
        qm._call(qm.core.publish({targets!r}, Message(body=b"p%d" % i), u.uow))
        u.commit()
    else:
        qm._call(qm.core.publish({targets!r}, Message(body=b"p%d" % i)))
    journal.write("%d\\n" % i)
    i += 1
"""


@pytest.mark.parametrize("log_type", ["circular", "linear"])
def test_power_cuts_while_publishing(tmp_path, python_env, log_type):
    """Power cut (lazyfs: what was not made durable is gone, or torn) while a
    publisher runs, several times: every publication it was told of is on
    every target exactly once, in order; one in progress is on all or none."""
    import os
    import random
    import time

    from support.lazyfs import LazyFS

    from harbormq import QueueManager
    from harbormq.fsutil import fsync_dir
    from harbormq.qmgr import lifecycle as qmgr
    rng = random.Random(int(os.environ.get("HARBORMQ_CRASH_SEED") or 29))
    journal = tmp_path / "journal"
    journal.write_text("")
    with LazyFS(tmp_path / "lazyfs") as fs:
        home = fs.mount / "hmq"
        home.mkdir()
        fsync_dir(home.parent)
        qmgr.create("QM1", home=home, log_type=log_type, log_file_pages=32, log_primary=3,
                    log_secondary=2)
        qm = QueueManager.open("QM1", home=home)
        for name in TARGETS:
            qm.define_queue(name, DEFPSIST="YES", MAXDEPTH=1_000_000)
        qm.close()
        first = 0
        for cut in range(4):
            child = subprocess.Popen(
                [sys.executable, "-c", CUT_PUBLISHER.format(
                    home=str(home), journal=str(journal), first=first, targets=TARGETS)],
                env=dict(python_env, HARBORMQ_HOME=str(home)),
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            deadline = time.monotonic() + 120
            while len(journal.read_text().split()) < first + 30:
                assert child.poll() is None, child.stderr.read().decode()[-2000:]
                assert time.monotonic() < deadline, "the publisher made no progress"
                time.sleep(0.02)
            time.sleep(rng.uniform(0, 0.3))
            child.kill()
            child.wait()
            child.stderr.close()
            fs.cut(rng.randrange(1 << 30), torn=rng.random() < 0.5)
            told = [int(x) for x in journal.read_text().split()]
            qm = QueueManager.open("QM1", home=home)
            try:
                contents = [[int(b[1:]) for b in queue_bodies(qm, name)] for name in TARGETS]
            finally:
                qm.close()
            assert contents[0] == contents[1] == contents[2], f"cut {cut}: all or none"
            got = contents[0]
            assert got == list(range(len(got))), f"cut {cut}: once each, in order"
            assert len(told) <= len(got) <= len(told) + 1, f"cut {cut}: {len(told)} told"
            first = len(got)
            journal.write_text("".join(f"{i}\n" for i in range(first)))
