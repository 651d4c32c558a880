"""Where restart takes the newest extent's records to end before it reads
them (``recreate.log_end_estimate``: the store checks of log initialisation).
It walks from the last checkpoint's record, or from the extent's start when
that record does not read as one; either way it is the end a full read finds."""

from __future__ import annotations

import pytest

from harbormq.config import QMConfig
from harbormq.errors import HarbormqError
from harbormq.log.manager import RecoveryLog
from harbormq.log.records import EXTENT_HEADER_SIZE
from harbormq.recovery import recreate


def _stopped_log(name: str = "QM1") -> RecoveryLog:
    config = QMConfig.load(name)
    log = RecoveryLog(config.log_dir, config.name, config.log_dual_dir)
    log.open()
    return log


def _write_a_log(open_qm) -> None:
    """Records before and after the last checkpoint, all in one extent."""
    qm = open_qm()
    qm.define_queue("Q1", DEFPSIST="YES")
    for i in range(300):
        qm.put("Q1", b"before %d" % i)
    qm.checkpoint()
    for i in range(300):
        qm.put("Q1", b"after %d" % i)
    qm.close("immediate")       # no checkpoint at the end: records follow the last one


def test_the_estimate_from_the_checkpoint_is_the_end_a_full_read_finds(make_qm, open_qm):
    make_qm(log_type="linear", log_file_pages=4096)
    _write_a_log(open_qm)
    log = _stopped_log()
    st = log.state
    assert st.checkpoint_lsn > st.active.first_lsn      # the walk starts inside the extent
    assert recreate.log_end_estimate(log) == recreate.log_end(log)


def test_a_checkpoint_record_that_does_not_read_is_walked_past_from_the_start(
        make_qm, open_qm):
    make_qm(log_type="linear", log_file_pages=4096)
    _write_a_log(open_qm)
    log = _stopped_log()
    offset = EXTENT_HEADER_SIZE + log.state.checkpoint_lsn - log.state.active.first_lsn
    with open(log.active_path(), "r+b") as f:     # the record's length field, zeroed
        f.seek(offset)
        f.write(b"\0\0\0\0")
    # from the start the walk stops at that record, as a walk of the whole extent
    # did before the checkpoint's place was used
    assert recreate.log_end_estimate(log) == log.state.checkpoint_lsn


def test_damage_before_the_checkpoint_is_not_the_end_but_corruption(make_qm, open_qm):
    """The walk from the checkpoint does not see a damaged record before it: the
    estimate is the end. Here the restart point lies before the damage, and
    restart's read of the newest extent refuses the log as corrupt (a damaged
    record followed by good ones) before redo."""
    make_qm(log_type="linear", log_file_pages=4096)
    _write_a_log(open_qm)
    log = _stopped_log()
    end = recreate.log_end(log)
    with open(log.active_path(), "r+b") as f:     # the extent's first record
        f.seek(EXTENT_HEADER_SIZE)
        f.write(b"\0\0\0\0")
    assert recreate.log_end_estimate(log) == end
    with pytest.raises(HarbormqError) as err:
        open_qm()
    assert err.value.msgid == "HMQ7501E" and "S0000000.LOG is corrupt at offset 4096" in \
        err.value.message


def test_a_walk_in_steps_reaches_what_it_is_asked_and_ends_where_a_full_read_does(
        make_qm, open_qm):
    """Restart asks for each store's recovery LSN in turn (``LogEndWalk``): each
    answer is at or past what was asked, up to the end a full read finds."""
    make_qm(log_type="linear", log_file_pages=4096)
    _write_a_log(open_qm)
    log = _stopped_log()
    end = recreate.log_end(log)
    checkpoint = log.state.checkpoint_lsn
    walk = recreate.LogEndWalk(log)
    assert walk.reach(checkpoint - 1) == checkpoint
    step = (end - checkpoint) // 7
    for asked in range(checkpoint + 1, end, step):
        got = walk.reach(asked)
        assert asked <= got < asked + 4096, (asked, got)   # the first record at or past it
    assert walk.reach(checkpoint + step) >= checkpoint + step    # asked again, lower
    assert walk.reach(end + 10**6) == end                   # beyond the end: the end
    assert walk.reach() == end == recreate.log_end_estimate(log)
