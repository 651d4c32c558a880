"""The group's tables in PostgreSQL, versioned: created by the first member
that joins, checked by every member that connects (docs/qsg.md, "The
tables").

What the tables hold: the group (one row), its members, its structures (MQ's
CF structures), its shared definitions (QSGDISP(GROUP) and QSGDISP(SHARED),
MQ's DB2 repository), the messages of its shared queues with their unit of
work state, and the outcomes of the members' units of work that PostgreSQL
decided. Two sequences: ``hmq_stamp``, the group-wide stamp of every change
to a shared message (the order the members' logs merge in), and
``hmq_msg_key``, a message's key in the group.

Not here: the statements that use the tables (``structure.py``,
``group.py``)."""

from __future__ import annotations

#: the version this code writes and reads; a database of another is refused
SCHEMA_VERSION = 1

#: the tables of version 1, created in one transaction by the first member
SCHEMA_V1 = [
    """CREATE TABLE hmq_schema (
        version integer NOT NULL
    )""",
    # exactly one row: the group this database belongs to
    """CREATE TABLE hmq_group (
        name text PRIMARY KEY,
        created_at timestamptz NOT NULL DEFAULT now(),
        created_by text NOT NULL
    )""",
    # state: ACTIVE (connected, holding its advisory lock), STOPPED (ended
    # normally), FAILED (peer recovery ran for it), and until it restarts
    """CREATE TABLE hmq_members (
        name text PRIMARY KEY,
        number integer NOT NULL UNIQUE,
        state text NOT NULL DEFAULT 'STOPPED',
        joined_at timestamptz NOT NULL DEFAULT now(),
        started_at timestamptz,
        heartbeat_at timestamptz,
        backend_pid integer,
        incarnation bigint NOT NULL DEFAULT 0
    )""",
    # status: ACTIVE, FAILED (RESET CFSTRUCT ACTION(FAIL), lost), RECOVERING
    """CREATE TABLE hmq_structures (
        name text PRIMARY KEY,
        cflevel integer NOT NULL DEFAULT 5,
        recover boolean NOT NULL DEFAULT true,
        recauto boolean NOT NULL DEFAULT true,
        status text NOT NULL DEFAULT 'ACTIVE',
        descr text NOT NULL DEFAULT '',
        created_at timestamptz NOT NULL DEFAULT now(),
        altered_at timestamptz NOT NULL DEFAULT now(),
        failed_at timestamptz
    )""",
    # QSGDISP(GROUP) objects (copied to every member as QSGDISP(COPY)) and
    # QSGDISP(SHARED) queues; version grows with every change (a member's
    # copy is refreshed when it is behind)
    """CREATE TABLE hmq_definitions (
        objtype text NOT NULL,
        name text NOT NULL,
        qsgdisp text NOT NULL,
        attrs jsonb NOT NULL,
        version bigint NOT NULL,
        PRIMARY KEY (objtype, name)
    )""",
    "CREATE SEQUENCE hmq_definition_version",
    "CREATE SEQUENCE hmq_stamp",
    "CREATE SEQUENCE hmq_msg_key",
    # one row per message of a shared queue. state:
    #   PUT       put under a unit of work not yet decided (invisible)
    #   AVAILABLE committed, gettable
    #   GOT       got under a unit of work not yet decided (locked)
    #   PREP_PUT, PREP_GOT  the same, prepared: decided by the owner's log
    #             (prepare_lsn: the owner's log end when they were prepared)
    # owner, uow: the member and its unit of work that holds it (not AVAILABLE)
    """CREATE TABLE hmq_messages (
        msg_key bigint PRIMARY KEY,
        structure text NOT NULL REFERENCES hmq_structures (name),
        queue text NOT NULL,
        priority smallint NOT NULL,
        persistent boolean NOT NULL,
        state text NOT NULL,
        owner text,
        uow bigint,
        put_stamp bigint NOT NULL,
        get_stamp bigint,
        expiry_ns bigint NOT NULL DEFAULT 0,
        msg_id bytea NOT NULL,
        correl_id bytea NOT NULL,
        backout_count integer NOT NULL DEFAULT 0,
        -- PREP_ rows: where the owner's log was when they were prepared (restart
        -- tells a unit committed long ago from one that never reached its disk)
        prepare_lsn bigint,
        message bytea NOT NULL
    )""",
    # the get path: the first available message of a queue by priority then FIFO
    """CREATE INDEX hmq_messages_available ON hmq_messages (queue, priority DESC, msg_key)
        WHERE state = 'AVAILABLE'""",
    "CREATE INDEX hmq_messages_owner ON hmq_messages (owner, uow) WHERE owner IS NOT NULL",
    # a unit of work PostgreSQL decided (shared queues only), or that a peer
    # backed out for a failed member: read by the member's restart, which
    # writes the outcome into its log, then deletes the row
    """CREATE TABLE hmq_uow_outcomes (
        member text NOT NULL,
        uow bigint NOT NULL,
        outcome text NOT NULL,
        stamp bigint NOT NULL,
        decided_by text NOT NULL,
        decided_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (member, uow)
    )""",
]

#: every table of the schema, in the order a group's deletion drops them
TABLES = ["hmq_cfbackups", "hmq_uow_outcomes", "hmq_messages", "hmq_definitions", "hmq_structures",
          "hmq_members", "hmq_group", "hmq_schema"]
SEQUENCES = ["hmq_stamp", "hmq_msg_key", "hmq_definition_version"]

#: the NOTIFY channel a committed shared message is announced on (payload: queue)
AVAILABLE_CHANNEL = "hmq_available"
#: the NOTIFY channel a structure's or a definition's change is announced on
DEFINITIONS_CHANNEL = "hmq_definitions"
