"""Log records as rows: the schema of the ``harbormq-log`` data source and the
decoding of one extent into Arrow record batches. Pure functions, no Spark:
they run inside the data source's ``read()`` on executors and in unit tests.

Every record is decoded by the engine's codec (``log.records``) and read by
the engine's extent reader (``log.reader.ExtentReader``), so torn tails and
corruption follow exactly the engine's rules: a corrupt record anywhere but at
the tail of the newest extent raises LogCorrupt naming extent, offset and LSN.

One row per record. Columns a record type does not use are null:
* all:          lsn, extent, offset, length, ts_ns, timestamp, type, auto_commit,
                uow_id, prev_lsn, object_id, object
* MSG_PUT:      msg_id, correl_id, priority, seq, persistent, expiry_ns, put_time_ns,
                backout_count, reply_to, format, size, properties, body (option)
* MSG_PUBLISH:  one row per target queue, the publication's LSN tying them
                together: object_id and object name the target, seq and msg_id
                are the message's there, the other columns as MSG_PUT's; the
                record's length is on its first target's row (0 on the others,
                so that a sum of lengths is the log's bytes)
* MSG_GET, MSG_EXPIRE: msg_id, priority, seq
* COMPENSATION: undone_type, undone_lsn, undo_next_lsn, msg_id, priority, seq,
                backout_count (the message's count after the undo)
  (``properties`` is a string map for queries; ``properties_json`` the exact JSON)
* CHECKPOINT_END: restart_lsn, data (the checkpoint table as JSON)
* UOW_SHUNT:    data (JSON: the part, the unit's state, owner and BEGIN LSN, and
                one line per record copied: type, LSN, object, message id, seq,
                priority; no bodies). The copies are of records already in the
                log: they are no rows of their own and no query counts them as
                puts or gets (the commit rule uses them at restart)
* MEDIA_IMAGE_BEGIN/END: image_id, data (JSON); MEDIA_IMAGE_CHUNK: image_id,
                image_messages (one struct per message of the chunk)
* OBJECT_*, UOW_BEGIN, QM_START/STOP, CHECKPOINT_BEGIN: data (the JSON payload)
"""

from __future__ import annotations

import json
from operator import attrgetter
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import LogCorrupt
from ..log.reader import ExtentReader
from ..log.records import (
    AUTO_COMMIT,
    COMPENSATION,
    EXTENT_HEADER_SIZE,
    MSG_FIXED,
    MSG_REF,
    LogRecord,
    Message,
    Publication,
    RecordType,
    decode_image_chunk,
    describe_shunt,
)
from .extents import ExtentPlan, ScanBounds

_PROPS = pa.map_(pa.string(), pa.string())

IMAGE_MESSAGE = pa.struct([
    ("msg_id", pa.binary()), ("correl_id", pa.binary()), ("priority", pa.int32()),
    ("seq", pa.int64()), ("persistent", pa.bool_()), ("expiry_ns", pa.int64()),
    ("put_time_ns", pa.int64()), ("backout_count", pa.int32()), ("reply_to", pa.string()),
    ("format", pa.string()), ("size", pa.int32()), ("properties", _PROPS),
    ("properties_json", pa.string()), ("body", pa.binary()),
])

SCHEMA = pa.schema([
    ("lsn", pa.int64()), ("extent", pa.int32()), ("offset", pa.int64()),
    ("length", pa.int32()), ("ts_ns", pa.int64()), ("timestamp", pa.timestamp("us", "UTC")),
    ("type", pa.string()), ("auto_commit", pa.bool_()), ("uow_id", pa.int64()),
    ("prev_lsn", pa.int64()), ("object_id", pa.int32()), ("object", pa.string()),
    # messages
    ("msg_id", pa.binary()), ("correl_id", pa.binary()), ("priority", pa.int32()),
    ("seq", pa.int64()), ("persistent", pa.bool_()), ("expiry_ns", pa.int64()),
    ("put_time_ns", pa.int64()), ("backout_count", pa.int32()), ("reply_to", pa.string()),
    ("format", pa.string()), ("size", pa.int32()), ("properties", _PROPS),
    ("properties_json", pa.string()), ("body", pa.binary()),
    # compensation
    ("undone_type", pa.string()), ("undone_lsn", pa.int64()), ("undo_next_lsn", pa.int64()),
    # checkpoints, images, JSON payloads
    ("restart_lsn", pa.int64()), ("image_id", pa.int64()),
    ("image_messages", pa.list_(IMAGE_MESSAGE)), ("data", pa.string()),
])

#: the same schema as Spark DDL (Arrow timestamps with a zone are Spark TIMESTAMP)
SPARK_DDL = (
    "lsn BIGINT, extent INT, offset BIGINT, length INT, ts_ns BIGINT, timestamp TIMESTAMP, "
    "type STRING, auto_commit BOOLEAN, uow_id BIGINT, prev_lsn BIGINT, object_id INT, "
    "object STRING, msg_id BINARY, correl_id BINARY, priority INT, seq BIGINT, "
    "persistent BOOLEAN, expiry_ns BIGINT, put_time_ns BIGINT, backout_count INT, "
    "reply_to STRING, format STRING, size INT, properties MAP<STRING, STRING>, "
    "properties_json STRING, body BINARY, "
    "undone_type STRING, undone_lsn BIGINT, undo_next_lsn BIGINT, restart_lsn BIGINT, "
    "image_id BIGINT, image_messages ARRAY<STRUCT<msg_id: BINARY, correl_id: BINARY, "
    "priority: INT, seq: BIGINT, persistent: BOOLEAN, expiry_ns: BIGINT, put_time_ns: BIGINT, "
    "backout_count: INT, reply_to: STRING, format: STRING, size: INT, "
    "properties: MAP<STRING, STRING>, properties_json: STRING, body: BINARY>>, data STRING")

#: columns of records about one message (put, get, expire, compensation)
_MESSAGE = ("msg_id", "correl_id", "priority", "seq", "persistent", "expiry_ns",
            "put_time_ns", "backout_count", "reply_to", "format", "size", "properties",
            "properties_json", "body", "undone_type", "undone_lsn", "undo_next_lsn")
#: columns only rare records fill (checkpoints, images, JSON payloads)
_RARE = ("restart_lsn", "image_id", "image_messages", "data")
_KNOWN = {int(t): t.name for t in RecordType}
#: record type code -> name (the codec has refused unknown codes already)
_TYPE_NAMES = pa.array([_KNOWN.get(code, "") for code in range(256)], pa.string())

_JSON_TYPES = frozenset({RecordType.OBJECT_CREATE, RecordType.OBJECT_ALTER,
                         RecordType.OBJECT_DELETE, RecordType.UOW_BEGIN,
                         RecordType.CHECKPOINT_BEGIN, RecordType.CHECKPOINT_END,
                         RecordType.CHECKPOINT_PART, RecordType.MEDIA_IMAGE_BEGIN,
                         RecordType.MEDIA_IMAGE_END,
                         RecordType.QM_START, RecordType.QM_STOP})

#: rows per Arrow batch handed to Spark
BATCH_ROWS = 65_536


def property_map(props: dict) -> list[tuple[str, str]] | None:
    """User properties as a string map for queries: strings as they are, other
    JSON values as JSON (``properties_json`` keeps the exact types)."""
    if not props:
        return None
    return [(k, v if isinstance(v, str) else json.dumps(v)) for k, v in props.items()]


def message_struct(m: Message, size: int, with_body: bool) -> dict:
    return {"msg_id": m.msg_id, "correl_id": m.correl_id, "priority": m.priority,
            "seq": m.seq, "persistent": m.persistent, "expiry_ns": m.expiry_ns,
            "put_time_ns": m.put_time_ns, "backout_count": m.backout_count,
            "reply_to": m.reply_to, "format": m.format, "size": size,
            "properties": property_map(m.properties),
            "properties_json": json.dumps(m.properties, separators=(",", ":"))
            if m.properties else None,
            "body": m.body if with_body else None}


class BatchBuilder:
    """Turns a list of decoded records into one Arrow batch, a column at a time.

    The data source's hot loop: the reader hands records over a run at a time
    (``ExtentReader.batches``), and each column is one list comprehension over
    the run, not one tuple per record. Only the columns asked for are built
    (``columns``): a job that needs priority and sequence numbers gets them from
    the payload's fixed fields with one ``unpack_from`` per record, without
    decoding ids, strings, properties or bodies."""

    def __init__(self, extent: int, first_lsn: int, include_body: bool,
                 columns: list[str] | None = None):
        self.extent = extent
        self.offset_base = first_lsn - EXTENT_HEADER_SIZE   # offset = lsn - base
        self.include_body = include_body
        self.schema = SCHEMA if columns is None else pa.schema([SCHEMA.field(c)
                                                                for c in columns])
        self.want = frozenset(self.schema.names)
        #: which message columns need the whole descriptor decoded (Message.decode)
        self.full_message = bool(self.want & _DESCRIPTOR)

    def build(self, recs: list[LogRecord]) -> pa.RecordBatch:
        n = len(recs)
        want = self.want
        out: dict[str, pa.Array] = {}
        types = [r.type for r in recs]
        for name, getter in _COMMON_GETTERS.items():
            if name in want:
                out[name] = pa.array([getter(r) for r in recs], _TYPES[name])
        if want & {"offset", "timestamp"} and "lsn" not in out:
            out["lsn"] = pa.array([r.lsn for r in recs], pa.int64())
        if "ts_ns" not in out and "timestamp" in want:
            out["ts_ns"] = pa.array([r.timestamp_ns for r in recs], pa.int64())
        if "offset" in want:
            out["offset"] = pc.subtract(out["lsn"], pa.scalar(self.offset_base, pa.int64()))
        if "extent" in want:
            out["extent"] = pa.repeat(pa.scalar(self.extent, pa.int32()), n)
        if "timestamp" in want:
            out["timestamp"] = pc.divide(out["ts_ns"], pa.scalar(1000, pa.int64())) \
                .cast(_TYPES["timestamp"])
        if "type" in want:
            out["type"] = pc.take(_TYPE_NAMES, pa.array(types, pa.uint8()))
        if "auto_commit" in want:
            out["auto_commit"] = pc.not_equal(
                pc.bit_wise_and(pa.array([r.flags for r in recs], pa.int32()),
                                pa.scalar(AUTO_COMMIT, pa.int32())), pa.scalar(0, pa.int32()))
        wanted_msg = [c for c in _MESSAGE if c in want]
        if wanted_msg:
            out.update(self._messages(recs, types, wanted_msg, n))
        wanted_rare = [c for c in _RARE if c in want]
        if wanted_rare:
            out.update(self._rare(recs, types, wanted_rare, n))
        return pa.RecordBatch.from_arrays([out[f.name] for f in self.schema],
                                          schema=self.schema)

    def _messages(self, recs, types, names: list[str], n: int) -> dict:
        """The message columns ``names``: rows of puts, gets, expiries and
        compensations, grouped by type so that each group is decoded by one
        comprehension; null on every other row."""
        rows: list[int] = []
        parts: list[tuple[int, dict]] = []
        put_rows = [i for i, t in enumerate(types) if t is _PUT or t is _PUBLISH]
        if put_rows:
            rows += put_rows
            parts.append((len(put_rows), self._puts([recs[i].payload for i in put_rows], names)))
        ref_rows = [i for i, t in enumerate(types) if t is _GET or t is _EXPIRE]
        if ref_rows:
            rows += ref_rows
            parts.append((len(ref_rows), _refs([recs[i].payload for i in ref_rows], names)))
        comp_rows = [i for i, t in enumerate(types) if t is _COMP]
        if comp_rows:
            rows += comp_rows
            parts.append((len(comp_rows),
                          _compensations([recs[i].payload for i in comp_rows], names)))
        return _scatter(rows, parts, names, n)

    def _puts(self, payloads: list[bytes], names: list[str]) -> dict:
        if self.full_message:
            body = self.include_body
            cols = dict(zip(_MESSAGE, zip(*[_put_row(p, body) for p in payloads],
                                          strict=True), strict=True))
            return {c: cols[c] for c in names}
        heads = [_MSG_FIXED_UNPACK(p) for p in payloads]
        _check_put_lengths(heads, payloads)
        seq, prio, pers, _r, boc, put_ns, exp_ns, lmid, *_lens, lbody = zip(*heads, strict=True)
        cols = {"seq": seq, "priority": prio, "backout_count": boc, "put_time_ns": put_ns,
                "expiry_ns": exp_ns, "size": lbody}
        if "persistent" in names:
            cols["persistent"] = [bool(x) for x in pers]
        if "msg_id" in names:
            start = MSG_FIXED.size
            cols["msg_id"] = [p[start:start + k] for p, k in zip(payloads, lmid, strict=True)]
        return {c: cols.get(c) for c in names}

    def _rare(self, recs, types, names: list[str], n: int) -> dict:
        found: dict[str, tuple[list[int], list]] = {name: ([], []) for name in _RARE}

        def put(name: str, i: int, value) -> None:
            found[name][0].append(i)
            found[name][1].append(value)

        for i, t in enumerate(types):
            if t not in _RARE_TYPES:
                continue
            rec = recs[i]
            if t is _CHUNK:
                image_id, messages = decode_image_chunk(rec.payload)   # bodies give sizes
                put("image_id", i, image_id)
                if "image_messages" in names:
                    put("image_messages", i, [message_struct(m, len(m.body), self.include_body)
                                              for m in messages])
            elif t is _SHUNT:
                if "data" in names:
                    put("data", i, json.dumps(describe_shunt(rec.payload),
                                              separators=(",", ":")))
            elif rec.payload:
                text = str(rec.payload, "utf-8")
                put("data", i, text)
                if t is _CKPT_END:
                    put("restart_lsn", i, json.loads(text).get("restart_lsn"))
                elif t is _IMAGE_BEGIN or t is _IMAGE_END:
                    put("image_id", i, json.loads(text).get("image_id"))
        out = {}
        for name in names:
            idx, vals = found[name]
            out.update(_scatter(idx, [(len(idx), {name: vals})], [name], n))
        return out


_PUT, _GET, _EXPIRE, _COMP = (RecordType.MSG_PUT, RecordType.MSG_GET, RecordType.MSG_EXPIRE,
                              RecordType.COMPENSATION)
_PUBLISH = RecordType.MSG_PUBLISH
_CHUNK, _SHUNT, _CKPT_END = (RecordType.MEDIA_IMAGE_CHUNK, RecordType.UOW_SHUNT,
                             RecordType.CHECKPOINT_END)
_IMAGE_BEGIN, _IMAGE_END = RecordType.MEDIA_IMAGE_BEGIN, RecordType.MEDIA_IMAGE_END
_RARE_TYPES = _JSON_TYPES | {_CHUNK, _SHUNT}
_TYPES = {f.name: f.type for f in SCHEMA}
_COMMON_GETTERS = {"lsn": attrgetter("lsn"), "length": attrgetter("length"),
                   "ts_ns": attrgetter("timestamp_ns"), "uow_id": attrgetter("uow_id"),
                   "prev_lsn": attrgetter("prev_lsn"), "object_id": attrgetter("object_id"),
                   "object": attrgetter("object_name")}
#: message columns only the whole descriptor gives (else the fixed fields do)
_DESCRIPTOR = frozenset({"correl_id", "reply_to", "format", "properties", "properties_json",
                         "body"})
_MSG_FIXED_UNPACK = MSG_FIXED.unpack_from
_NO_UNDO = (None, None, None)


def publication_rows(run: list[LogRecord]) -> list[LogRecord]:
    """``run`` with each MSG_PUBLISH record as one record per target (the rows
    of the data source): the target's object, the message as that queue holds
    it (its own seq and id), the publication's LSN; the record's length on the first
    only. Before any filter on the object: a target is found by its queue."""
    if not any(r.type is _PUBLISH for r in run):
        return run
    out = []
    for r in run:
        if r.type is not _PUBLISH:
            out.append(r)
            continue
        pub = Publication.decode(r.payload)
        for i, t in enumerate(pub.targets):
            out.append(LogRecord(_PUBLISH, r.uow_id, r.prev_lsn, t.object_id, t.name,
                                 pub.message_for(i), r.flags, r.lsn, r.timestamp_ns,
                                 r.length if i == 0 else 0, r.synced_lsn))
    return out


def _put_row(payload: bytes, with_body: bool) -> tuple:
    m = Message.decode(payload, with_body=with_body)
    return (m.msg_id, m.correl_id, m.priority, m.seq, m.persistent, m.expiry_ns,
            m.put_time_ns, m.backout_count, m.reply_to, m.format, Message.body_size(payload),
            property_map(m.properties),
            json.dumps(m.properties, separators=(",", ":")) if m.properties else None,
            m.body if with_body else None) + _NO_UNDO


def _check_put_lengths(heads: list[tuple], payloads: list[bytes]) -> None:
    """What Message.decode checks: the fields' lengths add up to the payload's."""
    fixed = MSG_FIXED.size
    for h, p in zip(heads, payloads, strict=True):
        if fixed + h[7] + h[8] + h[9] + h[10] + h[11] + h[12] != len(p):
            raise ValueError("message payload length does not match its fields")


def _refs(payloads: list[bytes], names: list[str]) -> dict:
    """MSG_GET / MSG_EXPIRE: the message reference (msg_id, priority, seq)."""
    heads = [MSG_REF.unpack_from(p) for p in payloads]
    cols: dict = {}
    if "seq" in names or "priority" in names:
        cols["seq"], cols["priority"], _n = zip(*heads, strict=True)
    if "msg_id" in names:
        start = MSG_REF.size
        cols["msg_id"] = [p[start:start + h[2]] for p, h in zip(payloads, heads, strict=True)]
    return {c: cols.get(c) for c in names}


def _compensations(payloads: list[bytes], names: list[str]) -> dict:
    heads = [COMPENSATION.unpack_from(p) for p in payloads]
    utype, ulsn, unext, seq, prio, _n, boc = zip(*heads, strict=True)
    cols = {"undone_type": [_KNOWN[t] for t in utype], "undone_lsn": ulsn,
            "undo_next_lsn": unext, "seq": seq, "priority": prio, "backout_count": boc}
    if "msg_id" in names:
        start = COMPENSATION.size
        cols["msg_id"] = [p[start:start + h[5]] for p, h in zip(payloads, heads, strict=True)]
    return {c: cols.get(c) for c in names}


def _scatter(rows: list[int], parts: list[tuple[int, dict]], names: list[str], n: int
             ) -> dict:
    """Columns ``names`` of length n: the values of ``parts`` (per group of rows,
    its size and its columns, None for a column the group leaves null) at
    ``rows`` (the groups' rows, concatenated in the order of ``parts``), null
    elsewhere."""
    if not rows:
        return {name: pa.nulls(n, _TYPES[name]) for name in names}
    out = {}
    where = None
    if len(rows) != n or rows != list(range(n)):
        where = [None] * n
        for j, i in enumerate(rows):
            where[i] = j
        where = pa.array(where, pa.int32())
    for name in names:
        chunks = [pa.array(part[name], _TYPES[name]) if part[name] is not None else
                  pa.nulls(size, _TYPES[name]) for size, part in parts]
        values = chunks[0] if len(chunks) == 1 else pa.concat_arrays(chunks)
        out[name] = values if where is None else pc.take(values, where)
    return out


def read_extent(plan: ExtentPlan, bounds: ScanBounds | None = None, *,
                include_body: bool = False, resume_lsn: int | None = None,
                batch_rows: int = BATCH_ROWS, columns: list[str] | None = None
                ) -> Iterator[pa.RecordBatch]:
    """Decode the records of one planned extent that ``bounds`` keeps, as batches
    (of ``columns`` only, in that order, when given; else of SCHEMA).

    ``resume_lsn``: a record boundary (where an earlier read of this extent
    ended) to start decoding at; other LSN bounds are filters, because an
    arbitrary LSN is not known to be a record boundary.

    Opens the file here (an executor), never at planning. The extent must still
    be the one planned: a circular extent reused since then starts at another LSN."""
    bounds = bounds or ScanBounds()
    reader = ExtentReader(Path(plan.path), newest=plan.newest)
    if reader.header.first_lsn != plan.first_lsn:
        raise LogCorrupt(f"log extent {plan.path} now starts at LSN "
                         f"{reader.header.first_lsn}, not {plan.first_lsn} as when the job "
                         "was planned: the circular log reused it meanwhile",
                         path=plan.path, lsn=plan.first_lsn,
                         hint="read an archive copy, or rerun the job")
    start = resume_lsn if resume_lsn is not None and resume_lsn > plan.first_lsn else None
    if start is not None and plan.next_lsn is not None and start >= plan.next_lsn:
        return
    builder = BatchBuilder(plan.extent, plan.first_lsn, include_body, columns)
    keep_all = bounds.unbounded
    keeps = bounds.keeps
    stops = [s for s in (bounds.lsn_stop, plan.stop_lsn) if s is not None]
    pending: list[LogRecord] = []
    for run in reader.batches(start, to_lsn=min(stops) if stops else None):
        run = publication_rows(run)
        if not keep_all:
            run = [r for r in run if keeps(r.lsn, r.timestamp_ns, r.object_name)]
        pending += run
        while len(pending) >= batch_rows:     # a run may hold several batches' rows
            yield builder.build(pending[:batch_rows])
            del pending[:batch_rows]
    while pending:
        yield builder.build(pending[:batch_rows])
        del pending[:batch_rows]
