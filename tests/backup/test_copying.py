"""How a backup copies beside a serving queue manager (docs/backup.md, "How
much of the machine a backup takes"): its files written around the page
cache, its trial restore's stores never forced, and ``--max-rate`` holding
it to a rate."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
from support.procs import child_env, hmq

from harbormq import QueueManager
from harbormq.backup import manifest as mf
from harbormq.backup.copying import Pacer
from harbormq.config import QMConfig
from harbormq.fsutil import DIRECT_CHUNK, _set_direct, copy_durably, copy_in_chunks
from harbormq.qmgr.lifecycle import RunningQueueManager

#: more than two chunks, and a tail that is not a whole 4 KiB block
ODD_SIZE = 2 * DIRECT_CHUNK + 12_345


def copy_path(src: Path, dst: Path, **options) -> tuple[int, str]:
    """``copy_in_chunks`` from the file at ``src``."""
    fin = os.open(src, os.O_RDONLY)
    try:
        return copy_in_chunks(fin, dst, **options)
    finally:
        os.close(fin)


def cached_bytes(path: Path) -> int:
    """Bytes of ``path`` in the page cache (util-linux fincore)."""
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES",
                          str(path)], capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


def direct_io_here(directory: Path) -> bool:
    fd = os.open(directory / "probe", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        return _set_direct(fd, True)
    finally:
        os.close(fd)
        (directory / "probe").unlink()


@pytest.fixture
def odd_file(tmp_path) -> tuple[Path, bytes]:
    data = os.urandom(ODD_SIZE)
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    return src, data


def test_a_direct_copy_is_exact_and_leaves_nothing_in_the_page_cache(odd_file, tmp_path):
    if shutil.which("fincore") is None or not direct_io_here(tmp_path):
        pytest.skip("needs fincore and a file system with O_DIRECT")
    src, data = odd_file
    size, sha = copy_path(src, tmp_path / "direct.bin")
    assert (size, sha) == (len(data), hashlib.sha256(data).hexdigest())
    assert (tmp_path / "direct.bin").read_bytes() == data
    assert not (tmp_path / "direct.bin.tmp").exists()
    # the read above brought it in; drop it and copy again to look at the copy alone
    os.posix_fadvise(os.open(tmp_path / "direct.bin", os.O_RDONLY), 0, 0,
                     os.POSIX_FADV_DONTNEED)
    copy_path(src, tmp_path / "direct2.bin")
    assert cached_bytes(tmp_path / "direct2.bin") == 0
    # the same copy through the page cache leaves all of it there, dirty until flushed
    copy_durably(src, tmp_path / "cached.bin")
    assert cached_bytes(tmp_path / "cached.bin") >= ODD_SIZE - 4096


def test_a_copy_from_a_pipe_is_exact_and_a_wrong_expectation_leaves_nothing(tmp_path):
    data = os.urandom(ODD_SIZE)
    read_end, write_end = os.pipe()

    def feed():
        view = memoryview(data)
        while view:        # odd pieces: the reader must fill each chunk itself
            n = os.write(write_end, view[:7_777])
            view = view[n:]
        os.close(write_end)
    t = threading.Thread(target=feed)
    t.start()
    try:
        size, sha = copy_in_chunks(read_end, tmp_path / "piped.bin", stream=True)
    finally:
        os.close(read_end)
        t.join()
    assert (size, sha) == (len(data), hashlib.sha256(data).hexdigest())
    assert (tmp_path / "piped.bin").read_bytes() == data

    src = tmp_path / "src.bin"
    src.write_bytes(data)
    got = copy_path(src, tmp_path / "wrong.bin", expect=(len(data), "0" * 64),
                    direct_read=True, direct_write=False, durable=False)
    assert got == (len(data), hashlib.sha256(data).hexdigest())
    assert not (tmp_path / "wrong.bin").exists() and not (tmp_path / "wrong.bin.tmp").exists()


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no tmpfs at /dev/shm")
def test_a_direct_copy_on_tmpfs_is_exact(tmp_path):
    """(tmpfs refuses O_DIRECT before Linux 6.6, and takes it since: either
    way the copy is exact; the refusal itself is simulated below.)"""
    data = os.urandom(ODD_SIZE)
    shm = Path("/dev/shm") / f"hmq-copy-test-{os.getpid()}"
    shm.mkdir()
    try:
        (shm / "src.bin").write_bytes(data)
        size, sha = copy_path(shm / "src.bin", shm / "dst.bin", direct_read=True)
        assert (size, sha) == (len(data), hashlib.sha256(data).hexdigest())
        assert (shm / "dst.bin").read_bytes() == data
    finally:
        shutil.rmtree(shm)


def test_the_pacer_holds_a_rate_with_only_a_little_credit():
    pacer = Pacer(20e6)
    t = time.monotonic()
    for _ in range(10):
        pacer.took(1_000_000)         # 10 MB at 20 MB/s: half a second at least
    elapsed = time.monotonic() - t
    assert elapsed >= 0.5 - Pacer.BURST - 0.01
    assert pacer.slept > 0.3
    # a pause earns no more than BURST seconds of credit: the next burst is paced too
    time.sleep(0.3)
    t = time.monotonic()
    for _ in range(4):
        pacer.took(1_000_000)
    assert time.monotonic() - t >= 0.2 - Pacer.BURST - 0.01
    unlimited = Pacer(None)
    t = time.monotonic()
    unlimited.took(10**12)
    assert time.monotonic() - t < 0.05 and unlimited.slept == 0


def test_a_trial_restores_stores_are_never_forced(make_qm, home):
    """``QMConfig.scratch`` (set only by a trial restore) opens every store
    without LMDB's sync on commit; a queue manager's own stores keep it."""
    make_qm("QM1", log_type="linear")
    with QueueManager.open("QM1", home=home) as qm:
        qm.define_queue("Q1")
        qm.put("Q1", b"x", persistent=True)

    async def store_syncs(scratch: bool) -> set[bool]:
        config = QMConfig.load("QM1", home)
        config.scratch = scratch
        qm = await RunningQueueManager.start(config, quiet=True)
        try:
            envs = [qm.core.queues["Q1"].store, qm.core.catalog_store]
            flags = set()
            for store in envs:
                with store.pinned() as env:
                    flags.add(env.flags()["sync"])
            return flags
        finally:
            await qm.stop("immediate")
    assert asyncio.run(store_syncs(False)) == {True}
    assert asyncio.run(store_syncs(True)) == {False}


def test_a_backup_at_a_max_rate_is_held_to_it_and_verifies(make_qm, home, tmp_path):
    make_qm("QM1", log_type="linear")
    with QueueManager.open("QM1", home=home) as qm:
        qm.define_queue("Q1", MAXDEPTH=100_000)
        for start in range(0, 6000, 1000):
            uow = qm.begin()
            for i in range(start, start + 1000):
                uow.put("Q1", b"%06d" % i + b"y" * 1000, persistent=True)
            uow.commit()
    bk = tmp_path / "bk"
    res = json.loads(hmq(child_env(home), "backup", "QM1", "--to", str(bk), "--max-rate", "4",
                         "--json").stdout)
    m = mf.read_manifest(Path(res["path"]))
    assert m["queues"]["Q1"]["depth"] == 6000
    assert res["max_rate_mb_s"] == 4 and res["paced_seconds"] > 0.5
    # at most the rate (and a burst's worth), over copies of several MB
    assert res["bytes"] > 6e6
    assert res["mb_s"] <= 4 * 1.1 + Pacer.BURST * 4 / res["copy_seconds"]
    assert hmq(child_env(home), "backup", "verify", res["path"]).returncode == 0
    r = hmq(child_env(home), "backup", "QM1", "--to", str(bk), "--max-rate", "0", check=False)
    assert r.returncode == 2 and "--max-rate" in r.stderr


def test_a_copy_falls_back_when_a_direct_write_or_read_is_refused(odd_file, tmp_path,
                                                                  monkeypatch):
    """A file system that takes O_DIRECT at open but refuses a write or a read
    (EINVAL) gets the rest through the page cache; the copy is exact, and
    the caller's descriptor is left as it was."""
    import errno as errno_mod

    from harbormq import fsutil
    src, data = odd_file
    real_pwrite, real_preadv = os.pwrite, os.preadv
    refused = {"write": 0, "read": 0}

    def refuse_direct(kind, real):
        def call(fd, *args):
            if fsutil._is_direct(fd):
                refused[kind] += 1
                raise OSError(errno_mod.EINVAL, "refused")
            return real(fd, *args)
        return call
    monkeypatch.setattr(fsutil.os, "pwrite", refuse_direct("write", real_pwrite))
    monkeypatch.setattr(fsutil.os, "preadv", refuse_direct("read", real_preadv))
    fin = os.open(src, os.O_RDONLY)
    try:
        size, sha = copy_in_chunks(fin, tmp_path / "fallback.bin", direct_read=True)
        assert not fsutil._is_direct(fin)
    finally:
        os.close(fin)
    assert (size, sha) == (len(data), hashlib.sha256(data).hexdigest())
    assert (tmp_path / "fallback.bin").read_bytes() == data
    if direct_io_here(tmp_path):
        assert refused == {"write": 1, "read": 1}


def test_a_direct_read_fills_no_page_cache(odd_file, tmp_path):
    if shutil.which("fincore") is None or not direct_io_here(tmp_path):
        pytest.skip("needs fincore and a file system with O_DIRECT")
    src, data = odd_file
    fin = os.open(src, os.O_RDONLY)
    try:
        os.fsync(fin)
        os.posix_fadvise(fin, 0, 0, os.POSIX_FADV_DONTNEED)
        assert cached_bytes(src) == 0
        copy_in_chunks(fin, tmp_path / "scratch.bin", direct_read=True, direct_write=False,
                       durable=False)
    finally:
        os.close(fin)
    assert cached_bytes(src) == 0
    assert (tmp_path / "scratch.bin").read_bytes() == data


def test_a_store_snapshot_that_fails_midway_never_has_the_stores_name(tmp_path, monkeypatch):
    """LMDB's copy failing after part of the store went through the pipe: a
    BackupError naming the store, and nothing named data.mdb left."""
    from harbormq.backup import copying
    from harbormq.errors import BackupError
    from harbormq.store.stores import QueueStore
    store = QueueStore(tmp_path / "store")
    store.close()
    real_open = copying.lmdb.open

    class HalfCopy:
        def __init__(self, env):
            self.env = env

        def __getattr__(self, name):
            return getattr(self.env, name)

        def copyfd(self, fd, compact=False):
            os.write(fd, b"x" * 100_000)
            raise copying.lmdb.DiskError("injected: the copy failed midway")
    monkeypatch.setattr(copying.lmdb, "open", lambda *a, **k: HalfCopy(real_open(*a, **k)))
    from harbormq import fsutil
    renamed_to = []

    def spy(real):
        def rename(src, dst):
            renamed_to.append(Path(dst).name)
            return real(src, dst)
        return rename
    monkeypatch.setattr(fsutil.os, "replace", spy(os.replace))
    monkeypatch.setattr(fsutil.os, "rename", spy(os.rename))
    with pytest.raises(BackupError, match="injected"):
        copying.snapshot_store(tmp_path / "store", tmp_path / "copy")
    assert "data.mdb" not in renamed_to       # not even for a moment
    assert sorted(p.name for p in (tmp_path / "copy").iterdir()) == []
