"""The control file lost (both copies): rebuilt from the extents, and from an
archive's copy for the archive flags (the seeds' lost BSDS)."""

from __future__ import annotations

import pytest

from harbormq.config import QMConfig
from harbormq.errors import ControlFileDamaged
from harbormq.log.control import COPY_NAMES, ControlFile
from harbormq.qmgr.log_offline import rebuild_control_stopped


def lose_control(config):
    for name in COPY_NAMES:
        (config.log_dir / name).unlink()


@pytest.mark.parametrize("log_type", ["circular", "linear"])
def test_a_queue_manager_whose_control_file_is_lost_starts_again(make_qm, open_qm, home,
                                                                  log_type):
    make_qm(log_type=log_type, log_file_pages=32, log_primary=3, log_secondary=2)
    qm = open_qm()
    qm.define_queue("Q", DEFPSIST="YES")
    qm.define_queue("FILL", DEFPSIST="YES")
    for _ in range(400):              # the circular log wraps; the linear one grows
        qm.put("FILL", b"x" * 1000)
        qm.get("FILL")
    for i in range(5):
        qm.put("Q", f"m{i}")
    held = qm.begin(owner="in flight at the loss")
    held.put("Q", b"never committed")
    before = qm.core.log.state
    qm.close("preemptive")
    config = QMConfig.load("QM1", home)
    lose_control(config)
    with pytest.raises(ControlFileDamaged):
        open_qm()
    notes = rebuild_control_stopped(config, write=False)
    assert "chain:" in notes[0]
    assert not (config.log_dir / COPY_NAMES[0]).exists(), "nothing written without --yes"
    rebuild_control_stopped(config, write=True)
    # the same newest extent, read from the rebuilt file itself: the restart
    # below writes to the log, and may fill that extent and switch
    assert ControlFile(config.log_dir).load(repair=False).active.number == \
        before.active.number
    qm = open_qm()
    assert [m.body for m in qm.browse("Q")] == [f"m{i}".encode() for i in range(5)]
    # redo went back no later than the lost checkpoint's restart point (the
    # unit of work in flight was backed out)
    assert qm.restart_report.redo_start_lsn <= before.restart_lsn
    assert qm.restart_report.uows_backed_out == 1
    qm.put("Q", b"after")
    qm.close()
    qm = open_qm()
    assert [m.body for m in qm.browse("Q")][-1] == b"after"
    qm.close()
    with pytest.raises(ControlFileDamaged, match="readable: nothing to rebuild"):
        rebuild_control_stopped(config, write=True)
