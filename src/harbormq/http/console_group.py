"""The web console's queue sharing group page: ``/console/api/group``.

What the page shows is what MQSC shows, read through the MQSC runner as the
requester (``Console.display``), so the figures and the authority are the
commands':

* the group and its members (DISPLAY GROUP: state, start, last heartbeat),
  which one is this queue manager, and this member's block of DISPLAY
  QMSTATUS (its number, connected or not, shared queues);
* each CF structure: DISPLAY CFSTRUCT (CFLEVEL, RECOVER, RECAUTO) with
  DISPLAY CFSTATUS TYPE(SUMMARY) (state, entries, failure) and
  TYPE(BACKUP) (the last backup: who, when, size, messages, the logs it
  needs), and the members connected to each (TYPE(CONNECT));
* the shared queues: DISPLAY QLOCAL(*) QSGDISP(SHARED) (depth, getters,
  putters, maximum depth) and the uncommitted messages of each (the group's
  count: DISPLAY QSTATUS shows local queues only), one query for them all
  on a worker thread, None ("–") when the group's database cannot answer.

Its actions (BACKUP, RECOVER and RESET CFSTRUCT) are not here: the page posts
each as one MQSC command to ``runCommand`` like every console action, with
its authority, and shows the command's answer (RECOVER's plan, progress and
outcome). A queue manager of no group answers ``{"member": false}``.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from aiohttp import web

from ..qsg.errors import CFNotAvailable
from .console import Console, describe_console_path
from .context import WebContext

if TYPE_CHECKING:       # (the qsg extra's driver is imported by a member only)
    from ..qsg.structure import StructureStore

#: the reasons of a DISPLAY of structures that finds none (the group has no
#: structure yet): MQRC 2085 (UNKNOWN_OBJECT_NAME), or 2349 (CF_STRUC_ERROR)
NO_STRUCTURE = (2085, 2349)


def _by(rows, key: str) -> dict:
    return {r.get(key): r for r in rows} if isinstance(rows, list) else {}


def _rows(shown) -> list:
    """The objects a DISPLAY showed; none when it found none."""
    if isinstance(shown, dict) and shown.get("reason") in NO_STRUCTURE:
        return []
    return shown


async def shared_uncommitted(shared_queues: dict, names: list) -> dict[str, int | None]:
    """The uncommitted messages (of every member) of each shared queue named:
    one count of the group's store for them all, run on a worker thread (the
    store's statement, and its lock, may wait; the loop must not). None for a
    queue this member does not know, and for each when the store cannot
    answer now (the page shows "–" rather than failing)."""
    by_store: dict[int, tuple[StructureStore, list[str]]] = {}
    for name in names:
        q = shared_queues.get(name)
        if q is not None:
            by_store.setdefault(id(q.store), (q.store, []))[1].append(name)
    counts: dict[str, int | None] = dict.fromkeys(names)
    for store, queues in by_store.values():     # (one: the member's session)
        try:
            counts.update(await asyncio.to_thread(store.uncommitted_of, queues))
        except CFNotAvailable:
            pass
    return counts


class GroupPage:
    """The handler of ``/console/api/group`` over the console's DISPLAY reader."""

    def __init__(self, console: Console):
        self.console = console
        self.context: WebContext = console.context

    async def group(self, request: web.Request) -> web.Response:
        console = self.console
        who = await self.context.authenticator.principal(request)
        core = self.context.core
        if core.group is None:
            # (still read as the requester: a page of no group needs +dsp too)
            await console.display(who, "DISPLAY QMGR QMNAME")
            return web.json_response({"member": False, "qmgr": self.context.qmgr_name,
                                      "time_ns": time.time_ns()})
        status = await console.display(who, "DISPLAY QMSTATUS ALL")
        membership = next((s for s in status if "qsgname" in s), {}) \
            if isinstance(status, list) else status
        members = await console.display(who, "DISPLAY GROUP")
        if isinstance(members, list):
            for m in members:
                m["this"] = m.get("qmname") == self.context.qmgr_name
        structures = _rows(await console.display(who, "DISPLAY CFSTRUCT(*)"))
        summary = _by(_rows(await console.display(who, "DISPLAY CFSTATUS(*) TYPE(SUMMARY)")),
                      "cfstatus")
        backup = _by(_rows(await console.display(who, "DISPLAY CFSTATUS(*) TYPE(BACKUP)")),
                     "cfstatus")
        connect = _rows(await console.display(who, "DISPLAY CFSTATUS(*) TYPE(CONNECT)"))
        if isinstance(structures, list):
            structures = [self._structure(s, summary, backup, connect) for s in structures]
        queues = await console.display(
            who, "DISPLAY QLOCAL(*) QSGDISP(SHARED) CURDEPTH MAXDEPTH IPPROCS OPPROCS DESCR",
            none_when_refused=True)
        if isinstance(queues, list):
            uncom = await shared_uncommitted(core.shared_queues,
                                             [q.get("queue") for q in queues])
            for q in queues:
                q["uncom"] = uncom.get(q.get("queue"))
        return web.json_response({
            "member": True, "qmgr": self.context.qmgr_name, "time_ns": time.time_ns(),
            "membership": membership, "members": members, "structures": structures,
            "queues": queues})

    @staticmethod
    def _structure(s: dict, summary: dict, backup: dict, connect) -> dict:
        """One structure's row: its definition, its state and its last backup."""
        name = s.get("cfstruct")
        state = summary.get(name, {})
        last = backup.get(name, {})
        return {**s, "status": state.get("status", s.get("status")),
                "entsused": state.get("entsused"), "faildate": state.get("faildate"),
                "failtime": state.get("failtime"),
                "backup": {k: last.get(k) for k in ("qmname", "bkupdate", "bkuptime",
                                                    "bkupsize", "bkupmsgs", "logs")},
                "connected": [c.get("qmname") for c in connect if isinstance(connect, list)
                              and c.get("cfstatus") == name and c.get("status") == "ACTIVE"]}


def add_routes(app: web.Application, context: WebContext) -> None:
    page = GroupPage(Console(context))
    describe_console_path(app, "group", "the queue sharing group: DISPLAY GROUP, CFSTRUCT, "
                          "CFSTATUS and the shared queues", ())
    app.router.add_get("/console/api/group", page.group)
