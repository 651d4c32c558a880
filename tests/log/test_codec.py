"""The log record codec (harbormq.log.records): exact round trips of every record
type and payload, the byte layout its docstring promises, and rejection of
every damaged record: a flipped bit anywhere, a wrong LSN, a cut, zeros."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harbormq.errors import HarbormqError
from harbormq.log.records import (
    EXTENT_HEADER_SIZE,
    MIN_RECORD,
    RECORD_HEADER,
    RECORD_VERSION,
    Compensation,
    ExtentHeader,
    LogRecord,
    Message,
    MessageRef,
    PublicationTarget,
    RecordDecodeError,
    RecordFlag,
    RecordType,
    SharedChange,
    decode,
    decode_run,
    describe,
    encode,
    encode_json,
    encode_publication,
    encode_shunt,
    encoded_length,
    extent_file_name,
    key_parts,
    message_key,
    shunt_copy,
)

FAST = settings(max_examples=100, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])

U8 = st.integers(0, 0xFF)
U16 = st.integers(0, 0xFFFF)
U32 = st.integers(0, 0xFFFF_FFFF)
U64 = st.integers(0, 0xFFFF_FFFF_FFFF_FFFF)
I64 = st.integers(-(1 << 63), (1 << 63) - 1)


def _name_fits(name: str) -> bool:
    return len(name.encode()) <= 255


#: object names: any Unicode text (no surrogates) whose UTF-8 fits the 1-byte length
names = st.text(max_size=80).filter(_name_fits)
record_types = st.sampled_from(list(RecordType))


PAYLOAD_BYTES = st.binary(max_size=600)


@st.composite
def log_records(draw, payload=PAYLOAD_BYTES):
    return LogRecord(type=draw(record_types), uow_id=draw(U64), prev_lsn=draw(U64),
                     object_id=draw(U32), object_name=draw(names), payload=draw(payload),
                     flags=draw(U8), lsn=draw(U64), timestamp_ns=draw(U64))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 53), 1 << 53) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=10)


@st.composite
def messages(draw):
    return Message(body=draw(st.binary(max_size=2000)), msg_id=draw(st.binary(max_size=48)),
                   correl_id=draw(st.binary(max_size=48)), priority=draw(U8),
                   persistent=draw(st.booleans()), expiry_ns=draw(I64), put_time_ns=draw(I64),
                   backout_count=draw(U32), reply_to=draw(st.text(max_size=60)),
                   format=draw(st.text(max_size=20)),
                   properties=draw(st.dictionaries(st.text(max_size=12), json_values,
                                                   max_size=6)),
                   seq=draw(U64))


message_refs = st.builds(MessageRef, seq=U64, priority=U8, msg_id=st.binary(max_size=255))


def fields(rec: LogRecord) -> tuple:
    return (rec.type, rec.uow_id, rec.prev_lsn, rec.object_id, rec.object_name, rec.payload,
            rec.flags, rec.lsn, rec.timestamp_ns)


def sample_record(rtype: RecordType = RecordType.MSG_PUT, *, lsn: int = 4096,
                  name: str = "ORDERS.IN", payload: bytes | None = None) -> LogRecord:
    if payload is None:
        payload = Message(body=b"hello, world", msg_id=b"M" * 24, priority=4, seq=7).encode()
    return LogRecord(rtype, uow_id=12, prev_lsn=lsn - 64 if lsn >= 64 else 0, object_id=3,
                     object_name=name, payload=payload, flags=RecordFlag.AUTO_COMMIT, lsn=lsn,
                     timestamp_ns=1_700_000_000_123_456_789)


def assert_well_formed(data: bytes, rec: LogRecord) -> None:
    """The invariants the module docstring promises for every encoded record."""
    assert len(data) % 8 == 0
    assert len(data) >= MIN_RECORD
    assert rec.length == len(data)
    assert len(data) == encoded_length(len(rec.object_name.encode()), len(rec.payload))
    (head_len,) = struct.unpack_from("<I", data, 0)
    (trail_len,) = struct.unpack_from("<I", data, len(data) - 4)
    assert head_len == trail_len == len(data)
    (crc,) = struct.unpack_from("<I", data, 4)
    assert crc == crc32c(data[8:])


# --- round trips ---------------------------------------------------------------------

PAYLOADS = {
    RecordType.MSG_PUT: Message(body=b"body", msg_id=b"I" * 24, correl_id=b"C" * 24,
                                priority=9, reply_to="REPLY.Q", format="MQSTR",
                                properties={"k": "v", "n": 1}, seq=99).encode(),
    RecordType.MSG_GET: MessageRef(99, 9, b"I" * 24).encode(),
    RecordType.MSG_EXPIRE: MessageRef(5, 0, b"E" * 24).encode(),
    RecordType.COMPENSATION: Compensation(RecordType.MSG_GET, 1000, 900,
                                          MessageRef(5, 3, b"X" * 24), 2).encode(),
    RecordType.OBJECT_CREATE: encode_json({"type": "QLOCAL", "name": "Q1", "object_id": 3,
                                           "attrs": {"DEFPSIST": "YES"}}),
    RecordType.OBJECT_ALTER: encode_json({"type": "QLOCAL", "name": "Q1", "object_id": 3,
                                          "attrs": {"DEFPSIST": "NO"}}),
    RecordType.OBJECT_DELETE: encode_json({"name": "Q1"}),
    RecordType.CHECKPOINT_END: encode_json({"begin_lsn": 10, "uows": [], "stores": {}}),
    RecordType.CHECKPOINT_PART: encode_json({"stores": {"Q1": {"object_id": 3}}}),
    RecordType.UOW_BEGIN: encode_json({"owner": "app"}),
    RecordType.QM_START: encode_json({"pid": 1}),
    RecordType.QM_STOP: encode_json({"mode": "immediate"}),
    RecordType.UOW_SHUNT: encode_shunt(
        {"state": "active", "owner": "app", "begin_lsn": 64, "started_ns": 1},
        [shunt_copy(LogRecord(RecordType.MSG_GET, object_name="Q1", object_id=3, lsn=900,
                              payload=MessageRef(5, 3, b"X" * 24).encode()))], 4096)[0],
    RecordType.LOG_CRESTART: encode_json({"discarded": [100, 8192], "requested": "LSN 100"}),
    RecordType.MSG_PUBLISH: encode_publication(
        Message(body=b"body", msg_id=b"I" * 24, properties={"MQTopicString": "a/b"}),
        [PublicationTarget(3, "Q1", 7), PublicationTarget(4, "Q2", 1)]),
    RecordType.SHARED_PUT: SharedChange.put(50, 2, "APP1",
                                            Message(body=b"b", msg_id=b"S" * 24, seq=8)).encode(),
    RecordType.SHARED_GET: SharedChange.get(51, 1, "APP1", MessageRef(8, 0, b"S" * 24)).encode(),
}


@pytest.mark.parametrize("rtype", list(RecordType), ids=lambda t: t.name)
def test_every_record_type_round_trips(rtype):
    rec = sample_record(rtype, payload=PAYLOADS.get(rtype, b"\x01\x02\x03"))
    data = encode(rec)
    assert_well_formed(data, rec)
    back = decode(data, 0, expected_lsn=rec.lsn)
    assert fields(back) == fields(rec)
    assert back.type is rtype and back.length == len(data)
    assert back.end_lsn == rec.lsn + len(data)
    # the describe() view used by `log dump` understands every type's payload
    assert describe(back)["type"] == rtype.name


def test_empty_record_is_the_minimum_size():
    rec = LogRecord(RecordType.EXTENT_END, lsn=8)
    data = encode(rec)
    assert len(data) == MIN_RECORD == encoded_length(0, 0)
    assert fields(decode(data, 0, expected_lsn=8)) == fields(rec)


def test_header_fields_sit_where_the_docstring_says():
    rec = sample_record(name="Q.NAME")
    data = encode(rec)
    assert RECORD_HEADER.size == 60
    (length, crc, lsn, ts, uow, prev, obj, plen) = struct.unpack_from("<IIQQQQII", data, 0)
    assert (length, lsn, ts, uow, prev, obj, plen) == (
        len(data), rec.lsn, rec.timestamp_ns, rec.uow_id, rec.prev_lsn, rec.object_id,
        len(rec.payload))
    assert crc == crc32c(data[8:])
    assert data[48] == int(rec.type)
    assert data[49] == int(rec.flags)
    assert data[50] == len(b"Q.NAME")
    assert data[51] == RECORD_VERSION
    assert struct.unpack_from("<Q", data, 52)[0] == rec.synced_lsn
    assert data[60:66] == b"Q.NAME"
    assert data[66:66 + plen] == rec.payload
    # zero padding up to the trailer
    assert data[66 + plen:len(data) - 4] == bytes(len(data) - 4 - 66 - plen)


@pytest.mark.parametrize("payload_len", range(0, 17))
def test_padding_makes_every_length_a_multiple_of_8(payload_len):
    rec = sample_record(payload=b"p" * payload_len, name="Q")
    data = encode(rec)
    assert_well_formed(data, rec)
    assert fields(decode(data, 0)) == fields(rec)


def test_records_in_a_row_walk_forwards_and_backwards():
    recs, buf, lsn = [], bytearray(), 4096
    for i, rtype in enumerate(RecordType):
        rec = sample_record(rtype, lsn=lsn, name="Q" * (i % 5), payload=bytes(range(i * 3)))
        buf += encode(rec)
        recs.append(rec)
        lsn += rec.length
    forward, off = [], 0
    while off < len(buf):
        r = decode(buf, off, expected_lsn=4096 + off)
        forward.append(fields(r))
        off += r.length
    assert forward == [fields(r) for r in recs]
    backward, end = [], len(buf)
    while end > 0:
        (length,) = struct.unpack_from("<I", buf, end - 4)
        backward.append(fields(decode(buf, end - length)))
        end -= length
    assert backward == forward[::-1]


def test_an_object_name_longer_than_255_bytes_is_refused():
    with pytest.raises(ValueError):
        encode(sample_record(name="é" * 128))   # 256 bytes of UTF-8
    assert decode(encode(sample_record(name="Q" * 255)), 0).object_name == "Q" * 255


@FAST
@given(log_records())
def test_any_record_round_trips_exactly(rec):
    data = encode(rec)
    assert_well_formed(data, rec)
    back = decode(data, 0, expected_lsn=rec.lsn)
    assert fields(back) == fields(rec)
    assert back.length == len(data)


@FAST
@given(log_records(payload=st.binary(max_size=64)), st.binary(max_size=24),
       st.binary(max_size=24))
def test_a_record_decodes_in_place_between_other_bytes(rec, before, after):
    pad = bytes(-len(before) % 8)
    data = encode(rec)
    buf = before + pad + data + after
    back = decode(buf, len(before) + len(pad), expected_lsn=rec.lsn)
    assert fields(back) == fields(rec)


# --- payloads ---------------------------------------------------------------------------

def message_fields(m: Message) -> tuple:
    return (m.body, m.msg_id, m.correl_id, m.priority, m.persistent, m.expiry_ns,
            m.put_time_ns, m.backout_count, m.reply_to, m.format, m.properties, m.seq)


def test_message_round_trips_with_every_field_set():
    m = Message(body=b"\x00body\xff", msg_id=b"id", correl_id=b"corr", priority=7,
                persistent=True, expiry_ns=123, put_time_ns=456, backout_count=3,
                reply_to="R.Q", format="MQSTR", properties={"a": [1, "x"], "b": None},
                seq=42)
    data = m.encode()
    assert message_fields(Message.decode(data)) == message_fields(m)
    assert Message.body_size(data) == len(m.body)
    head = Message.decode(data, with_body=False)
    assert head.body == b"" and head.msg_id == b"id" and head.seq == 42


def test_message_with_nothing_set_round_trips():
    m = Message()
    assert message_fields(Message.decode(m.encode())) == message_fields(m)


@FAST
@given(messages())
def test_any_message_round_trips_exactly(m):
    data = m.encode()
    back = Message.decode(data)
    assert message_fields(back) == message_fields(m)
    assert Message.body_size(data) == len(m.body)
    # ... and carried as a MSG_PUT record
    rec = LogRecord(RecordType.MSG_PUT, object_name="Q1", payload=data, lsn=4096,
                    flags=RecordFlag.AUTO_COMMIT)
    out = decode(encode(rec), 0, expected_lsn=4096)
    assert message_fields(Message.decode(out.payload)) == message_fields(m)


@FAST
@given(messages(), st.data())
def test_a_cut_message_payload_is_refused(m, data):
    payload = m.encode()
    cut = data.draw(st.integers(0, len(payload) - 1))
    with pytest.raises((ValueError, struct.error)):
        Message.decode(payload[:cut])


def test_a_message_payload_with_trailing_bytes_is_refused():
    with pytest.raises(ValueError):
        Message.decode(Message(body=b"x").encode() + b"extra")


@FAST
@given(message_refs)
def test_any_message_ref_round_trips(ref):
    assert MessageRef.decode(ref.encode()) == ref


@FAST
@given(st.sampled_from([RecordType.MSG_PUT, RecordType.MSG_GET]), U64, U64, message_refs, U32)
def test_any_compensation_round_trips(undone, ulsn, unext, ref, boc):
    c = Compensation(undone, ulsn, unext, ref, boc)
    back = Compensation.decode(c.encode())
    assert back == c
    assert back.undone_type is undone


@FAST
@given(st.integers(0, 9), U64)
def test_message_keys_sort_by_priority_then_put_order(prio, seq):
    assert key_parts(message_key(prio, seq)) == (prio, seq)
    if seq < (1 << 64) - 1:
        assert message_key(prio, seq) < message_key(prio, seq + 1)
    if prio < 9:
        assert message_key(prio + 1, seq) < message_key(prio, 0)


# --- extent header ---------------------------------------------------------------------

@FAST
@given(U32, U64, U64, st.text(max_size=16).filter(lambda s: len(s.encode()) <= 48
                                                   and "\0" not in s), st.integers(32, 65535))
def test_any_extent_header_round_trips(number, first, created, qm, pages):
    h = ExtentHeader(number, first, created, qm, pages)
    block = h.encode()
    assert len(block) == EXTENT_HEADER_SIZE
    assert block[88:] == bytes(EXTENT_HEADER_SIZE - 88)
    assert ExtentHeader.decode(block) == h


def test_extent_header_layout_and_file_name():
    block = ExtentHeader(7, 123456, 99, "QM1", 64).encode()
    assert block[:8] == b"HMQLOGX1"
    assert struct.unpack_from("<IIQQ", block, 8) == (1, 7, 123456, 99)
    assert block[32:80].rstrip(b"\0") == b"QM1"
    assert struct.unpack_from("<I", block, 80) == (64,)
    assert struct.unpack_from("<I", block, 84) == (crc32c(block[:84]),)
    assert extent_file_name(7) == "S0000007.LOG"


def test_extent_header_rejects_every_flipped_bit_it_covers():
    block = ExtentHeader(3, 4096 * 5, 1, "QM1", 64).encode()
    for bit in range(88 * 8):
        bad = bytearray(block)
        bad[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(RecordDecodeError):
            ExtentHeader.decode(bytes(bad))


def test_extent_header_rejects_short_and_zero_blocks():
    with pytest.raises(RecordDecodeError):
        ExtentHeader.decode(ExtentHeader(0, 0, 0, "QM1", 32).encode()[:87])
    with pytest.raises(RecordDecodeError):
        ExtentHeader.decode(bytes(EXTENT_HEADER_SIZE))


# --- rejection ----------------------------------------------------------------------------

REJECT_CASES = [
    sample_record(RecordType.EXTENT_END, payload=b""),
    sample_record(RecordType.MSG_GET, payload=MessageRef(1, 2, b"m" * 24).encode(), name="Q"),
    sample_record(RecordType.MSG_PUT),
    sample_record(RecordType.CHECKPOINT_END, payload=encode_json({"x": "y" * 37}), name=""),
]


@pytest.mark.parametrize("rec", REJECT_CASES, ids=lambda r: r.type.name)
def test_every_single_bit_flip_is_rejected(rec):
    data = encode(rec)
    for bit in range(len(data) * 8):
        bad = bytearray(data)
        bad[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(RecordDecodeError):
            decode(bytes(bad), 0, expected_lsn=rec.lsn)
        # and without an expected LSN: the CRC (or the length checks) alone catch it
        with pytest.raises(RecordDecodeError):
            decode(bytes(bad), 0)


@FAST
@given(log_records(payload=st.binary(max_size=200)), st.data())
def test_a_random_bit_flip_is_rejected(rec, data):
    enc = encode(rec)
    bit = data.draw(st.integers(0, len(enc) * 8 - 1))
    bad = bytearray(enc)
    bad[bit // 8] ^= 1 << (bit % 8)
    # room after the record, as in an extent, so a grown length cannot just run short
    with pytest.raises(RecordDecodeError):
        decode(bytes(bad) + bytes(4096), 0)


@pytest.mark.parametrize("rec", REJECT_CASES, ids=lambda r: r.type.name)
def test_a_wrong_expected_lsn_is_rejected(rec):
    data = encode(rec)
    for wrong in (rec.lsn + 8, rec.lsn - 8, 0, rec.lsn + (1 << 32)):
        with pytest.raises(RecordDecodeError) as info:
            decode(data, 0, expected_lsn=wrong)
        assert info.value.facts.get("stale") is True
        assert str(rec.lsn) in info.value.message and str(wrong) in info.value.message


@FAST
@given(log_records(payload=st.binary(max_size=100)), U64)
def test_any_wrong_expected_lsn_is_rejected(rec, wrong):
    data = encode(rec)
    if wrong == rec.lsn:
        wrong ^= 1
    with pytest.raises(RecordDecodeError):
        decode(data, 0, expected_lsn=wrong)


@pytest.mark.parametrize("rec", REJECT_CASES, ids=lambda r: r.type.name)
def test_every_truncation_is_rejected(rec):
    data = encode(rec)
    for cut in range(len(data)):
        with pytest.raises(RecordDecodeError):
            decode(data[:cut], 0)
        # the same cut expressed with ``limit`` inside a longer buffer
        with pytest.raises(RecordDecodeError):
            decode(data + bytes(64), 0, limit=cut)
        # a cut record whose missing bytes read back as zeros (preallocated extent);
        # the trailer's high bytes are zero already, so cutting there changes nothing
        if data[cut:] != bytes(len(data) - cut):
            with pytest.raises(RecordDecodeError):
                decode(data[:cut] + bytes(len(data) - cut + 64), 0)


@FAST
@given(log_records(payload=st.binary(max_size=300)), st.data())
def test_any_truncation_is_rejected(rec, data):
    enc = encode(rec)
    cut = data.draw(st.integers(0, len(enc) - 1))
    with pytest.raises(RecordDecodeError):
        decode(enc[:cut], 0)


@pytest.mark.parametrize("size", [0, 1, 8, MIN_RECORD - 1, MIN_RECORD, 64, 4096])
def test_zero_bytes_are_no_record(size):
    with pytest.raises(RecordDecodeError) as info:
        decode(bytes(size), 0)
    if size >= MIN_RECORD:
        assert info.value.facts.get("zero") is True


def test_decode_errors_carry_the_offset_and_belong_to_the_tree():
    data = bytes(16) + encode(sample_record())
    bad = bytearray(data)
    bad[40] ^= 0x10
    with pytest.raises(RecordDecodeError) as info:
        decode(bytes(bad), 16)
    assert info.value.offset == 16 and info.value.facts["offset"] == 16
    assert isinstance(info.value, HarbormqError)
    assert "CRC" in info.value.message


def test_an_unknown_record_type_with_a_valid_crc_is_rejected():
    rec = sample_record(RecordType.UOW_COMMIT, payload=b"")
    data = bytearray(encode(rec))
    data[48] = 77                     # no such RecordType
    struct.pack_into("<I", data, 4, crc32c(bytes(data[8:])))
    with pytest.raises(RecordDecodeError, match="unknown record type"):
        decode(bytes(data), 0)


def test_an_unknown_record_version_with_a_valid_crc_is_rejected():
    data = bytearray(encode(sample_record()))
    data[51] = RECORD_VERSION + 1
    struct.pack_into("<I", data, 4, crc32c(bytes(data[8:])))
    with pytest.raises(RecordDecodeError, match="version"):
        decode(bytes(data), 0)


def test_decoded_message_reuses_its_encoding_and_replace_drops_it():
    from dataclasses import replace

    original = Message(body=b"a", msg_id=b"id", seq=5, properties={"k": 1})
    decoded = Message.decode(original.encode())
    assert decoded.raw == original.encode()
    bumped = replace(decoded, backout_count=3)
    assert bumped.raw is None, "a changed copy must not carry the old encoding"
    assert Message.decode(bumped.encode()).backout_count == 3


def test_key_follows_priority_and_seq_through_replace():
    from dataclasses import replace

    m = Message(priority=3, seq=7)
    assert m.key == message_key(3, 7)
    assert replace(m, seq=8).key == message_key(3, 8)


def _one_by_one(buf: bytes, first_lsn: int, stop_lsn: int | None = None):
    """The reference for decode_run: ``decode`` a record at a time until one fails."""
    out, offset = [], EXTENT_HEADER_SIZE
    while stop_lsn is None or first_lsn + offset - EXTENT_HEADER_SIZE < stop_lsn:
        try:
            rec = decode(buf, offset, expected_lsn=first_lsn + offset - EXTENT_HEADER_SIZE)
        except RecordDecodeError:
            break
        out.append(rec)
        offset += rec.length
        if rec.type == RecordType.EXTENT_END:
            break
    return out, offset


@FAST
@given(st.lists(log_records(payload=st.binary(max_size=200)), min_size=1, max_size=12),
       st.data())
def test_decode_run_reads_exactly_what_decode_reads(recs, data):
    """The batch decoder (every reader's fast path) stops at the same record as
    decoding one record at a time, whatever byte is damaged, and returns the
    same records: it may never skip a record or accept one ``decode`` refuses."""
    first_lsn = data.draw(st.integers(0, 1 << 40)) * 8
    chunks, lsn = [], first_lsn
    for rec in recs:
        rec.lsn = lsn
        chunks.append(encode(rec))
        lsn += rec.length
    buf = bytearray(EXTENT_HEADER_SIZE) + b"".join(chunks) + bytes(data.draw(st.integers(0, 80)))
    damage = data.draw(st.one_of(st.none(), st.integers(EXTENT_HEADER_SIZE, len(buf) - 1)))
    if damage is not None:
        buf[damage] ^= data.draw(st.integers(1, 255))
    buf = bytes(buf)
    stop_lsn = data.draw(st.one_of(st.none(), st.integers(first_lsn, lsn)))
    want, want_end = _one_by_one(buf, first_lsn, stop_lsn)
    got, offset = [], EXTENT_HEADER_SIZE
    while True:
        batch, offset = decode_run(buf, offset, len(buf), first_lsn, stop_lsn=stop_lsn,
                                   max_records=data.draw(st.integers(1, 5)),
                                   max_bytes=data.draw(st.sampled_from([1, 100, 300, 4 << 20])))
        got += batch
        if not batch or batch[-1].type == RecordType.EXTENT_END:
            break
    assert [fields(r) + (r.length, r.synced_lsn) for r in got] == \
        [fields(r) + (r.length, r.synced_lsn) for r in want]
    assert offset == want_end
