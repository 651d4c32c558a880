"""The extent reader decodes runs of records (``records.decode_run``); it must
read exactly what decoding one record at a time reads: the same records, and
the same end (clean, torn, EXTENT_END, stopped) or the same corruption."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harbormq.errors import LogCorrupt
from harbormq.log import reader as reader_mod
from harbormq.log.reader import ExtentReader
from harbormq.log.records import (
    EXTENT_HEADER_SIZE,
    ExtentHeader,
    LogRecord,
    RecordDecodeError,
    RecordType,
    decode,
    encode,
)

PAGES = 3
SIZE = PAGES * 4096
TYPES = [t for t in RecordType if t != RecordType.EXTENT_END]


def one_at_a_time(path: Path, newest: bool, from_lsn: int | None, to_lsn: int | None):
    """The reading rules with ``decode`` per record (the reader before runs)."""
    r = ExtentReader(path, newest=newest)
    first = r.header.first_lsn
    data = path.read_bytes()
    offset = EXTENT_HEADER_SIZE
    if from_lsn is not None and from_lsn > first:
        offset += from_lsn - first
    out = []
    while True:
        lsn = first + offset - EXTENT_HEADER_SIZE
        if to_lsn is not None and lsn >= to_lsn:
            return out, ("stopped", offset, lsn, 0, "")
        try:
            rec = decode(data, offset, expected_lsn=lsn)
        except RecordDecodeError as exc:
            try:
                end = r._classify_end(data, offset, lsn, exc)
            except LogCorrupt as corrupt:
                return out, ("corrupt", corrupt.message)
            return out, (end.how, end.offset, end.lsn, end.torn_length, end.reason)
        out.append(rec)
        offset += rec.length
        if rec.type == RecordType.EXTENT_END:
            return out, ("extent_end", offset, lsn + rec.length, 0, "")


def by_runs(path: Path, newest: bool, from_lsn: int | None, to_lsn: int | None):
    r = ExtentReader(path, newest=newest)
    out = []
    try:
        for rec in r.records(from_lsn, to_lsn=to_lsn):
            out.append(rec)
    except LogCorrupt as corrupt:
        return out, ("corrupt", corrupt.message)
    e = r.end
    return out, (e.how, e.offset, e.lsn, e.torn_length, e.reason)


def fields(recs: list[LogRecord]) -> list[tuple]:
    return [(r.lsn, r.length, r.type, r.uow_id, r.object_name, r.payload, r.synced_lsn)
            for r in recs]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_reading_in_runs_reads_what_one_record_at_a_time_reads(data):
    first = data.draw(st.integers(0, 1 << 30)) * 8
    buf = bytearray(SIZE)
    buf[:EXTENT_HEADER_SIZE] = ExtentHeader(1, first, 0, "QM", PAGES).encode()
    offset, lsn, synced, starts = EXTENT_HEADER_SIZE, first, first, []
    for _ in range(data.draw(st.integers(0, 120))):
        rtype = data.draw(st.sampled_from(TYPES + [RecordType.EXTENT_END]))
        rec = LogRecord(rtype, uow_id=data.draw(st.integers(0, 4)), object_name="Q",
                        payload=bytes(data.draw(st.sampled_from([0, 1, 30, 200]))),
                        lsn=lsn, synced_lsn=synced)
        raw = encode(rec)
        if offset + len(raw) > SIZE:
            break
        buf[offset:offset + len(raw)] = raw
        starts.append(lsn)
        offset += len(raw)
        lsn += len(raw)
        if data.draw(st.booleans()):
            synced = lsn
        if rtype == RecordType.EXTENT_END:
            break
    damage = data.draw(st.sampled_from(["none", "flip", "zeros", "junk after"]))
    if damage == "flip" and offset > EXTENT_HEADER_SIZE:
        at = data.draw(st.integers(EXTENT_HEADER_SIZE, min(SIZE, offset + 200) - 1))
        buf[at] ^= data.draw(st.integers(1, 255))
    elif damage == "zeros" and offset > EXTENT_HEADER_SIZE:
        at = data.draw(st.integers(EXTENT_HEADER_SIZE, offset - 1))
        upto = min(SIZE, at + data.draw(st.integers(1, 300)))
        buf[at:upto] = bytes(upto - at)
    elif damage == "junk after" and offset < SIZE:
        buf[data.draw(st.integers(offset, SIZE - 1))] = data.draw(st.integers(1, 255))
    newest = data.draw(st.booleans())
    from_lsn = data.draw(st.sampled_from([None, first] + starts)) if starts else None
    to_lsn = data.draw(st.sampled_from([None] + [s + d for s in starts for d in (0, 8)]
                                       + [lsn])) if starts else None
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "S0000001.LOG"
        path.write_bytes(bytes(buf))
        want_recs, want_end = one_at_a_time(path, newest, from_lsn, to_lsn)
        got_recs, got_end = by_runs(path, newest, from_lsn, to_lsn)
    assert fields(got_recs) == fields(want_recs)
    assert got_end == want_end


def test_a_reader_that_wants_one_record_decodes_few(tmp_path, monkeypatch):
    """The first run is short: a reader after one record (a checkpoint, the
    record at an LSN) does not decode thousands."""
    buf = bytearray(EXTENT_HEADER_SIZE)
    buf[:EXTENT_HEADER_SIZE] = ExtentHeader(1, 0, 0, "QM", 64).encode()
    lsn = 0
    for _ in range(2000):
        raw = encode(LogRecord(RecordType.MSG_PUT, object_name="Q", payload=b"x" * 10, lsn=lsn))
        buf += raw
        lsn += len(raw)
    buf += bytes(64 * 4096 - len(buf))
    path = tmp_path / "S0000001.LOG"
    path.write_bytes(bytes(buf))
    decoded = []
    real = reader_mod.decode_run

    def counting(*args, **kw):
        recs, end = real(*args, **kw)
        decoded.append(len(recs))
        return recs, end

    monkeypatch.setattr(reader_mod, "decode_run", counting)
    rec = next(iter(ExtentReader(path, newest=False).records()))
    assert rec.lsn == 0
    assert sum(decoded) <= reader_mod.FIRST_RUN
