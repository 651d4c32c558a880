"""The private PostgreSQL cluster the group's tests run on: it takes
connections, and what was committed survives a kill -9 and a restart on the
same data directory."""

from __future__ import annotations

import psycopg


def test_a_database_per_test_is_empty_and_usable(qsg_db):
    with psycopg.connect(qsg_db, autocommit=True) as conn:
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
        assert tables.fetchone()[0] == 0
        conn.execute("CREATE TABLE t (a int)")


def test_committed_rows_survive_kill_and_restart(private_postgres):
    pg = private_postgres
    conninfo = pg.create_database("k")
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (a int)")
        conn.execute("INSERT INTO t VALUES (1), (2)")
    pg.kill()
    assert not pg.running()
    try:
        psycopg.connect(conninfo, connect_timeout=2).close()
        reached = True
    except psycopg.OperationalError:
        reached = False
    assert not reached
    pg.start()
    with psycopg.connect(conninfo) as conn:
        assert conn.execute("SELECT a FROM t ORDER BY a").fetchall() == [(1,), (2,)]
