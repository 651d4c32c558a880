#!/usr/bin/env python3
"""RECOVER CFSTRUCT: how fast a structure is rebuilt from the group's log (issue 32).

1. A private PostgreSQL 15 cluster (tests/support/postgres.py), a group of
   --members members and one structure.
2. Each member's log is written with the codec (tests/support/pipeline_logbuilder.py,
   extents of 64 MiB): shared traffic as members write it, SHARED_PUT and
   SHARED_GET records with a group-wide stamp in units of work of --batch
   messages, each committed; the members take turns, and each gets messages
   another member put, keeping about --backlog messages on the structure,
   until the group's log holds --log-mb MB. A backup is taken (into the first
   member's log, recorded in PostgreSQL) after the first tenth.
3. The structure is failed (RESET CFSTRUCT ACTION(FAIL)) and recovered:
   the plan, then the backup read, every member's log merged by stamp
   through the commit rule, the structure written back. Timed: the plan,
   the recovery, the MB of log merged per second. The messages recovered are
   checked against the backlog the writer left.

Prints one JSON object on stdout; progress on stderr.

    .venv/bin/python benchmarks/bench_cfstruct_recover.py            # quick: 64 MB of group log
    .venv/bin/python benchmarks/bench_cfstruct_recover.py --full     # 1024 MB (1 GB)
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

from _common import make_progress, peak_rss_mb  # noqa: I001

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import psycopg  # noqa: E402
from support.pipeline_logbuilder import LogBuilder  # noqa: E402
from support.postgres import PostgresCluster  # noqa: E402

from harbormq.log.records import (  # noqa: E402
    LogRecord,
    Message,
    MessageRef,
    RecordType,
    SharedChange,
    encode_json,
)
from harbormq.qsg import group as qgroup  # noqa: E402
from harbormq.qsg import structure_recovery as sr  # noqa: E402
from harbormq.qsg.merge import MemberLog  # noqa: E402

T = RecordType
progress = make_progress("bench_cfstruct_recover")
PAGES = 16384            # 64 MiB extents


def write_group_log(root: Path, names: list[str], log_mb: int, body: int, batch: int,
                    backlog: int, conn) -> dict:
    """The members' logs, and the backup after the first tenth. Returns what
    the structure holds at the end (keys) and the facts of the writing."""
    logs = {n: LogBuilder(root / n, n, pages=PAGES, start_ns=time.time_ns()) for n in names}
    uow_ids = {n: 0 for n in names}
    stamp = key = 0
    on_structure: deque[tuple[int, int, str]] = deque()   # (key, priority, putter)
    payload = b"x" * body
    target = log_mb << 20
    written = 0
    backup_done = False
    turn = 0
    while written < target:
        name = names[turn % len(names)]
        turn += 1
        log = logs[name]
        number = names.index(name) + 1
        uow_ids[name] += 1
        uow = uow_ids[name]
        before = log.lsn
        if len(on_structure) < backlog or turn % 2:
            for _ in range(batch):
                stamp += 1
                key += 1
                msg = Message(body=payload, msg_id=key.to_bytes(24, "big"), priority=5,
                              persistent=True, put_time_ns=log.now, seq=key)
                change = SharedChange.put(stamp, number, "APP1", msg)
                log._uow_rec(T.SHARED_PUT, uow, "SQ", 0, change.encode())
                on_structure.append((key, 5, name))
        else:
            for _ in range(batch):
                # a message another member put, in FIFO order
                k, prio, _putter = on_structure.popleft()
                stamp += 1
                change = SharedChange.get(stamp, number, "APP1",
                                          MessageRef(k, prio, k.to_bytes(24, "big")))
                log._uow_rec(T.SHARED_GET, uow, "SQ", 0, change.encode())
        log.commit(uow)
        written += log.lsn - before if log.lsn > before else 0
        if not backup_done and written >= target // 10:
            backup_done = True
            write_backup(logs[names[0]], names[0], conn, on_structure, payload, stamp)
    for log in logs.values():
        log.close()
    return {"keys": {k for k, _p, _n in on_structure}, "stamps": stamp,
            "bytes": sum(log.lsn for log in logs.values())}


def write_backup(log: LogBuilder, member: str, conn, on_structure, payload, stamp) -> None:
    """BACKUP CFSTRUCT as a member writes it (its records, its row in PostgreSQL)."""
    rows = []
    for k, _prio, _n in on_structure:
        m = Message(body=payload, msg_id=k.to_bytes(24, "big"), priority=5, persistent=True,
                    seq=k)
        rows.append(sr.BackupRow(k, "SQ", k, 0, sr.stored_encoding(m)))
    backup_id = stamp + 1
    begin = log.append(LogRecord(T.CFSTRUCT_BACKUP_BEGIN, object_name="APP1",
                                 payload=encode_json({"backup_id": backup_id})))
    for part in sr.chunks(rows):
        log.append(LogRecord(T.CFSTRUCT_BACKUP_CHUNK, object_name="APP1",
                             payload=sr.encode_chunk(backup_id, part)))
    end = log.append(LogRecord(T.CFSTRUCT_BACKUP_END, object_name="APP1", payload=encode_json(
        {"backup_id": backup_id, "messages": len(rows), "bytes": 0})))
    conn.execute(sr.BACKUPS_DDL)
    conn.execute(
        "INSERT INTO hmq_cfbackups (structure, backup_id, member, started_at, ended_at, "
        "start_lsn, end_lsn, replay_stamp, snapshot_stamp, messages, bytes, exclint) "
        "VALUES ('APP1', %s, %s, now(), now(), %s, %s, %s, %s, %s, 0, 0)",
        (backup_id, member, begin, end + 1, stamp + 1, stamp + 1, len(rows)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log-mb", type=int, default=64, help="MB of group log (all members)")
    ap.add_argument("--full", action="store_true", help="1024 MB of group log")
    ap.add_argument("--members", type=int, default=3)
    ap.add_argument("--body", type=int, default=1024, help="message body bytes")
    ap.add_argument("--batch", type=int, default=10, help="messages per unit of work")
    ap.add_argument("--backlog", type=int, default=20_000, help="messages kept on the structure")
    args = ap.parse_args()
    log_mb = 1024 if args.full else args.log_mb
    root = Path(tempfile.mkdtemp(prefix="bench-cfstruct-"))
    cluster = PostgresCluster.create()
    try:
        conninfo = cluster.create_database("bench")
        names = [f"QM{i + 1}" for i in range(args.members)]
        for n in names:
            qgroup.join(conninfo, "BENCHQSG", n)
        with psycopg.connect(conninfo, autocommit=True) as conn:
            qgroup.define_structure(conn, "APP1", {"RECAUTO": "NO"})
            progress(f"writing {log_mb} MB of group log over {len(names)} members")
            t0 = time.perf_counter()
            facts = write_group_log(root / "logs", names, log_mb, args.body, args.batch,
                                    args.backlog, conn)
            write_s = time.perf_counter() - t0
            progress(f"written in {write_s:.1f} s; {len(facts['keys'])} messages left")
        logs = {n: MemberLog(n, root / "logs" / n) for n in names}
        with sr.connect(conninfo) as conn:
            sr.fail_structure(conn, "APP1")
            t0 = time.perf_counter()
            plan = sr.plan_recovery(conn, "APP1", "NORMAL", logs)
            plan_s = time.perf_counter() - t0
            for line in plan.lines():
                progress(line)
            t0 = time.perf_counter()
            result = sr.recover_structure(
                conn, plan, root / "scratch", logs=logs,
                progress=lambda m, d, t: progress(f"{m}: {d / 1e6:.0f} of {t / 1e6:.0f} MB"))
            recover_s = time.perf_counter() - t0
            got = {r[0] for r in conn.execute(
                "SELECT msg_key FROM hmq_messages WHERE structure = 'APP1'")}
        out = {
            "benchmark": "bench_cfstruct_recover",
            "members": len(names), "log_mb": round(facts["bytes"] / 1e6, 1),
            "records_replayed": result.records, "messages_recovered": result.messages,
            "backup_messages": result.backup_messages,
            "exact": got == facts["keys"],
            "plan_s": round(plan_s, 3), "estimate_s": plan.estimate_s,
            "recover_s": round(recover_s, 2),
            "merge_rate_mb_s": round(facts["bytes"] / 1e6 / recover_s, 1),
            "write_s": round(write_s, 1), "peak_rss_mb": peak_rss_mb(),
            "python": platform.python_version(), "cpus": __import__("os").cpu_count(),
        }
        print(json.dumps(out))
    finally:
        cluster.destroy()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
