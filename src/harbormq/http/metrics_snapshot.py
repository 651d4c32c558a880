"""The numbers a scrape of ``/metrics`` reports, copied from the running
queue manager on its loop, in small steps.

``take_snapshot`` reads the core's own figures (the same ones DISPLAY
QSTATUS, DISPLAY QMSTATUS, DISPLAY LOG, DISPLAY CONN and DISPLAY CHSTATUS
show) into plain lists and dicts: O(queues) attribute reads, a walk of a
few keys for the oldest message of a queue that holds messages, and one
pass over the connections' handles. It yields the loop after every few
milliseconds of work, so a scrape of 100,000 queues never holds message
traffic up for longer than that. What needs no core state (free space,
the backup record, the replay rate) is read later, off the loop, by the
renderer (``metrics_render.py``); the text is made there too.

Not here: names, help texts and types of the metrics (``metrics_render.py``),
the route (``metrics.py``).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..core.engine import QueueManagerCore
from ..core.objects import DEAD_LETTER_QUEUE
from ..core.queue_figures import oldest_put_ns
from ..errors import HarbormqError

#: loop time one step of a snapshot may take before it lets other work run
STEP_SECONDS = 0.004
#: queues read between two looks at the clock
CLOCK_EVERY = 64
#: keys walked at most per queue to find its oldest message (DISPLAY QSTATUS
#: walks up to 100,000: a scrape of many deep queues must stay cheap)
AGE_SCAN_LIMIT = 2_000


class QueueColumns:
    """Every selected queue's figures, a list per figure (one row a queue).
    Columns, not a tuple a queue: numbers and names are not tracked by the
    garbage collector, so a scrape of 100,000 queues allocates nothing that
    starts a collection (a full one over a big queue manager's objects took
    a third of a second on the loop)."""

    #: the figures, in the order of ``add``'s arguments after the name
    FIELDS = ("depth",            # CURDEPTH: committed, not got, plus uncommitted puts
              "uncommitted",      # uncommitted puts and gets (DISPLAY QSTATUS UNCOM)
              "oldest_age_s",     # MSGAGE (0 when no message is available)
              "max_depth", "puts", "gets", "expired", "backouts",
              "consumers",        # subscriptions sharing its messages (STOMP)
              "input_handles",    # IPPROCS
              "output_handles")   # OPPROCS

    def __init__(self) -> None:
        self.names: list[str] = []
        self.columns: dict[str, list] = {f: [] for f in self.FIELDS}

    def add(self, name: str, *figures) -> None:
        self.names.append(name)
        for column, value in zip(self.columns.values(), figures, strict=True):
            column.append(value)

    def __len__(self) -> int:
        return len(self.names)

    def row(self, name: str) -> dict:
        """One queue's figures by name (tests, tools)."""
        i = self.names.index(name)
        return {f: c[i] for f, c in self.columns.items()}


class RestartFacts(Protocol):
    """Where the last restart's report comes from (``RunningQueueManager``,
    the embedded API): a dict as ``RestartReport.as_dict`` gives, or None."""

    def __call__(self) -> dict | None: ...


@dataclass
class Snapshot:
    qmgr: str
    taken_s: float                          # wall clock, seconds
    started_s: float                        # when this queue manager started
    quiescing: bool
    queues: QueueColumns = field(default_factory=QueueColumns)
    queues_defined: int = 0
    connections: int = 0
    connections_opened: int = 0
    connections_closed: int = 0
    uows: dict[str, int] = field(default_factory=dict)
    dead_lettered: int = 0
    #: expiries and gets backed out on every queue, selected or not
    expired: int = 0
    redelivered: int = 0
    log: dict[str, Any] = field(default_factory=dict)
    force_buckets: list[tuple[float, int]] = field(default_factory=list)
    force_seconds: float = 0.0
    force_count: int = 0
    #: role -> directory whose file system's free space is reported
    paths: dict[str, Path] = field(default_factory=dict)
    log_dir: Path | None = None
    channels: list[dict] = field(default_factory=list)
    restart: dict | None = None
    topics: int = 0
    subscriptions: dict[str, int] = field(default_factory=dict)
    publications: int = 0
    #: loop time the snapshot took, the steps it took it in, the longest step
    loop_seconds: float = 0.0
    steps: int = 0
    longest_step: float = 0.0


class Stepper:
    """Lets the loop run other work once a step has used STEP_SECONDS."""

    def __init__(self) -> None:
        self.started = self.step_started = time.perf_counter()
        self.busy = 0.0
        self.steps = 1
        self.longest = 0.0

    async def maybe_yield(self) -> None:
        now = time.perf_counter()
        if now - self.step_started >= STEP_SECONDS:
            self._step_ends(now)
            await asyncio.sleep(0)
            self.steps += 1
            self.step_started = time.perf_counter()

    def _step_ends(self, now: float) -> None:
        took = now - self.step_started
        self.busy += took
        self.longest = max(self.longest, took)

    def done(self) -> float:
        """The loop time of every step (the last one ends now)."""
        self._step_ends(time.perf_counter())
        return self.busy


async def take_snapshot(core: QueueManagerCore, *, restart: RestartFacts | None = None,
                        selected=None) -> Snapshot:
    """The queue manager's figures now. ``selected(name) -> bool`` picks the
    queues that get rows of their own (all when None); totals count every
    queue."""
    step = Stepper()
    now_ns = time.time_ns()
    snap = Snapshot(qmgr=core.name, taken_s=now_ns / 1e9, started_s=core.started_ns / 1e9,
                    quiescing=bool(core.stopping))
    _take_core(core, snap)
    handles = _handles_by_queue(core)
    dlq = core.qmgr_attrs.get("DEADQ") or DEAD_LETTER_QUEUE
    # the names alone: a list of (name, queue) pairs would be 100,000 tuples
    # kept alive, enough to start a full collection of the garbage collector
    queues = list(core.queues)
    snap.queues_defined = len(queues)
    cols = snap.queues.columns
    names = snap.queues.names.append
    depths, uncommitted, ages = cols["depth"].append, cols["uncommitted"].append, \
        cols["oldest_age_s"].append
    max_depths, puts, gets = cols["max_depth"].append, cols["puts"].append, cols["gets"].append
    expiries, outs, consumers = cols["expired"].append, cols["backouts"].append, \
        cols["consumers"].append
    inputs, outputs = cols["input_handles"].append, cols["output_handles"].append
    expired = backouts = 0
    by_name = core.queues
    for i, name in enumerate(queues):
        if i % CLOCK_EVERY == 0:
            await step.maybe_yield()
        q = by_name.get(name)
        if q is None:
            continue            # deleted while the loop ran other work
        expired += q.expired_total
        backouts += q.backouts_total
        if name == dlq:
            snap.dead_lettered = q.puts_total
        if selected is not None and not selected(name):
            continue
        available = q.depth - len(q.locked)
        age = 0.0
        if available > 0 and not q.damaged and not q.recreating:
            try:
                oldest = oldest_put_ns(q, now_ns, AGE_SCAN_LIMIT)
            except HarbormqError:       # its store is damaged: the queue says so elsewhere
                oldest = 0
            if oldest:
                age = max(0.0, (now_ns - oldest) / 1e9)
        # (one append a column rather than QueueColumns.add: 100,000 calls fewer)
        names(name)
        depths(q.curdepth)
        uncommitted(q.uncommitted_puts + len(q.locked))
        ages(age)
        max_depths(q.attrs.get("MAXDEPTH", 0))
        puts(q.puts_total)
        gets(q.removed_total - q.expired_total)
        expiries(q.expired_total)
        outs(q.backouts_total)
        consumers(len(q.consumers))
        ip_op = handles.get(name)
        inputs(ip_op[0] if ip_op else 0)
        outputs(ip_op[1] if ip_op else 0)
    snap.expired, snap.redelivered = expired, backouts
    await step.maybe_yield()
    snap.channels = _channel_rows(core)
    snap.restart = restart() if restart is not None else None
    snap.loop_seconds = step.done()
    snap.steps, snap.longest_step = step.steps, step.longest
    return snap


def _take_core(core: QueueManagerCore, snap: Snapshot) -> None:
    """Everything but the queues and channels: O(connections + units of work
    + extents) plain reads."""
    conns = core.connections
    snap.connections = len(conns)
    snap.connections_opened = conns.opened_total
    snap.connections_closed = conns.closed_total
    uows: dict[str, int] = {"active": 0, "prepared": 0, "backing_out": 0}
    for u in list(core.uows.values()):
        if u.state in uows:
            uows[u.state] += 1
    snap.uows = uows
    snap.log = _log_figures(core)
    times = core.log.force_times
    snap.force_buckets = times.cumulative()
    snap.force_seconds, snap.force_count = times.seconds, times.count
    config = core.config
    snap.log_dir = core.log.dir
    snap.paths = {"log": core.log.dir, "stores": config.queues_dir}
    if core.log.dual_dir is not None:
        snap.paths["log_dual"] = core.log.dual_dir
    for i, path in enumerate(config.log_archive_paths):
        snap.paths[f"archive{i + 1}" if i else "archive"] = Path(path)
    topics = 0
    for d in core.objects.values():
        topics += d["type"] == "TOPIC"
    snap.topics = topics
    pubsub = core.pubsub
    if pubsub is not None:
        durable = sum(1 for s in list(pubsub.subs.values()) if getattr(s, "durable", False))
        snap.subscriptions = {"durable": durable, "nondurable": len(pubsub.subs) - durable}
        snap.publications = pubsub.publications


def _log_figures(core: QueueManagerCore) -> dict[str, Any]:
    """The log's figures (those of DISPLAY QMSTATUS and DISPLAY LOG, in bytes)."""
    log = core.log
    st = log.state
    linear = st.log_type == "linear"
    size = log.extent_size
    end = log.end_lsn
    oldest_needed = min(st.restart_lsn, st.media_lsn) if linear else st.restart_lsn
    by_state: dict[str, int] = {"active": 0, "full": 0, "free": 0}
    reusable = backlog = 0
    archiving = linear and bool(core.config.log_archive_paths)
    for e in list(st.extents):
        by_state[e.state] = by_state.get(e.state, 0) + 1
        if e.state == "free":
            reusable += 1
        elif e.state == "full" and not e.deleted:
            if linear and e.end_lsn is not None and e.end_lsn <= oldest_needed:
                reusable += 1       # neither restart nor media recovery needs it
            if archiving and not e.archived:
                backlog += 1
    return {
        "log_type": st.log_type, "extent_bytes": size, "end_lsn": end,
        "records": log.records_before_checkpoint + log.records_since_checkpoint,
        "restart_lsn": st.restart_lsn, "checkpoint_lsn": st.checkpoint_lsn,
        "restart_bytes": max(0, end - st.restart_lsn),
        "media_bytes": max(0, end - st.media_lsn) if linear else None,
        "reusable_bytes": reusable * size, "archive_backlog_extents": backlog,
        "archive_backlog_bytes": backlog * size, "extents": by_state,
        "dual": log.dual_dir is not None, "degraded": st.degraded or "",
        "producers_held": core.producers_held(),
        "checkpoint_span_bytes": core.checkpoint_span_last,
    }


def _handles_by_queue(core: QueueManagerCore) -> dict[str, tuple[int, int]]:
    """IPPROCS and OPPROCS of every queue, in one pass over the handles."""
    out: dict[str, tuple[int, int]] = {}
    for conn in core.connections:
        for h in list(conn.handles.values()):
            ip, op = out.get(h.queue, (0, 0))
            out[h.queue] = (ip + h.input, op + h.output)
    return out


def _channel_rows(core: QueueManagerCore) -> list[dict]:
    """DISPLAY CHSTATUS(*)'s rows, when the channel initiator runs here."""
    if core.channels is None:
        return []
    try:
        return core.channels.status("*")
    except HarbormqError:
        return []
