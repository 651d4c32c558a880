"""The checkpoint table in the log: one CHECKPOINT_END record, or, when the
table is too big for one record, CHECKPOINT_PART records written before it.

A checkpoint lists every unit of work in flight, every store still behind the
log and (on a linear log) every object's media point: tens of bytes an entry,
so a queue manager with thousands of queues on small extents would write a
record bigger than an extent (and then never start again). The big sections
are cut into parts of at most ``part_limit`` bytes; CHECKPOINT_END keeps the
rest of the table and the LSNs of its parts (``"parts"``), so a reader finds
them without scanning. A crash before CHECKPOINT_END leaves parts that no
checkpoint names: the control file still points at the previous checkpoint,
as it does after a crash between CHECKPOINT_BEGIN and CHECKPOINT_END.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from typing import Callable

from ..errors import HarbormqError, LogCorrupt
from .records import RecordType, decode_json, encode_json

#: the sections that grow with the number of objects or units of work
LIST_SECTIONS = ("uows", "store_lsns")
DICT_SECTIONS = ("stores", "media")
#: the largest part: small enough for the smallest extent several times over
MAX_PART = 64 * 1024


#: (object id, recovery LSN) of a store, packed
STORE_LSN = struct.Struct("<IQ")
STORES_PER_CHUNK = 1000


def pack_store_lsns(lsns: dict[int, int]) -> list[str]:
    """Every store's recovery LSN, about 4 bytes each once compressed (ids in
    order, LSNs shared by the stores one flush wrote): chunks of text for the
    ``store_lsns`` section."""
    items = sorted(lsns.items())
    return [base64.b64encode(zlib.compress(b"".join(
        STORE_LSN.pack(oid, lsn) for oid, lsn in items[i:i + STORES_PER_CHUNK]))).decode()
        for i in range(0, len(items), STORES_PER_CHUNK)]


def unpack_store_lsns(chunks: list[str]) -> dict[int, int]:
    out: dict[int, int] = {}
    for chunk in chunks:
        raw = zlib.decompress(base64.b64decode(chunk))
        out.update(STORE_LSN.iter_unpack(raw))
    return out


def part_limit(extent_payload: int) -> int:
    """Bytes of table per record for extents with ``extent_payload`` usable bytes."""
    return max(4096, min(MAX_PART, extent_payload // 4))


def split_table(table: dict, limit: int) -> tuple[dict, list[dict]]:
    """(head, parts): the table whole when it fits in ``limit`` bytes; else the
    table without its big sections, and those sections cut into parts."""
    if len(encode_json(table)) <= limit:
        return table, []
    head = {k: v for k, v in table.items() if k not in LIST_SECTIONS + DICT_SECTIONS}
    parts: list[dict] = []
    part: dict = {}
    size = 2

    def add(section: str, key, entry) -> None:
        nonlocal part, size
        cost = len(json.dumps(entry, separators=(",", ":"))) + \
            (len(json.dumps(key)) + 1 if key is not None else 0) + len(section) + 8
        if part and size + cost > limit:
            parts.append(part)
            part, size = {}, 2
        if key is None:
            part.setdefault(section, []).append(entry)
        else:
            part.setdefault(section, {})[key] = entry
        size += cost

    for section in LIST_SECTIONS:
        for entry in table.get(section, []):
            add(section, None, entry)
    for section in DICT_SECTIONS:
        for key, entry in table.get(section, {}).items():
            add(section, key, entry)
    if part:
        parts.append(part)
    return head, parts


def read_checkpoint(read_record: Callable, end_lsn: int) -> dict:
    """The whole table of the checkpoint whose CHECKPOINT_END is at ``end_lsn``;
    ``read_record(lsn)`` returns the record there (or None). LogCorrupt when the
    record or one of its parts is not where the log says."""
    end = _read(read_record, end_lsn, RecordType.CHECKPOINT_END,
                "the control file names LSN {lsn} as the last checkpoint, but no "
                "checkpoint record is there")
    table = decode_json(end.payload)
    part_lsns = table.pop("parts", [])
    if part_lsns:
        for section in LIST_SECTIONS:
            table.setdefault(section, [])
        for section in DICT_SECTIONS:
            table.setdefault(section, {})
    for lsn in part_lsns:
        part = decode_json(_read(read_record, lsn, RecordType.CHECKPOINT_PART,
                                 f"the checkpoint at LSN {end_lsn} names a part at LSN "
                                 "{lsn}, but no checkpoint part is there").payload)
        for section in LIST_SECTIONS:
            table[section] += part.get(section, [])
        for section in DICT_SECTIONS:
            table[section].update(part.get(section, {}))
    return table


def _read(read_record: Callable, lsn: int, expected: RecordType, problem: str):
    try:
        rec = read_record(lsn)
    except HarbormqError as exc:
        raise LogCorrupt(problem.format(lsn=lsn) + f" ({exc})", lsn=lsn) from None
    if rec is None or rec.type != expected:
        raise LogCorrupt(problem.format(lsn=lsn), lsn=lsn)
    return rec
