"""Dual logging (log.dual_path, MQ z/OS's dual active logs): every extent and
the control file are written to two directories, a read that fails in one copy
goes on in the other, a copy that fails while running is given up and the
queue manager goes on with the other, and ``harbormq log recover-copy``
re-creates a lost copy (docs/design-notes.md, "The log").

The damage sweep builds one dual linear log of several small extents (a unit
of work left in flight from the first extent pins the restart point there, so
restart reads every extent; stores flush only at checkpoints, so the tail of
the log is the only copy of the last messages), then, on a fresh copy of it
per case, damages one copy of one extent or control file: deletes it, flips
bytes in a record or its header, or cuts it short. Restart must give every
acknowledged message and say which copy it read around; recover-copy must
then make both copies whole, and the next restart must be clean.

Without the fallback these cases fail: restart then stops with HMQ7501E or
HMQ6767E, or ends the log early and loses the last messages.
"""

from __future__ import annotations

import errno
import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support.lazyfs import LazyFS
from support.oplog import operator_log
from support.procs import child_env, hmq
from support.queues import queue_bodies
from support.stomp_helpers import QMServer, raw_connected

from harbormq import QueueManager
from harbormq.config import QMConfig
from harbormq.errors import ConfigError, ControlFileDamaged, ControlFileMismatch, HarbormqError
from harbormq.fsutil import fsync_dir
from harbormq.log import writer as log_writer
from harbormq.log.control import COPY_NAMES, ControlFile, decode_copy
from harbormq.log.reader import ExtentReader, same_bytes
from harbormq.log.records import EXTENT_HEADER_SIZE, RecordType, extent_file_name
from harbormq.qmgr import lifecycle as qmgr

QM = "QM1"
QUEUE = "Q1"
PAGES = 32          # 128 KiB extents: a few hundred messages fill one
DUAL_IDS = ("HMQ7490W", "HMQ7491W", "HMQ7492I")
SEED = int(os.environ.get("HARBORMQ_CRASH_SEED") or random.randrange(1 << 30))


# --- building a dual log --------------------------------------------------------------

@dataclass
class Rec:
    offset: int
    length: int
    lsn: int
    type: RecordType


@dataclass
class Built:
    root: Path                           # holds home/ and dual/
    bodies: list[bytes]                  # every acknowledged put, in order
    records: dict[int, list[Rec]]        # extent number -> its records
    full: list[int]                      # closed extents, oldest first
    active: int


@dataclass
class Case:
    home: Path
    dual: Path
    built: Built
    seen: int = 0                        # operator log entries before the last start
    said: list[tuple[str, str]] = field(default_factory=list)
    redo_start: int = 0                  # where the last restart began to read

    @property
    def primary(self) -> Path:
        return self.home / "log" / QM

    def dir_of(self, copy: str) -> Path:
        return self.primary if copy == "primary" else self.dual

    def start(self) -> QueueManager:
        """Start the queue manager; ``said``: what it said while starting."""
        log = self.home / "qmgrs" / QM / "errors" / "HMQERR01.LOG"
        self.seen = len(operator_log(self.home)) if log.exists() else 0
        qm = QueueManager.open(QM, home=self.home)
        self.said = operator_log(self.home)[self.seen:]
        self.redo_start = qm.restart_report.redo_start_lsn
        return qm

    def dual_messages(self) -> list[tuple[str, str]]:
        return [(m, t) for m, t in self.said if m in DUAL_IDS]


def quiet_flusher(home: Path) -> None:
    cfg = QMConfig.load(QM, home)
    cfg.tuning.flush_interval_ms = 3_600_000
    cfg.save()


def create_dual(home: Path, dual: Path, **options) -> None:
    options.setdefault("log_type", "linear")
    options.setdefault("log_file_pages", PAGES)
    qmgr.create(QM, home=home, log_dual_path=dual, **options)


def body_for(i: int, rnd: random.Random) -> bytes:
    head = b"msg-%05d-" % i
    return head + bytes(rnd.randrange(1, 256) for _ in range(rnd.randint(200, 600)))


def read_records(path: Path, newest: bool) -> list[Rec]:
    reader = ExtentReader(path, newest=newest)
    first = reader.header.first_lsn
    return [Rec(EXTENT_HEADER_SIZE + r.lsn - first, r.length, r.lsn, r.type)
            for r in reader.records()]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Built:
    root = tmp_path_factory.mktemp("dual-log")
    home, dual = root / "home", root / "dual"
    home.mkdir()
    create_dual(home, dual)
    quiet_flusher(home)
    qm = QueueManager.open(QM, home=home)
    qm.define_queue(QUEUE, DEFPSIST="YES")
    uow = qm.begin("long-running")       # pins the restart point in the first extent
    uow.put(QUEUE, b"in flight: backed out at restart")
    rnd = random.Random(7)
    bodies: list[bytes] = []
    while qm.core.log.state.active.number < 4:
        bodies.append(body_for(len(bodies), rnd))
        qm.put(QUEUE, bodies[-1])
    qm.checkpoint()          # the switch's checkpoint done: the log ends in puts
    for _ in range(12):
        bodies.append(body_for(len(bodies), rnd))
        qm.put(QUEUE, bodies[-1])
    assert qm.core.log.state.active.number == 4
    qm.close("preemptive")     # no checkpoint at the end: the log ends in the puts
    state = ControlFile(home / "log" / QM, dual).load(repair=False)
    assert state.dual and state.restart_lsn < state.extent(0).end_lsn
    records = {e.number: read_records(home / "log" / QM / extent_file_name(e.number),
                                      e.state == "active")
               for e in state.extents}
    for e in state.extents:      # the two copies are the same, byte for byte
        name = extent_file_name(e.number)
        assert same_bytes(home / "log" / QM / name, dual / name), name
    assert records[4][-1].type == RecordType.MSG_PUT
    return Built(root, bodies, records, [0, 1, 2, 3], 4)


@pytest.fixture
def case(built, tmp_path) -> Case:
    """A fresh copy of the built log (qm.toml pointed at the copy's dual dir)."""
    root = tmp_path / "c"
    shutil.copytree(built.root, root)
    cfg = QMConfig.load(QM, root / "home")
    cfg.log_dual_path = root / "dual"
    cfg.save()
    return Case(root / "home", root / "dual", built)


def flip_bytes(path: Path, offsets: list[int]) -> None:
    data = bytearray(path.read_bytes())
    for off in offsets:
        data[off] ^= 0x5A
    path.write_bytes(bytes(data))


def truncate(path: Path, length: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(length)


def assert_copies_equal(case: Case, numbers) -> None:
    for n in numbers:
        name = extent_file_name(n)
        assert same_bytes(case.primary / name, case.dual / name), f"{name} copies differ"


def restart_gives_everything(case: Case) -> None:
    qm = case.start()
    try:
        assert queue_bodies(qm, QUEUE) == case.built.bodies
        assert not [m for m, _ in case.said if m.endswith("E")], case.said
    finally:
        qm.close("immediate")


def recover_then_clean_restart(case: Case) -> list[str]:
    """recover-copy, then a restart that reads both copies without a word."""
    done = qmgr.recover_log_copy(QMConfig.load(QM, case.home))
    qm = case.start()
    try:
        assert queue_bodies(qm, QUEUE) == case.built.bodies
        assert case.dual_messages() == [], case.dual_messages()
        assert not [m for m, _ in case.said if m in ("HMQ7121W",) or m.endswith("E")]
    finally:
        qm.close("immediate")
    state = ControlFile(case.primary, case.dual).load(repair=False)
    assert not state.degraded
    assert_copies_equal(case, [e.number for e in state.extents])
    return done


# --- one copy of an extent damaged: restart reads the other ----------------------------

POSITIONS = ("first", "middle", "last")
EXTENTS = ("S0", "S1", "S3", "active")


def _extent(built: Built, which: str) -> int:
    return built.active if which == "active" else int(which[1:])


def _record(built: Built, number: int, where: str) -> Rec:
    recs = built.records[number]
    return {"first": recs[0], "middle": recs[len(recs) // 2], "last": recs[-1]}[where]


def _damage(case: Case, copy: str, number: int, how: str, where: str | None) -> None:
    path = case.dir_of(copy) / extent_file_name(number)
    if how == "delete":
        path.unlink()
    elif how == "header":
        flip_bytes(path, [0, 9, 21, 200])        # magic, extent number, first LSN, padding
    else:
        rec = _record(case.built, number, where)
        if how == "flip":      # its length, its payload, its trailer
            flip_bytes(path, [rec.offset + 1, rec.offset + rec.length // 2,
                              rec.offset + rec.length - 3])
        else:                  # cut short inside the record
            truncate(path, rec.offset + 7)


def _assert_said(case: Case, copy: str, number: int, how: str, where: str | None) -> None:
    name = extent_file_name(number)
    about = [(m, t) for m, t in case.dual_messages() if name in t and f"the {copy} copy" in t]
    if how == "flip" and _record(case.built, number, where).lsn < case.redo_start:
        # before the restart point (the queue manager's first records): restart
        # does not read it; recover-copy finds it
        assert about == [], case.said
    elif number == case.built.active:
        # the newest extent: both copies are read, the one reading furthest is
        # used and the other made equal to it before writing resumes
        assert [m for m, _ in about if m == "HMQ7492I"] == ["HMQ7492I"], case.said
    elif copy == "primary":
        assert [m for m, _ in about] == ["HMQ7491W"], case.said   # once per extent
    else:
        # a closed extent is read from the primary copy: the dual copy's damage
        # is met only when the primary fails too, and recover-copy finds it
        assert about == [], case.said


CASES = [(e, w, h) for e in EXTENTS for h in ("flip", "truncate") for w in POSITIONS] + \
        [(e, None, h) for e in EXTENTS for h in ("delete", "header")]


@pytest.mark.parametrize("copy", ["primary", "dual"])
@pytest.mark.parametrize("extent,where,how", CASES,
                         ids=[f"{e}-{h}" + (f"-{w}" if w else "") for e, w, h in CASES])
def test_one_damaged_extent_copy_loses_nothing(case, copy, extent, where, how):
    number = _extent(case.built, extent)
    _damage(case, copy, number, how, where)
    restart_gives_everything(case)
    _assert_said(case, copy, number, how, where)
    if number == case.built.active:
        assert_copies_equal(case, [number])
    name = extent_file_name(number)
    if number != case.built.active:
        check = qmgr.recover_log_copy(QMConfig.load(QM, case.home), dry_run=True)
        assert [line for line in check if name in line and f"the {copy} copy" in line], check
    done = recover_then_clean_restart(case)
    if number != case.built.active:
        assert any(name in line and f"the {copy} copy" in line for line in done), done


def test_the_newest_extent_is_read_from_the_copy_reaching_further(case):
    """A crash can leave the copies of the newest extent with different
    unforced tails: the one holding more valid records is taken, the other is
    made equal to it (its own tail kept aside), and nothing differs after."""
    built = case.built
    last = built.records[built.active][-2:]
    name = extent_file_name(built.active)
    # the primary lost its last two records (zeros), the dual its last one (torn)
    path = case.primary / name
    data = bytearray(path.read_bytes())
    data[last[0].offset:] = bytes(len(data) - last[0].offset)
    path.write_bytes(bytes(data))
    flip_bytes(case.dual / name, [last[1].offset + 40])
    qm = case.start()
    try:
        # the dual copy read one record further: all but the last message
        assert queue_bodies(qm, QUEUE) == built.bodies[:-1]
    finally:
        qm.close("immediate")
    rewritten = [t for m, t in case.dual_messages() if m == "HMQ7492I"]
    assert len(rewritten) == 1 and "the primary copy" in rewritten[0]
    assert_copies_equal(case, [built.active])
    # the dual copy's torn record is kept aside, in both directories
    for d in (case.primary, case.dual):
        assert sorted(p.name for p in d.glob("*.torn.*")) == [f"{name}.torn.0"]


def test_a_copy_damaged_in_both_places_is_corruption_as_before(case):
    """Both copies bad at the same record: no copy can help, restart stops
    naming the extent (and says what the other copy said)."""
    built = case.built
    rec = _record(built, 1, "middle")
    for copy in ("primary", "dual"):
        flip_bytes(case.dir_of(copy) / extent_file_name(1), [rec.offset + rec.length // 2])
    with pytest.raises(HarbormqError) as info:
        case.start()
    assert info.value.msgid == "HMQ7501E"
    assert extent_file_name(1) in info.value.message
    assert "the other copy fails too" in info.value.message
    with pytest.raises(HarbormqError) as info:
        qmgr.recover_log_copy(QMConfig.load(QM, case.home))
    assert info.value.msgid == "HMQ7494E" and extent_file_name(1) in info.value.message


def test_copies_damaged_at_different_records_are_read_around(case):
    """One copy bad early in an extent, the other later: the read goes from
    one to the other and back, and nothing is lost."""
    built = case.built
    recs = built.records[2]
    early, late = recs[len(recs) // 4], recs[3 * len(recs) // 4]
    flip_bytes(case.primary / extent_file_name(2), [early.offset + early.length // 2])
    flip_bytes(case.dual / extent_file_name(2), [late.offset + late.length // 2])
    restart_gives_everything(case)
    said = [t for m, t in case.dual_messages() if m == "HMQ7491W"]
    assert len(said) == 2, case.said


# --- the control file copies ---------------------------------------------------------------

CONTROL_COPIES = [(copy, name) for name in COPY_NAMES for copy in ("primary", "dual")]


def control_copies(case: Case) -> list:
    return [decode_copy((case.dir_of(copy) / name).read_bytes())
            for copy, name in CONTROL_COPIES]


@pytest.mark.parametrize("copy,name", CONTROL_COPIES, ids=[f"{c}-{n}" for c, n in CONTROL_COPIES])
@pytest.mark.parametrize("how", ["delete", "flip", "truncate"])
def test_one_damaged_control_copy_loses_nothing(case, copy, name, how):
    """A dual log keeps control.1 and control.2 in both directories."""
    path = case.dir_of(copy) / name
    assert path.exists()
    if how == "delete":
        path.unlink()
    elif how == "flip":
        flip_bytes(path, [3, 40, path.stat().st_size - 2])
    else:
        truncate(path, 30)
    restart_gives_everything(case)
    fixed = [t for m, t in case.said if m == "HMQ7121W"]
    assert len(fixed) == 1 and str(path) in fixed[0], case.said
    copies = control_copies(case)
    assert len({(c.sequence, c.to_json()) for c in copies}) == 1
    recover_then_clean_restart(case)


def test_both_control_copies_in_one_directory_damaged(case):
    """One directory's two control-file copies bad: the other directory's
    are used, and both of the damaged ones rewritten."""
    (case.primary / COPY_NAMES[0]).unlink()
    truncate(case.primary / COPY_NAMES[1], 10)
    restart_gives_everything(case)
    assert len({(c.sequence, c.to_json()) for c in control_copies(case)}) == 1


@pytest.mark.parametrize("copy", ["primary", "dual"])
def test_a_whole_copy_gone_while_stopped_is_given_up_at_start(case, copy):
    """The disk of one copy is gone (its directory with it): the queue manager
    starts from the other copy and gives the lost one up (HMQ7490W) instead
    of failing; recover-copy re-creates the whole copy on a new disk."""
    shutil.rmtree(case.dir_of(copy))
    qm = case.start()
    try:
        assert queue_bodies(qm, QUEUE) == case.built.bodies
        lost = [t for m, t in case.said if m == "HMQ7490W"]
        assert len(lost) == 1 and f"the {copy} copy" in lost[0], case.said
        qm.put(QUEUE, b"one copy")
    finally:
        qm.close()
    assert not case.dir_of(copy).exists()      # nothing made where the disk was
    case.built = Built(case.built.root, case.built.bodies + [b"one copy"], {}, [], 0)
    done = recover_then_clean_restart(case)
    assert any("HMQ7493I" in line for line in done)


def test_every_control_copy_damaged_refuses_to_start(case):
    (case.primary / COPY_NAMES[0]).unlink()
    (case.dual / COPY_NAMES[0]).unlink()
    truncate(case.primary / COPY_NAMES[1], 10)
    flip_bytes(case.dual / COPY_NAMES[1], [20])
    with pytest.raises(ControlFileDamaged):
        case.start()


# --- media recovery reads through a damaged copy -------------------------------------------

def test_recreate_reads_through_a_damaged_primary_copy(home, tmp_path):
    """Media recovery on a running queue manager (rcrmqobj) replays the log
    from the queue's image: with the primary copy of extents it needs
    deleted or damaged, it reads the dual copy and rebuilds the same queue."""
    dual = tmp_path / "dual"
    create_dual(home, dual)
    primary = home / "log" / QM
    rnd = random.Random(3)
    with QueueManager.open(QM, home=home) as qm:
        qm.define_queue(QUEUE, DEFPSIST="YES")
        qm.image("queue", QUEUE)
        sent = []
        while qm.core.log.state.active.number < 3:
            sent.append(body_for(len(sent), rnd))
            qm.put(QUEUE, sent[-1])
        for _ in range(5):
            assert qm.get(QUEUE).body == sent.pop(0)
        closed = [e.number for e in qm.core.log.state.extents if e.state == "full"]
        assert closed == [0, 1, 2]
        (primary / extent_file_name(1)).unlink()
        rec = read_records(primary / extent_file_name(2), False)[7]
        flip_bytes(primary / extent_file_name(2), [rec.offset + rec.length // 2])
        result = qm.recreate("queue", QUEUE)
        assert result[0]["messages"] == len(sent)
        assert queue_bodies(qm, QUEUE) == sent
        read_around = [t for m, t in qm.core.oplog.entries if m == "HMQ7491W"]
        assert sorted(n for n in (extent_file_name(1), extent_file_name(2))
                      if any(n in t and "the primary copy" in t for t in read_around)) == \
            [extent_file_name(1), extent_file_name(2)], read_around
    # without a good copy of extent 2 either, media recovery names it
    flip_bytes(dual / extent_file_name(2), [rec.offset + rec.length // 2])
    with QueueManager.open(QM, home=home) as qm:
        with pytest.raises(HarbormqError) as info:
            qm.recreate("queue", QUEUE)
        assert extent_file_name(2) in info.value.message
        assert queue_bodies(qm, QUEUE) == sent      # nothing was replaced


# --- a copy that fails while the queue manager runs --------------------------------------------

def _fail_in(directory: Path, real):
    """``real`` (os.pwrite-like or os.fdatasync), failing with EIO for files in
    ``directory``."""
    prefix = str(directory) + os.sep

    def fails(fd, *args):
        if os.readlink(f"/proc/self/fd/{fd}").startswith(prefix):
            raise OSError(errno.EIO, "injected I/O error")
        return real(fd, *args)
    return fails


@pytest.mark.parametrize("copy,op", [("primary", "write"), ("dual", "write"),
                                     ("primary", "fsync"), ("dual", "fsync")])
def test_a_copy_failing_while_running_is_given_up_and_nothing_is_lost(
        home, tmp_path, monkeypatch, copy, op):
    """A write or an fsync failing in one copy (EIO): HMQ7490W, the queue
    manager goes on with the other copy, the control file says which copy was
    given up (a restart does not trust it), recover-copy re-creates it, and
    then the re-created copy alone holds the whole log."""
    dual = tmp_path / "dual"
    create_dual(home, dual)
    case = Case(home, dual, Built(tmp_path, [], {}, [], 0))
    bad, good = case.dir_of(copy), case.dir_of("dual" if copy == "primary" else "primary")
    rnd = random.Random(5)
    sent = case.built.bodies
    with QueueManager.open(QM, home=home) as qm:
        qm.define_queue(QUEUE, DEFPSIST="YES")
        for _ in range(50):
            sent.append(body_for(len(sent), rnd))
            qm.put(QUEUE, sent[-1])
        if op == "write":
            monkeypatch.setattr(log_writer, "pwrite_all",
                                _fail_in(bad, log_writer.pwrite_all))
        else:
            monkeypatch.setattr(os, "fdatasync", _fail_in(bad, os.fdatasync))
        while qm.core.log.state.active.number < 3:     # through extent switches
            sent.append(body_for(len(sent), rnd))
            qm.put(QUEUE, sent[-1])                     # acknowledged: on the good copy
        lost = [t for m, t in qm.core.oplog.entries if m == "HMQ7490W"]
        assert len(lost) == 1 and f"the {copy} copy" in lost[0] and str(bad) in lost[0]
        assert "HMQ6709E" not in [m for m, _ in qm.core.oplog.entries]
        assert qm.core.log.failed is None and qm.core.log.state.degraded == copy
        monkeypatch.undo()
        state = ControlFile(case.primary, dual).load(repair=False)
        assert state.degraded == copy and state.degraded_lsn > 0
        # the bad copy is written no more: no extent after the failure is there
        assert not (bad / extent_file_name(3)).exists()
        assert (good / extent_file_name(3)).exists()
        qm.close("preemptive")
    qm = case.start()
    try:
        assert queue_bodies(qm, QUEUE) == sent
        said = [t for m, t in case.said if m == "HMQ7490W"]
        assert len(said) == 1 and "recover-copy" in said[0]     # the reminder at start
        sent.append(b"after the restart")
        qm.put(QUEUE, sent[-1])
    finally:
        qm.close()
    done = recover_then_clean_restart(case)
    assert any(f"the {copy} copy" in line for line in done), done
    # the re-created copy alone: the other directory emptied
    shutil.rmtree(good)
    good.mkdir()
    qm = case.start()
    try:
        assert queue_bodies(qm, QUEUE) == sent
    finally:
        qm.close()


def test_both_copies_failing_is_a_log_that_cannot_be_written(home, tmp_path, monkeypatch):
    """The last copy failing too is HMQ6709E, as for a single log: the
    queue manager stops, nothing waiting is acknowledged."""
    dual = tmp_path / "dual"
    create_dual(home, dual)
    qm = QueueManager.open(QM, home=home)
    try:
        qm.define_queue(QUEUE, DEFPSIST="YES")
        qm.put(QUEUE, b"before")
        real = log_writer.pwrite_all
        monkeypatch.setattr(log_writer, "pwrite_all", _fail_in(home / "log" / QM, real))
        qm.put(QUEUE, b"on the dual copy only")
        monkeypatch.setattr(log_writer, "pwrite_all",
                            _fail_in(dual, _fail_in(home / "log" / QM, real)))
        with pytest.raises(HarbormqError):
            qm.put(QUEUE, b"never acknowledged")
        ids = [m for m, _ in qm.core.oplog.entries]
        assert ids.count("HMQ7490W") == 1 and "HMQ6709E" in ids
    finally:
        monkeypatch.undo()
        if not qm.closed:
            qm.close("preemptive")
    with QueueManager.open(QM, home=home) as qm:
        assert queue_bodies(qm, QUEUE)[:2] == [b"before", b"on the dual copy only"]


def test_circular_dual_log_reuses_extents_in_both_copies(home, tmp_path):
    """A circular log reuses extents: each is zero-filled and rewritten in
    both copies, which stay byte for byte the same."""
    dual = tmp_path / "dual"
    create_dual(home, dual, log_type="circular", log_primary=2, log_secondary=1)
    rnd = random.Random(11)
    with QueueManager.open(QM, home=home) as qm:
        qm.define_queue(QUEUE, DEFPSIST="YES")
        for i in range(2000):       # several laps of the extents
            qm.put(QUEUE, body_for(i, rnd))
            qm.get(QUEUE)
        qm.put(QUEUE, b"last")
        laps = max(e.first_lsn for e in qm.core.log.state.extents) // (PAGES * 4096)
        assert laps >= 4
    primary = home / "log" / QM
    assert sorted(p.name for p in primary.glob("S*.LOG")) == \
        sorted(p.name for p in dual.glob("S*.LOG"))
    for p in primary.glob("S*.LOG"):
        assert same_bytes(p, dual / p.name), p.name
    (primary / extent_file_name(ControlFile(primary, dual).load().active.number)).unlink()
    with QueueManager.open(QM, home=home) as qm:
        assert queue_bodies(qm, QUEUE) == [b"last"]


@pytest.mark.parametrize("copy", ["primary", "dual"])
def test_a_copy_failing_on_a_real_disk_then_a_power_cut_loses_nothing(tmp_path, copy):
    """On lazyfs (tests/support/lazyfs.py): writes to one copy's extents fail
    with EIO while STOMP sends are receipted; the queue manager goes on with
    the other copy (HMQ7490W, no HMQ6709E); it is killed and the power cut
    (unsynced sectors kept at random); restart holds every receipted message,
    reading the copy that was kept; recover-copy then makes both whole."""
    with LazyFS(tmp_path / "lazyfs") as fs:
        home, dual = fs.mount / "hmq", fs.mount / "dual"
        home.mkdir()
        fsync_dir(home.parent)
        srv = QMServer(home, "PC", console_dir=tmp_path)
        srv.cli("create", "PC", "--port", "0", "--log", "linear", "--log-file-pages", "32",
                "--log-dual-path", str(dual))
        srv.start()
        srv.sc("DEFINE QLOCAL(DUAL.Q) DEFPSIST(YES) MAXDEPTH(100000)")
        receipted = []
        body = b"x" * 20_000          # an extent switch every few messages
        with raw_connected(srv.port) as c:
            for i in range(60):
                if i == 10:
                    fs.fail("write", "/hmq/log/*/S*.LOG" if copy == "primary" else
                            "/dual/S*.LOG", "EIO")
                c.send("SEND", {"destination": "/queue/DUAL.Q", "receipt": f"r{i}"},
                       f"m{i}:".encode() + body)
                c.expect("RECEIPT")
                receipted.append(f"m{i}")
        assert fs.stats()["faults_raised"] > 0
        console = srv.console()
        assert "HMQ7490W" in console and "HMQ6709E" not in console, console
        assert srv.running
        srv.kill()
        fs.fail("write", None)
        fs.cut(SEED, torn=True)
        srv.start()
        assert "HMQ7490W" in srv.console()        # the control file still says so
        srv.stop()
        with QueueManager.open("PC", home=home) as qm:
            got = [m.body.split(b":")[0].decode() for m in qm.browse("DUAL.Q", limit=1000)]
        assert got == receipted, f"seed {SEED}"
        done = srv.cli("log", "recover-copy", "PC").stdout
        assert f"the {copy} copy" in done and "HMQ7493I" in done
        fs.cut(SEED + 1, torn=True)      # recover-copy's work is durable
        srv.start()
        console = srv.console()
        assert not [i for i in DUAL_IDS if i in console], console
        srv.stop()


# --- configuration ---------------------------------------------------------------------------

def test_dual_path_is_checked_at_create(home, tmp_path):
    log_dir = home / "log" / QM
    for bad, why in [(log_dir, "of its own"), (log_dir / "copy", "of its own"),
                     (home / "log", "of its own")]:
        with pytest.raises(ConfigError) as info:
            qmgr.create(QM, home=home, log_file_pages=PAGES, log_dual_path=bad)
        assert why in info.value.message
        assert not (home / "qmgrs" / QM / "qm.toml").exists()
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "something").write_text("x")
    with pytest.raises(HarbormqError) as info:
        qmgr.create(QM, home=home, log_file_pages=PAGES, log_dual_path=busy)
    assert "not empty" in info.value.message


@pytest.mark.parametrize("value,why", [
    ('"relative/dir"', "absolute"), ('""', "absolute"), ("3", "not a string"),
    ('"{log}"', "of its own"), ('"{log}/inner"', "of its own"),
])
def test_dual_path_in_qm_toml_is_checked(home, tmp_path, value, why):
    create_dual(home, tmp_path / "dual")
    cfg_path = home / "qmgrs" / QM / "qm.toml"
    text = cfg_path.read_text()
    line = next(x for x in text.splitlines() if x.startswith("dual_path"))
    cfg_path.write_text(text.replace(line, "dual_path = " +
                                     value.replace("{log}", str(home / "log" / QM))))
    with pytest.raises(ConfigError) as info:
        QMConfig.load(QM, home)
    assert "log.dual_path" in info.value.message and why in info.value.message
    assert str(cfg_path) in info.value.message


def test_qm_toml_and_the_log_must_agree_on_dual(home, tmp_path):
    """A dual log started without its dual path, or a single log given one,
    is refused with what to do, before anything is written; recover-copy makes
    a single log dual."""
    create_dual(home, tmp_path / "dual")
    cfg = QMConfig.load(QM, home)
    assert cfg.to_toml()["log"]["dual_path"] == str(tmp_path / "dual")
    cfg.log_dual_path = None
    cfg.save()
    before = [(home / "log" / QM / n).read_bytes() for n in COPY_NAMES]
    with pytest.raises(ControlFileMismatch) as info:
        QueueManager.open(QM, home=home)
    assert "dual" in info.value.message and "log.dual_path" in info.value.hint
    assert [(home / "log" / QM / n).read_bytes() for n in COPY_NAMES] == before

    other = tmp_path / "single"
    other.mkdir()
    qmgr.create("QM2", home=other, log_type="linear", log_file_pages=PAGES)
    with QueueManager.open("QM2", home=other) as qm:
        qm.define_queue(QUEUE, DEFPSIST="YES")
        for i in range(300):
            qm.put(QUEUE, b"m%d" % i)
    cfg = QMConfig.load("QM2", other)
    cfg.log_dual_path = tmp_path / "dual2"
    cfg.save()
    with pytest.raises(ControlFileMismatch) as info:
        QueueManager.open("QM2", home=other)
    assert "recover-copy" in info.value.hint
    done = qmgr.recover_log_copy(cfg)
    assert any("made dual" in line for line in done), done
    assert all((d / n).exists() for d in (tmp_path / "dual2", other / "log" / "QM2")
               for n in COPY_NAMES)
    with QueueManager.open("QM2", home=other) as qm:
        assert len(queue_bodies(qm, QUEUE)) == 300
        assert qm.core.log.state.dual


def test_recover_copy_refuses_without_a_dual_path_or_while_running(home, tmp_path):
    qmgr.create(QM, home=home, log_file_pages=PAGES)
    with pytest.raises(ConfigError) as info:
        qmgr.recover_log_copy(QMConfig.load(QM, home))
    assert "no dual log" in info.value.message
    other = tmp_path / "h2"
    other.mkdir()
    create_dual(other, tmp_path / "dual")
    with QueueManager.open(QM, home=other):
        with pytest.raises(HarbormqError) as info:
            qmgr.recover_log_copy(QMConfig.load(QM, other))
        assert info.value.msgid == "HMQ8041E"


def test_log_commands_with_a_damaged_copy(case):
    """``log dump`` reads around a damaged copy and says so on stderr; ``log
    map`` shows the dual path and what is in one copy only; ``log
    recover-copy --dry-run`` changes nothing, then ``log recover-copy``
    re-creates the copy."""
    env = child_env(case.home)
    env["COLUMNS"] = "1000"       # no line of the output wrapped
    (case.primary / extent_file_name(2)).unlink()
    dump = hmq(env, "log", "dump", QM, "--queue", QUEUE, "--json")
    assert "HMQ7491W" in dump.stderr and extent_file_name(2) in dump.stderr
    puts = [line for line in dump.stdout.splitlines() if '"MSG_PUT"' in line]
    assert len(puts) == len(case.built.bodies) + 1       # and the one in flight
    shown = hmq(env, "log", "map", QM).stdout
    assert str(case.dual) in shown and f"{extent_file_name(2)} (dual)" in shown
    check = hmq(env, "log", "recover-copy", QM, "--dry-run").stdout
    assert "would be re-created" in check and not (case.primary / extent_file_name(2)).exists()
    done = hmq(env, "log", "recover-copy", QM).stdout
    assert "HMQ7492I" in done and (case.primary / extent_file_name(2)).exists()
    assert "nothing to do" in hmq(env, "log", "recover-copy", QM).stdout
    (case.dual / extent_file_name(1)).write_bytes(b"x")
    (case.primary / extent_file_name(1)).unlink()
    failed = hmq(env, "log", "recover-copy", QM, check=False)
    assert failed.returncode == 1 and "HMQ7494E" in failed.stderr
