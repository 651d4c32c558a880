"""Shared fixtures and options: every test gets its own HARBORMQ_HOME under tmp_path.

pytest imports this file with tests/ first on sys.path, so every test folder can
import the shared helpers as ``support.<module>`` (tests/support/)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.procs import child_env

from harbormq import QueueManager
from harbormq.qmgr import lifecycle as qmgr


def pytest_addoption(parser):
    parser.addoption("--crash-runs", type=int, default=None,
                     help="random-SIGKILL crash runs (default: the CI count)")
    parser.addoption("--power-cuts", type=int, default=None,
                     help="power cuts per log type in tests/recovery/test_power_cut.py "
                          "(default 100)")


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    h = tmp_path / "hmq"
    h.mkdir()
    monkeypatch.setenv("HARBORMQ_HOME", str(h))
    return h


@pytest.fixture
def make_qm(home):
    """make_qm(name="QM1", **create_options) -> name; small extents by default."""
    def make(name: str = "QM1", **options):
        options.setdefault("log_file_pages", 64)
        qmgr.create(name, home=home, **options)
        return name
    return make


@pytest.fixture
def open_qm(home):
    """open_qm(name) -> QueueManager, closed (immediate) at teardown if still open."""
    opened = []

    def open_(name: str = "QM1") -> QueueManager:
        qm = QueueManager.open(name, home=home)
        opened.append(qm)
        return qm
    yield open_
    for qm in opened:
        if not qm.closed:
            qm.close("immediate")


@pytest.fixture
def python_env(home):
    """Environment for child Python processes that use harbormq."""
    return child_env(home)


@pytest.fixture(scope="session")
def spark():
    """One local Spark session for the pipeline tests (workers run this interpreter)."""
    from harbormq.pipeline.session import session
    s = session("tests", "local[2]", {"spark.sql.shuffle.partitions": "4",
                                      "spark.default.parallelism": "2"})
    yield s
    s.stop()


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium driven by Selenium, one per test module (support/browser.py)."""
    from support.browser import headless_driver
    with headless_driver() as driver:
        yield driver
