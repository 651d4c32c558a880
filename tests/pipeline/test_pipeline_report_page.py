"""The report's page for people, opened in headless Chromium: the summary comes
first with the figures of report.json, times are wall-clock, every plot is
drawn, and the JSON is linked rather than dumped on the page."""

from __future__ import annotations

import json
import time

from support.screenshots import keep_screenshot

from harbormq.pipeline.logdata import LogInput
from harbormq.pipeline.report import run_report
from harbormq.pipeline.report_page import byte_unit, duration_unit, human_bytes, human_duration


def test_units_suit_the_figures():
    assert byte_unit(512) == (1, "bytes") and byte_unit(3_500_000) == (1e6, "MB")
    assert duration_unit(0.004) == (1e-3, "ms") and duration_unit(90) == (60, "minutes")
    assert duration_unit(7200) == (3600, "hours")
    assert human_bytes(2_500_000) == "2.5 MB" and human_bytes(12) == "12 bytes"
    assert human_duration(0.0123) == "12 ms" and human_duration(150) == "2.5 minutes"


def test_report_page_in_a_browser(tmp_path, spark, make_qm, open_qm, browser):
    make_qm("QM1")
    qm = open_qm("QM1")
    qm.define_queue("ORDERS", DEFPSIST="YES")
    qm.define_queue("PAY.OUT", DEFPSIST="YES")
    for i in range(20):
        qm.put("ORDERS", f"order {i}".encode())
    qm.checkpoint()
    time.sleep(1.1)                       # a second bucket of clock time
    with qm.begin() as u:
        for _ in range(5):
            u.get("ORDERS")
        u.put("PAY.OUT", b"paid")
    qm.checkpoint()
    out = tmp_path / "report"
    rep = run_report(spark, LogInput(log=str(qm.config.log_dir)).records(spark), out)
    written = json.loads((out / "report.json").read_text())
    assert written["summary"]["records"] == rep["records"] > 0
    assert written["queues"]["ORDERS"]["puts_total"] == 20
    assert written["queues"]["ORDERS"]["gets_total"] == 5
    assert rep["summary"]["queues"] == 2 and rep["summary"]["span_seconds"] >= 1

    browser.get((out / "index.html").as_uri())
    figures = {c.get_attribute("data-figure"): c.find_element("css selector", ".figure").text
               for c in browser.find_elements("css selector", "#summary .card")}
    assert figures["records"] == f"{rep['records']:,}"
    assert figures["units_of_work"] == f"{rep['summary']['units_of_work']:,}"
    assert figures["queues"] == "2"
    assert figures["span"].endswith("seconds")
    # the summary is the first section, wall-clock times in the header, JSON linked
    first = browser.find_element("css selector", "main section")
    assert first.get_attribute("id") == "summary"
    assert "UTC" in browser.find_element("id", "span").text
    assert browser.find_element("id", "json-link").get_attribute("href").endswith("report.json")
    assert not browser.find_elements("css selector", "pre")
    # every plot loaded; the queue table has the totals
    images = browser.find_elements("css selector", "img")
    assert len(images) == 4                # retention, durations, two queues
    for img in images:
        assert browser.execute_script("return arguments[0].complete && "
                                      "arguments[0].naturalWidth > 0", img), \
            img.get_attribute("src")
    rows = {r.find_elements("css selector", "td")[0].text:
            [td.text for td in r.find_elements("css selector", "td")]
            for r in browser.find_elements("css selector", "#queues tbody tr")}
    assert rows["ORDERS"][1:5] == ["20", "5", "20", "15"]
    # the page is styled (a stylesheet applies, not the browser's default serif)
    family = browser.execute_script(
        "return getComputedStyle(document.body).fontFamily")
    assert "system-ui" in family
    keep_screenshot(browser, "pipeline", "report")
