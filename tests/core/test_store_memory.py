"""The memory of open LMDB environments stays what their pages cost when stores
are closed and opened again (more queues than the process keeps open): each
environment's 2 MB dirty-page list must not become resident (it once did:
14 GB at 10,000 queues)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

#: stores kept open, stores cycled through, and what their memory may grow by
OPEN, STORES = 20, 50
GROWTH_LIMIT_MB = 12

CHURN = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from harbormq.store import stores

    def anon_kb():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])

    scratch, open_limit, count = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    stores.OPEN_ENVIRONMENTS = stores.OpenEnvironments(limit=open_limit)
    # a large block freed, as a log read's buffer is: glibc would raise its
    # mmap threshold here and serve the environments' lists from the heap
    big = bytearray(8 << 20)
    del big
    made = [stores.QueueStore(scratch / f"q{i}", object_id=i, sync=False)
            for i in range(open_limit)]
    before = anon_kb()
    made += [stores.QueueStore(scratch / f"q{i}", object_id=i, sync=False)
             for i in range(open_limit, count)]
    for _ in range(3):
        for store in made:
            store.get_meta(b"object_id")       # opens it again, closing the oldest
    print(json.dumps({"growth_mb": (anon_kb() - before) / 1024,
                      "open": len(stores.OPEN_ENVIRONMENTS.lru)}))
""")


def test_reopened_environments_do_not_keep_their_dirty_lists_resident(tmp_path):
    env = dict(os.environ)
    out = subprocess.run([sys.executable, "-c", CHURN, str(tmp_path), str(OPEN), str(STORES)],
                         capture_output=True, text=True, timeout=120, env=env, check=True)
    figures = json.loads(out.stdout)
    assert figures["open"] <= OPEN
    # before the fix: 2-3 MB for each of the 20 environments open (40-60 MB)
    assert figures["growth_mb"] < GROWTH_LIMIT_MB, figures


def test_open_environments_keep_their_maps_within_the_address_space_budget(tmp_path,
                                                                            monkeypatch):
    """Each environment maps ``store_map_size_mb`` of address space: 6,325 open
    maps of 16 GiB (99 TiB) failed a restart with MemoryError, so the open ones
    are closed by their maps' total as well as by their number."""
    from harbormq.store import stores
    map_size = 1 << 20
    registry = stores.OpenEnvironments(limit=100, map_budget=5 * map_size)
    monkeypatch.setattr(stores, "OPEN_ENVIRONMENTS", registry)
    made = [stores.QueueStore(tmp_path / f"q{i}", object_id=i, map_size=map_size, sync=False)
            for i in range(12)]
    for store in made + made[:4]:
        store.get_meta(b"object_id")
        assert len(registry.lru) <= 5 and registry.mapped <= 5 * map_size
    assert registry.mapped == len(registry.lru) * map_size
    for store in made:
        store.close()
    assert registry.mapped == 0 and not registry.lru
