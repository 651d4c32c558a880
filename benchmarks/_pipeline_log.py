"""A large log for the pipeline benchmarks, written fast and directly: a queue
manager is created and its queues defined through the API, then records are
appended with the codec through the queue manager's own RecoveryLog (LSNs,
extents, switches, control file as the engine writes them), bypassing the
engine's per-operation work. The workload is what restart replays and a
rebuild reads: units of work of puts (committed), units of work of gets of the
oldest messages (committed), some auto-committed puts and gets, 1 in 20 units
of work backed out with compensation records."""

from __future__ import annotations

import asyncio
import collections
import random
import time
from pathlib import Path

from _common import make_progress

from harbormq import QueueManager
from harbormq.config import QMConfig
from harbormq.log.manager import RecoveryLog
from harbormq.log.records import (
    AUTO_COMMIT,
    Compensation,
    LogRecord,
    Message,
    MessageRef,
    RecordType,
    encode_json,
)
from harbormq.qmgr import lifecycle as qmgr

QM_NAME = "PIPEBENCH"
T = RecordType


def generate(home: Path, records: int, *, queues: int = 8, body_size: int = 200,
             uow_size: int = 10, backlog: int = 20_000, pages: int = 4096,
             seed: int = 1) -> dict:
    """Create queue manager PIPEBENCH under ``home`` with about ``records`` log records
    in a linear log of ``pages``-page extents (4096 = 16 MiB, the product default).
    Returns facts about the log (end LSN, records, bytes, committed depth per queue)."""
    progress = make_progress("pipeline-log")
    qmgr.create(QM_NAME, home=home, log_type="linear", log_file_pages=pages,
                checkpoint_records=10**9)
    cfg = QMConfig.load(QM_NAME, home)
    cfg.tuning.flush_interval_ms = 10**9
    cfg.tuning.flush_max_entries = 10**9
    cfg.save()
    names = [f"BENCH.Q{i}" for i in range(queues)]
    with QueueManager.open(QM_NAME, home=home) as qm:
        for n in names:
            qm.define_queue(n, DEFPSIST="YES", MAXDEPTH=999_999_999)
        oids = {n: qm.core.queues[n].object_id for n in names}
        next_uow = qm.core.next_uow_id
    log = RecoveryLog(cfg.log_dir, QM_NAME)
    st = log.open()
    scan = log.scan(st.checkpoint_lsn)
    for _ in scan:
        pass
    loop = asyncio.new_event_loop()
    log.start_writing(scan.end_lsn, loop, active_closed=scan.end.how == "extent_end")
    rng = random.Random(seed)
    body = rng.randbytes(body_size)
    fifo = {n: collections.deque() for n in names}
    seqs = {n: 1 for n in names}
    n_rec = 0
    t0 = time.perf_counter()
    start_lsn = log.end_lsn

    def append(rtype, *, uow=0, prev=0, name="", payload=b"", flags=0) -> int:
        nonlocal n_rec
        n_rec += 1
        return log.append(LogRecord(rtype, uow_id=uow, prev_lsn=prev,
                                    object_id=oids.get(name, 0), object_name=name,
                                    payload=payload, flags=flags))

    def new_message(name: str) -> Message:
        seq = seqs[name]
        seqs[name] = seq + 1
        m = Message(body=body, msg_id=b"PB" + seq.to_bytes(8, "big") + name.encode()[-2:],
                    priority=rng.randrange(10), put_time_ns=time.time_ns(), seq=seq)
        return m

    def force() -> None:
        loop.run_until_complete(log.force())

    next_report = records // 10
    while n_rec < records:
        name = rng.choice(names)
        q = fifo[name]
        r = rng.random()
        if r < 0.1:                                   # auto-committed put / get
            if q and r < 0.04:
                ref = q.popleft()
                append(T.MSG_GET, name=name, payload=ref.encode(), flags=AUTO_COMMIT)
            else:
                m = new_message(name)
                append(T.MSG_PUT, name=name, payload=m.encode(), flags=AUTO_COMMIT)
                q.append(MessageRef(m.seq, m.priority, m.msg_id))
            continue
        uow = next_uow
        next_uow += 1
        last = append(T.UOW_BEGIN, uow=uow, payload=encode_json({"owner": "bench"}))
        backout = rng.random() < 0.05
        done = []
        if len(q) > backlog // queues and r < 0.55:   # a unit of work of gets
            for _ in range(uow_size):
                ref = q.popleft()
                last = append(T.MSG_GET, uow=uow, prev=last, name=name, payload=ref.encode())
                done.append(("get", ref, last))
        else:                                         # a unit of work of puts
            for _ in range(uow_size):
                m = new_message(name)
                ref = MessageRef(m.seq, m.priority, m.msg_id)
                last = append(T.MSG_PUT, uow=uow, prev=last, name=name, payload=m.encode())
                done.append(("put", ref, last))
        if backout:
            for kind, ref, lsn in reversed(done):
                comp = Compensation(T.MSG_PUT if kind == "put" else T.MSG_GET, lsn, 0, ref,
                                    1 if kind == "get" else 0)
                last = append(T.COMPENSATION, uow=uow, prev=last, name=name,
                              payload=comp.encode())
                if kind == "get":
                    q.appendleft(ref)
            append(T.UOW_BACKOUT, uow=uow, prev=last)
        else:
            for kind, ref, _lsn in done:
                if kind == "put":
                    q.append(ref)
            append(T.UOW_COMMIT, uow=uow, prev=last)
        if n_rec >= next_report:
            force()
            progress(f"{n_rec:,} records, {(log.end_lsn - start_lsn) / 1e6:,.0f} MB of log "
                     f"({n_rec / (time.perf_counter() - t0):,.0f} records/s)")
            next_report += records // 10
    force()
    end = log.end_lsn
    log.close()
    loop.close()
    return {"qm": QM_NAME, "log_dir": str(cfg.log_dir), "records": n_rec,
            "log_bytes": end - start_lsn, "end_lsn": end, "at_lsn": end - 1,
            "depth": {n: len(q) for n, q in fifo.items()},
            "write_seconds": round(time.perf_counter() - t0, 1)}
