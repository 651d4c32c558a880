"""Child program of the STOMP crash harness (tests/stomp/test_stomp_crash.py): 8
producer and 8 consumer threads, each on its own raw STOMP connection to a
queue manager server that the harness SIGKILLs and restarts (on a new port:
the listener has port 0, so every (re)connect reads listeners.json again).

    python tests/support/stomp_crash_workload.py --qm-dir DIR --journal DIR --stop FILE \
        [--producers 8] [--consumers 8] [--seed N]

Journals, one per thread (``<role><k>.jsonl``), one JSON object per line written
with a single os.write on an O_APPEND descriptor. Every line has ``t`` (event),
``ts`` (time.monotonic_ns, one clock for every process of the machine) and
``port`` (which server incarnation the connection talks to).

Producers (wid = ``p<k>-<n>``, in the body and the ``wid`` header; persistent):

    send     wid, tx (null or the transaction)      BEFORE the SEND is written
    rcpt     wid                                     after its RECEIPT (plain sends)
    commit-attempt  tx, wids                         before COMMIT is written
    commit   tx, wids                                after the COMMIT's RECEIPT

  k < 6 pipeline plain SENDs with receipts (window 4); k >= 6 send batches of 5
  in a transaction and COMMIT with a receipt; now and then such a transaction
  is left unfinished (the connection is dropped) or ABORTed: ``abort`` tx, wids.

Consumers (queue CRASH.Q<k % 2>, prefetch-count 4):

    dlv          wid, mid, ack, redelivered, boc     BEFORE anything is done with it
    ack-attempt  wids                                before the ACK/COMMIT is written
    acked        wids                                after its RECEIPT
    nack         wid                                 before a NACK is written

  k < 4: ack:client-individual, each delivery ACKed (5 % NACKed instead);
  k 4-5: ack:client, every third delivery ACKed cumulatively;
  k 6-7: ack:client-individual, batches of 3 ACKed in a transaction, COMMIT
  with a receipt. Any consumer sometimes drops its connection without
  DISCONNECT while it holds deliveries (``drop``).

Other events: ``connect`` port, ``lost`` why, ``stop``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/: the support package
from support.stomp_helpers import ConnectionClosed, RawStomp, build_frame  # noqa: E402

QUEUES = ("CRASH.Q0", "CRASH.Q1")


class Journal:
    def __init__(self, path: Path):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.port = 0

    def __call__(self, t: str, **kw) -> None:
        kw.update(t=t, ts=time.monotonic_ns(), port=self.port)
        os.write(self.fd, (json.dumps(kw, separators=(",", ":")) + "\n").encode())


class Lost(Exception):
    """The connection went away (server killed, or we dropped it)."""


class Worker(threading.Thread):
    def __init__(self, name: str, args, stop: threading.Event):
        super().__init__(name=name, daemon=True)
        self.args = args
        self.stop_event = stop
        self.j = Journal(Path(args.journal) / f"{name}.jsonl")
        self.rng = random.Random(f"{args.seed}-{name}")
        self.conn: RawStomp | None = None
        self.failure: str | None = None

    @property
    def stopping(self) -> bool:
        return self.stop_event.is_set()

    def connect(self) -> RawStomp:
        lj = Path(self.args.qm_dir) / "listeners.json"
        while not self.stopping:
            try:
                port = json.loads(lj.read_text())[0]["port"]
                c = RawStomp(port, timeout=5)
            except (OSError, ValueError, KeyError, IndexError):
                time.sleep(0.02)
                continue
            try:
                f = c.connect()
            except (OSError, ConnectionClosed, TimeoutError, ValueError):
                c.close()
                time.sleep(0.02)
                continue
            if f.command != "CONNECTED":
                c.close()
                time.sleep(0.05)
                continue
            self.j.port = port
            self.j("connect")
            return c
        raise Lost("stopping")

    def run(self) -> None:
        try:
            while not self.stopping:
                try:
                    self.conn = self.connect()
                    self.session(self.conn)
                except Lost as exc:
                    self.j("lost", why=str(exc))
                except (OSError, ConnectionClosed, TimeoutError) as exc:
                    self.j("lost", why=repr(exc))
                finally:
                    if self.conn is not None:
                        self.conn.close()
                        self.conn = None
            self.j("stop")
        except Exception as exc:   # a bug in the workload itself: the harness fails
            import traceback
            self.failure = f"{exc!r}\n{traceback.format_exc()}"
            self.j("failure", error=self.failure)

    def recv(self, c: RawStomp, timeout: float):
        f = c.recv(timeout)
        if f.command == "ERROR":
            raise Lost(f"ERROR {f.get('message')}")
        return f


class Producer(Worker):
    def __init__(self, k: int, args, stop):
        super().__init__(f"producer{k}", args, stop)
        self.k = k
        self.n = 0
        self.queue = QUEUES[k % 2]
        self.transactional = k >= 6

    def wid(self) -> str:
        self.n += 1
        return f"p{self.k}-{self.n}"

    def send(self, c: RawStomp, wid: str, **headers) -> None:
        c.send("SEND", {"destination": f"/queue/{self.queue}", "persistent": "true",
                        "wid": wid, **headers}, f"{wid}|{'x' * self.rng.randrange(0, 600)}")

    def session(self, c: RawStomp) -> None:
        if self.transactional:
            self.tx_session(c)
        else:
            self.plain_session(c)

    def plain_session(self, c: RawStomp) -> None:
        pending: deque = deque()
        while not self.stopping or pending:
            while len(pending) < 4 and not self.stopping:
                wid = self.wid()
                self.j("send", wid=wid, tx=None)
                self.send(c, wid, receipt=wid)
                pending.append(wid)
            try:
                f = self.recv(c, 2.0)
            except TimeoutError:
                continue
            if f.command == "RECEIPT":
                rid = f["receipt-id"]
                assert pending and rid == pending[0], f"receipt {rid} out of order {pending}"
                pending.popleft()
                self.j("rcpt", wid=rid)

    def tx_session(self, c: RawStomp) -> None:
        t = 0
        while not self.stopping:
            t += 1
            tx = f"{self.name}-{self.j.port}-{t}-{self.n}"
            wids = [self.wid() for _ in range(5)]
            c.send("BEGIN", {"transaction": tx})
            for wid in wids:
                self.j("send", wid=wid, tx=tx)
                self.send(c, wid, transaction=tx)
            r = self.rng.random()
            if r < 0.05:
                self.j("abort", tx=tx, wids=wids)
                c.send("ABORT", {"transaction": tx})
                continue
            if r < 0.08:
                self.j("drop", tx=tx, wids=wids)
                raise Lost("dropped with an unfinished transaction")
            self.j("commit-attempt", tx=tx, wids=wids)
            c.send("COMMIT", {"transaction": tx, "receipt": tx})
            while True:
                f = self.recv(c, 5.0)
                if f.command == "RECEIPT" and f["receipt-id"] == tx:
                    self.j("commit", tx=tx, wids=wids)
                    break


class Consumer(Worker):
    def __init__(self, k: int, args, stop):
        super().__init__(f"consumer{k}", args, stop)
        self.k = k
        self.queue = QUEUES[k % 2]
        self.mode = "individual" if k < 4 else "client" if k < 6 else "tx"
        self.seq = 0

    def rid(self) -> str:
        self.seq += 1
        return f"{self.name}-{self.seq}"

    def session(self, c: RawStomp) -> None:
        ack = "client" if self.mode == "client" else "client-individual"
        c.send("SUBSCRIBE", {"destination": f"/queue/{self.queue}", "id": "s",
                             "ack": ack, "prefetch-count": "4"})
        outstanding: list = []        # (wid, ack id) in delivery order, not yet acked
        receipts: dict = {}           # receipt id -> wids
        while True:
            if self.stopping and not receipts:
                # leave without DISCONNECT half the time: outstanding deliveries
                # must come back either way
                if self.rng.random() < 0.5:
                    c.send("DISCONNECT", {"receipt": "bye"})
                    try:
                        c.wait_closed(timeout=5)
                    except TimeoutError:
                        pass
                raise Lost("stopping")
            try:
                f = self.recv(c, 0.3)
            except TimeoutError:
                if self.mode == "tx" and outstanding and not receipts:
                    self.commit_batch(c, outstanding, receipts)
                continue
            if f.command == "RECEIPT":
                wids = receipts.pop(f["receipt-id"])
                self.j("acked", wids=wids)
                continue
            assert f.command == "MESSAGE", f
            wid = f["wid"]
            self.j("dlv", wid=wid, mid=f["message-id"], ack=f["ack"],
                   redelivered=f["redelivered"], boc=int(f.get("backout-count", "0")))
            if self.stopping:
                continue          # no more acknowledgements: it must come back later
            if self.rng.random() < 0.01:
                self.j("drop", wids=[w for w, _ in outstanding] + [wid])
                raise Lost("dropped holding deliveries")
            if self.mode == "individual":
                if self.rng.random() < 0.05:
                    self.j("nack", wid=wid)
                    c.send("NACK", {"id": f["ack"]})
                    continue
                rid = self.rid()
                receipts[rid] = [wid]
                self.j("ack-attempt", wids=[wid])
                c.send("ACK", {"id": f["ack"], "receipt": rid})
            elif self.mode == "client":
                outstanding.append((wid, f["ack"]))
                if len(outstanding) >= 3:
                    wids = [w for w, _ in outstanding]
                    rid = self.rid()
                    receipts[rid] = wids
                    self.j("ack-attempt", wids=wids)
                    c.send("ACK", {"id": f["ack"], "receipt": rid})
                    outstanding.clear()
            else:
                outstanding.append((wid, f["ack"]))
                if len(outstanding) >= 3 and not receipts:
                    self.commit_batch(c, outstanding, receipts)

    def commit_batch(self, c: RawStomp, outstanding: list, receipts: dict) -> None:
        tx = self.rid()
        wids = [w for w, _ in outstanding]
        frames = [("BEGIN", {"transaction": tx})]
        frames += [("ACK", {"id": a, "transaction": tx}) for _, a in outstanding]
        frames.append(("COMMIT", {"transaction": tx, "receipt": tx}))
        receipts[tx] = wids
        self.j("ack-attempt", wids=wids, tx=tx)
        c.send_bytes(b"".join(build_frame(cmd, h) for cmd, h in frames))
        outstanding.clear()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--qm-dir", required=True)
    ap.add_argument("--journal", required=True)
    ap.add_argument("--stop", required=True, help="the workload ends when this file exists")
    ap.add_argument("--producers", type=int, default=8)
    ap.add_argument("--consumers", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    Path(args.journal).mkdir(parents=True, exist_ok=True)
    stop_producers, stop_consumers = threading.Event(), threading.Event()
    producers = [Producer(k, args, stop_producers) for k in range(args.producers)]
    consumers = [Consumer(k, args, stop_consumers) for k in range(args.consumers)]
    for w in producers + consumers:
        w.start()
    stop_file = Path(args.stop)
    while not stop_file.exists():
        time.sleep(0.05)
    stop_producers.set()
    for w in producers:
        w.join(60)
    stop_consumers.set()
    for w in consumers:
        w.join(60)
    alive = [w.name for w in producers + consumers if w.is_alive()]
    failures = {w.name: w.failure for w in producers + consumers if w.failure}
    print(json.dumps({"alive": alive, "failures": failures}))
    return 1 if alive or failures else 0


if __name__ == "__main__":
    sys.exit(main())
