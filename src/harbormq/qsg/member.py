"""A running member's session with the group: its connection holds the
member's advisory lock, which PostgreSQL releases when the connection drops
(the process died, or the connection was lost), and a heartbeat thread
stamps ``hmq_members.heartbeat_at`` for a member whose machine went away
without closing its connections (docs/qsg.md, "Peer recovery").

``MemberSession`` is the ``StructureStore`` the member's shared queues use:
every (re)connection takes the lock again, marks the member ACTIVE and
counts a new incarnation. A lock that another session holds means the name
is in use by a running queue manager (two members with one name): refused.

Not here: watching the other members (``peers.py``)."""

from __future__ import annotations

import threading
import time

import psycopg

from .errors import CFNotAvailable, GroupError
from .group import LOCK_CLASS, check_group
from .structure import StructureStore, connect

#: seconds between heartbeats, and after which a silent member is dead
HEARTBEAT_INTERVAL = 1.0
HEARTBEAT_TIMEOUT = 10.0
#: how long a start waits for a peer that holds the member's lock while it
#: recovers the member's previous incarnation
LOCK_WAIT = 10.0


class MemberSession(StructureStore):
    """The member's main connection: its lock, its state, its messages."""

    def __init__(self, conninfo: str, group: str, member: str, *,
                 heartbeat_interval: float = HEARTBEAT_INTERVAL):
        super().__init__(conninfo, member, application=f"harbormq {member}")
        self.group = group
        self.number: int | None = None
        self.incarnation = 0
        #: connections made by this process: the second and later are reconnections
        self.connections = 0
        self.heartbeat_interval = heartbeat_interval
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        #: called (no arguments) after every reconnection: a member whose
        #: connection was lost learns what its peers backed out meanwhile
        self.on_reconnected = None

    def start(self) -> None:
        """Connect, take the member's lock, mark it ACTIVE; start the heartbeat."""
        with self._lock:
            self.connection()
        self._heartbeat = threading.Thread(target=self._beat, name=f"qsg-heartbeat-{self.member}",
                                           daemon=True)
        self._heartbeat.start()

    def on_connected(self, conn: psycopg.Connection) -> None:
        check_group(conn, self.group)
        row = conn.execute("SELECT number FROM hmq_members WHERE name = %s",
                           (self.member,)).fetchone()
        if row is None:
            conn.close()
            raise GroupError(f"queue manager {self.member} is not a member of group "
                             f"{self.group}", hint="it left the group, or the database is "
                                                   "another group's")
        self.number = row[0]
        deadline = time.monotonic() + LOCK_WAIT
        while not conn.execute("SELECT pg_try_advisory_lock(%s, %s)",
                               (LOCK_CLASS, self.number)).fetchone()[0]:
            state = conn.execute("SELECT state FROM hmq_members WHERE name = %s",
                                 (self.member,)).fetchone()[0]
            if time.monotonic() > deadline:
                conn.close()
                raise GroupError(f"queue manager {self.member} is running already as a "
                                 f"member of group {self.group} (state {state}): two members "
                                 "cannot have one name")
            time.sleep(0.2)
        self.incarnation = conn.execute(
            "UPDATE hmq_members SET state = 'ACTIVE', started_at = now(), heartbeat_at = now(), "
            "backend_pid = pg_backend_pid(), incarnation = incarnation + 1 WHERE name = %s "
            "RETURNING incarnation", (self.member,)).fetchone()[0]
        self.connections += 1
        if self.connections > 1 and self.on_reconnected is not None:
            self.on_reconnected()

    def stop(self) -> None:
        """A normal end: STOPPED, the lock released with the connection."""
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join(timeout=5)
        with self._lock:
            if self.connected:
                try:
                    self._conn.execute("UPDATE hmq_members SET state = 'STOPPED', "
                                       "backend_pid = NULL WHERE name = %s", (self.member,))
                except psycopg.Error:
                    pass
        self.close()

    def _beat(self) -> None:
        """The heartbeat, on a connection of its own (the main one may be busy)."""
        conn = None
        while not self._stop.wait(self.heartbeat_interval):
            try:
                if conn is None or conn.closed:
                    conn = connect(self.conninfo, application=f"harbormq {self.member} heartbeat")
                conn.execute("UPDATE hmq_members SET heartbeat_at = now() WHERE name = %s "
                             "AND incarnation = %s", (self.member, self.incarnation))
            except (CFNotAvailable, psycopg.Error):
                if conn is not None:
                    conn.close()
                conn = None
        if conn is not None:
            conn.close()
