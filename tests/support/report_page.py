"""The checks of the pipeline report's page (``index.html``) in a real browser,
shared by the report's tests: the summary first with the report's figures,
wall-clock times, every plot drawn, report.json linked and not dumped, a
stylesheet applied, the queue table's totals."""

from __future__ import annotations

from pathlib import Path


def check_report_page(browser, out: Path, report: dict) -> dict:
    """Open ``out``/index.html and check it against ``report``; the queue table's
    rows (queue -> its cells) for further checks."""
    browser.get((Path(out) / "index.html").as_uri())
    figures = browser.execute_script(
        "return Object.fromEntries([...document.querySelectorAll('#summary .card')]"
        ".map(c => [c.dataset.figure, c.querySelector('.figure').innerText]))")
    summary = report["summary"]
    assert figures["records"] == f"{report['records']:,}"
    assert figures["units_of_work"] == f"{summary['units_of_work']:,}"
    assert figures["queues"] == f"{len(report['queues']):,}"
    assert figures["span"] == summary["span"]
    first = browser.execute_script("return document.querySelector('main section').id")
    assert first == "summary"
    assert "UTC" in browser.execute_script("return document.getElementById('span').innerText")
    assert browser.execute_script(
        "return document.getElementById('json-link').getAttribute('href')") == "report.json"
    assert browser.execute_script("return document.querySelectorAll('pre').length") == 0
    loaded = browser.execute_script(
        "return [...document.images].map(i => i.complete && i.naturalWidth > 0)")
    assert loaded == [True] * (2 + len(report["queues"]))     # retention, durations, queues
    family = browser.execute_script("return getComputedStyle(document.body).fontFamily")
    assert "system-ui" in family                               # styled, not the default serif
    rows = browser.execute_script(
        "return Object.fromEntries([...document.querySelectorAll('#queues tbody tr')]"
        ".map(r => [r.cells[0].innerText, [...r.cells].map(c => c.innerText)]))")
    for name, series in report["queues"].items():
        assert rows[name][1:3] == [f"{series['puts_total']:,}", f"{series['gets_total']:,}"]
    return rows
