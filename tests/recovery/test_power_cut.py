"""Power cuts, simulated for real: ``HARBORMQ_HOME`` on lazyfs
(tests/support/lazyfs.py), a FUSE file system that keeps only what was made
durable. A kill -9 keeps the page cache; a cut here does not: file data never
fsynced is gone (or torn at 512-byte sectors), and so is every directory entry
whose directory was not fsynced.

* Under STOMP load (tests/support/stomp_crash_workload.py: producers with a
  RECEIPT per SEND or per COMMIT, consumers acknowledging), against a circular
  and a linear log, with the workload's queues defined on first use: the server
  is killed, the power cut, and the queue manager started again on what
  remains. It must start every time without reporting damage or corruption,
  and the journals must pass the crash harness's checks
  (tests/support/stomp_crash_checks.py): nothing receipted lost, nothing
  acknowledged back, transactions whole.
* A queue manager created, started and stopped still exists after a cut.
* The harness can fail: on a file system that ignores fsync (a disk with a
  volatile cache), receipted messages are lost and the check says so.

``--power-cuts N`` sets the number of cuts per log type (default 100, so 200
in CI); ``HARBORMQ_CRASH_SEED`` fixes the seed.
"""

from __future__ import annotations

import os
import random
import re
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest
import support
from support.lazyfs import SECTOR, LazyFS, Model
from support.procs import PYTHON
from support.stomp_crash_checks import drain, journal_size, read_journals, verify
from support.stomp_helpers import QMServer, deadline_wait, raw_connected

from harbormq.fsutil import fsync_dir

WORKLOAD = Path(support.__file__).resolve().with_name("stomp_crash_workload.py")
SEED = int(os.environ.get("HARBORMQ_CRASH_SEED") or random.randrange(1 << 30))
DEFAULT_CUTS = 100
# what a queue manager must never say after a power cut: a damaged object, a
# missing or corrupt log, any other error, or a store found without its queue
BAD_SIGN = re.compile(r"HMQ\d{4}E|HMQ7511W|[Cc]orrupt|Traceback")



def cut_count(request) -> int:
    n = request.config.getoption("--power-cuts")
    return DEFAULT_CUTS if n is None else n


def create_server(home: Path, log_type: str, console_dir: Path,
                  durable_home: bool = True, log_pages: int = 128,
                  create_args: tuple = ()) -> QMServer:
    srv = QMServer(home, "PC", console_dir=console_dir)
    home.mkdir(parents=True, exist_ok=True)
    if durable_home:    # as an operator's home directory would be, long made
        fsync_dir(home.parent)
    srv.cli("create", srv.name, "--port", "0", "--log", log_type,
            "--log-file-pages", str(log_pages), "--log-primary", "3", "--log-secondary", "2",
            *create_args)
    return srv


def run_power_cuts(tmp_path: Path, log_type: str, cuts: int, seed: int, *,
                   lies: dict | None = None, log_pages: int = 128,
                   torn: float = 0.5, create_args: tuple = (),
                   after=None, server_env: dict | None = None) -> tuple[list[str], dict]:
    """Cut the power ``cuts`` times under STOMP load; returns (violations, stats).
    ``server_env``: more environment for the queue manager's process;
    ``lies`` (kind -> glob, see LazyFS.lie) start once the queue manager runs;
    ``torn`` is the share of cuts that keep some unsynced sectors; ``after(fs,
    srv)`` returns more violations, checked on the file system at the end."""
    rng = random.Random(seed)
    violations: list[str] = []
    stats = {"cuts": 0, "torn cuts": 0}
    journal, stop = tmp_path / "journal", tmp_path / "stop"
    journal.mkdir()
    with LazyFS(tmp_path / "lazyfs") as fs:
        srv = create_server(fs.mount / "hmq", log_type, tmp_path, log_pages=log_pages,
                            create_args=tuple(a.format(mount=fs.mount) for a in create_args))
        srv.env.update(server_env or {})
        srv.start()
        # queues are defined on first use (the workload's SEND or SUBSCRIBE),
        # from a default deep enough for the backlog
        srv.sc("ALTER QLOCAL(SYSTEM.DEFAULT.LOCAL.QUEUE) MAXDEPTH(999999999)")
        for kind, glob in (lies or {}).items():
            fs.lie(kind, glob)
        wl_out = open(tmp_path / "workload.out", "wb")
        wl = subprocess.Popen([PYTHON, str(WORKLOAD), "--qm-dir", str(srv.qm_dir),
                               "--journal", str(journal), "--stop", str(stop),
                               "--producers", "4", "--consumers", "4", "--seed", str(seed)],
                              env=srv.env, stdout=wl_out, stderr=subprocess.STDOUT)
        wl_out.close()
        try:
            for _ in range(cuts):
                size = journal_size(journal)
                end = time.monotonic() + 60
                while journal_size(journal) < size + 2048:
                    assert wl.poll() is None, (tmp_path / "workload.out").read_text()
                    assert time.monotonic() < end, "no progress after a restart"
                    time.sleep(0.01)
                time.sleep(rng.uniform(0.0, 0.6))
                srv.kill()
                is_torn = rng.random() < torn
                fs.cut(rng.randrange(1 << 30), is_torn)
                stats["cuts"] += 1
                stats["torn cuts"] += is_torn
                try:
                    srv.start()
                except AssertionError as exc:
                    violations.append(f"cut {stats['cuts']}: the queue manager did not "
                                      f"start again: {exc}")
                    break
            time.sleep(0.3)
            stop.touch()
            wl.wait(timeout=120)
        finally:
            if wl.poll() is None:
                os.kill(wl.pid, signal.SIGKILL)
                wl.wait()
            srv.kill()
        # everything each server said, start to end (its console is off the cut disk)
        for n in range(1, srv.starts + 1):
            text = (tmp_path / f"{srv.name}.console.{n}.log").read_text(errors="replace")
            if BAD_SIGN.search(text):
                violations.append(f"start {n} said {BAD_SIGN.findall(text)}:\n{text[-3000:]}")
        stats.update(fs.stats())
        if violations:
            return violations, stats
        oplog: list = []
        left = drain(srv.name, srv.home, oplog)
        said = [f"{m} {t}" for m, t in oplog if BAD_SIGN.search(f"{m} {t}")]
        if said:
            violations.append(f"the last start said: {said}")
        if after is not None:
            violations += after(fs, srv)
    found, counts = verify(read_journals(journal), left)
    stats.update({k: counts[k] for k in ("receipted", "acked", "left on queues",
                                         "redelivered after restart", "tx commit unknown")})
    return violations + found, stats


@pytest.mark.parametrize("log_type", ["circular", "linear"])
def test_power_cuts_under_stomp_load(tmp_path, request, log_type):
    cuts = cut_count(request)
    violations, stats = run_power_cuts(tmp_path, log_type, cuts, SEED)
    print(f"power cuts ({log_type} log): {stats}; seed {SEED}")
    assert not violations, (f"seed {SEED}: {len(violations)} violations:\n" +
                            "\n".join(violations[:40]))
    assert stats["cuts"] == cuts
    assert stats["receipted"] > 10 * cuts, stats
    # the cuts really took something: unsynced sectors and unsynced names
    assert stats["lost_sectors"] > 0 and stats["lost_entries"] > 0, stats
    assert stats["unexpected_unmounts"] == 0, stats


SLOW_FLUSH_CUTS = 20


def test_power_cuts_with_a_slow_store_flush_on_a_small_log(tmp_path):
    """Power cuts while the log fills faster than the stores are flushed (each
    store write of a flush waits 150 ms, on a circular log of five 128 KiB
    extents): producers are held for log space again and again, never
    refused (an HMQ7463E is a bad sign), and every receipted message is
    there exactly once after each cut."""
    violations, stats = run_power_cuts(tmp_path, "circular", SLOW_FLUSH_CUTS, SEED,
                                       log_pages=32,
                                       server_env={"HARBORMQ_DELAY_AT": "store.flush:150"})
    print(f"power cuts (slow store flush): {stats}; seed {SEED}")
    assert not violations, (f"seed {SEED}: {len(violations)} violations:\n" +
                            "\n".join(violations[:40]))
    assert stats["cuts"] == SLOW_FLUSH_CUTS
    assert stats["receipted"] > 10 * SLOW_FLUSH_CUTS, stats


ARCHIVE_CUTS = 20


def test_power_cuts_while_archiving(tmp_path):
    """A linear log in archive mode on the smallest extents, its archive path
    on the same cut disk: the archiver copies and appends to the manifest all
    through the load (nothing is deleted: no media image moves the media
    point). Besides the journal checks: every manifest entry names a file that
    is there, whole (scrub), and at least three extents were archived."""
    def archive_checks(fs, srv) -> list[str]:
        from harbormq.log import archive
        reports = archive.scrub([fs.mount / "arch"], srv.name)
        problems = [f"archive: {r['bad']}" for r in reports if r["bad"]]
        if not reports or reports[0]["extents"] < 3:
            problems.append(f"too little was archived to prove anything: {reports}")
        return problems

    violations, stats = run_power_cuts(
        tmp_path, "linear", ARCHIVE_CUTS, SEED, log_pages=32, after=archive_checks,
        create_args=("--log-management", "archive", "--log-archive-path", "{mount}/arch"))
    print(f"power cuts while archiving: {stats}; seed {SEED}")
    assert not violations, (f"seed {SEED}: {len(violations)} violations:\n" +
                            "\n".join(violations[:40]))
    assert stats["cuts"] == ARCHIVE_CUTS and stats["receipted"] > 10 * ARCHIVE_CUTS


DUAL_CUTS = 10


@pytest.mark.parametrize("log_type", ["circular", "linear"])
def test_power_cuts_with_a_dual_log(tmp_path, log_type):
    """A dual log (log.dual_path) with both copies on the cut disk: after a
    cut the two copies of the newest extent may hold different unforced
    tails; restart takes the one reaching further and makes the other equal.
    Besides the journal checks: no copy had to be read around or given up,
    and at the end the two copies of every extent are the same, byte for byte."""
    rewritten = [0]

    def copies_equal(fs, srv) -> list[str]:
        from harbormq.log.reader import same_bytes
        primary, dual = fs.mount / "hmq" / "log" / srv.name, fs.mount / "dual"
        names = sorted(p.name for p in primary.glob("S*.LOG"))
        problems = [] if names == sorted(p.name for p in dual.glob("S*.LOG")) else \
            [f"the copies hold different extents: {names} and {list(dual.glob('S*.LOG'))}"]
        problems += [f"the copies of {n} differ" for n in names
                     if (dual / n).exists() and not same_bytes(primary / n, dual / n)]
        for n in range(1, srv.starts + 1):
            text = (tmp_path / f"{srv.name}.console.{n}.log").read_text(errors="replace")
            problems += [f"start {n}: {m}" for m in ("HMQ7490W", "HMQ7491W") if m in text]
            rewritten[0] += text.count("HMQ7492I")
        return problems

    violations, stats = run_power_cuts(
        tmp_path, log_type, DUAL_CUTS, SEED, log_pages=32, after=copies_equal,
        create_args=("--log-dual-path", "{mount}/dual"))
    print(f"power cuts with a dual {log_type} log: {stats}; newest extent's copies made "
          f"equal at {rewritten[0]} start(s); seed {SEED}")
    assert not violations, (f"seed {SEED}: {len(violations)} violations:\n" +
                            "\n".join(violations[:40]))
    assert stats["cuts"] == DUAL_CUTS and stats["receipted"] > 10 * DUAL_CUTS


def test_queue_manager_survives_a_cut_after_create_start_stop(tmp_path):
    with LazyFS(tmp_path / "lazyfs") as fs:
        # the home directory made a moment before, not durable: create makes it so
        srv = create_server(fs.mount / "hmq", "circular", tmp_path, durable_home=False)
        srv.start()
        srv.sc("DEFINE QLOCAL(KEPT) DEFPSIST(YES)")
        assert srv.stop() == 0
        fs.cut(SEED, torn=False)
        status = srv.cli("status").stdout
        assert "PC" in status, status
        srv.start()
        assert "KEPT" in srv.sc("DISPLAY QLOCAL(KEPT)")
        srv.stop()


def test_harness_reports_loss_when_the_disk_ignores_every_flush(tmp_path):
    """The proof that the harness can fail: once the queue manager runs, the file
    system ignores every fsync (a disk with a volatile write cache). A cut then
    takes the disk back to that moment, a consistent older state that restarts
    cleanly, and the journal check must report the receipted messages as lost."""
    # (untorn cuts: a torn one can leave a record of the lost history in the
    # middle of the log, which restart rightly calls corruption)
    violations, stats = run_power_cuts(tmp_path, "circular", 3, SEED, torn=0.0,
                                       lies={"fsync": "/hmq/*", "fsyncdir": "/hmq*"})
    lost = [v for v in violations if v.startswith("LOST:")]
    assert lost, f"three cuts on a disk that ignores flushes went unnoticed: {stats} " \
                 f"{violations[:5]}"


def test_harness_reports_loss_when_log_writes_are_not_forced(tmp_path):
    """As if the log writer's fdatasync were removed: extents are never forced
    (the control file still is), so a restart meets a log that lost what the
    control file points at, and the harness reports it."""
    violations, stats = run_power_cuts(tmp_path, "circular", 3, SEED,
                                       lies={"fsync": "/hmq/log/*/S*.LOG"})
    assert violations, f"three cuts with unforced log writes went unnoticed: {stats}"


def test_harness_reports_loss_when_new_extents_are_not_named_durably(tmp_path):
    """The other proof: a linear log whose directory fsync after creating an
    extent does nothing loses the extents written since, and the harness says so
    (a refused restart, a corruption report, or receipted messages lost)."""
    violations, stats = run_power_cuts(tmp_path, "linear", 4, SEED, log_pages=32,
                                       lies={"fsyncdir": "/hmq/log/*"})
    assert violations, f"four cuts losing new extents went unnoticed: {stats}"


# ----------------------------------------------------------------------------- lazyfs itself


def test_lazyfs_model_keeps_only_what_was_synced():
    """The model's promises, without FUSE: unsynced data and unsynced directory
    entries go; synced ones stay; a torn cut keeps whole sectors of what was
    written and nothing else."""
    m = Model()
    d = m.new_node(stat.S_IFDIR | 0o700)
    m.root.entries["d"] = d
    m.root.sync_entries()
    f = m.new_node(stat.S_IFREG | 0o600)
    d.entries["f"] = f
    f.write(0, b"a" * 1000)
    f.sync_data()                      # data synced, but the name in d is not
    m.cut(None)
    assert d.entries == {}

    d.entries["f"] = f
    d.sync_entries()
    f.write(1000, b"b" * 2000)         # past the synced length, never synced
    m.cut(None)
    assert bytes(f.data) == b"a" * 1000

    g = m.new_node(stat.S_IFREG | 0o600)
    d.entries["g"] = g
    d.sync_entries()
    d.entries["h"] = d.entries.pop("g")    # a rename, its directory not synced
    m.cut(None)
    assert set(d.entries) == {"f", "g"}

    old = bytes(f.data)
    f.write(0, b"c" * 4096)
    m.cut(random.Random(7))
    data = bytes(f.data)
    assert len(data) in (1000, 4096)
    for s in range(0, len(data), SECTOR):
        sector = data[s:s + SECTOR]
        assert sector in (b"c" * len(sector), (old + bytes(4096))[s:s + len(sector)]), s


def test_lazyfs_mount_drops_unsynced_names_and_data(tmp_path):
    """The same through real system calls on the mounted file system, O_DSYNC
    writes included, and a remount after each cut."""
    with LazyFS(tmp_path / "lazyfs") as fs:
        m = fs.mount
        (m / "a").mkdir()
        write_file(m / "a" / "synced", b"x" * 5000, sync=True)
        fs.cut(1, torn=False)
        assert os.listdir(m) == []          # "a" was never named durably

        (m / "a").mkdir()
        fsync_dir(m)
        write_file(m / "a" / "synced", b"x" * 5000, sync=True)
        write_file(m / "a" / "unsynced", b"y" * 100, sync=False)
        fd = os.open(m / "a" / "dsync", os.O_CREAT | os.O_WRONLY | os.O_DSYNC, 0o600)
        os.write(fd, b"z" * 100)
        os.close(fd)
        fsync_dir(m / "a")
        fs.cut(2, torn=False)
        assert sorted(os.listdir(m / "a")) == ["dsync", "synced", "unsynced"]
        assert (m / "a" / "synced").read_bytes() == b"x" * 5000
        assert (m / "a" / "unsynced").read_bytes() == b""
        assert (m / "a" / "dsync").read_bytes() == b"z" * 100
        assert fs.stats()["cuts"] == 2
        # a daemon whose FUSE loop is stuck hands the cut state to a new one
        write_file(m / "a" / "late", b"w" * 10, sync=True)
        fsync_dir(m / "a")
        fs.cut(3, torn=False, respawn=True)
        assert (m / "a" / "late").read_bytes() == b"w" * 10
        assert (m / "a" / "synced").read_bytes() == b"x" * 5000
        stats = fs.stats()
        assert stats["cuts"] == 3 and stats["respawns"] == 1


def write_file(path: Path, data: bytes, *, sync: bool) -> None:
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------- disk faults


@pytest.mark.parametrize("op,error", [("write", "EIO"), ("write", "ENOSPC"), ("fsync", "EIO")])
def test_a_log_that_cannot_be_written_stops_the_queue_manager_and_loses_nothing(
        tmp_path, op, error):
    """A fault on the log's extents (issue 10 §1.5): the writer thread once died
    silently and left a half-dead queue manager. Now HMQ6709E is reported, the
    sends waiting for the force get no RECEIPT, the queue manager stops on its
    own (preemptive), and after the fault clears, and a power cut for good
    measure, a restart holds every receipted message."""
    with LazyFS(tmp_path / "lazyfs") as fs:
        srv = create_server(fs.mount / "hmq", "circular", tmp_path)
        srv.start()
        srv.sc("DEFINE QLOCAL(FAULT.Q) DEFPSIST(YES)")
        receipted = []
        with raw_connected(srv.port) as c:
            for i in range(20):
                c.send("SEND", {"destination": "/queue/FAULT.Q", "receipt": f"r{i}"},
                       f"m{i}".encode())
                c.expect("RECEIPT")
                receipted.append(f"m{i}")
            fs.fail(op, "/hmq/log/*/S*.LOG", error)
            for i in range(20, 30):
                c.send("SEND", {"destination": "/queue/FAULT.Q", "receipt": f"r{i}"},
                       f"m{i}".encode())
            frames = c.wait_closed(timeout=30)
        assert not [f for f in frames if f.command == "RECEIPT"], \
            "a send was receipted although the log could not be written"
        assert srv.proc.wait(timeout=60) is not None      # it stopped on its own
        console = srv.console()
        assert "HMQ6709E" in console, console
        fs.fail(op, None)
        fs.cut(SEED, torn=False)
        srv.start()
        srv.stop()
        from harbormq import QueueManager
        with QueueManager.open(srv.name, home=srv.home) as qm:
            bodies = [m.body.decode() for m in qm.browse("FAULT.Q")]
        assert bodies[:len(receipted)] == receipted, bodies
        assert fs.stats()["faults_raised"] > 0


def test_a_store_that_cannot_be_written_is_retried_and_loses_nothing(tmp_path):
    """A failed store flush (issue 10 §1.6) once stopped periodic flushing until
    a restart. Now it is reported (HMQ7530W), retried, and reported again when
    it works (HMQ7531I); everything receipted meanwhile survives a restart."""
    with LazyFS(tmp_path / "lazyfs") as fs:
        srv = create_server(fs.mount / "hmq", "circular", tmp_path)
        srv.start()
        srv.sc("DEFINE QLOCAL(STORE.Q) DEFPSIST(YES)")
        fs.fail("write", "/hmq/qmgrs/*/queues/STORE.Q/data.mdb", "ENOSPC")
        with raw_connected(srv.port) as c:
            for i in range(30):
                c.send("SEND", {"destination": "/queue/STORE.Q", "receipt": f"r{i}"},
                       f"m{i}".encode())
                c.expect("RECEIPT")
        deadline_wait(lambda: "HMQ7530W" in srv.console(), timeout=30,
                      what="the failed flush reported")
        fs.fail("write", None)
        deadline_wait(lambda: "HMQ7531I" in srv.console(), timeout=90,
                      what="the flush working again")
        srv.stop()
        srv.start()
        srv.stop()
        from harbormq import QueueManager
        with QueueManager.open(srv.name, home=srv.home) as qm:
            assert [m.body for m in qm.browse("STORE.Q")] == [f"m{i}".encode()
                                                             for i in range(30)]


@pytest.mark.parametrize("log_type,op,glob,error", [
    ("circular", "rename", "/hmq/log/*/control.*.tmp", "EIO"),
    ("linear", "rename", "/hmq/log/*/control.*.tmp", "ENOSPC"),
    ("linear", "create", "/hmq/log/*/S*.LOG", "ENOSPC"),
], ids=["control-rename-EIO", "control-rename-ENOSPC", "extent-create-ENOSPC"])
def test_a_log_whose_control_file_or_next_extent_cannot_be_written_stops_cleanly(
        tmp_path, log_type, op, glob, error):
    """The two log writes besides the records (issue 10 §3): the control file,
    rewritten at every extent switch and checkpoint (a temporary file renamed
    over a copy), and a new extent of a linear log. Either failing is a log
    that cannot be written: HMQ6709E, the queue manager stops on its own (no
    hang), and after the fault clears (and a power cut) every receipted
    message is there, in order."""
    with LazyFS(tmp_path / "lazyfs") as fs:
        srv = create_server(fs.mount / "hmq", log_type, tmp_path, log_pages=32)
        srv.start()
        srv.sc("DEFINE QLOCAL(FAULT.Q) DEFPSIST(YES) MAXDEPTH(100000)")
        receipted = []
        body = b"x" * 30_000          # an extent switch every few messages
        with raw_connected(srv.port) as c:
            fs.fail(op, glob, error)
            for i in range(200):
                c.send("SEND", {"destination": "/queue/FAULT.Q", "receipt": f"r{i}"},
                       f"m{i}:".encode() + body)
                frame = c.recv(timeout=30)
                if frame.command != "RECEIPT":
                    break
                receipted.append(f"m{i}")
            else:
                pytest.fail(f"200 sends went through: the {op} fault was never met")
            c.wait_closed(timeout=30)
        assert srv.proc.wait(timeout=60) is not None      # it stopped on its own
        console = srv.console()
        assert "HMQ6709E" in console, console
        assert fs.stats()["faults_raised"] > 0
        fs.fail(op, None)
        fs.cut(SEED, torn=False)
        srv.start()
        srv.stop()
        from harbormq import QueueManager
        with QueueManager.open(srv.name, home=srv.home) as qm:
            bodies = [m.body.split(b":")[0].decode() for m in qm.browse("FAULT.Q", limit=1000)]
        assert bodies[:len(receipted)] == receipted, (receipted, bodies)


@pytest.mark.parametrize("torn", [False, True])
def test_a_backup_taken_survives_a_cut_whole(tmp_path, torn):
    """A hot backup written to the cut disk (its files written O_DIRECT, or
    through the page cache where the file system refuses that, then fsynced,
    renamed and named durably) is, once the command has returned, a backup
    after a power cut: there, and verified file by file and by trial restore."""
    import json
    with LazyFS(tmp_path / "lazyfs") as fs:
        srv = create_server(fs.mount / "hmq", "linear", tmp_path)
        srv.start()
        srv.sc("DEFINE QLOCAL(KEPT) DEFPSIST(YES)")
        c = None
        try:
            from support.stomp_helpers import stomp_client
            c = stomp_client(srv.port)
            for i in range(200):
                c.send("/queue/KEPT", f"m{i:03d}" * 50,
                       headers={"receipt": f"r{i}", "persistent": "true"})
            c.col.wait_receipt("r199")
        finally:
            if c is not None:
                c.disconnect()
        bk = fs.mount / "bk"
        res = json.loads(srv.cli("backup", srv.name, "--to", str(bk), "--json").stdout)
        srv.kill()
        fs.cut(SEED, torn)
        r = subprocess.run([PYTHON, "-m", "harbormq", "backup", "verify", res["path"],
                            "--json", "--scratch", str(tmp_path / "scratch")],
                           env=srv.env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        assert json.loads(r.stdout)["queues"]["KEPT"]["depth"] == 200
