"""Screenshots of the pages the browser tests open, for docs/.

Taken only when ``HARBORMQ_SCREENSHOTS=1`` is set (a test run does not
change the checkout otherwise): the whole page, at the window's width, into
``docs/<folder>/<name>.png``. Refresh them with
``HARBORMQ_SCREENSHOTS=1 pytest tests/http/test_console.py``
(and ``tests/pipeline/test_pipeline_report_page.py``).
"""

from __future__ import annotations

import os
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def keep_screenshot(driver, folder: str, name: str) -> Path | None:
    """Save the page ``driver`` shows as docs/<folder>/<name>.png when asked to."""
    if os.environ.get("HARBORMQ_SCREENSHOTS") != "1":
        return None
    size = driver.get_window_size()
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(size["width"], min(max(height, 600), 4000))
    try:
        path = DOCS / folder / f"{name}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(path))
        return path
    finally:
        driver.set_window_size(size["width"], size["height"])
