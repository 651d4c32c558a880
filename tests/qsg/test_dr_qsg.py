"""Disaster recovery with a queue sharing group (docs/qsg.md, "Disaster
recovery with a group", the seed's scenario 4), run step by step: the
primary site's PostgreSQL and every member's log directory are lost; the
DR site has a pg_dump of the group's database taken earlier and every
member's archived log. The database is restored, the structure (stale in
the dump) is failed, and RECOVER CFSTRUCT rebuilds it from the backup and
the archived logs of all members, none of them running: exactly the
committed state the logs hold, and the group's sequences past every key."""

from __future__ import annotations

import asyncio
import random
import shutil
import subprocess

from support.postgres import PG_BIN, SUPERUSER
from support.qsg_logs import BuilderLog, archive_all, load, log_group, rows

from harbormq.log.records import Message
from harbormq.qsg import structure_recovery as sr
from harbormq.qsg.merge import MemberLog
from harbormq.qsg.structure import StructureStore


def dump(cluster, dbname: str, path) -> None:
    subprocess.run([str(PG_BIN / "pg_dump"), "-h", "127.0.0.1", "-p", str(cluster.port),
                    "-U", SUPERUSER, "-d", dbname, "-Fc", "-f", str(path)], check=True,
                   timeout=120)


def restore(conninfo_port: int, dbname: str, path) -> None:
    subprocess.run([str(PG_BIN / "pg_restore"), "-h", "127.0.0.1", "-p", str(conninfo_port),
                    "-U", SUPERUSER, "-d", dbname, str(path)], check=True, timeout=120)


def test_dr_site_recovers_the_group_from_a_database_dump_and_archived_logs(
        private_postgres, postgres, tmp_path):
    primary = private_postgres
    primary_db = primary.create_database("qsg_primary")
    members = log_group(primary_db, tmp_path / "site")
    rng = random.Random(21)
    load(members, rng, 120)
    log = BuilderLog(members[2])
    asyncio.run(sr.backup_structure(log, log.force, primary_db, "APP1"))
    load(members, rng, 60)
    dump(primary, "qsg_primary", tmp_path / "group.dump")        # the database's backup
    load(members, rng, 120)
    for m in members:
        m.commit_open()
    expected = rows(primary_db)
    dr_archive = tmp_path / "dr-site-archive"
    for m in members:
        archive_all(m, dr_archive)
        m.store.close()

    # the disaster: the primary site's database and log directories are gone
    primary.destroy()
    shutil.rmtree(tmp_path / "site")

    # 1. the group's database restored at the DR site
    dr_db = postgres.create_database("qsg_dr")
    restore(postgres.port, "qsg_dr", tmp_path / "group.dump")
    stale = rows(dr_db)
    assert stale != expected                # the dump is older than the logs
    with sr.connect(dr_db) as conn:
        # 2. no structure keeps stale messages
        sr.fail_structure(conn, "APP1")
        # 3. every member's log from the DR site's archive; 4. one recovery
        logs = {name: MemberLog(name, None, (dr_archive,)) for name in ("QM1", "QM2", "QM3")}
        plan = sr.plan_recovery(conn, "APP1", "NORMAL", logs)
        assert plan.runnable, plan.lines()
        assert all(p.to_recall for p in plan.members.values())
        sr.recover_structure(conn, plan, tmp_path / "scratch", logs=logs)
        high_key = conn.execute("SELECT max(msg_key) FROM hmq_messages").fetchone()[0]
    assert rows(dr_db) == expected
    # 5. members work on: a new message takes a key past every recovered one
    store = StructureStore(dr_db, "QM1")
    try:
        put = store.put("APP1", "SQ1", Message(body=b"after DR", msg_id=b"x" * 24,
                                               persistent=True), None)
        assert put.msg.seq > high_key
    finally:
        store.close()
