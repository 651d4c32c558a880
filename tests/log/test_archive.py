"""Log management and archiving (MQ's LogManagement Manual / Automatic /
Archive): the built-in archiver, the manifest's hash chain, deleting extents
nothing needs (oldest first, archived first in archive mode), recall of a
missing extent at restart and for a store put back from an older copy, and
scrub naming the first bad archive entry."""

from __future__ import annotations

import json
import shutil

import pytest
from support.oplog import operator_log

from harbormq.config import QMConfig
from harbormq.errors import ConfigError, LogCorrupt, LogMissing, ObjectError
from harbormq.log import archive
from harbormq.log.records import extent_file_name
from harbormq.qmgr import lifecycle as qmgr


def said(home, msgid, name="QM1"):
    return [t for m, t in operator_log(home, name) if m == msgid]


def fill(qm, n=300, queue="FILL"):
    """About n KiB of log: several 32-page extents."""
    for _ in range(n):
        qm.put(queue, b"x" * 1000)
        qm.get(queue)


def open_uow(qm, queue="Q"):
    """A unit of work left in flight: it pins the restart point where it began."""
    uow = qm.begin(owner="long-running")
    uow.put(queue, b"in flight")
    return uow


def make_archiving_qm(make_qm, tmp_path, management="archive", paths=2):
    arch = [tmp_path / f"arch{i}" for i in range(paths)]
    make_qm(log_type="linear", log_file_pages=32, log_management=management,
            log_archive_paths=arch)
    return arch


def test_archive_mode_copies_every_closed_extent_and_deletes_what_nothing_needs(
        make_qm, open_qm, home, tmp_path):
    arch = make_archiving_qm(make_qm, tmp_path)
    qm = open_qm()
    qm.define_queue("FILL", DEFPSIST="YES")
    qm.image()                    # media recovery then needs nothing older
    fill(qm)
    qm.checkpoint()
    qm._call(qm.core.log_management.archive_pending())
    qm.image()
    qm.checkpoint()
    qm._call(qm.core.log_management.delete())
    log = qm.core.log
    closed = [e for e in log.state.extents if e.state == "full"]
    assert len(closed) >= 3
    archived = [e for e in closed if e.archived]
    assert archived == closed, "every closed extent is archived"
    deleted = [e for e in closed if e.deleted]
    assert deleted, "unneeded archived extents leave the log directory"
    for e in deleted:
        assert not log.extent_path(e.number).exists()
        assert e.end_lsn <= log.state.restart_lsn and e.end_lsn <= log.state.media_lsn
    for base in arch:             # two archive paths, two whole copies
        d = archive.archive_dir(base, "QM1")
        names = [e.name for e, _ in archive.read_manifest(d)]
        assert names == [extent_file_name(e.number) for e in archived]
        assert (d / archive.CONTROL_COPY).exists()
    assert all(r["bad"] is None for r in archive.scrub(arch, "QM1"))
    assert said(home, "HMQ7480I") and said(home, "HMQ7481I") and said(home, "HMQ7482I")
    qm.close()
    # the queue manager starts again without them, and keeps its messages
    qm = open_qm()
    qm.put("FILL", b"after")
    assert qm.get("FILL").body == b"after"
    qm.close()


def test_restart_recalls_a_needed_extent_from_the_archive(make_qm, open_qm, home, tmp_path):
    arch = make_archiving_qm(make_qm, tmp_path, management="manual")
    qm = open_qm()
    qm.define_queue("Q", DEFPSIST="YES")
    qm.define_queue("FILL", DEFPSIST="YES")
    qm.put("Q", b"kept across a lost extent")
    open_uow(qm)
    fill(qm, 150)
    qm._call(qm.core.log_management.archive_now())
    log = qm.core.log
    needed = log.extent_of(log.state.restart_lsn)
    assert needed.state == "full" and needed.archived
    qm.close("preemptive")        # restart needs the log from the unit of work on
    path = log.extent_path(needed.number)
    path.unlink()
    qm = open_qm()
    recalled = said(home, "HMQ7484I")
    assert recalled and path.name in recalled[0], recalled
    assert [m.body for m in qm.browse("Q")] == [b"kept across a lost extent"]
    qm.close()
    assert archive.file_sha256(path) == archive.find(arch, "QM1", needed.number)[0][1].sha256


def test_a_missing_extent_with_no_good_copy_is_named(make_qm, open_qm, tmp_path):
    arch = make_archiving_qm(make_qm, tmp_path, management="manual", paths=1)
    qm = open_qm()
    qm.define_queue("Q", DEFPSIST="YES")
    open_uow(qm)
    fill(qm, 150, "Q")
    qm._call(qm.core.log_management.archive_now())
    log = qm.core.log
    needed = log.extent_of(log.state.restart_lsn)
    assert needed.state == "full" and needed.archived
    qm.close("preemptive")
    log.extent_path(needed.number).unlink()
    copy = archive.archive_dir(arch[0], "QM1") / extent_file_name(needed.number)
    data = bytearray(copy.read_bytes())
    data[5000] ^= 0xFF            # the only archived copy is damaged
    copy.write_bytes(bytes(data))
    with pytest.raises(LogMissing, match=f"{extent_file_name(needed.number)}.*fails its hash"):
        open_qm()
    assert not log.extent_path(needed.number).exists(), "a bad copy is not left in the log"


def test_a_store_put_back_from_an_older_copy_is_brought_forward_through_the_archive(
        make_qm, open_qm, home, tmp_path):
    """The extents the old copy needs were archived and deleted: restart recalls
    them and brings the store forward, instead of recreating it."""
    make_archiving_qm(make_qm, tmp_path)
    qm = open_qm()
    qm.define_queue("ORDERS", DEFPSIST="YES")
    qm.define_queue("FILL", DEFPSIST="YES")
    qm.put("ORDERS", b"first")
    store = qm.core.config.queue_dir("ORDERS")
    qm.close()
    shutil.copytree(store, tmp_path / "copy")
    qm = open_qm()
    qm.put("ORDERS", b"second")
    fill(qm)
    qm.image()
    qm.checkpoint()
    qm._call(qm.core.log_management.archive_pending())
    qm._call(qm.core.log_management.delete())
    deleted = [e for e in qm.core.log.state.extents if e.deleted]
    assert deleted and deleted[0].first_lsn == 0, "the oldest extents left the log directory"
    qm.close()
    shutil.rmtree(store)
    shutil.copytree(tmp_path / "copy", store)
    qm = open_qm()
    assert said(home, "HMQ7484I"), "the old extents were recalled"
    assert said(home, "HMQ7234W") and not said(home, "HMQ6767E")
    assert [m.body for m in qm.browse("ORDERS")] == [b"first", b"second"]
    qm.close()


def test_automatic_mode_deletes_unneeded_extents_without_archiving(make_qm, open_qm, home,
                                                                    tmp_path):
    make_qm(log_type="linear", log_file_pages=32, log_management="automatic")
    qm = open_qm()
    qm.define_queue("FILL", DEFPSIST="YES")
    qm.image()
    fill(qm)
    qm.image()
    qm.checkpoint()
    qm._call(qm.core.log_management.delete())
    gone = [e for e in qm.core.log.state.extents if e.deleted]
    assert gone and not any(e.archived for e in gone)
    assert said(home, "HMQ7483W"), "deleting extents never archived is said"
    qm.close()


def test_manual_delete_goes_oldest_first_and_never_deletes_what_is_needed(make_qm, open_qm,
                                                                           tmp_path):
    make_qm(log_type="linear", log_file_pages=32)          # manual is the default
    qm = open_qm()
    qm.define_queue("FILL", DEFPSIST="YES")
    fill(qm)
    qm.checkpoint()
    lm = qm.core.log_management
    assert not [e for e in qm.core.log.state.extents if e.deleted], "manual keeps everything"
    log = qm.core.log
    needed = log.extent_of(min(log.state.restart_lsn, log.state.media_lsn))
    if needed.state == "full":
        with pytest.raises(ObjectError, match="still needs it"):
            qm._call(lm.delete(through=extent_file_name(needed.number)))
    qm.image()
    qm.checkpoint()
    first_two = [e for e in log.state.extents if e.state == "full"][:2]
    result = qm._call(lm.delete(through=extent_file_name(first_two[-1].number)))
    assert result["deleted"] == [extent_file_name(e.number) for e in first_two]
    assert result["never_archived"] == result["deleted"]
    qm.close()


def test_archive_needs_a_path_and_a_linear_log(home, tmp_path):
    with pytest.raises(ConfigError, match="archive_path"):
        qmgr.create("A1", home=home, log_type="linear", log_management="archive")
    with pytest.raises(ConfigError, match="linear log"):
        qmgr.create("A2", home=home, log_archive_paths=[tmp_path / "a"])
    cfg = qmgr.create("A3", home=home, log_type="linear", log_management="archive",
                      log_archive_paths=[tmp_path / "a", tmp_path / "b"], log_file_pages=32)
    again = QMConfig.load("A3", home)
    assert again.log_archive_paths == [tmp_path / "a", tmp_path / "b"]
    assert again.log_management == "archive" and cfg.max_archives == 500


def test_scrub_names_a_changed_file_and_a_broken_chain(make_qm, open_qm, tmp_path):
    arch = make_archiving_qm(make_qm, tmp_path, management="manual", paths=1)
    qm = open_qm()
    qm.define_queue("FILL", DEFPSIST="YES")
    fill(qm)
    qm._call(qm.core.log_management.archive_now())
    qm.close()
    d = archive.archive_dir(arch[0], "QM1")
    entries = archive.read_manifest(d)
    assert len(entries) >= 3 and archive.scrub(arch, "QM1")[0]["bad"] is None
    # a byte flipped in the second archived extent
    victim = d / entries[1][0].name
    data = bytearray(victim.read_bytes())
    data[-100] ^= 1
    victim.write_bytes(bytes(data))
    assert entries[1][0].name in archive.scrub(arch, "QM1")[0]["bad"]
    data[-100] ^= 1
    victim.write_bytes(bytes(data))
    # an entry removed from the manifest: the chain of hashes breaks after it
    lines = (d / archive.MANIFEST).read_bytes().splitlines(keepends=True)
    (d / archive.MANIFEST).write_bytes(lines[0] + b"".join(lines[2:]))
    bad = archive.scrub(arch, "QM1")[0]["bad"]
    assert "chain of hashes" in bad, bad
    # an entry edited in place
    first = json.loads(lines[0])
    first["end_lsn"] += 1
    (d / archive.MANIFEST).write_bytes(json.dumps(first).encode() + b"\n" + b"".join(lines[1:]))
    assert archive.scrub(arch, "QM1")[0]["bad"] is not None


def test_a_torn_manifest_line_is_no_entry_and_the_next_append_drops_it(make_qm, open_qm,
                                                                       tmp_path):
    """Each manifest append is fsynced before the next, so a crash can tear only
    the last line: it names nothing, and the next archive writes over it."""
    arch = make_archiving_qm(make_qm, tmp_path, management="manual", paths=1)
    qm = open_qm()
    qm.define_queue("FILL", DEFPSIST="YES")
    fill(qm, 150)
    qm._call(qm.core.log_management.archive_now())
    d = archive.archive_dir(arch[0], "QM1")
    before = archive.read_manifest(d)
    with open(d / archive.MANIFEST, "ab") as f:
        f.write(b'{"name":"S00000')          # an append cut short
    assert archive.read_manifest(d) == before
    fill(qm, 150)
    qm._call(qm.core.log_management.archive_now())
    after = archive.read_manifest(d)
    assert after[:len(before)] == before and len(after) > len(before)
    assert archive.scrub(arch, "QM1")[0]["bad"] is None
    qm.close()


def test_an_extent_gone_before_it_was_archived_is_named(make_qm, open_qm, tmp_path):
    """Once a FileNotFoundError from inside the archiver's thread."""
    make_archiving_qm(make_qm, tmp_path, management="manual", paths=1)
    qm = open_qm()
    qm.define_queue("FILL", DEFPSIST="YES")
    fill(qm, 150)
    first = qm.core.log.closed_extents()[0]
    qm.core.log.extent_path(first.number).unlink()
    with pytest.raises(LogMissing, match=f"{extent_file_name(first.number)} is not in the log "
                                         "directory and was never archived"):
        qm._call(qm.core.log_management.archive_pending())
    qm.close()


def test_another_logs_extent_of_the_same_number_is_never_taken_as_archived(
        make_qm, open_qm, home, tmp_path):
    """A queue manager deleted and created again with the same archive path:
    its S0000000.LOG once counted as archived (the old one was in the manifest)
    and archive mode then deleted the only copy (found by review)."""
    arch = make_archiving_qm(make_qm, tmp_path, management="manual", paths=1)
    qm = open_qm()
    qm.define_queue("FILL", DEFPSIST="YES")
    fill(qm, 150)
    qm._call(qm.core.log_management.archive_now())
    qm.close()
    qmgr.delete("QM1", home=home)
    make_qm(log_type="linear", log_file_pages=32, log_management="manual",
            log_archive_paths=arch)
    qm = open_qm()
    qm.define_queue("OTHER", DEFPSIST="YES")
    fill(qm, 150, "OTHER")
    with pytest.raises(LogCorrupt, match="already holds a different S0000000.LOG"):
        qm._call(qm.core.log_management.archive_now())
    assert not any(e.archived for e in qm.core.log.state.extents)
    qm.close()


def test_roll_forward_recalls_further_back_for_a_unit_of_work_open_across_the_copy(
        make_qm, open_qm, home, tmp_path):
    """The checkpoint before the old copy's LSN has its restart point an extent
    or more earlier (a unit of work open across it): restart recalls back to
    there, not only from the copy's own LSN (found by review)."""
    make_archiving_qm(make_qm, tmp_path)
    qm = open_qm()
    qm.define_queue("ORDERS", DEFPSIST="YES")
    qm.define_queue("FILL", DEFPSIST="YES")
    held = qm.begin(owner="open across the copy")
    held.put("ORDERS", b"held")
    fill(qm, 300)                        # extents go by while it stays open
    qm.put("ORDERS", b"first")
    qm.checkpoint()
    qm.flush()
    store = qm.core.config.queue_dir("ORDERS")
    shutil.copytree(store, tmp_path / "copy")    # (a hot copy of a flushed store)
    held.commit()
    qm.put("ORDERS", b"second")
    fill(qm, 300)
    qm.image()
    qm.checkpoint()
    qm._call(qm.core.log_management.archive_pending())
    qm._call(qm.core.log_management.delete())
    assert [e for e in qm.core.log.state.extents if e.deleted]
    qm.close()
    shutil.rmtree(store)
    shutil.copytree(tmp_path / "copy", store)
    qm = open_qm()
    assert said(home, "HMQ7234W") and not said(home, "HMQ6767E"), said(home, "HMQ6767E")
    assert [m.body for m in qm.browse("ORDERS")] == [b"held", b"first", b"second"]
    qm.close()
