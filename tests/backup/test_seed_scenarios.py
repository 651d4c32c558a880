"""The seeds' backup and recovery procedures, each run as the seed describes
it with harbormq's tools: the ``harbormq`` command line against real queue
manager processes, messages sent and received by a stomp.py client.

Each test is named after the seed and section it follows, and asserts the
exact messages (bodies, order) and definitions after the recovery, and that
what the procedure must lose is lost. docs/backup-and-restore.md lists them
with the seed's steps mapped to harbormq's commands, and the procedures
harbormq cannot run."""

from __future__ import annotations

import json
import shutil
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from support.stomp_helpers import QMServer, stomp_client

from harbormq.backup import manifest as mf

QM = "QS"
ORDERS = "ORDERS"


# ------------------------------------------------------------------------- helpers

def body(i: int) -> str:
    return f"order-{i:05d}"


def bodies(nums) -> list[str]:
    return [body(i) for i in nums]


def create(home: Path, *extra: str, name: str = QM, log: str = "linear") -> QMServer:
    """A queue manager with a log of small extents (256 KiB), port 0."""
    srv = QMServer(home, name)
    home.mkdir(parents=True, exist_ok=True)
    srv.cli("create", name, "--port", "0", "--log", log, "--log-file-pages", "64", *extra)
    return srv


@contextmanager
def running(srv: QMServer):
    """The queue manager started for the block, stopped (controlled) after it."""
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def send(srv: QMServer, nums, queue: str = ORDERS) -> None:
    """Persistent SENDs, each with a receipt; returns once every RECEIPT came."""
    c = stomp_client(srv.port)
    nums = list(nums)
    for i in nums:
        c.send(f"/queue/{queue}", body(i), headers={"persistent": "true", "receipt": f"r{i}"})
    c.col.wait(lambda: len(c.col.receipts) >= len(nums), 60, "every receipt")
    c.disconnect()


def fill_log(srv: QMServer, kib: int) -> None:
    """About ``kib`` KiB of log written by 4 KiB messages to queue FILL."""
    c = stomp_client(srv.port)
    n = max(1, kib // 4)
    for i in range(n):
        c.send("/queue/FILL", "f" * 4096, headers={"persistent": "true", "receipt": f"f{i}"})
    c.col.wait(lambda: len(c.col.receipts) >= n, 60, "every receipt")
    c.disconnect()


def depth(srv: QMServer, queue: str = ORDERS) -> int:
    out = srv.sc(f"DISPLAY QSTATUS({queue}) CURDEPTH")
    return int(out.split("CURDEPTH(")[1].split(")")[0])


def consume(srv: QMServer, n: int, queue: str = ORDERS) -> list[str]:
    """Take ``n`` messages off the queue (client-individual acks, each acked)."""
    c = stomp_client(srv.port)
    c.subscribe(f"/queue/{queue}", id="1", ack="client-individual",
                headers={"prefetch-count": str(n)})
    got = c.col.wait_messages(n, 60)[:n]
    for m in got:
        c.ack(m.headers["ack"])
    c.disconnect(receipt="bye")      # the receipt comes after every ACK is applied
    return [m.body for m in got]


def contents(srv: QMServer, queue: str = ORDERS) -> list[str]:
    """Every message on the queue, in delivery order, left on the queue: the
    depth first, then that many delivered and not acknowledged (they go back
    when the connection ends)."""
    n = depth(srv, queue)
    if n == 0:
        return []
    c = stomp_client(srv.port)
    c.subscribe(f"/queue/{queue}", id="1", ack="client-individual",
                headers={"prefetch-count": str(n)})
    got = c.col.wait_messages(n, 60)
    time.sleep(0.2)
    assert len(c.col.messages) == n, f"{len(c.col.messages)} delivered for a depth of {n}"
    c.disconnect()
    return [m.body for m in got]


def queues(srv: QMServer) -> set[str]:
    out = srv.sc("DISPLAY QLOCAL(*)")
    return {part.split(")")[0] for part in out.split("QUEUE(")[1:]}


def definitions(srv: QMServer) -> str:
    """The queue manager's definitions as an MQSC script (dump-config), without
    its comment lines (they say when it was written)."""
    return "\n".join(line for line in srv.cli("dump-config", srv.name).stdout.splitlines()
                     if not line.startswith("*"))


def said(srv: QMServer, msgid: str) -> bool:
    errors = srv.qm_dir / "errors"
    return any(msgid in p.read_text(errors="replace") for p in errors.glob("HMQERR*.LOG"))


def backup(srv: QMServer, to: Path, *extra: str) -> dict:
    return json.loads(srv.cli("backup", srv.name, "--to", str(to), "--json", *extra).stdout)


def restore(home: Path, *args: str, name: str = QM) -> tuple[QMServer, str]:
    """``harbormq restore`` run under ``home``; the restored queue manager's
    server (not started) and the command's output."""
    home.mkdir(parents=True, exist_ok=True)
    srv = QMServer(home, name)
    r = srv.cli("restore", *args)
    return srv, " ".join(r.stdout.split())


def lose(*paths: Path) -> None:
    for p in paths:
        shutil.rmtree(p)


# ------------------------------------------------------- whole queue manager, cold

def test_redbook_4_8_3_system_recovery_from_a_cold_backup(tmp_path):
    """Redbook §4.8.3 (and §2.3.1 method 1, §5.8.2): the queue manager is
    stopped and backed up whole; later its directories are lost and only the
    backup is left. The restore gives the queue manager exactly as it was
    at the backup; whatever happened after it is lost."""
    home = tmp_path / "site"
    srv = create(home)
    srv.start()
    srv.sc(f"DEFINE QLOCAL({ORDERS}) MAXDEPTH(4321) DESCR('orders in')")
    send(srv, range(50))
    assert consume(srv, 10) == bodies(range(10))
    srv.stop()                                                   # ENDMQM
    res = backup(srv, tmp_path / "bk")
    assert res["mode"] == "cold" and res["kind"] == "full"
    defs_at_backup = definitions(srv)
    srv.start()                                                  # after the backup
    send(srv, range(50, 80))
    srv.sc(f"ALTER QLOCAL({ORDERS}) MAXDEPTH(99)")
    srv.sc("DEFINE QLOCAL(LATE)")
    srv.stop()
    lose(home / "qmgrs" / QM, home / "log" / QM)                 # the disk is gone
    new, out = restore(home, QM, "--from", str(tmp_path / "bk" / QM))
    assert "HMQ8606I" in out
    with running(new):
        assert contents(new) == bodies(range(10, 50))
        assert "LATE" not in queues(new)
    assert definitions(new) == defs_at_backup


def test_redbook_4_8_3_system_recovery_with_the_newest_logs_put_back(tmp_path):
    """Redbook §4.8.3 steps 3-4 (the newest logs archived first, put back in
    their place after the backup is restored) and iSeries scenario 2 (only
    the journal receivers are left): the queue manager's directory is lost
    but its log directory survives. The restore rolls forward through that
    log: nothing acknowledged is lost."""
    home = tmp_path / "site"
    srv = create(home)
    srv.start()
    srv.sc(f"DEFINE QLOCAL({ORDERS}) MAXDEPTH(4321)")
    send(srv, range(30))
    srv.stop()
    backup(srv, tmp_path / "bk")
    srv.start()
    send(srv, range(30, 60))
    assert consume(srv, 5) == bodies(range(5))
    srv.sc(f"ALTER QLOCAL({ORDERS}) MAXDEPTH(77)")
    defs = definitions(srv)
    srv.stop()
    lose(home / "qmgrs" / QM)                                    # the log directory is left
    # the log directory is not empty: the restore asks for --replace (its hint)
    r = QMServer(home, QM).cli("restore", QM, "--from", str(tmp_path / "bk" / QM), check=False)
    assert r.returncode == 1 and "give --replace" in " ".join(r.stderr.split()), r.stderr
    new, out = restore(home, QM, "--from", str(tmp_path / "bk" / QM), "--replace")
    assert f"from the log directory {home / 'log' / QM}" in out, out
    assert "nothing known to be lost" in out, out
    with running(new):
        assert contents(new) == bodies(range(5, 60))
    assert definitions(new) == defs


# -------------------------------------------------- fuzzy backup + archived log

def test_redbook_2_3_1_method_2_fuzzy_backup_and_archive_log_on_another_site(tmp_path):
    """Redbook §2.3.1 method 2 (note the recovery point, copy the page sets
    while the queue manager runs, ARCHIVE LOG), then §2.4.4 / z/OS DR
    scenario 3 (DR without mirrored DASD): the site is lost; the backup and
    the archive were copied to the recovery site. The queue manager comes
    back as of the last ARCHIVE LOG, under the same name; what was logged
    after it is lost."""
    home, arch = tmp_path / "site", tmp_path / "arch"
    srv = create(home, "--log-management", "archive", "--log-archive-path", str(arch))
    srv.start()
    try:
        srv.sc(f"DEFINE QLOCAL({ORDERS}) MAXDEPTH(5000)")
        send(srv, range(100))
        assert consume(srv, 20) == bodies(range(20))
        res = backup(srv, tmp_path / "bk")                     # hot, while it serves
        assert res["mode"] == "hot"
        send(srv, range(100, 200))
        assert consume(srv, 10) == bodies(range(20, 30))
        srv.sc("DEFINE QLOCAL(AFTER.BACKUP)")
        assert "HMQ7481I" in srv.sc("ARCHIVE LOG")              # the last archive
        send(srv, range(200, 230))                             # never archived
        srv.sc("DEFINE QLOCAL(NEVER.ARCHIVED)")
    finally:
        srv.kill()
    # the recovery site gets copies of the backup and of the archive
    dr = tmp_path / "dr"
    shutil.copytree(tmp_path / "bk", dr / "bk")
    shutil.copytree(arch, dr / "arch")
    lose(home, arch, tmp_path / "bk")
    (dr / "home").mkdir()
    plan = " ".join(QMServer(dr / "home", QM).cli(
        "restore", QM, "--from", str(dr / "bk" / QM), "--archive", str(dr / "arch"),
        "--dry-run").stdout.split())
    assert f"from archive {dr / 'arch' / QM}" in plan, plan
    assert "Dry run: nothing was changed." in plan
    new, out = restore(dr / "home", QM, "--from", str(dr / "bk" / QM), "--archive",
                       str(dr / "arch"), "--port", "0")
    with running(new):
        assert contents(new) == bodies(range(30, 200))
        assert {"AFTER.BACKUP", ORDERS} <= queues(new)
        assert "NEVER.ARCHIVED" not in queues(new)
        send(new, [999])                                       # it works on
        assert contents(new)[-1] == body(999)


# ---------------------------------------------------------------- point in time

def test_redbook_2_4_4_crestart_endrba_restore_to_a_point_in_time(tmp_path):
    """Redbook §2.4.4 step 13 (CRESTART CREATE,ENDRBA: recover up to a chosen
    point, not to the end of the log), as z/OS DR does it: a batch that must
    never have run is given up. The restore brings the backup forward to the
    time before the batch; the batch's puts, gets and definitions are lost,
    the source queue manager is untouched."""
    home, arch = tmp_path / "site", tmp_path / "arch"
    srv = create(home, "--log-management", "archive", "--log-archive-path", str(arch))
    with running(srv):
        srv.sc(f"DEFINE QLOCAL({ORDERS}) MAXDEPTH(5000)")
        send(srv, range(40))
        res = backup(srv, tmp_path / "bk")
        send(srv, range(40, 60))
        assert consume(srv, 5) == bodies(range(5))
        defs_at_point = definitions(srv)
        time.sleep(0.05)
        point = datetime.now(timezone.utc).isoformat()
        time.sleep(0.05)
        # the batch that must never have run
        assert consume(srv, 30) == bodies(range(5, 35))
        send(srv, range(60, 90))
        srv.sc(f"ALTER QLOCAL({ORDERS}) MAXDEPTH(10)")
        srv.sc("DEFINE QLOCAL(BATCH.OUT)")
        srv.sc("ARCHIVE LOG")
        source_after = contents(srv)
    new, out = restore(tmp_path / "pit", QM, "--from", res["path"], "--to-time", point,
                       "--port", "0")
    assert "roll forward to" in out and "conditional restart" in out, out
    with running(new):
        assert contents(new) == bodies(range(5, 60))
        assert "BATCH.OUT" not in queues(new)
    assert said(new, "HMQ7131W"), "the first start gave up the log after the point"
    assert definitions(new) == defs_at_point
    with running(srv):
        assert contents(srv) == source_after == bodies(range(35, 90))


# ------------------------------------------- another machine, the same name

def test_iseries_3_3_6_restore_onto_another_system_under_the_same_name(tmp_path):
    """Redbook §3.3.6 (iSeries scenario 6, and MVS DR §2.4.4: "the subsystem
    name must be the same"): save on the old system (RCDMQMIMG, ENDMQM,
    SAVLIB), then on the new one create the queue manager and start it to
    test the install, end it, and restore the saved library over it under
    the same name; RCDMQMIMG again. The new system has the old one's
    messages, definitions, users and authority records; its log is its own."""
    old = tmp_path / "old"
    srv = create(old)
    srv.start()
    srv.sc(f"DEFINE QLOCAL({ORDERS}) MAXDEPTH(4321) DESCR('moved')")
    srv.sc("DEFINE QLOCAL(DEADQ.MOVED)")
    srv.sc("ALTER QMGR DEADQ(DEADQ.MOVED)")
    send(srv, range(25))
    send(srv, range(100, 105), queue="DEADQ.MOVED")
    srv.user_add("alice", "s3cret-pass", "apps")
    srv.sc(f"SET AUTHREC PROFILE({ORDERS}) OBJTYPE(QUEUE) GROUP('apps') AUTHADD(PUT,GET)")
    assert "HMQ" in srv.cli("image", QM, "--type", "all").stdout        # RCDMQMIMG
    srv.stop()                                                           # ENDMQM
    res = backup(srv, tmp_path / "tape")                                 # SAVLIB
    defs = definitions(srv)
    # the new system: installed, the queue manager created and tried, then ended
    new_home = tmp_path / "new"
    shutil.copytree(tmp_path / "tape", tmp_path / "new-tape")
    fresh = create(new_home)
    fresh.start()
    fresh.stop()
    new, out = restore(new_home, QM, "--from",
                       str(tmp_path / "new-tape" / QM / Path(res["path"]).name),
                       "--replace", "--port", "0")
    assert f"log directory {new_home / 'log' / QM}" in out, out
    with running(new):
        assert contents(new) == bodies(range(25))
        assert contents(new, "DEADQ.MOVED") == bodies(range(100, 105))
        assert "DEADQ(DEADQ.MOVED)" in new.sc("DISPLAY QMGR DEADQ")
        assert "alice" in new.cli("user", "list", QM).stdout
        new.cli("image", QM, "--type", "all")                            # step 18
        need = json.loads(new.cli("log", "need", QM, "--json").stdout)
    assert definitions(new) == defs
    # the old system is untouched
    with running(srv):
        assert contents(srv) == bodies(range(25))
    assert need


# ---------------------------------------------------------------- one store

def _store_file(backup_path: Path, queue: str) -> str:
    return next(f["path"] for f in mf.read_manifest(backup_path)["files"]
                if f["kind"] == "store" and f.get("queue") == queue)


def test_redbook_2_4_2_damaged_page_set_restored_from_a_backup_copy(tmp_path):
    """Redbook §2.4.2 and §2.3.3 method 1 (z/OS restart-and-DR scenario 2):
    one page set is damaged; its backup copy is put back in its place (REPRO)
    and the queue manager restarted: it brings the old copy forward from the
    log. Here one queue's store, taken from a hot backup; the other queue is
    not touched."""
    home = tmp_path / "site"
    srv = create(home)
    with running(srv):
        srv.sc(f"DEFINE QLOCAL({ORDERS})")
        srv.sc("DEFINE QLOCAL(OTHER)")
        send(srv, range(40))
        send(srv, range(500, 510), queue="OTHER")
        res = backup(srv, tmp_path / "bk")
        send(srv, range(40, 70))
        assert consume(srv, 15) == bodies(range(15))
        send(srv, range(510, 520), queue="OTHER")
    rel = _store_file(Path(res["path"]), ORDERS)
    live = srv.qm_dir / rel                      # queues/<dir>/data.mdb, as in the backup
    assert live.exists()
    live.write_bytes(b"\0" * 8192)               # the damage
    shutil.copyfile(Path(res["path"]) / rel, live)           # REPRO from the backup
    with running(srv):
        assert contents(srv) == bodies(range(15, 70))
        assert contents(srv, "OTHER") == bodies(range(500, 520))


def test_use_the_log_damaged_queue_recreated_from_its_media_image(tmp_path):
    """"Use the log for recovery" (damaged objects at start up), redbook §4.8.6
    (rcrmqobj -t q) and iSeries scenario 7 (object damage): a queue's store
    is damaged while the queue manager is down; at start it is recreated
    from its latest media image and the log after it (HMQ7472E, HMQ7474I),
    before any work is accepted. ``harbormq recreate`` does the same on
    demand while it runs (§4.8.4: rcrmqobj -t all)."""
    home = tmp_path / "site"
    srv = create(home)
    with running(srv):
        srv.sc(f"DEFINE QLOCAL({ORDERS}) DESCR('imaged')")
        send(srv, range(30))
        srv.cli("image", QM, "--type", "queue", ORDERS)        # rcdmqimg
        send(srv, range(30, 50))
        assert consume(srv, 7) == bodies(range(7))
    store = next(p for p in (srv.qm_dir / "queues").iterdir()
                 if p.is_dir() and "#" not in p.name and ORDERS in p.name) / "data.mdb"
    data = bytearray(store.read_bytes())
    marker = body(20).encode()                                 # bad blocks on the disk:
    at = data.find(marker)                                     # every copy of one message
    assert at > 0
    while at >= 0:
        data[at:at + len(marker)] = bytes(b ^ 0xFF for b in marker)
        at = data.find(marker, at)
    store.write_bytes(bytes(data))
    with running(srv):
        assert said(srv, "HMQ7472E") and said(srv, "HMQ7474I")
        assert contents(srv) == bodies(range(7, 50))
        out = srv.cli("recreate", QM, "--type", "all").stdout   # §4.8.4, running
        assert contents(srv) == bodies(range(7, 50)), out
        assert "imaged" in srv.sc(f"DISPLAY QLOCAL({ORDERS}) DESCR")


# --------------------------------------------- iSeries: library + receivers

def test_iseries_3_3_1_disk_crash_saved_library_plus_journal_receivers(tmp_path):
    """Redbook §3.3.1 (iSeries scenario 1, disk crash) with the journal
    management of the iSeries text: before the save, RCDMQMIMG and delete the
    receivers AMQ7460/AMQ7462 say are no longer needed (``log need``,
    ``log delete``); ENDMQM and SAVLIB (a cold backup of the queue manager);
    the receivers detached later are saved incrementally (archived extents,
    ARCHIVE LOG). After the crash: the incremental receivers and the library
    are restored, STRMQM replays the receivers, RCDMQMIMG advances the
    startup and media recovery points. Back: everything up to the last saved
    receiver; lost: what was journaled after it."""
    home, arch = tmp_path / "site", tmp_path / "receivers"
    srv = create(home, "--log-management", "manual", "--log-archive-path", str(arch))
    srv.start()
    srv.sc(f"DEFINE QLOCAL({ORDERS}) MAXDEPTH(9000)")
    for n in range(0, 300, 100):
        send(srv, range(n, n + 100))                           # a few extents' worth
    assert consume(srv, 50) == bodies(range(50))
    srv.cli("image", QM, "--type", "all")                      # RCDMQMIMG
    need = json.loads(srv.cli("log", "need", QM, "--json").stdout)
    srv.sc("ARCHIVE LOG")                                      # receivers saved first
    deleted = srv.cli("log", "delete", QM, "--all").stdout     # then the unneeded deleted
    assert "HMQ7482I" in deleted and "HMQ7483W" not in deleted, deleted
    srv.stop()
    res = backup(srv, tmp_path / "savlib")                      # SAVLIB
    assert res["mode"] == "cold"
    srv.start()
    send(srv, range(300, 400))
    assert consume(srv, 10) == bodies(range(50, 60))
    srv.sc("DEFINE QLOCAL(AFTER.SAVLIB)")
    srv.sc("ARCHIVE LOG")                                      # the incremental save
    send(srv, range(400, 420))                                 # never saved
    srv.kill()
    saved = tmp_path / "tape-receivers"
    shutil.copytree(arch, saved)
    lose(home, arch)                                           # the disk crash
    new, out = restore(tmp_path / "rebuilt", QM, "--from", res["path"], "--archive",
                       str(saved), "--port", "0")
    assert f"from archive {saved / QM}" in out, out
    with running(new):
        assert contents(new) == bodies(range(60, 400))
        assert "AFTER.SAVLIB" in queues(new)
        new.cli("image", QM, "--type", "all")                  # step 18: RCDMQMIMG
        after = json.loads(new.cli("log", "need", QM, "--json").stdout)
    assert after and need


def test_iseries_3_3_4_queue_manager_deleted(tmp_path):
    """Redbook §3.3.4 option 1 (iSeries scenario 4): someone deletes the
    queue manager, its local journal receivers with it. Restore the saved
    receivers and the saved library: the queue manager comes back as of the
    last saved receiver."""
    home, arch = tmp_path / "site", tmp_path / "arch"
    srv = create(home, "--log-management", "archive", "--log-archive-path", str(arch))
    srv.start()
    srv.sc(f"DEFINE QLOCAL({ORDERS})")
    send(srv, range(20))
    res = backup(srv, tmp_path / "bk")
    send(srv, range(20, 45))
    assert consume(srv, 3) == bodies(range(3))
    srv.sc("ARCHIVE LOG")
    srv.stop()
    srv.cli("delete", QM)
    assert not srv.qm_dir.exists() and not (home / "log" / QM).exists()
    new, out = restore(home, QM, "--from", res["path"])
    with running(new):
        assert contents(new) == bodies(range(3, 45))


# ------------------------------------------------------ the log and the BSDS

def test_redbook_2_4_1_1_one_active_log_copy_lost_dual_logging(tmp_path):
    """Redbook §2.4.1.1: one copy of an active log data set is deleted or
    corrupted; with dual logging it is copied back from the other copy
    (REPRO), then the queue manager restarts as normal."""
    home = tmp_path / "site"
    srv = create(home, "--log-dual-path", str(tmp_path / "disk2" / QM))
    srv.start()
    srv.sc(f"DEFINE QLOCAL({ORDERS})")
    send(srv, range(100))
    fill_log(srv, 600)                                         # three extents or more
    send(srv, range(100, 200))
    assert consume(srv, 4) == bodies(range(4))
    srv.stop()
    extents = sorted((home / "log" / QM).glob("S*.LOG"))
    assert len(extents) >= 2
    extents[0].unlink()                                        # one copy lost
    extents[-1].write_bytes(b"\0" * extents[-1].stat().st_size)   # another corrupted
    out = srv.cli("log", "recover-copy", QM).stdout
    assert "HMQ7493I" in out, out
    with running(srv):
        assert contents(srv) == bodies(range(4, 200))


def test_redbook_2_4_1_2_both_active_logs_lost_new_log_from_the_page_sets(tmp_path):
    """Redbook §2.4.1.2: every copy of the active log is lost, and the page
    sets are consistent (the queue manager had been stopped cleanly): new
    log data sets are defined and the page sets reset to them (RESETPAGE,
    CSQJU003), and the queue manager restarts from a new starting point:
    ``harbormq reset-log``. Nothing committed before the stop is lost."""
    home = tmp_path / "site"
    srv = create(home)
    srv.start()
    srv.sc(f"DEFINE QLOCAL({ORDERS}) MAXDEPTH(777)")
    send(srv, range(60))
    assert consume(srv, 6) == bodies(range(6))
    srv.stop()
    lose(home / "log" / QM)
    code, text = srv.start_failure()
    assert code != 0, text
    plan = srv.cli("reset-log", QM).stdout
    assert plan and not (home / "log" / QM / "control.1").exists()
    srv.cli("reset-log", QM, "--yes")
    with running(srv):
        assert contents(srv) == bodies(range(6, 60))
        assert "MAXDEPTH(777)" in srv.sc(f"DISPLAY QLOCAL({ORDERS}) MAXDEPTH")
        send(srv, [60])
        assert contents(srv)[-1] == body(60)


def test_redbook_2_4_3_bsds_lost_rebuilt_from_the_log(tmp_path):
    """Redbook §2.4.3 (a lost or damaged BSDS) and z/OS restart's dual BSDS
    check: one copy of the control file damaged is repaired by restart from
    the other; both lost, the queue manager does not start, and the control
    file is rebuilt from the extents (``log rebuild-control``)."""
    home = tmp_path / "site"
    srv = create(home)
    srv.start()
    srv.sc(f"DEFINE QLOCAL({ORDERS})")
    for n in range(0, 200, 100):
        send(srv, range(n, n + 100))
    assert consume(srv, 9) == bodies(range(9))
    srv.stop()
    logdir = home / "log" / QM
    (logdir / "control.1").write_bytes(b"\xff" * 100)            # one copy damaged
    with running(srv):
        assert contents(srv) == bodies(range(9, 200))
    for name in ("control.1", "control.2"):                    # both lost
        (logdir / name).unlink()
    code, text = srv.start_failure()
    assert code != 0 and ("HMQ7120E" in text or "HMQ7121E" in text), text
    srv.cli("log", "rebuild-control", QM, "--yes")
    with running(srv):
        assert contents(srv) == bodies(range(9, 200))


# ---------------------------------------------------- definitions and queues

def test_redbook_2_3_4_object_definitions_makedef_replayed_into_a_new_queue_manager(tmp_path):
    """Redbook §2.3.4 (CSQUTIL MAKEDEF) and §1.4: the object definitions
    saved as commands, replayed into an empty queue manager (CSQINP2) after
    page sets and logs were cleaned out: the same definitions; no messages."""
    home = tmp_path / "site"
    srv = create(home)
    with running(srv):
        srv.sc(f"DEFINE QLOCAL({ORDERS}) MAXDEPTH(4321) DESCR('orders in') DEFPSIST(YES)")
        srv.sc("DEFINE QLOCAL(ORDERS.BO) BOTHRESH(3)")
        srv.sc("ALTER QMGR DEADQ(ORDERS.BO)")
        send(srv, range(5))
        script = tmp_path / "makedef.mqsc"
        srv.cli("dump-config", QM, "--to", str(script))
        defs = definitions(srv)
    srv.cli("delete", QM)
    new = create(home)
    with running(new):
        new.cli("sc", QM, input=script.read_text())
        assert depth(new) == 0
    assert definitions(new) == defs


def test_redbook_2_3_5_backing_up_and_restoring_a_queue(tmp_path):
    """Redbook §2.3.5 (CSQUTIL COPY QUEUE, LOAD QUEUE): one queue's messages
    copied to a file, and loaded back after the queue was lost: the same
    messages in the same order."""
    home = tmp_path / "site"
    srv = create(home)
    with running(srv):
        srv.sc(f"DEFINE QLOCAL({ORDERS})")
        send(srv, range(40))
        saved = tmp_path / "orders.hmqload"
        srv.cli("unload", QM, ORDERS, "--to", str(saved))
        assert depth(srv) == 40
        srv.sc(f"DELETE QLOCAL({ORDERS}) PURGE")
        srv.sc(f"DEFINE QLOCAL({ORDERS})")
        srv.cli("load", QM, ORDERS, "--from", str(saved))
        assert contents(srv) == bodies(range(40))



# ------------------------------------------------ more of the seeds' scenarios

def test_redbook_2_4_4_disaster_recovery_from_the_archived_bsds_and_logs(tmp_path):
    """Redbook §2.4.4 steps 8-13 and 17 (z/OS DR scenario 3): the active log
    is lost with its disk; the archive holds the extents up to the last
    ARCHIVE LOG and the BSDS archived with them. The archived BSDS is copied
    in (REPRO), a conditional restart ends the log at the last archived
    extent (CRESTART CREATE,ENDRBA), and the queue manager starts: it is as
    it was at the last ARCHIVE LOG; what was logged after it is lost."""
    home, arch = tmp_path / "site", tmp_path / "arch"
    srv = create(home, "--log-management", "archive", "--log-archive-path", str(arch))
    srv.start()
    try:
        srv.sc(f"DEFINE QLOCAL({ORDERS})")
        send(srv, range(50))
        assert consume(srv, 5) == bodies(range(5))
        out = srv.sc("ARCHIVE LOG")
        last = out.split("HMQ7481I")[1].split("archived")[0].split(",")[-1].split()[-1]
        assert last.startswith("S") and last.endswith(".LOG"), out
        send(srv, range(50, 70))                               # never archived
        srv.sc("DEFINE QLOCAL(NEVER.ARCHIVED)")
    finally:
        srv.kill()
    logdir = home / "log" / QM
    for p in logdir.iterdir():                                 # the log's disk is gone
        if p.is_file():
            p.unlink()
    for name in ("control.1", "control.2"):                    # REPRO the archived BSDS
        shutil.copyfile(arch / QM / "control.archived", logdir / name)
    plan = srv.cli("log", "crestart", QM, "--end-extent", last).stdout
    srv.cli("log", "crestart", QM, "--end-extent", last, "--yes")
    with running(srv):
        assert contents(srv) == bodies(range(5, 50))
        assert "NEVER.ARCHIVED" not in queues(srv)
        send(srv, [70])
        assert contents(srv)[-1] == body(70)
    assert plan and said(srv, "HMQ7131W")


def test_iseries_3_3_3_queue_manager_damaged_restored_over_itself(tmp_path):
    """Redbook §3.3.3 (iSeries scenario 3) and "use the log for recovery"
    (a damaged queue manager object with a log that cannot do media
    recovery: restore a backup): a circular log, the catalog destroyed, the
    queue manager cannot start. The saved library is restored over it and
    its own log (the journal receivers, still on disk) rolls it forward:
    nothing is lost."""
    home = tmp_path / "site"
    srv = create(home, log="circular", )
    with running(srv):
        srv.sc(f"DEFINE QLOCAL({ORDERS}) MAXDEPTH(3333)")
        send(srv, range(30))
        backup(srv, tmp_path / "bk")
        send(srv, range(30, 60))
        assert consume(srv, 12) == bodies(range(12))
        srv.sc("DEFINE QLOCAL(AFTER.BACKUP)")
    (srv.qm_dir / "qmgr" / "data.mdb").write_bytes(b"\xa5" * 16384)   # the damage
    code, text = srv.start_failure()
    assert code != 0, text
    new, out = restore(home, QM, "--from", str(tmp_path / "bk" / QM), "--replace")
    assert f"from the log directory {home / 'log' / QM}" in out, out
    with running(new):
        assert contents(new) == bodies(range(12, 60))
        assert "AFTER.BACKUP" in queues(new)
        assert "MAXDEPTH(3333)" in new.sc(f"DISPLAY QLOCAL({ORDERS}) MAXDEPTH")


def test_iseries_3_3_5_system_failure_no_data_loss(tmp_path):
    """Redbook §3.3.5 (iSeries scenario 5) and "use the log for recovery"
    (power loss): the queue manager's process ends abnormally; it is
    started again and restart recovery gives exactly the committed state:
    every receipted persistent message; nothing of a transaction never
    committed, and no non-persistent message (MQ discards them at restart)."""
    home = tmp_path / "site"
    srv = create(home)
    srv.start()
    srv.sc(f"DEFINE QLOCAL({ORDERS})")
    send(srv, range(80))
    assert consume(srv, 8) == bodies(range(8))
    c = stomp_client(srv.port)
    c.begin("tx1")
    c.send(f"/queue/{ORDERS}", "never committed", headers={"persistent": "true",
                                                             "transaction": "tx1"})
    c.send(f"/queue/{ORDERS}", "non-persistent", headers={"receipt": "seen"})
    c.col.wait_receipt("seen")
    srv.kill()                                                 # ENDJOB *IMMED
    with running(srv):
        assert contents(srv) == bodies(range(8, 80))


def test_redbook_4_8_3_step_7_channel_resynchronised_after_a_restore(tmp_path):
    """Redbook §4.8.3 steps 1, 6 and 7, §4.4 and §2.4.5: the receiving
    queue manager is restored from an older backup; its channel's sequence
    number is behind the sender's, so the channel stops (HMQ9526E, MQ's
    AMQ9526) and nothing moves until the operator resets the sender's
    sequence number (RESET CHANNEL SEQNUM). The messages that reached the
    receiver after its backup are lost there, and the restore said so only
    as far as it could know: the sender had already delivered them."""
    from channels.test_channels import pair, receive_all, send_all
    a, b, _ = pair(tmp_path, batchsz=5)
    try:
        send_all(a.port, "/queue/TO.B", bodies(range(10)))
        deadline = time.monotonic() + 60
        while depth(b, "IN") < 10:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        res = backup(b, tmp_path / "bk")
        send_all(a.port, "/queue/TO.B", bodies(range(10, 20)))
        # every batch confirmed at the sender too (none in doubt when QMB goes)
        while depth(b, "IN") < 20 or depth(a, "QMB") or \
                "INDOUBT(NO)" not in a.sc("DISPLAY CHSTATUS(QMA.TO.QMB) ALL"):
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        b.kill()
    lose(b.home)                                               # QMB's machine is lost
    new, _ = restore(b.home, "QMB", "--from", res["path"], name="QMB")
    new.start()
    try:
        assert contents(new, "IN") == bodies(range(10))        # 10..19 lost on QMB
        send_all(a.port, "/queue/TO.B", [body(20)])
        deadline = time.monotonic() + 60
        while "HMQ9526E" not in (a.qm_dir / "errors" / "HMQERR01.LOG").read_text():
            assert time.monotonic() < deadline, a.sc("DISPLAY CHSTATUS(QMA.TO.QMB) ALL")
            time.sleep(0.2)
        while "STATUS(STOPPED)" not in a.sc("DISPLAY CHSTATUS(QMA.TO.QMB)"):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert depth(a, "QMB") == 1, "the message waits on the transmission queue"
        a.sc("RESET CHANNEL(QMA.TO.QMB) SEQNUM(11)\nSTART CHANNEL(QMA.TO.QMB)")
        assert receive_all(new.port, "IN", 11) == bodies(range(10)) + [body(20)]
    finally:
        new.stop()
        a.stop()
