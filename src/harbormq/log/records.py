"""The log record codec: one pure module shared by the engine, ``log dump`` and
the Spark data source. No I/O here.

Log record layout (little-endian, every record a multiple of 8 bytes)::

    offset  size  field
    0       4     length         total bytes of the record, header to trailer
    4       4     crc32c         CRC32C of bytes [8, length): everything after it
    8       8     lsn            byte address of this record in the logical log
    16      8     timestamp_ns   wall-clock time of the append, ns since the epoch
    24      8     uow_id         unit of work; 0 = none (auto-committed or system)
    32      8     prev_lsn       previous record of the same UOW; 0 = first
    40      4     object_id      object the record is about; 0 = none
    44      4     payload_len
    48      1     type           RecordType
    49      1     flags          RecordFlag bits
    50      1     name_len       length of the object name that follows
    51      1     version        record format version (1)
    52      8     synced_lsn     how far the log was known forced when this record
                                 was appended (tells a torn tail from corruption)
    60      n     object name    UTF-8, name_len bytes
    ..      p     payload        payload_len bytes, layout per type (below)
    ..      0-7   zero padding   so that the trailer ends on an 8-byte boundary
    L-4     4     length         the length again, so the log can be walked backwards

LSN arithmetic: an extent holds a contiguous LSN range and records never span
extents, so a record at file offset ``o`` of an extent whose first LSN is ``F``
has LSN ``F + o - EXTENT_HEADER_SIZE``. A reader uses this to tell records of
the current cycle from stale ones left in a reused circular extent.

Extent header (first 4096 bytes of every extent, the rest zero)::

    0   8   magic            b"HMQLOGX1"
    8   4   format version   1
    12  4   extent number    the N of SnnnnnnN.LOG
    16  8   first LSN        LSN of the first record in this extent
    24  8   created_ns       when this cycle of the extent was started
    32  48  QM name          UTF-8, zero padded
    80  4   page count       extent size in 4 KiB pages
    84  4   crc32c           CRC32C of bytes [0, 84)
"""

from __future__ import annotations

import enum
import json
import struct
from dataclasses import dataclass, field

from crc32c import crc32c

from ..errors import HarbormqError

RECORD_VERSION = 1
PAGE_SIZE = 4096

RECORD_HEADER = struct.Struct("<IIQQQQIIBBBBQ")
assert RECORD_HEADER.size == 60
TRAILER = struct.Struct("<I")
assert TRAILER.size == 4
#: smallest possible record: header + trailer rounded up to 8
MIN_RECORD = 64
MAX_NAME = 255

EXTENT_HEADER = struct.Struct("<8sIIQQ48sI")
assert EXTENT_HEADER.size == 84
EXTENT_HEADER_CRC = struct.Struct("<I")
EXTENT_HEADER_SIZE = PAGE_SIZE
EXTENT_MAGIC = b"HMQLOGX1"
EXTENT_VERSION = 1


class RecordType(enum.IntEnum):
    # objects (payload: JSON attributes)
    OBJECT_CREATE = 1
    OBJECT_ALTER = 2
    OBJECT_DELETE = 3
    # messages
    MSG_PUT = 10          # payload: Message (descriptor + body)
    MSG_GET = 11          # payload: MessageRef (destructive get)
    MSG_EXPIRE = 12       # payload: MessageRef, an expired message removed (auto-committed)
    MSG_PUBLISH = 13      # payload: Publication, one message put on N queues (pub/sub)
    # shared queues of a queue sharing group (harbormq.qsg): a change this queue
    # manager made to a persistent message in a PostgreSQL structure; object
    # name: the shared queue, object id 0 (payload: SharedChange, below)
    SHARED_PUT = 14       # the whole message, as MSG_PUT carries it
    SHARED_GET = 15       # a destructive get: the message's reference
    # units of work (payload: empty, or UowInfo JSON for BEGIN)
    UOW_BEGIN = 20
    UOW_PREPARE = 21      # in doubt from here until COMMIT or BACKOUT
    UOW_COMMIT = 22
    UOW_BACKOUT = 23      # the backout is complete
    COMPENSATION = 24     # undo of one record of a UOW being backed out; payload: Compensation
    # checkpoints
    CHECKPOINT_BEGIN = 30
    CHECKPOINT_END = 31   # payload: JSON active-UOW table and store recovery LSNs
    CHECKPOINT_PART = 32  # payload: JSON, a piece of a checkpoint table too big for one
                          # record (CHECKPOINT_END lists the parts' LSNs)
    # media images (issue: media recovery)
    MEDIA_IMAGE_BEGIN = 40
    MEDIA_IMAGE_CHUNK = 41
    MEDIA_IMAGE_END = 42
    # channels (issue: channels)
    CHANNEL_SYNC = 50
    # log shunting (core/shunting.py): a copy of the records a long unit of work
    # still needs, written forward at a checkpoint; payload: UOW_SHUNT below
    UOW_SHUNT = 60
    # log housekeeping
    EXTENT_END = 90       # last record of a full extent; the next LSN is in the next extent
    QM_START = 91         # the queue manager finished restart (payload: JSON)
    QM_STOP = 92          # controlled or immediate shutdown began (payload: JSON)
    LOG_CRESTART = 93     # first record after a conditional restart (payload: JSON,
                          # "discarded": [E, H], the LSN range given up)
    # structure backups of a queue sharing group (qsg/structure_recovery.py):
    # BACKUP CFSTRUCT's fuzzy copy of a structure's committed persistent messages
    CFSTRUCT_BACKUP_BEGIN = 70   # payload: JSON (structure, backup id, replay stamp)
    CFSTRUCT_BACKUP_CHUNK = 71   # payload: backup id, then messages (structure_recovery.py)
    CFSTRUCT_BACKUP_END = 72     # payload: JSON (backup id, messages, bytes)


class RecordFlag(enum.IntFlag):
    NONE = 0
    #: a MSG_PUT/MSG_GET outside a unit of work: committed by itself
    AUTO_COMMIT = 1


#: plain-int forms for the hot paths (IntFlag arithmetic costs a microsecond)
AUTO_COMMIT = int(RecordFlag.AUTO_COMMIT)
_TYPES = {int(t): t for t in RecordType}


@dataclass(slots=True)
class LogRecord:
    type: RecordType
    uow_id: int = 0
    prev_lsn: int = 0
    object_id: int = 0
    object_name: str = ""
    payload: bytes = b""
    flags: int = 0
    lsn: int = 0
    timestamp_ns: int = 0
    #: total encoded length; filled by decode and encode_into
    length: int = 0
    #: the log's forced LSN when the record was appended (set by the log)
    synced_lsn: int = 0

    @property
    def end_lsn(self) -> int:
        return self.lsn + self.length


class RecordDecodeError(HarbormqError):
    """A record failed a check. Whether that is a torn tail or corruption is
    decided by the reader, which knows where in the log it stands."""

    msgid = "HMQ7501E"

    def __init__(self, message: str, *, offset: int, **facts):
        super().__init__(message, offset=offset, **facts)
        self.offset = offset


def encoded_length(name_len: int, payload_len: int) -> int:
    raw = RECORD_HEADER.size + name_len + payload_len + TRAILER.size
    return (raw + 7) & ~7


#: the header after its length and CRC fields: what the CRC covers first
_HEADER_TAIL = struct.Struct("<QQQQIIBBBBQ")
_LENGTH_CRC = struct.Struct("<II")
_PADS = [b"\0" * n for n in range(8)]


def encode(rec: LogRecord, name: bytes | None = None) -> bytes:
    """Encode a record whose ``lsn`` and ``timestamp_ns`` are already set
    (``name``: the object name already encoded, when the caller has it)."""
    if name is None:
        name = rec.object_name.encode()
    if len(name) > MAX_NAME:
        raise ValueError(f"object name longer than {MAX_NAME} bytes: {rec.object_name!r}")
    payload = rec.payload
    raw = RECORD_HEADER.size + len(name) + len(payload) + TRAILER.size
    length = (raw + 7) & ~7
    rec.length = length
    covered = b"".join((
        _HEADER_TAIL.pack(rec.lsn, rec.timestamp_ns, rec.uow_id, rec.prev_lsn, rec.object_id,
                          len(payload), int(rec.type), int(rec.flags), len(name),
                          RECORD_VERSION, rec.synced_lsn),
        name, payload, _PADS[length - raw], TRAILER.pack(length)))
    return _LENGTH_CRC.pack(length, crc32c(covered)) + covered


def decode(buf, offset: int, *, expected_lsn: int | None = None,
           limit: int | None = None) -> LogRecord:
    """Decode the record at ``buf[offset:]``.

    Raises RecordDecodeError with a reason when the bytes there are not a
    whole valid record (short, zero, bad length, bad CRC, wrong LSN).
    """
    end = len(buf) if limit is None else limit
    if end - offset < MIN_RECORD:
        raise RecordDecodeError("short record: fewer bytes than a record header", offset=offset)
    (length, crc, lsn, ts, uow, prev, obj, plen, rtype, flags, nlen,
     version, synced) = RECORD_HEADER.unpack_from(buf, offset)
    if length == 0:
        raise RecordDecodeError("zero length: no record here", offset=offset, zero=True)
    if length < MIN_RECORD or length % 8 or length != encoded_length(nlen, plen):
        raise RecordDecodeError(f"impossible record length {length}", offset=offset)
    if offset + length > end:
        raise RecordDecodeError(f"record of {length} bytes runs past the end of the data",
                                offset=offset)
    # one copy of the record; no view of ``buf`` outlives this call, so the
    # caller can always close the map it came from
    body = buf[offset + 8:offset + length]
    if crc32c(body) != crc:
        raise RecordDecodeError("CRC mismatch", offset=offset)
    # (the trailer is covered by the CRC: equal lengths need no second check)
    if expected_lsn is not None and lsn != expected_lsn:
        raise RecordDecodeError(f"record LSN {lsn} where LSN {expected_lsn} belongs",
                                offset=offset, stale=True)
    if version != RECORD_VERSION:
        raise RecordDecodeError(f"unknown record format version {version}", offset=offset)
    rtype_enum = _TYPES.get(rtype)
    if rtype_enum is None:
        raise RecordDecodeError(f"unknown record type {rtype}", offset=offset)
    pos = RECORD_HEADER.size - 8
    name = str(body[pos:pos + nlen], "utf-8", "replace") if nlen else ""
    pos += nlen
    payload = body[pos:pos + plen]
    return LogRecord(rtype_enum, uow, prev, obj, name, payload, flags, lsn, ts, length, synced)


_EXTENT_END = int(RecordType.EXTENT_END)    # plain int for decode_run
#: the bytes of a record beyond its name and payload, before the padding to 8
_FIXED_BYTES = RECORD_HEADER.size + TRAILER.size + 7


def decode_run(buf, offset: int, end: int, first_lsn: int, *, stop_lsn: int | None = None,
               max_records: int = 2048, max_bytes: int = 4 << 20
               ) -> tuple[list[LogRecord], int]:
    """Decode the valid records that follow each other from ``buf[offset:end]``,
    an extent whose first LSN is ``first_lsn``: the fast path of every read.

    Applies exactly ``decode``'s checks, inlined, and stops *before* the first
    record that fails one (the caller decodes that one with ``decode`` to learn
    why), before the record at ``stop_lsn``, after an EXTENT_END record, after
    ``max_records``, or after the record that reaches ``max_bytes`` (a run of
    big messages holds no more than that in memory). Returns the records and
    the offset just past the last."""
    out: list[LogRecord] = []
    append = out.append
    unpack = RECORD_HEADER.unpack_from
    types = _TYPES
    record = LogRecord
    delta = first_lsn - EXTENT_HEADER_SIZE          # a record's LSN is its offset + delta
    last_start = min(end - MIN_RECORD, offset + max_bytes - 1)
    if stop_lsn is not None:
        last_start = min(last_start, stop_lsn - delta - 1)
    name_at = RECORD_HEADER.size - 8                # in the CRC-covered part
    fixed = _FIXED_BYTES
    while offset <= last_start and len(out) < max_records:
        (length, crc, lsn, ts, uow, prev, obj, plen, rtype, flags, nlen,
         version, synced) = unpack(buf, offset)
        # (a zero, short, unaligned or inconsistent length fails the first test)
        if length != (fixed + nlen + plen) & ~7 or lsn != offset + delta or \
                offset + length > end or version != RECORD_VERSION:
            break
        body = buf[offset + 8:offset + length]
        if crc32c(body) != crc:
            break
        rtype_enum = types.get(rtype)
        if rtype_enum is None:
            break
        name = str(body[name_at:name_at + nlen], "utf-8", "replace") if nlen else ""
        payload = body[name_at + nlen:name_at + nlen + plen]
        append(record(rtype_enum, uow, prev, obj, name, payload, flags, lsn, ts, length,
                      synced))
        offset += length
        if rtype == _EXTENT_END:
            break
    return out, offset


# --- extent header ---------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ExtentHeader:
    extent_number: int
    first_lsn: int
    created_ns: int
    qm_name: str
    pages: int

    def encode(self) -> bytes:
        head = EXTENT_HEADER.pack(EXTENT_MAGIC, EXTENT_VERSION, self.extent_number,
                                  self.first_lsn, self.created_ns,
                                  self.qm_name.encode()[:48], self.pages)
        block = bytearray(EXTENT_HEADER_SIZE)
        block[:len(head)] = head
        EXTENT_HEADER_CRC.pack_into(block, EXTENT_HEADER.size, crc32c(head))
        return bytes(block)

    @classmethod
    def decode(cls, buf: bytes) -> "ExtentHeader":
        if len(buf) < EXTENT_HEADER.size + 4:
            raise RecordDecodeError("extent header is short", offset=0)
        magic, version, number, first, created, name, pages = EXTENT_HEADER.unpack_from(buf, 0)
        if magic != EXTENT_MAGIC:
            raise RecordDecodeError("not a harbormq log extent (bad magic)", offset=0)
        (crc,) = EXTENT_HEADER_CRC.unpack_from(buf, EXTENT_HEADER.size)
        if crc != crc32c(bytes(buf[:EXTENT_HEADER.size])):
            raise RecordDecodeError("extent header CRC mismatch", offset=0)
        if version != EXTENT_VERSION:
            raise RecordDecodeError(f"unknown extent format version {version}", offset=0)
        return cls(number, first, created, name.rstrip(b"\0").decode(), pages)


def extent_file_name(number: int) -> str:
    return f"S{number:07d}.LOG"


# --- payloads ----------------------------------------------------------------------
#
# MSG_PUT payload (Message), little-endian:
#   0   8  seq            put sequence on the queue (the message's key with priority)
#   8   1  priority       0-9
#   9   1  persistent     1 (only persistent messages are logged)
#   10  2  reserved
#   12  4  backout_count
#   16  8  put_time_ns
#   24  8  expiry_ns      absolute expiry time, 0 = never
#   32  2  msg_id length        then the variable fields in this order:
#   34  2  correl_id length       msg_id, correl_id, reply_to (UTF-8),
#   36  2  reply_to length        format (UTF-8), properties (JSON, UTF-8), body
#   38  2  format length
#   40  4  properties length
#   44  4  body length
MSG_FIXED = struct.Struct("<QBBHIqqHHHHII")
assert MSG_FIXED.size == 48

# MSG_GET / MSG_EXPIRE payload (MessageRef): seq u64, priority u8, msg_id length u8, msg_id
MSG_REF = struct.Struct("<QBB")
assert MSG_REF.size == 10

# SHARED_PUT / SHARED_GET payload (SharedChange): a change to a persistent
# message of a shared queue, written by the member that made it, in its unit
# of work like MSG_PUT and MSG_GET (AUTO_COMMIT outside one), so its COMMIT,
# UOW_BACKOUT and COMPENSATION records decide it as they decide local ones.
# The record header names the shared queue (object id 0: a shared queue is
# no object of one queue manager's catalog).
#   0   8  stamp          the group-wide stamp: PostgreSQL sequence hmq_stamp,
#                         taken in the statement that made the change; the
#                         logs of all members merge into one order by it
#   8   8  msg_key        the message's key in the group (sequence hmq_msg_key),
#                         the same in its put and in every get of it
#   16  4  member         the member's number in the group (hmq_members.number)
#   20  1  structure len  then the structure's name (UTF-8), then
#   21  3  reserved
#   24  s  structure
#   ..     SHARED_PUT: the Message encoding (its seq is msg_key)
#          SHARED_GET: the MessageRef encoding (seq = msg_key, priority, msg_id)
SHARED_CHANGE = struct.Struct("<QQIB3x")
assert SHARED_CHANGE.size == 24


@dataclass(slots=True, frozen=True)
class SharedChange:
    """A decoded SHARED_PUT or SHARED_GET payload. ``body``: the Message
    encoding (a put) or the MessageRef encoding (a get), as written."""
    stamp: int
    msg_key: int
    member: int
    structure: str
    body: bytes

    def encode(self) -> bytes:
        name = self.structure.encode()
        if len(name) > 255:
            raise ValueError(f"structure name longer than 255 bytes: {self.structure!r}")
        return SHARED_CHANGE.pack(self.stamp, self.msg_key, self.member, len(name)) + name + \
            bytes(self.body)

    @classmethod
    def decode(cls, buf) -> "SharedChange":
        stamp, key, member, nlen = SHARED_CHANGE.unpack_from(buf, 0)
        pos = SHARED_CHANGE.size
        name = bytes(buf[pos:pos + nlen]).decode()
        return cls(stamp, key, member, name, bytes(buf[pos + nlen:]))

    @classmethod
    def put(cls, stamp: int, member: int, structure: str, msg: "Message") -> "SharedChange":
        """A SHARED_PUT of ``msg``, whose seq is its key in the group."""
        return cls(stamp, msg.seq, member, structure, msg.encode())

    @classmethod
    def get(cls, stamp: int, member: int, structure: str, ref: "MessageRef") -> "SharedChange":
        """A SHARED_GET of the message ``ref`` names (its seq is the key)."""
        return cls(stamp, ref.seq, member, structure, ref.encode())

    def message(self, *, with_body: bool = True) -> "Message":
        """The message of a SHARED_PUT."""
        return Message.decode(self.body, with_body=with_body)

    def ref(self) -> "MessageRef":
        """The reference of a SHARED_GET."""
        return MessageRef.decode(self.body)


def describe_shared_change(rtype: "RecordType", payload) -> dict:
    """What a SHARED_PUT or SHARED_GET holds, without a body (``log dump``)."""
    c = SharedChange.decode(payload)
    out = {"stamp": c.stamp, "msg_key": c.msg_key, "member": c.member,
           "structure": c.structure}
    if rtype == RecordType.SHARED_PUT:
        m = c.message(with_body=False)
        out.update(msg_id=m.msg_id.hex(), correl_id=m.correl_id.hex(), priority=m.priority,
                   expiry_ns=m.expiry_ns, backout_count=m.backout_count,
                   body_size=Message.body_size(c.body), properties=m.properties)
    else:
        r = c.ref()
        out.update(msg_id=r.msg_id.hex(), priority=r.priority)
    return out


# MSG_PUBLISH payload (Publication): one message put on several local queues
# (a publication's subscription queues) with its body written once. The record
# header's object is none (id 0, no name): the targets name their queues.
#   0   4  targets        N, at least 1
#   4   4  message length M
#   8   M  message        a Message encoding (above) whose seq is 0: each target
#                         has its own
#   8+M    N times, one per target queue (13 bytes and the name):
#          0  4  object_id   the queue's object id (its incarnation)
#          4  8  seq         the message's put sequence on that queue
#          12 1  name_len    then the queue's name, UTF-8
PUBLICATION = struct.Struct("<II")
assert PUBLICATION.size == 8
PUBLICATION_TARGET = struct.Struct("<IQB")
assert PUBLICATION_TARGET.size == 13

# COMPENSATION payload: undone record type u8, pad 7, undone LSN u64, undo-next LSN u64,
# then seq u64, priority u8, msg_id length u8, pad 2, new backout count u32, msg_id.
COMPENSATION = struct.Struct("<B7xQQQBB2xI")
assert COMPENSATION.size == 40


@dataclass(slots=True)
class Message:
    """A message: its descriptor and body. The same class is the in-memory
    message, the MSG_PUT payload and the value kept in a queue's store."""
    body: bytes = b""
    msg_id: bytes = b""
    correl_id: bytes = b""
    priority: int = 0
    persistent: bool = True
    expiry_ns: int = 0          # absolute expiry time, 0 = never expires
    put_time_ns: int = 0
    backout_count: int = 0
    reply_to: str = ""
    format: str = ""
    properties: dict = field(default_factory=dict)
    seq: int = 0                # put sequence on its queue, with priority the key
    #: the encoding this message was decoded from, reused by encode(). Not an
    #: init field, so dataclasses.replace() drops it; code that assigns to a
    #: decoded message's fields must reset it (QueueManagerCore._prepare_message)
    raw: bytes | None = field(default=None, init=False, repr=False, compare=False)
    #: the store key, computed once (same rule as ``raw``)
    _key: bytes | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def key(self) -> bytes:
        k = self._key
        if k is None:
            k = self._key = message_key(self.priority, self.seq)
        return k

    def expired(self, now_ns: int) -> bool:
        return bool(self.expiry_ns) and self.expiry_ns <= now_ns

    def encode(self) -> bytes:
        if self.raw is not None:
            return self.raw
        reply = self.reply_to.encode()
        fmt = self.format.encode()
        props = json.dumps(self.properties, separators=(",", ":")).encode() if self.properties \
            else b""
        head = MSG_FIXED.pack(self.seq, self.priority, 1 if self.persistent else 0, 0,
                              self.backout_count, self.put_time_ns, self.expiry_ns,
                              len(self.msg_id), len(self.correl_id), len(reply), len(fmt),
                              len(props), len(self.body))
        return b"".join((head, self.msg_id, self.correl_id, reply, fmt, props, self.body))

    @classmethod
    def decode(cls, buf: bytes, *, with_body: bool = True) -> "Message":
        if type(buf) is not bytes:
            buf = bytes(buf)        # (slices of bytes are bytes: one copy each)
        (seq, prio, pers, _r, boc, put_ns, exp_ns, lmid, lcid, lrep, lfmt, lprops,
         lbody) = MSG_FIXED.unpack_from(buf, 0)
        pos = MSG_FIXED.size
        msg_id = buf[pos:pos + lmid]; pos += lmid
        correl_id = buf[pos:pos + lcid]; pos += lcid
        reply_to = buf[pos:pos + lrep].decode() if lrep else ""; pos += lrep
        fmt = buf[pos:pos + lfmt].decode() if lfmt else ""; pos += lfmt
        props = json.loads(buf[pos:pos + lprops]) if lprops else {}
        pos += lprops
        if pos + lbody != len(buf):
            raise ValueError("message payload length does not match its fields")
        msg = cls(buf[pos:] if with_body else b"", msg_id, correl_id, prio, bool(pers), exp_ns,
                  put_ns, boc, reply_to, fmt, props, seq)
        if with_body:
            msg.raw = buf
        return msg

    @staticmethod
    def body_size(buf: bytes) -> int:
        return MSG_FIXED.unpack_from(buf, 0)[-1]

    def for_target(self, seq: int, msg_id: bytes) -> "Message":
        """A copy with another put sequence and id (one target of a publication);
        body and properties are shared, not copied: messages are not changed in
        place."""
        return Message(self.body, msg_id, self.correl_id, self.priority, self.persistent,
                       self.expiry_ns, self.put_time_ns, self.backout_count, self.reply_to,
                       self.format, self.properties, seq)


_KEY = struct.Struct(">BQ")


def message_key(priority: int, seq: int) -> bytes:
    """Store key that sorts in delivery order: priority high to low, then FIFO."""
    return _KEY.pack(9 - priority, seq)


def ref_key(payload: bytes) -> bytes:
    """The store key a MSG_GET or MSG_EXPIRE payload names (MessageRef.decode(p).key
    without the object: replay needs only the key)."""
    seq, priority, _n = MSG_REF.unpack_from(payload, 0)
    return _KEY.pack(9 - priority, seq)


def key_parts(key: bytes) -> tuple[int, int]:
    return 9 - key[0], int.from_bytes(key[1:9], "big")


@dataclass(slots=True, frozen=True)
class MessageRef:
    seq: int
    priority: int
    msg_id: bytes

    def encode(self) -> bytes:
        return MSG_REF.pack(self.seq, self.priority, len(self.msg_id)) + self.msg_id

    @property
    def key(self) -> bytes:
        return message_key(self.priority, self.seq)

    @classmethod
    def of(cls, msg: "Message") -> "MessageRef":
        return cls(msg.seq, msg.priority, msg.msg_id)

    @classmethod
    def decode(cls, buf: bytes) -> "MessageRef":
        seq, prio, n = MSG_REF.unpack_from(buf, 0)
        return cls(seq, prio, bytes(buf[MSG_REF.size:MSG_REF.size + n]))


@dataclass(slots=True, frozen=True)
class PublicationTarget:
    """One queue a publication is put on: its object and the message's seq there."""
    object_id: int
    name: str
    seq: int


def encode_publication(msg: "Message", targets: list[PublicationTarget]) -> bytes:
    """The MSG_PUBLISH payload: ``msg`` once (its own seq is not written), then
    each target's queue and seq."""
    raw = msg.encode()
    parts = [PUBLICATION.pack(len(targets), len(raw)), _NO_SEQ, raw[_NO_SEQ_LEN:]]
    pack = PUBLICATION_TARGET.pack
    for t in targets:
        name = t.name.encode()
        if len(name) > MAX_NAME:
            raise ValueError(f"queue name longer than {MAX_NAME} bytes: {t.name!r}")
        parts.append(pack(t.object_id, t.seq, len(name)))
        parts.append(name)
    return b"".join(parts)


def publication_record_length(message: "Message", names: list[str]) -> int:
    """The length of the MSG_PUBLISH record of ``message`` to queues ``names``,
    before any seq is given (a caller refuses one no extent would hold)."""
    targets = sum(PUBLICATION_TARGET.size + len(n.encode()) for n in names)
    return encoded_length(0, PUBLICATION.size + len(message.encode()) + targets)


#: the seq field a publication's message is written with (each target has its own)
_NO_SEQ_LEN = 8
_NO_SEQ = bytes(_NO_SEQ_LEN)
#: a message id the queue manager gave (24 bytes, the last four zero): each
#: target of a publication with such an id has its number there instead
_ID_LEN, _ID_STEM = 24, 20
_ID_TAIL = bytes(_ID_LEN - _ID_STEM)


def target_msg_id(publication_id: bytes, index: int) -> bytes:
    """The message id of a publication's ``index``-th target (from 0). Each copy
    of a publication has an id of its own, as MQ gives each subscriber's: the
    publication's id, when the queue manager gave it, with the target's number
    (index + 1) in its last four bytes. So the ids cost the record nothing,
    and ``publication_msg_id`` gives the publication's back. A publisher's own
    id is kept on every copy, as a put keeps it."""
    if len(publication_id) != _ID_LEN or publication_id[_ID_STEM:] != _ID_TAIL:
        return publication_id
    return publication_id[:_ID_STEM] + (index + 1).to_bytes(_ID_LEN - _ID_STEM, "big")


def publication_msg_id(target_id: bytes) -> bytes:
    """The id of the publication a target's id was derived from (``target_msg_id``);
    a publisher's own id, kept on every copy, is itself."""
    if len(target_id) != _ID_LEN or target_id[_ID_STEM:] == _ID_TAIL:
        return target_id
    return target_id[:_ID_STEM] + _ID_TAIL


@dataclass(slots=True)
class Publication:
    """A decoded MSG_PUBLISH payload: the message encoding (seq 0) and its targets."""
    message: bytes
    targets: list[PublicationTarget]

    @classmethod
    def decode(cls, buf) -> "Publication":
        count, mlen = PUBLICATION.unpack_from(buf, 0)
        pos = PUBLICATION.size
        message = bytes(buf[pos:pos + mlen])
        pos += mlen
        targets = []
        unpack = PUBLICATION_TARGET.unpack_from
        step = PUBLICATION_TARGET.size
        for _ in range(count):
            oid, seq, nlen = unpack(buf, pos)
            pos += step
            targets.append(PublicationTarget(oid, str(buf[pos:pos + nlen], "utf-8"), seq))
            pos += nlen
        if pos != len(buf) or not count or len(message) != mlen:
            raise ValueError("publication payload length does not match its fields")
        return cls(message, targets)

    def message_for(self, index: int) -> bytes:
        """The Message encoding as the ``index``-th target's queue holds it (its
        own seq and id)."""
        m = self.message
        seq = self.targets[index].seq.to_bytes(_NO_SEQ_LEN, "little")
        id_len = MSG_FIXED.unpack_from(m, 0)[7]
        msg_id = m[MSG_FIXED.size:MSG_FIXED.size + id_len]
        own = target_msg_id(msg_id, index)
        if own is msg_id:
            return seq + m[_NO_SEQ_LEN:]
        return b"".join((seq, m[_NO_SEQ_LEN:MSG_FIXED.size], own,
                         m[MSG_FIXED.size + id_len:]))

    def decode_message(self, *, with_body: bool = True) -> "Message":
        """The message, decoded once (seq 0, the publication's id):
        ``Message.for_target`` with ``target_msg_id`` gives each target's."""
        return Message.decode(self.message, with_body=with_body)


@dataclass(slots=True, frozen=True)
class Compensation:
    undone_type: RecordType
    undone_lsn: int
    undo_next_lsn: int
    ref: MessageRef
    backout_count: int

    def encode(self) -> bytes:
        return COMPENSATION.pack(int(self.undone_type), self.undone_lsn, self.undo_next_lsn,
                                 self.ref.seq, self.ref.priority, len(self.ref.msg_id),
                                 self.backout_count) + self.ref.msg_id

    @classmethod
    def decode(cls, buf: bytes) -> "Compensation":
        (utype, ulsn, unext, seq, prio, n, boc) = COMPENSATION.unpack_from(buf, 0)
        msg_id = bytes(buf[COMPENSATION.size:COMPENSATION.size + n])
        return cls(RecordType(utype), ulsn, unext, MessageRef(seq, prio, msg_id), boc)


# Media images (MEDIA_IMAGE_BEGIN / _CHUNK / _END, object name in the record header).
#
# An image of an object is the object's committed state as of the LSN of its
# MEDIA_IMAGE_BEGIN record B: every unit of work (or auto-committed operation)
# whose outcome record lies below B is reflected in it, none above B. Replaying
# the object from an image therefore starts from the image's state and applies
# the effects of units of work that committed after B.
#
#   BEGIN payload (JSON): {"image_id": int, "object_type": "QLOCAL"|"QMGR"|...,
#                          "attributes": {...the definition...},
#                          "messages": int, "next_seq": int}
#   CHUNK payload: IMAGE_CHUNK header (image_id u64, count u32, pad u32), then
#                  ``count`` times: message length u32, Message encoding
#   END payload (JSON):   {"image_id": int, "begin_lsn": int, "messages": int,
#                          "bytes": int}
IMAGE_CHUNK = struct.Struct("<QII")
IMAGE_CHUNK_ENTRY = struct.Struct("<I")


def encode_image_chunk(image_id: int, messages) -> bytes:
    """One CHUNK payload holding ``messages`` (already-encoded bytes or Message)."""
    parts = []
    for m in messages:
        raw = m if isinstance(m, (bytes, bytearray, memoryview)) else m.encode()
        parts.append(IMAGE_CHUNK_ENTRY.pack(len(raw)))
        parts.append(bytes(raw))
    return IMAGE_CHUNK.pack(image_id, len(parts) // 2, 0) + b"".join(parts)


def decode_image_chunk(buf, *, with_body: bool = True) -> tuple[int, list[Message]]:
    """(image_id, messages) of a CHUNK payload; the counterpart of encode_image_chunk."""
    image_id, raws = image_chunk_entries(buf)
    return image_id, [Message.decode(raw, with_body=with_body) for raw in raws]


def image_chunk_entries(buf) -> tuple[int, list[bytes]]:
    """(image_id, the Message encodings) of a CHUNK payload, not decoded: media
    recovery stores them as they are (``message_key_of`` gives their keys)."""
    image_id, count, _pad = IMAGE_CHUNK.unpack_from(buf, 0)
    pos = IMAGE_CHUNK.size
    out = []
    for _ in range(count):
        (n,) = IMAGE_CHUNK_ENTRY.unpack_from(buf, pos)
        pos += IMAGE_CHUNK_ENTRY.size
        if pos + n > len(buf):
            raise ValueError("image chunk entry runs past the end of its payload")
        out.append(bytes(buf[pos:pos + n]))
        pos += n
    if pos != len(buf):
        raise ValueError("image chunk payload length does not match its entries")
    return image_id, out


def message_key_of(raw: bytes) -> bytes:
    """The store key of an encoded Message (its seq and priority lead the encoding)."""
    seq, priority = MSG_FIXED.unpack_from(raw, 0)[:2]
    return message_key(priority, seq)


# UOW_SHUNT payload (log shunting). A checkpoint copies forward the records a
# long unit of work still needs, so that restart need not read back to its
# first record (the commit rule, log/replay.py, rebuilds the unit from the
# copy). A shunt too big for one record is cut into parts: consecutive
# UOW_SHUNT records of the unit, part 0 first (a crash between them leaves an
# incomplete shunt, which readers ignore). Each part:
#
#   0   2  part          index of this part, from 0
#   2   2  parts         how many parts the shunt has
#   4   4  head_len      bytes of the JSON head that follows (part 0; 0 after it)
#   8   4  count         record copies in this part
#   12  4  reserved
#   head (JSON): {"state": "active"|"prepared"|"backing_out", "owner": str,
#                 "begin_lsn": LSN of the unit's UOW_BEGIN, "started_ns": int,
#                 "records": copies in all parts}
#   then ``count`` copies, in LSN order, each SHUNT_COPY, the object name and
#   the payload of the original record, byte for byte:
#   0   1  type          MSG_PUT, MSG_PUBLISH, MSG_GET, MSG_EXPIRE or COMPENSATION
#   1   1  flags
#   2   2  name_len
#   4   4  object_id
#   8   8  lsn           the original record's LSN
#   16  8  prev_lsn      the original record's prev_lsn
#   24  4  payload_len
SHUNT_PART = struct.Struct("<HHIII")
assert SHUNT_PART.size == 16
SHUNT_COPY = struct.Struct("<BBHIQQI")
assert SHUNT_COPY.size == 28


def shunt_copy(rec: LogRecord) -> bytes:
    """One record copy for a UOW_SHUNT payload (``rec``: type, flags, object,
    LSN, prev LSN and payload of the original record)."""
    name = rec.object_name.encode()
    return SHUNT_COPY.pack(int(rec.type), int(rec.flags), len(name), rec.object_id, rec.lsn,
                           rec.prev_lsn, len(rec.payload)) + name + bytes(rec.payload)


def encode_shunt(head: dict, copies: list[bytes], limit: int) -> list[bytes]:
    """The payloads of one shunt: ``copies`` (``shunt_copy``) cut into parts of
    at most ``limit`` bytes each (a copy larger than that goes alone)."""
    head = dict(head, records=len(copies))
    head_raw = encode_json(head)
    groups: list[list[bytes]] = [[]]
    size = SHUNT_PART.size + len(head_raw)
    for c in copies:
        if groups[-1] and size + len(c) > limit:
            groups.append([])
            size = SHUNT_PART.size
        groups[-1].append(c)
        size += len(c)
    if len(groups) > 0xFFFF:
        raise ValueError(f"a shunt of {len(copies)} records needs more than 65535 parts")
    out = []
    for i, group in enumerate(groups):
        raw = head_raw if i == 0 else b""
        out.append(SHUNT_PART.pack(i, len(groups), len(raw), len(group), 0) + raw
                   + b"".join(group))
    return out


@dataclass(slots=True)
class ShuntPart:
    part: int
    parts: int
    head: dict            # part 0 only; {} after it
    copies: list[LogRecord]


def decode_shunt(buf, uow_id: int = 0) -> ShuntPart:
    """One UOW_SHUNT payload; its copies as LogRecords of unit ``uow_id``, with
    the LSNs of the records they copy."""
    part, parts, head_len, count, _r = SHUNT_PART.unpack_from(buf, 0)
    pos = SHUNT_PART.size
    head = decode_json(bytes(buf[pos:pos + head_len]))
    pos += head_len
    copies = []
    for _ in range(count):
        rtype, flags, nlen, oid, lsn, prev, plen = SHUNT_COPY.unpack_from(buf, pos)
        pos += SHUNT_COPY.size
        name = bytes(buf[pos:pos + nlen]).decode()
        pos += nlen
        payload = bytes(buf[pos:pos + plen])
        pos += plen
        rtype_enum = _TYPES.get(rtype)
        if rtype_enum is None:
            raise ValueError(f"unknown record type {rtype} copied in a shunt")
        copies.append(LogRecord(rtype_enum, uow_id=uow_id, prev_lsn=prev, object_id=oid,
                                object_name=name, payload=payload, flags=flags, lsn=lsn))
    if pos != len(buf) or part >= parts:
        raise ValueError("shunt payload does not match its header")
    return ShuntPart(part, parts, head, copies)


def describe_shunt(payload) -> dict:
    """What a UOW_SHUNT part holds, without message bodies (``log dump``, the
    pipeline's ``data`` column): its head and one line per record copied."""
    sp = decode_shunt(payload)
    out = {"part": sp.part, "parts": sp.parts, **sp.head, "copies": []}
    for c in sp.copies:
        entry = {"type": c.type.name, "lsn": c.lsn, "object": c.object_name}
        if c.type == RecordType.MSG_PUT:
            m = Message.decode(c.payload, with_body=False)
            entry.update(msg_id=m.msg_id.hex(), priority=m.priority, seq=m.seq,
                         body_size=Message.body_size(c.payload))
        elif c.type in (RecordType.MSG_GET, RecordType.MSG_EXPIRE):
            r = MessageRef.decode(c.payload)
            entry.update(msg_id=r.msg_id.hex(), priority=r.priority, seq=r.seq)
        elif c.type == RecordType.MSG_PUBLISH:
            d = describe_publication(c.payload)
            entry.update(msg_id=d["msg_id"], priority=d["priority"],
                         body_size=d["body_size"], targets=d["targets"])
        elif c.type == RecordType.COMPENSATION:
            comp = Compensation.decode(c.payload)
            entry.update(undone_lsn=comp.undone_lsn, msg_id=comp.ref.msg_id.hex(),
                         backout_count=comp.backout_count)
        out["copies"].append(entry)
    return out


def describe_publication(payload) -> dict:
    """What a MSG_PUBLISH holds, without its body: the message's descriptor
    and every target (queue, object id, seq)."""
    pub = Publication.decode(payload)
    m = pub.decode_message(with_body=False)
    return {"msg_id": m.msg_id.hex(), "correl_id": m.correl_id.hex(), "priority": m.priority,
            "expiry_ns": m.expiry_ns, "body_size": Message.body_size(pub.message),
            "properties": m.properties,
            "targets": [{"queue": t.name, "object_id": t.object_id, "seq": t.seq,
                         "msg_id": target_msg_id(m.msg_id, i).hex()}
                        for i, t in enumerate(pub.targets)]}


def encode_json(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


def decode_json(buf: bytes):
    return json.loads(buf) if buf else {}


def describe(rec: LogRecord) -> dict:
    """A plain-dict view of a record for ``log dump`` (and tests)."""
    out = {"lsn": rec.lsn, "type": rec.type.name, "uow": rec.uow_id, "prev_lsn": rec.prev_lsn,
           "object_id": rec.object_id, "object": rec.object_name, "ts_ns": rec.timestamp_ns,
           "length": rec.length}
    if rec.flags & AUTO_COMMIT:
        out["auto_commit"] = True
    t = rec.type
    if t == RecordType.MSG_PUT:
        m = Message.decode(rec.payload, with_body=False)
        out.update(msg_id=m.msg_id.hex(), correl_id=m.correl_id.hex(), priority=m.priority,
                   seq=m.seq, expiry_ns=m.expiry_ns, backout_count=m.backout_count,
                   body_size=Message.body_size(rec.payload), properties=m.properties)
    elif t in (RecordType.MSG_GET, RecordType.MSG_EXPIRE):
        r = MessageRef.decode(rec.payload)
        out.update(msg_id=r.msg_id.hex(), priority=r.priority, seq=r.seq)
    elif t == RecordType.MSG_PUBLISH:
        out.update(describe_publication(rec.payload))
    elif t in (RecordType.SHARED_PUT, RecordType.SHARED_GET):
        out.update(describe_shared_change(t, rec.payload))
    elif t == RecordType.COMPENSATION:
        c = Compensation.decode(rec.payload)
        out.update(undone=c.undone_type.name, undone_lsn=c.undone_lsn,
                   undo_next_lsn=c.undo_next_lsn, msg_id=c.ref.msg_id.hex(),
                   backout_count=c.backout_count)
    elif t == RecordType.UOW_SHUNT:
        out["data"] = describe_shunt(rec.payload)
    elif rec.payload and t in (RecordType.OBJECT_CREATE, RecordType.OBJECT_ALTER,
                               RecordType.OBJECT_DELETE, RecordType.CHECKPOINT_END,
                               RecordType.CHECKPOINT_PART,
                               RecordType.UOW_BEGIN, RecordType.QM_START, RecordType.QM_STOP):
        out["data"] = decode_json(rec.payload)
    return out
