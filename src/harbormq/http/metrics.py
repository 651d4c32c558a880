"""``GET /metrics``: the queue manager's figures in the Prometheus exposition
format (docs/http-metrics.md).

A scrape takes a snapshot of the core's own figures on the loop, in steps
of a few milliseconds (``metrics_snapshot.py``), then renders the text
(``metrics_render.py``) in a process of its own (``metrics_process.py``:
off the GIL the loop needs), asked from a thread of its own, gzipped when
the scraper accepts it (Prometheus does). One scrape runs at a time: a scrape that
arrives meanwhile waits for the next, so a scraper retrying in a loop
never piles snapshots up on the loop.

``?queue=PATTERN`` (repeatable; MQ's generic names, ``APP.*``; ``!`` before
a pattern excludes) limits the per-queue series, as mq_prometheus's
monitored queues do; the totals always count every queue.

Who may scrape: the listener's rules (loopback only without TLS and
``connauth = "required"``; HTTP basic with harbormq's users, or on
loopback with ``connauth = "optional"`` the OS user at the other end), and
then authority to display the queue manager (``+dsp`` on its QMGR
object, as DISPLAY QMSTATUS needs): a scrape is one read of the whole queue
manager, every queue's figures included, as mq_prometheus's user needs
+dsp and +inq on the queue manager and every queue it reports.

Not here: reading the core, naming and writing the metrics (the modules
above); the listener, TLS and authentication (``server.py``, ``auth.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from aiohttp import web

from ..backup.history import read_history
from ..core.engine import QueueManagerCore
from ..errors import HarbormqError
from .context import WebContext
from .errors import bad_request
from .metrics_process import RenderProcess
from .metrics_snapshot import RestartFacts, take_snapshot
from .openapi import describe

#: prometheus_client's CONTENT_TYPE_LATEST: the text format, version 0.0.4
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class BadQueuePattern(HarbormqError):
    msgid = "HMQ8950E"


def queue_selector(patterns: list[str]) -> Callable[[str], bool] | None:
    """``selected(name)`` for ``?queue=`` patterns (None: every queue). A name
    is selected when it matches an including pattern (or there is none) and
    no excluding one (``!PATTERN``). A pattern is a name, or a prefix and a
    final ``*`` (MQ's generic names)."""
    if not patterns:
        return None
    include, exclude = [], []
    for raw in patterns:
        neg = raw.startswith("!")
        pattern = raw[1:] if neg else raw
        if not pattern or "*" in pattern[:-1]:
            raise BadQueuePattern(f"queue={raw!r}: a queue pattern is a name or a prefix "
                                  "followed by one '*' (MQ's generic names), '!' before it "
                                  "to exclude")
        (exclude if neg else include).append(pattern)

    def matches(name: str, pats: list[str]) -> bool:
        return any(name.startswith(p[:-1]) if p.endswith("*") else name == p for p in pats)

    def selected(name: str) -> bool:
        return (not include or matches(name, include)) and not matches(name, exclude)
    return selected


class MetricsEndpoint:
    """The scrapes of one queue manager: its core, where the last restart's
    report and the backup record come from, the thread that asks for the text
    and the process that renders it."""

    def __init__(self, core: QueueManagerCore, *, restart: RestartFacts | None = None,
                 backups: Callable[[], dict | None] | None = None):
        self.core = core
        self.restart = restart
        self.backups = backups
        self._lock = asyncio.Lock()
        self._renderer = ThreadPoolExecutor(1, thread_name_prefix=f"harbormq-metrics-{core.name}")
        self._process = RenderProcess(core.name)

    async def scrape(self, patterns: list[str] = (), *, gzipped: bool = False) -> bytes:
        """The text of one scrape (gzipped when asked)."""
        selected = queue_selector(list(patterns))
        async with self._lock:
            snap = await take_snapshot(self.core, restart=self.restart, selected=selected)
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._renderer, self._render, snap, gzipped)

    def _render(self, snap, gzipped: bool) -> bytes:
        return self._process.render(snap, self.backups() if self.backups is not None else None,
                                    gzipped)

    def close(self) -> None:
        # the render process is stopped from the renderer's thread, after a render
        # under way (the loop does not wait for it)
        self._renderer.submit(self._process.close)
        self._renderer.shutdown(wait=False)


def add_routes(app: web.Application, context: WebContext) -> None:
    """``GET /metrics`` on the listener."""
    endpoint = MetricsEndpoint(context.core, restart=context.restart_report,
                               backups=backup_record_reader(context.core.config.qm_dir))

    async def metrics(request: web.Request) -> web.Response:
        auth = context.authenticator
        principal = await auth.principal(request)
        auth.require(principal, "QMGR", context.qmgr_name, "DSP")
        gzipped = "gzip" in request.headers.get("Accept-Encoding", "").lower()
        try:
            body = await endpoint.scrape(request.query.getall("queue", []), gzipped=gzipped)
        except BadQueuePattern as exc:
            raise bad_request(f"{exc.msgid}: {exc.message}") from None
        headers = {"Content-Type": CONTENT_TYPE}
        if body[:2] == b"\x1f\x8b":
            headers["Content-Encoding"] = "gzip"
        return web.Response(body=body, headers=headers)

    async def close(_app: web.Application) -> None:
        endpoint.close()

    app.router.add_get("/metrics", metrics)
    app.on_cleanup.append(close)
    describe(app, "/metrics", {"get": {
        "summary": "the queue manager's figures in the Prometheus text format 0.0.4 "
                   "(docs/http-metrics.md); needs +dsp on the queue manager",
        "parameters": [{"name": "queue", "in": "query", "required": False,
                        "description": "per-queue series only for these queues: a name or "
                                       "a prefix and '*', '!' before it to exclude",
                        "schema": {"type": "array", "items": {"type": "string"}},
                        "style": "form", "explode": True}],
        "responses": {"200": {"description": "the metrics (gzipped when accepted)",
                              "content": {"text/plain": {}}},
                      **{code: {"description": what, "content": {"application/json": {
                          "schema": {"$ref": "#/components/schemas/Error"}}}}
                         for code, what in (("400", "a queue pattern that is not one"),
                                            ("401", "no or wrong credentials"),
                                            ("403", "no +dsp on the queue manager"))}}}})


def backup_record_reader(qm_dir: Path) -> Callable[[], dict | None]:
    """Reads the queue manager's backup record (``backup/history.py``) at
    each scrape, off the loop."""
    return lambda: read_history(qm_dir)
