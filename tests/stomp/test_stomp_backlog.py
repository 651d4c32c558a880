"""A backlog building at full speed on a log that cannot keep up: producers
are slowed, never failed.

The store flush is made slow on cue (``HARBORMQ_DELAY_AT=store.flush:MS``, a
slow disk under the stores) on a small circular log, with pipelining
producers and no consumer: the log fills faster than flushing frees it. Each
producer must get every RECEIPT and no ERROR (the queue has room), the hold
and its release are in the operator log, and every receipted message is
there after a SIGKILL and restart. (Before log-space flow control, the
producers got ``ERROR HMQ7463E: the circular log is full`` although no unit
of work pinned the log: the checkpoint waiting for the flush did.)"""

from __future__ import annotations

import threading

from support.stomp_helpers import QMServer, RawStomp, build_frame

PRODUCERS = 4
WINDOW = 32
BODY = b"b" * 1024


def _produce(port: int, name: str, count: int, out: dict) -> None:
    """Pipelined SENDs with receipts, WINDOW at a time; the receipts (or the
    first ERROR) go to ``out[name]``."""
    got, error = [], None
    try:
        with RawStomp(port, timeout=120) as c:
            assert c.connect().command == "CONNECTED"
            seq = 0
            while seq < count and error is None:
                n = min(WINDOW, count - seq)
                c.send_bytes(b"".join(
                    build_frame("SEND", {"destination": "/queue/BACKLOG", "persistent": "true",
                                         "receipt": f"{name}-{seq + i}", "seq": str(seq + i),
                                         "producer": name}, BODY)
                    for i in range(n)))
                for _ in range(n):
                    f = c.recv()
                    if f.command != "RECEIPT":
                        error = f"{f.command} {f.headers} {f.body[:300]!r}"
                        break
                    got.append(f["receipt-id"])
                seq += n
    except Exception as exc:            # reported, not lost in the thread
        error = repr(exc)
    out[name] = (got, error)


def test_a_backlog_on_a_slow_store_flush_holds_producers_and_fails_none(tmp_path):
    qm = QMServer(tmp_path / "home", name="BACKLOGQM")
    qm.create(log_file_pages=128)           # 5 extents of 512 KiB: 2.5 MB of log
    qm.env["HARBORMQ_DELAY_AT"] = "store.flush:400"
    qm.start()
    try:
        qm.sc("DEFINE QLOCAL(BACKLOG) MAXDEPTH(999999999)")
        per_producer = 1500                 # 6 MB of log in all: more than twice the log
        results: dict = {}
        threads = [threading.Thread(target=_produce, args=(qm.port, f"p{i}", per_producer,
                                                           results))
                   for i in range(PRODUCERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        for name, (got, error) in sorted(results.items()):
            assert error is None, f"producer {name} was failed: {error}"
            assert got == [f"{name}-{i}" for i in range(per_producer)]
        errors = (qm.qm_dir / "errors" / "HMQERR01.LOG").read_text()
        assert "HMQ7463E" not in errors
        assert "HMQ7461W" in errors and "HMQ7462I" in errors, "the hold and its release"
        qm.kill()
        qm.start()
        out = qm.sc("DISPLAY QSTATUS(BACKLOG) TYPE(QUEUE) CURDEPTH")
        assert f"CURDEPTH({PRODUCERS * per_producer})" in out, out
    finally:
        qm.kill()
