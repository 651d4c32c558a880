"""MQSC commands of a queue sharing group (docs/qsg.md): DEFINE, ALTER,
DELETE and DISPLAY CFSTRUCT; DISPLAY GROUP; DEFINE QLOCAL ... QSGDISP(SHARED)
CFSTRUCT(name) and the shared queues in DELETE and DISPLAY QLOCAL; the
member's block of DISPLAY QMSTATUS.

``QsgCommands`` is mixed into ``commands.Executor``, which registers its
handlers last (``qsg_handlers`` wraps the local queues' DEFINE, DELETE and
DISPLAY and DISPLAY QMSTATUS). It reaches the group through ``core.group``
(``qsg/service.py``) and never imports the PostgreSQL driver. Not here: the
grammar (``mqsc.py``), the SQL (``qsg/group.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import InvalidAttribute, ObjectError, UnknownObject
from . import mqsc

if TYPE_CHECKING:
    from ..core.engine import QueueManagerCore
    from .mqsc import Command

#: what DISPLAY QLOCAL shows of a shared queue, in order
DISPLAY_SHARED_ATTRS = ("QUEUE", "TYPE", "QSGDISP", "CFSTRUCT") + mqsc.QLOCAL_ATTRS + (
    "CURDEPTH", "IPPROCS", "OPPROCS")


class NotAMember(ObjectError):
    """A group command on a queue manager of no group."""
    msgid = "HMQ5304E"


class QsgCommands:
    """The handlers (a part of ``commands.Executor``)."""
    core: QueueManagerCore
    handlers: dict

    def qsg_handlers(self) -> dict:
        local = {k: self.handlers[k] for k in (("DEFINE", "QLOCAL"), ("DELETE", "QLOCAL"),
                                               ("DISPLAY", "QLOCAL"), ("DISPLAY", "QMSTATUS"))}
        self._local_handlers = local
        return {("DEFINE", "CFSTRUCT"): self.define_cfstruct,
                ("ALTER", "CFSTRUCT"): self.alter_cfstruct,
                ("DELETE", "CFSTRUCT"): self.delete_cfstruct,
                ("DISPLAY", "CFSTRUCT"): self.display_cfstruct,
                ("DISPLAY", "GROUP"): self.display_group,
                ("DEFINE", "QLOCAL"): self.define_qlocal_any,
                ("DELETE", "QLOCAL"): self.delete_qlocal_any,
                ("DISPLAY", "QLOCAL"): self.display_qlocal_any,
                ("DISPLAY", "QMSTATUS"): self.display_qmstatus_any}

    def _group(self):
        group = self.core.group
        if group is None:
            raise NotAMember(f"queue manager {self.core.name} is not a member of a queue "
                             "sharing group (harbormq create --qsg NAME --qsg-db CONNINFO)")
        return group

    async def _call(self, result):
        if hasattr(result, "__await__"):
            return await result
        return result

    # -- structures ----------------------------------------------------------------------

    def define_cfstruct(self, cmd: Command) -> list[str]:
        attrs = {k: v for k, v in mqsc.given_attrs(cmd).items() if k != "LIKE"}
        if "LIKE" in cmd.attrs:
            base = next((s for s in self._group().structures()
                         if s["CFSTRUCT"] == cmd.attrs["LIKE"]), None)
            if base is None:
                raise UnknownObject(f"LIKE({cmd.attrs['LIKE']}): structure not defined")
            attrs = {**{k: base[k] for k in mqsc.CFSTRUCT_ATTRS}, **attrs}
        self._group().define_structure(cmd.name, attrs, "REPLACE" in cmd.flags)
        return [mqsc.format_message("HMQ8006I", "harbormq CF structure created.")]

    def alter_cfstruct(self, cmd: Command) -> list[str]:
        self._group().alter_structure(cmd.name, mqsc.given_attrs(cmd))
        return [mqsc.format_message("HMQ8008I", "harbormq CF structure changed.")]

    def delete_cfstruct(self, cmd: Command) -> list[str]:
        self._group().delete_structure(cmd.name)
        return [mqsc.format_message("HMQ8007I", "harbormq CF structure deleted.")]

    def display_cfstruct(self, cmd: Command) -> list[str]:
        out = []
        found = [s for s in self._group().structures()
                 if mqsc.generic_match(cmd.name, s["CFSTRUCT"])]
        if not found:
            raise UnknownObject(f"harbormq CF structure {cmd.name} not found (MQRC 2349 "
                                "CF_STRUC_ERROR)")
        for s in found:
            if not mqsc.where_matches(cmd.where, s):
                continue
            shown = mqsc.select_attrs(cmd, mqsc.DISPLAY_CFSTRUCT_ATTRS, ("CFSTRUCT",),
                                      mqsc.DISPLAY_CFSTRUCT_ATTRS)
            out.append(mqsc.format_object("HMQ8790I", "Display CF structure details.",
                                          [(a, s.get(a)) for a in shown]))
        return out

    def display_group(self, cmd: Command) -> list[str]:
        group = self._group()
        out = [mqsc.format_message("HMQ8791I", f"Display group: queue sharing group "
                                   f"{group.settings.name}.")]
        for m in group.members():
            values = {"QMNAME": m["name"], "QSGNAME": group.settings.name,
                      "NUMBER": m["number"], "STATUS": m["state"],
                      "STARTDA": m["started_at"].date().isoformat() if m["started_at"] else "",
                      "STARTTI": m["started_at"].strftime("%H.%M.%S") if m["started_at"] else "",
                      "HBTIME": m["heartbeat_at"].strftime("%H.%M.%S")
                      if m["heartbeat_at"] else ""}
            shown = mqsc.select_attrs(cmd, mqsc.GROUP_ATTRS, ("QMNAME",), mqsc.GROUP_ATTRS)
            out.append(mqsc.format_object("HMQ8792I", "Display group member details.",
                                          [(a, values.get(a)) for a in shown]))
        return out

    # -- shared queues ------------------------------------------------------------------

    async def define_qlocal_any(self, cmd: Command) -> list[str]:
        disp = cmd.attrs.get("QSGDISP", "QMGR")
        if disp not in ("QMGR", "SHARED"):
            raise InvalidAttribute(f"QSGDISP({disp}) is not supported for QLOCAL here: QMGR "
                                   "or SHARED")
        if disp == "QMGR":
            if "CFSTRUCT" in cmd.attrs:
                raise InvalidAttribute("CFSTRUCT is for a shared queue: give QSGDISP(SHARED)")
            cmd.attrs.pop("QSGDISP", None)
            return await self._call(self._local_handlers[("DEFINE", "QLOCAL")](cmd))
        if cmd.name in self.core.queues:
            raise InvalidAttribute(f"queue {cmd.name} is a local queue of {self.core.name}: "
                                   "a shared queue of that name would hide it (MQRC 2100)")
        attrs = {k: v for k, v in mqsc.given_attrs(cmd).items()
                 if k not in ("LIKE", "QSGDISP")}
        self._group().define_shared_queue(cmd.name, attrs, "REPLACE" in cmd.flags)
        return [mqsc.format_message("HMQ8006I", "harbormq shared queue created.")]

    async def delete_qlocal_any(self, cmd: Command) -> list[str]:
        shared = cmd.name in self.core.shared_queues
        disp = cmd.attrs.pop("QSGDISP", "SHARED" if shared else "QMGR")
        if disp == "SHARED":
            if not shared:
                raise UnknownObject(f"shared queue {cmd.name} not found", queue=cmd.name)
            self._group().delete_shared_queue(cmd.name)
            return [mqsc.format_message("HMQ8007I", "harbormq shared queue deleted.")]
        return await self._call(self._local_handlers[("DELETE", "QLOCAL")](cmd))

    async def display_qlocal_any(self, cmd: Command) -> list[str]:
        shared = sorted(n for n in self.core.shared_queues if mqsc.generic_match(cmd.name, n))
        try:
            out = await self._call(self._local_handlers[("DISPLAY", "QLOCAL")](cmd))
        except UnknownObject:
            if not shared:
                raise
            out = []
        for name in shared:
            q = self.core.shared_queues[name]
            ip, op = self.core.connections.procs(name)
            values = {"QUEUE": name, "TYPE": "QLOCAL", **q.attrs, "CURDEPTH": q.curdepth,
                      "IPPROCS": ip, "OPPROCS": op}
            if not mqsc.where_matches(cmd.where, values):
                continue
            shown = mqsc.select_attrs(cmd, DISPLAY_SHARED_ATTRS,
                                      ("QUEUE", "TYPE", "QSGDISP", "CFSTRUCT"))
            out.append(mqsc.format_object("HMQ8409I", "Display Queue details.",
                                          [(a, values.get(a)) for a in shown]))
        return out

    async def display_qmstatus_any(self, cmd: Command) -> list[str]:
        out = await self._call(self._local_handlers[("DISPLAY", "QMSTATUS")](cmd))
        group = self.core.group
        if group is None or not out:
            return out
        values = {"QMNAME": self.core.name, "QSGNAME": group.settings.name,
                  "QSGNUM": group.member_number,
                  "QSGSTAT": "CONNECTED" if group.session.connected else "DISCONNECTED",
                  "SHQUEUES": len(self.core.shared_queues)}
        out.append(mqsc.format_object("HMQ8706I", "Display queue sharing group membership.",
                                      list(values.items())))
        return out
