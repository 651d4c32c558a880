"""Alias queues and model queues through the API (core/aliases.py,
core/dynamic.py; docs/objects.md): MQ's name resolution and its reason codes,
dynamic names, temporary dynamic queues refusing persistent messages and
gone after a restart, permanent ones kept, the default model queue there at
every start."""

from __future__ import annotations

import pytest
from support.oplog import operator_log

from harbormq import QueueManager
from harbormq.errors import (
    GetInhibited,
    InvalidAttribute,
    ObjectExists,
    PersistentNotAllowed,
    PutInhibited,
    UnknownObject,
)


@pytest.fixture
def qm(make_qm, open_qm):
    make_qm()
    return open_qm()


def test_alias_resolution_and_its_own_put_and_get(qm):
    qm.define_queue("BASE", DEFPSIST="NO", DEFPRTY=1)
    qm.define("QALIAS", "AL", TARGET="BASE", DEFPSIST="YES", DEFPRTY=8)
    m = qm.put("AL", b"one")
    assert (m.persistent, m.priority) == (True, 8)            # the alias's defaults
    assert [x.body for x in qm.browse("AL")] == [b"one"]
    assert qm.get("AL").body == b"one"
    qm.define("QALIAS", "AL", GET="DISABLED", replace=True)
    qm.put("AL", b"two")
    with pytest.raises(GetInhibited, match="alias queue AL") as exc:
        qm.get("AL")
    assert exc.value.reason == 2016
    assert qm.get("BASE").body == b"two"                       # the target's own GET
    qm.define("QALIAS", "AL", PUT="DISABLED", replace=True)
    with pytest.raises(PutInhibited) as exc:
        qm.put("AL", b"three")
    assert exc.value.reason == 2051
    qm.put("BASE", b"direct")                                  # the target takes puts
    with pytest.raises(ObjectExists):
        qm.define_queue("AL")                                  # one namespace for queues


def test_alias_target_errors(qm):
    qm.define("QALIAS", "NOWHERE", TARGET="NO.SUCH.Q")
    with pytest.raises(UnknownObject, match="MQRC 2082"):
        qm.put("NOWHERE", b"x")
    qm.define("QALIAS", "TOPICAL", TARGET="SPORTS", TARGTYPE="TOPIC")
    with pytest.raises(UnknownObject, match="topic object SPORTS is not defined"):
        qm.put("TOPICAL", b"x")
    qm.define("QALIAS", "AL2", TARGET="NOWHERE")               # an alias of an alias
    with pytest.raises(UnknownObject, match="not a local or remote queue"):
        qm.put("AL2", b"x")
    with pytest.raises(InvalidAttribute, match="TARGTYPE"):
        qm.define("QALIAS", "BAD", TARGET="X", TARGTYPE="CHANNEL")


def test_an_alias_of_a_topic_publishes_there(qm):
    """TARGTYPE(TOPIC): a put through the alias is a publication on the topic
    object's string, with the alias's defaults; a get from it is refused."""
    qm._call(qm.core.pubsub.define_topic("SPORTS", {"TOPICSTR": "sports"}))
    fan = qm._call(qm.core.pubsub.subscribe("sports/#", name="FAN", durable=True))
    qm.define("QALIAS", "SCORES", TARGET="SPORTS", TARGTYPE="TOPIC", DEFPSIST="YES")
    m = qm.put("SCORES", b"2-1")
    assert m.persistent
    [got] = qm.browse(fan.dest)
    assert got.body == b"2-1" and got.properties["MQTopicString"] == "sports"
    with pytest.raises(UnknownObject, match="a topic holds no messages"):
        qm.get("SCORES")
    qm.define("QALIAS", "SCORES", PUT="DISABLED", replace=True)
    with pytest.raises(PutInhibited, match="2051"):
        qm.put("SCORES", b"3-1")
    assert len(qm.browse(fan.dest)) == 1


def test_model_queues_and_dynamic_names(qm):
    assert qm.core.objects["SYSTEM.DEFAULT.MODEL.QUEUE"]["attrs"]["DEFTYPE"] == "TEMPDYN"
    with pytest.raises(UnknownObject, match="is a QLOCAL, not a model queue"):
        qm.open_model("SYSTEM.DEFAULT.LOCAL.QUEUE")
    with pytest.raises(InvalidAttribute, match="MQRC 2011"):
        qm.open_model(dynamic_name="A" * 34 + "*")
    with pytest.raises(InvalidAttribute, match="not valid for a model queue"):
        qm.define("QMODEL", "M0", DEFTYPE="PREDEFINED")
    named = qm.open_model(dynamic_name="EXACT.NAME")
    assert named == "EXACT.NAME"
    with pytest.raises(ObjectExists):
        qm.open_model(dynamic_name="EXACT.NAME")
    names = {qm.open_model() for _ in range(20)}
    assert len(names) == 20 and all(n.startswith("AMQ.") and len(n) == 19 for n in names)


def test_temporary_and_permanent_dynamic_queues_across_a_restart(make_qm, home):
    make_qm()
    qm = QueueManager.open("QM1", home=home)
    qm.define("QMODEL", "PERM.MODEL", DEFTYPE="PERMDYN", DEFPSIST="YES", MAXDEPTH=9)
    temp = qm.open_model()
    perm = qm.open_model("PERM.MODEL", "PERM.*")
    with pytest.raises(PersistentNotAllowed) as exc:
        qm.put(temp, b"p", persistent=True)
    assert exc.value.reason == 2048
    assert not qm.put(temp, b"np").persistent                  # as-queue: non-persistent
    assert qm.put(perm, b"kept").persistent
    assert qm.core.objects[perm]["attrs"]["MAXDEPTH"] == 9
    qm.close("immediate")                                      # as a crash leaves them
    qm = QueueManager.open("QM1", home=home)
    try:
        assert temp not in qm.queue_names() and perm in qm.queue_names()
        assert [m.body for m in qm.browse(perm)] == [b"kept"]
        assert any(m == "HMQ7731I" and temp in t for m, t in operator_log(home))
        temp2 = qm.open_model()
        assert qm.close_queue(temp2) is True and temp2 not in qm.queue_names()
        assert qm.close_queue(perm, delete=True) is True and perm not in qm.queue_names()
        qm._call(qm.core.delete_object("QMODEL", "SYSTEM.DEFAULT.MODEL.QUEUE"))
    finally:
        qm.close()
    qm = QueueManager.open("QM1", home=home)                   # the default model is back
    try:
        assert qm.core.objects["SYSTEM.DEFAULT.MODEL.QUEUE"]["type"] == "QMODEL"
        # defined at the creation, and again at this start
        assert [m for m, _t in operator_log(home)].count("HMQ7732I") == 2
    finally:
        qm.close()


def test_an_alias_of_a_topic_object_whose_topicstr_ends_in_a_slash(qm):
    """MQ's developer configuration: TOPICSTR('dev/') names the node 'dev'."""
    qm._call(qm.core.pubsub.define_topic("DEV.BASE.TOPIC", {"TOPICSTR": "dev/"}))
    watch = qm._call(qm.core.pubsub.subscribe("dev/#", name="DEVW", durable=True))
    qm.define("QALIAS", "DEV.ALIAS", TARGET="DEV.BASE.TOPIC", TARGTYPE="TOPIC")
    qm.put("DEV.ALIAS", b"hello")
    assert [m.properties["MQTopicString"] for m in qm.browse(watch.dest)] == ["dev"]
