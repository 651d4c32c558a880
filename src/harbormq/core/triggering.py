"""Triggering, as in MQ: a put to a queue with TRIGGER set that meets its
trigger conditions puts a trigger message (MQ's MQTM) on the queue's
initiation queue (INITQ), for a trigger monitor to start the application its
PROCESS names.

The trigger message is put **in the same unit of work as the message that
caused it**: a put under a unit of work carries its trigger message with it
(both committed, or both backed out); a put outside one becomes, when it
triggers, a unit of work of its own holding both. The trigger message is
persistent when the message that caused it is: a crash keeps both or neither.

MQ's conditions, checked before the put (``trigger_due``):

* TRIGGER is set and TRIGTYPE is not NONE; the queue's GET is ENABLED;
* the message's priority is at least TRIGMPRI;
* INITQ names a local queue that takes puts and gets; PROCESS names a
  process definition (else no trigger message, and the operator log says why
  once per queue);
* FIRST: no message of priority TRIGMPRI or more was on the queue (it goes
  from empty to not empty); EVERY: every such put; DEPTH: the put brings the
  count to TRIGDPTH, after which TRIGGER is turned off (logged like an ALTER,
  outside the unit of work: as MQ, an administrator turns it on again);
* FIRST and DEPTH: no application has the queue open for input (IPPROCS 0).

Counts include uncommitted puts and messages locked by uncommitted gets, as
MQ's CURDEPTH does. Unlike MQ, a trigger message is made whether or not a
trigger monitor has the initiation queue open: it waits there for one.

``Triggering`` is a part of the core (``engine.QueueManagerCore``), which
provides what ``TriggeringHost`` lists. The MQTM and MQTMC2 layouts are here
too (pure functions), for the trigger monitor (``cli/trigger.py``).
"""

from __future__ import annotations

import asyncio
import struct
from typing import TYPE_CHECKING, NamedTuple, Protocol

from ..crashpoints import crash_point
from ..errors import HarbormqError
from ..log.records import Message, RecordType, encode_json, key_parts
from .objects import process_key

if TYPE_CHECKING:
    from .connections import ConnectionRegistry
    from .engine import PutTarget
    from .operator_log import OperatorLog
    from .queue import LocalQueue
    from .uow import UnitOfWork

#: MQ's MQTM (version 1): StrucId, Version, QName, ProcessName, TriggerData,
#: ApplType, ApplId, EnvData, UserData; 684 bytes, strings blank-padded
MQTM = struct.Struct("<4si48s48s64si256s128s128s")
#: the message format of a trigger message (MQFMT_TRIGGER)
TRIGGER_FORMAT = "MQTRIG"
#: APPLTYPE names and MQ's MQAT_* numbers
APPL_TYPES = {"CICS": 1, "MVS": 2, "IMS": 3, "OS400": 4, "UNIX": 6, "WINDOWSNT": 11,
              "DEF": 6, "WINDOWS": 9, "NSK": 13, "VMS": 12, "DOS": 5}


class TriggerMessage(NamedTuple):
    """The fields of an MQTM."""
    queue: str
    process: str
    trigger_data: str
    appl_type: int
    appl_id: str
    env_data: str
    user_data: str


def _pad(text: str, n: int) -> bytes:
    return text.encode()[:n].ljust(n, b" ")


def encode_mqtm(tm: TriggerMessage) -> bytes:
    return MQTM.pack(b"TM  ", 1, _pad(tm.queue, 48), _pad(tm.process, 48),
                     _pad(tm.trigger_data, 64), tm.appl_type, _pad(tm.appl_id, 256),
                     _pad(tm.env_data, 128), _pad(tm.user_data, 128))


def decode_mqtm(body: bytes) -> TriggerMessage:
    """ValueError when ``body`` is not an MQTM."""
    if len(body) < MQTM.size or body[:4] != b"TM  ":
        raise ValueError("not a trigger message (no MQTM structure)")
    f = MQTM.unpack_from(body)
    text = [x.decode(errors="replace").rstrip(" ") if isinstance(x, bytes) else x for x in f]
    return TriggerMessage(text[2], text[3], text[4], f[5], text[6], text[7], text[8])


def mqtmc2(tm: TriggerMessage, qmgr: str) -> str:
    """MQ's MQTMC2, the character form a trigger monitor passes to the
    application it starts: 732 characters, fields blank-padded."""
    def pad(text: str, n: int) -> str:
        return text[:n].ljust(n)
    return ("TMC " + "   2" + pad(tm.queue, 48) + pad(tm.process, 48)
            + pad(tm.trigger_data, 64) + f"{tm.appl_type:>4}"[:4] + pad(tm.appl_id, 256)
            + pad(tm.env_data, 128) + pad(tm.user_data, 128) + pad(qmgr, 48))


class TriggeringHost(Protocol):
    """What triggering uses of the rest of the core."""
    oplog: OperatorLog
    objects: dict[str, dict]
    queues: dict[str, LocalQueue]
    connections: ConnectionRegistry
    triggering: bool

    def begin(self, owner: str = "") -> UnitOfWork: ...

    def commit_nowait(self, uow: UnitOfWork, joined=(), *, force: bool = True
                      ) -> asyncio.Future | None: ...

    def _undo_quietly(self, uow: UnitOfWork) -> None: ...

    def output_queue(self, name: str) -> PutTarget: ...

    def check_put_to(self, target: PutTarget, msg: Message) -> None: ...

    def put_nowait(self, queue: str, msg: Message, uow: UnitOfWork | None = None, *,
                   target: PutTarget | None = None, checked: bool = False
                   ) -> tuple[Message, asyncio.Future | None]: ...

    def append_record(self, rtype: RecordType, *, obj: LocalQueue | None = None,
                      payload: bytes = b"") -> int: ...

    def set_definition(self, name: str, definition: dict | None, lsn: int | None) -> None: ...


class Triggering:
    """Trigger messages (a part of ``QueueManagerCore``, which is its
    ``TriggeringHost``)."""

    def _init_triggering(self) -> None:
        #: True while a triggering put makes its own puts (they trigger nothing)
        self.triggering = False
        #: queues whose trigger could not be made, said once each in the operator log
        self._trigger_warned: set[str] = set()

    def put_triggering(self: TriggeringHost, queue: str, msg: Message,
                       uow: UnitOfWork | None, target: PutTarget
                       ) -> tuple[Message, asyncio.Future | None] | None:
        """(``put_nowait``, for a queue with TRIGGER set) The put and its trigger
        message in one unit of work when the put triggers; None when it does
        not (the caller puts as usual)."""
        q = target.queue
        if target.header is not None:
            return None
        due = self.trigger_due(q, msg)
        if due is None:
            return None
        initq, trigger = due
        own = uow is None
        if own:
            uow = self.begin(owner=f"trigger {q.name}")
        self.triggering = True
        try:
            put, _ = self.put_nowait(queue, msg, uow, target=target, checked=True)
            self.put_nowait(initq, trigger, uow)
        except BaseException:
            if own:
                self._undo_quietly(uow)
            raise
        finally:
            self.triggering = False
        if q.attrs["TRIGTYPE"] == "DEPTH":
            self._trigger_off(q)
        crash_point("trigger.before_commit")
        return put, (self.commit_nowait(uow) if own else None)

    def trigger_due(self: TriggeringHost, q: LocalQueue, msg: Message
                    ) -> tuple[str, Message] | None:
        """(initiation queue, trigger message) when a put of ``msg`` to ``q``
        meets MQ's trigger conditions; None when it does not."""
        a = q.attrs
        kind = a["TRIGTYPE"]
        if kind == "NONE" or a["GET"] != "ENABLED" or msg.priority < a["TRIGMPRI"]:
            return None
        if kind in ("FIRST", "DEPTH") and self.connections.procs(q.name)[0]:
            return None
        need = 1 if kind == "FIRST" else a["TRIGDPTH"] - 1 if kind == "DEPTH" else 0
        if need and _count_at_least(q, a["TRIGMPRI"], need) != (need - 1 if kind == "FIRST"
                                                                 else need):
            return None
        process = self.objects.get(process_key(a["PROCESS"])) if a["PROCESS"] else None
        initq = a["INITQ"]
        trigger = Message(body=b"", persistent=msg.persistent, format=TRIGGER_FORMAT)
        why = None
        if process is None:
            why = f"its PROCESS({a['PROCESS']}) is not a defined process"
        elif not initq:
            why = "it names no INITQ"
        else:
            try:
                target = self.output_queue(initq)
                trigger.priority = target.attrs["DEFPRTY"]
                self.check_put_to(target, trigger)
                if target.header is not None or target.queue.full or \
                        target.queue.attrs["GET"] != "ENABLED":
                    raise HarbormqError(f"initiation queue {initq} is full, remote or "
                                        "get-inhibited")
            except HarbormqError as exc:
                why = f"its initiation queue cannot take it: {exc.message}"
        if why is not None:
            if q.name not in self._trigger_warned:
                self._trigger_warned.add(q.name)
                self.oplog.emit("HMQ7736W", f"queue {q.name} met its trigger conditions but "
                                f"no trigger message was made: {why}")
            return None
        self._trigger_warned.discard(q.name)
        p = process["attrs"]
        trigger.body = encode_mqtm(TriggerMessage(
            q.name, process["name"], a["TRIGDATA"], appl_type_code(p["APPLTYPE"]),
            p["APPLICID"], p["ENVRDATA"], p["USERDATA"]))
        return initq, trigger

    def _trigger_off(self: TriggeringHost, q: LocalQueue) -> None:
        """TRIGTYPE(DEPTH) triggered: TRIGGER off, logged as an ALTER is."""
        definition = dict(q.definition, attrs=dict(q.attrs, TRIGGER="NO"))
        lsn = self.append_record(RecordType.OBJECT_ALTER, obj=q,
                                 payload=encode_json(definition))
        self.set_definition(q.name, definition, lsn)
        q.definition = definition


def appl_type_code(appltype: str) -> int:
    text = str(appltype).upper()
    return int(text) if text.isdigit() else APPL_TYPES.get(text, 6)


def _count_at_least(q: LocalQueue, priority: int, limit: int) -> int:
    """Messages on ``q`` of ``priority`` or more, counting up to ``limit``:
    committed ones (locked by a get or not) and uncommitted puts."""
    if priority == 0:
        return min(limit, q.depth + q.uncommitted_puts)
    count = q.uncommitted_puts
    for key in q.iter_keys():
        if count >= limit or key_parts(key)[0] < priority:
            break          # keys come in priority order, highest first
        count += 1
    return min(count, limit)
