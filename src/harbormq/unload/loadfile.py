"""The queue load file (``*.hmqload``) that ``rebuild`` writes and ``load`` reads.

JSON Lines, UTF-8, one JSON object per line:

1. header:  {"format": "harbormq-load", "version": 1, "queue": "Q", "at_lsn": L}
2. one line per message, in delivery order (priority high to low, then put order):
   {"msg_id": hex, "correl_id": hex, "priority": 0-9, "persistent": true,
    "expiry_ns": ns since the epoch or 0, "put_time_ns": ns, "backout_count": n,
    "reply_to": str, "format": str, "properties": {...user properties, exact JSON...},
    "body": base64}
3. trailer: {"end": true, "messages": N}   (a file without it was cut short)

Loading puts the messages in that order, so they are delivered in the same
order; message and correlation ids, priority, persistence, reply-to, format
and properties are kept. The queue manager gives them new put times and
sequence numbers; backout counts start again at 0; an expiry is kept as the
same instant, and a message already expired when loaded is skipped (counted).
"""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path
from typing import Iterable

from ..core.engine import QueueManagerCore
from ..errors import HarbormqError
from ..fsutil import rename_durably
from ..log.records import Message

FORMAT = "harbormq-load"
VERSION = 1
#: messages per unit of work when loading
LOAD_BATCH = 500


class LoadFileError(HarbormqError):
    msgid = "HMQ7620E"


def message_line(row) -> str:
    props = row["properties_json"]
    return json.dumps({
        "msg_id": bytes(row["msg_id"] or b"").hex(),
        "correl_id": bytes(row["correl_id"] or b"").hex(),
        "priority": row["priority"], "persistent": bool(row["persistent"]),
        "expiry_ns": row["expiry_ns"] or 0, "put_time_ns": row["put_time_ns"] or 0,
        "backout_count": row["backout_count"] or 0, "reply_to": row["reply_to"] or "",
        "format": row["format"] or "", "properties": json.loads(props) if props else {},
        "body": base64.b64encode(bytes(row["body"] or b"")).decode(),
    }, separators=(",", ":"))


def write_load_file(path: Path, queue: str, at_lsn: int, rows: Iterable) -> int:
    """Write ``rows`` (rebuilt messages in delivery order) as a load file; publish
    it by rename so a reader never sees half a file, durable once this returns
    (it may be all that is left of a queue). Returns the message count."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    n = 0
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps({"format": FORMAT, "version": VERSION, "queue": queue,
                            "at_lsn": at_lsn}) + "\n")
        for row in rows:
            f.write(message_line(row) + "\n")
            n += 1
        f.write(json.dumps({"end": True, "messages": n}) + "\n")
        f.flush()
        os.fsync(f.fileno())
    rename_durably(tmp, path)
    return n


def read_load_file(path: Path):
    """(header, iterator of message dicts); the iterator checks the trailer."""
    path = Path(path)
    f = open(path, encoding="utf-8")
    try:
        header = json.loads(f.readline() or "null")
    except json.JSONDecodeError:
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        f.close()
        raise LoadFileError(f"{path} is not a harbormq load file (no header line)",
                            path=str(path))
    if header.get("version") != VERSION:
        f.close()
        raise LoadFileError(f"{path} is load file version {header.get('version')}; this "
                            f"harbormq reads version {VERSION}", path=str(path))

    def messages():
        with f:
            n = 0
            for lineno, line in enumerate(f, 2):
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise LoadFileError(f"{path} line {lineno} is not JSON: {exc}",
                                        path=str(path), line=lineno) from None
                if not isinstance(obj, dict):
                    raise LoadFileError(f"{path} line {lineno} is not a JSON object",
                                        path=str(path), line=lineno)
                if obj.get("end"):
                    if obj.get("messages") != n:
                        raise LoadFileError(f"{path} says it holds {obj.get('messages')} "
                                            f"messages but {n} were read", path=str(path))
                    return
                n += 1
                _check_message_line(obj, path, lineno)
                yield obj
            raise LoadFileError(f"{path} has no end line: the file was cut short",
                                path=str(path), hint="rebuild it again")
    return header, messages()


#: a message line's fields and their JSON types
_FIELDS = {"body": str, "msg_id": str, "correl_id": str, "priority": int,
           "persistent": bool, "expiry_ns": int, "reply_to": str, "format": str,
           "properties": dict}


def _check_message_line(m: dict, path: Path, lineno: int) -> None:
    """A message line is whole and well-typed, or LoadFileError names the line
    and the field."""
    for key, kind in _FIELDS.items():
        value = m.get(key)
        if not isinstance(value, kind) or kind is int and isinstance(value, bool):
            raise LoadFileError(f"{path} line {lineno}: field {key!r} is missing or not "
                                f"{kind.__name__}", path=str(path), line=lineno)
    try:
        base64.b64decode(m["body"], validate=True)
        bytes.fromhex(m["msg_id"])
        bytes.fromhex(m["correl_id"])
    except ValueError as exc:
        raise LoadFileError(f"{path} line {lineno}: {exc}", path=str(path),
                            line=lineno) from None
    if not 0 <= m["priority"] <= 9:
        raise LoadFileError(f"{path} line {lineno}: priority {m['priority']} is not 0..9",
                            path=str(path), line=lineno)


def _message(m: dict, now_ns: int) -> Message | None:
    """The Message a load-file line puts back (None: it has expired since)."""
    if m["expiry_ns"] and m["expiry_ns"] <= now_ns:
        return None
    return Message(body=base64.b64decode(m["body"]), msg_id=bytes.fromhex(m["msg_id"]),
                   correl_id=bytes.fromhex(m["correl_id"]), priority=m["priority"],
                   persistent=m["persistent"], expiry_ns=m["expiry_ns"],
                   reply_to=m["reply_to"], format=m["format"], properties=m["properties"])


async def load_into_core(core: QueueManagerCore, queue: str, path: Path, *,
                         batch: int = LOAD_BATCH) -> dict:
    """Put the messages of a load file on ``queue`` of a running core, ``batch``
    messages per unit of work (run on its loop: the admin command ``load``).

    The queue manager keeps serving meanwhile: each batch commits on its own and
    yields to the loop, so an interrupted load leaves a prefix of the file, in
    order, on the queue."""
    for _m in read_load_file(path)[1]:
        pass        # a first pass: a bad line or a cut file is refused before any put
    _header, messages = read_load_file(path)
    loaded = expired = 0
    uow = None
    try:
        for m in messages:
            msg = _message(m, time.time_ns())
            if msg is None:
                expired += 1
                continue
            if uow is None:
                uow = core.begin(owner="harbormq-load")
            core.put_nowait(queue, msg, uow)
            loaded += 1
            if loaded % batch == 0:
                await core.commit(uow)
                uow = None
        if uow is not None:
            await core.commit(uow)
            uow = None
    finally:
        if uow is not None:
            await core.backout(uow)
    return {"queue": queue, "loaded": loaded, "expired_skipped": expired}


def load_file_into(qm, queue: str, path: Path, *, batch: int = LOAD_BATCH) -> dict:
    """The same for an open harbormq.QueueManager (a queue manager in this process)."""
    return qm.load_file(queue, path, batch=batch)


class _Snapshot:
    """A get that takes only the messages of a snapshot (by store key)."""
    index_type = ident = None

    def __init__(self, keys: set[bytes]):
        self.keys = keys

    def __call__(self, msg: Message) -> bool:
        return msg.key in self.keys


def _row(m: Message) -> dict:
    return {"msg_id": m.msg_id, "correl_id": m.correl_id, "priority": m.priority,
            "persistent": m.persistent, "expiry_ns": m.expiry_ns,
            "put_time_ns": m.put_time_ns, "backout_count": m.backout_count,
            "reply_to": m.reply_to, "format": m.format,
            "properties_json": json.dumps(m.properties) if m.properties else "",
            "body": m.body}


async def unload_from_core(core: QueueManagerCore, queue: str, path: Path, *,
                           move: bool = False, msg_id: bytes | None = None,
                           correl_id: bytes | None = None,
                           older_than_ns: int | None = None) -> dict:
    """``harbormq unload`` (dmpmqmsg): the messages of ``queue`` a get could take
    now, in delivery order, written as a load file (durable, published whole).

    The selection is one synchronous step on the loop: a consistent snapshot.
    ``move`` takes them too: they are got under one unit of work (locked, so no
    consumer can take one meanwhile), the file is written and forced, and only
    then is the unit of work committed. A crash before the commit leaves the
    messages on the queue (and perhaps the file too): never lost."""
    now = time.time_ns()

    def selected(m: Message) -> bool:
        return ((msg_id is None or m.msg_id == msg_id) and
                (correl_id is None or m.correl_id == correl_id) and
                (older_than_ns is None or m.put_time_ns <= now - older_than_ns))

    snapshot = [m for m in core.browse(queue) if selected(m)]
    at_lsn = core.log.end_lsn
    uow = None
    try:
        if move and snapshot:
            uow = core.begin(owner="harbormq-unload")
            match = _Snapshot({m.key for m in snapshot})
            taken = []
            while len(taken) < len(snapshot):
                msg, _ = core.get_nowait(queue, uow, match=match)
                if msg is None:
                    break          # (expired meanwhile)
                taken.append(msg)
            snapshot = taken
        rows = [_row(m) for m in snapshot]
        count = await core.loop.run_in_executor(None, write_load_file, Path(path), queue,
                                                at_lsn, rows)
        if uow is not None:
            await core.commit(uow)
            uow = None
    finally:
        if uow is not None:
            await core.backout(uow)
    return {"queue": queue, "unloaded": count, "moved": move, "path": str(path),
            "bytes": sum(len(r["body"]) for r in rows)}
