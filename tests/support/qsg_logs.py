"""Members of a queue sharing group as their log and the structure store see
them, for structure recovery's tests: every change is the PostgreSQL
statement of ``qsg/structure.py`` (which takes the stamp), then the log
record a member writes for it (docs/qsg.md, "The log records of shared
messages"), in extents written with the codec (``pipeline_logbuilder``).
A unit of work that touches only shared queues is decided in PostgreSQL
first, then its COMMIT record is written, as a member does; a backout
writes a COMPENSATION per get, then UOW_BACKOUT. Tests only: not a second
member."""

from __future__ import annotations

import itertools
import random
import time
from pathlib import Path

import psycopg

from harbormq.log import archive
from harbormq.log.reader import read_header
from harbormq.log.records import (
    AUTO_COMMIT,
    Compensation,
    LogRecord,
    Message,
    MessageRef,
    RecordType,
    SharedChange,
)
from harbormq.qsg import group as qgroup
from harbormq.qsg.structure import StructureStore
from support.pipeline_logbuilder import LogBuilder

T = RecordType
_ids = itertools.count(1)
#: the shared queues the random work uses
QUEUES = ("SQ1", "SQ2")


class LogMember:
    """One member: its structure store connection and its log."""

    def __init__(self, conninfo: str, name: str, number: int, log_dir: Path, pages: int = 16):
        self.name = name
        self.number = number
        self.store = StructureStore(conninfo, name)
        self.log = LogBuilder(log_dir, name, pages=pages, start_ns=time.time_ns())
        self.log_dir = Path(log_dir)
        #: uow -> [(SHARED_GET's LSN, message)] of its gets (a backout compensates them)
        self.gets: dict[int, list[tuple[int, Message]]] = {}
        self.uow_ids = itertools.count(1)
        #: units of work begun and not yet decided
        self.open: set[int] = set()

    def new_uow(self) -> int:
        return next(self.uow_ids)

    def _record(self, rtype, queue: str, change: SharedChange, uow: int | None) -> int:
        if uow is None:
            return self.log.append(LogRecord(rtype, object_name=queue, payload=change.encode(),
                                             flags=AUTO_COMMIT))
        self.open.add(uow)
        return self.log._uow_rec(rtype, uow, queue, 0, change.encode())

    def put(self, structure: str, queue: str, body: bytes, uow: int | None = None,
            priority: int = 5) -> int:
        msg = Message(body=body, msg_id=f"m{next(_ids):023d}".encode(), priority=priority,
                      persistent=True, put_time_ns=time.time_ns())
        done = self.store.put(structure, queue, msg, uow)
        self._record(T.SHARED_PUT, queue, SharedChange.put(done.stamp, self.number, structure,
                                                           done.msg), uow)
        return done.msg.seq

    def get(self, structure: str, queue: str, uow: int | None = None) -> Message | None:
        got = self.store.get(queue, uow)
        if got is None:
            return None
        lsn = self._record(T.SHARED_GET, queue, SharedChange.get(
            got.stamp, self.number, structure, MessageRef.of(got.msg)), uow)
        if uow is not None:
            self.gets.setdefault(uow, []).append((lsn, got.msg))
        return got.msg

    def commit(self, uow: int) -> None:
        if uow in self.open:
            self.store.commit(uow)
            self.log.commit(uow)
            self.open.discard(uow)
        self.gets.pop(uow, None)

    def commit_open(self) -> None:
        """Commit every unit of work still open (prepared ones too)."""
        for uow in sorted(self.open):
            self.commit(uow)

    def prepare(self, uow: int) -> None:
        self.store.prepare(uow)
        self.log.prepare(uow)

    def backout(self, uow: int) -> None:
        if uow not in self.open:
            return
        self.open.discard(uow)
        for lsn, msg in reversed(self.gets.pop(uow, [])):
            comp = Compensation(T.SHARED_GET, lsn, 0, MessageRef.of(msg), msg.backout_count + 1)
            self.log._uow_rec(T.COMPENSATION, uow, "", 0, comp.encode())
        self.store.backout(uow)
        self.log.backout(uow)

    def flush(self) -> None:
        """The log's extents on disk as they are now."""
        self.log.close()

    def close(self) -> None:
        self.flush()
        self.store.close()


class BuilderLog:
    """A member's log as a backup writes into it (structure_recovery.BackupLog)."""

    def __init__(self, member: LogMember):
        self.member = member
        self.name = member.name

    def append_record(self, rtype: RecordType, *, name: str = "", payload: bytes = b"") -> int:
        return self.member.log.append(LogRecord(rtype, object_name=name, payload=payload))

    async def force(self) -> None:
        self.member.flush()


def load(members: list[LogMember], rng: random.Random, rounds: int,
         structure: str = "APP1") -> dict:
    """Random work on the structure from every member; some units of work
    are left open (returned, uow -> member) for the test to decide."""
    open_uows = {}
    for i in range(rounds):
        m = rng.choice(members)
        q = rng.choice(QUEUES)
        kind = rng.random()
        if kind < 0.35:
            m.put(structure, q, f"{m.name}-{i}".encode() * rng.randint(1, 20))
        elif kind < 0.5:
            m.get(structure, q)
        else:
            uow = m.new_uow()
            for j in range(rng.randint(1, 4)):
                if rng.random() < 0.6:
                    m.put(structure, q, f"{m.name}-{i}-{j}".encode(), uow)
                else:
                    m.get(structure, q, uow)
            end = rng.random()
            if end < 0.6:
                m.commit(uow)
            elif end < 0.85:
                m.backout(uow)
            else:
                open_uows[(m.name, uow)] = m
    # the other structure too: a recovery of APP1 must leave it alone
    members[0].put("APP2", "OTHER", b"other structure")
    return open_uows


def rows(conninfo: str, structure: str = "APP1") -> dict:
    with psycopg.connect(conninfo) as conn:
        return {r[0]: r[1:] for r in conn.execute(
            "SELECT msg_key, queue, state, owner, uow, backout_count, message "
            "FROM hmq_messages WHERE structure = %s", (structure,))}


def log_group(conninfo: str, logs_dir: Path, app1_recauto: str = "NO", pages: int = 16
              ) -> list[LogMember]:
    """Members QM1..QM3 of group QSG1 with their logs under ``logs_dir``, and
    two structures: APP1 (RECAUTO as given) and APP2 (RECAUTO(NO))."""
    made = []
    for name in ("QM1", "QM2", "QM3"):
        m = qgroup.join(conninfo, "QSG1", name)
        made.append(LogMember(conninfo, name, m.number, Path(logs_dir) / name, pages))
    with psycopg.connect(conninfo, autocommit=True) as conn:
        qgroup.define_structure(conn, "APP1", {"RECAUTO": app1_recauto})
        qgroup.define_structure(conn, "APP2", {"RECAUTO": "NO"})
    return made


def archive_all(member: LogMember, dest: Path) -> list:
    """The member's whole log into its archive (the newest extent closed
    first); returns the archived extents' headers."""
    member.log.switch()
    member.flush()
    files = sorted(member.log_dir.glob("S*.LOG"))
    headers = [read_header(p) for p in files]
    for path, h, nxt in zip(files, headers, headers[1:], strict=False):
        archive.archive_extent(path, h.extent_number, h.first_lsn, nxt.first_lsn, b"{}",
                               [dest], member.name)
    return headers[:-1]
