"""The web listener while the queue manager starts: the restart's status, live.

``server/`` opens the HTTP listener once the instance lock is held, before
restart recovery (docs/http.md, "While the queue manager starts"). Until
the queue manager runs, the listener serves only what is safe before the
core is whole:

* ``RestartStatus``: the restart's phases as they run, fed by the same
  progress callback the command line's bars use (``recovery/restart.py``'s
  ``Progress``): which phase runs, what of it is done of its total (queue
  stores opened in log initialisation, bytes of log in forward recovery,
  units of work in backward recovery, indexes),
  the time spent in each finished phase, elapsed, and an estimate of what
  remains of the running phase; then ``running`` or ``failed``;
* ``starting_gate``: the middleware that, until the status says running,
  lets through the console's page and files, the OpenAPI description,
  ``/console/api/session`` and ``/console/api/restart``, answers
  ``/metrics`` with the restart's gauges (``restart_metrics``), and answers
  anything else, once its caller has authenticated, 503 with MQ's error
  body, MQWB0059E and MQRC 2059 (MQRC_Q_MGR_NOT_AVAILABLE), and
  ``Retry-After``; the console's own JSON gets the restart's status in the
  same body, which its page draws as the starting view;
* ``add_routes``: ``GET /console/api/restart``, the status in every state
  (once running: the last restart's report).

Who may see it: the listener's own rules and users as after restart (HTTP
basic with ``users.json``, anonymous loopback with ``[web] connauth =
"optional"``), then +dsp on the queue manager (``authrecs.json``). Both
files are the queue manager's own, read as they are: restart neither reads
nor rebuilds them, so the check is the one made after restart. Nothing of
the core is read before restart ends.

Not here: the restart itself (``recovery/restart.py``), the listener
(``server.py``), the last restart's gauges once running (``metrics_render.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from aiohttp import web
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import generate_latest

from ..security import NotAuthorized
from .context import WebContext
from .errors import RestError
from .metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from .openapi import PATH as OPENAPI_PATH
from .openapi import describe

#: MQ's restart phases in their order (``RestartReport.phases``' names)
PHASES = ("log initialisation", "status rebuild", "forward recovery", "backward recovery",
          "index rebuild", "checkpoint")
#: after restart recovery, before the listeners open: publish/subscribe read
#: back, the channel initiator, the startup scripts, the STOMP listeners
SERVICES = "startup"
#: what a phase's figures count
UNITS = {"log initialisation": "queue stores", "forward recovery": "bytes",
         "backward recovery": "units of work", "index rebuild": "indexes"}
#: the phase that runs once another reports it is complete, until one reports
#: (status rebuild and the checkpoint report no progress of their own)
FOLLOWS = {"log initialisation": "status rebuild", "backward recovery": "checkpoint",
           "index rebuild": "checkpoint"}
#: the paths served whatever the state (no core behind them)
OPEN_PREFIXES = ("/console/static/",)
OPEN_PATHS = frozenset({"/console", "/console/", "/console/api/session", OPENAPI_PATH})
RESTART_PATH = "/console/api/restart"
#: seconds a client is told to wait before it asks again
RETRY_AFTER_S = 5
NOT_AVAILABLE = 2059


class RestartStatus:
    """The state of a starting queue manager, kept from restart's progress
    reports (``progress`` is a ``recovery/restart.py`` ``Progress``).
    ``clock`` is monotonic seconds (tests give their own)."""

    def __init__(self, qmgr: str, *, replay_rate: float | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.qmgr = qmgr
        #: bytes a second a restart replayed last time (``recovery/need.py``):
        #: forward recovery's estimate until it has measured its own
        self.replay_rate = replay_rate
        self.clock = clock
        self.state = "starting"
        self.started = clock()
        self.started_ns = time.time_ns()
        self.phase: str | None = PHASES[0]
        self.phase_started = self.started
        self.done = 0
        self.total = 0
        #: the seconds of each phase finished, in order
        self.finished: dict[str, float] = {}
        self.error: str | None = None
        #: when the start ended (running or failed): the elapsed time stops there
        self.ended: float | None = None
        #: the restart's report once it ended (``RestartReport.as_dict``)
        self.report: dict | None = None

    @property
    def running(self) -> bool:
        return self.state == "running"

    # -- what the restart and the server say --------------------------------------------
    def progress(self, phase: str, done: int, total: int) -> None:
        if phase != self.phase:
            self._enter(phase)
        self.done, self.total = done, total
        if done >= total and phase in FOLLOWS:
            self._enter(FOLLOWS[phase])

    def _enter(self, phase: str | None) -> None:
        now = self.clock()
        current = self.phase
        # a phase entered because the one before said it was complete is not
        # counted when an earlier phase reports after all (index rebuild after
        # the checkpoint was assumed)
        later = current in PHASES and phase in PHASES and \
            PHASES.index(phase) < PHASES.index(current)
        if current is not None and not later:
            self.finished[current] = self.finished.get(current, 0.0) + now - self.phase_started
        self.phase, self.phase_started = phase, now
        self.done = self.total = 0

    def restart_ended(self, report: dict | None) -> None:
        """Restart recovery is over (its report's exact phase times replace
        the ones seen); the services start."""
        self.report = report
        if report and report.get("phases"):
            self.finished = dict(report["phases"])
        self.phase, self.phase_started = SERVICES, self.clock()
        self.done = self.total = 0

    def now_running(self) -> None:
        self._end("running")

    def start_failed(self, error: BaseException) -> None:
        self.error = str(error) or type(error).__name__
        self._end("failed")

    def _end(self, state: str) -> None:
        """The start is over, the clock stops: running, the last phase is
        finished; failed, the phase it failed in stays the phase shown."""
        if state == "running" and self.phase is not None:
            self._enter(None)
        self.state, self.ended = state, self.clock()

    # -- what is shown --------------------------------------------------------------------
    def remaining_s(self) -> float | None:
        """What remains of the running phase at its pace so far (forward
        recovery before it has measured: at the last restart's replay rate);
        None when there is nothing to go by."""
        if self.state != "starting" or self.total <= 0:
            return None
        left = max(0, self.total - self.done)
        spent = self.clock() - self.phase_started
        if self.done > 0 and spent > 0:
            return round(spent / self.done * left, 3)
        if self.phase == "forward recovery" and self.replay_rate:
            return round(left / self.replay_rate, 3)
        return None

    def as_dict(self) -> dict:
        now = self.clock() if self.ended is None else self.ended
        current = self.phase

        def phase_state(name: str) -> str:
            if name == current:
                return "failed" if self.state == "failed" else "running"
            return "done" if name in self.finished else "waiting"
        phases = [{"name": name, "state": phase_state(name),
                   "seconds": round(now - self.phase_started, 3) if name == current
                   else round(self.finished.get(name, 0.0), 3)}
                  for name in (*PHASES, SERVICES)]
        return {
            "qmgr": self.qmgr, "state": self.state, "phase": current,
            "phase_number": PHASES.index(current) + 1 if current in PHASES else None,
            "done": self.done, "total": self.total, "unit": UNITS.get(current or "", ""),
            "fraction": round(min(1.0, self.done / self.total), 4) if self.total > 0 else None,
            "elapsed_s": round(now - self.started, 3),
            "phase_elapsed_s": round(now - self.phase_started, 3) if current else None,
            "remaining_s": self.remaining_s(), "phases": phases,
            "started_time_ns": self.started_ns, "error": self.error,
            "restart": self.report, "time_ns": time.time_ns(),
        }


def restart_metrics(status: RestartStatus) -> bytes:
    """``/metrics`` while the queue manager starts: the restart's gauges
    (docs/http-metrics.md), in the text format."""
    qm, d = status.qmgr, status.as_dict()
    families = []

    def gauge(name: str, doc: str, value, **labels) -> None:
        fam = GaugeMetricFamily(f"harbormq_{name}", doc, labels=["qmgr", *labels])
        fam.add_metric([qm, *labels.values()], value)
        families.append(fam)
    gauge("restart_in_progress", "1 while the queue manager is starting (restart recovery, "
          "then its services), 0 once it runs.", 1 if d["state"] == "starting" else 0)
    gauge("restart_failed", "1 when the start failed (until the process ends).",
          1 if d["state"] == "failed" else 0)
    phase = GaugeMetricFamily("harbormq_restart_current_phase", "1 for the phase the "
                              "starting queue manager is in, 0 for the others.",
                              labels=["qmgr", "phase"])
    for p in d["phases"]:
        phase.add_metric([qm, p["name"]], 1 if p["state"] == "running" else 0)
    families.append(phase)
    finished = GaugeMetricFamily("harbormq_restart_phase_duration_seconds", "How long each "
                                 "phase of the restart took (the phases finished so far).",
                                 labels=["qmgr", "phase"])
    for p in d["phases"]:
        if p["state"] == "done":
            finished.add_metric([qm, p["name"]], p["seconds"])
    families.append(finished)
    if d["phase"] is not None:
        gauge("restart_phase_done", "What the running phase has done, in its unit: queue "
              "stores opened (log initialisation), bytes of log (forward recovery), units "
              "of work (backward recovery), indexes.",
              d["done"], phase=d["phase"], unit=d["unit"])
        gauge("restart_phase_total", "What the running phase has to do, in its unit (forward "
              "recovery: at most, to the end of the last extent).", d["total"],
              phase=d["phase"], unit=d["unit"])
    gauge("restart_elapsed_seconds", "Seconds since the start began.", d["elapsed_s"])
    if d["remaining_s"] is not None:
        gauge("restart_phase_estimated_remaining_seconds", "What remains of the running "
              "phase at its pace so far.", d["remaining_s"])

    class Collector:
        def collect(self):
            return families
    return generate_latest(Collector())


def not_available(status: RestartStatus, *, with_status: bool,
                  may_read_status: bool) -> web.Response:
    """MQ's answer for a queue manager that is not available yet (503, 2059);
    the restart's status in the body when ``with_status``. Why a start failed
    (paths, the log's state) is said only to a caller who may read the status."""
    failed = status.state == "failed"
    why = f" ({status.error})" if may_read_status else ""
    error = RestError(503, "MQWB0059E", f"queue manager {status.qmgr} is " +
                      (f"not available: its start failed{why}" if failed else
                       "starting: restart recovery is running (MQRC 2059 "
                       "Q_MGR_NOT_AVAILABLE)"), reason=NOT_AVAILABLE,
                      explanation="The queue manager is not available: it is starting, "
                      "or its start failed.",
                      action="See the restart's progress (/console/api/restart) and retry "
                      "once it runs." if not failed else "See the operator log.")
    body = error.body()
    if with_status:
        body["restart"] = status.as_dict()
    headers = {} if failed else {"Retry-After": str(RETRY_AFTER_S)}
    return web.json_response(body, status=503, headers=headers)


async def require_status_reader(context: WebContext, request: web.Request) -> None:
    """Who may read the start's status: an authenticated caller (401
    otherwise) with +dsp on the queue manager (NotAuthorized: 403)."""
    auth = context.authenticator
    principal = await auth.principal(request)
    auth.require(principal, "QMGR", context.qmgr_name, "DSP")


def starting_gate(context: WebContext):
    """The middleware that keeps every feature behind it until the queue
    manager runs (see the module); once running it only passes requests on."""
    status = context.starting

    async def may_read_status(request: web.Request) -> bool:
        try:
            await require_status_reader(context, request)
        except NotAuthorized:
            return False            # the 503 without the status
        return True

    @web.middleware
    async def gate(request: web.Request, handler):
        if status is None or status.running:
            return await handler(request)
        path = request.path
        if path in OPEN_PATHS or path.startswith(OPEN_PREFIXES) or path == RESTART_PATH:
            return await handler(request)
        if path == "/metrics":
            await require_status_reader(context, request)
            return web.Response(body=restart_metrics(status),
                                headers={"Content-Type": METRICS_CONTENT_TYPE})
        allowed = await may_read_status(request)
        return not_available(status, with_status=allowed and path.startswith("/console/api/"),
                             may_read_status=allowed)
    return gate


def add_routes(app: web.Application, context: WebContext) -> None:
    """``GET /console/api/restart``: the start's status (+dsp on the queue manager)."""
    async def restart_status(request: web.Request) -> web.Response:
        await require_status_reader(context, request)
        status = context.starting
        if status is None:           # (a listener without a start to follow)
            report = context.restart_report() if context.restart_report else None
            return web.json_response({"qmgr": context.qmgr_name, "state": "running",
                                      "phase": None, "restart": report,
                                      "time_ns": time.time_ns()})
        return web.json_response(status.as_dict())

    app.router.add_get(RESTART_PATH, restart_status)
    describe(app, RESTART_PATH, {"get": {
        "summary": "web console: the queue manager's start, live: state (starting, running, "
                   "failed), the restart's phase, done of total, elapsed, the estimate of "
                   "what remains; answered while restart recovery runs (+dsp on the queue "
                   "manager)", "tags": ["console"],
        "responses": {"200": {"description": "the start's status"},
                      "401": {"description": "not logged in"},
                      "403": {"description": "no +dsp on the queue manager (MQRC 2035)"}}}})
