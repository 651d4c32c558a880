"""The web console: its pages and the JSON they read (``add_routes``).

``/console/`` serves one page (``static/console.html``, ``console.js``,
``console.css``: plain files, no build step, no login needed to fetch them,
no data in them). The page logs in with HTTP basic (the same users as STOMP
and ``runCommand``) and reads, every couple of seconds, the JSON of
``/console/api/``:

* ``session``: the queue manager's name and who is logged in;
* ``overview``: DISPLAY QMSTATUS ALL and DISPLAY LOG (the log's extents,
  the restart and media points, archive backlog), what pins the restart
  point, the predicted restart time (``recovery/need.py``), the dual log;
* ``queues``: one page of queues, filtered and sorted on the server
  (``console_data.queue_page``), each row DISPLAY QSTATUS's figures;
* ``queues/{name}/messages``: one page of a queue's messages from a cursor
  (``console_data.browse_page``; +browse on the queue);
* ``connections``: DISPLAY CONN and DISPLAY UOW; ``channels``: DISPLAY
  CHANNEL and CHSTATUS; ``topics``: DISPLAY TOPIC and SUB;
* ``group``: the queue sharing group (``console_group.py``).

Whatever the page shows is read with the requester's authority: the
DISPLAY commands go through the MQSC runner as the requester (the checks of
``runCommand``), the queue list shows only queues the requester may display
(+dsp) and browsing needs +browse. The page's actions (clear a queue, stop a
connection, resolve a unit of work, start, stop and resolve a channel, any
MQSC command) are not here: the page posts the MQSC command to MQ's REST
``runCommand`` (``mqsc_api.py``), so they are exactly the admin socket's
commands with ``runCommand``'s authority, and it shows their response.
"""

from __future__ import annotations

import time
from pathlib import Path

from aiohttp import web

from ..errors import HarbormqError
from ..recovery.need import log_need_facts
from .console_data import SORTS, DepthRates, browse_page, queue_figures, queue_page
from .context import WebContext
from .errors import RestError, bad_request
from .openapi import describe

STATIC = Path(__file__).parent / "static"
#: the seconds between the page's reads (it reads again when one ends)
POLL_S = 2.0
NOT_AUTHORIZED = 2035
#: the page runs only its own script and is never framed by another site (its
#: buttons run commands: no clickjacking)
PAGE_HEADERS = {"Cache-Control": "no-cache",
                "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'",
                "X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff"}


class Console:
    """The console's JSON handlers over one queue manager's ``WebContext``."""

    def __init__(self, context: WebContext):
        self.context = context
        self.rates = DepthRates()

    # -- reading through MQSC, as the requester --------------------------------------
    async def display(self, principal, command: str, *, none_when_refused: bool = False):
        """The parameters of each object a DISPLAY command shows, or ``{"error":
        text}`` when it failed; a refusal of authority is 403 (or nothing shown,
        for a generic DISPLAY of queues or topics, which shows only those the
        requester may display)."""
        outcome = await self.context.mqsc.run_command(command, principal)
        if outcome.completion_code != 0:
            failed = [r for r in outcome.responses if r.completion_code != 0]
            reason = failed[0].reason_code if failed else outcome.reason_code
            text = "\n".join(line for r in failed for line in r.text)
            if reason == NOT_AUTHORIZED:
                if none_when_refused:
                    return []
                raise RestError(403, "MQWB0111E", f"{command}: {text}", reason=reason,
                                explanation="The user is not authorized for this.",
                                action="Ask an administrator for the authority.")
            return {"error": text, "reason": reason}
        return [dict(r.parameters) for r in outcome.responses if r.parameters]

    async def _who(self, request: web.Request):
        return await self.context.authenticator.principal(request)

    # -- the handlers -----------------------------------------------------------------
    async def page(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC / "console.html", headers=PAGE_HEADERS)

    async def session(self, request: web.Request) -> web.Response:
        """Who is logged in, to which queue manager: no authority needed beyond
        logging in (the page's first read)."""
        who = await self._who(request)
        return web.json_response({"qmgr": self.context.qmgr_name, "user": who.user,
                                  "poll_s": POLL_S,
                                  # the Group page's link shows on a member only
                                  "qsg_member": self.context.core.group is not None})

    async def overview(self, request: web.Request) -> web.Response:
        who = await self._who(request)
        core = self.context.core
        status = await self.display(who, "DISPLAY QMSTATUS ALL")
        log = await self.display(who, "DISPLAY LOG")
        need = log_need_facts(core.log, core.last_checkpoint.get("media"))
        extents = log[1:] if isinstance(log, list) else []
        backlog = [e["extent"] for e in extents
                   if e.get("status") == "FULL" and e.get("archived") == "NO"
                   and e.get("deleted") == "NO"]
        dual = core.config.log_dual_dir
        return web.json_response({
            "qmgr": self.context.qmgr_name, "time_ns": time.time_ns(), "poll_s": POLL_S,
            "status": status[0] if isinstance(status, list) and status else status,
            "log": log[0] if isinstance(log, list) and log else log,
            "extents": extents,
            "archive_backlog": backlog,
            "restart_pin": core.describe_restart_pin(),
            "media_pinned_by": need["pinned_by"],
            "restart_estimate_s": need["restart_estimate_s"],
            "replay_rate_mb_s": need["replay_rate_mb_s"],
            "replay_rate_measured": need["replay_rate_measured"],
            "oldest_entry_time": need["oldest_entry_time"],
            "removable": need["removable"],
            "dual_log": {"copies": 2 if dual is not None else 1,
                         "path": str(core.log.dir),
                         "dual_path": str(dual) if dual is not None else None},
            "in_doubt": [u.id for u in core.in_doubt()],
        })

    async def queues(self, request: web.Request) -> web.Response:
        who = await self._who(request)
        q = request.query
        sort = q.get("sort", "name")
        if sort not in SORTS:
            raise bad_request(f"sort={sort}: sort by one of {', '.join(SORTS)}")
        try:
            offset, limit = int(q.get("offset", 0)), int(q.get("limit", 50))
        except ValueError:
            raise bad_request("offset and limit must be whole numbers") from None
        # the queues the requester may display, decided for all of them at once
        # (an administrator's 10,000 queues are one check)
        shown = set(self.context.authenticator.visible(
            who, "QUEUE", list(self.context.core.queues), "DSP"))
        page = queue_page(self.context.core, may_display=shown.__contains__, offset=offset,
                          limit=limit, filter_text=q.get("filter", ""), sort=sort)
        rows = []
        for name in page["names"]:
            shown = await self.display(who, f"DISPLAY QSTATUS('{name}') ALL",
                                       none_when_refused=True)
            if not isinstance(shown, list) or not shown:
                continue          # deleted meanwhile
            row = {**shown[0], **queue_figures(self.context.core, name)}
            row["rate_per_s"] = self.rates.rate(name, row.get("curdepth", 0))
            rows.append(row)
        return web.json_response({"total": page["total"], "offset": page["offset"],
                                  "limit": page["limit"], "queues": rows,
                                  "time_ns": time.time_ns()})

    async def messages(self, request: web.Request) -> web.Response:
        who = await self._who(request)
        name = request.match_info["name"]
        self.context.authenticator.require(who, "QUEUE", name, "BROWSE")
        try:
            limit = int(request.query.get("limit", 50))
        except ValueError:
            raise bad_request("limit must be a whole number") from None
        after = request.query.get("after", "")
        try:
            bytes.fromhex(after)
        except ValueError:
            raise bad_request(f"after={after!r}: the cursor is the hex 'next' of the page "
                              "before") from None
        try:
            page = browse_page(self.context.core, name, after=after, limit=limit)
        except HarbormqError as exc:
            raise RestError.from_harbormq(exc) from None
        return web.json_response(page)

    async def _displays(self, request: web.Request, commands: dict[str, str],
                        none_when_refused: tuple[str, ...] = ()) -> web.Response:
        """Each DISPLAY of ``commands`` under its key (see ``display``)."""
        who = await self._who(request)
        out = {key: await self.display(who, command,
                                       none_when_refused=key in none_when_refused)
               for key, command in commands.items()}
        return web.json_response({**out, "time_ns": time.time_ns()})

    async def connections(self, request: web.Request) -> web.Response:
        return await self._displays(request, {"connections": "DISPLAY CONN(*) ALL",
                                              "uows": "DISPLAY UOW(*)"})

    async def channels(self, request: web.Request) -> web.Response:
        return await self._displays(request, {"channels": "DISPLAY CHANNEL(*)",
                                              "status": "DISPLAY CHSTATUS(*) ALL"})

    async def topics(self, request: web.Request) -> web.Response:
        return await self._displays(request, {"topics": "DISPLAY TOPIC(*)",
                                              "subscriptions": "DISPLAY SUB(*) ALL"},
                                    none_when_refused=("topics",))


#: the console's JSON paths for the OpenAPI description: (path, what, query parameters)
_API = (
    ("session", "the queue manager and who is logged in", ()),
    ("overview", "DISPLAY QMSTATUS ALL, DISPLAY LOG, what holds the log", ()),
    ("queues", "one page of queues, each with DISPLAY QSTATUS's figures", (
        ("offset", "integer", "the first row (0)"), ("limit", "integer", "rows, at most 500"),
        ("filter", "string", "a part of the name, or a prefix ending in *"),
        ("sort", "string", "name or depth (deepest first)"))),
    ("queues/{name}/messages", "one page of a queue's messages (+browse)", (
        ("after", "string", "the page before's next (hex): the head when absent"),
        ("limit", "integer", "messages, at most 500"))),
    ("connections", "DISPLAY CONN(*) ALL, DISPLAY UOW(*)", ()),
    ("channels", "DISPLAY CHANNEL(*), DISPLAY CHSTATUS(*) ALL", ()),
    ("topics", "DISPLAY TOPIC(*), DISPLAY SUB(*) ALL", ()),
)


async def _to_console(request: web.Request) -> web.Response:
    raise web.HTTPFound("/console/")


def describe_console_path(app: web.Application, path: str, summary: str, query) -> None:
    """The OpenAPI description of one of the console's JSON paths."""
    describe(app, f"/console/api/{path}", {"get": {
        "summary": f"web console: {summary}", "tags": ["console"],
        "parameters": [{"name": n, "in": "query", "required": False,
                        "schema": {"type": t}, "description": d} for n, t, d in query]
        + ([{"name": "name", "in": "path", "required": True,
             "schema": {"type": "string"}}] if "{name}" in path else []),
        "responses": {"200": {"description": "JSON for the console's page"},
                      "401": {"description": "not logged in"},
                      "403": {"description": "no authority (MQRC 2035)"}}}})


def add_routes(app: web.Application, context: WebContext) -> None:
    console = Console(context)
    app.router.add_get("/console", _to_console)
    app.router.add_get("/console/", console.page)
    app.router.add_static("/console/static/", STATIC, follow_symlinks=False)
    api = "/console/api"
    for path, summary, query in _API:
        describe_console_path(app, path, summary, query)
    app.router.add_get(f"{api}/session", console.session)
    app.router.add_get(f"{api}/overview", console.overview)
    app.router.add_get(f"{api}/queues", console.queues)
    app.router.add_get(f"{api}/queues/{{name}}/messages", console.messages)
    app.router.add_get(f"{api}/connections", console.connections)
    app.router.add_get(f"{api}/channels", console.channels)
    app.router.add_get(f"{api}/topics", console.topics)
