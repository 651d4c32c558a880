"""Writes log extents directly with the codec, for pipeline tests that need
records the engine does not write yet (media images) or exact control over
extents (gaps, corruption). Not a second writer for production: tests only."""

from __future__ import annotations

import json
from pathlib import Path

from harbormq.log.records import (
    AUTO_COMMIT,
    EXTENT_HEADER_SIZE,
    Compensation,
    ExtentHeader,
    LogRecord,
    Message,
    MessageRef,
    RecordType,
    encode,
    encode_image_chunk,
    encode_json,
    encode_shunt,
    encoded_length,
    extent_file_name,
    shunt_copy,
)

T = RecordType


class LogBuilder:
    """Appends records to extents of ``pages`` 4 KiB pages in ``log_dir``."""

    def __init__(self, log_dir: Path, qm_name: str = "QM1", pages: int = 8,
                 start_ns: int = 1_700_000_000_000_000_000):
        self.dir = Path(log_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.qm = qm_name
        self.size = pages * 4096
        self.pages = pages
        self.now = start_ns
        self.extent = -1
        self.lsn = 0
        self.buf = bytearray()
        self.first = 0
        self.next_seq: dict[int, int] = {}
        self.uow_last: dict[int, int] = {}
        #: per unit of work: its BEGIN's LSN, its message records (what a shunt copies)
        self.uow_begin: dict[int, int] = {}
        self.uow_records: dict[int, list[LogRecord]] = {}
        self._new_extent()

    # -- extents ------------------------------------------------------------------------

    def _new_extent(self) -> None:
        self.extent += 1
        self.first = self.lsn
        self.buf = bytearray(ExtentHeader(self.extent, self.lsn, self.now, self.qm,
                                          self.pages).encode())

    def _flush(self) -> Path:
        path = self.dir / extent_file_name(self.extent)
        path.write_bytes(bytes(self.buf) + bytes(self.size - len(self.buf)))
        return path

    def switch(self) -> None:
        self._raw(LogRecord(T.EXTENT_END))
        self._flush()
        self._new_extent()

    def close(self) -> Path:
        """Write the active (newest) extent; returns its path."""
        return self._flush()

    def _raw(self, rec: LogRecord) -> int:
        self.now += 1_000_000            # 1 ms per record
        rec.lsn, rec.timestamp_ns, rec.synced_lsn = self.lsn, self.now, self.lsn
        data = encode(rec)
        self.buf += data
        self.lsn += len(data)
        return rec.lsn

    def append(self, rec: LogRecord) -> int:
        need = encoded_length(len(rec.object_name.encode()), len(rec.payload))
        if len(self.buf) + need + 64 > self.size:
            self.switch()
        return self._raw(rec)

    # -- operations ------------------------------------------------------------------------

    def define(self, name: str, oid: int) -> int:
        self.next_seq[oid] = 1
        return self.append(LogRecord(T.OBJECT_CREATE, object_id=oid, object_name=name,
                                     payload=encode_json({"type": "QLOCAL", "name": name,
                                                          "object_id": oid, "attrs": {}})))

    def delete(self, name: str, oid: int) -> int:
        return self.append(LogRecord(T.OBJECT_DELETE, object_id=oid, object_name=name,
                                     payload=encode_json({"name": name})))

    def clear(self, name: str, oid: int) -> int:
        return self.append(LogRecord(T.OBJECT_ALTER, object_id=oid, object_name=name,
                                     payload=encode_json({"type": "QLOCAL", "name": name,
                                                          "object_id": oid, "attrs": {},
                                                          "clear": True})))

    def message(self, oid: int, body: bytes = b"m", priority: int = 5, **kw) -> Message:
        seq = self.next_seq[oid]
        self.next_seq[oid] = seq + 1
        return Message(body=body, msg_id=f"id-{oid}-{seq}".encode(), priority=priority,
                       put_time_ns=self.now, seq=seq, **kw)

    def _uow_rec(self, rtype, uow: int, name: str = "", oid: int = 0,
                 payload: bytes = b"") -> int:
        if uow not in self.uow_last:
            self.uow_last[uow] = self.uow_begin[uow] = self.append(
                LogRecord(T.UOW_BEGIN, uow_id=uow, payload=encode_json({"owner": "t"})))
        rec = LogRecord(rtype, uow_id=uow, prev_lsn=self.uow_last[uow], object_id=oid,
                        object_name=name, payload=payload)
        lsn = self.append(rec)
        self.uow_last[uow] = lsn
        if rtype in (T.MSG_PUT, T.MSG_GET, T.COMPENSATION):
            self.uow_records.setdefault(uow, []).append(rec)
        return lsn

    def shunt(self, uow: int, state: str = "active", limit: int = 1 << 20,
              parts: int | None = None) -> int:
        """A shunt of ``uow`` as a checkpoint writes it (core/shunting.py): copies of
        its puts and gets still pending, and of the gets compensated with their
        compensations; ``parts``: write only the first so many parts (a shunt cut
        short). Returns the first part's LSN."""
        recs = self.uow_records.get(uow, [])
        comps = [Compensation.decode(r.payload) for r in recs if r.type == T.COMPENSATION]
        undone = {c.undone_lsn: c for c in comps}
        keep = [r for r in recs if r.type != T.COMPENSATION and (
            r.lsn not in undone or undone[r.lsn].undone_type == T.MSG_GET)]
        keep += [r for r in recs if r.type == T.COMPENSATION
                 and Compensation.decode(r.payload).undone_type == T.MSG_GET]
        keep.sort(key=lambda r: r.lsn)
        payloads = encode_shunt({"state": state, "owner": "t", "begin_lsn": self.uow_begin[uow],
                                 "started_ns": 1}, [shunt_copy(r) for r in keep], limit)
        first = 0
        for p in payloads[:parts]:
            lsn = self.append(LogRecord(T.UOW_SHUNT, uow_id=uow, prev_lsn=self.uow_last[uow],
                                        payload=p))
            self.uow_last[uow] = lsn
            first = first or lsn
        return first

    def put(self, name: str, oid: int, msg: Message, uow: int = 0) -> int:
        if not uow:
            return self.append(LogRecord(T.MSG_PUT, object_id=oid, object_name=name,
                                         payload=msg.encode(), flags=AUTO_COMMIT))
        return self._uow_rec(T.MSG_PUT, uow, name, oid, msg.encode())

    def get(self, name: str, oid: int, msg: Message, uow: int = 0,
            rtype=T.MSG_GET) -> int:
        ref = MessageRef(msg.seq, msg.priority, msg.msg_id).encode()
        if not uow:
            return self.append(LogRecord(rtype, object_id=oid, object_name=name, payload=ref,
                                         flags=AUTO_COMMIT))
        return self._uow_rec(rtype, uow, name, oid, ref)

    def compensate_get(self, name: str, oid: int, msg: Message, uow: int, get_lsn: int,
                       backout_count: int) -> int:
        comp = Compensation(T.MSG_GET, get_lsn, 0,
                            MessageRef(msg.seq, msg.priority, msg.msg_id), backout_count)
        return self._uow_rec(T.COMPENSATION, uow, name, oid, comp.encode())

    def compensate_put(self, name: str, oid: int, msg: Message, uow: int, put_lsn: int) -> int:
        comp = Compensation(T.MSG_PUT, put_lsn, 0,
                            MessageRef(msg.seq, msg.priority, msg.msg_id), 0)
        return self._uow_rec(T.COMPENSATION, uow, name, oid, comp.encode())

    def prepare(self, uow: int) -> int:
        return self._uow_rec(T.UOW_PREPARE, uow)

    def commit(self, uow: int) -> int:
        return self._uow_rec(T.UOW_COMMIT, uow)

    def backout(self, uow: int) -> int:
        return self._uow_rec(T.UOW_BACKOUT, uow)

    def image(self, name: str, oid: int, image_id: int, messages: list[Message],
              chunk: int = 2) -> tuple[int, int]:
        """A complete media image of ``messages``: (BEGIN LSN, END LSN)."""
        b = self.append(LogRecord(T.MEDIA_IMAGE_BEGIN, object_id=oid, object_name=name,
                                  payload=encode_json({"image_id": image_id,
                                                       "object_type": "QLOCAL",
                                                       "attributes": {}, "messages":
                                                       len(messages), "next_seq":
                                                       self.next_seq.get(oid, 1)})))
        for i in range(0, len(messages), chunk):
            self.append(LogRecord(T.MEDIA_IMAGE_CHUNK, object_id=oid, object_name=name,
                                  payload=encode_image_chunk(image_id, messages[i:i + chunk])))
        e = self.append(LogRecord(T.MEDIA_IMAGE_END, object_id=oid, object_name=name,
                                  payload=json.dumps({"image_id": image_id, "begin_lsn": b,
                                                      "messages": len(messages),
                                                      "bytes": 0}).encode()))
        return b, e

    def checkpoint(self, restart_lsn: int) -> int:
        b = self.append(LogRecord(T.CHECKPOINT_BEGIN, payload=encode_json({"reason": "t"})))
        return self.append(LogRecord(T.CHECKPOINT_END, payload=encode_json(
            {"begin_lsn": b, "restart_lsn": restart_lsn, "uows": [], "stores": {}})))


def offset_of(lsn: int, first_lsn: int) -> int:
    return EXTENT_HEADER_SIZE + lsn - first_lsn
