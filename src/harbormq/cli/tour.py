"""The end-to-end tour (the README's main job).

1. Create queue manager TOUR (a linear log of small extents, so the tour also
   shows extents being switched) under a temporary HARBORMQ_HOME.
2. Run a concurrent persistent workload in a child process: producers put in
   units of work and outside them, consumers get under syncpoint and commit;
   every acknowledged operation is journaled by the child *after* it returns.
3. SIGKILL the child mid-flight.
4. Restart: the recovery phases are shown as they run.
5. Verify against the journal: every acknowledged persistent message that was
   not consumed by an acknowledged get is there exactly once, nothing that was
   never committed is, and each producer's messages are still in order.
6. Start the queue manager as a server: STOMP sends with receipts, deliveries
   awaiting acknowledgement, MQSC status.
7. The Spark pipeline rebuilds the queues from the log alone and must agree
   with the queue manager; then the log report (JSON and plots).
"""

from __future__ import annotations

import argparse
import base64
import datetime
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

QUEUES = ("TOUR.ORDERS", "TOUR.PAYMENTS")


# -- the child: workload -------------------------------------------------------------------

def _child(qm_name: str, journal: Path, producers: int, consumers: int) -> None:
    from ..api import QueueManager
    qm = QueueManager.open(qm_name)
    for q in QUEUES:
        if q not in qm.queue_names():
            qm.define_queue(q, DEFPSIST="YES", MAXDEPTH=10_000_000)
    fd = os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    print("ready", flush=True)

    def note(event: dict) -> None:
        os.write(fd, (json.dumps(event) + "\n").encode())

    def producer(pid: int) -> None:
        rng = random.Random(pid)
        n = 0
        while True:
            queue = QUEUES[pid % len(QUEUES)]
            batch = rng.choice((1, 1, 3, 5))
            ids = [f"p{pid}-{n + i}" for i in range(batch)]
            n += batch
            if batch == 1 and rng.random() < 0.5:
                note({"e": "put-attempt", "ids": ids, "q": queue})
                qm.put(queue, ids[0].encode(), properties={"producer": pid})
                note({"e": "put-acked", "ids": ids, "q": queue})
                continue
            uow = qm.begin(owner=f"producer-{pid}")
            for i in ids:
                uow.put(queue, i.encode(), properties={"producer": pid})
            if rng.random() < 0.1:
                uow.backout()
                note({"e": "backed-out", "ids": ids, "q": queue})
                continue
            note({"e": "put-attempt", "ids": ids, "q": queue})
            uow.commit()
            note({"e": "put-acked", "ids": ids, "q": queue})

    def consumer(cid: int) -> None:
        rng = random.Random(1000 + cid)
        while True:
            queue = QUEUES[cid % len(QUEUES)]
            uow = qm.begin(owner=f"consumer-{cid}")
            got = []
            for _ in range(rng.choice((1, 2, 4))):
                m = uow.get(queue, wait=0.2)
                if m is None:
                    break
                got.append(m.body.decode())
            if not got:
                uow.commit()
                continue
            if rng.random() < 0.1:
                uow.backout()
                continue
            note({"e": "get-attempt", "ids": got, "q": queue})
            uow.commit()
            note({"e": "get-acked", "ids": got, "q": queue})

    threads = [threading.Thread(target=producer, args=(i,), daemon=True) for i in range(producers)]
    threads += [threading.Thread(target=consumer, args=(i,), daemon=True) for i in range(consumers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


# -- verification -------------------------------------------------------------------------------

def verify(journal: Path, contents: dict[str, list[str]]) -> dict:
    """Check queue contents after restart against the child's journal."""
    put_acked, put_attempted, got_acked, got_attempted = set(), set(), set(), set()
    for line in journal.read_text().splitlines():
        try:
            ev = json.loads(line)
        except json.JSONDecodeError:
            continue   # the last line may be cut by the kill
        ids = set(ev["ids"])
        {"put-acked": put_acked, "put-attempt": put_attempted, "get-acked": got_acked,
         "get-attempt": got_attempted}.get(ev["e"], set()).update(ids)
    present = Counter(i for ids in contents.values() for i in ids)
    problems = []
    duplicates = [i for i, c in present.items() if c > 1]
    if duplicates:
        problems.append(f"{len(duplicates)} message(s) present more than once: {duplicates[:5]}")
    must_have = put_acked - got_attempted
    missing = sorted(must_have - set(present))
    if missing:
        problems.append(f"{len(missing)} acknowledged message(s) missing: {missing[:5]}")
    never_committed = set(present) - put_attempted
    if never_committed:
        problems.append(f"{len(never_committed)} message(s) visible that were never committed: "
                        f"{sorted(never_committed)[:5]}")
    consumed = set(present) & got_acked
    if consumed:
        problems.append(f"{len(consumed)} message(s) back although their get was committed: "
                        f"{sorted(consumed)[:5]}")
    for queue, ids in contents.items():
        last: dict[str, int] = {}
        for i in ids:
            producer, n = i.split("-")
            if int(n) < last.get(producer, -1):
                problems.append(f"{queue}: {i} is out of order")
                break
            last[producer] = int(n)
    return {"acknowledged_puts": len(put_acked), "acknowledged_gets": len(got_acked),
            "present": sum(present.values()), "must_be_present": len(must_have),
            "in_flight_at_kill": len((put_attempted - put_acked) | (got_attempted - got_acked)),
            "problems": problems}


# -- the tour -------------------------------------------------------------------------------------

def run_tour(workdir: Path | None = None, seconds: float = 4.0, console=None) -> int:
    from rich.table import Table
    from rich.text import Text

    from ..api import QueueManager
    from ..config import QMConfig, qm_dir
    from ..log.inspect import log_map
    from ..qmgr import lifecycle as qmgr
    from .consoles import LazyConsole
    from .progress import make_progress_callback

    con = console or LazyConsole()
    home = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="harbormq-tour-"))
    home.mkdir(parents=True, exist_ok=True)
    os.environ["HARBORMQ_HOME"] = str(home)
    name = "TOUR"
    con.rule(Text("harbormq tour", style="bold"))
    con.print(f"HARBORMQ_HOME={home}")
    if qm_dir(home, name).exists():
        qmgr.delete(name, home=home)
    # a linear log keeps the whole history, which the Spark pipeline (step 7)
    # rebuilds the queues from
    qmgr.create(name, home=home, log_type="linear", log_file_pages=256, log_primary=3,
                log_secondary=2, checkpoint_records=2000, port=0)
    con.print(f"1. created queue manager {name}: linear log in extents of 1 MiB")

    journal = home / "journal.jsonl"
    child = subprocess.Popen(
        [sys.executable, "-m", "harbormq.cli.tour", "--child", name, str(journal)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, HARBORMQ_HOME=str(home)))
    ready = child.stdout.readline().strip()
    if ready != "ready":
        con.print(Text.assemble(("the workload did not start:", "red"), f" {child.stderr.read()}"))
        return 1
    con.print(f"2. workload running in process {child.pid}: 6 producers, 3 consumers, "
              f"units of work and single puts, for {seconds:.0f} s ...")
    time.sleep(seconds)
    child.send_signal(signal.SIGKILL)
    child.wait()
    lines = journal.read_text().splitlines() if journal.exists() else []
    con.print(Text.assemble("3. ", ("SIGKILL", "bold red"), f" sent to process {child.pid} "
                            f"mid-flight ({len(lines)} journaled operations)"))

    con.print("4. restart recovery:")
    qm = QueueManager.open(name, console=con, progress=make_progress_callback(con))
    report = qm.restart_report
    contents = {}
    for q in QUEUES:
        contents[q] = [m.body.decode() for m in qm.browse(q)]
    qm.close()
    result = verify(journal, contents)

    table = Table("restart phase", "seconds", title="Restart")
    for phase, secs in report.phases.items():
        table.add_row(phase, f"{secs:.3f}")
    con.print(table)
    con.print(f"   log records replayed: {report.records_replayed} "
              f"({report.bytes_replayed / 1e6:.1f} MB), effects redone: {report.effects_redone},"
              f" in-flight units of work backed out: {report.uows_backed_out}")
    m = log_map(QMConfig.load(name, home))
    con.print(f"   log: current extent {m['current_extent']}, restart extent "
              f"{m['restart_extent']}, extents " +
              ", ".join(f"{e['extent']}({e['state']})" for e in m["extents"]))

    con.print("5. verification against the journal:")
    con.print(f"   acknowledged puts {result['acknowledged_puts']}, acknowledged gets "
              f"{result['acknowledged_gets']}, in flight at the kill "
              f"{result['in_flight_at_kill']}; present now {result['present']} "
              f"(at least {result['must_be_present']} required)")
    if result["problems"]:
        for p in result["problems"]:
            con.print(_fail(p))
        return 1
    con.print(Text.assemble("   ", ("OK", "bold green"),
                            ": every acknowledged persistent message is there exactly once, "
                            "nothing uncommitted is visible, order is kept."))
    if server_step(con, name, home) != 0:
        return 1
    return pipeline_step(con, name, home, contents)


def pipeline_step(con, name: str, home: Path, engine_contents: dict[str, list[str]]) -> int:
    """7. The Spark pipeline: rebuild the tour's queues from the log alone and
    compare with what the queue manager holds; then the log report."""
    from ..config import QMConfig
    from ..unload.loadfile import read_load_file

    log_dir = QMConfig.load(name, home).log_dir
    out = home / "pipeline"
    harbormq = [sys.executable, "-m", "harbormq", "pipeline"]
    env = dict(os.environ, HARBORMQ_HOME=str(home))
    con.print(f"7. Spark pipeline (local[*]) over {log_dir}:")
    queue_args = [arg for q in QUEUES for arg in ("--queue", q)]
    t0 = time.monotonic()
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")
    rebuilt = subprocess.run(harbormq + ["rebuild", "--log", str(log_dir), "--at-time", now,
                                         "--out", str(out / "rebuild"), *queue_args],
                             env=env, capture_output=True, text=True)
    if rebuilt.returncode != 0:
        con.print(_fail(f"rebuild: {rebuilt.stderr[-2000:]}"))
        return 1
    summary = json.loads((out / "rebuild" / "rebuild.json").read_text())
    problems = []
    for q in QUEUES:
        _header, messages = read_load_file(out / "rebuild" / summary["queues"][q]["load_file"])
        bodies = [base64.b64decode(m["body"]).decode() for m in messages]
        same = bodies == engine_contents[q]
        if not same:
            problems.append(f"{q}: rebuilt {len(bodies)} messages, the queue manager holds "
                            f"{len(engine_contents[q])}")
        con.print(f"   rebuild of {q} at LSN {summary['at_lsn']}: {len(bodies)} messages, "
                  + ("the same, in the same order, as the queue manager's" if same
                     else "DIFFERENT from the queue manager's"))
    con.print(f"   ({time.monotonic() - t0:.1f} s; Parquet and load files in {out / 'rebuild'})")
    reported = subprocess.run(harbormq + ["report", "--log", str(log_dir), "--out",
                                          str(out / "report")],
                              env=env, capture_output=True, text=True)
    if reported.returncode != 0:
        problems.append(f"report failed: {reported.stderr[-2000:]}")
    else:
        files = sorted(p.name for p in (out / "report").iterdir())
        con.print(f"   report (log retention, units of work, queues): {out / 'report'} "
                  f"({', '.join(files)})")
    for p in problems:
        con.print(_fail(p))
    return 1 if problems else 0


def _fail(problem: str):
    from rich.text import Text
    return Text.assemble("   ", ("FAIL", "bold red"), f" {problem}")


def server_step(con, name: str, home: Path) -> int:
    """6. The queue manager as a server: STOMP clients and MQSC administration."""
    import stomp

    from ..config import qm_dir

    env = dict(os.environ, HARBORMQ_HOME=str(home))
    harbormq = [sys.executable, "-m", "harbormq"]
    subprocess.run(harbormq + ["start", name], env=env, check=True, capture_output=True)
    try:
        listeners = qm_dir(home, name) / "listeners.json"
        deadline = time.monotonic() + 30
        while not listeners.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        port = json.loads(listeners.read_text())[0]["port"]
        con.print(f"6. queue manager {name} started as a server: STOMP on 127.0.0.1:{port}")

        class Collect(stomp.ConnectionListener):
            def __init__(self):
                self.messages, self.receipts = [], []

            def on_message(self, frame):
                self.messages.append(frame)

            def on_receipt(self, frame):
                self.receipts.append(frame.headers["receipt-id"])

        def wait_for(pred, what: str) -> None:
            deadline = time.monotonic() + 10
            while not pred():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"tour: no {what} within 10 s")
                time.sleep(0.01)

        producer, consumer = stomp.Connection12([("127.0.0.1", port)]), \
            stomp.Connection12([("127.0.0.1", port)])
        sent, got = Collect(), Collect()
        producer.set_listener("", sent)
        consumer.set_listener("", got)
        producer.connect(wait=True)
        consumer.connect(wait=True)
        for i in range(3):
            producer.send("/queue/TOUR.STOMP", f"stomp message {i}",
                          headers={"persistent": "true", "receipt": f"r{i}"})
        wait_for(lambda: len(sent.receipts) == 3, "receipts")
        con.print("   3 persistent SENDs, each RECEIPT after its log force: "
                  + ", ".join(sent.receipts))
        consumer.subscribe("/queue/TOUR.STOMP", id="1", ack="client-individual")
        wait_for(lambda: len(got.messages) == 3, "deliveries")
        status = subprocess.run(
            harbormq + ["sc", name, "-c",
                        "DISPLAY QSTATUS(TOUR.STOMP) TYPE(QUEUE) CURDEPTH UNCOM IPPROCS OPPROCS\n"
                        "DISPLAY CONN(*) CONNAME USERID UOWSTATE UOWLOG QMURID"],
            env=env, capture_output=True, text=True)
        con.print("   MQSC while 3 deliveries await acknowledgement:")
        con.print("\n".join("     " + line for line in status.stdout.splitlines()
                            if "(" in line or line.startswith("HMQ")), highlight=False)
        for frame in got.messages:
            consumer.ack(frame.headers["ack"])
        producer.disconnect()
        consumer.disconnect(receipt="bye")
        con.print("   acknowledged; " + ", ".join(f.body for f in got.messages) + " consumed")
    finally:
        subprocess.run(harbormq + ["stop", name, "--wait"], env=env, capture_output=True)
    con.print(f"   queue manager {name} stopped (controlled)")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harbormq.cli.tour")
    p.add_argument("--child", nargs=2, metavar=("QM", "JOURNAL"))
    p.add_argument("--seconds", type=float, default=4.0)
    args = p.parse_args(argv)
    if args.child:
        _child(args.child[0], Path(args.child[1]), producers=6, consumers=3)
        return 0
    return run_tour(seconds=args.seconds)


if __name__ == "__main__":
    sys.exit(main())
