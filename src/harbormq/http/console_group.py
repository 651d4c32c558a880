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
  count: DISPLAY QSTATUS shows local queues only).

Its actions (BACKUP, RECOVER and RESET CFSTRUCT) are not here: the page posts
each as one MQSC command to ``runCommand`` like every console action, with
its authority, and shows the command's answer (RECOVER's plan, progress and
outcome). A queue manager of no group answers ``{"member": false}``.
"""

from __future__ import annotations

import time

from aiohttp import web

from .console import Console, describe_console_path
from .context import WebContext

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
            for q in queues:
                shared = core.shared_queues.get(q.get("queue"))
                q["uncom"] = shared.uncommitted if shared is not None else None
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
