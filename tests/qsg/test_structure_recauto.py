"""RECAUTO(YES) (qsg/auto_recovery.py): a structure that fails is recovered by
the surviving members by themselves, by one of them (the recovery's lock),
exactly as RECOVER CFSTRUCT would; a RECAUTO(NO) structure waits for the
operator; a member whose log is missing is said once and nothing changes."""

from __future__ import annotations

import asyncio
import random
import shutil
import time

import psycopg
import pytest
from support.qsg_logs import BuilderLog, load, log_group, rows

from harbormq.qsg import structure_recovery as sr
from harbormq.qsg.auto_recovery import AutoRecovery
from harbormq.qsg.merge import MemberLog


@pytest.fixture
def members(qsg_db, tmp_path):
    made = log_group(qsg_db, tmp_path / "logs", app1_recauto="YES")
    yield made
    for m in made:
        m.store.close()


def status(conninfo: str, name: str) -> str:
    with psycopg.connect(conninfo) as conn:
        return conn.execute("SELECT status FROM hmq_structures WHERE name = %s",
                            (name,)).fetchone()[0]


def test_failed_recauto_structure_is_recovered_by_one_survivor(qsg_db, members, tmp_path):
    load(members, random.Random(2), 60)
    log = BuilderLog(members[0])
    asyncio.run(sr.backup_structure(log, log.force, qsg_db, "APP1"))
    load(members, random.Random(3), 60)
    for m in members:
        m.commit_open()
        m.flush()
    expected = rows(qsg_db)
    logs = {m.name: MemberLog(m.name, m.log_dir) for m in members}
    said = []
    watchers = [AutoRecovery(qsg_db, name, None, tmp_path / "scratch" / name,
                             lambda mid, text: said.append((mid, text)), interval=0.2, logs=logs)
                for name in ("QM2", "QM3")]
    for w in watchers:
        w.start()
    try:
        with sr.connect(qsg_db) as conn:
            sr.fail_structure(conn, "APP1")
            sr.fail_structure(conn, "APP2")
        deadline = time.monotonic() + 60
        while status(qsg_db, "APP1") != "ACTIVE":
            assert time.monotonic() < deadline, said
            time.sleep(0.1)
        # the one that recovered it records it once its recovery returns
        while sum(len(w.recovered) for w in watchers) == 0:
            assert time.monotonic() < deadline, said
            time.sleep(0.05)
        time.sleep(0.5)                                            # (a second would show now)
        assert rows(qsg_db) == expected
        assert sum(len(w.recovered) for w in watchers) == 1        # one member did it
        assert status(qsg_db, "APP2") == "FAILED"                  # RECAUTO(NO) waits
        assert any(mid == "HMQ5324I" and "automatically" in text for mid, text in said)
    finally:
        for w in watchers:
            w.stop()


def test_a_missing_log_is_said_once_and_nothing_changes(qsg_db, members, tmp_path):
    load(members, random.Random(5), 30)
    for m in members:
        m.flush()
    shutil.rmtree(members[2].log_dir)
    logs = {m.name: MemberLog(m.name, m.log_dir) for m in members}
    said = []
    w = AutoRecovery(qsg_db, "QM1", None, tmp_path / "scratch",
                     lambda mid, text: said.append(mid), logs=logs)
    with sr.connect(qsg_db) as conn:
        sr.fail_structure(conn, "APP1")
    assert w.look() == [] and w.look() == []
    assert said == ["HMQ5325E"]
    assert status(qsg_db, "APP1") == "FAILED"
