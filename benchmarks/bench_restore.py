#!/usr/bin/env python3
"""Restore plus roll-forward rate, and verify rate (issue: backup and restore §7).

1. A queue manager (linear log, 16 MiB extents, archive mode) gets
   ``--data-mb`` of persistent 1 KiB messages on ``--queues`` queues (in
   units of work of 1,000, in-process), and a cold full backup is taken
   (``harbormq backup``).
2. Then ``--log-mb`` of log is written after the backup: puts of 1 KiB
   messages and gets of them, in units of work of 1,000, on a queue of its
   own, so that the restore has that much log to roll forward; ARCHIVE LOG
   puts every extent in the archive. The source's directories are then
   removed: the backup and the archive are all that is left (the redbook's
   disaster recovery).
3. Timed from the start of ``harbormq restore QM --from BACKUP --archive DIR``
   to the restored queue manager accepting a STOMP connection (``harbormq
   start QM --foreground``, a CONNECT answered with CONNECTED): the
   restore's own seconds, the start's (the roll-forward is in it), and the
   whole. Rate = (bytes of the stores and catalog restored + bytes of log
   rolled forward, from the backup's recovery point to the end of the log)
   / the whole (target: at least 100 MB/s). The restored depths are checked.
4. ``harbormq backup verify BACKUP`` timed: rate = the bytes of files it
   checks / its seconds, its trial restore included.

Prints one JSON object on stdout; progress on stderr. The load average
before and after says how busy the (shared) machine was.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_restore.py           # 200 + 200 MB
    PYTHONPATH=src .venv/bin/python benchmarks/bench_restore.py --quick   # 50 + 50 MB
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# _common first: it puts src/ on the path when harbormq is not installed
from _common import make_progress  # noqa: I001

from harbormq import QueueManager
from harbormq.backup import manifest as mf
from harbormq.qmgr import lifecycle

QM = "RS"
BODY = b"r" * 1024
progress = make_progress("bench_restore")


def cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "harbormq", *args], env=env, capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise SystemExit(f"harbormq {' '.join(args)} failed:\n{r.stdout}\n{r.stderr}")
    return r


def stomp_connected(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"CONNECT\naccept-version:1.2\nhost:/\n\n\0")
            return s.recv(64).startswith(b"CONNECTED")
    except OSError:
        return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-mb", type=int, default=200, help="messages in the stores")
    ap.add_argument("--log-mb", type=int, default=200, help="log written after the backup")
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--quick", action="store_true", help="50 MB of each")
    ap.add_argument("--keep-dir", type=Path, default=None)
    args = ap.parse_args()
    if args.quick:
        args.data_mb, args.log_mb = 50, 50
    if args.keep_dir is not None:
        args.keep_dir.mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="bench-restore-", dir=args.keep_dir))
    src, dst, arch, bk = base / "src", base / "dst", base / "arch", base / "bk"
    srcenv = dict(os.environ, HARBORMQ_HOME=str(src))
    dstenv = dict(os.environ, HARBORMQ_HOME=str(dst))
    for env in (srcenv, dstenv):
        env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1] / "src")
    out: dict = {"benchmark": "bench_restore", "data_mb": args.data_mb,
                 "log_mb": args.log_mb, "loadavg_before": os.getloadavg(),
                 "cpus": os.cpu_count()}
    server = None
    try:
        lifecycle.create(QM, home=src, log_type="linear", log_file_pages=4096, port=0,
                         log_management="archive", log_archive_paths=[arch])
        per = args.data_mb * 1024 // args.queues
        with QueueManager.open(QM, home=src) as qm:
            for i in range(args.queues):
                qm.define_queue(f"DATA.{i}", MAXDEPTH=999_999_999)
            qm.define_queue("CHURN", MAXDEPTH=999_999_999)
            for i in range(args.queues):
                for start in range(0, per, 1000):
                    with qm.begin() as uow:
                        for _ in range(min(1000, per - start)):
                            uow.put(f"DATA.{i}", BODY, persistent=True)
            progress(f"{args.data_mb} MB put")
        backup = json.loads(cli(srcenv, "backup", QM, "--to", str(bk), "--json").stdout)
        progress(f"backup {backup['path']}")
        with QueueManager.open(QM, home=src) as qm:
            end = qm._call_sync(lambda: qm.core.log.end_lsn)
            goal = end + args.log_mb * 1_000_000
            while qm._call_sync(lambda: qm.core.log.end_lsn) < goal:
                with qm.begin() as uow:
                    for _ in range(1000):
                        uow.put("CHURN", BODY, persistent=True)
                with qm.begin() as uow:
                    for _ in range(1000):
                        uow.get("CHURN")
            qm._call(qm.core.log_management.archive_now())
            log_end = qm._call_sync(lambda: qm.core.log.end_lsn)
        progress(f"{(log_end - end) / 1e6:.0f} MB of log after the backup, archived")
        shutil.rmtree(src)                       # the source is lost: backup + archive
        m = mf.read_manifest(Path(backup["path"]))
        stores = sum(f["size"] for f in m["files"] if f["kind"] in ("store", "catalog"))
        rolled = log_end - m["lsn"]["recovery"]
        dst.mkdir()
        load0 = os.getloadavg()
        t0 = time.monotonic()
        r = cli(dstenv, "restore", QM, "--from", backup["path"], "--archive", str(arch),
                "--port", "0")
        t1 = time.monotonic()
        console = base / "start.log"
        with open(console, "wb") as f:
            server = subprocess.Popen([sys.executable, "-m", "harbormq", "start", QM,
                                       "--foreground"], env=dstenv, stdout=f,
                                      stderr=subprocess.STDOUT)
        lj = dst / "qmgrs" / QM / "listeners.json"
        while True:
            if server.poll() is not None:
                raise SystemExit("the restored queue manager did not start:\n"
                                 + console.read_text(errors="replace")[-3000:])
            if lj.exists():
                try:
                    port = json.loads(lj.read_text())[0]["port"]
                except ValueError:
                    port = None
                if port and stomp_connected(port):
                    break
            time.sleep(0.01)
        t2 = time.monotonic()
        depths = {}
        admin = cli(dstenv, "sc", QM, "-c", "DISPLAY QSTATUS(DATA.*) CURDEPTH").stdout
        for part in admin.split("QUEUE(")[1:]:
            depths[part.split(")")[0]] = int(part.split("CURDEPTH(")[1].split(")")[0])
        assert all(depths.get(f"DATA.{i}") == per for i in range(args.queues)), depths
        server.terminate()
        server.wait(120)
        server = None
        out.update({
            "restore_plan_lines": [x for x in r.stdout.splitlines() if "extents" in x],
            "stores_mb": round(stores / 1e6, 1), "log_rolled_mb": round(rolled / 1e6, 1),
            "restore_s": round(t1 - t0, 2), "start_to_connect_s": round(t2 - t1, 2),
            "total_s": round(t2 - t0, 2),
            "restore_roll_forward_mb_s": round((stores + rolled) / 1e6 / (t2 - t0), 1),
            "restore_roll_forward_mb_s_target": 100,
            "loadavg_at_restore": load0,
        })
        progress("restored; verifying the backup")
        t3 = time.monotonic()
        v = json.loads(cli(dstenv, "backup", "verify", backup["path"], "--json").stdout)
        t4 = time.monotonic()
        out.update({"verify_mb": round(v["files_bytes"] / 1e6, 1),
                    "verify_s": round(t4 - t3, 2),
                    "verify_mb_s": round(v["files_bytes"] / 1e6 / (t4 - t3), 1),
                    "loadavg_after": os.getloadavg()})
        print(json.dumps(out, indent=1))
    finally:
        if server is not None and server.poll() is None:
            server.kill()
            server.wait(60)
        if args.keep_dir is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
