"""The group in PostgreSQL: its tables created by the first member, members
joining and leaving, the group deleted, its structures (DEFINE, ALTER,
DELETE, DISPLAY CFSTRUCT) and its shared definitions (QSGDISP(GROUP) and
QSGDISP(SHARED)), as MQ keeps them in DB2 (docs/qsg.md).

Every function takes a conninfo or a connection and changes nothing when it
refuses: a database of another group, a member name taken, a structure in
use, a database that cannot be reached (``GroupDatabaseError``).

Not here: messages (``structure.py``), a running member's session and its
peers (``member.py``, ``peers.py``)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import psycopg

from .errors import CFStructError, CFStructInUse, GroupDatabaseError, GroupError
from .schema import DEFINITIONS_CHANNEL, SCHEMA_V1, SCHEMA_VERSION, SEQUENCES, TABLES
from .structure import redact

#: the first key of every advisory lock the group takes ('HMQ'); the second is
#: a member's number (its liveness) or 0 (the schema's creation)
LOCK_CLASS = 0x484D51
#: a group name as MQ allows it (1 to 4 characters on z/OS; longer here)
MAX_GROUP_NAME = 48
#: structure names: MQ's 1 to 12 characters, a letter first
MAX_STRUCTURE_NAME = 12


@dataclass(slots=True)
class Membership:
    group: str
    member: str
    number: int


def open_database(conninfo: str) -> psycopg.Connection:
    """An autocommit connection to the group's database, or GroupDatabaseError
    naming what failed (the password left out)."""
    try:
        return psycopg.connect(conninfo, autocommit=True, application_name="harbormq-admin")
    except psycopg.Error as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise GroupDatabaseError(f"cannot connect to the group's database "
                                 f"'{redact(conninfo)}': {first}",
                                 hint="check --qsg-db (a libpq conninfo or URI) and that "
                                      "PostgreSQL is running") from e


def schema_state(conn: psycopg.Connection) -> tuple[int | None, str | None]:
    """(schema version, group name) of the database, (None, None) when empty."""
    exists = conn.execute("SELECT to_regclass('hmq_schema') IS NOT NULL").fetchone()[0]
    if not exists:
        return None, None
    version = conn.execute("SELECT max(version) FROM hmq_schema").fetchone()[0]
    row = conn.execute("SELECT name FROM hmq_group").fetchone()
    return version, (row[0] if row else None)


def check_group(conn: psycopg.Connection, group: str) -> None:
    """The database is ``group``'s, in this code's schema version."""
    version, name = schema_state(conn)
    if version is None:
        raise GroupError(f"the database holds no queue sharing group (group {group} "
                         "has not been created there)")
    if name != group:
        raise GroupError(f"the database belongs to queue sharing group {name}, not {group}",
                         hint="a queue manager joins one group only; give that group's "
                              "database or that group's name")
    if version != SCHEMA_VERSION:
        raise GroupError(f"the group's tables are at version {version}; this harbormq "
                         f"reads version {SCHEMA_VERSION}")


def check_group_name(group: str) -> None:
    if not group or len(group) > MAX_GROUP_NAME or not group.replace("_", "").isalnum():
        raise GroupError(f"group name {group!r} is not valid: 1 to {MAX_GROUP_NAME} letters, "
                         "digits or _")


def join(conninfo: str, group: str, member: str) -> Membership:
    """Join ``member`` to ``group`` in the database ``conninfo`` names; the
    first member creates the group's tables. Refused, with nothing changed,
    when the database is another group's or the name is a member already."""
    check_group_name(group)
    with open_database(conninfo) as conn:
        with conn.transaction():
            # one creator at a time: two first members racing make one group
            conn.execute("SELECT pg_advisory_xact_lock(%s, 0)", (LOCK_CLASS,))
            version, name = schema_state(conn)
            if version is None:
                for statement in SCHEMA_V1:
                    conn.execute(statement)
                conn.execute("INSERT INTO hmq_schema (version) VALUES (%s)", (SCHEMA_VERSION,))
                conn.execute("INSERT INTO hmq_group (name, created_by) VALUES (%s, %s)",
                             (group, member))
            else:
                check_group(conn, group)
            taken = conn.execute("SELECT state FROM hmq_members WHERE name = %s",
                                 (member,)).fetchone()
            if taken is not None:
                raise GroupError(f"queue manager {member} is a member of group {group} "
                                 f"already (state {taken[0]}): two members cannot have one "
                                 "name", hint="choose another queue manager name, or remove "
                                             "the old member first (harbormq qsg leave)")
            number = conn.execute("SELECT coalesce(max(number), 0) + 1 FROM hmq_members"
                                  ).fetchone()[0]
            conn.execute("INSERT INTO hmq_members (name, number) VALUES (%s, %s)",
                         (member, number))
    return Membership(group, member, number)


def members(conn: psycopg.Connection) -> list[dict]:
    rows = conn.execute("SELECT name, number, state, joined_at, started_at, heartbeat_at "
                        "FROM hmq_members ORDER BY number").fetchall()
    keys = ("name", "number", "state", "joined_at", "started_at", "heartbeat_at")
    return [dict(zip(keys, r, strict=True)) for r in rows]


def dependents(conn: psycopg.Connection, member: str) -> list[str]:
    """What keeps ``member`` in the group: messages it holds in a unit of work,
    outcomes its restart has not read, its being active."""
    out = []
    row = conn.execute("SELECT state FROM hmq_members WHERE name = %s", (member,)).fetchone()
    if row is None:
        raise GroupError(f"queue manager {member} is not a member of the group")
    if row[0] == "ACTIVE":
        out.append(f"{member} is running (stop it first)")
    held = conn.execute("SELECT count(*) FROM hmq_messages WHERE owner = %s",
                        (member,)).fetchone()[0]
    if held:
        out.append(f"{held} shared messages in its units of work (in doubt or in flight)")
    owed = conn.execute("SELECT count(*) FROM hmq_uow_outcomes WHERE member = %s",
                        (member,)).fetchone()[0]
    if owed:
        out.append(f"{owed} unit-of-work outcomes its restart has not yet written to its log")
    return out


def leave(conninfo: str, group: str, member: str) -> None:
    """Remove ``member`` from the group, when nothing depends on it."""
    with open_database(conninfo) as conn, conn.transaction():
        check_group(conn, group)
        conn.execute("SELECT pg_advisory_xact_lock(%s, 0)", (LOCK_CLASS,))
        blocking = dependents(conn, member)
        if blocking:
            raise GroupError(f"queue manager {member} cannot leave group {group}: "
                             + "; ".join(blocking))
        conn.execute("DELETE FROM hmq_members WHERE name = %s", (member,))


def delete_group(conninfo: str, group: str) -> None:
    """Drop the group's tables, when it has no member and no message left."""
    with open_database(conninfo) as conn, conn.transaction():
        check_group(conn, group)
        conn.execute("SELECT pg_advisory_xact_lock(%s, 0)", (LOCK_CLASS,))
        names = [m["name"] for m in members(conn)]
        if names:
            raise GroupError(f"group {group} still has members: {', '.join(names)}",
                             hint="each member leaves first")
        left = conn.execute("SELECT count(*) FROM hmq_messages").fetchone()[0]
        if left:
            raise GroupError(f"group {group} still holds {left} shared messages")
        for table in TABLES:
            conn.execute(f"DROP TABLE IF EXISTS {table}")   # hmq_cfbackups: made by a first backup
        for seq in SEQUENCES:
            conn.execute(f"DROP SEQUENCE {seq}")


# -- structures (CFSTRUCT) ---------------------------------------------------------

STRUCTURE_DEFAULTS = {"CFLEVEL": 5, "RECOVER": "YES", "RECAUTO": "YES", "DESCR": ""}


def check_structure_name(name: str) -> None:
    if not (1 <= len(name) <= MAX_STRUCTURE_NAME) or not name[0].isalpha() or \
            not name.isalnum():
        raise CFStructError(f"structure name {name!r} is not valid: 1 to "
                            f"{MAX_STRUCTURE_NAME} letters and digits, a letter first")


def _structure_row(attrs: dict) -> tuple:
    level = int(attrs["CFLEVEL"])
    if level not in (1, 2, 3, 4, 5):
        raise CFStructError(f"CFLEVEL({level}) is not valid: 1 to 5")
    for key in ("RECOVER", "RECAUTO"):
        if attrs[key] not in ("YES", "NO"):
            raise CFStructError(f"{key}({attrs[key]}) is not valid: YES or NO")
    if level < 3 and attrs["RECOVER"] == "YES":
        raise CFStructError(f"RECOVER(YES) needs CFLEVEL(3) or more, not CFLEVEL({level})")
    return level, attrs["RECOVER"] == "YES", attrs["RECAUTO"] == "YES", attrs["DESCR"]


def define_structure(conn: psycopg.Connection, name: str, attrs: dict, *,
                     replace: bool = False) -> dict:
    """DEFINE CFSTRUCT: a structure of the group (MQ's defaults where not given)."""
    check_structure_name(name)
    full = {**STRUCTURE_DEFAULTS, **attrs}
    level, recover, recauto, descr = _structure_row(full)
    with conn.transaction():
        exists = conn.execute("SELECT 1 FROM hmq_structures WHERE name = %s FOR UPDATE",
                              (name,)).fetchone()
        if exists and not replace:
            raise CFStructError(f"structure {name} is defined already (DEFINE ... REPLACE "
                                "changes it)", structure=name)
        conn.execute(
            "INSERT INTO hmq_structures (name, cflevel, recover, recauto, descr) "
            "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (name) DO UPDATE SET "
            "cflevel = EXCLUDED.cflevel, recover = EXCLUDED.recover, recauto = "
            "EXCLUDED.recauto, descr = EXCLUDED.descr, altered_at = now()",
            (name, level, recover, recauto, descr))
        conn.execute("SELECT pg_notify(%s, %s)", (DEFINITIONS_CHANNEL, f"CFSTRUCT {name}"))
    return structure(conn, name)


def alter_structure(conn: psycopg.Connection, name: str, attrs: dict) -> dict:
    """ALTER CFSTRUCT: change the attributes given. RECOVER(NO) is refused
    while the structure holds persistent messages (as MQ refuses it)."""
    current = structure(conn, name)
    full = {k: current[k] for k in STRUCTURE_DEFAULTS} | attrs
    level, recover, recauto, descr = _structure_row(full)
    with conn.transaction():
        if not recover:
            n = conn.execute("SELECT count(*) FROM hmq_messages WHERE structure = %s AND "
                             "persistent", (name,)).fetchone()[0]
            if n:
                raise CFStructInUse(f"structure {name} holds {n} persistent messages: "
                                    "RECOVER(NO) is refused (MQRC 2346 CF_STRUC_IN_USE)",
                                    structure=name)
        conn.execute("UPDATE hmq_structures SET cflevel = %s, recover = %s, recauto = %s, "
                     "descr = %s, altered_at = now() WHERE name = %s",
                     (level, recover, recauto, descr, name))
        conn.execute("SELECT pg_notify(%s, %s)", (DEFINITIONS_CHANNEL, f"CFSTRUCT {name}"))
    return structure(conn, name)


def delete_structure(conn: psycopg.Connection, name: str) -> None:
    """DELETE CFSTRUCT: refused while a shared queue names it or it holds messages."""
    structure(conn, name)
    with conn.transaction():
        queues = [r[0] for r in conn.execute(
            "SELECT name FROM hmq_definitions WHERE qsgdisp = 'SHARED' AND "
            "attrs->>'CFSTRUCT' = %s ORDER BY name", (name,)).fetchall()]
        if queues:
            raise CFStructInUse(f"structure {name} is used by shared queues "
                                f"{', '.join(queues)} (MQRC 2346 CF_STRUC_IN_USE)",
                                structure=name)
        n = conn.execute("SELECT count(*) FROM hmq_messages WHERE structure = %s",
                         (name,)).fetchone()[0]
        if n:
            raise CFStructInUse(f"structure {name} holds {n} messages (MQRC 2346 "
                                "CF_STRUC_IN_USE)", structure=name)
        conn.execute("DELETE FROM hmq_structures WHERE name = %s", (name,))
        conn.execute("SELECT pg_notify(%s, %s)", (DEFINITIONS_CHANNEL, f"CFSTRUCT {name}"))


def structure(conn: psycopg.Connection, name: str) -> dict:
    """One structure as DISPLAY CFSTRUCT shows it; CFStructError if unknown."""
    found = structures(conn, name)
    if not found:
        raise CFStructError(f"structure {name} is not defined in the group "
                            "(MQRC 2349 CF_STRUC_ERROR)", structure=name)
    return found[0]


def structures(conn: psycopg.Connection, name: str | None = None) -> list[dict]:
    sql = ("SELECT name, cflevel, recover, recauto, status, descr, created_at, altered_at "
           "FROM hmq_structures")
    params: tuple = ()
    if name is not None:
        sql += " WHERE name = %s"
        params = (name,)
    out = []
    for n, level, rec, auto, status, descr, created, altered in conn.execute(
            sql + " ORDER BY name", params).fetchall():
        out.append({"CFSTRUCT": n, "CFLEVEL": level, "RECOVER": "YES" if rec else "NO",
                    "RECAUTO": "YES" if auto else "NO", "STATUS": status, "DESCR": descr,
                    "ALTDATE": altered.date().isoformat(),
                    "ALTTIME": altered.time().isoformat(timespec="seconds"),
                    "CRDATE": created.date().isoformat()})
    return out


# -- shared definitions (QSGDISP(GROUP), QSGDISP(SHARED)) -----------------------------

def put_definition(conn: psycopg.Connection, objtype: str, name: str, qsgdisp: str,
                   attrs: dict, *, replace: bool = False) -> int:
    """Store a group or shared definition; returns its new version. A shared
    queue's CFSTRUCT must be a defined structure."""
    if qsgdisp not in ("GROUP", "SHARED"):
        raise GroupError(f"QSGDISP({qsgdisp}) is not kept in the group")
    with conn.transaction():
        if qsgdisp == "SHARED":
            cf = attrs.get("CFSTRUCT") or ""
            if not cf:
                raise CFStructError(f"shared queue {name} needs CFSTRUCT(name)")
            structure(conn, cf)
        exists = conn.execute("SELECT qsgdisp FROM hmq_definitions WHERE objtype = %s AND "
                              "name = %s FOR UPDATE", (objtype, name)).fetchone()
        if exists and not replace:
            raise GroupError(f"{objtype}({name}) QSGDISP({exists[0]}) is defined in the "
                             "group already")
        version = conn.execute(
            "INSERT INTO hmq_definitions (objtype, name, qsgdisp, attrs, version) "
            "VALUES (%s, %s, %s, %s, nextval('hmq_definition_version')) "
            "ON CONFLICT (objtype, name) DO UPDATE SET qsgdisp = EXCLUDED.qsgdisp, "
            "attrs = EXCLUDED.attrs, version = EXCLUDED.version RETURNING version",
            (objtype, name, qsgdisp, json.dumps(attrs))).fetchone()[0]
        conn.execute("SELECT pg_notify(%s, %s)", (DEFINITIONS_CHANNEL, f"{objtype} {name}"))
    return version


def delete_definition(conn: psycopg.Connection, objtype: str, name: str) -> None:
    """Delete a group or shared definition; a shared queue only when empty (MQ
    refuses to delete a shared queue that holds messages: MQRC 2055)."""
    with conn.transaction():
        row = conn.execute("SELECT qsgdisp FROM hmq_definitions WHERE objtype = %s AND "
                           "name = %s FOR UPDATE", (objtype, name)).fetchone()
        if row is None:
            raise GroupError(f"{objtype}({name}) is not defined in the group")
        if row[0] == "SHARED":
            n = conn.execute("SELECT count(*) FROM hmq_messages WHERE queue = %s",
                             (name,)).fetchone()[0]
            if n:
                raise GroupError(f"shared queue {name} holds {n} messages (MQRC 2055 "
                                 "Q_NOT_EMPTY)")
        conn.execute("DELETE FROM hmq_definitions WHERE objtype = %s AND name = %s",
                     (objtype, name))
        conn.execute("SELECT pg_notify(%s, %s)", (DEFINITIONS_CHANNEL, f"{objtype} {name}"))


def definitions(conn: psycopg.Connection, qsgdisp: str | None = None) -> list[dict]:
    """The group's definitions: {type, name, qsgdisp, attrs, version}."""
    sql = "SELECT objtype, name, qsgdisp, attrs, version FROM hmq_definitions"
    params: tuple = ()
    if qsgdisp is not None:
        sql += " WHERE qsgdisp = %s"
        params = (qsgdisp,)
    return [{"type": t, "name": n, "qsgdisp": d, "attrs": a, "version": v}
            for t, n, d, a, v in conn.execute(sql + " ORDER BY objtype, name",
                                              params).fetchall()]
