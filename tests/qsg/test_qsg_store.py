"""The group's tables and the structure store against a real PostgreSQL:
joining (the first member creates the group; another group's database, a
name taken and a database that cannot be reached are refused with nothing
changed), structures, and the unit-of-work states of shared messages
(uncommitted puts invisible, competing gets never share a message,
priority then FIFO, commit, backout, prepare and resolve)."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from harbormq.log.records import Message
from harbormq.qsg import group as qgroup
from harbormq.qsg.errors import (
    CFStructError,
    CFStructInUse,
    GroupDatabaseError,
    GroupError,
    SharedUnitBackedOut,
)
from harbormq.qsg.structure import StructureStore


def msg(body: bytes, priority: int = 0, persistent: bool = True) -> Message:
    return Message(body=body, msg_id=body.ljust(24, b"\0")[:24], priority=priority,
                   persistent=persistent)


@pytest.fixture
def grp(qsg_db):
    qgroup.join(qsg_db, "QSG1", "QM1")
    qgroup.join(qsg_db, "QSG1", "QM2")
    with psycopg.connect(qsg_db, autocommit=True) as conn:
        qgroup.define_structure(conn, "APP1", {})
    a, b = StructureStore(qsg_db, "QM1"), StructureStore(qsg_db, "QM2")
    yield qsg_db, a, b
    a.close(); b.close()


def test_first_member_creates_the_group_and_the_second_joins(qsg_db):
    m1 = qgroup.join(qsg_db, "QSG1", "QM1")
    m2 = qgroup.join(qsg_db, "QSG1", "QM2")
    assert (m1.number, m2.number) == (1, 2)
    with psycopg.connect(qsg_db) as conn:
        assert qgroup.schema_state(conn) == (1, "QSG1")
        assert [m["name"] for m in qgroup.members(conn)] == ["QM1", "QM2"]


def test_bad_joins_are_refused_and_change_nothing(qsg_db, postgres):
    qgroup.join(qsg_db, "QSG1", "QM1")
    with pytest.raises(GroupError, match="belongs to queue sharing group QSG1, not QSG2"):
        qgroup.join(qsg_db, "QSG2", "QM9")
    with pytest.raises(GroupError, match="two members cannot have one name"):
        qgroup.join(qsg_db, "QSG1", "QM1")
    bad = f"host=127.0.0.1 port={postgres.port} user=postgres dbname=nosuchdb connect_timeout=2"
    with pytest.raises(GroupDatabaseError, match="cannot connect to the group's database"):
        qgroup.join(bad, "QSG1", "QM2")
    with psycopg.connect(qsg_db) as conn:
        assert [m["name"] for m in qgroup.members(conn)] == ["QM1"]


def test_structures_define_alter_delete(grp):
    conninfo, a, _b = grp
    with psycopg.connect(conninfo, autocommit=True) as conn:
        s = qgroup.define_structure(conn, "APP2", {"RECOVER": "NO", "CFLEVEL": 4})
        assert (s["RECOVER"], s["CFLEVEL"], s["STATUS"]) == ("NO", 4, "ACTIVE")
        with pytest.raises(CFStructError, match="defined already"):
            qgroup.define_structure(conn, "APP2", {})
        with pytest.raises(CFStructError, match="needs CFLEVEL"):
            qgroup.define_structure(conn, "APP3", {"CFLEVEL": 2})
        qgroup.put_definition(conn, "QLOCAL", "SQ", "SHARED", {"CFSTRUCT": "APP1"})
        with pytest.raises(CFStructError, match="not defined"):
            qgroup.put_definition(conn, "QLOCAL", "SQ2", "SHARED", {"CFSTRUCT": "NOPE"})
        with pytest.raises(CFStructInUse, match="used by shared queues SQ"):
            qgroup.delete_structure(conn, "APP1")
        a.put("APP1", "SQ", msg(b"p1"), None)
        with pytest.raises(CFStructInUse, match="RECOVER\\(NO\\) is refused"):
            qgroup.alter_structure(conn, "APP1", {"RECOVER": "NO"})
        qgroup.delete_structure(conn, "APP2")
        assert [s["CFSTRUCT"] for s in qgroup.structures(conn)] == ["APP1"]


def test_uncommitted_put_is_invisible_until_commit(grp):
    _c, a, b = grp
    put = a.put("APP1", "SQ", msg(b"m1"), uow=7)
    assert put.msg.seq > 0 and put.stamp > 0
    assert b.get("SQ", None) is None
    d = a.commit(7)
    assert d.queues == ["SQ"] and d.stamp > put.stamp
    got = b.get("SQ", None)
    assert got.msg.body == b"m1" and got.msg.seq == put.msg.seq and got.stamp > d.stamp
    assert a.outcome(7) == "commit"


def test_backout_of_a_get_makes_it_available_with_a_backout_count(grp):
    _c, a, b = grp
    a.put("APP1", "SQ", msg(b"m1"), None)
    got = a.get("SQ", uow=3)
    assert got.msg.backout_count == 0
    assert b.get("SQ", None) is None          # locked to QM1's unit of work
    a.backout(3)
    again = b.get("SQ", None)
    assert again.msg.body == b"m1" and again.msg.backout_count == 1


def test_priority_then_fifo(grp):
    _c, a, b = grp
    for body, prio in [(b"a", 0), (b"b", 5), (b"c", 0), (b"d", 5), (b"e", 9)]:
        a.put("APP1", "SQ", msg(body, prio), None)
    assert [b.get("SQ", None).msg.body for _ in range(5)] == [b"e", b"b", b"d", b"a", b"c"]


def test_competing_gets_never_share_a_message(grp):
    conninfo, a, _b = grp
    n = 120
    for i in range(n):
        a.put("APP1", "SQ", msg(b"%d" % i), None)
    got: list[bytes] = []
    lock = threading.Lock()

    def consume(name: str, uow_base: int) -> None:
        store = StructureStore(conninfo, name)
        i = 0
        while True:
            i += 1
            g = store.get("SQ", uow_base + i)
            if g is None:
                break
            store.commit(uow_base + i)
            with lock:
                got.append(g.msg.body)
        store.close()

    threads = [threading.Thread(target=consume, args=(f"QM{k % 2 + 1}", k * 100000))
               for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == sorted(b"%d" % i for i in range(n))


def test_prepared_rows_wait_for_resolve(grp):
    _c, a, b = grp
    a.put("APP1", "SQ", msg(b"keep"), None)
    a.get("SQ", uow=11)
    a.put("APP1", "SQ", msg(b"new"), uow=11)
    assert a.prepare(11) == 2
    assert {k: sorted(v) for k, v in a.in_flight().items()} == {11: ["PREP_GOT", "PREP_PUT"]}
    assert b.get("SQ", None) is None
    a.resolve(11, commit=True)
    assert b.get("SQ", None).msg.body == b"new"
    assert b.get("SQ", None) is None


def test_a_peers_backout_stands_against_a_late_commit_or_prepare(grp):
    """A member whose connection was lost comes back after a peer backed its
    unit of work out: its commit and its prepare are refused (MQRC 2003), and
    the messages stay where the peer put them."""
    _c, a, b = grp
    a.put("APP1", "SQ", msg(b"held"), None)
    a.get("SQ", uow=21)
    a.put("APP1", "SQ", msg(b"new"), uow=21)
    a.put("APP1", "SQ", msg(b"new2"), uow=22)
    b._decide(21, "backout", owner="QM1", decided_by="QM2")      # as peer recovery does
    b._decide(22, "backout", owner="QM1", decided_by="QM2")
    with pytest.raises(SharedUnitBackedOut, match="MQRC 2003"):
        a.commit(21)
    with pytest.raises(SharedUnitBackedOut, match="MQRC 2003"):
        a.prepare(22, 100)
    assert a.outcome(21) == "backout" and a.outcome(22) == "backout"
    assert b.get("SQ", None).msg.body == b"held"                  # given back, once
    assert b.get("SQ", None) is None


def test_restart_settles_prepared_rows_the_log_does_not_hold_by_where_the_log_ends(grp):
    """Restart (QueueSharingGroup.outcomes_after_redo) with prepared rows of
    units its log does not hold open: one prepared before where the recovered
    log ends committed (its COMMIT came right after); one prepared at a point
    the log never reached never had its COMMIT on disk: backed out."""
    from harbormq.qsg.service import QueueSharingGroup
    _c, a, b = grp
    a.put("APP1", "SQ", msg(b"committed, then checkpointed"), uow=31)
    a.prepare(31, 1_000)
    a.put("APP1", "SQ", msg(b"never reached the log"), uow=32)
    a.prepare(32, 5_000)
    a.put("APP1", "SQ", msg(b"open in the log"), uow=33)
    a.prepare(33, 5_000)
    group = QueueSharingGroup.__new__(QueueSharingGroup)      # its store alone
    group.session, group.restart_rows = a, set()
    group.outcomes_after_redo([33], log_end=5_000)
    assert group.restart_rows == {33}                            # restart decides it
    assert b.get("SQ", None).msg.body == b"committed, then checkpointed"
    assert b.get("SQ", None) is None
    assert sorted(a.in_flight()) == [33]


def test_get_by_message_id_and_depth(grp):
    _c, a, b = grp
    a.put("APP1", "SQ", msg(b"x1"), None)
    a.put("APP1", "SQ", msg(b"x2"), None)
    assert a.depth("SQ") == 2
    got = b.get("SQ", None, msg_id=b"x2".ljust(24, b"\0"))
    assert got.msg.body == b"x2" and a.depth("SQ") == 1


def test_peer_recovery_backs_out_a_dead_members_work_and_leaves_prepared_rows(grp):
    from harbormq.qsg.member import MemberSession
    from harbormq.qsg.peers import PeerWatch
    conninfo, a, _b = grp
    for body in (b"g1", b"g2", b"p1"):
        a.put("APP1", "SQ", msg(body), None)
    dead = MemberSession(conninfo, "QSG1", "QM1")
    dead.start()
    dead.get("SQ", uow=5)                 # in flight: back to everyone
    dead.put("APP1", "SQ", msg(b"new"), uow=5)
    dead.get("SQ", uow=6)
    dead.prepare(6)                       # in doubt: left for QM1's restart
    said = []
    watch = PeerWatch(conninfo, "QM2", lambda i, t: said.append((i, t)))
    with psycopg.connect(conninfo, autocommit=True) as conn:
        assert watch.look(conn) == []     # alive: its lock is held
        dead.close()                      # as a SIGKILL: the lock goes with the connection
        found: list = []
        deadline = time.monotonic() + 10  # (the backend ends a moment after the close)
        while not found and time.monotonic() < deadline:
            found = watch.look(conn)
            time.sleep(0.05)
        [r] = found
        assert (r.member, r.made_available, r.backed_out_puts, r.units_of_work, r.in_doubt) \
            == ("QM1", 1, 1, 1, 1)
        state = conn.execute("SELECT state FROM hmq_members WHERE name = 'QM1'").fetchone()[0]
        assert state == "FAILED"
        assert watch.look(conn) == []     # recovered once
    assert [i for i, _t in said] == ["HMQ5311I", "HMQ5312I", "HMQ5313I", "HMQ5314I"]
    assert "CSQE011I" in said[0][1] and "QM1" in said[0][1]
    assert [a.get("SQ", None).msg.body for _ in range(2)] == [b"g1", b"p1"]
    assert a.get("SQ", None) is None      # g2 prepared by QM1, "new" gone
    assert StructureStore(conninfo, "QM1").outcome(5) == "backout"
    dead.stop()


def test_a_failed_structure_refuses_puts_and_gets_with_mqrc_2373(grp):
    from harbormq.qsg.errors import CFStructFailed
    from harbormq.qsg.queue import SharedQueue
    conninfo, a, _b = grp
    q = SharedQueue("SQ", {"CFSTRUCT": "APP1"}, a)
    q.check_put(msg(b"ok"))
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("UPDATE hmq_structures SET status = 'FAILED' WHERE name = 'APP1'")
    with pytest.raises(CFStructFailed, match="MQRC 2373"):
        q.put(msg(b"no"), None)             # refused in the statement itself
    with pytest.raises(CFStructFailed, match="RECOVER CFSTRUCT\\(APP1\\)"):
        q.get(None, None)                   # (read again by the failed put)
    assert a.depth("SQ") == 0


def test_a_second_process_with_a_members_name_cannot_start(grp, monkeypatch):
    from harbormq.qsg import member as qmember
    conninfo, _a, _b = grp
    monkeypatch.setattr(qmember, "LOCK_WAIT", 0.5)
    first = qmember.MemberSession(conninfo, "QSG1", "QM1")
    first.start()
    second = qmember.MemberSession(conninfo, "QSG1", "QM1")
    with pytest.raises(GroupError, match="running already .* two members cannot have one name"):
        second.start()
    with pytest.raises(GroupError, match="belongs to queue sharing group QSG1, not QSG9"):
        qmember.MemberSession(conninfo, "QSG9", "QM2").start()
    first.stop()


def test_a_silent_member_has_its_connection_ended_then_is_recovered(grp):
    from harbormq.qsg.member import MemberSession
    from harbormq.qsg.peers import PeerWatch
    conninfo, a, _b = grp
    a.put("APP1", "SQ", msg(b"held"), None)
    # a member whose machine went away: its connection lingers, no heartbeat comes
    silent = MemberSession(conninfo, "QSG1", "QM1", heartbeat_interval=3600)
    silent.start()
    silent.get("SQ", uow=1)
    said = []
    watch = PeerWatch(conninfo, "QM2", lambda i, t: said.append(i), heartbeat_timeout=1.0)
    time.sleep(1.5)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        found: list = []
        deadline = time.monotonic() + 10
        while not found and time.monotonic() < deadline:
            found = watch.look(conn)
            time.sleep(0.05)
    assert said[0] == "HMQ5310W" and "HMQ5314I" in said
    assert found[0].made_available == 1
    assert a.get("SQ", None).msg.body == b"held"
    silent._stop.set()
    silent.close()
