"""The structure store: the messages of the group's shared queues in
PostgreSQL and the unit-of-work state of each (docs/qsg.md, "Units of
work"), as one member sees them through its own connection.

Every change is one SQL statement, a transaction of its own, that also takes
the group-wide stamp (``hmq_stamp``) the member's log record carries:

* a put under a unit of work inserts its row as PUT (invisible to everyone),
  outside one as AVAILABLE;
* a get takes the first AVAILABLE row of the queue by priority then key
  (FIFO in the group) with ``FOR UPDATE SKIP LOCKED``, so competing members
  never take one message twice; under a unit of work it marks it GOT (locked
  to its owner), outside one it deletes it;
* ``commit`` of a unit of work that touched only shared queues is one
  statement that makes its PUT rows AVAILABLE, deletes its GOT rows and
  records the outcome (``hmq_uow_outcomes``): that statement is the decision;
* ``prepare`` (a unit of work mixing local and shared queues) marks its rows
  PREP_PUT and PREP_GOT; the member's log decides, then ``resolve`` applies;
* ``backout`` deletes its PUT rows and makes its GOT rows AVAILABLE again,
  their backout count one more.

A committed message is announced with NOTIFY on ``hmq_available`` (payload:
the queue), which wakes getters on every member (``listener.py``).

The connection is synchronous and used from one thread at a time (the
queue manager's loop): a statement on loopback takes a fraction of a
millisecond. A lost connection raises ``CFNotAvailable`` (MQRC 2345) and
the next operation connects again.

Not here: the group's members and definitions (``group.py``), peer
recovery (``peers.py``), the shared queue the core sees (``queue.py``)."""

from __future__ import annotations

import struct
import threading
import time
from dataclasses import dataclass

import psycopg

from ..log.records import MSG_FIXED, Message
from .errors import CFNotAvailable, CFStructError, CFStructFailed, SharedUnitBackedOut
from .schema import AVAILABLE_CHANNEL

#: the encoding's seq (offset 0, u64) and backout count (offset 12, u32): the
#: row keeps them in columns, the stored encoding has zeros there
_SEQ = struct.Struct("<Q")
_BACKOUT = struct.Struct("<I")
_BACKOUT_AT = 12
assert MSG_FIXED.size == 48

#: how long a statement may run before PostgreSQL cancels it (ms): a store that
#: hangs must not hold the queue manager's loop for long
STATEMENT_TIMEOUT_MS = 5000


def stored_encoding(msg: Message) -> bytes:
    """The encoding a row keeps: the message's with seq and backout count zero
    (the row's msg_key and backout_count columns hold them)."""
    raw = bytearray(msg.encode())
    _SEQ.pack_into(raw, 0, 0)
    _BACKOUT.pack_into(raw, _BACKOUT_AT, 0)
    return bytes(raw)


def message_of_row(msg_key: int, backout_count: int, raw: bytes) -> Message:
    """The message a row holds: its encoding with its key as seq and its count."""
    buf = bytearray(raw)
    _SEQ.pack_into(buf, 0, msg_key)
    _BACKOUT.pack_into(buf, _BACKOUT_AT, backout_count)
    return Message.decode(bytes(buf))


@dataclass(slots=True)
class SharedPut:
    """A put done: the message (its seq is its key in the group) and the stamp."""
    msg: Message
    stamp: int


@dataclass(slots=True)
class SharedGot:
    """A get done: the message and the stamp of the get."""
    msg: Message
    stamp: int


@dataclass(slots=True)
class Decision:
    """A unit of work decided in PostgreSQL: the stamp of its outcome and the
    queues where messages became available."""
    stamp: int
    queues: list[str]


def connect(conninfo: str, *, autocommit: bool = True, application: str = "harbormq"
            ) -> psycopg.Connection:
    """A connection to the group's database, or CFNotAvailable saying why not."""
    try:
        # statements run on the queue manager's loop: a database that stops
        # answering (a host gone, packets dropped) must fail them in seconds,
        # not after TCP's minutes
        conn = psycopg.connect(conninfo, autocommit=autocommit, application_name=application,
                               options=f"-c statement_timeout={STATEMENT_TIMEOUT_MS}",
                               connect_timeout=5, keepalives=1, keepalives_idle=5,
                               keepalives_interval=2, keepalives_count=3,
                               tcp_user_timeout=10_000)
    except psycopg.Error as e:
        raise CFNotAvailable(f"the group's database cannot be reached ({_first_line(e)}) "
                             "(MQRC 2345 CF_NOT_AVAILABLE)", conninfo=redact(conninfo)) from e
    return conn


def redact(conninfo: str) -> str:
    """A conninfo fit for a message: its password, if any, replaced."""
    parts = []
    for part in conninfo.split():
        key = part.split("=", 1)[0]
        parts.append(f"{key}=***" if key == "password" else part)
    return " ".join(parts)


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


class StructureStore:
    """One member's access to the messages of the group's structures."""

    def __init__(self, conninfo: str, member: str, *, application: str = "harbormq"):
        self.conninfo = conninfo
        self.member = member
        self.application = application
        self._conn: psycopg.Connection | None = None
        #: one statement at a time on the connection (the loop, or a thread)
        self._lock = threading.RLock()
        #: structure name -> (status, recover), read again when a change is told
        self._structures: dict[str, tuple[str, bool]] = {}
        #: called (with the exception) when the connection is lost
        self.on_lost = None

    # -- the connection --------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.closed

    def connection(self) -> psycopg.Connection:
        """The connection, made again if it was lost (CFNotAvailable if it cannot be)."""
        if not self.connected:
            self._conn = connect(self.conninfo, application=self.application)
            self.on_connected(self._conn)
        return self._conn

    def on_connected(self, conn: psycopg.Connection) -> None:
        """A (new) connection was made: a subclass takes its session state here."""

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def run(self, sql: str, params=None, *, fetch: str = "one"):
        """One statement (a transaction of its own); CFNotAvailable when the
        connection is lost, which is then dropped for the next call to make again."""
        with self._lock:
            conn = self.connection()
            try:
                cur = conn.execute(sql, params)
                if fetch == "one":
                    return cur.fetchone()
                if fetch == "all":
                    return cur.fetchall()
                return cur.rowcount
            except (psycopg.OperationalError, psycopg.InterfaceError) as e:
                self._lost(e)
                raise CFNotAvailable(f"the group's database was lost ({_first_line(e)}) "
                                     "(MQRC 2345 CF_NOT_AVAILABLE)") from e

    def _lost(self, e: BaseException) -> None:
        try:
            if self._conn is not None:
                self._conn.close()
        finally:
            self._conn = None
        if self.on_lost is not None:
            self.on_lost(e)

    # -- structures ----------------------------------------------------------------

    def structure(self, name: str, *, refresh: bool = False) -> tuple[str, bool]:
        """(status, recover) of a structure; CFStructError if it is not defined."""
        got = None if refresh else self._structures.get(name)
        if got is None:
            row = self.run("SELECT status, recover FROM hmq_structures WHERE name = %s",
                           (name,))
            if row is None:
                raise CFStructError(f"structure {name} is not defined in the group "
                                    "(MQRC 2349 CF_STRUC_ERROR)", structure=name)
            got = self._structures[name] = (row[0], row[1])
        return got

    def forget_structures(self) -> None:
        """A structure changed somewhere in the group: read them again when used."""
        self._structures.clear()

    def check_usable(self, name: str, *, refresh: bool = False) -> bool:
        """The structure's RECOVER; CFStructFailed if it has failed (as last
        read: a change anywhere in the group is told by NOTIFY, which makes
        the member read it again)."""
        status, recover = self.structure(name, refresh=refresh)
        if status != "ACTIVE":
            status, recover = self.structure(name, refresh=True)
            if status != "ACTIVE":
                raise CFStructFailed(f"structure {name} has failed ({status}); RECOVER "
                                     f"CFSTRUCT({name}) brings it back (MQRC 2373 "
                                     "CF_STRUC_FAILED)", structure=name)
        return recover

    # -- messages ----------------------------------------------------------------------

    def put(self, structure: str, queue: str, msg: Message, uow: int | None) -> SharedPut:
        """Insert ``msg`` on ``queue``: PUT under unit of work ``uow``, AVAILABLE
        outside one (then announced). The message gets its key as its seq."""
        state = "AVAILABLE" if uow is None else "PUT"
        insert = (
            "INSERT INTO hmq_messages (msg_key, structure, queue, priority, persistent, state, "
            "owner, uow, put_stamp, expiry_ns, msg_id, correl_id, backout_count, message) "
            "SELECT nextval('hmq_msg_key'), %s, %s, %s, %s, %s, %s, %s, nextval('hmq_stamp'), "
            "%s, %s, %s, %s, %s WHERE EXISTS (SELECT 1 FROM hmq_structures WHERE name = %s "
            "AND status = 'ACTIVE') RETURNING msg_key, put_stamp")
        # (the structure's state is checked in the statement: a RESET CFSTRUCT
        # on another member is never raced past)
        params = [structure, queue, msg.priority, msg.persistent, state,
                  None if uow is None else self.member, uow, msg.expiry_ns, msg.msg_id,
                  msg.correl_id, msg.backout_count, stored_encoding(msg), structure]
        if uow is None:     # committed at once: announced in the same statement
            insert = f"WITH ins AS ({insert}) SELECT msg_key, put_stamp, " \
                     "pg_notify(%s, %s) FROM ins"
            params += [AVAILABLE_CHANNEL, queue]
        row = self.run(insert, params)
        if row is None:         # failed (or deleted) since it was last read
            self.check_usable(structure, refresh=True)
            raise CFStructFailed(f"structure {structure} is not active (MQRC 2373 "
                                 "CF_STRUC_FAILED)", structure=structure)
        key, stamp = row[0], row[1]
        msg.raw = msg._key = None
        msg.seq = key
        return SharedPut(msg, stamp)

    def get(self, queue: str, uow: int | None, *, msg_id: bytes | None = None,
            correl_id: bytes | None = None, now_ns: int | None = None) -> SharedGot | None:
        """Take the first available message of ``queue`` (priority, then FIFO),
        skipping rows another member is taking: GOT under ``uow``, deleted
        outside one. None when there is none."""
        now_ns = time.time_ns() if now_ns is None else now_ns
        where = ["queue = %s", "state = 'AVAILABLE'", "(expiry_ns = 0 OR expiry_ns > %s)"]
        params: list = [queue, now_ns]
        if msg_id is not None:
            where.append("msg_id = %s"); params.append(msg_id)
        if correl_id is not None:
            where.append("correl_id = %s"); params.append(correl_id)
        pick = (f"SELECT msg_key FROM hmq_messages WHERE {' AND '.join(where)} "
                "ORDER BY priority DESC, msg_key LIMIT 1 FOR UPDATE SKIP LOCKED")
        if uow is None:
            sql = (f"DELETE FROM hmq_messages WHERE msg_key = ({pick}) "
                   "RETURNING msg_key, nextval('hmq_stamp'), backout_count, message")
        else:
            sql = ("UPDATE hmq_messages SET state = 'GOT', owner = %s, uow = %s, "
                   f"get_stamp = nextval('hmq_stamp') WHERE msg_key = ({pick}) "
                   "RETURNING msg_key, get_stamp, backout_count, message")
            params = [self.member, uow, *params]
        row = self.run(sql, params)
        if row is None:
            return None
        key, stamp, count, raw = row
        return SharedGot(message_of_row(key, count, raw), stamp)

    def browse(self, queue: str, limit: int | None = None) -> list[Message]:
        """The available messages of ``queue`` in delivery order, not taken."""
        rows = self.run("SELECT msg_key, backout_count, message FROM hmq_messages "
                        "WHERE queue = %s AND state = 'AVAILABLE' AND "
                        "(expiry_ns = 0 OR expiry_ns > %s) ORDER BY priority DESC, msg_key "
                        "LIMIT %s", (queue, time.time_ns(), limit), fetch="all")
        return [message_of_row(k, c, r) for k, c, r in rows]

    def depth(self, queue: str) -> int:
        """CURDEPTH as MQ counts it on a shared queue: every message on it,
        committed or not."""
        return self.run("SELECT count(*) FROM hmq_messages WHERE queue = %s", (queue,))[0]

    def uncommitted_of(self, queues: list[str]) -> dict[str, int]:
        """DISPLAY QSTATUS's UNCOM of each of ``queues`` (shared), in one
        statement: the messages a unit of work holds (put or got, prepared or
        not), not yet decided; a queue with none: 0."""
        rows = self.run("SELECT queue, count(*) FROM hmq_messages WHERE queue = ANY(%s) AND "
                        "state <> 'AVAILABLE' GROUP BY queue", (list(queues),), fetch="all")
        counts = dict.fromkeys(queues, 0)
        counts.update(rows)
        return counts

    def depths(self) -> dict[str, int]:
        rows = self.run("SELECT queue, count(*) FROM hmq_messages GROUP BY queue", fetch="all")
        return dict(rows)

    # -- units of work -----------------------------------------------------------------

    def commit(self, uow: int) -> Decision:
        """Decide unit of work ``uow`` (shared queues only) as committed, in one
        statement: its puts available (announced), its gets gone, its outcome
        recorded for its restart to read."""
        return self._decide(uow, "commit")

    def backout(self, uow: int) -> Decision:
        """Back ``uow``'s rows out, in one statement: its puts gone, its gets
        available again with one more backout."""
        return self._decide(uow, "backout")

    def _decide(self, uow: int, outcome: str, owner: str | None = None,
                decided_by: str | None = None) -> Decision:
        owner = owner or self.member
        if outcome == "commit":
            first = ("UPDATE hmq_messages SET state = 'AVAILABLE', owner = NULL, uow = NULL "
                     "WHERE owner = %(m)s AND uow = %(u)s AND state IN ('PUT', 'PREP_PUT') "
                     "RETURNING queue")
            second = ("DELETE FROM hmq_messages WHERE owner = %(m)s AND uow = %(u)s "
                      "AND state IN ('GOT', 'PREP_GOT') RETURNING queue")
        else:
            first = ("UPDATE hmq_messages SET state = 'AVAILABLE', owner = NULL, uow = NULL, "
                     "backout_count = backout_count + 1 WHERE owner = %(m)s AND uow = %(u)s "
                     "AND state IN ('GOT', 'PREP_GOT') RETURNING queue")
            second = ("DELETE FROM hmq_messages WHERE owner = %(m)s AND uow = %(u)s "
                      "AND state IN ('PUT', 'PREP_PUT') RETURNING queue")
        row = self.run(
            f"WITH avail AS ({first}), gone AS ({second}), "
            "decided AS (INSERT INTO hmq_uow_outcomes (member, uow, outcome, stamp, decided_by) "
            "VALUES (%(m)s, %(u)s, %(o)s, nextval('hmq_stamp'), %(by)s) "
            # a peer's backout stands: a commit after it decides nothing
            "ON CONFLICT (member, uow) DO UPDATE SET outcome = EXCLUDED.outcome "
            "WHERE hmq_uow_outcomes.outcome = EXCLUDED.outcome RETURNING stamp), "
            "told AS (SELECT DISTINCT queue FROM avail) "
            "SELECT (SELECT stamp FROM decided), "
            "(SELECT array_agg(queue) FROM (SELECT queue, pg_notify(%(ch)s, queue) FROM told) n)",
            {"m": owner, "u": uow, "o": outcome, "by": decided_by or self.member,
             "ch": AVAILABLE_CHANNEL})
        if row[0] is None:
            raise SharedUnitBackedOut(
                f"unit of work {uow} of {owner}: its shared messages were backed out by a "
                f"peer (recovering {owner}) before it could {outcome} "
                "(MQRC 2003 BACKED_OUT)")
        return Decision(row[0], list(row[1] or ()))

    def prepare(self, uow: int, log_lsn: int = 0) -> int:
        """Phase one for a unit of work that also touches local queues: its rows
        PREP_PUT and PREP_GOT, left by peer recovery for the member's own log to
        decide, stamped with ``log_lsn``, the member's log end now (restart's
        rule, ``prepared_lsns``). Refused when a peer backed the unit out
        (MQRC 2003). Returns how many rows."""
        count = self.run("UPDATE hmq_messages SET state = 'PREP_' || state, prepare_lsn = %s "
                         "WHERE owner = %s AND uow = %s AND state IN ('PUT', 'GOT')",
                         (log_lsn, self.member, uow), fetch="count")
        if count == 0 and self.outcome(uow) == "backout":
            raise SharedUnitBackedOut(
                f"unit of work {uow} of {self.member}: its shared messages were backed out "
                "by a peer before it could prepare (MQRC 2003 BACKED_OUT)")
        return count

    def prepared_lsns(self) -> dict[int, int]:
        """This member's prepared units of work: uow -> its log end when prepared."""
        rows = self.run("SELECT uow, max(coalesce(prepare_lsn, 0)) FROM hmq_messages "
                        "WHERE owner = %s AND state LIKE 'PREP_%%' GROUP BY uow",
                        (self.member,), fetch="all")
        return {uow: lsn for uow, lsn in rows}

    def resolve(self, uow: int, commit: bool) -> Decision:
        """Phase two: apply the outcome the member's log holds."""
        return self._decide(uow, "commit" if commit else "backout")

    def outcome(self, uow: int) -> str | None:
        """'commit' or 'backout' when PostgreSQL decided ``uow`` (or a peer
        backed it out), else None."""
        row = self.run("SELECT outcome FROM hmq_uow_outcomes WHERE member = %s AND uow = %s",
                       (self.member, uow))
        return None if row is None else row[0]

    def in_flight(self) -> dict[int, list[str]]:
        """This member's units of work with rows in PostgreSQL: uow -> the rows' states."""
        rows = self.run("SELECT uow, state FROM hmq_messages WHERE owner = %s", (self.member,),
                        fetch="all")
        out: dict[int, list[str]] = {}
        for uow, state in rows:
            out.setdefault(uow, []).append(state)
        return out

    def forget_outcomes(self, below: int | None = None) -> int:
        """Drop this member's recorded outcomes (all, or those of units below
        ``below``): its log holds them now."""
        if below is None:
            return self.run("DELETE FROM hmq_uow_outcomes WHERE member = %s", (self.member,),
                            fetch="count")
        return self.run("DELETE FROM hmq_uow_outcomes WHERE member = %s AND uow < %s",
                        (self.member, below), fetch="count")
