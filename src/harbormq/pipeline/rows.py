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
* MEDIA_IMAGE_BEGIN/END: image_id, data (JSON); MEDIA_IMAGE_CHUNK: image_id,
                image_messages (one struct per message of the chunk)
* OBJECT_*, UOW_BEGIN, QM_START/STOP, CHECKPOINT_BEGIN: data (the JSON payload)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pyarrow as pa

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

_COMMON = ("lsn", "extent", "offset", "length", "ts_ns", "type", "auto_commit", "uow_id",
           "prev_lsn", "object_id", "object")
#: columns only some record types fill: kept sparse while a batch is built
_SPARSE = [f.name for f in SCHEMA if f.name not in _COMMON and f.name != "timestamp"]

_JSON_TYPES = frozenset({RecordType.OBJECT_CREATE, RecordType.OBJECT_ALTER,
                         RecordType.OBJECT_DELETE, RecordType.UOW_BEGIN,
                         RecordType.CHECKPOINT_BEGIN, RecordType.CHECKPOINT_END,
                         RecordType.MEDIA_IMAGE_BEGIN, RecordType.MEDIA_IMAGE_END,
                         RecordType.QM_START, RecordType.QM_STOP, RecordType.CHANNEL_SYNC})
_NAMES = {t: t.name for t in RecordType}

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
    """Collects decoded records column by column and cuts Arrow batches.

    Columns that most records leave null are kept as (row index, value) pairs
    and spread out once per batch: the cost follows the values, not the rows."""

    def __init__(self, extent: int, first_lsn: int, include_body: bool):
        self.extent = extent
        self.offset_base = first_lsn - 4096     # offset = lsn - first_lsn + header size
        self.include_body = include_body
        self._reset()

    def _reset(self) -> None:
        self.cols = {name: [] for name in _COMMON}
        self.sparse: dict[str, tuple[list[int], list]] = {name: ([], []) for name in _SPARSE}
        self.n = 0

    def _set(self, name: str, value) -> None:
        idx, vals = self.sparse[name]
        idx.append(self.n)
        vals.append(value)

    def add(self, rec: LogRecord) -> None:
        c = self.cols
        t = rec.type
        c["lsn"].append(rec.lsn)
        c["offset"].append(rec.lsn - self.offset_base)
        c["length"].append(rec.length)
        c["ts_ns"].append(rec.timestamp_ns)
        c["type"].append(_NAMES[t])
        c["auto_commit"].append(bool(rec.flags & AUTO_COMMIT))
        c["uow_id"].append(rec.uow_id)
        c["prev_lsn"].append(rec.prev_lsn)
        c["object_id"].append(rec.object_id)
        c["object"].append(rec.object_name)
        s = self._set
        if t == RecordType.MSG_PUT:
            m = Message.decode(rec.payload, with_body=self.include_body)
            for name, value in message_struct(m, Message.body_size(rec.payload),
                                              self.include_body).items():
                if value is not None:
                    s(name, value)
        elif t == RecordType.MSG_GET or t == RecordType.MSG_EXPIRE:
            r = MessageRef.decode(rec.payload)
            s("msg_id", r.msg_id); s("priority", r.priority); s("seq", r.seq)
        elif t == RecordType.COMPENSATION:
            comp = Compensation.decode(rec.payload)
            s("undone_type", comp.undone_type.name); s("undone_lsn", comp.undone_lsn)
            s("undo_next_lsn", comp.undo_next_lsn); s("msg_id", comp.ref.msg_id)
            s("priority", comp.ref.priority); s("seq", comp.ref.seq)
            s("backout_count", comp.backout_count)
        elif t == RecordType.MEDIA_IMAGE_CHUNK:
            image_id, messages = decode_image_chunk(rec.payload)   # bodies give sizes
            s("image_id", image_id)
            s("image_messages", [message_struct(m, len(m.body), self.include_body)
                                 for m in messages])
        elif t in _JSON_TYPES and rec.payload:
            text = str(rec.payload, "utf-8")
            s("data", text)
            if t == RecordType.CHECKPOINT_END:
                s("restart_lsn", json.loads(text).get("restart_lsn"))
            elif t == RecordType.MEDIA_IMAGE_BEGIN or t == RecordType.MEDIA_IMAGE_END:
                s("image_id", json.loads(text).get("image_id"))
        self.n += 1

    def take(self) -> pa.RecordBatch:
        n = self.n
        arrays = []
        for f in SCHEMA:
            name = f.name
            if name == "timestamp":
                arrays.append(pa.array([v // 1000 for v in self.cols["ts_ns"]], pa.int64())
                              .cast(f.type))
            elif name == "extent":
                arrays.append(pa.array([self.extent] * n, f.type))
            elif name in self.cols:
                arrays.append(pa.array(self.cols[name], f.type))
            else:
                idx, vals = self.sparse[name]
                if not idx:
                    arrays.append(pa.nulls(n, f.type))
                elif len(idx) == n:
                    arrays.append(pa.array(vals, f.type))
                else:
                    full = [None] * n
                    for i, v in zip(idx, vals, strict=True):
                        full[i] = v
                    arrays.append(pa.array(full, f.type))
        batch = pa.RecordBatch.from_arrays(arrays, schema=SCHEMA)
        self._reset()
        return batch


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
    records = reader.records(start, to_lsn=bounds.lsn_stop)
    for rec in records:
        if keep_all or bounds.keeps(rec.lsn, rec.timestamp_ns, rec.object_name):
            builder.add(rec)
            if builder.n >= batch_rows:
                yield builder.take()
    if builder.n:
        yield builder.take()

