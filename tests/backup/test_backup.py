"""Backups with real queue managers (docs/backup.md): cold and hot (while a
STOMP producer runs, then restored on another home: every receipted message
there exactly once, in order), incremental chains, --keep rotation, and a
backup killed midway (only a .part, never taken for a backup)."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
from support.procs import PYTHON, child_env, hmq
from support.stomp_helpers import QMServer, raw_connected, stomp_client

from harbormq import QueueManager
from harbormq.admin.client import call
from harbormq.backup import manifest as mf
from harbormq.backup.take import take_backup
from harbormq.config import QMConfig
from harbormq.log.control import ControlFile


def put_many(home: Path, name: str, queue: str, start: int, n: int) -> None:
    with QueueManager.open(name, home=home) as qm:
        if queue not in qm.queue_names():
            qm.define_queue(queue)
        for i in range(start, start + n):
            qm.put(queue, f"m-{i:06d}".encode() * 20, persistent=True)


def drain(home: Path, name: str, queue: str) -> list[int]:
    """Every message of ``queue`` in delivery order, as its number."""
    out = []
    with QueueManager.open(name, home=home) as qm:
        while (m := qm.get(queue)) is not None:
            out.append(int(bytes(m.body)[2:8]))
    return out


def restore_cli(home: Path, *args, check=True):
    return hmq(child_env(home), "restore", *args, check=check)


# --------------------------------------------------------------------- cold backups

def test_cold_full_backup_restores_on_another_home(make_qm, home, tmp_path):
    make_qm("QM1", log_type="linear")
    put_many(home, "QM1", "Q1", 0, 500)
    bk = tmp_path / "bk"
    r = hmq(child_env(home), "backup", "QM1", "--to", str(bk), "--json")
    res = json.loads(r.stdout)
    assert res["mode"] == "cold" and res["kind"] == "full"
    path = Path(res["path"])
    assert path.parent == bk / "QM1" and mf.NAME_RE.match(path.name)
    m = mf.read_manifest(path)
    assert m["queues"]["Q1"]["depth"] == 500
    assert {f["kind"] for f in m["files"]} >= {"catalog", "store", "extent", "control", "config"}
    # restored on another home, as the source is lost: every message, in order
    shutil.rmtree(home)
    home2 = tmp_path / "home2"
    home2.mkdir()
    out = restore_cli(home2, "QM1", "--from", str(path), "--port", "0").stdout
    assert "HMQ8606I" in out
    assert drain(home2, "QM1", "Q1") == list(range(500))


def test_cold_backup_then_more_work_rolls_forward_through_the_log_directory(make_qm, home,
                                                                            tmp_path):
    make_qm("QM1", log_type="linear")
    put_many(home, "QM1", "Q1", 0, 200)
    take_backup(QMConfig.load("QM1", home), tmp_path / "bk")
    put_many(home, "QM1", "Q1", 200, 300)       # after the backup, in the log only
    # the stores are lost; the log directory is not: restore --replace rolls forward
    shutil.rmtree(home / "qmgrs" / "QM1" / "queues")
    out = restore_cli(home, "QM1", "--from", str(tmp_path / "bk"), "--replace").stdout
    assert "the log directory" in out
    assert drain(home, "QM1", "Q1") == list(range(500))


# --------------------------------------------------------------------- hot backups

class Producer(threading.Thread):
    """A stomp.py producer: persistent SENDs with a receipt each, up to 32 in flight,
    until told to stop; ``receipted`` are the numbers whose RECEIPT came."""

    def __init__(self, port: int, queue: str):
        super().__init__(daemon=True)
        self.port, self.queue = port, queue
        self.stop = threading.Event()
        self.sent = 0
        self.error: BaseException | None = None

    def run(self):
        try:
            c = stomp_client(self.port)
            col = c.col
            while not self.stop.is_set():
                col.wait(lambda: self.sent - len(col.receipts) < 32, 30, "receipts")
                c.send(f"/queue/{self.queue}", f"m-{self.sent:06d}" * 20,
                       headers={"receipt": str(self.sent), "persistent": "true"})
                self.sent += 1
            col.wait(lambda: len(col.receipts) >= self.sent, 60, "the last receipts")
            self.receipted = sorted(int(r) for r in col.receipts)
            c.disconnect()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def count(self) -> int:
        return self.sent

    def finish(self) -> list[int]:
        self.stop.set()
        self.join(90)
        assert self.error is None, self.error
        return self.receipted


def wait_sent(p: Producer, n: int, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while p.count() < n:
        assert p.error is None, p.error
        assert time.monotonic() < end, f"the producer sent only {p.count()}"
        time.sleep(0.05)


@pytest.mark.parametrize("log_type", ["linear", "circular"])
def test_hot_backup_while_a_stomp_producer_runs(tmp_path, log_type):
    home = tmp_path / "src"
    srv = QMServer(home, "QS")
    home.mkdir()
    # circular: extents large enough not to wrap while the backup copies (a log
    # that wraps meanwhile fails the backup: HMQ8601E)
    srv.cli("create", "QS", "--port", "0", "--log", log_type,
            *(["--log-file-pages", "1024", "--log-primary", "4", "--log-secondary", "8"]
              if log_type == "circular" else ["--log-file-pages", "64"]))
    srv.start()
    bk = tmp_path / "bk"
    try:
        srv.sc("DEFINE QLOCAL(BK.Q) MAXDEPTH(999999999)")
        p = Producer(srv.port, "BK.Q")
        p.start()
        wait_sent(p, 300)
        before = p.count()
        r = srv.cli("backup", "QS", "--to", str(bk), "--json")
        after = p.count()
        res = json.loads(r.stdout)
        assert res["mode"] == "hot"
        wait_sent(p, after + 300)
        receipted = p.finish()
    finally:
        srv.stop()
    path = Path(res["path"])
    m = mf.read_manifest(path)
    # the consistency point lies between the backup's start and end
    assert before <= m["queues"]["BK.Q"]["depth"] <= after
    assert m["lsn"]["recovery"] <= m["lsn"]["end"]
    assert hmq(child_env(home), "backup", "verify", str(path)).returncode == 0
    # restored on another home: rolled forward through the source's log (same
    # machine, stopped): every receipted message exactly once, in order
    home2 = tmp_path / "home2"
    home2.mkdir()
    out = restore_cli(home2, "QS", "--from", str(path), "--port", "0").stdout
    got = drain(home2, "QS", "BK.Q")
    assert receipted == list(range(len(receipted)))
    if log_type == "linear":
        assert got == receipted
    else:
        # a circular log rolls forward as far as its extents were not reused yet;
        # where it wrapped, the restore says what is lost
        assert got == receipted[:len(got)] and len(got) >= m["queues"]["BK.Q"]["depth"]
        if len(got) < len(receipted):
            assert "is not available: what was logged there is lost" in " ".join(out.split())


def test_hot_backup_then_machine_lost_restores_from_backup_and_archive(tmp_path):
    home, arch = tmp_path / "src", tmp_path / "arch"
    home.mkdir()
    srv = QMServer(home, "QS")
    srv.cli("create", "QS", "--port", "0", "--log", "linear", "--log-file-pages", "64",
            "--log-management", "archive", "--log-archive-path", str(arch))
    srv.start()
    try:
        srv.sc("DEFINE QLOCAL(BK.Q) MAXDEPTH(999999999)")
        p = Producer(srv.port, "BK.Q")
        p.start()
        wait_sent(p, 300)
        before = p.count()
        res = json.loads(srv.cli("backup", "QS", "--to", str(tmp_path / "bk"), "--json").stdout)
        wait_sent(p, p.count() + 500)
        receipted = p.finish()
        srv.sc("ARCHIVE LOG")
    finally:
        srv.kill()
    shutil.rmtree(home)                  # the machine is lost; the backup and archive are not
    home2 = tmp_path / "home2"
    home2.mkdir()
    out = restore_cli(home2, "QS", "--from", res["path"], "--port", "0").stdout
    assert f"from archive {arch / 'QS'}" in out
    got = drain(home2, "QS", "BK.Q")
    # ARCHIVE LOG after the last receipt: every receipted message, once, in order
    assert got == receipted
    assert len(got) > before


# --------------------------------------------------------------- incremental chains

def test_incremental_chain_restores_to_each_link(make_qm, home, tmp_path):
    make_qm("QM1", log_type="linear")
    cfg = QMConfig.load("QM1", home)
    bk = tmp_path / "bk"
    put_many(home, "QM1", "Q1", 0, 100)
    full = take_backup(cfg, bk)
    put_many(home, "QM1", "Q1", 100, 100)
    inc1 = take_backup(cfg, bk, incremental=True)
    put_many(home, "QM1", "Q1", 200, 100)
    inc2 = take_backup(cfg, bk, incremental=True)
    m1, m2 = mf.read_manifest(inc1.path), mf.read_manifest(inc2.path)
    assert m1["previous"]["name"] == full.path.name and m2["previous"]["name"] == inc1.path.name
    assert m2["base"] == full.path.name
    assert not any(f["kind"] in ("store", "catalog") for f in m1["files"])
    assert m1["queues"]["Q1"]["depth"] == 200 and m2["queues"]["Q1"]["depth"] == 300
    # an incremental copies the log since the previous one, not the stores
    assert inc1.bytes < full.bytes
    hmq(child_env(home), "delete", "QM1")        # the source gone: the chain alone counts
    for n, b in ((200, inc1), (300, inc2)):
        home2 = tmp_path / f"h{n}"
        home2.mkdir()
        restore_cli(home2, "QM1", "--from", str(b.path))
        assert drain(home2, "QM1", "Q1") == list(range(n))
    # a link of the chain missing: refused, naming it
    shutil.move(inc1.path, tmp_path / "aside")
    home3 = tmp_path / "h3"
    home3.mkdir()
    r = restore_cli(home3, "QM1", "--from", str(inc2.path), check=False)
    assert r.returncode == 1 and "HMQ8603E" in r.stderr and inc1.path.name in r.stderr
    assert list(home3.iterdir()) == []


def test_keep_rotates_and_never_deletes_the_last_full_backup(make_qm, home, tmp_path):
    make_qm("QM1", log_type="linear")
    cfg = QMConfig.load("QM1", home)
    bk = tmp_path / "bk"
    names = []
    for incremental in (False, True, True):
        put_many(home, "QM1", "Q1", len(names) * 10, 10)
        names.append(take_backup(cfg, bk, incremental=incremental, keep=1).path.name)
    # keep 1: the newest incremental, and the chain it needs, its full backup included
    assert [p.name for p in mf.list_backups(bk / "QM1")] == names
    put_many(home, "QM1", "Q1", 30, 10)
    names.append(take_backup(cfg, bk, keep=2).path.name)        # a new full backup
    put_many(home, "QM1", "Q1", 40, 10)
    names.append(take_backup(cfg, bk, incremental=True, keep=2).path.name)
    kept = [p.name for p in mf.list_backups(bk / "QM1")]
    assert kept == names[3:]
    assert not [p for p in (bk / "QM1").iterdir() if p.name.endswith((".part", ".deleting"))]
    # keep 1 after a full then an incremental: the full stays (the chain needs it)
    names.append(take_backup(cfg, bk, incremental=True, keep=1).path.name)
    assert [p.name for p in mf.list_backups(bk / "QM1")] == [names[3], names[4], names[5]]


def test_an_idle_class_backup_is_taken_and_verifies(make_qm, home, tmp_path):
    """``--idle`` (the hot backup's choice when the queue manager must keep
    its throughput; docs/backup.md) puts the backup process in the idle
    scheduling class and takes the same backup."""
    make_qm("QM1", log_type="linear")
    put_many(home, "QM1", "Q1", 0, 200)
    bk = tmp_path / "bk"
    res = json.loads(hmq(child_env(home), "backup", "QM1", "--to", str(bk), "--idle",
                         "--json").stdout)
    assert mf.read_manifest(Path(res["path"]))["queues"]["Q1"]["depth"] == 200
    assert hmq(child_env(home), "backup", "verify", res["path"]).returncode == 0
    probe = subprocess.run(
        [PYTHON, "-c", "import os; from harbormq.cli.backup import _idle_class; "
                       "assert os.sched_getscheduler(0) != os.SCHED_IDLE; _idle_class(); "
                       "print(os.sched_getscheduler(0) == os.SCHED_IDLE)"],
        env=child_env(home), capture_output=True, text=True, timeout=60)
    assert probe.stdout.strip() == "True", probe.stderr


# ----------------------------------------------------------- a backup killed midway

def test_a_backup_killed_midway_leaves_only_a_part(make_qm, home, tmp_path):
    make_qm("QM1", log_type="linear")
    put_many(home, "QM1", "Q1", 0, 50)
    put_many(home, "QM1", "Q2", 0, 50)
    bk = tmp_path / "bk"
    env = dict(child_env(home), HARBORMQ_CRASH_AT="backup.mid_copy")
    r = subprocess.run([PYTHON, "-m", "harbormq", "backup", "QM1", "--to", str(bk)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == -9, r.stdout + r.stderr
    left = sorted(p.name for p in (bk / "QM1").iterdir() if p.is_dir())
    assert len(left) == 1 and left[0].endswith(".full.part")
    assert not (bk / "QM1" / left[0] / "manifest.json").exists()
    assert mf.list_backups(bk / "QM1") == []
    home2 = tmp_path / "home2"
    home2.mkdir()
    r = restore_cli(home2, "QM1", "--from", str(bk), check=False)
    assert r.returncode == 1 and "no complete backup" in r.stderr
    r = restore_cli(home2, "QM1", "--from", str(bk / "QM1" / left[0]), check=False)
    assert r.returncode == 1 and "HMQ8604E" in r.stderr and "never completed" in r.stderr
    assert list(home2.iterdir()) == []
    # the queue manager's lock was released by the kill; the next backup sweeps the .part
    res = json.loads(hmq(child_env(home), "backup", "QM1", "--to", str(bk), "--json").stdout)
    assert [p.name for p in (bk / "QM1").iterdir() if p.is_dir()] == [Path(res["path"]).name]


# ------------------------------------------------------- how a store is copied

def test_a_drained_store_is_compacted_a_full_one_copied_plain(make_qm, home, tmp_path):
    """A store that is mostly free pages (a deep queue drained) gets LMDB's
    compacting copy; one that only grew a plain copy (as consistent, twice as
    fast): both restore to exactly their messages."""
    make_qm("QM1", log_type="linear")
    put_many(home, "QM1", "FULL", 0, 2000)
    put_many(home, "QM1", "DRAINED", 0, 2000)
    with QueueManager.open("QM1", home=home) as qm:
        for _ in range(1990):
            qm.get("DRAINED")
    path = take_backup(QMConfig.load("QM1", home), tmp_path / "bk").path
    sizes = {f["queue"]: f["size"] for f in mf.read_manifest(path)["files"]
             if f["kind"] == "store"}
    live = {q: (home / "qmgrs" / "QM1" / "queues" / q / "data.mdb").stat().st_size
            for q in ("FULL", "DRAINED")}
    assert sizes["FULL"] == live["FULL"], "a plain copy of a store that only grew"
    assert sizes["DRAINED"] < live["DRAINED"] / 4, "the drained store compacted"
    home2 = tmp_path / "home2"
    home2.mkdir()
    restore_cli(home2, "QM1", "--from", str(path))
    assert drain(home2, "QM1", "FULL") == list(range(2000))
    assert drain(home2, "QM1", "DRAINED") == list(range(1990, 2000))


def test_hot_backup_copies_the_extent_a_checkpoint_freed_after_its_switch(tmp_path):
    """On a circular log a checkpoint right after the backup's switch frees the
    extent just closed (an idle queue manager's restart point moves past it),
    before the backup has listed it. That extent is still whole and is what the
    backup needs: it is copied from the free extent, whose LSNs are still its
    own, not skipped (the backup failed with HMQ8601E, "the extents do not
    cover the log ... they reach nothing from the recovery point")."""
    home = tmp_path / "src"
    srv = QMServer(home, "QF")
    home.mkdir()
    srv.cli("create", "QF", "--port", "0", "--log", "circular", "--log-file-pages", "64")
    srv.start()
    try:
        c = raw_connected(srv.port)
        for i in range(20):
            c.send("SEND", {"destination": "/queue/F.Q", "persistent": "true",
                            "receipt": f"r{i}"}, f"m{i}".encode())
            c.expect("RECEIPT")
        c.close()
        config = QMConfig.load("QF", srv.home)
        freed = []

        def ask(req: dict) -> dict:
            result = call(config, req, timeout=None).get("result", {})
            if req.get("switch"):
                call(config, {"cmd": "backup_point", "checkpoint": True}, timeout=None)
                closed = result["closed"]["number"]
                state = ControlFile(config.log_dir).load(repair=False)
                freed.extend(e.first_lsn for e in state.extents
                             if e.number == closed and e.state == "free")
            return result
        res = take_backup(config, tmp_path / "bk", ask=ask)
    finally:
        srv.stop()
    assert freed, "the checkpoint freed the extent the backup's switch closed"
    m = mf.read_manifest(res.path)
    assert m["queues"]["F.Q"]["depth"] == 20
    assert freed[0] in {e["first_lsn"] for e in m["extents"]}
    assert hmq(child_env(home), "backup", "verify", str(res.path)).returncode == 0
