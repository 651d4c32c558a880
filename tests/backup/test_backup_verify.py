"""Verification by trial restore, and every refusal of a restore (nothing
changed on disk), and a restore under another name."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from support.procs import child_env, hmq
from support.stomp_helpers import QMServer

from harbormq import QueueManager
from harbormq.backup import manifest as mf
from harbormq.backup.take import take_backup
from harbormq.config import QMConfig
from harbormq.security import Security


def tree(root: Path) -> dict:
    """Every path under ``root`` with its size, mtime and content hash."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        out[str(p)] = (st.st_size, st.st_mtime_ns,
                       hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None)
    return out


@pytest.fixture
def backed_up(make_qm, home, tmp_path):
    """QM1 (linear) with messages, a user and an authority record, and its cold
    full backup; returns the backup's path."""
    make_qm("QM1", log_type="linear")
    with QueueManager.open("QM1", home=home) as qm:
        qm.define_queue("Q1")
        for i in range(200):
            qm.put("Q1", f"m{i:04d}".encode() * 30, persistent=True)
    sec = Security.for_config(QMConfig.load("QM1", home))
    sec.users.add("alice", "s3cret-pass", ["apps"])
    sec.authorities.set("QM1", "QMGR", principal="alice", add=["CONNECT"])
    sec.authorities.set("Q1", "QUEUE", principal="alice", add=["PUT", "GET"])
    return take_backup(QMConfig.load("QM1", home), tmp_path / "bk").path


KINDS = ["catalog", "store", "extent", "control", "config", "users", "authrecs", "manifest"]


@pytest.mark.parametrize("kind", KINDS)
def test_verify_names_a_file_with_one_byte_flipped(backed_up, home, tmp_path, kind):
    copy = tmp_path / "copy" / backed_up.name
    shutil.copytree(backed_up, copy)
    assert hmq(child_env(home), "backup", "verify", str(copy)).returncode == 0
    m = mf.read_manifest(copy)
    rel = mf.MANIFEST if kind == "manifest" else \
        next(f["path"] for f in m["files"] if f["kind"] == kind)
    path = copy / rel
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01          # one bit of one byte
    path.write_bytes(bytes(data))
    r = hmq(child_env(home), "backup", "verify", str(copy), check=False)
    assert r.returncode == 1
    assert "HMQ8602E" in r.stderr and rel in r.stderr, r.stderr


def test_verify_compares_the_trial_restore_with_the_manifest(backed_up, home, tmp_path):
    """A manifest that says another depth (resealed, so its own hash holds): the
    trial restore finds the difference."""
    m = mf.read_manifest(backed_up)
    m["queues"]["Q1"]["depth"] = 199
    mf.write_manifest(backed_up, m)
    r = hmq(child_env(home), "backup", "verify", str(backed_up), check=False)
    assert r.returncode == 1 and "HMQ8608E" in r.stderr
    assert "queue Q1: depth 200 (manifest 199)" in " ".join(r.stderr.split())


def test_restore_refusals_change_nothing(backed_up, home, tmp_path):
    env = child_env(home)

    def refused(*args, msgid="HMQ8604E", text="", running=False):
        before = tree(home)
        r = hmq(env, "restore", *args, check=False)
        assert r.returncode == 1, r.stdout
        assert msgid in r.stderr and text in " ".join(r.stderr.split()), r.stderr
        after = tree(home)
        if running:
            # a running queue manager writes its own stores and log meanwhile (a
            # checkpoint): no file came or went, and no configuration changed
            assert after.keys() == before.keys()
            after = {p: v for p, v in after.items() if p.endswith((".toml", ".json"))}
            before = {p: v for p, v in before.items() if p.endswith((".toml", ".json"))}
        assert after == before
        return r

    # an existing target without --replace
    refused("QM1", "--from", str(backed_up), text="already exists")
    # a backup of another queue manager without --as
    refused("QM2", "--from", str(backed_up), text="is a backup of queue manager QM1, not QM2")
    # a point in time before the end of the backup (its stores may hold later effects)
    refused("QM1", "--from", str(backed_up), "--as", "QM9", "--to-lsn", "100",
            text="lies before the end of the backup")
    # a checksum that fails
    bad = tmp_path / "bad" / backed_up.name
    shutil.copytree(backed_up, bad)
    store = next(f["path"] for f in mf.read_manifest(bad)["files"] if f["kind"] == "store")
    data = bytearray((bad / store).read_bytes())
    data[100] ^= 0xFF
    (bad / store).write_bytes(bytes(data))
    refused("QM1", "--from", str(bad), "--as", "QM9", msgid="HMQ8602E", text=store)
    # an extent missing from the chain: an incremental whose log extent is gone
    put = QueueManager.open("QM1", home=home)
    for _ in range(300):
        put.put("Q1", b"x" * 900, persistent=True)
    put.close()
    inc = take_backup(QMConfig.load("QM1", home), backed_up.parent.parent,
                      incremental=True).path
    m = mf.read_manifest(inc)
    assert len(m["extents"]) >= 2
    gone = m["extents"][-1]
    m["extents"] = m["extents"][:-1]
    m["files"] = [f for f in m["files"] if f["path"] != gone["file"]]
    mf.write_manifest(inc, m)          # resealed: a manifest that lost an extent
    refused("QM1", "--from", str(inc), "--as", "QM9", msgid="HMQ8603E",
            text=f"from LSN {gone['first_lsn']}")
    # a queue manager running on the target
    srv = QMServer(home, "QM1")
    QMConfig.load("QM1", home)
    cfg_text = (home / "qmgrs" / "QM1" / "qm.toml").read_text()
    (home / "qmgrs" / "QM1" / "qm.toml").write_text(cfg_text.replace("port = 61613",
                                                                      "port = 0"))
    srv.start()
    try:
        refused("QM1", "--from", str(backed_up), "--replace", text="is running", running=True)
    finally:
        srv.stop()


def test_restore_as_another_name_and_dry_run(backed_up, home, tmp_path):
    env = child_env(home)
    before = tree(home)
    r = hmq(env, "restore", "QM1", "--from", str(backed_up), "--as", "COPY1", "--dry-run",
            "--port", "0")
    assert "Dry run: nothing was changed." in r.stdout and "as COPY1" in r.stdout
    assert tree(home) == before
    hmq(env, "restore", "QM1", "--from", str(backed_up), "--as", "COPY1", "--port", "0")
    cfg = QMConfig.load("COPY1", home)
    assert cfg.name == "COPY1" and cfg.listeners[0].port == 0
    recs = json.loads(cfg.authrecs_path.read_text())["records"]
    assert {(r["profile"], r["objtype"]) for r in recs} == {("COPY1", "QMGR"), ("Q1", "QUEUE")}
    from harbormq.log.reader import read_header
    heads = {read_header(p).qm_name for p in cfg.log_dir.glob("S*.LOG")}
    assert heads == {"COPY1"}
    with QueueManager.open("COPY1", home=home) as qm:
        bodies = [bytes(qm.get("Q1").body) for _ in range(200)]
        assert qm.get("Q1") is None
    assert bodies == [f"m{i:04d}".encode() * 30 for i in range(200)]
    said = (cfg.errors_dir / "HMQERR01.LOG").read_text()
    assert "HMQ7472E" not in said, "a renamed store is this queue manager's, not damaged"
    # the source is untouched and still has its messages
    with QueueManager.open("QM1", home=home) as qm:
        assert qm.queue_status("Q1")["CURDEPTH"] == 200


def test_point_in_time_restore_stops_at_the_point(backed_up, home, tmp_path):
    """--to-lsn: the restored queue manager holds what the source held at that
    LSN, no later work (a conditional restart, recorded in the restored log,
    gives up the rest at its first start); the source is untouched."""
    env = child_env(home)
    with QueueManager.open("QM1", home=home) as qm:
        for i in range(200, 210):
            qm.put("Q1", f"m{i:04d}".encode() * 30, persistent=True)
        point = qm._call_sync(lambda: qm.core.log.end_lsn)
        for i in range(210, 220):
            qm.put("Q1", f"m{i:04d}".encode() * 30, persistent=True)
    r = hmq(env, "restore", "QM1", "--from", str(backed_up), "--as", "PIT", "--port", "0",
            "--to-lsn", str(point))
    assert "conditional restart" in r.stdout or "at the next start" in r.stdout, r.stdout
    with QueueManager.open("PIT", home=home) as qm:
        bodies = [bytes(m.body) for m in qm.browse("Q1", limit=1000)]
    assert bodies == [f"m{i:04d}".encode() * 30 for i in range(210)]
    with QueueManager.open("QM1", home=home) as qm:
        assert qm.queue_status("Q1")["CURDEPTH"] == 220


def test_a_restore_killed_while_swapping_in_is_run_again(backed_up, home):
    """Killed between setting the old queue manager aside and moving the
    restored one in (restore.mid_swap): running the restore again finishes it."""
    env = child_env(home)
    r = hmq(dict(env, HARBORMQ_CRASH_AT="restore.mid_swap"), "restore", "QM1", "--from",
            str(backed_up), "--replace", check=False)
    assert r.returncode == -9, r.stdout + r.stderr
    hmq(env, "restore", "QM1", "--from", str(backed_up), "--replace")
    with QueueManager.open("QM1", home=home) as qm:
        assert qm.queue_status("Q1")["CURDEPTH"] == 200


def test_verify_of_a_backup_folder_verifies_its_newest_or_every_backup(backed_up, home,
                                                                      tmp_path):
    """A queue manager's backup folder (DIR/QM): its newest backup, or every one
    with --all, which goes on past a damaged one and then fails naming it."""
    env = child_env(home)
    folder = backed_up.parent
    with QueueManager.open("QM1", home=home) as qm:
        qm.put("Q1", b"after the first backup", persistent=True)
    newest = take_backup(QMConfig.load("QM1", home), folder.parent).path
    assert mf.list_backups(folder) == [backed_up, newest]
    out = " ".join(hmq(env, "backup", "verify", str(folder)).stdout.split())
    assert f"HMQ8607I Backup {newest} verified" in out and backed_up.name not in out, out

    r = hmq(env, "backup", "verify", str(folder), "--all", "--json")
    assert [v["backup"] for v in json.loads(r.stdout)] == [str(backed_up), str(newest)]

    store = next(f["path"] for f in mf.read_manifest(backed_up)["files"]
                 if f["kind"] == "store")
    (backed_up / store).write_bytes(b"damaged")
    assert hmq(env, "backup", "verify", str(folder)).returncode == 0, "the newest is good"
    r = hmq(env, "backup", "verify", str(folder), "--all", check=False)
    said = " ".join((r.stdout + r.stderr).split())
    assert r.returncode == 1 and f"HMQ8607I Backup {newest} verified" in said, said
    assert f"HMQ8602E: 1 of 2 backup(s) in {folder} failed verification: {backed_up.name}" \
        in said and store in said, said


def test_verify_of_a_directory_of_backup_folders_names_them(backed_up, home):
    """The directory given to 'backup --to' holds one folder per queue manager:
    verify says so, and which to give it."""
    top = backed_up.parent.parent
    r = hmq(child_env(home), "backup", "verify", str(top), check=False)
    said = " ".join(r.stderr.split())
    assert r.returncode == 1 and f"{top} is not a backup (it has no manifest.json) and holds " \
        "no backup; the backup folders in it: QM1 (1 backup(s))" in said, said
    assert f"harbormq backup verify {top / 'QM1'}" in said, said


def test_verify_of_a_folder_without_backups_says_it_holds_none(home, tmp_path):
    empty = tmp_path / "nothing-here"
    (empty / "not-a-backup").mkdir(parents=True)
    r = hmq(child_env(home), "backup", "verify", str(empty), check=False)
    said = " ".join(r.stderr.split())
    assert r.returncode == 1 and "HMQ8602E" in said, said
    assert f"{empty} is not a backup (it has no manifest.json) and holds no backup" in said
    assert "backup folders in it" not in said
