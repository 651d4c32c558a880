"""Damaged recovery logs: the reading rules (docs/design-notes.md, "The log"), torn-tail
and bit-flip sweeps (docs/reliability.md).

Every corrupt input is a named fixture that builds a real queue manager with
small linear extents, puts persistent messages through the Python API, stops
it, and then damages the log files on disk:

* ``torn_header``      the newest record's header is cut (the rest reads as zeros)
* ``zero_filled_tail`` the newest extent is zero from a record boundary on
* ``crc_mismatch``     a byte flipped in a record payload in an older extent
* ``mid_log_bitflip``  a bit flipped in the middle of an older extent

The rule under test: a torn or short record at the tail of the newest extent is
the end of the log and its bytes are kept aside; anything else is corruption,
reported with the extent, offset and LSN, and never skipped or repaired.

The corrupt-older-extent inputs need restart to read the older extent, so their
queue manager is stopped with a unit of work still in flight that began in the
first extent: that unit of work pins the restart point there (MQ's long-running
UOW), and restart must read every extent after it.
"""

from __future__ import annotations

import random
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support.oplog import operator_log
from support.queues import bodies, queue_bodies

from harbormq import QueueManager
from harbormq.config import QMConfig
from harbormq.errors import LogCorrupt, LogMissing
from harbormq.log.control import ControlFile, ControlState
from harbormq.log.reader import ExtentReader
from harbormq.log.records import (
    EXTENT_HEADER_SIZE,
    RECORD_HEADER,
    LogRecord,
    Message,
    RecordFlag,
    RecordType,
    extent_file_name,
)

QM = "QM1"
QUEUE = "Q1"
PAGES = 32          # 128 KiB extents: a few hundred messages fill one


# --- building and reading a log ---------------------------------------------------------

@dataclass
class Rec:
    extent: int
    offset: int         # file offset of the record in its extent
    record: LogRecord

    @property
    def lsn(self) -> int:
        return self.record.lsn

    @property
    def end_offset(self) -> int:
        return self.offset + self.record.length

    @property
    def body(self) -> bytes | None:
        r = self.record
        if r.type == RecordType.MSG_PUT and r.object_name == QUEUE and \
                r.flags & RecordFlag.AUTO_COMMIT:
            return Message.decode(r.payload).body
        return None


@dataclass
class LogLayout:
    home: Path
    state: ControlState
    records: dict[int, list[Rec]]           # extent number -> its records, in order
    bodies: list[bytes] = field(default_factory=list)   # acknowledged puts, in put order

    @property
    def dir(self) -> Path:
        return self.home / "log" / QM

    @property
    def active(self) -> int:
        return self.state.active.number

    @property
    def older(self) -> list[int]:
        return [e.number for e in self.state.extents if e.state == "full"]

    def path(self, number: int, home: Path | None = None) -> Path:
        return (home or self.home) / "log" / QM / extent_file_name(number)

    @property
    def puts(self) -> list[Rec]:
        """The auto-committed MSG_PUT records of QUEUE, in log order."""
        return [r for n in sorted(self.records, key=lambda n: self.state.extent(n).first_lsn)
                for r in self.records[n] if r.body is not None]


def read_layout(home: Path, bodies: list[bytes]) -> LogLayout:
    log_dir = home / "log" / QM
    state = ControlFile(log_dir).load()
    records: dict[int, list[Rec]] = {}
    for e in state.extents:
        if e.state not in ("active", "full"):
            continue
        reader = ExtentReader(log_dir / extent_file_name(e.number), newest=e.state == "active")
        first = reader.header.first_lsn
        records[e.number] = [Rec(e.number, EXTENT_HEADER_SIZE + r.lsn - first, r)
                             for r in reader.records()]
    return LogLayout(home, state, records, bodies)


def quiet_flusher(home: Path) -> None:
    """No lazy store flush while a test runs: stores then only take effects at
    checkpoints, so the records at the tail of the log are the only copy of the
    messages they put, as they are for records that were never forced."""
    cfg = QMConfig.load(QM, home)
    cfg.tuning.flush_interval_ms = 3_600_000
    cfg.save()


def body_for(i: int, size: int) -> bytes:
    head = b"msg-%05d-" % i
    return head + bytes((i + k) % 251 + 1 for k in range(max(0, size - len(head))))


def build_log(make_qm, open_qm, home: Path, *, count: int, sizes=(300, 500), pin: bool = False,
              close_mode: str = "preemptive", seed: int = 1,
              tail_puts: int = 0) -> LogLayout:
    """A linear log of several small extents holding ``count`` acknowledged
    persistent auto-commit puts. ``pin``: a unit of work begun before them is
    still in flight when the queue manager stops. ``tail_puts``: go on putting
    until the newest extent holds at least that many puts since its switch (so
    the log ends in puts, not in the checkpoint a switch brings)."""
    make_qm(QM, log_type="linear", log_file_pages=PAGES)
    quiet_flusher(home)
    qm = open_qm(QM)
    qm.define_queue(QUEUE, DEFPSIST="YES")
    if pin:
        uow = qm.begin("long-running")
        uow.put(QUEUE, b"in flight: backed out at restart")
    rnd = random.Random(seed)
    bodies = []
    active, since = qm.core.log.state.active.number, 0

    def put_one():
        nonlocal active, since
        body = body_for(len(bodies), rnd.randint(*sizes))
        qm.put(QUEUE, body)          # returns once its record is on disk
        bodies.append(body)
        if qm.core.log.state.active.number != active:
            active, since = qm.core.log.state.active.number, 0
        since += 1
    for _ in range(count):
        put_one()
    while tail_puts:
        # a switch starts a checkpoint in the background; under load its end
        # record can land among the last puts: finish checkpoints first
        qm.checkpoint()
        since = 0
        before = active
        for _ in range(tail_puts):
            put_one()
        if active == before and since >= tail_puts:
            break
    stop(qm, close_mode)
    layout = read_layout(home, bodies)
    assert [r.body for r in layout.puts] == bodies
    return layout


def stop(qm: QueueManager, mode: str, within: float = 30.0) -> None:
    """``qm.close(mode)``, failing the test (instead of hanging it) if the stop
    does not return in time."""
    errors: list[BaseException] = []

    def run():
        try:
            qm.close(mode)
        except BaseException as exc:   # noqa: BLE001 - reported below
            errors.append(exc)
    t = threading.Thread(target=run, name=f"stop-{mode}", daemon=True)
    t.start()
    t.join(within)
    if t.is_alive():
        pytest.fail(f"QueueManager.close({mode!r}) did not return within {within} s")
    if errors:
        raise errors[0]


def flip(path: Path, offset: int, bit: int = 0) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 1 << bit
    path.write_bytes(bytes(data))


def overwrite(path: Path, offset: int, new: bytes) -> None:
    data = bytearray(path.read_bytes())
    data[offset:offset + len(new)] = new
    path.write_bytes(bytes(data))


def zero_from(path: Path, offset: int) -> None:
    size = path.stat().st_size
    overwrite(path, offset, bytes(size - offset))


def torn_files(log_dir: Path) -> list[Path]:
    return sorted(log_dir.glob("*.torn.*"))


def torn_payload(path: Path) -> bytes:
    """The bytes a torn copy keeps (after its one-line description)."""
    data = path.read_bytes()
    return data[data.index(b"\n") + 1:]


def open_fails(home: Path) -> BaseException | None:
    """Start the queue manager; the exception it raised, or None if it started
    (it is then stopped again)."""
    try:
        qm = QueueManager.open(QM, home=home)
    except BaseException as exc:       # noqa: BLE001 - any failure is an outcome here
        return exc
    stop(qm, "immediate")
    return None


def assert_names_corruption(exc: BaseException, path: Path, rec: Rec) -> None:
    assert isinstance(exc, LogCorrupt), f"expected LogCorrupt, got {exc!r}"
    assert exc.msgid == "HMQ7501E"
    assert path.name in exc.message
    assert f"offset {rec.offset}" in exc.message
    assert f"LSN {rec.lsn}" in exc.message
    assert exc.facts["path"] == str(path)
    assert exc.facts["offset"] == rec.offset
    assert exc.facts["lsn"] == rec.lsn


# --- named corrupt inputs ------------------------------------------------------------

@dataclass
class Damage:
    layout: LogLayout
    path: Path              # the damaged extent
    rec: Rec                # the record the damage hits
    original: bytes         # the extent's bytes before the damage
    damaged: bytes          # the extent's bytes after the damage
    survivors: list[bytes] | None = None   # queue contents restart must give


def _tail_layout(make_qm, open_qm, home) -> LogLayout:
    layout = build_log(make_qm, open_qm, home, count=700, tail_puts=10)
    assert len(layout.older) >= 2, "the test needs several extents"
    tail = layout.records[layout.active][-3:]
    assert all(r.body is not None for r in tail), "the log must end in message puts"
    return layout


def _pinned_layout(make_qm, open_qm, home) -> LogLayout:
    layout = build_log(make_qm, open_qm, home, count=700, pin=True, close_mode="immediate")
    assert len(layout.older) >= 2, "the test needs an older extent wholly read at restart"
    first = layout.state.extent(layout.older[0])
    assert layout.state.restart_lsn < first.end_lsn, "restart must read the older extents"
    return layout


@pytest.fixture
def torn_header(make_qm, open_qm, home) -> Damage:
    """The newest record was being written when the machine stopped: its first
    28 header bytes reached the disk, nothing after them did."""
    layout = _tail_layout(make_qm, open_qm, home)
    last = layout.records[layout.active][-1]
    path = layout.path(layout.active)
    original = path.read_bytes()
    zero_from(path, last.offset + 28)
    return Damage(layout, path, last, original, path.read_bytes(),
                  survivors=layout.bodies[:-1])


@pytest.fixture
def zero_filled_tail(make_qm, open_qm, home) -> Damage:
    """The last two records never reached the disk: the preallocated zeros are there."""
    layout = _tail_layout(make_qm, open_qm, home)
    lost = layout.records[layout.active][-2]
    path = layout.path(layout.active)
    original = path.read_bytes()
    zero_from(path, lost.offset)
    return Damage(layout, path, lost, original, path.read_bytes(),
                  survivors=layout.bodies[:-2])


@pytest.fixture
def crc_mismatch(make_qm, open_qm, home) -> Damage:
    """One byte of a message body in an older extent changed on disk."""
    layout = _pinned_layout(make_qm, open_qm, home)
    number = layout.older[1]
    puts = [r for r in layout.records[number] if r.body is not None]
    rec = puts[len(puts) // 3]
    path = layout.path(number)
    original = path.read_bytes()
    payload_end = rec.offset + RECORD_HEADER.size + len(QUEUE) + len(rec.record.payload)
    flip(path, payload_end - 5, 6)       # inside the message body
    return Damage(layout, path, rec, original, path.read_bytes())


@pytest.fixture
def mid_log_bitflip(make_qm, open_qm, home) -> Damage:
    """A single bit flipped in the middle of an older extent."""
    layout = _pinned_layout(make_qm, open_qm, home)
    number = layout.older[1]
    recs = layout.records[number]
    middle = (EXTENT_HEADER_SIZE + recs[-1].end_offset) // 2
    rec = next(r for r in recs if r.offset <= middle < r.end_offset)
    path = layout.path(number)
    original = path.read_bytes()
    flip(path, middle, 3)
    return Damage(layout, path, rec, original, path.read_bytes())


# --- torn tail: the end of the log ---------------------------------------------------

def test_torn_tail_ends_the_log_and_is_kept_aside(torn_header, open_qm, home):
    d = torn_header
    qm = open_qm(QM)
    assert queue_bodies(qm, QUEUE) == d.survivors
    copies = torn_files(d.layout.dir)
    assert [c.name for c in copies] == [f"{d.path.name}.torn.0"]
    assert copies[0].parent == d.path.parent
    kept = torn_payload(copies[0])
    # the copy holds the torn bytes exactly as they were on disk, up to the last
    # non-zero one: nothing but zeros was left out
    assert 0 < len(kept) <= 28 and any(kept)
    assert kept == d.damaged[d.rec.offset:d.rec.offset + len(kept)]
    assert not any(d.damaged[d.rec.offset + len(kept):])
    assert qm.restart_report.torn_tail == str(copies[0])
    warnings = [t for m, t in operator_log(home) if m == "HMQ7502W"]
    assert len(warnings) == 1
    assert d.path.name in warnings[0] and copies[0].name in warnings[0]
    assert f"offset {d.rec.offset}" in warnings[0] and f"LSN {d.rec.lsn}" in warnings[0]


def test_torn_header_restart_twice_gives_the_same_queue(torn_header, open_qm, home):
    d = torn_header
    first = open_qm(QM)
    assert queue_bodies(first, QUEUE) == d.survivors
    stop(first, "immediate")
    second = open_qm(QM)
    assert queue_bodies(second, QUEUE) == d.survivors
    assert second.restart_report.torn_tail is None
    assert len(torn_files(d.layout.dir)) == 1
    assert [m for m, _ in operator_log(home)].count("HMQ7502W") == 1


def test_torn_header_is_overwritten_by_new_messages(torn_header, open_qm):
    d = torn_header
    qm = open_qm(QM)
    qm.put(QUEUE, b"after the torn tail")
    stop(qm, "preemptive")
    qm = open_qm(QM)
    assert queue_bodies(qm, QUEUE) == d.survivors + [b"after the torn tail"]
    assert qm.restart_report.torn_tail is None


def test_zero_filled_tail_is_a_clean_end_not_an_error(zero_filled_tail, open_qm, home):
    d = zero_filled_tail
    reader = ExtentReader(d.path, newest=True)
    recs = list(reader.records())
    assert reader.end.how == "clean"
    assert reader.end.offset == d.rec.offset and reader.end.lsn == d.rec.lsn
    assert recs[-1].end_lsn == d.rec.lsn
    qm = open_qm(QM)
    assert queue_bodies(qm, QUEUE) == d.survivors
    assert qm.restart_report.torn_tail is None
    assert qm.restart_report.end_lsn == d.rec.lsn
    assert torn_files(d.layout.dir) == []
    ids = [m for m, _ in operator_log(home)]
    assert "HMQ7502W" not in ids
    assert not any(m.endswith("E") for m in ids)


def test_zero_filled_tail_restart_twice_gives_the_same_queue(zero_filled_tail, open_qm):
    d = zero_filled_tail
    qm = open_qm(QM)
    assert queue_bodies(qm, QUEUE) == d.survivors
    stop(qm, "immediate")
    qm = open_qm(QM)
    assert queue_bodies(qm, QUEUE) == d.survivors
    assert torn_files(d.layout.dir) == []


# --- corruption: stop and name it --------------------------------------------------

def test_crc_mismatch_in_older_extent_is_reported_as_corruption(crc_mismatch):
    d = crc_mismatch
    with pytest.raises(LogCorrupt) as info:
        QueueManager.open(QM, home=d.layout.home)
    assert_names_corruption(info.value, d.path, d.rec)
    assert "CRC" in info.value.message


def test_hole_in_an_unforced_write_followed_by_valid_records_is_a_torn_tail(make_qm, open_qm,
                                                                            home):
    """Power loss during one write: the device kept later pages, lost an earlier
    one. Nothing from the hole on was ever forced, so it is a torn tail."""
    from harbormq.log.control import ControlFile
    from harbormq.log.reader import ExtentReader
    from harbormq.log.records import RecordType
    make_qm(log_type="linear")
    qm = open_qm()
    qm.define_queue("Q1", DEFPSIST="YES")
    qm.put("Q1", b"acked")
    uow = qm.begin()
    for i in range(3):
        uow.put("Q1", f"unforced{i}")     # written at the stop, forced by nobody
    qm.close("preemptive")
    log_dir = home / "log" / "QM1"
    path = log_dir / f"S{ControlFile(log_dir).load().active.number:07d}.LOG"
    recs = list(ExtentReader(path, newest=True).records())
    begin = next(r for r in recs if r.type == RecordType.UOW_BEGIN)
    later = [r for r in recs if r.lsn > begin.lsn]
    assert later and all(r.synced_lsn <= begin.lsn for r in later)
    offset = 4096 + begin.lsn - recs[0].lsn
    with open(path, "r+b") as f:           # the hole: the UOW's first record is lost
        f.seek(offset)
        f.write(bytes(begin.length))
    qm = open_qm()
    assert bodies(qm.browse("Q1")) == ["acked"]
    assert qm.restart_report.torn_tail is not None


def test_mid_log_bitflip_is_reported_as_corruption(mid_log_bitflip):
    d = mid_log_bitflip
    with pytest.raises(LogCorrupt) as info:
        QueueManager.open(QM, home=d.layout.home)
    assert_names_corruption(info.value, d.path, d.rec)
    assert info.value.hint  # tells the operator what to do


@pytest.mark.parametrize("damage", ["crc_mismatch", "mid_log_bitflip"])
def test_corruption_is_never_repaired_or_kept_aside(damage, request):
    d: Damage = request.getfixturevalue(damage)
    before = {p.name: p.read_bytes() for p in d.layout.dir.iterdir()
              if p.name.startswith("S")}
    exc = open_fails(d.layout.home)
    assert isinstance(exc, LogCorrupt), f"expected LogCorrupt, got {exc!r}"
    after = {p.name: p.read_bytes() for p in d.layout.dir.iterdir()
             if p.name.startswith("S")}
    assert after == before        # no extent touched, no torn copy made
    assert d.path.read_bytes() == d.damaged


def test_corruption_is_refused_until_the_extent_is_restored(mid_log_bitflip):
    """The operator sees the error, retries, restores the extent, starts: all in
    one process (an application embedding the queue manager)."""
    d = mid_log_bitflip
    for _attempt in range(2):
        exc = open_fails(d.layout.home)
        assert isinstance(exc, LogCorrupt), f"expected LogCorrupt, got {exc!r}"
        assert exc.facts.get("offset") == d.rec.offset
    d.path.write_bytes(d.original)       # restored from the archive
    qm = QueueManager.open(QM, home=d.layout.home)
    try:
        assert queue_bodies(qm, QUEUE) == d.layout.bodies
        assert qm.restart_report.uows_backed_out == 1
    finally:
        stop(qm, "immediate")


def test_bitflip_in_newest_extent_before_valid_records_is_corruption(make_qm, open_qm,
                                                                      home):
    """In the newest extent a bad record followed by good ones is no tail."""
    layout = _tail_layout(make_qm, open_qm, home)
    recs = layout.records[layout.active]
    rec = recs[len(recs) // 2]
    path = layout.path(layout.active)
    flip(path, rec.offset + RECORD_HEADER.size + 2, 2)   # in the object name
    damaged = path.read_bytes()
    exc = open_fails(home)
    assert_names_corruption(exc, path, rec)
    assert path.read_bytes() == damaged
    assert torn_files(layout.dir) == []


def test_impossible_length_in_older_extent_is_corruption(make_qm, open_qm, home):
    layout = _pinned_layout(make_qm, open_qm, home)
    number = layout.older[1]
    rec = layout.records[number][10]
    path = layout.path(number)
    overwrite(path, rec.offset, (rec.record.length + 3).to_bytes(4, "little"))
    exc = open_fails(home)
    assert_names_corruption(exc, path, rec)
    assert "length" in exc.message


def test_zeroed_records_in_older_extent_are_corruption_not_end_of_log(make_qm, open_qm,
                                                                      home):
    """Zeros end the log only in the newest extent; an older one ends in EXTENT_END."""
    layout = _pinned_layout(make_qm, open_qm, home)
    number = layout.older[1]
    rec = layout.records[number][-5]
    path = layout.path(number)
    zero_from(path, rec.offset)
    exc = open_fails(home)
    assert_names_corruption(exc, path, rec)
    assert torn_files(layout.dir) == []


def test_damaged_extent_header_is_reported_as_corruption(make_qm, open_qm, home):
    layout = _pinned_layout(make_qm, open_qm, home)
    path = layout.path(layout.older[1])
    flip(path, 20, 0)            # inside the first-LSN field
    exc = open_fails(home)
    assert isinstance(exc, LogCorrupt), f"expected LogCorrupt, got {exc!r}"
    assert path.name in exc.message
    assert exc.facts["path"] == str(path) and exc.facts["offset"] == 0


# --- missing extents -------------------------------------------------------------------

@pytest.mark.parametrize("which", ["older", "newest"])
def test_missing_extent_needed_for_restart_is_reported_as_log_missing(which, make_qm, open_qm,
                                                                      home):
    layout = _pinned_layout(make_qm, open_qm, home)
    number = layout.older[1] if which == "older" else layout.active
    path = layout.path(number)
    path.unlink()
    exc = open_fails(home)
    assert isinstance(exc, LogMissing), f"expected LogMissing, got {exc!r}"
    assert exc.msgid == "HMQ6767E"
    assert path.name in exc.message
    assert exc.facts["path"] == str(path)
    assert not path.exists()      # nothing was invented in its place


# --- stopping without a checkpoint -----------------------------------------------------

def test_preemptive_stop_just_after_an_extent_switch_returns(make_qm, open_qm, home):
    """The sweeps stop the queue manager with close("preemptive"); it must return
    even when an extent switch has just started a checkpoint."""
    make_qm(QM, log_type="linear", log_file_pages=PAGES)
    quiet_flusher(home)
    qm = open_qm(QM)
    qm.define_queue(QUEUE, DEFPSIST="YES")
    first = qm.core.log.state.active.number
    bodies = []
    while qm.core.log.state.active.number == first:
        bodies.append(b"m%05d" % len(bodies))
        qm.put(QUEUE, bodies[-1])
    stop(qm, "preemptive", within=20)
    qm = open_qm(QM)
    assert queue_bodies(qm, QUEUE) == bodies


# --- sweeps ------------------------------------------------------------------------------

def _restart(home: Path) -> tuple[list[bytes], QueueManager]:
    qm = QueueManager.open(QM, home=home)
    try:
        return queue_bodies(qm, QUEUE), qm
    except BaseException:
        stop(qm, "immediate")
        raise


def test_torn_tail_sweep_keeps_every_record_before_the_cut(make_qm, open_qm, home, tmp_path):
    """Cut the newest extent at many offsets across its last records (zeros from
    the cut on, or garbage up to the old end of the log): restart keeps exactly
    the puts whose records lie wholly before the cut, in order, keeps the torn
    bytes aside, and a second restart gives the same queue."""
    layout = build_log(make_qm, open_qm, home, count=1300, sizes=(1, 240), seed=7)
    assert len(layout.older) >= 2
    active = layout.active
    recs = layout.records[active]
    # the cut extent keeps room for the records restart and the test add
    assert recs[-1].end_offset < PAGES * 4096 - 16384
    assert all(r.body is not None for r in recs[-12:])
    # the stores hold nothing from the swept records: the last checkpoint (the
    # only store flush) lies before them
    checkpoints = [r for n in layout.records for r in layout.records[n]
                   if r.record.type == RecordType.CHECKPOINT_END]
    assert max(c.lsn for c in checkpoints) < recs[-12].lsn
    end = recs[-1].end_offset
    rnd = random.Random(20240229)
    cuts = [(off, "zeros") for off in range(recs[-3].offset, end + 1, 8)]
    cuts += [(rnd.randrange(recs[-12].offset, end), "zeros") for _ in range(12)]
    cuts += [(rnd.randrange(recs[-12].offset, end), "garbage") for _ in range(10)]
    cuts += [(recs[-2].offset, "garbage"), (end, "garbage")]
    assert len(cuts) >= 40
    pristine = tmp_path / "pristine"
    shutil.copytree(home, pristine)
    puts = layout.puts
    problems = []
    for i, (cut, kind) in enumerate(cuts):
        where = f"cut {i} at offset {cut} ({kind})"
        h = tmp_path / f"cut{i}"
        shutil.copytree(pristine, h)
        path = layout.path(active, h)
        if kind == "zeros":
            zero_from(path, cut)
        else:
            garbage_end = max(end, cut + 24)
            overwrite(path, cut, bytes(rnd.randrange(1, 256) for _ in range(garbage_end - cut)))
        damaged = path.read_bytes()
        hit = next((r for r in recs if r.offset <= cut < r.end_offset), None)
        log_end = hit.offset if hit is not None else end
        expected = [p.body for p in puts if p.extent != active or p.end_offset <= cut]
        tail = damaged[log_end:]
        torn_expected = any(tail)
        try:
            got, qm = _restart(h)
        except BaseException as exc:      # noqa: BLE001
            problems.append(f"{where}: restart failed: {exc!r}")
            continue
        report = qm.restart_report
        stop(qm, "immediate")
        if got != expected:
            problems.append(f"{where}: {len(got)} messages, expected {len(expected)}; "
                            f"missing {sorted(set(expected) - set(got))[:3]!r}, "
                            f"extra {sorted(set(got) - set(expected))[:3]!r}")
        copies = torn_files(h / "log" / QM)
        if torn_expected:
            if len(copies) != 1 or report.torn_tail != str(copies[0]):
                problems.append(f"{where}: torn bytes not kept aside ({copies}, "
                                f"{report.torn_tail})")
            else:
                kept = torn_payload(copies[0])
                if kept != damaged[log_end:log_end + len(kept)] or any(
                        damaged[log_end + len(kept):]):
                    problems.append(f"{where}: the torn copy is not the torn bytes")
            if "HMQ7502W" not in [m for m, _ in operator_log(h)]:
                problems.append(f"{where}: no HMQ7502W")
        elif copies or report.torn_tail is not None:
            problems.append(f"{where}: a clean end was kept aside as torn: {copies}")
        try:
            again, qm = _restart(h)
        except BaseException as exc:      # noqa: BLE001
            problems.append(f"{where}: second restart failed: {exc!r}")
            continue
        if again != got:
            problems.append(f"{where}: second restart gave {len(again)} messages, "
                            f"the first {len(got)}")
        if kind == "garbage":
            # new records go over clean space: they survive a further crash
            qm.put(QUEUE, b"written after the repair")
            stop(qm, "preemptive")
            try:
                third, qm = _restart(h)
            except BaseException as exc:  # noqa: BLE001
                problems.append(f"{where}: restart after new puts failed: {exc!r}")
                continue
            if third != got + [b"written after the repair"]:
                problems.append(f"{where}: a put after the repair was lost")
        stop(qm, "immediate")
        shutil.rmtree(h)
    assert not problems, f"{len(problems)} of {len(cuts)} cuts went wrong:\n" + \
        "\n".join(problems[:20])


def _flip_positions(rec: Rec) -> list[int]:
    """Offsets inside one record: each header field, the name, the payload, the
    padding and the trailer."""
    r = rec.record
    name_len = len(r.object_name.encode())
    head = RECORD_HEADER.size
    inside = [0, 1, 3, 4, 7, 8, 15, 16, 24, 32, 40, 44, 48, 49, 50, 51, 52, 59]
    if name_len:
        inside.append(head)
    if r.payload:
        inside += [head + name_len, head + name_len + len(r.payload) // 2,
                   head + name_len + len(r.payload) - 1]
    pad = r.length - 4 - (head + name_len + len(r.payload))
    if pad:
        inside.append(r.length - 5)
    inside += [r.length - 4, r.length - 1]
    return [rec.offset + i for i in inside]


def test_bitflip_sweep_over_older_extent_is_always_corruption(make_qm, open_qm, home,
                                                               tmp_path):
    """Flip one bit at a time inside the records of an older extent that restart
    reads: every flip must stop restart with LogCorrupt naming that record."""
    layout = _pinned_layout(make_qm, open_qm, home)
    number = layout.older[1]
    recs = layout.records[number]
    assert recs[-1].record.type == RecordType.EXTENT_END
    rnd = random.Random(4242)
    chosen = [recs[0], recs[1], recs[len(recs) // 2], recs[-2], recs[-1]]
    flips = [(pos, rnd.randrange(8)) for rec in chosen for pos in _flip_positions(rec)]
    start, stop = recs[0].offset, recs[-1].end_offset
    flips += [(rnd.randrange(start, stop), rnd.randrange(8)) for _ in range(30)]
    pristine = tmp_path / "pristine"
    shutil.copytree(home, pristine)
    outcomes: dict[str, list[str]] = {}
    for i, (pos, bit) in enumerate(flips):
        rec = next(r for r in recs if r.offset <= pos < r.end_offset)
        h = tmp_path / f"flip{i}"
        shutil.copytree(pristine, h)
        path = layout.path(number, h)
        flip(path, pos, bit)
        exc = open_fails(h)
        where = f"offset {pos} bit {bit} (record at {rec.offset}, {rec.record.type.name})"
        if exc is None:
            outcomes.setdefault("started as if nothing were wrong", []).append(where)
        elif not isinstance(exc, LogCorrupt):
            outcomes.setdefault(f"raised {type(exc).__name__}: {exc}", []).append(where)
        elif (exc.facts.get("offset"), exc.facts.get("lsn"), exc.facts.get("path")) != \
                (rec.offset, rec.lsn, str(path)):
            outcomes.setdefault("LogCorrupt naming the wrong place", []).append(
                f"{where}: {exc.facts}")
        else:
            outcomes.setdefault("ok", []).append(where)
        shutil.rmtree(h)
    wrong = {k: v for k, v in outcomes.items() if k != "ok"}
    assert not wrong, f"{sum(map(len, wrong.values()))} of {len(flips)} flips not reported " \
        "as corruption:\n" + "\n".join(f"  {k}: {len(v)}, e.g. {v[:3]}"
                                       for k, v in wrong.items())
