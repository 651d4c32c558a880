"""MQSC commands for alias and model queues, processes and namelists:
DEFINE, ALTER, DELETE and DISPLAY of QALIAS, QMODEL, PROCESS and NAMELIST,
and DISPLAY QUEUE of every queue type (TYPE(QALIAS), TYPE(QMODEL),
TYPE(QREMOTE), TYPE(ALL)).

``ObjectCommands`` is mixed into ``commands.Executor``, which registers its
handlers. Not here: the grammar (``mqsc.py``), the definitions themselves
(``core/definitions.py``), local queues' own commands (``commands.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import UnknownObject
from . import mqsc

if TYPE_CHECKING:
    from ..core.engine import QueueManagerCore
    from .mqsc import Command

#: per type: the noun of its messages, the key attribute DISPLAY shows first,
#: the attributes DISPLAY shows in order
_TYPES = {
    "QALIAS": ("alias queue", "QUEUE", mqsc.DISPLAY_QALIAS_ATTRS),
    "QMODEL": ("model queue", "QUEUE", mqsc.DISPLAY_QMODEL_ATTRS),
    "QREMOTE": ("remote queue", "QUEUE", mqsc.DISPLAY_QREMOTE_ATTRS),
    "PROCESS": ("process", "PROCESS", mqsc.DISPLAY_PROCESS_ATTRS),
    "NAMELIST": ("namelist", "NAMELIST", mqsc.DISPLAY_NAMELIST_ATTRS),
}
#: DISPLAY QUEUE's TYPE values and the object types each lists
_QUEUE_TYPES = {"QLOCAL": ("QLOCAL",), "QALIAS": ("QALIAS",), "QMODEL": ("QMODEL",),
                "QREMOTE": ("QREMOTE",), "ALL": ("QLOCAL", "QALIAS", "QMODEL", "QREMOTE"),
                "*": ("QLOCAL", "QALIAS", "QMODEL", "QREMOTE")}


class ObjectCommands:
    """The handlers (a part of ``commands.Executor``)."""
    core: QueueManagerCore

    def object_handlers(self) -> dict:
        handlers: dict = {("DISPLAY", "QUEUE"): self.display_any_queue}
        for objtype in ("QALIAS", "QMODEL", "PROCESS", "NAMELIST"):
            handlers.update({("DEFINE", objtype): self.define_typed,
                             ("ALTER", objtype): self.alter_typed,
                             ("DELETE", objtype): self.delete_typed,
                             ("DISPLAY", objtype): self.display_typed})
        return handlers

    async def define_typed(self, cmd: Command) -> list[str]:
        replace = "REPLACE" in cmd.flags
        await self.core.define_object(cmd.objtype, cmd.name, mqsc.given_attrs(cmd),
                                      replace=replace)
        return [mqsc.format_message("HMQ8006I", f"harbormq {_TYPES[cmd.objtype][0]} created"
                                    + (" (REPLACE)." if replace else "."))]

    async def alter_typed(self, cmd: Command) -> list[str]:
        await self.core.alter_object(cmd.objtype, cmd.name, mqsc.given_attrs(cmd))
        return [mqsc.format_message("HMQ8008I", f"harbormq {_TYPES[cmd.objtype][0]} changed.")]

    async def delete_typed(self, cmd: Command) -> list[str]:
        await self.core.delete_object(cmd.objtype, cmd.name)
        return [mqsc.format_message("HMQ8007I", f"harbormq {_TYPES[cmd.objtype][0]} deleted.")]

    def typed_values(self, d: dict) -> dict:
        """What DISPLAY shows of definition ``d``."""
        noun, head, _order = _TYPES[d["type"]]
        values = {head: d["name"], "TYPE": d["type"], **d["attrs"]}
        if d["type"] == "NAMELIST":
            values["NAMCOUNT"] = len(d["attrs"]["NAMES"])
        return values

    def display_typed(self, cmd: Command) -> list[str]:
        noun, head, order = _TYPES[cmd.objtype]
        out = []
        for d in sorted((d for d in self.core.objects.values() if d["type"] == cmd.objtype),
                        key=lambda d: d["name"]):
            if not mqsc.generic_match(cmd.name, d["name"]):
                continue
            values = self.typed_values(d)
            if not mqsc.where_matches(cmd.where, values):
                continue
            shown = mqsc.select_attrs(cmd, order, (head, "TYPE") if head == "QUEUE" else (head,))
            out.append(mqsc.format_object("HMQ8409I", f"Display {noun} details.",
                                          [(a, values.get(a, "")) for a in shown]))
        if not out:
            if "*" not in cmd.name:
                raise UnknownObject(f"harbormq {noun} {cmd.name} not found", queue=cmd.name)
            out.append(mqsc.format_message("HMQ8409I", f"No {noun}s found."))
        return out

    def display_any_queue(self, cmd: Command) -> list[str]:
        """DISPLAY QUEUE: local queues (the default, TYPE(QLOCAL)), or those of
        TYPE(QALIAS | QMODEL | QREMOTE | ALL), each block with its TYPE."""
        qtype = cmd.attrs.get("TYPE", "QLOCAL")
        if qtype not in _QUEUE_TYPES:
            raise UnknownObject(f"TYPE({qtype}) is not a queue type: use QLOCAL, QALIAS, "
                                "QMODEL, QREMOTE or ALL", queue=cmd.name)
        if qtype == "QLOCAL":
            return self.display_queue(cmd)
        types = _QUEUE_TYPES[qtype]
        out = []
        for d in sorted((d for d in self.core.objects.values() if d["type"] in types),
                        key=lambda d: d["name"]):
            if not mqsc.generic_match(cmd.name, d["name"]):
                continue
            values = self.queue_attrs(d["name"]) if d["type"] == "QLOCAL" else \
                self.typed_values(d)
            if not mqsc.where_matches(cmd.where, values):
                continue
            order = mqsc.DISPLAY_QUEUE_ATTRS if d["type"] == "QLOCAL" else _TYPES[d["type"]][2]
            shown = mqsc.select_attrs(cmd, order, ("QUEUE", "TYPE"))
            out.append(mqsc.format_object("HMQ8409I", "Display Queue details.",
                                          [(a, values.get(a, "")) for a in shown]))
        if not out and "*" not in cmd.name:
            raise UnknownObject(f"harbormq object {cmd.name} not found", queue=cmd.name)
        return out

    # (Executor provides these)
    def display_queue(self, cmd: Command) -> list[str]: ...

    def queue_attrs(self, name: str) -> dict: ...

