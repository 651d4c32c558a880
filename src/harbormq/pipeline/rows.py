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
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import LogCorrupt
from ..log.reader import ExtentReader
from ..log.records import (
    AUTO_COMMIT,
    Compensation,
    LogRecord,
    Message,
    MessageRef,
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

#: columns every record fills, in the order BatchBuilder keeps them per row
_COMMON = ("lsn", "length", "ts_ns", "type", "flags", "uow_id", "prev_lsn", "object_id",
           "object")
#: columns of records about one message (put, get, expire, compensation), kept
#: together per such record
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
    """Collects decoded records and cuts Arrow batches.

    Per record it appends one tuple (common columns) and, for message records,
    one more (message columns); Arrow does the rest per batch: tuples are
    transposed with zip, the type name comes from a lookup of the type code,
    and message columns are spread over the rows with one ``take``. This keeps
    the Python work per record small: it is the data source's hot loop."""

    def __init__(self, extent: int, first_lsn: int, include_body: bool):
        self.extent = extent
        self.offset_base = first_lsn - 4096     # offset = lsn - first_lsn + header size
        self.include_body = include_body
        self._reset()

    def _reset(self) -> None:
        self.common: list[tuple] = []
        self.msg_rows: list[int] = []
        self.msgs: list[tuple] = []
        self.rare: dict[str, tuple[list[int], list]] = {name: ([], []) for name in _RARE}
        self.n = 0

    def _set(self, name: str, value) -> None:
        idx, vals = self.rare[name]
        idx.append(self.n)
        vals.append(value)

    @property
    def pending(self) -> int:
        return len(self.common)

    def add(self, rec: LogRecord) -> None:
        t = rec.type
        self.common.append((rec.lsn, rec.length, rec.timestamp_ns, t, rec.flags, rec.uow_id,
                            rec.prev_lsn, rec.object_id, rec.object_name))
        if t == RecordType.MSG_PUT:
            m = Message.decode(rec.payload, with_body=self.include_body)
            self.msg_rows.append(self.n)
            self.msgs.append((m.msg_id, m.correl_id, m.priority, m.seq, m.persistent,
                              m.expiry_ns, m.put_time_ns, m.backout_count, m.reply_to,
                              m.format, Message.body_size(rec.payload),
                              property_map(m.properties),
                              json.dumps(m.properties, separators=(",", ":"))
                              if m.properties else None,
                              m.body if self.include_body else None, None, None, None))
        elif t == RecordType.MSG_GET or t == RecordType.MSG_EXPIRE:
            r = MessageRef.decode(rec.payload)
            self.msg_rows.append(self.n)
            self.msgs.append((r.msg_id, None, r.priority, r.seq) + (None,) * 13)
        elif t == RecordType.COMPENSATION:
            c = Compensation.decode(rec.payload)
            self.msg_rows.append(self.n)
            self.msgs.append((c.ref.msg_id, None, c.ref.priority, c.ref.seq, None, None, None,
                              c.backout_count, None, None, None, None, None, None,
                              c.undone_type.name, c.undone_lsn, c.undo_next_lsn))
        elif t == RecordType.MEDIA_IMAGE_CHUNK:
            image_id, messages = decode_image_chunk(rec.payload)   # bodies give sizes
            self._set("image_id", image_id)
            self._set("image_messages", [message_struct(m, len(m.body), self.include_body)
                                         for m in messages])
        elif t == RecordType.UOW_SHUNT:
            self._set("data", json.dumps(describe_shunt(rec.payload), separators=(",", ":")))
        elif t in _JSON_TYPES and rec.payload:
            text = str(rec.payload, "utf-8")
            self._set("data", text)
            if t == RecordType.CHECKPOINT_END:
                self._set("restart_lsn", json.loads(text).get("restart_lsn"))
            elif t == RecordType.MEDIA_IMAGE_BEGIN or t == RecordType.MEDIA_IMAGE_END:
                self._set("image_id", json.loads(text).get("image_id"))
        self.n += 1

    def take(self) -> pa.RecordBatch:
        n = self.n
        cols = dict(zip(_COMMON, (list(c) for c in zip(*self.common, strict=True)),
                        strict=True))
        types = {f.name: f.type for f in SCHEMA}
        out = {}
        for name in ("lsn", "length", "ts_ns", "uow_id", "prev_lsn", "object_id", "object"):
            out[name] = pa.array(cols[name], types[name])
        out["offset"] = pc.subtract(out["lsn"], pa.scalar(self.offset_base, pa.int64()))
        out["extent"] = pa.array([self.extent] * n, pa.int32())
        out["timestamp"] = pc.divide(out["ts_ns"], pa.scalar(1000, pa.int64())) \
            .cast(types["timestamp"])
        out["type"] = pc.take(_TYPE_NAMES, pa.array(cols["type"], pa.uint8()))
        out["auto_commit"] = pc.not_equal(
            pc.bit_wise_and(pa.array(cols["flags"], pa.int32()), pa.scalar(AUTO_COMMIT,
                                                                            pa.int32())),
            pa.scalar(0, pa.int32()))
        out.update(_spread(self.msg_rows, self.msgs, _MESSAGE, n, types))
        for name in _RARE:
            idx, vals = self.rare[name]
            out.update(_spread(idx, [(v,) for v in vals], (name,), n, types))
        batch = pa.RecordBatch.from_arrays([out[f.name] for f in SCHEMA], schema=SCHEMA)
        self._reset()
        return batch


def _spread(rows: list[int], values: list[tuple], names: tuple, n: int, types: dict) -> dict:
    """Columns ``names`` of length n: ``values[j]`` at row ``rows[j]``, null elsewhere."""
    if not rows:
        return {name: pa.nulls(n, types[name]) for name in names}
    columns = zip(*values, strict=True)
    if len(rows) == n:
        return {name: pa.array(list(c), types[name]) for name, c in
                zip(names, columns, strict=True)}
    where = [None] * n
    for j, i in enumerate(rows):
        where[i] = j
    where = pa.array(where, pa.int32())
    return {name: pc.take(pa.array(list(c), types[name]), where)
            for name, c in zip(names, columns, strict=True)}


def read_extent(plan: ExtentPlan, bounds: ScanBounds | None = None, *,
                include_body: bool = False, resume_lsn: int | None = None,
                batch_rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """Decode the records of one planned extent that ``bounds`` keeps, as batches.

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
    builder = BatchBuilder(plan.extent, plan.first_lsn, include_body)
    keep_all = bounds.unbounded
    stops = [s for s in (bounds.lsn_stop, plan.stop_lsn) if s is not None]
    records = reader.records(start, to_lsn=min(stops) if stops else None)
    for rec in records:
        if keep_all or bounds.keeps(rec.lsn, rec.timestamp_ns, rec.object_name):
            builder.add(rec)
            if builder.pending >= batch_rows:
                yield builder.take()
    if builder.pending:
        yield builder.take()

