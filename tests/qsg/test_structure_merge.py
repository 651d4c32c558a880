"""The group's log (qsg/merge.py): members' logs read from their files and
archives, merged into one stamp order, every member's own order kept; a gap
or an extent that no copy holds is an error naming the member."""

from __future__ import annotations

import pytest
from support.pipeline_logbuilder import LogBuilder

from harbormq.errors import LogMissing
from harbormq.log import archive
from harbormq.log.records import RecordType
from harbormq.qsg.merge import (
    MemberLog,
    member_records,
    merged,
    plan_member,
    read_group,
    recall_into,
    stamped,
)

T = RecordType


def stamp_of_puts(rec):
    """The tests' stamp: a put's or get's timestamp (the other records carry it)."""
    return rec.timestamp_ns if rec.type in (T.MSG_PUT, T.MSG_GET) else None


def build(log_dir, name, start_ns, puts, switch_every=0):
    b = LogBuilder(log_dir, name, pages=2, start_ns=start_ns)
    b.define("Q", 1)
    lsns = []
    for i in range(puts):
        m = b.message(1, body=f"{name}-{i}".encode())
        b.put("Q", 1, m, uow=100 + i)
        lsns.append(b.commit(100 + i))
        if switch_every and i % switch_every == switch_every - 1:
            b.switch()
    b.close()
    return b


def test_two_members_merge_in_stamp_order_keeping_each_log_order(tmp_path):
    # QMA's records at even milliseconds, QMB's interleaved after them
    build(tmp_path / "a", "QMA", 1_000_000_000, 30)
    build(tmp_path / "b", "QMB", 1_000_500_000, 30)
    plans = {m: plan_member(MemberLog(m, tmp_path / d)) for m, d in (("QMA", "a"), ("QMB", "b"))}
    out = list(read_group(plans, stamp_of_puts))
    stamps = [m.stamp for m in out]
    assert stamps == sorted(stamps)
    for member in ("QMA", "QMB"):
        own = [m.rec.lsn for m in out if m.member == member]
        assert own == sorted(own) and len(own) == len(set(own))
    bodies = [m.rec for m in out if m.rec.type == T.MSG_PUT]
    assert len(bodies) == 60
    # interleaved, not one member after the other
    members = [m.member for m in out if m.rec.type == T.MSG_PUT]
    assert members[:4] == ["QMA", "QMB", "QMA", "QMB"]


def test_a_record_without_stamp_carries_the_last_one_of_its_own_log(tmp_path):
    build(tmp_path / "a", "QMA", 1_000_000_000, 3)
    plan = plan_member(MemberLog("QMA", tmp_path / "a"))
    out = list(stamped("QMA", member_records(plan), stamp_of_puts))
    commits = [m for m in out if m.rec.type == T.UOW_COMMIT]
    puts = [m for m in out if m.rec.type == T.MSG_PUT]
    assert [c.stamp for c in commits] == [p.stamp for p in puts]


def test_equal_stamps_go_by_member_name(tmp_path):
    build(tmp_path / "a", "QMA", 1_000_000_000, 2)
    build(tmp_path / "b", "QMB", 1_000_000_000, 2)
    plans = {m: plan_member(MemberLog(m, tmp_path / d)) for m, d in (("QMB", "b"), ("QMA", "a"))}
    streams = {n: stamped(n, member_records(p), stamp_of_puts) for n, p in plans.items()}
    puts = [m.member for m in merged(streams) if m.rec.type == T.MSG_PUT]
    assert puts == ["QMA", "QMB", "QMA", "QMB"]


def test_an_extent_only_in_the_archive_is_recalled_and_read(tmp_path):
    log_dir = tmp_path / "a"
    build(log_dir, "QMA", 1_000_000_000, 40, switch_every=10)
    files = sorted(log_dir.glob("S*.LOG"))
    assert len(files) >= 3
    # archive the oldest two closed extents, then remove them from the log
    every = list(member_records(plan_member(MemberLog("QMA", log_dir))))
    arch = tmp_path / "arch"
    for path in files[:2]:
        header = archive.read_header(path)
        nxt = archive.read_header(files[files.index(path) + 1]).first_lsn
        archive.archive_extent(path, header.extent_number, header.first_lsn, nxt, b"{}",
                               [arch], "QMA")
        path.unlink()
    member = MemberLog("QMA", log_dir, (arch,))
    plan = plan_member(member)
    assert [e.origin for e in plan.extents[:2]] == ["archive", "archive"]
    said = []
    recall_into(plan, member, tmp_path / "scratch", lambda mid, text: said.append(mid))
    assert said == ["HMQ7484I", "HMQ7484I"]
    again = list(member_records(plan))
    assert [r.lsn for r in again] == [r.lsn for r in every]
    # the member's own log directory was not written
    assert sorted(p.name for p in log_dir.glob("S*.LOG")) == [p.name for p in files[2:]]


def test_an_extent_nowhere_is_an_error_naming_the_member(tmp_path):
    log_dir = tmp_path / "a"
    build(log_dir, "QMA", 1_000_000_000, 40, switch_every=10)
    files = sorted(log_dir.glob("S*.LOG"))
    files[1].unlink()
    plan = plan_member(MemberLog("QMA", log_dir))
    with pytest.raises(LogMissing, match="member QMA: its log has a gap"):
        list(member_records(plan))
    files[0].unlink()
    with pytest.raises(LogMissing, match="member QMA: its log from LSN 5 is needed"):
        plan_member(MemberLog("QMA", log_dir), from_lsn=5)
