"""Peer recovery: every running member watches the others, and one that
finds a member dead backs out that member's in-flight shared work in one
transaction, so the messages it held are available to everyone within
seconds, with no operator (MQ's peer level recovery; docs/qsg.md).

A member is dead when its advisory lock is free while its row says ACTIVE
(PostgreSQL released the lock with its connection: a SIGKILL, a crash, a lost
connection). A member whose heartbeat is older than the timeout (its machine
lost power and its connection lingers) has its backend terminated, and is
then found dead the same way. The peer takes the member's lock for the
recovery's transaction, so two peers never recover one member and the member
cannot start again half way through.

What the recovery does: PUT rows of the member deleted, GOT rows available
again (one more backout), an outcome 'backout' recorded for each unit of
work (its restart writes it to its log), and the member marked FAILED.
Prepared rows (PREP_PUT, PREP_GOT) are left: only the member's log knows
whether they committed, and its restart resolves them. Units of work that
PostgreSQL had decided need nothing: their rows were applied when decided.

The operator log says each phase, in MQ's words: CSQE011I (recovery
started), CSQE012I (what was backed out), CSQE013I (in doubt left for the
member), CSQE014I (recovery complete), each with an HMQ id.

Not here: the member's own session (``member.py``)."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import psycopg

from .errors import CFNotAvailable
from .group import LOCK_CLASS
from .schema import AVAILABLE_CHANNEL
from .structure import connect

#: seconds between two looks at the other members
WATCH_INTERVAL = 0.25


@dataclass(slots=True)
class PeerRecovery:
    """What one recovery of a failed member did."""
    member: str
    backed_out_puts: int
    made_available: int
    units_of_work: int
    in_doubt: int
    queues: list[str]


def recover_member(conn: psycopg.Connection, member: str, by: str) -> PeerRecovery | None:
    """Back out ``member``'s in-flight shared work if it is dead, in one
    transaction under its lock; None when it is alive (its lock held) or not
    ACTIVE any more (another peer recovered it)."""
    with conn.transaction():
        row = conn.execute("SELECT number, state FROM hmq_members WHERE name = %s",
                           (member,)).fetchone()
        if row is None or row[1] != "ACTIVE":
            return None
        if not conn.execute("SELECT pg_try_advisory_xact_lock(%s, %s)",
                            (LOCK_CLASS, row[0])).fetchone()[0]:
            return None
        return _back_out(conn, member, by)


def _back_out(conn: psycopg.Connection, member: str, by: str) -> PeerRecovery:
    """The recovery's statement and the member's new state (in the caller's transaction)."""
    puts, avail, uows, queues = conn.execute(
        # (RETURNING gives the new row: the units of work are read before)
        "WITH old AS (SELECT msg_key, uow, state FROM hmq_messages WHERE owner = %(m)s "
        "AND state IN ('PUT', 'GOT') FOR UPDATE), "
        "gone AS (DELETE FROM hmq_messages m USING old WHERE m.msg_key = old.msg_key "
        "AND old.state = 'PUT' RETURNING old.uow), "
        "back AS (UPDATE hmq_messages m SET state = 'AVAILABLE', owner = NULL, uow = NULL, "
        "backout_count = m.backout_count + 1 FROM old WHERE m.msg_key = old.msg_key "
        "AND old.state = 'GOT' RETURNING old.uow, m.queue), "
        "units AS (SELECT uow FROM gone UNION SELECT uow FROM back), "
        "decided AS (INSERT INTO hmq_uow_outcomes (member, uow, outcome, stamp, decided_by) "
        "SELECT %(m)s, uow, 'backout', nextval('hmq_stamp'), %(by)s FROM units "
        "ON CONFLICT (member, uow) DO NOTHING RETURNING uow), "
        "told AS (SELECT DISTINCT queue FROM back) "
        "SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM back), "
        "(SELECT count(*) FROM decided), "
        "(SELECT array_agg(queue) FROM (SELECT queue, pg_notify(%(ch)s, queue) FROM told) n)",
        {"m": member, "by": by, "ch": AVAILABLE_CHANNEL}).fetchone()
    in_doubt = conn.execute("SELECT count(DISTINCT uow) FROM hmq_messages WHERE owner = %s",
                            (member,)).fetchone()[0]
    conn.execute("UPDATE hmq_members SET state = 'FAILED', backend_pid = NULL WHERE name = %s",
                 (member,))
    return PeerRecovery(member, puts, avail, uows, in_doubt, list(queues or ()))


def recover_own(conn: psycopg.Connection, member: str) -> PeerRecovery:
    """At a member's start, under its own lock: what its previous incarnation
    left in flight, backed out as a peer would (no peer was running, or none
    noticed yet). Prepared rows stay for its log to decide."""
    with conn.transaction():
        return _back_out(conn, member, member)


class PeerWatch:
    """The thread that watches the other members and recovers a dead one;
    ``say(msgid, text)`` writes the operator log (called from the thread)."""

    def __init__(self, conninfo: str, member: str, say, *,
                 heartbeat_timeout: float = 10.0, interval: float = WATCH_INTERVAL):
        self.conninfo = conninfo
        self.member = member
        self.say = say
        self.heartbeat_timeout = heartbeat_timeout
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: recoveries done, for DISPLAY GROUP and the tests
        self.recoveries: list[PeerRecovery] = []
        #: called with each PeerRecovery (the member wakes its getters)
        self.on_recovered = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"qsg-peers-{self.member}",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        conn = None
        said = ""
        while not self._stop.wait(self.interval):
            try:
                if conn is None or conn.closed:
                    conn = connect(self.conninfo, application=f"harbormq {self.member} peers")
                self.look(conn)
                said = ""
            except (CFNotAvailable, psycopg.Error) as e:
                what = type(e).__name__
                if what != said:      # once until it changes: the store may be down
                    said = what
                    self.say("HMQ5315W", f"the watch of the group's members cannot look: {e}")
                if conn is not None:
                    conn.close()
                conn = None
        if conn is not None:
            conn.close()

    def look(self, conn: psycopg.Connection) -> list[PeerRecovery]:
        """One look at the other ACTIVE members: a silent one's backend
        terminated, a dead one recovered."""
        done = []
        rows = conn.execute(
            "SELECT name, number, backend_pid, "
            "extract(epoch FROM now() - heartbeat_at) > %s AS silent, "
            "EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND "
            "classid = %s AND objid = number AND objsubid = 2) AS locked "
            "FROM hmq_members WHERE state = 'ACTIVE' AND name <> %s",
            (self.heartbeat_timeout, LOCK_CLASS, self.member)).fetchall()
        for name, _number, pid, silent, locked in rows:
            if locked and silent and pid:
                self.say("HMQ5310W", f"CSQE010W member {name} of the group has sent no "
                         f"heartbeat for {self.heartbeat_timeout:g} s: its connection "
                         f"(backend {pid}) is ended so that its work can be recovered")
                conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
                continue
            if locked:
                continue
            result = recover_member(conn, name, self.member)
            if result is None:
                continue
            self.report(result)
            done.append(result)
        return done

    def report(self, r: PeerRecovery) -> None:
        """The operator log's lines of one recovery, phase by phase."""
        self.say("HMQ5311I", f"CSQE011I peer recovery started by {self.member} for failed "
                 f"member {r.member}")
        self.say("HMQ5312I", f"CSQE012I peer recovery for {r.member}: {r.units_of_work} units "
                 f"of work backed out, {r.made_available} messages available again, "
                 f"{r.backed_out_puts} uncommitted puts removed"
                 + (f" (queues {', '.join(sorted(r.queues))})" if r.queues else ""))
        if r.in_doubt:
            self.say("HMQ5313I", f"CSQE013I peer recovery for {r.member}: {r.in_doubt} units "
                     "of work in doubt are left for the member's restart to resolve")
        self.say("HMQ5314I", f"CSQE014I peer recovery for {r.member} complete")
        self.recoveries.append(r)
        if self.on_recovered is not None:
            self.on_recovered(r)
