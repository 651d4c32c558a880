"""Trial restore: a backup (with the chain before it) restored into scratch
space, started there in this process (restart rolls it forward to the end
of the backup's log, its consistency point, and backs out what was in
flight there), measured, stopped and removed.

What is measured, per queue: the depth (committed messages in its store once
restart has checkpointed) and a content hash, SHA-256 over every message's
store key and sealed encoding in delivery order (so the order, the
descriptors, the bodies and the backout counts all count); plus a hash of
every object definition. A backup records these at the time it is taken;
``harbormq backup verify`` restores it again and compares.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

from ..config import QMConfig, qm_dir
from ..fsutil import file_name, remove_tree
from ..qmgr.lifecycle import RunningQueueManager
from .copying import Copier, Pacer
from .materialize import backup_extents, materialize, read_toml, trial_toml

#: bytes hashed between two calls of a pacer
PACE_EVERY = 1 << 20


def queue_states(core, pacer: Pacer | None = None) -> dict:
    """{"queues": {name: {"depth", "content_sha256"}}, "definitions_sha256"} of a
    started queue manager whose stores hold everything committed."""
    queues = {}
    hashed = 0
    for name in sorted(core.queues):
        q = core.queues[name]
        if q.damaged:
            queues[name] = {"damaged": q.damage_reason or "damaged"}
            continue
        digest, n = hashlib.sha256(), 0
        with q.store.pinned() as env:
            with env.begin(db=q.store.msgs) as txn:
                for key, value in txn.cursor():
                    digest.update(len(key).to_bytes(4, "little") + key +
                                  len(value).to_bytes(4, "little") + value)
                    n += 1
                    if pacer is not None:
                        hashed += len(value)
                        if hashed >= PACE_EVERY:
                            pacer.took(hashed)
                            hashed = 0
        queues[name] = {"depth": n, "content_sha256": digest.hexdigest()}
    defs = json.dumps(core.objects, sort_keys=True, default=str).encode()
    return {"queues": queues, "definitions_sha256": hashlib.sha256(defs).hexdigest()}


async def _start_and_measure(config: QMConfig, pacer: Pacer | None) -> tuple[dict, dict]:
    replayed = [0]

    def pace_replay(phase: str, done: int, total: int) -> None:
        # (forward recovery reports the bytes of log read so far)
        if phase == "forward recovery" and done > replayed[0]:
            pacer.took(done - replayed[0])
            replayed[0] = done

    qm = await RunningQueueManager.start(config, quiet=True,
                                         progress=pace_replay if pacer is not None else None)
    try:
        await qm.core.flush_all()
        states = queue_states(qm.core, pacer)
        report = qm.report.as_dict()
    finally:
        await qm.stop("immediate")
    return states, report


def trial_restore(chain: list[tuple[Path, dict]], scratch: Path,
                  pacer: Pacer | None = None) -> dict:
    """Restore ``chain`` into ``scratch`` (removed afterwards, also on failure;
    its copies, and its queue manager's stores, are never forced to disk:
    nothing depends on them surviving), start it and return its queue states
    (with ``restart``: what the restart did, and ``end_lsn``). ``pacer``: a
    backup's --max-rate, over the copies, the replay and the hashing."""
    scratch = Path(scratch)
    name = chain[-1][1]["qm_name"]
    try:
        remove_tree(scratch)
        extents = backup_extents(chain)
        materialize(chain, extents, name=name, qm_dir=qm_dir(scratch, name),
                    log_dir=scratch / "log" / file_name(name), dual_dir=None,
                    toml_data=trial_toml(read_toml(chain[-1][0])),
                    copier=Copier(durable=False, pacer=pacer))
        config = QMConfig.load(name, scratch)
        config.scratch = True
        states, report = asyncio.run(_start_and_measure(config, pacer))
        states["restart"] = {k: report[k] for k in ("redo_start_lsn", "end_lsn",
                                                     "records_replayed", "effects_redone",
                                                     "uows_backed_out", "uows_in_doubt")}
        return states
    finally:
        remove_tree(scratch)
