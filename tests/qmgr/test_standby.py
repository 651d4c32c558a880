"""A standby queue manager kept current by log replay (docs/standby.md):
``harbormq replay QM --from ARCHIVE [--follow]`` and ``harbormq activate QM``,
with real queue manager processes, the real command line and STOMP.

The disaster-recovery drill: a primary under STOMP load archives to a
directory, a standby restored from a hot backup follows it, the primary's
home is destroyed, the standby is activated. Every message receipted before
the last record of the last archived extent is there exactly once, in
order; a unit of work in flight at the end is backed out; RPO and RTO are
measured."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import stomp
from support.procs import PYTHON, child_env, hmq
from support.stomp_helpers import QMServer, deadline_wait, stomp_client

from harbormq import QueueManager
from harbormq.log import archive


class TimedProducer(threading.Thread):
    """Persistent SENDs with a receipt each (up to 32 in flight) until stopped;
    ``receipted_ns[n]``: when the RECEIPT of message n was seen (at or after
    it was sent by the server)."""

    def __init__(self, port: int, queue: str):
        super().__init__(daemon=True)
        self.port, self.queue = port, queue
        self.stop = threading.Event()
        self.sent = 0
        self.receipted_ns: dict[int, int] = {}
        self.lock = threading.Lock()
        self.error: BaseException | None = None

    def run(self):
        outer = self

        class Times(stomp.ConnectionListener):
            def on_receipt(self, frame):
                with outer.lock:
                    outer.receipted_ns[int(frame.headers["receipt-id"])] = time.time_ns()

        try:
            c = stomp_client(self.port)
            c.set_listener("times", Times())
            while not self.stop.is_set():
                deadline_wait(lambda: self.sent - len(self.receipted_ns) < 32, 30, what="receipts")
                c.send(f"/queue/{self.queue}", f"m-{self.sent:06d}" * 20,
                       headers={"receipt": str(self.sent), "persistent": "true"})
                self.sent += 1
        except BaseException as exc:  # noqa: BLE001 - the primary is killed under it
            self.error = exc

    def finish(self) -> dict[int, int]:
        self.stop.set()
        self.join(30)
        with self.lock:
            return dict(self.receipted_ns)


def create_primary(home: Path, arch: Path, pages: int = 32) -> QMServer:
    home.mkdir(parents=True, exist_ok=True)
    srv = QMServer(home, "QS")
    srv.cli("create", "QS", "--port", "0", "--log", "linear", "--log-file-pages", str(pages),
            "--log-management", "archive", "--log-archive-path", str(arch))
    return srv


def restore_standby(standby_home: Path, backup: str) -> None:
    standby_home.mkdir(parents=True, exist_ok=True)
    hmq(child_env(standby_home), "restore", "QS", "--from", backup, "--port", "0")


def replay_once(standby_home: Path, arch: Path | None = None, check=True):
    args = ["replay", "QS", "--json"] + (["--from", str(arch)] if arch else [])
    return hmq(child_env(standby_home), *args, check=check)


def follow(standby_home: Path, arch: Path, interval: float = 0.2,
           crash_at: str | None = None) -> subprocess.Popen:
    env = child_env(standby_home)
    if crash_at:
        env["HARBORMQ_CRASH_AT"] = crash_at
    return subprocess.Popen([PYTHON, "-m", "harbormq", "replay", "QS", "--from", str(arch),
                             "--follow", "--interval", str(interval), "--json"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def archived(arch: Path) -> list[archive.ArchiveEntry]:
    return [e for e, _ in archive.read_manifest(archive.archive_dir(arch, "QS"))]


def drain(home: Path, queue: str) -> list[int]:
    out = []
    with QueueManager.open("QS", home=home) as qm:
        while (m := qm.get(queue)) is not None:
            out.append(int(bytes(m.body)[2:8]))
    return out


def hot_backup(srv: QMServer, to: Path) -> str:
    return json.loads(srv.cli("backup", "QS", "--to", str(to), "--json").stdout)["path"]


def test_dr_drill_primary_destroyed_standby_activated(tmp_path):
    primary, standby, arch = tmp_path / "primary", tmp_path / "standby", tmp_path / "arch"
    srv = create_primary(primary, arch)
    srv.start()
    replayer = None
    try:
        srv.sc("DEFINE QLOCAL(DR.Q) MAXDEPTH(999999999)")
        srv.sc("DEFINE QLOCAL(DR.IDLE)")
        p = TimedProducer(srv.port, "DR.Q")
        p.start()
        deadline_wait(lambda: p.sent >= 200, 60, what="200 sends")
        restore_standby(standby, hot_backup(srv, tmp_path / "bk"))
        replayer = follow(standby, arch)
        # a unit of work left in flight on the primary: never on the standby
        tx = stomp_client(srv.port)
        tx.begin("t1")
        tx.send("/queue/DR.Q", "in-flight", transaction="t1",
                headers={"receipt": "tx", "persistent": "true"})
        tx.col.wait_receipt("tx")
        extents_at_backup = len(archived(arch))
        deadline_wait(lambda: len(archived(arch)) >= extents_at_backup + 4, 90, what=
                      "four more extents archived")
        time.sleep(0.5)
    finally:
        srv.kill()                 # the disaster: no ARCHIVE LOG, no clean stop
    destroyed_ns = time.time_ns()
    receipted = p.finish()
    shutil.rmtree(primary)
    last = archived(arch)[-1]

    t0 = time.monotonic()
    out = hmq(child_env(standby), "activate", "QS", "--json").stdout
    rto = time.monotonic() - t0
    facts = json.loads(out.strip().splitlines()[-1])
    assert replayer.wait(30) == 0, replayer.stderr.read()
    rounds = [json.loads(line) for line in replayer.stdout.read().splitlines()]
    assert any(r["fetched"] for r in rounds), rounds
    assert facts["replayed_lsn"] >= last.end_lsn - 1 and facts["backed_out"] >= 1

    # open for work: a STOMP round trip on the activated standby
    listeners = json.loads((standby / "qmgrs" / "QS" / "listeners.json").read_text())
    c = stomp_client(listeners[0]["port"])
    c.send("/queue/DR.NEW", "after", headers={"receipt": "a", "persistent": "true"})
    c.col.wait_receipt("a")
    c.disconnect()
    hmq(child_env(standby), "stop", "QS", "--wait")

    got = drain(standby, "DR.Q")
    assert len(got) == len(set(got)), "a message is there twice"
    assert got == sorted(got), "order broken"
    assert set(got) <= set(range(p.sent)), "a message nobody sent"
    must = {n for n, at in receipted.items() if at <= last.last_ns}
    missing = sorted(must - set(got))
    assert not missing, f"{len(missing)} receipted and archived message(s) lost: {missing[:10]}"
    lost = sorted(set(receipted) - set(got))
    rpo_s = (destroyed_ns - last.last_ns) / 1e9
    print(json.dumps({"rto_s": round(rto, 3), "rpo_s": round(rpo_s, 3),
                      "rpo_messages": len(lost), "receipted": len(receipted),
                      "on_standby": len(got), "rounds": len(rounds)}))
    assert rto < 10        # (the target, under 2 s, is measured by scripts/dr-drill.sh)


def test_units_of_work_span_rounds_and_in_flight_ones_are_backed_out(tmp_path):
    primary, standby, arch = tmp_path / "primary", tmp_path / "standby", tmp_path / "arch"
    srv = create_primary(primary, arch, pages=32)
    srv.start()
    try:
        srv.sc("DEFINE QLOCAL(U.Q)")
        bk = hot_backup(srv, tmp_path / "bk")
        restore_standby(standby, bk)
        c = stomp_client(srv.port)
        c.begin("a")
        c.send("/queue/U.Q", "early-uncommitted", transaction="a",
               headers={"persistent": "true"})
        c.send("/queue/U.Q", "plain-1", headers={"receipt": "1", "persistent": "true"})
        c.col.wait_receipt("1")
        srv.sc("ARCHIVE LOG")
        r1 = json.loads(replay_once(standby, arch).stdout.strip().splitlines()[-1])
        assert r1["fetched"] and r1["in_flight"] == 1
        c.commit("a", headers={"receipt": "ca"})
        c.col.wait_receipt("ca")
        c.begin("b")
        c.send("/queue/U.Q", "late-uncommitted", transaction="b",
               headers={"persistent": "true", "receipt": "lb"})
        c.col.wait_receipt("lb")
        srv.sc("ARCHIVE LOG")
        r2 = json.loads(replay_once(standby).stdout.strip().splitlines()[-1])
        assert r2["fetched"] and r2["in_flight"] == 1
        assert r2["replayed_lsn"] > r1["replayed_lsn"]
    finally:
        srv.kill()
    hmq(child_env(standby), "activate", "QS", "--no-start")
    with QueueManager.open("QS", home=standby) as qm:
        bodies = []
        while (m := qm.get("U.Q")) is not None:
            bodies.append(bytes(m.body).decode())
    # the unit of work begun in round 1 and committed in round 2 is there; the
    # one open at the end of the archive is backed out
    assert sorted(bodies) == ["early-uncommitted", "plain-1"]


def test_a_standby_refuses_to_start_and_replay_refuses_what_it_cannot_follow(tmp_path):
    primary, standby, arch = tmp_path / "primary", tmp_path / "standby", tmp_path / "arch"
    srv = create_primary(primary, arch, pages=32)
    srv.start()
    try:
        srv.sc("DEFINE QLOCAL(R.Q)")
        bk = hot_backup(srv, tmp_path / "bk")
    finally:
        srv.stop()
    env = child_env(standby)
    restore_standby(standby, bk)
    r = hmq(env, "replay", "QS", check=False)
    assert r.returncode == 1 and "HMQ7310E" in r.stderr and "--from" in r.stderr
    replay_once(standby, arch)
    r = hmq(env, "start", "QS", check=False)
    assert r.returncode == 1 and "HMQ7310E" in r.stderr and "harbormq activate QS" in r.stderr
    # the in-process API is refused too
    with pytest.raises(Exception, match="standby"):
        QueueManager.open("QS", home=standby)
    hmq(env, "activate", "QS", "--no-start")
    r = hmq(env, "activate", "QS", check=False)
    assert r.returncode == 1 and "is not a standby" in r.stderr

    # a restored copy that was started wrote a log of its own: it cannot follow
    other = tmp_path / "other"
    restore_standby(other, bk)
    hmq(child_env(other), "start", "QS")
    hmq(child_env(other), "stop", "QS", "--wait")
    srv.start()
    try:
        srv.sc("ARCHIVE LOG")
        srv.sc("ARCHIVE LOG")
    finally:
        srv.stop()
    r = hmq(child_env(other), "replay", "QS", "--from", str(arch), check=False)
    said = " ".join(r.stderr.split())
    assert r.returncode == 1 and "has been started since" in said, said
    # nor the primary itself, nor an archive that is not there: nothing is marked
    r = hmq(srv.env, "replay", "QS", "--from", str(arch), check=False)
    assert r.returncode == 1 and "was not restored from a backup" in " ".join(r.stderr.split())
    third = tmp_path / "third"
    restore_standby(third, bk)
    r = hmq(child_env(third), "replay", "QS", "--from", str(tmp_path / "typo"), check=False)
    assert r.returncode == 1 and "is not there" in " ".join(r.stderr.split())
    hmq(srv.env, "start", "QS")
    hmq(srv.env, "stop", "QS", "--wait")
    hmq(child_env(third), "start", "QS")       # not marked: it starts
    hmq(child_env(third), "stop", "QS", "--wait")

    # a circular log has no archive to follow
    circ = tmp_path / "circ"
    QMServer(circ, "QC").create(log_type="circular")
    r = hmq(child_env(circ), "replay", "QC", "--from", str(arch), check=False)
    assert r.returncode == 1 and "circular log" in r.stderr


CRASH_POINTS = ["standby.after_fetch", "store.mid_flush:7", None, "store.mid_flush", None]


def test_replay_killed_at_random_moments_loses_nothing(tmp_path, request):
    """SIGKILL of the replay process in the middle of rounds, then replay on:
    the standby ends with exactly what the primary committed."""
    primary, standby, arch = tmp_path / "primary", tmp_path / "standby", tmp_path / "arch"
    srv = create_primary(primary, arch, pages=32)
    srv.start()
    kills = int(os.environ.get("HARBORMQ_STANDBY_KILLS", "6"))
    rnd = random.Random(request.node.name)
    try:
        srv.sc("DEFINE QLOCAL(K.Q) MAXDEPTH(999999999)")
        restore_standby(standby, hot_backup(srv, tmp_path / "bk"))
        c = stomp_client(srv.port)
        sub = stomp_client(srv.port)
        sub.subscribe("/queue/K.Q", id="s", ack="client-individual")
        n = fired = 0
        for _kill in range(kills):
            for _ in range(60):
                c.send("/queue/K.Q", f"m-{n:06d}" * 20,
                       headers={"receipt": str(n), "persistent": "true"})
                n += 1
            c.col.wait_receipt(str(n - 1))
            for msg in sub.col.take():      # consume some: gets to replay too
                if rnd.random() < 0.5:
                    sub.ack(msg.headers["ack"])
            srv.sc("ARCHIVE LOG")
            # a named point (an extent copied in and not yet listed, a store
            # half written, redo under way), else a SIGKILL at a random moment
            point = CRASH_POINTS[_kill % len(CRASH_POINTS)]
            proc = follow(standby, arch, interval=0.05, crash_at=point)
            try:
                proc.wait(rnd.uniform(0.3, 1.5) if point is None else 10)
                fired += point is not None
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)     # (a point this round did not reach)
            rc = proc.wait(60)
            assert rc == -signal.SIGKILL, (point, rc, proc.stderr.read())
        sub.disconnect()
        c.disconnect()
        srv.sc("ARCHIVE LOG")
    finally:
        srv.stop()
    assert fired >= 2, "the named crash points never fired"
    expected = drain(primary, "K.Q")
    hmq(child_env(standby), "activate", "QS", "--no-start")
    assert drain(standby, "K.Q") == expected


def test_activation_without_the_archive_uses_the_log_it_has(tmp_path):
    """The archive went with the primary's site: activation says so and goes
    on with what was replayed."""
    primary, standby, arch = tmp_path / "primary", tmp_path / "standby", tmp_path / "arch"
    srv = create_primary(primary, arch)
    srv.start()
    try:
        srv.sc("DEFINE QLOCAL(A.Q)")
        restore_standby(standby, hot_backup(srv, tmp_path / "bk"))
        c = stomp_client(srv.port)
        for i in range(20):
            c.send("/queue/A.Q", f"a-{i}", headers={"receipt": str(i), "persistent": "true"})
        c.col.wait_receipt("19")
        srv.sc("ARCHIVE LOG")
        replay_once(standby, arch)
        for i in range(20, 30):          # archived after the last round, then lost with it
            c.send("/queue/A.Q", f"a-{i}", headers={"receipt": str(i), "persistent": "true"})
        c.col.wait_receipt("29")
        srv.sc("ARCHIVE LOG")
    finally:
        srv.kill()
    shutil.rmtree(arch)
    r = hmq(child_env(standby), "activate", "QS", "--no-start")
    said = " ".join(r.stderr.split())
    assert "HMQ7304W" in said and "activated with the log it has" in said, said
    with QueueManager.open("QS", home=standby) as qm:
        bodies = []
        while (m := qm.get("A.Q")) is not None:
            bodies.append(bytes(m.body).decode())
    assert bodies == [f"a-{i}" for i in range(20)]


def _put(home: Path, first: int, n: int, *, archive_log: bool = False) -> None:
    """Persistent puts in-process; then ARCHIVE LOG (close the extent, archive it)."""
    with QueueManager.open("QS", home=home) as qm:
        for i in range(first, first + n):
            qm.put("C.Q", f"m{i}", persistent=True)
        if archive_log:
            qm._call(qm.core.log_management.archive_now())


def _following_standby(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A primary (m0..m4 archived, cold backup) and its standby, replayed once."""
    primary, standby, arch = tmp_path / "primary", tmp_path / "standby", tmp_path / "arch"
    create_primary(primary, arch)
    with QueueManager.open("QS", home=primary) as qm:
        qm.define_queue("C.Q")
    _put(primary, 0, 5, archive_log=True)
    bk = json.loads(hmq(child_env(primary), "backup", "QS", "--to", str(tmp_path / "bk"),
                        "--json").stdout)["path"]
    restore_standby(standby, bk)
    replay_once(standby, arch)
    return primary, standby, arch


@pytest.mark.parametrize("cut_in", ["archived extent", "open extent"])
def test_a_conditional_restart_of_the_primary_stops_the_standby(tmp_path, cut_in):
    """The primary gives up its log after a point (harbormq log crestart): the
    standby must neither replay the given-up log nor be activated with it."""
    primary, standby, arch = _following_standby(tmp_path)
    _put(primary, 5, 5)
    with QueueManager.open("QS", home=primary) as qm:
        cut = qm.core.log.end_lsn
    # archived extent: the extent holding the cut point is archived whole first
    _put(primary, 10, 5, archive_log=cut_in == "archived extent")
    hmq(child_env(primary), "log", "crestart", "QS", "--end-lsn", str(cut), "--yes")
    _put(primary, 20, 3, archive_log=True)
    with QueueManager.open("QS", home=primary) as qm:
        kept = [bytes(m.body).decode() for m in qm.browse("C.Q")]
    assert kept == [f"m{i}" for i in [*range(10), 20, 21, 22]]
    for _ in range(2):                 # refused every time, not once
        r = replay_once(standby, check=False)
        said = " ".join(r.stderr.split())
        assert r.returncode == 1 and "HMQ7310E" in said and "conditional restart" in said, said
    for extra in ([], ["--force"]):
        r = hmq(child_env(standby), "activate", "QS", "--no-start", *extra, check=False)
        said = " ".join(r.stderr.split())
        assert r.returncode == 1 and "conditional restart" in said, said
    r = hmq(child_env(standby), "start", "QS", check=False)
    assert r.returncode == 1 and "HMQ7310E" in r.stderr     # still a standby


def test_activation_is_refused_when_the_archive_fails_unless_forced(tmp_path):
    primary, standby, arch = _following_standby(tmp_path)
    _put(primary, 5, 5, archive_log=True)
    newest = archived(arch)[-1]
    path = archive.archive_dir(arch, "QS") / newest.name
    data = bytearray(path.read_bytes())
    data[5000] ^= 0xFF                 # the newest archived extent is damaged
    path.write_bytes(bytes(data))
    r = hmq(child_env(standby), "activate", "QS", "--no-start", check=False)
    said = " ".join(r.stderr.split())
    assert r.returncode == 1 and "nothing was activated" in said and "--force" in said, said
    r = hmq(child_env(standby), "activate", "QS", "--no-start", "--force")
    assert "HMQ7304W" in " ".join(r.stderr.split())
    with QueueManager.open("QS", home=standby) as qm:
        got = [bytes(m.body).decode() for m in qm.browse("C.Q")]
    assert got == [f"m{i}" for i in range(5)]     # what was replayed, nothing else
