"""The log records of shared-message changes (SHARED_PUT, SHARED_GET): their
byte layout as docs/qsg.md writes it, exact round trips through the record
codec, and what ``log dump`` shows of them."""

from __future__ import annotations

import struct

from harbormq.log.records import (
    SHARED_CHANGE,
    LogRecord,
    Message,
    MessageRef,
    RecordType,
    SharedChange,
    decode,
    describe,
    encode,
)


def test_shared_put_round_trips_with_its_stamp_key_member_and_structure():
    m = Message(body=b"hello", msg_id=b"i" * 24, correl_id=b"c", priority=4, seq=77,
                properties={"k": "v"})
    change = SharedChange.put(1234, 3, "APP1", m)
    payload = change.encode()
    assert payload[:24] == struct.pack("<QQIB3x", 1234, 77, 3, 4)
    assert payload[24:28] == b"APP1" and payload[28:] == m.encode()
    rec = LogRecord(RecordType.SHARED_PUT, uow_id=9, prev_lsn=100, object_name="SQ",
                    payload=payload, lsn=4096, timestamp_ns=1)
    back = decode(encode(rec), 0)
    assert back.type == RecordType.SHARED_PUT and back.object_name == "SQ"
    got = SharedChange.decode(back.payload)
    assert (got.stamp, got.msg_key, got.member, got.structure) == (1234, 77, 3, "APP1")
    assert got.message() == m
    d = describe(back)
    assert d["type"] == "SHARED_PUT" and d["stamp"] == 1234 and d["msg_key"] == 77
    assert d["structure"] == "APP1" and d["body_size"] == 5 and d["priority"] == 4


def test_shared_get_carries_the_reference_of_the_message():
    ref = MessageRef(seq=77, priority=4, msg_id=b"i" * 24)
    payload = SharedChange.get(1300, 2, "APP1", ref).encode()
    assert SHARED_CHANGE.unpack_from(payload, 0) == (1300, 77, 2, 4)
    got = SharedChange.decode(payload)
    assert got.ref() == ref and got.msg_key == 77
    rec = LogRecord(RecordType.SHARED_GET, object_name="SQ", payload=payload, lsn=0)
    d = describe(decode(encode(rec), 0))
    assert d["type"] == "SHARED_GET" and d["stamp"] == 1300 and d["member"] == 2
    assert d["msg_id"] == (b"i" * 24).hex()
