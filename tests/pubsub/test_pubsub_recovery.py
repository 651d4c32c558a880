"""Publish/subscribe state is queue state: durable subscriptions and retained
publications survive SIGKILL, a lost status store (recreated from the log),
and a backup restored on another home."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from support.oplog import operator_log
from support.procs import PYTHON, child_env, hmq

from harbormq import QueueManager
from harbormq.core.objects import DURABLE_SUBSCRIBER_QUEUE
from harbormq.log.records import Message

CHILD = Path(__file__).with_name("pubsub_child.py")


@pytest.mark.parametrize("crash_at", [None, "log.after_write_before_fsync:120",
                                      "log.after_fsync_before_ack:120"])
def test_receipted_publications_are_on_every_durable_subscription_after_sigkill(
        make_qm, home, crash_at):
    """SIGKILL at a random moment (None), or at a named point inside a publish
    (its records written, not forced; forced, the publisher not yet told)."""
    make_qm()
    env = child_env(home)
    if crash_at:
        env["HARBORMQ_CRASH_AT"] = crash_at
    proc = subprocess.Popen([PYTHON, str(CHILD), str(home), "QM1"], env=env,
                            stdout=subprocess.PIPE, text=True)
    acked = -1
    try:
        assert proc.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 60
        while (crash_at or acked < 150) and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break                 # it killed itself at its crash point
            if line.startswith("ack "):
                acked = int(line.split()[1])
        if crash_at is None:
            os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert acked >= 20
    with QueueManager.open("QM1", home=home) as qm:
        ps = qm.core.pubsub
        assert sorted(ps.subs) == ["SUB.M", "SUB.P"]
        for queue in (ps.subs["SUB.M"].dest, "PROVIDED"):
            got = [int(m.body.decode()[2:]) for m in qm.browse(queue)]
            # every receipted one, once, in order; at most the one in flight more
            assert got[:acked + 1] == list(range(acked + 1)), queue
            assert len(got) <= acked + 2
            last = got[-1]
        # the retained publication is the last one committed
        retained = ps.retained()["crash/t"]
        assert retained.body == f"p-{last}".encode()


def test_a_lost_status_store_is_recreated_from_the_log(make_qm, home):
    make_qm(log_type="linear")
    with QueueManager.open("QM1", home=home) as qm:
        ps = qm.core.pubsub
        s = qm._call(ps.subscribe("news/#", name="NEWS", durable=True))
        qm._call(ps.publish("news/a", Message(b"kept", persistent=True), retain=True))
        dest = s.dest
    shutil.rmtree(home / "qmgrs" / "QM1" / "queues" / DURABLE_SUBSCRIBER_QUEUE)
    with QueueManager.open("QM1", home=home) as qm:
        assert any(m == "HMQ7474I" and DURABLE_SUBSCRIBER_QUEUE in t
                   for m, t in operator_log(home))
        ps = qm.core.pubsub
        assert ps.subs["NEWS"].dest == dest
        assert [m.body for m in qm.browse(dest)] == [b"kept"]
        qm._call(ps.publish("news/b", Message(b"after", persistent=True)))
        assert [m.body for m in qm.browse(dest)] == [b"kept", b"after"]


def test_a_backup_restored_elsewhere_keeps_subscriptions_and_retained(make_qm, home,
                                                                        tmp_path):
    make_qm(log_type="linear")
    with QueueManager.open("QM1", home=home) as qm:
        ps = qm.core.pubsub
        qm._call(ps.define_topic("T", {"TOPICSTR": "t", "DEFPSIST": "YES"}))
        s = qm._call(ps.subscribe("t/#", name="TS", durable=True))
        qm._call(ps.publish("t/x", Message(b"one", persistent=True), retain=True))
        dest = s.dest
    r = hmq(child_env(home), "backup", "QM1", "--to", str(tmp_path / "bk"), "--json")
    path = json.loads(r.stdout)["path"]
    shutil.rmtree(home)
    home2 = tmp_path / "home2"
    home2.mkdir()
    hmq(child_env(home2), "restore", "QM1", "--from", path, "--port", "0")
    with QueueManager.open("QM1", home=home2) as qm:
        ps = qm.core.pubsub
        assert ps.subs["TS"].dest == dest and ps.subs["TS"].topic == "t/#"
        assert [m.body for m in qm.browse(dest)] == [b"one"]
        assert ps.retained()["t/x"].body == b"one"
        assert ps.topics.resolve("t/x", "DEFPSIST") == "YES"
        assert qm._call(ps.publish("t/y", Message(b"two", persistent=True))) == 1


def test_dump_config_writes_topics_and_subscriptions_back_as_mqsc(make_qm, home):
    from harbormq.admin.commands import run_mqsc
    from harbormq.config import QMConfig
    from harbormq.pubsub.status import subscription_attrs
    from harbormq.security import Security
    from harbormq.unload.definitions import dump_config

    make_qm()
    with QueueManager.open("QM1", home=home) as qm:
        ps = qm.core.pubsub
        qm.define_queue("PROV.Q", DEFPSIST="YES")
        qm._call(ps.define_topic("SPORT", {"TOPICSTR": "sport", "DEFPRTY": 4,
                                           "DESCR": "it's sport"}))
        qm._call(ps.subscribe("sport/#", name="MANAGED.ONE", durable=True))
        qm._call(ps.subscribe("sport/+/x", name="it's provided", durable=True,
                              dest="PROV.Q"))
        qm._call(ps.subscribe("sport/gone", name="GONE", durable=True))
        qm._call(ps.unsubscribe("GONE"))
        qm._call(ps.subscribe("sport/np", owner="conn"))       # non-durable: not dumped
    script = dump_config(QMConfig.load("QM1", home), subscription=subscription_attrs)
    assert "DEFINE TOPIC('SPORT') DEFPRTY(4) " in script
    assert "DESCR('it''s sport')" in script and "TOPICSTR('sport') REPLACE" in script
    assert "DEFINE SUB('MANAGED.ONE') TOPICSTR('sport/#') REPLACE" in script
    assert ("DEFINE SUB('it''s provided') TOPICSTR('sport/+/x') DEST('PROV.Q') "
            "DESTCLAS('PROVIDED') REPLACE") in script
    assert "GONE" not in script and "SYSTEM.MANAGED." not in script
    assert script.index("DEFINE QLOCAL('PROV.Q')") < script.index("DEFINE SUB(")
    # replayed into an empty queue manager, it gives the same topics and subscriptions
    make_qm("QM2")
    with QueueManager.open("QM2", home=home) as qm:
        r = qm._call(run_mqsc(qm.core, script, security=Security.for_config(qm.config)))
        assert r["errors"] == 0, r["output"]
        ps = qm.core.pubsub
        assert sorted(ps.subs) == ["MANAGED.ONE", "it's provided"]
        assert ps.subs["it's provided"].dest == "PROV.Q"
        assert ps.subs["MANAGED.ONE"].dest.startswith("SYSTEM.MANAGED.DURABLE.")
        assert ps.topics.resolve("sport/a", "DEFPRTY") == 4


CREATE_OR_DELETE = """
import sys
from harbormq import QueueManager
qm = QueueManager.open("QM1", home=sys.argv[1])
ps = qm.core.pubsub
if sys.argv[2] == "create":
    qm._call(ps.subscribe("cut/#", name="CUT", durable=True))
else:
    qm._call(ps.unsubscribe("DOOMED"))
print("not killed", flush=True)
"""


def test_sigkill_inside_a_subscriptions_creation_or_deletion_leaves_no_half(make_qm, home):
    """Killed between a managed queue's creation and its status message, or
    between the status message's removal and the queue's deletion: at restart
    the subscription is wholly absent, and its queue is deleted (HMQ5803W)."""
    make_qm()
    with QueueManager.open("QM1", home=home) as qm:
        doomed = qm._call(qm.core.pubsub.subscribe("d/#", name="DOOMED", durable=True)).dest
        kept = qm._call(qm.core.pubsub.subscribe("k/#", name="KEPT", durable=True)).dest
    for step, point in (("create", "pubsub.managed_queue_made"),
                        ("delete", "pubsub.status_removed")):
        env = dict(child_env(home), HARBORMQ_CRASH_AT=point)
        r = subprocess.run([PYTHON, "-c", CREATE_OR_DELETE, str(home), step], env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == -signal.SIGKILL and "not killed" not in r.stdout, r.stderr
    with QueueManager.open("QM1", home=home) as qm:
        ps = qm.core.pubsub
        assert sorted(ps.subs) == ["KEPT"] and ps.subs["KEPT"].dest == kept
        managed = sorted(n for n in qm.queue_names() if n.startswith("SYSTEM.MANAGED."))
        assert managed == [kept]
        orphans = [t for m, t in operator_log(home) if m == "HMQ5803W"]
        assert len(orphans) == 2 and any(doomed in t for t in orphans)


def test_image_and_recreate_take_topics_and_the_status_queues(make_qm, home):
    """`image` records the TOPIC objects and the status queues like any
    object; `recreate` of the subscriptions' status queue (from its image and
    the log after it) brings back the subscriptions made after the image."""
    make_qm(log_type="linear")
    with QueueManager.open("QM1", home=home) as qm:
        ps = qm.core.pubsub
        qm._call(ps.define_topic("T", {"TOPICSTR": "t"}))
        qm._call(ps.subscribe("t/1", name="BEFORE", durable=True))
        imaged = {r["object"] for r in qm.image("all")}
        assert {"T", "SYSTEM.BASE.TOPIC", DURABLE_SUBSCRIBER_QUEUE,
                "SYSTEM.RETAINED.PUB.QUEUE"} <= imaged
        qm._call(ps.subscribe("t/2", name="AFTER", durable=True))
        [done] = qm.recreate("queue", DURABLE_SUBSCRIBER_QUEUE)
        assert done["image_messages"] == 1 and done["messages"] == 2
        assert qm.core.queue(DURABLE_SUBSCRIBER_QUEUE).curdepth == 2
    with QueueManager.open("QM1", home=home) as qm:
        assert sorted(qm.core.pubsub.subs) == ["AFTER", "BEFORE"]
