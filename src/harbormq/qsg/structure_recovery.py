"""Structure backup and recovery (MQ for z/OS's BACKUP CFSTRUCT, RECOVER
CFSTRUCT, RESET CFSTRUCT ACTION(FAIL); docs/qsg.md, "Structure backup and
recovery").

**Backup.** ``backup_structure`` copies a structure's committed persistent
messages into the log of the member that runs it (CFSTRUCT_BACKUP_BEGIN,
CHUNKs, END) and records the backup in PostgreSQL (``hmq_cfbackups``: time,
member, log range, the stamp replay starts from). It is fuzzy: puts and gets
go on while it reads. What it holds is one REPEATABLE READ snapshot of the
structure's rows taken once every statement that took a stamp before the
backup's stamp ``s0`` has ended; the **replay stamp** ``S`` is the lowest of
``s0`` and the stamps of the rows the snapshot leaves out (uncommitted puts,
messages a unit of work is getting, and with EXCLINT(n) the messages put in
the last n seconds, which are likely to be got soon and so are left to the
logs, as in MQ).

**Recovery.** ``plan_recovery`` says first what it will read: the latest
backup, every member's log (its log directory, or for an extent no longer
there its archive, recalled into scratch space; a member that is down is
read from its files), the bytes and an estimate of the time.
``recover_structure`` then reads the backup's records, merges every member's
log by stamp (``merge.py``) and drives **the commit rule** of
``log/replay.py`` with it: one rule per member (a unit of work is one
member's), SHARED_PUT and SHARED_GET fed to it as the puts and gets they
are. A message key is unique in the group and a message is put once, so the
result is exactly the committed state, whatever the order of two members'
decisions with close stamps:

* a committed put whose own stamp is at or after ``S`` adds its message
  (one before ``S`` is in the backup, or was got before it was taken);
* a committed get removes its message, for good (a later put of that key
  cannot be read: there is none);
* a get undone by a compensation leaves it, with the record's backout count.

Units of work the logs leave open are decided by what PostgreSQL recorded
(``hmq_uow_outcomes``: a unit committed or backed out there, by its member or
by peer recovery, whose member's log does not say so yet); the others are
put back as they were (their puts PUT, their gets GOT, PREP_ when prepared),
owned by their member, whose commit, backout, restart or peer recovery then
decides them as before the failure. TYPE(PURGE) empties the structure and
reads nothing.

Not here: the structure store and units of work of shared queues
(``structure.py``), the MQSC commands (``admin/cfstruct_commands.py``),
merging the logs (``merge.py``)."""

from __future__ import annotations

import struct
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol

import psycopg

from ..config import QMConfig
from ..errors import ConfigError, HarbormqError, LogMissing
from ..log.records import (
    LogRecord,
    Message,
    RecordType,
    SharedChange,
    decode_json,
    encode_json,
    key_parts,
)
from ..log.replay import CommitRule, PendingOp
from .errors import CFStructError
from .merge import (
    MemberLog,
    MemberPlan,
    ReadProgress,
    member_records,
    merged,
    no_read_progress,
    plan_member,
    recall_into,
    remove_recalled,
    stamped,
)
from .structure import message_of_row, stored_encoding

T = RecordType

#: the backups of the group's structures (DISPLAY CFSTATUS TYPE(BACKUP) reads it)
BACKUPS_DDL = """CREATE TABLE IF NOT EXISTS hmq_cfbackups (
    structure text NOT NULL,
    backup_id bigint NOT NULL,
    member text NOT NULL,
    started_at timestamptz NOT NULL,
    ended_at timestamptz NOT NULL,
    start_lsn bigint NOT NULL,
    end_lsn bigint NOT NULL,
    replay_stamp bigint NOT NULL,
    snapshot_stamp bigint NOT NULL,
    messages bigint NOT NULL,
    bytes bigint NOT NULL,
    exclint integer NOT NULL,
    PRIMARY KEY (structure, backup_id)
)"""

#: a SharedChange's stamp, the first field of its head (log/records.py)
_STAMP = struct.Struct("<Q")
#: payload bytes per CFSTRUCT_BACKUP_CHUNK record
CHUNK_BYTES = 256 * 1024
#: a chunk: the backup's id; then per message its key, put stamp, backout
#: count, queue name length, stored encoding length, the name, the encoding
CHUNK_HEAD = struct.Struct("<Q")
CHUNK_ROW = struct.Struct("<QQIHI")
#: the merge rate assumed for an estimate until a recovery here measured one
ASSUMED_RATE = 40 << 20
#: how long a backup waits for statements older than its stamp to end (s)
OLDER_STATEMENTS_WAIT = 15.0


class StructureRecoveryError(HarbormqError):
    """BACKUP, RECOVER or RESET CFSTRUCT cannot run as asked (nothing changed)."""
    msgid = "HMQ5331E"


# -- the backup's records ----------------------------------------------------------------

@dataclass(slots=True)
class BackupRow:
    """One message of a structure, as a backup holds it and a row keeps it."""
    msg_key: int
    queue: str
    put_stamp: int
    backout_count: int
    raw: bytes                # the stored encoding (structure.stored_encoding)
    #: the message decoded already (a put replayed), else decoded when asked
    decoded: Message | None = None

    def message(self) -> Message:
        if self.decoded is None:
            self.decoded = message_of_row(self.msg_key, self.backout_count, self.raw)
        return self.decoded


def encode_chunk(backup_id: int, rows: Iterable[BackupRow]) -> bytes:
    out = bytearray(CHUNK_HEAD.pack(backup_id))
    for r in rows:
        q = r.queue.encode()
        out += CHUNK_ROW.pack(r.msg_key, r.put_stamp, r.backout_count, len(q), len(r.raw))
        out += q
        out += r.raw
    return bytes(out)


def decode_chunk(payload: bytes) -> tuple[int, list[BackupRow]]:
    (backup_id,) = CHUNK_HEAD.unpack_from(payload, 0)
    pos, rows = CHUNK_HEAD.size, []
    view = memoryview(payload)
    while pos < len(payload):
        key, stamp, count, qlen, mlen = CHUNK_ROW.unpack_from(payload, pos)
        pos += CHUNK_ROW.size
        queue = bytes(view[pos:pos + qlen]).decode()
        pos += qlen
        rows.append(BackupRow(key, queue, stamp, count, bytes(view[pos:pos + mlen])))
        pos += mlen
    return backup_id, rows


def chunks(rows: list[BackupRow], limit: int = CHUNK_BYTES) -> Iterable[list[BackupRow]]:
    batch: list[BackupRow] = []
    size = 0
    for r in rows:
        batch.append(r)
        size += CHUNK_ROW.size + len(r.queue) + len(r.raw)
        if size >= limit:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


# -- PostgreSQL ----------------------------------------------------------------------------

def connect(conninfo: str) -> psycopg.Connection:
    """A connection of this module's own (a backup or a recovery reads in a
    thread; the member's store keeps its connection for its loop)."""
    from .structure import connect as store_connect
    conn = store_connect(conninfo, application="harbormq structure recovery")
    conn.execute(BACKUPS_DDL)
    # a recovery's statements may be long: no statement timeout of the store's
    conn.execute("SET statement_timeout = 0")
    return conn


def structure_row(conn: psycopg.Connection, structure: str) -> dict:
    row = conn.execute("SELECT name, status, recover, recauto, failed_at, cflevel "
                       "FROM hmq_structures WHERE name = %s", (structure,)).fetchone()
    if row is None:
        raise CFStructError(f"structure {structure} is not defined in the group "
                            "(MQRC 2349 CF_STRUC_ERROR)", structure=structure)
    return dict(zip(("name", "status", "recover", "recauto", "failed_at", "cflevel"), row,
                    strict=True))


def latest_backup(conn: psycopg.Connection, structure: str) -> dict | None:
    cur = conn.execute("SELECT * FROM hmq_cfbackups WHERE structure = %s "
                       "ORDER BY ended_at DESC, backup_id DESC LIMIT 1", (structure,))
    row = cur.fetchone()
    if row is None:
        return None
    return dict(zip([c.name for c in cur.description], row, strict=True))


def fail_structure(conn: psycopg.Connection, structure: str) -> int:
    """RESET CFSTRUCT ACTION(FAIL): the structure marked FAILED and its
    messages discarded, in one transaction; returns how many were. Shared
    queue operations on it then fail with MQRC 2373 until it is recovered."""
    from .schema import DEFINITIONS_CHANNEL
    structure_row(conn, structure)
    with conn.transaction():
        conn.execute("UPDATE hmq_structures SET status = 'FAILED', failed_at = now() "
                     "WHERE name = %s", (structure,))
        gone = conn.execute("DELETE FROM hmq_messages WHERE structure = %s",
                            (structure,)).rowcount
        conn.execute("SELECT pg_notify(%s, %s)", (DEFINITIONS_CHANNEL, f"CFSTRUCT {structure}"))
    return gone


@dataclass
class Snapshot:
    snapshot_stamp: int
    replay_stamp: int
    rows: list[BackupRow]
    left_out: int             # rows the snapshot leaves to the logs


def _wait_for_older_statements(conn: psycopg.Connection, since: Any, limit: float) -> None:
    """Until every transaction that began before ``since`` (and so may hold a
    stamp below the backup's) has ended: the snapshot then sees all of them."""
    deadline = time.monotonic() + limit
    while True:
        n = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND xact_start < %s AND "
            "(backend_xid IS NOT NULL OR backend_xmin IS NOT NULL)", (since,)).fetchone()[0]
        if n == 0:
            return
        if time.monotonic() > deadline:
            raise StructureRecoveryError(
                f"{n} transaction(s) on the group's database have run for more than {limit:.0f}"
                " s: the backup cannot fix its starting point; try again")
        time.sleep(0.01)


def take_snapshot(conn: psycopg.Connection, structure: str, exclint_s: int = 0,
                  now_ns: int | None = None) -> Snapshot:
    """The structure's committed persistent messages, and the stamp from which
    the logs must be replayed over them (see the module docstring)."""
    s0, since = conn.execute("SELECT nextval('hmq_stamp'), clock_timestamp()").fetchone()
    _wait_for_older_statements(conn, since, OLDER_STATEMENTS_WAIT)
    now_ns = time.time_ns() if now_ns is None else now_ns
    cutoff = now_ns - exclint_s * 1_000_000_000
    rows: list[BackupRow] = []
    replay = s0
    left_out = 0
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cur = conn.execute(
            "SELECT msg_key, queue, put_stamp, get_stamp, backout_count, state, message "
            "FROM hmq_messages WHERE structure = %s AND persistent ORDER BY msg_key",
            (structure,))
        for key, queue, put_stamp, get_stamp, count, state, raw in cur:
            if state in ("PUT", "PREP_PUT"):
                replay = min(replay, put_stamp)
                left_out += 1
                continue
            if state in ("GOT", "PREP_GOT") and get_stamp is not None:
                replay = min(replay, get_stamp)
            row = BackupRow(key, queue, put_stamp, count, bytes(raw))
            if exclint_s and row.message().put_time_ns > cutoff:
                replay = min(replay, put_stamp)
                left_out += 1
                continue
            rows.append(row)
    return Snapshot(s0, replay, rows, left_out)


# -- BACKUP CFSTRUCT -----------------------------------------------------------------------

class BackupLog(Protocol):
    """What a backup needs of the member whose log takes it (the core)."""
    name: str

    def append_record(self, rtype: RecordType, *, name: str = "",
                      payload: bytes = b"") -> int: ...


@dataclass
class BackupResult:
    structure: str
    backup_id: int
    member: str
    start_lsn: int
    end_lsn: int
    replay_stamp: int
    messages: int
    bytes: int
    left_out: int
    seconds: float

    def as_dict(self) -> dict:
        return asdict(self)


async def backup_structure(log: BackupLog, force: Callable[[], Any], conninfo: str,
                           structure: str, exclint_s: int = 0) -> BackupResult:
    """BACKUP CFSTRUCT(structure) EXCLINT(exclint_s) into ``log``, forced,
    then recorded in PostgreSQL. The snapshot is read in a thread of its own."""
    import asyncio
    if not 0 <= exclint_s <= 3600:
        raise StructureRecoveryError(f"EXCLINT({exclint_s}) is not valid: 0 to 3600 seconds")
    started = time.time()
    conn = await asyncio.to_thread(connect, conninfo)
    try:
        info = await asyncio.to_thread(structure_row, conn, structure)
        if info["status"] != "ACTIVE":
            raise StructureRecoveryError(
                f"structure {structure} is {info['status']}: a backup needs an active one "
                "(MQRC 2373 CF_STRUC_FAILED)", msgid="HMQ2373E")
        if not info["recover"]:
            raise StructureRecoveryError(
                f"structure {structure} is RECOVER(NO): it holds no persistent message and "
                "cannot be backed up (CSQE151I)")
        snap = await asyncio.to_thread(take_snapshot, conn, structure, exclint_s)
        backup_id = snap.snapshot_stamp
        begin = log.append_record(T.CFSTRUCT_BACKUP_BEGIN, name=structure, payload=encode_json({
            "structure": structure, "backup_id": backup_id, "replay_stamp": snap.replay_stamp,
            "snapshot_stamp": snap.snapshot_stamp, "exclint": exclint_s,
            "member": log.name}))
        nbytes = 0
        for batch in chunks(snap.rows):
            payload = encode_chunk(backup_id, batch)
            log.append_record(T.CFSTRUCT_BACKUP_CHUNK, name=structure, payload=payload)
            nbytes += len(payload)
            await asyncio.sleep(0)        # puts and gets run between chunks
        end = log.append_record(T.CFSTRUCT_BACKUP_END, name=structure, payload=encode_json({
            "backup_id": backup_id, "messages": len(snap.rows), "bytes": nbytes}))
        await force()
        await asyncio.to_thread(
            conn.execute,
            "INSERT INTO hmq_cfbackups (structure, backup_id, member, started_at, ended_at, "
            "start_lsn, end_lsn, replay_stamp, snapshot_stamp, messages, bytes, exclint) "
            "VALUES (%s, %s, %s, to_timestamp(%s), now(), %s, %s, %s, %s, %s, %s, %s)",
            (structure, backup_id, log.name, started, begin, end + 1, snap.replay_stamp,
             snap.snapshot_stamp, len(snap.rows), nbytes, exclint_s))
    finally:
        await asyncio.to_thread(conn.close)
    return BackupResult(structure, backup_id, log.name, begin, end + 1, snap.replay_stamp,
                        len(snap.rows), nbytes, snap.left_out, round(time.time() - started, 3))


def read_backup(plan: MemberPlan, backup_id: int, end_lsn: int) -> dict[int, BackupRow]:
    """The messages of backup ``backup_id`` from the log ``plan`` reads (from
    the backup's BEGIN to its END); LogMissing when they are not all there."""
    rows: dict[int, BackupRow] = {}
    ended = None
    for rec in member_records(plan, to_lsn=end_lsn):
        if rec.type == T.CFSTRUCT_BACKUP_CHUNK:
            bid, got = decode_chunk(rec.payload)
            if bid == backup_id:
                for r in got:
                    rows[r.msg_key] = r
        elif rec.type == T.CFSTRUCT_BACKUP_END:
            info = decode_json(rec.payload)
            if info.get("backup_id") == backup_id:
                ended = info
    if ended is None or ended["messages"] != len(rows):
        raise LogMissing(f"backup {backup_id} in the log of member {plan.member} is not whole "
                         f"(from LSN {plan.from_lsn}: {len(rows)} messages read"
                         + (f", its end record says {ended['messages']})" if ended else
                            ", no end record)"), lsn=plan.from_lsn)
    return rows


# -- RECOVER CFSTRUCT: the replay --------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SharedTarget:
    """What a shared record is about, for the commit rule: the queue, the
    record's own stamp and kind (a put is due from the replay stamp on)."""
    queue: str
    stamp: int
    kind: str


class StructureReplay:
    """The ``Effects`` of the commit rule for one structure: its messages by
    key, the keys a committed get removed for good, and the backout counts."""

    def __init__(self, structure: str, replay_stamp: int, rows: dict[int, BackupRow]):
        self.structure = structure
        self.replay_stamp = replay_stamp
        self.rows = rows
        self.removed: set[int] = set()
        #: the SharedChange of the record being fed (set by the handlers)
        self.change: SharedChange | None = None
        self.puts = self.gets = 0

    # the rule's interface
    def target(self, rec: LogRecord) -> Any | None:
        c = self.change
        if c is None or c.structure != self.structure:
            return None
        return SharedTarget(rec.object_name, c.stamp, "put" if rec.type == T.MSG_PUT else "get")

    def due(self, target: SharedTarget, lsn: int) -> bool:
        return target.kind == "get" or target.stamp >= self.replay_stamp

    def seen_put(self, target: Any, msg: Message) -> None:
        pass

    def opened(self, op: PendingOp, rec: LogRecord) -> bool:
        return True

    def closed(self, op: PendingOp, applied: bool) -> None:
        pass

    def put(self, target: SharedTarget, msg: Message, lsn: int) -> None:
        key = msg.seq
        if key in self.removed:
            return
        self.puts += 1
        self.rows[key] = BackupRow(key, target.queue, target.stamp, msg.backout_count,
                                   stored_encoding(msg), msg)

    def delete(self, target: SharedTarget, key: bytes, lsn: int, op: PendingOp | None) -> None:
        seq = key_parts(key)[1]
        self.gets += 1
        self.removed.add(seq)
        self.rows.pop(seq, None)

    def backed_out(self, op: PendingOp, backout_count: int, lsn: int) -> None:
        row = self.rows.get(key_parts(op.key)[1])
        if row is not None:
            row.backout_count = max(row.backout_count, backout_count)


class MemberRule:
    """The commit rule of one member's log over one structure: SHARED_PUT and
    SHARED_GET go to the rule's own put and get handlers as the MSG_PUT and
    MSG_GET they are (the payload's message or reference; the record header
    names the queue), so shunted copies of them are read the same way."""

    def __init__(self, member: str, replay: StructureReplay):
        self.member = member
        self.replay = replay
        self.rule = CommitRule(replay)
        put, get = self.rule.handlers[T.MSG_PUT], self.rule.handlers[T.MSG_GET]
        self.rule.handlers[T.SHARED_PUT] = lambda rec: self._shared(rec, T.MSG_PUT, put)
        self.rule.handlers[T.SHARED_GET] = lambda rec: self._shared(rec, T.MSG_GET, get)

    def _shared(self, rec: LogRecord, as_type: RecordType, handler) -> None:
        change = SharedChange.decode(rec.payload)
        if change.structure != self.replay.structure:
            return
        self.replay.change = change
        try:
            handler(LogRecord(as_type, rec.uow_id, rec.prev_lsn, 0, rec.object_name,
                              change.body, rec.flags, rec.lsn, rec.timestamp_ns))
        finally:
            self.replay.change = None

    def feed(self, rec: LogRecord) -> None:
        self.rule.feed(rec)


#: the records the replay feeds to the rule (a member's local messages are not read)
REPLAYED = frozenset((T.SHARED_PUT, T.SHARED_GET, T.UOW_BEGIN, T.UOW_PREPARE, T.UOW_COMMIT,
                      T.UOW_BACKOUT, T.COMPENSATION, T.UOW_SHUNT))


def stamp_of(rec: LogRecord) -> int | None:
    """The group-wide stamp of a shared change (merge.StampOf): the first
    field of its payload, read without decoding the rest."""
    if rec.type == T.SHARED_PUT or rec.type == T.SHARED_GET:
        return _STAMP.unpack_from(rec.payload, 0)[0]
    return None


# -- RECOVER CFSTRUCT: plan and run ----------------------------------------------------------

@dataclass
class RecoveryPlan:
    structure: str
    type: str                                # NORMAL or PURGE
    backup: dict | None
    replay_stamp: int
    members: dict[str, MemberPlan] = field(default_factory=dict)
    #: members whose logs cannot be read (the recovery cannot run)
    missing: dict[str, str] = field(default_factory=dict)
    rate: float = ASSUMED_RATE

    @property
    def bytes(self) -> int:
        return sum(p.bytes for p in self.members.values())

    @property
    def estimate_s(self) -> float:
        return round(self.bytes / self.rate, 1)

    @property
    def runnable(self) -> bool:
        return not self.missing

    def lines(self) -> list[str]:
        """The plan, as the operator reads it before anything is changed."""
        if self.type == "PURGE":
            return [f"RECOVER CFSTRUCT({self.structure}) TYPE(PURGE): the structure is made "
                    "empty and active again; no log is read"]
        b = self.backup
        out = [f"RECOVER CFSTRUCT({self.structure}) TYPE(NORMAL)",
               (f"  backup {b['backup_id']} by {b['member']} at {b['ended_at']:%Y-%m-%d %H:%M:%S}"
                f" (LSN {b['start_lsn']}..{b['end_lsn']}, {b['messages']} messages)")
               if b else "  no backup: every member's log from its start",
               f"  replay from stamp {self.replay_stamp}"]
        for name, p in sorted(self.members.items()):
            origins = sorted({e.origin for e in p.extents})
            out.append(f"  member {name}: {len(p.extents)} extent(s), {p.bytes / 1e6:.1f} MB "
                       f"from {' and '.join(origins)}"
                       + (f", {len(p.to_recall)} to recall from its archive"
                          if p.to_recall else ""))
        for name, why in sorted(self.missing.items()):
            out.append(f"  member {name}: NOT READABLE: {why}")
        out.append(f"  reading {self.bytes / 1e6:.1f} MB, estimated {self.estimate_s} s "
                   f"at {self.rate / 1e6:.0f} MB/s")
        return out

    def as_dict(self) -> dict:
        return {"structure": self.structure, "type": self.type,
                "backup": {k: str(v) for k, v in (self.backup or {}).items()} or None,
                "replay_stamp": self.replay_stamp, "bytes": self.bytes,
                "estimate_s": self.estimate_s, "runnable": self.runnable,
                "members": {n: p.as_dict() for n, p in self.members.items()},
                "missing": self.missing}


def member_logs(names: Iterable[str], home: Path | None = None,
                given: dict[str, MemberLog] | None = None) -> dict[str, MemberLog]:
    """Where each member's log is: as given (a DR site's copies), else from the
    member's qm.toml under ``home``; a member with neither has no log
    directory (its archive, if given, is all there is)."""
    given = given or {}
    out = {}
    for name in names:
        if name in given:
            out[name] = given[name]
            continue
        try:
            cfg = QMConfig.load(name, home)
        except (ConfigError, OSError):
            out[name] = MemberLog(name, None)
            continue
        out[name] = MemberLog(name, cfg.log_dir, tuple(cfg.log_archive_paths),
                              cfg.log_dual_dir)
    return out


def group_members(conn: psycopg.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT name FROM hmq_members ORDER BY number")]


def plan_recovery(conn: psycopg.Connection, structure: str, rtype: str,
                  logs: dict[str, MemberLog]) -> RecoveryPlan:
    """What RECOVER CFSTRUCT(structure) TYPE(rtype) will read, before anything
    changes. The structure must have failed (RESET CFSTRUCT ACTION(FAIL), or
    lost), as MQ requires."""
    rtype = rtype.upper()
    if rtype not in ("NORMAL", "PURGE"):
        raise StructureRecoveryError(f"TYPE({rtype}) is not valid: NORMAL or PURGE")
    info = structure_row(conn, structure)
    if info["status"] not in ("FAILED", "RECOVERING"):
        raise StructureRecoveryError(
            f"structure {structure} is {info['status']}: only a failed structure is recovered "
            f"(RESET CFSTRUCT({structure}) ACTION(FAIL) fails it) (CSQE132I)")
    if rtype == "PURGE":
        return RecoveryPlan(structure, rtype, None, 0)
    backup = latest_backup(conn, structure)
    replay = backup["replay_stamp"] if backup else 0
    plan = RecoveryPlan(structure, rtype, backup, replay)
    for name, ml in sorted(logs.items()):
        try:
            plan.members[name] = plan_member(ml, 0)
        except LogMissing as exc:
            plan.missing[name] = exc.message
    if backup and backup["member"] not in plan.members and backup["member"] not in plan.missing:
        plan.missing[backup["member"]] = "the backup is in its log, which is not known here"
    return plan


def _outcomes(conn: psycopg.Connection) -> dict[tuple[str, int], str]:
    return {(m, u): o for m, u, o in conn.execute(
        "SELECT member, uow, outcome FROM hmq_uow_outcomes")}


@dataclass
class RecoveryResult:
    structure: str
    type: str
    messages: int
    in_doubt: int
    in_flight: int
    bytes_read: int
    records: int
    seconds: float
    backup_messages: int

    @property
    def rate_mb_s(self) -> float:
        return round(self.bytes_read / 1e6 / self.seconds, 1) if self.seconds else 0.0

    def as_dict(self) -> dict:
        return asdict(self) | {"rate_mb_s": self.rate_mb_s}


def recover_structure(conn: psycopg.Connection, plan: RecoveryPlan, scratch: Path,
                      say: Callable[[str, str], None] = lambda mid, text: None,
                      progress: ReadProgress = no_read_progress,
                      logs: dict[str, MemberLog] | None = None) -> RecoveryResult:
    """Carry out ``plan``: the structure rebuilt in PostgreSQL and made active
    in one transaction at the end (nothing is changed before then: a recovery
    that fails leaves the structure failed, to be recovered again)."""
    lock = "hmq_recover:" + plan.structure
    if not conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (lock,)).fetchone()[0]:
        raise StructureRecoveryError(f"structure {plan.structure} is being recovered by "
                                     "another member", msgid="HMQ5332E")
    try:
        if structure_row(conn, plan.structure)["status"] == "ACTIVE":
            raise StructureRecoveryError(f"structure {plan.structure} was recovered already "
                                         "(it is ACTIVE)", msgid="HMQ5332E")
        return _recover(conn, plan, scratch, say, progress, logs)
    finally:
        conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (lock,))


def _recover(conn: psycopg.Connection, plan: RecoveryPlan, scratch: Path,
             say: Callable[[str, str], None], progress: ReadProgress,
             logs: dict[str, MemberLog] | None) -> RecoveryResult:
    started = time.monotonic()
    if not plan.runnable:
        raise LogMissing("RECOVER CFSTRUCT(" + plan.structure + ") cannot read every member's "
                         "log: " + "; ".join(f"{m}: {w}" for m, w in plan.missing.items()),
                         hint="put the members' extents back in their log directories or "
                              "archives, or name where they are")
    rows: dict[int, BackupRow] = {}
    open_rows: list[tuple] = []
    replay = None
    records = high_stamp = high_key = 0
    if plan.type == "NORMAL":
        try:
            for name, mplan in plan.members.items():
                recall_into(mplan, (logs or {}).get(name) or MemberLog(name, None), scratch, say)
            b = plan.backup
            if b is not None:
                src = plan.members[b["member"]]
                from_backup = MemberPlan(src.member, b["start_lsn"],
                                         [e for e in src.extents], [])
                rows = read_backup(from_backup, b["backup_id"], b["end_lsn"])
            backup_messages = len(rows)
            replay = StructureReplay(plan.structure, plan.replay_stamp, rows)
            rules = {name: MemberRule(name, replay) for name in plan.members}
            streams = {name: stamped(name, (r for r in member_records(p, progress)
                                            if r.type in REPLAYED), stamp_of)
                       for name, p in plan.members.items()}
            for m in merged(streams):
                rules[m.member].feed(m.rec)
                records += 1
                high_stamp = m.stamp
            open_rows = _settle_open_units(conn, rules, replay)
            high_key = max([*rows, *replay.removed], default=0)
        finally:
            remove_recalled(scratch)
    else:
        backup_messages = 0
    in_doubt = sum(1 for r in open_rows if r[1].startswith("PREP_"))
    _write_structure(conn, plan.structure, rows, open_rows, high_stamp, high_key)
    seconds = round(time.monotonic() - started, 3)
    return RecoveryResult(plan.structure, plan.type, len(rows), in_doubt,
                          len(open_rows) - in_doubt, plan.bytes if plan.type == "NORMAL" else 0,
                          records, seconds, backup_messages)


def _settle_open_units(conn: psycopg.Connection, rules: dict[str, MemberRule],
                       replay: StructureReplay) -> list[tuple]:
    """Units of work the logs leave open: decided as PostgreSQL recorded, or
    put back as they were, owned by their member: (key, state, member, uow)."""
    outcomes = _outcomes(conn)
    back: list[tuple] = []
    for name, mr in rules.items():
        for uow_id, uow in list(mr.rule.open.items()):
            outcome = outcomes.get((name, uow_id))
            if outcome is not None:
                kind = T.UOW_COMMIT if outcome == "commit" else T.UOW_BACKOUT
                mr.rule.feed(LogRecord(kind, uow_id=uow_id, lsn=uow.last_lsn + 1))
                continue
            prefix = "PREP_" if uow.state == "prepared" else ""
            for op in uow.ops.values():
                if not isinstance(op.target, SharedTarget):
                    continue
                key = key_parts(op.key)[1]
                if op.kind == "put":
                    if key in replay.removed:
                        continue
                    replay.rows[key] = BackupRow(key, op.target.queue, op.target.stamp,
                                                 op.msg.backout_count, stored_encoding(op.msg))
                    back.append((key, prefix + "PUT", name, uow_id, None))
                elif key in replay.rows:
                    back.append((key, prefix + "GOT", name, uow_id, op.target.stamp))
    return back


def _write_structure(conn: psycopg.Connection, structure: str, rows: dict[int, BackupRow],
                     open_rows: list[tuple], high_stamp: int, high_key: int) -> None:
    """The rebuilt messages into ``hmq_messages`` and the structure ACTIVE, in
    one transaction; the queues with messages announced. The group's sequences
    are moved past every stamp and key the logs hold: a database restored
    from an older backup (disaster recovery) must not give them again."""
    from .schema import AVAILABLE_CHANNEL, DEFINITIONS_CHANNEL
    held = {key: (state, member, uow, stamp) for key, state, member, uow, stamp in open_rows}
    with conn.transaction():
        for sequence, high in (("hmq_stamp", high_stamp), ("hmq_msg_key", high_key)):
            conn.execute(f"SELECT setval('{sequence}', greatest(%s, (SELECT last_value FROM "
                         f"{sequence})))", (max(high, 1),))
        conn.execute("DELETE FROM hmq_messages WHERE structure = %s", (structure,))
        with conn.cursor() as cur, cur.copy(
                "COPY hmq_messages (msg_key, structure, queue, priority, persistent, state, "
                "owner, uow, put_stamp, get_stamp, expiry_ns, msg_id, correl_id, "
                "backout_count, message) FROM STDIN") as copy:
            for key, r in rows.items():
                m = r.message()
                state, member, uow, get_stamp = held.get(key, ("AVAILABLE", None, None, None))
                copy.write_row((key, structure, r.queue, m.priority, True, state, member, uow,
                                r.put_stamp, get_stamp, m.expiry_ns, m.msg_id, m.correl_id,
                                r.backout_count, r.raw))
        conn.execute("UPDATE hmq_structures SET status = 'ACTIVE', failed_at = NULL "
                     "WHERE name = %s", (structure,))
        conn.execute("SELECT pg_notify(%s, %s)", (DEFINITIONS_CHANNEL, f"CFSTRUCT {structure}"))
        for queue in sorted({r.queue for r in rows.values()}):
            conn.execute("SELECT pg_notify(%s, %s)", (AVAILABLE_CHANNEL, queue))

