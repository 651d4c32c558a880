"""The count of free extents a circular log keeps (``available_extents``, asked
on every persistent put) equals a scan of the extents' states: through extent
switches, checkpoints that free extents, a switch the operator asks for, and a
restart."""

from __future__ import annotations


def scanned_available(log) -> int:
    st = log.state
    free = sum(1 for e in st.extents if e.state == "free")
    return free + st.primary + st.secondary - len(st.extents)


def test_the_kept_count_of_free_extents_equals_a_scan_through_switches_checkpoints_and_restart(
        make_qm, open_qm):
    make_qm(log_file_pages=32, log_primary=2, log_secondary=3)
    qm = open_qm()
    qm.define_queue("Q1", DEFPSIST="YES", MAXDEPTH=100000)
    log = qm.core.log
    seen, freed = set(), 0
    pin = qm.begin("app1")          # in doubt, too big to shunt: it holds the restart point
    pin.put("Q1", b"in-doubt" * 7500)
    pin.prepare()
    for round_ in range(10):
        active = log.state.active.number
        while log.state.active.number == active:      # one extent switch per round
            qm.put("Q1", b"x" * 4000)
            assert log.available_extents() == scanned_available(log)
        seen.add(log.available_extents())
        if round_ < 3:             # the pin holds: secondary extents are made
            continue
        if round_ == 3:
            qm.resolve(pin.id, commit=False)
        before = log.available_extents()
        while qm.get("Q1") is not None:                # then nothing pins the restart point
            pass
        qm.checkpoint()
        assert log.available_extents() == scanned_available(log)
        freed += log.available_extents() > before
        if round_ == 5:                                # ARCHIVE LOG's switch
            qm._call_sync(log.switch_now)
            assert log.available_extents() == scanned_available(log)
    assert len(log.state.extents) > 2, "secondary extents were made"
    assert freed >= 5, "checkpoints freed extents"
    assert len(seen) > 1, "the count moved"
    qm.close()

    qm = open_qm()                                     # a restart counts anew
    log = qm.core.log
    assert log.available_extents() == scanned_available(log)
    for _ in range(3):
        active = log.state.active.number
        while log.state.active.number == active:
            qm.put("Q1", b"y" * 4000)
        assert log.available_extents() == scanned_available(log)
    while qm.get("Q1") is not None:
        pass
    qm.checkpoint()
    assert log.available_extents() == scanned_available(log)
