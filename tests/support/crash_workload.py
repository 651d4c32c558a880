"""Child program of the crash harness (tests/recovery/test_crash.py): concurrent load on
one queue manager, every operation journaled before and after the call.

    python tests/support/crash_workload.py --qm QM1 --journal PATH --producers N \
        --consumers M --seconds S [--seed X] [--tag T] [--end close|kill] ...

The queue manager runs in this process (``harbormq.QueueManager.open``;
``HARBORMQ_HOME`` comes from the environment). The harness kills this process
with SIGKILL at any moment, or ``HARBORMQ_CRASH_AT`` makes harbormq kill it at a
named crash point; the journal then tells what the application was promised.

Journal: one JSON object per line, written with a single ``os.write`` on an
``O_APPEND`` descriptor (so it is in the kernel before the next step, and
survives SIGKILL). Every call is journaled as ``<op>-attempt`` BEFORE it and
``<op>-acked`` AFTER it returns (``<op>-error`` if it raised). Events ("t"):

    run        tag, pid, mode                  first line of a run
    opening / ready                            around QueueManager.open
    put-attempt  id, q, prio, pers, u (UOW name or null), body
    put-acked / put-error       id, u
    begin      u, qmu (the engine's UOW id), kind ("put" | "get")
    commit-*, backout-*, prepare-*             producer UOWs: u, qmu, ids
    got        u, id, q, prio, pers, boc       a get under UOW u returned message id
    get-commit-*, get-backout-*, get-prepare-* consumer UOWs: u, qmu, ids
    snapshot   data                            (--restart-only --snapshot)
    define-attempt/-acked, failure, kill, closing, closed

Message ids ("wid") are ``<tag>.p<thread>-<n>``: unique across runs when every
run has its own tag; ``n`` grows with every put of one producer thread, so per
producer, queue and priority the messages are put in increasing sequence and
queue order can be checked. The id travels in the body (``<wid>|<filler>``,
filler derived from the id, all ASCII) and in the message property ``wid``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import sys
import threading
import time
import traceback

QUEUES = ("CRASH.Q0", "CRASH.Q1", "CRASH.Q2")
PRIORITIES = (0, 0, 0, 4, 4, 9)
QUEUE_ATTRS = {"DEFPSIST": "YES", "MAXDEPTH": 999_999_999}


# ---------------------------------------------------------------------------- shared helpers

def make_body(wid: str, size: int) -> bytes:
    """The body of message ``wid``: its id, then ``size`` bytes derived from it."""
    seed = hashlib.sha256(wid.encode()).hexdigest().encode()
    filler = (seed * (size // len(seed) + 1))[:size]
    return wid.encode() + b"|" + filler


def parse_wid(wid: str) -> tuple[str, str, int]:
    """``r12.p3-17`` -> ("r12", "p3", 17)."""
    tag, _, rest = wid.rpartition(".")
    prod, _, n = rest.rpartition("-")
    return tag, prod, int(n)


def snapshot(qm) -> dict:
    """Everything a restart must reproduce: per queue the visible messages in
    delivery order (with backout counts) and the status counters; in-doubt UOWs."""
    out = {"in_doubt": sorted(qm.in_doubt()), "queues": {}}
    for name in qm.queue_names():
        st = qm.queue_status(name)
        msgs = [[m.properties.get("wid"), m.msg_id.hex(), m.priority, m.seq, m.backout_count,
                 m.persistent, hashlib.sha1(m.body).hexdigest()] for m in qm.browse(name)]
        out["queues"][name] = {"curdepth": st["CURDEPTH"], "uncom": st["UNCOM"],
                               "locked": st["LOCKED"], "msgs": msgs}
    return out


class Journal:
    def __init__(self, path: str):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, t: str, **fields) -> None:
        fields = {"t": t, **fields}
        os.write(self.fd, (json.dumps(fields, separators=(",", ":")) + "\n").encode())


# ---------------------------------------------------------------------------- the workload

class Workload:
    def __init__(self, args, qm, journal: Journal):
        self.args = args
        self.qm = qm
        self.j = journal
        self.tag = args.tag
        self.stop = threading.Event()
        self.puts = 0
        self.puts_lock = threading.Lock()
        self.failures: list[str] = []
        self.deadline = time.monotonic() + args.seconds
        n_threads = args.producers + args.consumers
        #: kill mode: every thread parks here holding an in-flight UOW
        self.parked = threading.Barrier(n_threads + 1) if args.end == "kill" else None

    # -- journaled calls ------------------------------------------------------------------

    def call(self, op: str, fn, **fields):
        """Journal ``op-attempt``, call ``fn``, journal ``op-acked`` (or ``op-error``
        and re-raise)."""
        self.j.write(f"{op}-attempt", **fields)
        try:
            result = fn()
        except Exception as exc:
            self.j.write(f"{op}-error", cls=type(exc).__name__, err=str(exc), **fields)
            raise
        self.j.write(f"{op}-acked", **fields)
        return result

    def put(self, rng: random.Random, wid: str, target, u: str | None, persistent: bool,
            queue: str | None = None) -> None:
        q = queue or rng.choice(QUEUES)
        prio = rng.choice(PRIORITIES)
        size = self.args.body_size if self.args.body_size is not None else rng.randint(8, 300)
        kw = {"priority": prio, "properties": {"wid": wid}}
        if not persistent:
            kw["persistent"] = False
        elif rng.random() < 0.5:
            kw["persistent"] = True        # else DEFPSIST(YES) decides
        body = make_body(wid, size)
        self.j.write("put-attempt", id=wid, q=q, prio=prio, pers=persistent, u=u,
                     body=body.decode())
        try:
            target.put(q, body, **kw)
        except Exception as exc:
            self.j.write("put-error", id=wid, u=u, cls=type(exc).__name__, err=str(exc))
            raise
        self.j.write("put-acked", id=wid, u=u)
        with self.puts_lock:
            self.puts += 1
            if self.args.max_puts and self.puts >= self.args.max_puts:
                self.stop.set()

    def running(self) -> bool:
        if time.monotonic() >= self.deadline:
            self.stop.set()
        return not self.stop.is_set()

    def pace(self, rng: random.Random) -> None:
        if self.args.pace_ms:
            time.sleep(rng.random() * self.args.pace_ms / 1000)

    # -- producers ---------------------------------------------------------------------

    def producer(self, idx: int) -> None:
        rng = random.Random(f"{self.args.seed}-{self.tag}-p{idx}")
        counter = iter(range(1, 1 << 62))
        uows = iter(range(1, 1 << 62))
        pending: list[tuple] = []     # prepared, not resolved: (u, handle, ids)
        qm = self.qm

        def wid() -> str:
            return f"{self.tag}.p{idx}-{next(counter)}"

        def put_uow(k: int, *, outcome: str | None = None, persistent_only=False) -> tuple:
            u = f"{self.tag}.p{idx}-u{next(uows)}"
            h = qm.begin(owner=u)
            self.j.write("begin", u=u, qmu=h.id, kind="put")
            ids = []
            try:
                for _ in range(k):
                    w = wid()
                    pers = persistent_only or rng.random() >= 0.15
                    self.put(rng, w, h, u, pers)
                    ids.append(w)
            except Exception:
                self.abandon(h, u, ids, "backout")
                raise
            return u, h, ids

        while self.running():
            r = rng.random()
            try:
                if pending and rng.random() < 0.08:
                    u, h, ids = pending.pop(0)
                    op = "commit" if rng.random() < 0.6 else "backout"
                    self.call(op, getattr(h, op), u=u, qmu=h.id, ids=ids)
                elif r < 0.35:
                    self.put(rng, wid(), qm, None, True)
                elif r < 0.45:
                    self.put(rng, wid(), qm, None, False)
                else:
                    u, h, ids = put_uow(rng.randint(2, 6))
                    d = rng.random()
                    if d < 0.15:
                        self.call("backout", h.backout, u=u, qmu=h.id, ids=ids)
                    elif d < 0.22 and len(pending) < self.args.max_indoubt:
                        self.call("prepare", h.prepare, u=u, qmu=h.id, ids=ids)
                        pending.append((u, h, ids))
                    else:
                        self.call("commit", h.commit, u=u, qmu=h.id, ids=ids)
            except Exception as exc:
                self.note_failure(f"producer {idx}", exc)
            self.pace(rng)

        if self.parked is None:
            return
        # kill mode: leave one prepared UOW in doubt and one in flight, then park
        try:
            if not pending:
                u, h, ids = put_uow(2, persistent_only=True)
                self.call("prepare", h.prepare, u=u, qmu=h.id, ids=ids)
            put_uow(rng.randint(1, 3), persistent_only=True)
        except Exception as exc:
            self.note_failure(f"producer {idx} (final)", exc)
        self.parked.wait()
        threading.Event().wait()

    # -- consumers ---------------------------------------------------------------------

    def consumer(self, idx: int) -> None:
        rng = random.Random(f"{self.args.seed}-{self.tag}-c{idx}")
        uows = iter(range(1, 1 << 62))
        pending: list[tuple] = []
        qm = self.qm
        turn = idx

        def get_uow(k: int) -> tuple:
            nonlocal turn
            u = f"{self.tag}.c{idx}-u{next(uows)}"
            h = qm.begin(owner=u)
            self.j.write("begin", u=u, qmu=h.id, kind="get")
            ids = []
            try:
                for _ in range(k):
                    q = QUEUES[turn % len(QUEUES)]
                    turn += 1
                    m = h.get(q, wait=0.02)
                    if m is None:
                        continue
                    w = m.properties.get("wid")
                    self.j.write("got", u=u, id=w, q=q, prio=m.priority, pers=m.persistent,
                                 boc=m.backout_count)
                    ids.append(w)
            except Exception:
                self.abandon(h, u, ids, "get-backout")
                raise
            return u, h, ids

        while self.running():
            try:
                if pending and rng.random() < 0.1:
                    u, h, ids = pending.pop(0)
                    op = "get-commit" if rng.random() < 0.5 else "get-backout"
                    fn = h.commit if op == "get-commit" else h.backout
                    self.call(op, fn, u=u, qmu=h.id, ids=ids)
                    continue
                u, h, ids = get_uow(rng.randint(1, 5))
                d = rng.random()
                if d < 0.15:
                    self.call("get-backout", h.backout, u=u, qmu=h.id, ids=ids)
                elif d < 0.19 and ids and len(pending) < self.args.max_indoubt:
                    self.call("get-prepare", h.prepare, u=u, qmu=h.id, ids=ids)
                    pending.append((u, h, ids))
                else:
                    self.call("get-commit", h.commit, u=u, qmu=h.id, ids=ids)
            except Exception as exc:
                self.note_failure(f"consumer {idx}", exc)

        if self.parked is None:
            return
        try:
            u, h, ids = get_uow(3)           # in flight at the kill
        except Exception as exc:
            self.note_failure(f"consumer {idx} (final)", exc)
        self.parked.wait()
        threading.Event().wait()

    # -- helpers ---------------------------------------------------------------------

    def abandon(self, h, u: str, ids: list, op: str) -> None:
        """Back out a UOW after a failed call in it (journaled; errors noted)."""
        if h.state not in ("active", "prepared"):
            return
        try:
            self.call(op, h.backout, u=u, qmu=h.id, ids=ids)
        except Exception as exc:
            self.note_failure(f"backout of {u}", exc)

    def note_failure(self, where: str, exc: BaseException) -> None:
        self.failures.append(f"{where}: {exc!r}")
        self.j.write("failure", where=where, cls=type(exc).__name__, err=str(exc),
                     tb=traceback.format_exc())

    def run(self) -> int:
        threads = [threading.Thread(target=self.producer, args=(i,), daemon=True,
                                    name=f"producer-{i}") for i in range(self.args.producers)]
        threads += [threading.Thread(target=self.consumer, args=(i,), daemon=True,
                                     name=f"consumer-{i}") for i in range(self.args.consumers)]
        for t in threads:
            t.start()
        if self.parked is not None:
            while self.running():
                time.sleep(0.01)
            self.parked.wait()
            # one more auto-commit put: its force puts every in-flight record on disk
            w = f"{self.tag}.m0-1"
            self.put(random.Random(w), w, self.qm, None, True, queue=QUEUES[0])
            self.j.write("kill", puts=self.puts)
            os.kill(os.getpid(), signal.SIGKILL)
        for t in threads:
            t.join()
        self.j.write("closing", puts=self.puts, failures=len(self.failures))
        self.qm.close()
        self.j.write("closed")
        return 3 if self.failures else 0


def define_queues(qm, journal: Journal) -> None:
    have = set(qm.queue_names())
    for q in QUEUES:
        if q not in have:
            journal.write("define-attempt", q=q)
            qm.define_queue(q, **QUEUE_ATTRS)
            journal.write("define-acked", q=q)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--qm", required=True)
    p.add_argument("--journal", required=True)
    p.add_argument("--producers", type=int, default=3)
    p.add_argument("--consumers", type=int, default=2)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--seed", default=None)
    p.add_argument("--tag", default=None, help="prefix of message ids; unique per run")
    p.add_argument("--end", choices=("close", "kill"), default="close",
                   help="after --seconds: close the queue manager, or leave a UOW in doubt "
                        "and one in flight per thread, force the log and SIGKILL self")
    p.add_argument("--max-puts", type=int, default=0, help="stop after this many puts")
    p.add_argument("--body-size", type=int, default=None, help="filler bytes per message")
    p.add_argument("--pace-ms", type=float, default=2.0,
                   help="producers sleep up to this long between operations")
    p.add_argument("--max-indoubt", type=int, default=1,
                   help="prepared UOWs a thread may hold unresolved at once")
    p.add_argument("--restart-only", action="store_true",
                   help="only open (restart) the queue manager, then end as --end says")
    p.add_argument("--snapshot", action="store_true",
                   help="with --restart-only: journal a snapshot of the queues")
    args = p.parse_args(argv)
    if args.seed is None:
        args.seed = str(random.randrange(1 << 30))
    if args.tag is None:
        args.tag = f"t{os.getpid()}x{random.randrange(1 << 20)}"

    from harbormq import QueueManager

    journal = Journal(args.journal)
    journal.write("run", tag=args.tag, pid=os.getpid(), seed=args.seed,
                  mode="restart-only" if args.restart_only else "load",
                  crash_at=os.environ.get("HARBORMQ_CRASH_AT"))
    journal.write("opening")
    qm = QueueManager.open(args.qm)
    rep = qm.restart_report
    journal.write("ready", uows_in_flight=rep.uows_in_flight, uows_in_doubt=rep.uows_in_doubt,
                  uows_backed_out=rep.uows_backed_out, bytes_replayed=rep.bytes_replayed,
                  records_replayed=rep.records_replayed, warnings=rep.warnings)
    if args.restart_only:
        if args.snapshot:
            journal.write("snapshot", data=snapshot(qm))
        if args.end == "kill":
            journal.write("kill")
            os.kill(os.getpid(), signal.SIGKILL)
        qm.close()
        journal.write("closed")
        return 0
    define_queues(qm, journal)
    return Workload(args, qm, journal).run()


if __name__ == "__main__":
    sys.exit(main())
