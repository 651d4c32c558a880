"""The text of /metrics without a queue manager: the per-queue lines written
by hand are exactly what prometheus_client writes, every family parses by
prometheus_client's own parser with the type it was given, and the
``?queue=`` patterns select what they say."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from harbormq.http import metrics_render
from harbormq.http.metrics import BadQueuePattern, queue_selector
from harbormq.http.metrics_render import QUEUE_FAMILIES, QueueFamilies, _Families, render
from harbormq.http.metrics_snapshot import QueueColumns, Snapshot

NAMES = ["APP.IN", "SYSTEM.DEAD.LETTER.QUEUE", "a/b%c", 'odd"\\name']


def rows() -> QueueColumns:
    """Values that take every spelling: 0, small and big integers, fractions."""
    out = QueueColumns()
    for i, name in enumerate(NAMES):
        big = 10 ** (i + 4) + i           # 10,000 .. 10,000,003: past 1e6 takes an exponent
        out.add(name, big, i, 0.000123 * i + i * 3600, 999_999_999, big * 7, big, i,
                2 ** 40 + i, i, i + 1, 0)
    return out


def test_queue_lines_are_what_prometheus_client_writes():
    fams = QueueFamilies("QM.ONE", rows())
    reference = generate_latest(_Families(list(fams.families()))).decode()
    assert fams.text() == reference
    assert reference.count("\n") == len(QUEUE_FAMILIES) * (len(rows()) + 2)


def test_queue_lines_written_in_chunks_are_the_same(monkeypatch):
    whole = QueueFamilies("QM", rows()).text()
    monkeypatch.setattr(metrics_render, "CHUNK", 3)     # 4 queues: chunks of 3 and 1
    assert QueueFamilies("QM", rows()).text() == whole


def test_no_queue_rows_still_declares_the_families():
    fams = QueueFamilies("QM", QueueColumns())
    assert fams.text() == generate_latest(_Families(list(fams.families()))).decode()


def snapshot() -> Snapshot:
    snap = Snapshot(qmgr="QM1", taken_s=1.7e9, started_s=1.7e9 - 60, quiescing=False,
                    queues=rows(), queues_defined=4, connections=3, connections_opened=9,
                    connections_closed=6, uows={"active": 2, "prepared": 1, "backing_out": 0},
                    dead_lettered=5, channels=[
                        {"CHANNEL": "TO.B", "CHLTYPE": "SDR", "STATUS": "RUNNING", "MSGS": 12,
                         "BATCHES": 3, "INDOUBT": "YES", "LSTSEQNO": 40},
                        {"CHANNEL": "FROM.B", "CHLTYPE": "RCVR", "STATUS": "INACTIVE",
                         "INDOUBT": "NO", "LSTSEQNO": 7}],
                    restart={"phases": {"log initialisation": 0.5, "forward recovery": 1.25},
                             "bytes_replayed": 4096, "records_replayed": 12,
                             "uows_backed_out": 1},
                    topics=2, subscriptions={"durable": 1, "nondurable": 2}, publications=8)
    snap.log = {"log_type": "linear", "extent_bytes": 1 << 20, "end_lsn": 5 << 20,
                "records": 100, "restart_lsn": 4 << 20, "checkpoint_lsn": 4 << 20,
                "restart_bytes": 1 << 20, "media_bytes": 3 << 20, "reusable_bytes": 1 << 20,
                "archive_backlog_extents": 2, "archive_backlog_bytes": 2 << 20,
                "extents": {"active": 1, "full": 4, "free": 0}, "dual": False, "degraded": "",
                "producers_held": 0, "checkpoint_span_bytes": 300}
    snap.expired, snap.redelivered = 4, 6
    snap.force_buckets = [(0.001, 3), (0.01, 9), (float("inf"), 10)]
    snap.force_seconds, snap.force_count = 0.05, 10
    snap.paths = {"log": Path("/"), "stores": Path("/no/such/dir")}
    return snap


def test_every_family_parses_with_its_type():
    text = render(snapshot(), backups={"backup_time_s": 1.69e9, "verified_time_s": 1.695e9})
    fams = {f.name: f for f in text_string_to_metric_families(text.decode())}
    want = {"harbormq_queue_depth": "gauge", "harbormq_queue_puts": "counter",
            "harbormq_queue_oldest_message_age_seconds": "gauge",
            "harbormq_connections_opened": "counter", "harbormq_units_of_work": "gauge",
            "harbormq_log_written_bytes": "counter", "harbormq_log_forces": "counter",
            "harbormq_log_force_duration_seconds": "histogram",
            "harbormq_channel_status": "gauge", "harbormq_channel_messages": "counter",
            "harbormq_backup_last_time_seconds": "gauge",
            "harbormq_backup_last_verified_time_seconds": "gauge",
            "harbormq_restart_phase_duration_seconds": "gauge",
            "harbormq_filesystem_free_bytes": "gauge", "harbormq_subscriptions": "gauge",
            "harbormq_dead_lettered_messages": "counter"}
    for name, kind in want.items():
        assert fams[name].type == kind, name
    for fam in fams.values():
        for s in fam.samples:
            assert s.labels["qmgr"] == "QM1", s
    depth = {s.labels["queue"]: s.value for s in fams["harbormq_queue_depth"].samples}
    assert depth == dict(zip(NAMES, rows().columns["depth"], strict=True))   # escaped well
    status = {s.labels["channel"]: s.value for s in fams["harbormq_channel_status"].samples}
    assert status == {"TO.B": 3, "FROM.B": 0}
    hist = {s.name + s.labels.get("le", ""): s.value
            for s in fams["harbormq_log_force_duration_seconds"].samples}
    assert hist["harbormq_log_force_duration_seconds_bucket+Inf"] == 10
    assert hist["harbormq_log_force_duration_seconds_count"] == 10
    phases = {s.labels["phase"]: s.value
              for s in fams["harbormq_restart_phase_duration_seconds"].samples}
    assert phases == {"log initialisation": 0.5, "forward recovery": 1.25}
    roles = {s.labels["role"] for s in fams["harbormq_filesystem_free_bytes"].samples}
    assert roles == {"log"}               # a path that does not exist is left out


def test_gzipped_piece_by_piece_is_the_text(monkeypatch):
    monkeypatch.setattr(metrics_render, "CHUNK", 3)
    snap = snapshot()
    snap.paths = {}         # (free space moves between two renders)
    assert gzip.decompress(render(snap, gzipped=True)) == render(snap)


@pytest.mark.parametrize("patterns, chosen", [
    ([], {"APP.IN", "APP.OUT", "SYSTEM.DEAD.LETTER.QUEUE", "B"}),
    (["APP.*"], {"APP.IN", "APP.OUT"}),
    (["APP.*", "B"], {"APP.IN", "APP.OUT", "B"}),
    (["!SYSTEM.*"], {"APP.IN", "APP.OUT", "B"}),
    (["APP.*", "!APP.OUT"], {"APP.IN"}),
    (["!*"], set()),
])
def test_queue_patterns(patterns, chosen):
    names = {"APP.IN", "APP.OUT", "SYSTEM.DEAD.LETTER.QUEUE", "B"}
    selected = queue_selector(patterns)
    assert {n for n in names if selected is None or selected(n)} == chosen


@pytest.mark.parametrize("bad", ["", "!", "A*B", "*A*"])
def test_a_bad_queue_pattern_is_named(bad):
    with pytest.raises(BadQueuePattern, match="generic names"):
        queue_selector([bad])
