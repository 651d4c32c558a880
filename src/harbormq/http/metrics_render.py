"""The text of ``/metrics``: a snapshot (``metrics_snapshot.py``) named,
typed and rendered in the Prometheus exposition format, off the loop.

The names follow what operators already alert on: IBM MQ's
``mq_prometheus`` (``ibmmq_queue_depth``, ``..._oldest_message_age``,
``ibmmq_channel_status`` as MQCHS_* codes) and ``rabbitmq_prometheus``
(``..._total`` counters, units in the names, seconds and bytes), with the
prefix ``harbormq_`` and the ``qmgr`` label on every series
(docs/http-metrics.md lists them all).

prometheus_client makes every family (``families``) and writes the text of
all but the per-queue ones. Those are the bulk of a big queue manager's
scrape (11 series a queue), and prometheus_client writes about 20 µs a
sample: ``QueueFamilies.chunks`` writes them itself, a queue's label set
once for its 11 lines, in pieces between which the GIL goes to the loop,
and ``tests/http/test_metrics_render.py`` holds that text to be exactly
what ``generate_latest`` writes for the same families.

Not here: reading the core (``metrics_snapshot.py``), the route and its
threads (``metrics.py``).
"""

from __future__ import annotations

import shutil
import time
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.utils import floatToGoString

from ..recovery.need import replay_rate
from .metrics_snapshot import QueueColumns, Snapshot

PREFIX = "harbormq_"
#: per-queue lines written between two hand-overs of the GIL to the loop
CHUNK = 1000
#: gzip's fastest level: a scrape's text is repetitive enough (25 to 1)
GZIP_LEVEL = 1

#: DISPLAY CHSTATUS's STATUS as MQ's MQCHS_* values (what mq_prometheus reports)
CHANNEL_STATUS_CODES = {"INACTIVE": 0, "BINDING": 1, "STARTING": 2, "RUNNING": 3,
                        "STOPPING": 4, "RETRYING": 5, "STOPPED": 6, "REQUESTING": 7,
                        "PAUSED": 8, "DISCONNECTED": 9, "INITIALIZING": 13, "SWITCHING": 14}

#: the per-queue families: (name, type, help, column of QueueColumns)
QUEUE_FAMILIES: tuple[tuple[str, str, str, str], ...] = (
    ("queue_depth", "gauge", "Messages on the queue (DISPLAY QSTATUS CURDEPTH): committed and "
     "not got, plus uncommitted puts.", "depth"),
    ("queue_uncommitted_messages", "gauge", "Uncommitted puts and gets on the queue "
     "(DISPLAY QSTATUS UNCOM).", "uncommitted"),
    ("queue_oldest_message_age_seconds", "gauge", "Age of the oldest message a get could "
     "take (DISPLAY QSTATUS MSGAGE), 0 when there is none.", "oldest_age_s"),
    ("queue_max_depth", "gauge", "The queue's MAXDEPTH.", "max_depth"),
    ("queue_puts", "counter", "Messages put on the queue and committed since the queue "
     "manager started.", "puts"),
    ("queue_gets", "counter", "Messages got from the queue and committed since the queue "
     "manager started (expired ones not counted).", "gets"),
    ("queue_expired_messages", "counter", "Messages removed from the queue because they "
     "expired, since the queue manager started.", "expired"),
    ("queue_backouts", "counter", "Gets of the queue's messages backed out (each message "
     "is then delivered again) since the queue manager started.", "backouts"),
    ("queue_consumers", "gauge", "Subscriptions sharing the queue's messages.", "consumers"),
    ("queue_input_handles", "gauge", "Handles open on the queue for input (DISPLAY QSTATUS "
     "IPPROCS).", "input_handles"),
    ("queue_output_handles", "gauge", "Handles open on the queue for output (DISPLAY "
     "QSTATUS OPPROCS).", "output_handles"),
)


def _label_value(value: str) -> str:
    """A label value escaped as the text format wants (MQ names never need it)."""
    if "\\" in value or '"' in value or "\n" in value:
        value = value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def _family(name: str, kind: str, doc: str, labels: list[str]) -> Metric:
    cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
    return cls(PREFIX + name, doc, labels=labels)


class _Families:
    """What ``generate_latest`` takes: anything with ``collect``."""

    def __init__(self, families: Iterable[Metric]):
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


class QueueFamilies:
    """The per-queue series of one snapshot."""

    def __init__(self, qmgr: str, queues: QueueColumns):
        self.qmgr = qmgr
        self.queues = queues

    def families(self) -> Iterator[Metric]:
        """As prometheus_client families (the reference ``text`` is held to)."""
        for name, kind, doc, column in QUEUE_FAMILIES:
            fam = _family(name, kind, doc, ["qmgr", "queue"])
            for queue, value in zip(self.queues.names, self.queues.columns[column],
                                    strict=True):
                fam.add_metric([self.qmgr, queue], value)
            yield fam

    def chunks(self) -> Iterator[str]:
        """The text in pieces of CHUNK lines; between two pieces the GIL goes
        to the loop (``time.sleep(0)``) at once, not after the interpreter's
        switch interval (5 ms): no piece holds it long, however many queues."""
        qm = _label_value(self.qmgr)
        names = self.queues.names
        labels: list[str] = []
        for start in range(0, len(names), CHUNK):
            labels += [f'{{qmgr="{qm}",queue="{_label_value(name)}"}} '
                       for name in names[start:start + CHUNK]]
            time.sleep(0)
        for name, kind, doc, column in QUEUE_FAMILIES:
            fam = _family(name, kind, doc, ["qmgr", "queue"])
            yield generate_latest(_Families([fam])).decode()     # HELP and TYPE
            sample = fam.name + ("_total" if kind == "counter" else "")
            values = self.queues.columns[column]
            for start in range(0, len(values), CHUNK):
                # floatToGoString's spelling, a small integer's taken without a
                # call (this line runs 11 times a queue)
                yield "".join([
                    f"{sample}{lbl}{v}.0\n" if type(v) is int and v < 1_000_000
                    else f"{sample}{lbl}{floatToGoString(v)}\n"
                    for lbl, v in zip(labels[start:start + CHUNK],
                                      values[start:start + CHUNK], strict=True)])
                time.sleep(0)

    def text(self) -> str:
        return "".join(self.chunks())


def families(snap: Snapshot, *, free_space: dict[str, tuple[Path, int, int]],
             backups: dict | None, replay_bytes_per_s: float | None) -> list[Metric]:
    """Every family but the per-queue ones."""
    qm = snap.qmgr
    out: list[Metric] = []

    def one(name: str, kind: str, doc: str, value, **labels) -> None:
        fam = _family(name, kind, doc, ["qmgr", *labels])
        fam.add_metric([qm, *labels.values()], value)
        out.append(fam)

    def by(name: str, kind: str, doc: str, label: str, values: dict) -> None:
        fam = _family(name, kind, doc, ["qmgr", label])
        for key, value in values.items():
            fam.add_metric([qm, key], value)
        out.append(fam)

    # -- the queue manager
    one("qmgr_start_time_seconds", "gauge", "When the queue manager started (Unix time).",
        snap.started_s)
    one("qmgr_quiescing", "gauge", "1 while the queue manager is stopping.", int(snap.quiescing))
    one("queues", "gauge", "Local queues defined.", snap.queues_defined)
    one("connections", "gauge", "Connections now (DISPLAY QMSTATUS CONNS): STOMP clients, "
        "embedded API handles and HTTP requests running.", snap.connections)
    one("connections_opened", "counter", "Connections opened since the queue manager started.",
        snap.connections_opened)
    one("connections_closed", "counter", "Connections closed since the queue manager started.",
        snap.connections_closed)
    by("units_of_work", "gauge", "Units of work now, by state (prepared: in doubt).",
       "state", snap.uows)
    one("dead_lettered_messages", "counter", "Messages put on the dead-letter queue (DEADQ) "
        "and committed since the queue manager started.", snap.dead_lettered)
    one("redelivered_messages", "counter", "Gets backed out on every queue since the queue "
        "manager started: each message is delivered again.", snap.redelivered)
    one("expired_messages", "counter", "Messages that expired on every queue since the queue "
        "manager started.", snap.expired)
    # -- the log
    log = snap.log
    one("log_written_bytes", "counter", "Bytes of log records written since the log was "
        "created (the current LSN, DISPLAY QMSTATUS CURRLSN; extent headers and a dual "
        "log's second copy not counted).", log["end_lsn"])
    one("log_written_records", "counter", "Log records written since the queue manager "
        "started.", log["records"])
    one("log_forces", "counter", "Forces of the log to disk (group commits: the writes of "
        "one batch and their fdatasync) since the queue manager started.", snap.force_count)
    hist = HistogramMetricFamily(PREFIX + "log_force_duration_seconds", "How long a force "
                                 "of the log took: its batch's writes and fdatasync.",
                                 labels=["qmgr"])
    hist.add_metric([qm], [(floatToGoString(b), n) for b, n in snap.force_buckets],
                    snap.force_seconds)
    out.append(hist)
    one("log_restart_bytes", "gauge", "Bytes of log a restart would read now: from the "
        "restart point (DISPLAY QMSTATUS RECLSN) to the end.", log["restart_bytes"])
    if log["media_bytes"] is not None:
        one("log_media_recovery_bytes", "gauge", "Bytes of log media recovery of every object "
            "would read now: from the media recovery point (MEDIALSN) to the end (linear "
            "logs).", log["media_bytes"])
    one("log_reusable_bytes", "gauge", "Bytes of log extents neither restart nor media "
        "recovery needs (DISPLAY QMSTATUS REUSESZ): free circular extents, or linear extents "
        "that may be archived and deleted.", log["reusable_bytes"])
    one("log_archive_backlog_extents", "gauge", "Closed log extents not archived yet (linear "
        "logs with an archive path).", log["archive_backlog_extents"])
    one("log_archive_backlog_bytes", "gauge", "Bytes of closed log extents not archived yet.",
        log["archive_backlog_bytes"])
    by("log_extents", "gauge", "Log extents by state.", "state", log["extents"])
    one("log_extent_size_bytes", "gauge", "Size of one log extent.", log["extent_bytes"])
    one("log_producers_held", "gauge", "Producers held because a circular log has no spare "
        "extent (log-space flow control).", log["producers_held"])
    one("log_checkpoint_span_bytes", "gauge", "Bytes of log the last checkpoint spanned.",
        log["checkpoint_span_bytes"])
    one("log_dual_degraded", "gauge", "1 when a dual log has given one copy up.",
        int(bool(log["degraded"])))
    if replay_bytes_per_s:
        one("log_estimated_restart_seconds", "gauge", "Restart time predicted now: the log a "
            "restart would read over the replay rate the last long restart measured.",
            round(log["restart_bytes"] / replay_bytes_per_s, 3))
    # -- disks
    free = _family("filesystem_free_bytes", "gauge", "Free bytes (for the queue manager's "
                   "user) of the file system holding the log, its dual copy, the stores or "
                   "an archive path.", ["qmgr", "role", "path"])
    size = _family("filesystem_size_bytes", "gauge", "Size of that file system.",
                   ["qmgr", "role", "path"])
    for role, (path, total, avail) in free_space.items():
        free.add_metric([qm, role, str(path)], avail)
        size.add_metric([qm, role, str(path)], total)
    out += [free, size]
    # -- channels
    labels = ["qmgr", "channel", "type"]
    status = _family("channel_status", "gauge", "Channel status as MQ's MQCHS_* value "
                     "(0 inactive, 1 binding, 3 running, 5 retrying, 6 stopped).", labels)
    msgs = _family("channel_messages", "counter", "Messages the channel moved since it "
                   "started (DISPLAY CHSTATUS MSGS).", labels)
    batches = _family("channel_batches", "counter", "Batches the channel completed since it "
                      "started (DISPLAY CHSTATUS BATCHES).", labels)
    doubt = _family("channel_in_doubt", "gauge", "1 while the channel's last batch is in "
                    "doubt (DISPLAY CHSTATUS INDOUBT).", labels)
    seq = _family("channel_sequence_number", "gauge", "The channel's last committed "
                  "sequence number (DISPLAY CHSTATUS LSTSEQNO).", labels)
    for ch in snap.channels:
        key = [qm, ch["CHANNEL"], ch["CHLTYPE"]]
        status.add_metric(key, CHANNEL_STATUS_CODES.get(ch.get("STATUS", ""), 0))
        msgs.add_metric(key, ch.get("MSGS", 0) or 0)
        batches.add_metric(key, ch.get("BATCHES", 0) or 0)
        doubt.add_metric(key, int(ch.get("INDOUBT") == "YES"))
        seq.add_metric(key, ch.get("LSTSEQNO", 0) or 0)
    out += [status, msgs, batches, doubt, seq]
    # -- backups
    if backups:
        if backups.get("backup_time_s"):
            one("backup_last_time_seconds", "gauge", "When the last backup of this queue "
                "manager was taken (Unix time).", backups["backup_time_s"])
        if backups.get("verified_time_s"):
            one("backup_last_verified_time_seconds", "gauge", "When a backup of this queue "
                "manager was last verified by a trial restore (Unix time).",
                backups["verified_time_s"])
    # -- the last restart (while one runs, http/starting.py answers the scrape)
    one("restart_in_progress", "gauge", "1 while the queue manager is starting (restart "
        "recovery, then its services), 0 once it runs.", 0)
    restart = snap.restart
    if restart and restart.get("phases"):
        phases = restart["phases"]
        one("restart_duration_seconds", "gauge", "How long the last restart took, every "
            "phase together.", round(sum(phases.values()), 6))
        by("restart_phase_duration_seconds", "gauge", "How long each phase of the last "
           "restart took.", "phase", {k: round(v, 6) for k, v in phases.items()})
        one("restart_replayed_bytes", "gauge", "Bytes of log the last restart read.",
            restart.get("bytes_replayed", 0))
        one("restart_replayed_records", "gauge", "Log records the last restart read.",
            restart.get("records_replayed", 0))
        one("restart_units_of_work_backed_out", "gauge", "Units of work the last restart "
            "backed out.", restart.get("uows_backed_out", 0))
    # -- publish/subscribe
    one("topics", "gauge", "Topic objects defined.", snap.topics)
    if snap.subscriptions:
        by("subscriptions", "gauge", "Subscriptions now, durable or not.", "durability",
           snap.subscriptions)
        one("publications", "counter", "Publications since the queue manager started.",
            snap.publications)
    # -- the scrape itself
    one("scrape_loop_seconds", "gauge", "Time this scrape's snapshot took on the queue "
        "manager's loop, in steps that let message traffic run between them.",
        round(snap.loop_seconds, 6))
    one("scrape_longest_step_seconds", "gauge", "The longest of those steps: the longest "
        "this scrape held message traffic up.", round(snap.longest_step, 6))
    return out


def free_space(paths: dict[str, Path]) -> dict[str, tuple[Path, int, int]]:
    """role -> (path, size, bytes free to an unprivileged user) of each path's
    file system; a path that does not exist (yet) is left out."""
    out = {}
    for role, path in paths.items():
        try:
            usage = shutil.disk_usage(path)
        except OSError:
            continue
        out[role] = (path, usage.total, usage.free)
    return out


def render(snap: Snapshot, *, backups: dict | None = None, gzipped: bool = False) -> bytes:
    """The whole text of one scrape, gzipped when asked (run in a thread: it
    reads the disks). Gzipped piece by piece as the pieces come (zlib lets
    the GIL go while it compresses), so that no single step copies the whole
    text while holding the GIL (82 MB at 100,000 queues)."""
    rate = None
    if snap.log_dir is not None:
        rate = replay_rate(_LogDir(snap.log_dir))[0]
    head = generate_latest(_Families(families(
        snap, free_space=free_space(snap.paths), backups=backups,
        replay_bytes_per_s=rate)))
    pieces = (piece.encode() for piece in QueueFamilies(snap.qmgr, snap.queues).chunks())
    if not gzipped:
        return head + b"".join(pieces)
    gz = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)      # 31: the gzip format
    out = [gz.compress(head)]
    out += [gz.compress(piece) for piece in pieces]
    out.append(gz.flush())
    return b"".join(out)


class _LogDir:
    """What ``replay_rate`` reads of a log: its directory."""

    def __init__(self, path: Path):
        self.dir = path
