"""The report's page for people, opened in headless Chromium: a report made by
hand (no Spark; tests/pipeline/test_pipeline_spark.py opens a real one the
same way) drawn by ``report_page.write_page``: the summary comes first with
the report's figures, times are wall-clock, every plot is drawn, report.json
is linked rather than dumped on the page, units suit the figures."""

from __future__ import annotations

from support.report_page import check_report_page
from support.screenshots import keep_screenshot

from harbormq.pipeline.report_page import (
    byte_unit,
    duration_unit,
    human_bytes,
    human_duration,
    summary,
    write_page,
)

T0 = 1_795_000_000_000_000_000          # a wall-clock time (ns)
S = 1_000_000_000


def test_units_suit_the_figures():
    assert byte_unit(512) == (1, "bytes") and byte_unit(3_500_000) == (1e6, "MB")
    assert duration_unit(0.004) == (1e-3, "ms") and duration_unit(90) == (60, "minutes")
    assert duration_unit(7200) == (3600, "hours")
    assert human_bytes(2_500_000) == "2.5 MB" and human_bytes(12) == "12 bytes"
    assert human_duration(0.0123) == "12 ms" and human_duration(150) == "2.5 minutes"


def made_report() -> dict:
    """Ten minutes of log in one-minute buckets: ORDERS busy in its first three
    and last minute (30 messages left from the first), PAY.OUT once; three
    checkpoints; 42 units of work."""
    def queue(buckets, puts, gets, depth, ages):
        return {"buckets": buckets, "bucket_start_ns": [T0 + b * 60 * S for b in buckets],
                "puts_per_minute": puts, "gets_per_minute": gets, "depth": depth,
                "oldest_age_s": ages, "puts_total": sum(puts), "gets_total": sum(gets)}
    report = {
        "records": 12_345, "first_ts_ns": T0, "last_ts_ns": T0 + 599 * S, "first_lsn": 4096,
        "bucket_seconds": 60.0,
        "retention": [{"lsn": 10_000 * (i + 1), "ts_ns": T0 + 200 * i * S,
                       "restart_lsn": 5_000 * i, "log_bytes_needed": 2_000_000 * (i + 1),
                       "restart_extent_first_lsn": 0} for i in range(3)],
        "uows": {"by_outcome": {"committed": 40, "backed out": 2},
                 "duration_ms_quantiles": {"p50": 3.0, "p90": 12.0, "p99": 80.0,
                                           "max": 1500.0},
                 "duration_ms_histogram_log10": {0: 30, 1: 10, 3: 2},
                 "longest": [{"uow_id": 7, "duration_ms": 1500.0, "outcome": "committed",
                              "operations": 12}],
                 "in_doubt_at_end": [], "in_flight_at_end": []},
        "queues": {"ORDERS": queue(list(range(10)), [120, 60] + [0] * 7 + [30],
                                   [0, 60, 90] + [0] * 6 + [30], [120, 120] + [30] * 8,
                                   [30.0 + 60 * b for b in range(10)]),
                   "PAY.OUT": queue([4], [1], [0], [1], [12.0])},
        "topics": {"prices/eur": {"publications": 5, "deliveries": 10, "queues_reached": 2,
                                  "body_bytes": 500, "log_bytes": 900, "first_ns": T0,
                                  "last_ns": T0 + 60 * S}},
    }
    report["summary"] = summary(report)
    return report


def test_report_page_in_a_browser(tmp_path, browser):
    report = made_report()
    assert report["summary"]["span"] == "10.0 minutes"
    written = write_page(report, tmp_path)
    assert written == ["retention.png", "uow_durations.png", "queue_ORDERS.png",
                       "queue_PAY.OUT.png", "index.html"]
    rows = check_report_page(browser, tmp_path, report)
    # queue, puts, gets, highest depth, depth at the end, oldest message age
    assert rows["ORDERS"] == ["ORDERS", "210", "180", "120", "30", "9.5 minutes"]
    text = browser.execute_script("return document.body.innerText")
    assert "at most 6.0 MB, at the last checkpoint 6.0 MB" in text     # sizes in units
    assert "1.5 seconds" in text                                        # the longest UoW
    assert "prices/eur" in text
    keep_screenshot(browser, "pipeline", "report")
