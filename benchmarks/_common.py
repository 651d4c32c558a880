"""What the benchmark scripts share: the src path for an uninstalled checkout,
stderr progress, memory readings from /proc, directory sizes, and a counter of
the log writer's group commits. Each script stays runnable on its own
(``python benchmarks/bench_x.py``); this module sits beside them."""

from __future__ import annotations

import os
import resource
import sys
from pathlib import Path

try:
    import harbormq  # noqa: F401
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def make_progress(name: str):
    def progress(text: str) -> None:
        print(f"[{name}:{os.getpid()}] {text}", file=sys.stderr, flush=True)
    return progress


def proc_status(keys=("VmHWM", "VmRSS", "RssAnon", "RssFile", "RssShmem")) -> dict:
    """Memory fields of this process from /proc/self/status, in MB."""
    out = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in keys:
                    out[key] = round(int(value.split()[0]) / 1024, 1)
    except OSError:
        pass
    return out


def peak_rss_mb() -> float:
    """Peak RSS of this process in MB: VmHWM. Not ru_maxrss: Linux carries that over
    fork+exec from the parent, so a child's small peak would read as the parent's."""
    hwm = proc_status(("VmHWM",)).get("VmHWM")
    if hwm is not None:
        return hwm
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


class SyncCounter:
    """Counts the log writer's group commits: it calls ``log._on_synced`` on the
    loop once after each fdatasync that completes a batch of forces."""

    def __init__(self, log):
        self.count = 0
        orig = log._on_synced

        def counted(lsn: int) -> None:
            self.count += 1
            orig(lsn)
        log._on_synced = counted   # instance attribute shadows the method
