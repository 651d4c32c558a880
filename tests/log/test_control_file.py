"""The two copies of the log control file (harbormq.log.control; restart phase 1).

Real queue managers, with their control files edited on disk:

* one copy damaged or missing: start from the other, rewrite it, warn (HMQ7121W);
* both readable, same sequence, different contents: refuse (HMQ7120E);
* sequences two or more apart (one copy restored on its own): refuse (HMQ7120E);
* one copy exactly one update behind (an update interrupted between the two
  copies): start from the newer one, rewrite the older, warn;
* no readable copy: refuse (ControlFileDamaged).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from support.oplog import operator_log
from support.procs import child_env
from support.queues import queue_bodies

from harbormq import QueueManager
from harbormq.errors import ControlFileDamaged, ControlFileMismatch
from harbormq.log.control import CONTROL_HEADER, COPY_NAMES, ControlFile, decode_copy, encode_copy

QM = "QM1"
QUEUE = "Q1"
BODIES = [b"first", b"second", b"third"]


def log_dir(home: Path) -> Path:
    return home / "log" / QM


def copy_path(home: Path, name: str) -> Path:
    return log_dir(home) / name


def other(name: str) -> str:
    return COPY_NAMES[1 - COPY_NAMES.index(name)]


def copies_bytes(home: Path) -> dict[str, bytes | None]:
    out = {}
    for name in COPY_NAMES:
        p = copy_path(home, name)
        out[name] = p.read_bytes() if p.exists() else None
    return out


def assert_copies_agree(home: Path, sequence: int | None = None) -> None:
    """Both copies readable and byte-for-byte the same (at ``sequence``)."""
    c = copies_bytes(home)
    assert c["control.1"] is not None and c["control.1"] == c["control.2"]
    state = decode_copy(c["control.1"])
    if sequence is not None:
        assert state.sequence == sequence


@pytest.fixture
def stopped_qm(make_qm, open_qm, home) -> Path:
    """A queue manager holding three persistent messages, stopped cleanly; its
    two control-file copies agree."""
    make_qm(QM)
    qm = open_qm(QM)
    qm.define_queue(QUEUE, DEFPSIST="YES")
    for body in BODIES:
        qm.put(QUEUE, body)
    qm.close("controlled")
    assert_copies_agree(home)
    return home


# --- ways to damage one copy ------------------------------------------------------------

def _flip_body(data: bytes) -> bytes:
    b = bytearray(data)
    b[CONTROL_HEADER.size + len(b[CONTROL_HEADER.size:]) // 2] ^= 0x04
    return bytes(b)


def _flip_sequence(data: bytes) -> bytes:
    b = bytearray(data)
    b[8] ^= 0x01                       # the sequence, covered by the CRC
    return bytes(b)


def _bad_magic(data: bytes) -> bytes:
    return b"HMQCTL99" + data[8:]


DAMAGES = {
    "flipped-body-byte": _flip_body,
    "flipped-sequence": _flip_sequence,
    "bad-magic": _bad_magic,
    "truncated-body": lambda data: data[:len(data) - 10],
    "truncated-header": lambda data: data[:20],
    "empty": lambda data: b"",
    "garbage": lambda data: os.urandom(len(data)),
    "missing": None,
}


def damage(path: Path, how: str) -> None:
    if DAMAGES[how] is None:
        path.unlink()
    else:
        path.write_bytes(DAMAGES[how](path.read_bytes()))


# --- one copy damaged ---------------------------------------------------------------------

@pytest.mark.parametrize("how", list(DAMAGES))
@pytest.mark.parametrize("name", COPY_NAMES)
def test_one_damaged_copy_starts_from_the_other_and_rewrites_it(stopped_qm, open_qm, name,
                                                                 how):
    home = stopped_qm
    good = decode_copy(copy_path(home, other(name)).read_bytes())
    damage(copy_path(home, name), how)
    qm = open_qm(QM)
    assert queue_bodies(qm, QUEUE) == BODIES
    assert qm.restart_report.control_sequence == good.sequence
    assert any(w.startswith("HMQ7121W") for w in qm.restart_report.warnings)
    warnings = [t for m, t in operator_log(home) if m == "HMQ7121W"]
    assert len(warnings) == 1
    assert str(copy_path(home, name)) in warnings[0]
    assert_copies_agree(home)
    qm.close("immediate")
    # the next start finds two good copies and says nothing
    qm = open_qm(QM)
    assert queue_bodies(qm, QUEUE) == BODIES
    assert not qm.restart_report.warnings
    assert [m for m, _ in operator_log(home)].count("HMQ7121W") == 1


@pytest.mark.parametrize("name", COPY_NAMES)
def test_load_rewrites_the_damaged_copy_from_the_good_one(stopped_qm, name):
    home = stopped_qm
    good_bytes = copy_path(home, other(name)).read_bytes()
    good = decode_copy(good_bytes)
    damage(copy_path(home, name), "flipped-body-byte")
    cf = ControlFile(log_dir(home))
    state = cf.load()
    assert state.sequence == good.sequence and state.to_json() == good.to_json()
    assert [m for m, _ in cf.warnings] == ["HMQ7121W"]
    # the rewritten copy holds the good copy's state at the same sequence
    assert_copies_agree(home, good.sequence)
    assert decode_copy(copy_path(home, name).read_bytes()).to_json() == good.to_json()


def test_read_only_load_leaves_a_damaged_copy_alone(stopped_qm):
    home = stopped_qm
    damage(copy_path(home, "control.2"), "truncated-body")
    before = copies_bytes(home)
    cf = ControlFile(log_dir(home))
    state = cf.load(repair=False)
    assert state.sequence == decode_copy(before["control.1"]).sequence
    assert [m for m, _ in cf.warnings] == ["HMQ7121W"]
    assert copies_bytes(home) == before


# --- both readable but disagreeing ---------------------------------------------------------

@pytest.mark.parametrize("name", COPY_NAMES)
def test_same_sequence_different_contents_refuses_to_start(stopped_qm, name):
    home = stopped_qm
    path = copy_path(home, name)
    state = decode_copy(path.read_bytes())
    changed = dataclasses.replace(state, restart_lsn=state.restart_lsn + 8,
                                  checkpoint_lsn=state.checkpoint_lsn + 8)
    path.write_bytes(encode_copy(changed))       # a valid copy, same sequence
    assert decode_copy(path.read_bytes()).sequence == state.sequence
    before = copies_bytes(home)
    for _attempt in range(2):                    # refused every time, nothing rewritten
        with pytest.raises(ControlFileMismatch) as info:
            QueueManager.open(QM, home=home)
        exc = info.value
        assert exc.msgid == "HMQ7120E"
        assert str(copy_path(home, "control.1")) in exc.message
        assert str(copy_path(home, "control.2")) in exc.message
        assert f"sequence {state.sequence}" in exc.message
        assert exc.hint
        assert copies_bytes(home) == before


def run_once_more(open_qm, body: bytes) -> None:
    qm = open_qm(QM)
    qm.put(QUEUE, body)
    qm.close("immediate")


@pytest.mark.parametrize("stale", COPY_NAMES)
def test_sequences_two_apart_refuse_to_start(stopped_qm, open_qm, stale):
    """One copy restored on its own from an older backup, two runs ago."""
    home = stopped_qm
    old = copy_path(home, stale).read_bytes()
    run_once_more(open_qm, b"fourth")
    run_once_more(open_qm, b"fifth")
    new_seq = decode_copy(copy_path(home, other(stale)).read_bytes()).sequence
    old_seq = decode_copy(old).sequence
    assert new_seq - old_seq >= 2
    copy_path(home, stale).write_bytes(old)
    before = copies_bytes(home)
    with pytest.raises(ControlFileMismatch) as info:
        QueueManager.open(QM, home=home)
    exc = info.value
    assert exc.msgid == "HMQ7120E"
    assert f"sequence {new_seq}" in exc.message and f"at {old_seq}" in exc.message
    assert str(copy_path(home, stale)) in exc.message
    assert exc.facts["path"] == str(copy_path(home, stale))
    assert copies_bytes(home) == before


@pytest.mark.parametrize("gap", [2, 3, 1000])
def test_any_gap_of_two_or_more_refuses_to_start(stopped_qm, gap):
    home = stopped_qm
    path = copy_path(home, "control.1")
    state = decode_copy(path.read_bytes())
    path.write_bytes(encode_copy(dataclasses.replace(state, sequence=state.sequence + gap)))
    with pytest.raises(ControlFileMismatch):
        QueueManager.open(QM, home=home)


def test_deleting_the_stale_copy_lets_the_queue_manager_start(stopped_qm, open_qm):
    """What the HMQ7120E hint tells the operator to do."""
    home = stopped_qm
    old = copy_path(home, "control.2").read_bytes()
    run_once_more(open_qm, b"fourth")
    run_once_more(open_qm, b"fifth")
    newer = decode_copy(copy_path(home, "control.1").read_bytes())
    copy_path(home, "control.2").write_bytes(old)
    with pytest.raises(ControlFileMismatch):
        QueueManager.open(QM, home=home)
    copy_path(home, "control.2").unlink()
    qm = open_qm(QM)
    assert queue_bodies(qm, QUEUE) == BODIES + [b"fourth", b"fifth"]
    assert qm.restart_report.control_sequence == newer.sequence
    assert "HMQ7121W" in [m for m, _ in operator_log(home)]


# --- one update behind: an interrupted update ------------------------------------------

def _interrupt_a_control_update(home: Path, nth: int = 1, then: str = "") -> None:
    """Start the queue manager in a child process (and run ``then`` on ``qm``)
    that is SIGKILLed right after the first copy of its ``nth`` control-file
    update was replaced: the first update of a run is the restart checkpoint's."""
    env = dict(child_env(home), HARBORMQ_CRASH_AT=f"control.mid_rewrite:{nth}")
    code = ("from harbormq import QueueManager\n"
            f"qm = QueueManager.open({QM!r}, home={str(home)!r})\n"
            f"{then}\n"
            "print('not killed')\n")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr


def test_interrupted_update_starts_from_the_newer_copy(stopped_qm, open_qm):
    home = stopped_qm
    before = decode_copy(copy_path(home, "control.2").read_bytes())
    _interrupt_a_control_update(home)
    c1 = decode_copy(copy_path(home, "control.1").read_bytes())
    c2 = decode_copy(copy_path(home, "control.2").read_bytes())
    assert c2.sequence == before.sequence          # copy 2 never got the update
    assert c1.sequence == c2.sequence + 1          # copy 1 did
    assert c1.to_json() != c2.to_json()            # it moved the checkpoint on
    qm = open_qm(QM)
    assert queue_bodies(qm, QUEUE) == BODIES
    assert qm.restart_report.control_sequence == c1.sequence
    warnings = [(m, t) for m, t in operator_log(home) if m.startswith("HMQ712")]
    assert len(warnings) == 1
    msgid, text = warnings[0]
    assert msgid.endswith("W")
    assert str(copy_path(home, "control.2")) in text and "behind" in text
    assert_copies_agree(home)
    qm.close("immediate")
    qm = open_qm(QM)
    assert queue_bodies(qm, QUEUE) == BODIES
    assert not qm.restart_report.warnings


def test_every_control_update_advances_the_sequence(stopped_qm, open_qm):
    """Each update of the control file carries a new sequence (the module
    docstring: "+1 at every update"), or an update interrupted between the two
    copies looks like a copy changed outside harbormq."""
    home = stopped_qm
    qm = open_qm(QM)
    seqs = [decode_copy(copy_path(home, "control.1").read_bytes()).sequence]
    bodies = []
    for _ in range(3):
        qm.checkpoint()                       # one control-file update each
        c = copies_bytes(home)
        assert c["control.1"] == c["control.2"]
        bodies.append(decode_copy(c["control.1"]).to_json())
        seqs.append(decode_copy(c["control.1"]).sequence)
    assert len(set(bodies)) == 3              # three different states were written...
    assert seqs == sorted(set(seqs)), f"sequences {seqs}"   # ...each with its own number


def test_update_interrupted_later_in_a_run_starts_from_the_newer_copy(stopped_qm, open_qm):
    """The second control-file update of a run (a requested checkpoint after the
    restart checkpoint) is interrupted between the copies: still an interrupted
    update, not a copy changed outside harbormq."""
    home = stopped_qm
    _interrupt_a_control_update(home, nth=2, then="qm.checkpoint()")
    c1 = decode_copy(copy_path(home, "control.1").read_bytes())
    c2 = decode_copy(copy_path(home, "control.2").read_bytes())
    assert c1.to_json() != c2.to_json()       # copy 1 has the newer checkpoint
    qm = QueueManager.open(QM, home=home)
    try:
        assert queue_bodies(qm, QUEUE) == BODIES
        assert any(w.startswith("HMQ712") for w in qm.restart_report.warnings)
    finally:
        qm.close("immediate")
    assert_copies_agree(home)


@pytest.mark.parametrize("behind", COPY_NAMES)
def test_one_copy_one_update_behind_is_rewritten_from_the_newer(stopped_qm, behind):
    home = stopped_qm
    ahead = other(behind)
    state = decode_copy(copy_path(home, ahead).read_bytes())
    newer = dataclasses.replace(state, sequence=state.sequence + 1)
    copy_path(home, ahead).write_bytes(encode_copy(newer))
    cf = ControlFile(log_dir(home))
    loaded = cf.load()
    assert loaded.sequence == newer.sequence
    assert len(cf.warnings) == 1
    msgid, text = cf.warnings[0]
    assert msgid.startswith("HMQ712") and msgid.endswith("W")
    assert str(copy_path(home, behind)) in text
    assert_copies_agree(home, newer.sequence)


# --- no readable copy ------------------------------------------------------------------

@pytest.mark.parametrize("how1,how2", [
    ("flipped-body-byte", "flipped-sequence"),
    ("missing", "missing"),
    ("missing", "truncated-header"),
    ("empty", "bad-magic"),
    ("garbage", "garbage"),
])
def test_both_copies_damaged_refuses_to_start(stopped_qm, how1, how2):
    home = stopped_qm
    damage(copy_path(home, "control.1"), how1)
    damage(copy_path(home, "control.2"), how2)
    before = copies_bytes(home)
    for _attempt in range(2):
        with pytest.raises(ControlFileDamaged) as info:
            QueueManager.open(QM, home=home)
        exc = info.value
        assert exc.msgid == "HMQ7121E"
        assert str(copy_path(home, "control.1")) in exc.message
        assert str(copy_path(home, "control.2")) in exc.message
        assert exc.hint
        assert copies_bytes(home) == before      # nothing invented, nothing destroyed


# --- the layout ---------------------------------------------------------------------------

def test_copy_layout_matches_the_docstring(stopped_qm):
    home = stopped_qm
    data = copy_path(home, "control.1").read_bytes()
    magic, seq, written, blen, crc = struct.unpack_from("<8sQQII", data, 0)
    assert magic == b"HMQCTL01"
    assert len(data) == 32 + blen
    state = decode_copy(data)
    assert (state.sequence, state.written_ns) == (seq, written)
    assert state.qm_name == QM
    assert encode_copy(state) == data
