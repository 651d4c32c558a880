"""Triggering (core/triggering.py, docs/objects.md): MQ's trigger conditions
for TRIGTYPE FIRST, EVERY and DEPTH, the MQTM a trigger message carries, and
a trigger message written exactly when the message that caused it is
committed: with it in a unit of work, backed out with it, and after a SIGKILL
at named points both or neither."""

from __future__ import annotations

import subprocess

import pytest
from support.oplog import operator_log
from support.procs import PYTHON

from harbormq import QueueManager
from harbormq.core.triggering import MQTM, decode_mqtm, encode_mqtm, mqtmc2


def setup(qm: QueueManager, trigtype: str = "FIRST", **attrs) -> None:
    qm.define_queue("INITQ")
    qm.define("PROCESS", "PROC", APPLICID="/bin/true", USERDATA="ud", ENVRDATA="ed",
              APPLTYPE="UNIX")
    qm.define_queue("APPQ", TRIGGER="YES", TRIGTYPE=trigtype, INITQ="INITQ", PROCESS="PROC",
                    TRIGDATA="the data", **attrs)


def triggers(qm: QueueManager) -> int:
    return qm.core.queue("INITQ").curdepth


@pytest.fixture
def qm(make_qm, open_qm):
    make_qm()
    return open_qm()


def test_mqtm_layout_and_mqtmc2():
    tm = decode_mqtm(encode_mqtm(decode_mqtm(b"TM  " + bytes(680))._replace(
        queue="APPQ", process="PROC", trigger_data="td", appl_type=6, appl_id="/bin/x",
        env_data="e", user_data="u")))
    assert MQTM.size == 684 and tm.queue == "APPQ" and tm.appl_id == "/bin/x"
    text = mqtmc2(tm, "QM1")
    assert len(text) == 732 and text.startswith("TMC    2APPQ")
    assert text[104:168].rstrip() == "td" and text[-48:].rstrip() == "QM1"
    with pytest.raises(ValueError, match="not a trigger message"):
        decode_mqtm(b"hello")


def test_first_triggers_when_the_queue_goes_from_empty_to_not_empty(qm):
    setup(qm, "FIRST")
    qm.put("APPQ", b"1")
    qm.put("APPQ", b"2")
    assert triggers(qm) == 1
    m = qm.get("INITQ")
    assert m.format == "MQTRIG" and not m.persistent
    tm = decode_mqtm(m.body)
    assert (tm.queue, tm.process, tm.trigger_data, tm.appl_id, tm.user_data, tm.env_data,
            tm.appl_type) == ("APPQ", "PROC", "the data", "/bin/true", "ud", "ed", 6)
    qm.get("APPQ")
    qm.get("APPQ")
    qm.put("APPQ", b"3", persistent=True)            # empty again, then not
    m = qm.get("INITQ")
    assert m.persistent                               # as the message that caused it
    # an application with the queue open for input: no trigger (MQ's condition)
    qm.get("APPQ")
    qm._call_sync(qm._conn.open, "APPQ", "input")      # as a waiting getter has it
    qm.put("APPQ", b"4")
    assert triggers(qm) == 0


def test_every_and_trigmpri(qm):
    setup(qm, "EVERY", TRIGMPRI=5)
    for prio in (4, 5, 9, 0):
        qm.put("APPQ", b"x", priority=prio)
    assert triggers(qm) == 2


def test_depth_triggers_at_trigdpth_then_turns_trigger_off(qm, home):
    setup(qm, "DEPTH", TRIGDPTH=3)
    qm.put("APPQ", b"1")
    qm.put("APPQ", b"2")
    assert triggers(qm) == 0
    qm.put("APPQ", b"3")
    assert triggers(qm) == 1
    assert qm.core.objects["APPQ"]["attrs"]["TRIGGER"] == "NO"
    qm.put("APPQ", b"4")
    assert triggers(qm) == 1
    qm.close()
    qm = QueueManager.open("QM1", home=home)            # the ALTER is logged
    try:
        assert qm.core.objects["APPQ"]["attrs"]["TRIGGER"] == "NO"
    finally:
        qm.close()


def test_trigger_message_shares_the_unit_of_work(qm):
    setup(qm, "FIRST")
    uow = qm.begin()
    uow.put("APPQ", b"a", persistent=True)
    assert qm.browse("INITQ") == []                   # not before the commit
    uow.backout()
    assert triggers(qm) == 0 and qm.core.queue("APPQ").curdepth == 0
    with qm.begin() as uow:
        uow.put("APPQ", b"b", persistent=True)
    assert triggers(qm) == 1


def test_no_process_no_trigger_said_once(qm, home):
    setup(qm, "EVERY")
    qm.alter_queue("APPQ", PROCESS="NOPE")
    qm.put("APPQ", b"1")
    qm.put("APPQ", b"2")
    assert triggers(qm) == 0 and qm.core.queue("APPQ").curdepth == 2
    said = [t for m, t in operator_log(home) if m == "HMQ7736W"]
    assert len(said) == 1 and "PROCESS(NOPE) is not a defined process" in said[0]


CRASH_CHILD = """
import sys
from harbormq import QueueManager
qm = QueueManager.open("QM1")
for i in range(60):
    if i % 3 == 0:
        with qm.begin() as uow:
            uow.put("APPQ", b"%d" % i, persistent=True)
    else:
        qm.put("APPQ", b"%d" % i, persistent=True)
    print("acked", i, flush=True)
print("not killed", flush=True)
"""


@pytest.mark.parametrize("crash_at", ["trigger.before_commit:7", "trigger.before_commit:30",
                                      "log.after_write_before_fsync:20",
                                      "log.after_fsync_before_ack:33"])
def test_a_trigger_message_exists_exactly_when_its_message_was_committed(
        make_qm, home, python_env, crash_at):
    make_qm()
    with QueueManager.open("QM1", home=home) as qm:
        setup(qm, "EVERY")
    proc = subprocess.run([PYTHON, "-c", CRASH_CHILD], capture_output=True, text=True,
                          env=dict(python_env, HARBORMQ_CRASH_AT=crash_at), timeout=120)
    assert proc.returncode == -9 and "not killed" not in proc.stdout, proc.stdout + proc.stderr
    acked = {int(line.split()[1]) for line in proc.stdout.splitlines()
             if line.startswith("acked")}
    with QueueManager.open("QM1", home=home) as qm:
        present = {int(m.body) for m in qm.browse("APPQ")}
        trigger_messages = qm.browse("INITQ")
    assert acked <= present and len(present) <= len(acked) + 1
    assert len(trigger_messages) == len(present), (crash_at, sorted(present))
    assert all(decode_mqtm(m.body).queue == "APPQ" and m.persistent
               for m in trigger_messages)
