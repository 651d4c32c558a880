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
