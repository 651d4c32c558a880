"""MQSC's QSGDISP on DEFINE, ALTER, DELETE and DISPLAY of QLOCAL, QREMOTE,
QALIAS, QMODEL, PROCESS, NAMELIST, CHANNEL and TOPIC (docs/qsg.md, "Group objects
and their copies"), MQ for z/OS's rules:

* ``QSGDISP(QMGR)`` (the default) is the member's own object; a copy of a
  group object is not one: ALTER and DELETE of a copy without QSGDISP(COPY)
  are refused (MQRC 2085), and so is a DEFINE over it (MQRC 2100);
* ``QSGDISP(GROUP)`` is the group's object in PostgreSQL: DEFINE stores it
  and every active member makes its copy (this one before the command
  answers); ALTER changes it and refreshes the copies; DELETE removes it and
  the copies (a copy queue that holds messages is kept, as MQ's NOPURGE);
* ``QSGDISP(COPY)``: DEFINE makes this member's copy from the group object of
  the name; ALTER and DELETE change or delete the copy alone (a changed copy
  is overwritten when the group object changes, or at the next start);
* DISPLAY shows QSGDISP on every block of a member of a group (a queue
  manager of no group shows its blocks as before): QMGR and COPY objects by default
  (and shared queues, as before), ``QSGDISP(GROUP)`` the group's objects,
  ``ALL`` everything, ``QMGR``, ``COPY``, ``PRIVATE`` (QMGR and COPY),
  ``SHARED`` and ``LIVE`` as in MQ.

``GroupDispCommands`` is mixed into ``commands.Executor``, which registers
its handlers last: each wraps the handler it finds for the pair. Not here:
the copies themselves (``qsg/copies.py``), the SQL (``qsg/group.py``)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..errors import InvalidAttribute, ObjectExists, UnknownObject
from ..qsg.copies import COPY_TYPES, check_can_copy, full_attrs, is_copy, local_object
from . import mqsc

if TYPE_CHECKING:
    from ..core.engine import QueueManagerCore
    from .mqsc import Command

DISPOSITIONS = ("QMGR", "COPY", "GROUP", "SHARED", "ALL", "LIVE", "PRIVATE")
#: per type: the key DISPLAY shows first, the attributes in display order
_DISPLAY = {"QLOCAL": ("QUEUE", mqsc.DISPLAY_QUEUE_ATTRS),
            "QREMOTE": ("QUEUE", mqsc.DISPLAY_QREMOTE_ATTRS),
            "QALIAS": ("QUEUE", mqsc.DISPLAY_QALIAS_ATTRS),
            "QMODEL": ("QUEUE", mqsc.DISPLAY_QMODEL_ATTRS),
            "PROCESS": ("PROCESS", mqsc.DISPLAY_PROCESS_ATTRS),
            "NAMELIST": ("NAMELIST", mqsc.DISPLAY_NAMELIST_ATTRS),
            "CHANNEL": ("CHANNEL", mqsc.DISPLAY_CHANNEL_ATTRS),
            "TOPIC": ("TOPIC", mqsc.DISPLAY_TOPIC_ATTRS)}
_HEAD_RE = re.compile(r"^\s+(?:QUEUE|PROCESS|NAMELIST|CHANNEL|TOPIC)\(([^)]*)\)", re.M)


class GroupDispCommands:
    """The handlers (a part of ``commands.Executor``)."""
    core: QueueManagerCore
    handlers: dict

    def groupdisp_handlers(self) -> dict:
        inner = {}
        out = {}
        for objtype in COPY_TYPES:
            for verb, handler in (("DEFINE", self.define_disp), ("ALTER", self.alter_disp),
                                  ("DELETE", self.delete_disp), ("DISPLAY", self.display_disp)):
                inner[(verb, objtype)] = self.handlers[(verb, objtype)]
                out[(verb, objtype)] = handler
        self._disp_inner = inner
        return out

    async def _inner(self, cmd: Command):
        result = self._disp_inner[(cmd.verb, cmd.objtype)](cmd)
        if hasattr(result, "__await__"):
            result = await result
        return result

    def _disposition(self, cmd: Command) -> str | None:
        disp = cmd.attrs.get("QSGDISP")
        if disp is None:
            return None
        allowed = DISPOSITIONS if cmd.verb == "DISPLAY" else \
            ("QMGR", "COPY", "GROUP") + (("SHARED",) if cmd.objtype == "QLOCAL" and
                                         cmd.verb != "ALTER" else ())
        if disp not in allowed:
            raise InvalidAttribute(f"QSGDISP({disp}) is not valid for {cmd.verb} "
                                   f"{cmd.objtype}: {', '.join(allowed)}")
        # QLOCAL's own DEFINE and DELETE (admin/qsg_commands.py) read QMGR and SHARED
        if cmd.verb == "ALTER" or cmd.objtype != "QLOCAL" or disp not in ("QMGR", "SHARED"):
            if cmd.verb != "DISPLAY":
                del cmd.attrs["QSGDISP"]
        return disp

    def _member_group(self):
        group = self.core.group
        if group is None:
            # the same refusal as every group command (admin/qsg_commands.py)
            return self._group()
        return group

    def _noun(self, objtype: str) -> str:
        return "queue" if objtype.startswith("Q") else objtype.lower()

    def _given(self, cmd: Command) -> dict:
        return {k: v for k, v in mqsc.given_attrs(cmd).items() if k not in ("LIKE",
                                                                             "QSGDISP")}

    # -- DEFINE ----------------------------------------------------------------------------

    async def define_disp(self, cmd: Command) -> list[str]:
        disp = self._disposition(cmd)
        if disp in (None, "QMGR", "SHARED"):
            d = local_object(self.core, cmd.objtype, cmd.name)
            if is_copy(d):
                raise ObjectExists(f"{d['type']}({cmd.name}) on {self.core.name} is a copy of a "
                                   "group object (QSGDISP(COPY)): an object of the queue "
                                   "manager's own of that name is refused (MQRC 2100 "
                                   "OBJECT_ALREADY_EXISTS)", queue=cmd.name)
            return await self._inner(cmd)
        group = self._member_group()
        if disp == "COPY":
            g = group.group_object(cmd.objtype, cmd.name)
            if g is None:
                raise UnknownObject(f"{cmd.objtype}({cmd.name}) QSGDISP(GROUP) is not defined "
                                    "in the group: a copy is made from it (MQRC 2085)",
                                    queue=cmd.name)
            if is_copy(local_object(self.core, cmd.objtype, cmd.name)) and \
                    "REPLACE" not in cmd.flags:
                raise ObjectExists(f"{cmd.objtype}({cmd.name}) QSGDISP(COPY) exists on "
                                   f"{self.core.name} (use REPLACE to make it the group "
                                   "object's again) (MQRC 2100)", queue=cmd.name)
            check_can_copy(self.core, cmd.objtype, cmd.name)
            done = await group.refresh_copy(g)
            return [mqsc.format_message("HMQ8006I", f"harbormq {self._noun(cmd.objtype)} copy "
                                        f"of group object {cmd.name} {done} on "
                                        f"{self.core.name}.")]
        # GROUP: the complete definition checked here, stored in the group, copied
        base = None
        like = cmd.attrs.get("LIKE")
        if like:
            g = group.group_object(cmd.objtype, like)
            ld = local_object(self.core, cmd.objtype, like)
            if g is not None:
                base = dict(g["attrs"])
            elif ld is not None and ld["type"] == cmd.objtype:
                base = dict(ld["attrs"])
            else:
                raise UnknownObject(f"LIKE({like}): {cmd.objtype} {like} is not defined",
                                    queue=like)
        attrs = full_attrs(self.core, cmd.objtype, cmd.name, self._given(cmd), base)
        if cmd.objtype == "TOPIC" and like:
            attrs["TOPICSTR"] = self._given(cmd).get("TOPICSTR", "")   # its own, not LIKE's
            attrs = full_attrs(self.core, cmd.objtype, cmd.name, attrs)
        check_can_copy(self.core, cmd.objtype, cmd.name, attrs)
        old = group.group_object(cmd.objtype, cmd.name) if "REPLACE" in cmd.flags else None
        if old is not None:
            self._same_topicstr(cmd, old["attrs"], attrs)
        group.put_group_object(cmd.objtype, cmd.name, attrs, replace="REPLACE" in cmd.flags)
        report = await group.sync_copies()
        out = [mqsc.format_message("HMQ8006I", f"harbormq group {self._noun(cmd.objtype)} "
                                   f"{cmd.name} created; every active member makes its copy.")]
        return out + self._copy_lines(report, cmd)

    def _same_topicstr(self, cmd: Command, old: dict, new: dict) -> None:
        if cmd.objtype == "TOPIC" and old.get("TOPICSTR") != new.get("TOPICSTR"):
            raise InvalidAttribute(f"topic {cmd.name}: TOPICSTR cannot change (it is "
                                   f"'{old.get('TOPICSTR')}'); delete the group topic object "
                                   "and define it again")

    def _copy_lines(self, report, cmd: Command) -> list[str]:
        what = f"{cmd.objtype}({cmd.name})"
        for text in report.failed:
            if text.startswith(what + ":"):
                return [mqsc.format_message("HMQ5341W", f"the copy on {self.core.name} was not "
                                            f"changed: {text[len(what) + 2:]}")]
        return []

    # -- ALTER -----------------------------------------------------------------------------

    def _this_members_object(self, cmd: Command, disp: str | None, to_what: str) -> bool:
        """Whether ALTER or DELETE acts on this member's own object: QSGDISP(QMGR)
        (or none) on an object that is not a copy, QSGDISP(COPY) on a copy;
        either the other way round is refused (MQRC 2085). ``to_what`` says
        what QSGDISP(COPY) and QSGDISP(GROUP) would do instead."""
        if disp not in (None, "QMGR", "COPY"):
            return False
        copy = is_copy(local_object(self.core, cmd.objtype, cmd.name))
        if disp == "COPY" and not copy:
            raise UnknownObject(f"{cmd.objtype}({cmd.name}) QSGDISP(COPY) is not defined on "
                                f"{self.core.name} (MQRC 2085)", queue=cmd.name)
        if disp != "COPY" and copy:
            raise UnknownObject(f"{cmd.objtype}({cmd.name}) on {self.core.name} is a copy "
                                f"of a group object: {to_what} (MQRC 2085)", queue=cmd.name)
        return True

    async def alter_disp(self, cmd: Command) -> list[str]:
        disp = self._disposition(cmd)
        if self._this_members_object(
                cmd, disp, "give QSGDISP(COPY) to change the copy (overwritten when the group "
                "object changes) or QSGDISP(GROUP) to change the group object"):
            return await self._inner(cmd)
        group = self._member_group()
        g = group.group_object(cmd.objtype, cmd.name)
        if g is None:
            raise UnknownObject(f"{cmd.objtype}({cmd.name}) QSGDISP(GROUP) is not defined in "
                                "the group (MQRC 2085)", queue=cmd.name)
        attrs = full_attrs(self.core, cmd.objtype, cmd.name, self._given(cmd), g["attrs"])
        self._same_topicstr(cmd, g["attrs"], attrs)
        group.put_group_object(cmd.objtype, cmd.name, attrs, replace=True)
        report = await group.sync_copies()
        return [mqsc.format_message("HMQ8008I", f"harbormq group {self._noun(cmd.objtype)} "
                                    f"{cmd.name} changed; every active member refreshes its "
                                    "copy.")] + self._copy_lines(report, cmd)

    # -- DELETE ----------------------------------------------------------------------------

    async def delete_disp(self, cmd: Command) -> list[str]:
        disp = self._disposition(cmd)
        if disp == "SHARED" or self._this_members_object(
                cmd, disp, "give QSGDISP(COPY) to delete the copy or QSGDISP(GROUP) to delete "
                "the group object and every copy"):
            return await self._inner(cmd)
        group = self._member_group()
        group.delete_group_object(cmd.objtype, cmd.name)
        report = await group.sync_copies()
        return [mqsc.format_message("HMQ8007I", f"harbormq group {self._noun(cmd.objtype)} "
                                    f"{cmd.name} deleted; every active member deletes its "
                                    "copy.")] + self._copy_lines(report, cmd)

    # -- DISPLAY ---------------------------------------------------------------------------

    async def display_disp(self, cmd: Command) -> list[str]:
        disp = self._disposition(cmd) or "LIVE"
        cmd.attrs.pop("QSGDISP", None)
        out: list[str] = []
        local_wanted = disp in ("QMGR", "COPY", "ALL", "LIVE", "PRIVATE", "SHARED")
        if local_wanted:
            try:
                blocks = await self._inner(cmd)
            except UnknownObject:
                if disp not in ("ALL",) or self.core.group is None:
                    raise
                blocks = []
            for block in blocks:
                shown = self._annotate(cmd.objtype, block, disp)
                if shown is not None:
                    out.append(shown)
        if disp in ("GROUP", "ALL"):
            out.extend(self._group_blocks(cmd))
        if not out and "*" not in cmd.name:
            raise UnknownObject(f"harbormq {self._noun(cmd.objtype)} {cmd.name} with "
                                f"QSGDISP({disp}) not found", queue=cmd.name)
        return out

    def _annotate(self, objtype: str, block: str, disp: str) -> str | None:
        """A local block with its QSGDISP; None when ``disp`` leaves it out."""
        m = _HEAD_RE.search(block)
        if m is None:
            return block if disp in ("LIVE", "ALL") else None      # a message, not an object
        if "QSGDISP(SHARED)" in block:
            return block if disp in ("LIVE", "ALL", "SHARED") else None
        d = local_object(self.core, objtype, m.group(1))
        mine = "COPY" if is_copy(d) else "QMGR"
        if disp == "SHARED" or disp not in ("LIVE", "ALL", "PRIVATE", mine):
            return None
        if self.core.group is None and mine == "QMGR":
            return block          # a queue manager of no group shows what it always showed
        return block + "\n" + mqsc.format_pairs([("QSGDISP", mine)])[0]

    def _group_blocks(self, cmd: Command) -> list[str]:
        head, order = _DISPLAY[cmd.objtype]
        out = []
        for g in self._member_group().group_objects(cmd.objtype):
            if not mqsc.generic_match(cmd.name, g["name"]):
                continue
            values = {head: g["name"], "TYPE": "LOCAL" if head == "TOPIC" else cmd.objtype,
                      **g["attrs"], "QSGDISP": "GROUP"}
            if cmd.objtype == "NAMELIST":
                values["NAMCOUNT"] = len(g["attrs"].get("NAMES", []))
            if not mqsc.where_matches(cmd.where, values):
                continue
            always = (head, "TYPE") if head in ("QUEUE", "TOPIC") else \
                (head, "CHLTYPE") if head == "CHANNEL" else (head,)
            shown = mqsc.select_attrs(cmd, tuple(a for a in order if a not in (
                "CURDEPTH", "IPPROCS", "OPPROCS")), always)
            out.append(mqsc.format_object("HMQ8409I", "Display group object details.",
                                          [(a, values.get(a, "")) for a in shown]
                                          + [("QSGDISP", "GROUP")]))
        return out

    # (QsgCommands provides it)
    def _group(self): ...
