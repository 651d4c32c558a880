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

from support.oplog import operator_log
from support.procs import PYTHON, child_env, hmq

from harbormq import QueueManager
from harbormq.core.objects import DURABLE_SUBSCRIBER_QUEUE
from harbormq.log.records import Message

CHILD = Path(__file__).with_name("pubsub_child.py")


def test_receipted_publications_are_on_every_durable_subscription_after_sigkill(
        make_qm, home):
    make_qm()
    proc = subprocess.Popen([PYTHON, str(CHILD), str(home), "QM1"], env=child_env(home),
                            stdout=subprocess.PIPE, text=True)
    acked = -1
    try:
        assert proc.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 60
        while acked < 150 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if line.startswith("ack "):
                acked = int(line.split()[1])
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert acked >= 150
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
