"""The MQSC commands of structure backup and recovery in a queue sharing
group: BACKUP CFSTRUCT, RECOVER CFSTRUCT, RESET CFSTRUCT ACTION(FAIL) and
DISPLAY CFSTATUS (docs/qsg.md, "Structure backup and recovery").

``CFStructCommands`` is a base of ``commands.Executor``, whose ``core`` it
uses: the core's log takes a backup's records, the member's group
(``core.group``: its database's conninfo) reaches PostgreSQL. The work is
``qsg/structure_recovery.py``'s; the blocking reads run in a thread so the
queue manager's loop serves puts and gets meanwhile. The grammar is in
``mqsc.py``'s tables. Not here: DEFINE, ALTER, DELETE and DISPLAY CFSTRUCT
(the group's definitions).
"""

from __future__ import annotations

import asyncio
import datetime as _dt
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from ..errors import HarbormqError, InvalidAttribute
from . import mqsc
from .mqsc import Command

if TYPE_CHECKING:
    from ..core.engine import QueueManagerCore


def _recovery():
    """qsg/structure_recovery.py, imported when a structure command runs: the
    PostgreSQL driver is an optional install (the ``qsg`` extra)."""
    from ..qsg import structure_recovery
    return structure_recovery


class NotInGroup(HarbormqError):
    """A structure command on a queue manager that is no member of a group."""
    msgid = "HMQ5330E"


class GroupSettings(Protocol):
    db: str              # the group's conninfo


class GroupMember(Protocol):
    """What these commands use of the member's group (``core.group``)."""
    settings: GroupSettings


def _date_time(ts: _dt.datetime | None) -> tuple[str, str]:
    if ts is None:
        return "", ""
    ns = int(ts.timestamp() * 1e9)
    return mqsc.mq_date(ns), mqsc.mq_time(ns)


class CFStructCommands:
    """The structure backup and recovery commands of the MQSC executor."""
    core: QueueManagerCore

    def cfstruct_handlers(self) -> dict[tuple[str, str], Callable]:
        return {("BACKUP", "CFSTRUCT"): self.backup_cfstruct,
                ("RECOVER", "CFSTRUCT"): self.recover_cfstruct,
                ("RESET", "CFSTRUCT"): self.reset_cfstruct,
                ("DISPLAY", "CFSTATUS"): self.display_cfstatus}

    @property
    def group_conninfo(self) -> str:
        """The group's database, as this member reaches it."""
        group: GroupMember | None = getattr(self.core, "group", None)
        if group is None:
            raise NotInGroup(f"queue manager {self.core.name} is not a member of a queue "
                             "sharing group: structures are the group's",
                             hint="create it with --qsg and --qsg-db")
        return group.settings.db

    def _say(self, msgid: str, text: str) -> None:
        self.core.oplog.emit(msgid, text)

    # -- BACKUP CFSTRUCT -----------------------------------------------------------------

    async def backup_cfstruct(self, cmd: Command) -> list[str]:
        conninfo = self.group_conninfo
        exclint = cmd.attrs.get("EXCLINT", "0")
        if not str(exclint).isdigit():
            raise InvalidAttribute(f"EXCLINT({exclint}) is not valid: 0 to 3600 seconds")
        core = self.core

        async def force() -> None:
            await core.log.force()

        result = await _recovery().backup_structure(core, force, conninfo, cmd.name,
                                           int(exclint))
        text = (f"backup of structure {cmd.name} written to the log of {result.member} "
                f"(LSN {result.start_lsn}..{result.end_lsn}): {result.messages} messages, "
                f"{result.bytes} bytes, replay from stamp {result.replay_stamp}"
                + (f", {result.left_out} left to the logs" if result.left_out else ""))
        self._say("HMQ5320I", text)
        return [mqsc.format_message("HMQ5320I", text + ".")]

    # -- RESET CFSTRUCT ACTION(FAIL) -----------------------------------------------------

    async def reset_cfstruct(self, cmd: Command) -> list[str]:
        conninfo = self.group_conninfo
        action = cmd.attrs.get("ACTION", "").upper()
        if action != "FAIL":
            raise InvalidAttribute("RESET CFSTRUCT needs ACTION(FAIL)")
        sr = _recovery()
        gone = await asyncio.to_thread(_with_conn, conninfo,
                                       lambda c: sr.fail_structure(c, cmd.name))
        text = (f"structure {cmd.name} marked FAILED by {self.core.name}: {gone} messages "
                f"discarded; RECOVER CFSTRUCT({cmd.name}) rebuilds it")
        self._say("HMQ5321W", text)
        return [mqsc.format_message("HMQ5321W", text + ".")]

    # -- RECOVER CFSTRUCT ----------------------------------------------------------------

    async def recover_cfstruct(self, cmd: Command) -> list[str]:
        conninfo = self.group_conninfo
        rtype = cmd.attrs.get("TYPE", "NORMAL").upper()
        sr = _recovery()
        home = self.core.config.home
        scratch = self.core.config.qm_dir / "qsg-recall"
        out: list[str] = []

        def progress_lines(member: str, done: int, total: int) -> None:
            line = f"structure {cmd.name}: member {member}'s log read, {done / 1e6:.1f} of " \
                   f"{total / 1e6:.1f} MB"
            self.core.loop.call_soon_threadsafe(self._say, "HMQ5323I", line)
            out.append(mqsc.format_message("HMQ5323I", line + "."))

        def run(conn):
            logs = sr.member_logs(sr.group_members(conn), home)
            plan = sr.plan_recovery(conn, cmd.name, rtype, logs)
            text = "\n".join(plan.lines())
            self.core.loop.call_soon_threadsafe(self._say, "HMQ5322I", text)
            out.append(mqsc.format_message("HMQ5322I", text))
            return sr.recover_structure(conn, plan, scratch, say=self._say_threadsafe,
                                        progress=progress_lines, logs=logs)

        result = await asyncio.to_thread(_with_conn, conninfo, run)
        text = (f"structure {cmd.name} recovered by {self.core.name} ({result.type}): "
                f"{result.messages} messages ({result.in_doubt} in doubt, {result.in_flight} "
                f"held by units of work in flight), {result.bytes_read / 1e6:.1f} MB of log "
                f"merged in {result.seconds} s")
        self._say("HMQ5324I", text)
        out.append(mqsc.format_message("HMQ5324I", text + "."))
        return out

    def _say_threadsafe(self, msgid: str, text: str) -> None:
        self.core.loop.call_soon_threadsafe(self._say, msgid, text)

    # -- DISPLAY CFSTATUS ----------------------------------------------------------------

    async def display_cfstatus(self, cmd: Command) -> list[str]:
        conninfo = self.group_conninfo
        kind = cmd.attrs.get("TYPE", "SUMMARY").upper()
        if kind not in ("SUMMARY", "BACKUP", "CONNECT"):
            raise InvalidAttribute(f"TYPE({kind}) is not valid for DISPLAY CFSTATUS: SUMMARY, "
                                   "BACKUP or CONNECT")
        facts = await asyncio.to_thread(_with_conn, conninfo,
                                        lambda c: _cfstatus_facts(c, cmd.name, kind))
        out = []
        order = {"SUMMARY": mqsc.CFSTATUS_SUMMARY_ATTRS, "BACKUP": mqsc.CFSTATUS_BACKUP_ATTRS,
                 "CONNECT": mqsc.CFSTATUS_CONNECT_ATTRS}[kind]
        for values in facts:
            if not mqsc.where_matches(cmd.where, values):
                continue
            out.append(mqsc.format_object("HMQ8701I", "Display CF status details.",
                                          [(a, values.get(a, "")) for a in order]))
        if not out:
            if "*" not in cmd.name:
                raise _recovery().CFStructError(f"structure {cmd.name} is not defined in the group "
                                       "(MQRC 2349 CF_STRUC_ERROR)", structure=cmd.name)
            out.append(mqsc.format_message("HMQ8701I", "No structures found."))
        return out


def _with_conn(conninfo: str, fn):
    conn = _recovery().connect(conninfo)
    try:
        return fn(conn)
    finally:
        conn.close()


def _cfstatus_facts(conn, pattern: str, kind: str) -> list[dict]:
    sr = _recovery()
    rows = conn.execute("SELECT name, status, recover, recauto, failed_at FROM hmq_structures "
                        "ORDER BY name").fetchall()
    out = []
    for name, status, recover, recauto, failed_at in rows:
        if not mqsc.generic_match(pattern, name):
            continue
        fdate, ftime = _date_time(failed_at)
        base = {"CFSTATUS": name, "TYPE": kind, "FAILDATE": fdate, "FAILTIME": ftime}
        if kind == "SUMMARY":
            n, size = conn.execute("SELECT count(*), coalesce(sum(length(message)), 0) "
                                   "FROM hmq_messages WHERE structure = %s", (name,)).fetchone()
            out.append(base | {"CFTYPE": "APPL", "STATUS": status,
                               "RECOVER": "YES" if recover else "NO",
                               "RECAUTO": "YES" if recauto else "NO",
                               "ENTSUSED": str(n), "SIZEUSED": str(size)})
        elif kind == "BACKUP":
            b = sr.latest_backup(conn, name)
            if b is None:
                out.append(base | {"STATUS": "NONE"})
                continue
            bdate, btime = _date_time(b["ended_at"])
            logs = ",".join(sr.group_members(conn))
            out.append(base | {"STATUS": status, "QMNAME": b["member"], "BKUPDATE": bdate,
                               "BKUPTIME": btime, "BKUPSIZE": f"{b['bytes'] / (1 << 20):.1f}",
                               "BKUPSRBA": f"{b['start_lsn']:016X}",
                               "BKUPERBA": f"{b['end_lsn']:016X}",
                               "BKUPMSGS": str(b["messages"]), "EXCLINT": str(b["exclint"]),
                               "LOGS": logs})
        else:
            for member, state, started, beat in conn.execute(
                    "SELECT name, state, started_at, heartbeat_at FROM hmq_members "
                    "ORDER BY number"):
                cdate, ctime = _date_time(started)
                failed = state == "FAILED"
                mdate, mtime = _date_time(beat) if failed else ("", "")
                out.append(base | {"QMNAME": member,
                                   "STATUS": {"ACTIVE": "ACTIVE", "FAILED": "FAILED"}.get(
                                       state, "NONE"),
                                   "CONNDATE": cdate, "CONNTIME": ctime,
                                   "FAILDATE": mdate, "FAILTIME": mtime})
    return out
