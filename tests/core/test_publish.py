"""Publications (core/publish.py): one message put on N local queues with one
MSG_PUBLISH record; every target checked before anything changes; in a unit of
work on all targets at COMMIT and on none at BACKOUT; after a restart (a crash
with the unit of work in flight, in doubt or committed) the same."""

from __future__ import annotations

import pytest
from support.queues import queue_bodies

from harbormq.errors import (
    InvalidAttribute,
    MessageTooLong,
    ObjectDamaged,
    PutInhibited,
    QueueFull,
    UnknownObject,
)
from harbormq.log.inspect import DumpFilter, dump
from harbormq.log.records import Message, Publication, RecordType, publication_msg_id

QUEUES = ["S1", "S2", "S3"]


@pytest.fixture
def qm(make_qm, open_qm):
    make_qm()
    qm = open_qm()
    for name in QUEUES:
        qm.define_queue(name, DEFPSIST="YES", MAXDEPTH=1000)
    return qm


def queues_defined(make_qm, open_qm):
    """A new queue manager with QUEUES (restarted by the test: no fixture)."""
    make_qm()
    qm = open_qm()
    for name in QUEUES:
        qm.define_queue(name, DEFPSIST="YES")
    return qm


def publish(qm, queues, body, *, uow=None, persistent=True, **fields):
    msg = Message(body=body, persistent=persistent, properties={"MQTopicString": "a/b"},
                  **fields)
    return qm._call(qm.core.publish(queues, msg, uow.uow if uow is not None else None))


def force(qm) -> None:
    async def forced():
        await qm.core.log.force()
    qm._call(forced())


def records(qm, rtype: RecordType) -> list[dict]:
    return [d for d in dump(qm.core.config, DumpFilter()) if d["type"] == rtype.name]


def test_one_record_puts_the_message_on_every_queue(qm):
    msgs = publish(qm, QUEUES, b"hello")
    # each copy an id of its own (as MQ gives each subscriber's), from one publication's
    assert len({m.msg_id for m in msgs}) == 3
    assert len({publication_msg_id(m.msg_id) for m in msgs}) == 1
    for name in QUEUES:
        assert queue_bodies(qm, name) == [b"hello"]
    pubs = records(qm, RecordType.MSG_PUBLISH)
    assert len(pubs) == 1 and pubs[0]["auto_commit"]
    assert [t["queue"] for t in pubs[0]["targets"]] == QUEUES
    assert pubs[0]["body_size"] == 5 and pubs[0]["properties"] == {"MQTopicString": "a/b"}
    assert records(qm, RecordType.MSG_PUT) == []


def test_a_queue_named_twice_gets_two_messages_with_their_own_seqs(qm):
    msgs = publish(qm, ["S1", "S1", "S2"], b"x")
    assert msgs[0].seq != msgs[1].seq
    assert queue_bodies(qm, "S1") == [b"x", b"x"]


def test_every_target_is_checked_before_anything_changes(qm):
    qm.define_queue("FULL", MAXDEPTH=1, DEFPSIST="YES")
    qm.put("FULL", b"there")
    qm.define_queue("SHORT", MAXMSGL=3, DEFPSIST="YES")
    qm.define_queue("NOPUT", PUT="DISABLED", DEFPSIST="YES")
    qm.define_queue("TWO", MAXDEPTH=1, DEFPSIST="YES")
    cases = [(["S1", "FULL"], QueueFull, "2053"), (["S1", "SHORT"], MessageTooLong, "2030"),
             (["S1", "NOPUT"], PutInhibited, "2051"), (["S1", "NOPE"], UnknownObject, "2085"),
             (["S1", "TWO", "TWO"], QueueFull, "2053"), ([], InvalidAttribute, "at least")]
    for queues, error, says in cases:
        with pytest.raises(error, match=says):
            publish(qm, queues, b"long body")
    assert queue_bodies(qm, "S1") == [] and queue_bodies(qm, "TWO") == []
    assert records(qm, RecordType.MSG_PUBLISH) == []


def test_a_remote_queue_is_no_target(qm):
    qm.define_queue("XQ", USAGE="XMITQ")
    qm._call(qm.core.define_object("QREMOTE", "RQ", {"RNAME": "Q", "RQMNAME": "QM2",
                                                     "XMITQ": "XQ"}))
    with pytest.raises(InvalidAttribute, match="remote queue"):
        publish(qm, ["S1", "RQ"], b"x")
    with pytest.raises(InvalidAttribute, match="2091"):
        publish(qm, ["S1", "XQ"], b"x")
    assert queue_bodies(qm, "S1") == []


def test_a_damaged_target_refuses_the_publication(qm):
    q = qm.core.queues["S2"]
    q.damaged, q.damage_reason = True, "test"
    with pytest.raises(ObjectDamaged, match="2101"):
        publish(qm, QUEUES, b"x")
    q.damaged = False
    assert all(queue_bodies(qm, n) == [] for n in QUEUES)


def test_non_persistent_is_not_logged(qm):
    publish(qm, QUEUES, b"np", persistent=False)
    assert all(queue_bodies(qm, n) == [b"np"] for n in QUEUES)
    assert records(qm, RecordType.MSG_PUBLISH) == []


def test_in_a_unit_of_work_on_all_at_commit_on_none_at_backout(qm):
    uow = qm.begin()
    publish(qm, QUEUES, b"one", uow=uow)
    uow.put("S1", b"plain")
    assert qm.queue_status("S1")["CURDEPTH"] == 2       # uncommitted puts count
    assert qm.get("S2") is None                          # not yet visible
    uow.commit()
    assert queue_bodies(qm, "S1") == [b"one", b"plain"]
    assert queue_bodies(qm, "S3") == [b"one"]

    uow = qm.begin()
    publish(qm, QUEUES, b"two", uow=uow)
    uow.put("S2", b"plain2")
    publish(qm, ["S3"], b"three", uow=uow)
    uow.backout()
    assert queue_bodies(qm, "S1") == [b"one", b"plain"]
    assert queue_bodies(qm, "S2") == [b"one"]
    assert queue_bodies(qm, "S3") == [b"one"]
    assert all(qm.queue_status(n)["CURDEPTH"] == d for n, d in zip(QUEUES, (2, 1, 1), strict=True))
    comps = records(qm, RecordType.COMPENSATION)
    # one compensation per publication, one for the plain put
    assert sorted(c["undone"] for c in comps) == ["MSG_PUBLISH", "MSG_PUBLISH", "MSG_PUT"]


def test_restart_keeps_committed_and_backs_out_in_flight(make_qm, open_qm):
    qm = queues_defined(make_qm, open_qm)
    publish(qm, QUEUES, b"auto")
    done = qm.begin()
    publish(qm, QUEUES, b"committed", uow=done)
    done.commit()
    open_ = qm.begin()
    publish(qm, QUEUES, b"in flight", uow=open_)
    force(qm)
    qm.close("immediate")       # no checkpoint, no flush: restart redoes the log
    qm = open_qm()
    for name in QUEUES:
        assert queue_bodies(qm, name) == [b"auto", b"committed"]
        assert qm.queue_status(name)["CURDEPTH"] == 2
    assert qm.restart_report.uows_backed_out == 1
    # sequence numbers go on from the publications' (no seq is given twice)
    m = qm.put("S1", b"after")
    assert m.seq > max(x.seq for x in qm.browse("S1")[:-1])
    comps = records(qm, RecordType.COMPENSATION)
    assert [c["undone"] for c in comps] == ["MSG_PUBLISH"]


def test_in_doubt_publication_survives_restart_and_resolves(make_qm, open_qm):
    qm = queues_defined(make_qm, open_qm)
    for commit in (True, False):
        uow = qm.begin()
        publish(qm, QUEUES, b"in doubt %d" % commit, uow=uow)
        uow.prepare()
        qm.close("immediate")
        qm = open_qm()
        assert qm.in_doubt() == [uow.id]
        assert all(qm.queue_status(n)["CURDEPTH"] == (1 if commit else 2) for n in QUEUES)
        qm.resolve(uow.id, commit=commit)
        want = [b"in doubt 1"]
        assert all(queue_bodies(qm, n) == want for n in QUEUES)
        qm.close("immediate")
        qm = open_qm()
        assert all(queue_bodies(qm, n) == want for n in QUEUES)


def test_a_publication_too_big_for_the_log_is_refused_before_anything(qm):
    names = [f"QUEUE.WITH.A.LONG.NAME.{i:04d}" for i in range(200)]
    for name in names:
        qm.define_queue(name, DEFPSIST="YES", MAXMSGL=4 << 20)
    qm.alter_qmgr(MAXMSGL=4 << 20)
    before = qm.put(names[0], b"a").seq
    uow = qm.begin()
    with pytest.raises(MessageTooLong, match="log extent"):
        publish(qm, names, b"x" * 250_000, uow=uow)
    assert uow.uow.first_lsn == 0 and uow.uow.ops == []
    uow.backout()
    assert qm.put(names[0], b"b").seq == before + 1, "no sequence number was used"


def test_publication_payload_round_trip():
    from harbormq.log.records import (
        PublicationTarget,
        encode_publication,
        publication_msg_id,
    )
    m = Message(body=b"body", msg_id=b"id", priority=4, properties={"k": 1})
    targets = [PublicationTarget(7, "A", 10), PublicationTarget(9, "BB", 3)]
    pub = Publication.decode(encode_publication(m, targets))
    assert pub.targets == targets
    a = Message.decode(pub.message_for(0))
    assert (a.seq, a.body, a.priority, a.properties) == (10, b"body", 4, {"k": 1})
    assert a.msg_id == b"id"                 # a publisher's own id: kept on every copy
    generated = Message(body=b"b", msg_id=b"HMQ\0" + bytes(range(16)) + bytes(4))
    pub = Publication.decode(encode_publication(generated, targets))
    ids = [Message.decode(pub.message_for(i)).msg_id for i in range(2)]
    assert ids == [generated.msg_id[:20] + bytes([0, 0, 0, n]) for n in (1, 2)]
    assert {publication_msg_id(i) for i in ids} == {generated.msg_id}
    with pytest.raises(ValueError):
        Publication.decode(encode_publication(m, targets)[:-1])


def test_log_dump_of_one_queue_shows_the_publications_to_it(qm):
    publish(qm, ["S1", "S2"], b"to both")
    publish(qm, ["S3"], b"elsewhere")
    got = [d for d in dump(qm.core.config, DumpFilter(queue="S2"))
           if d["type"] == "MSG_PUBLISH"]
    assert [[t["queue"] for t in d["targets"]] for d in got] == [["S1", "S2"]]


def test_a_refused_publication_gives_no_sequence_number(qm):
    before = qm.put("S1", b"a").seq
    qm.define_queue("SHORT", MAXMSGL=1, DEFPSIST="YES")
    with pytest.raises(MessageTooLong):
        publish(qm, ["S1", "SHORT"], b"too long")
    assert qm.put("S1", b"b").seq == before + 1


def test_restart_skips_the_target_of_a_queue_deleted_since(make_qm, open_qm):
    qm = queues_defined(make_qm, open_qm)
    publish(qm, QUEUES, b"before the delete")
    uow = qm.begin()
    publish(qm, ["S1", "S3"], b"in a unit", uow=uow)
    uow.commit()
    qm.delete_queue("S2", purge=True)
    qm.define_queue("S2", DEFPSIST="YES")      # a new incarnation: takes none of them
    qm.close("immediate")
    qm = open_qm()
    assert queue_bodies(qm, "S1") == queue_bodies(qm, "S3") == [b"before the delete",
                                                                b"in a unit"]
    assert queue_bodies(qm, "S2") == []
    assert qm.restart_report.warnings == []
