"""A queue manager whose log is lost whole (every copy of it), as
``harbormq reset-log`` expects to find it: for tests/qmgr/test_reset_log.py and
the reset-log edges in tests/recovery/test_crestart_edges.py. Not a damaged
extent or a torn tail (the log's own tests make those)."""

from __future__ import annotations

from harbormq.config import QMConfig


def lose_the_log(name="QM1"):
    """Every extent gone, one control-file copy gone, the other unreadable."""
    log_dir = QMConfig.load(name).log_dir
    for p in log_dir.iterdir():
        if p.is_file() and p.name != "control.1":
            p.unlink()
    (log_dir / "control.1").write_bytes(b"\0" * 100)
    return log_dir
