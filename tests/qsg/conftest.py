"""Fixtures of the queue sharing group's tests: one private PostgreSQL cluster
for the session (tests/support/postgres.py), a fresh database in it for each
test (``qsg_db``), and a cluster of a test's own for a test that stops or
kills PostgreSQL (``private_postgres``)."""

from __future__ import annotations

import itertools

import pytest
from support.postgres import PostgresCluster

_databases = itertools.count(1)


@pytest.fixture(scope="session")
def postgres():
    """The session's PostgreSQL cluster, started once, removed at the end."""
    cluster = PostgresCluster.create()
    yield cluster
    cluster.destroy()


@pytest.fixture
def qsg_db(postgres) -> str:
    """The conninfo of an empty database of this test's own, dropped after it."""
    name = f"qsg_{next(_databases)}"
    conninfo = postgres.create_database(name)
    yield conninfo
    postgres.drop_database(name)


@pytest.fixture
def private_postgres():
    """A cluster of this test's own, for a test that stops, kills or restarts
    PostgreSQL; removed after the test."""
    cluster = PostgresCluster.create()
    yield cluster
    cluster.destroy()
