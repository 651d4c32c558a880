"""The synchronisation data of each channel (MQ's SYSTEM.CHANNEL.SYNCQ).

One message per channel and side on SYSTEM.CHANNEL.SYNCQ, its message id
derived from both: the sequence number and batch id (LUWID) of the last batch
that side committed. It is replaced inside each batch's own unit of work, so
it commits, backs out or stays in doubt with the batch: after any crash the
two sides' sync data say exactly which batch is in doubt. Being a queue, it
is logged, imaged and recreated after damage like any other object.

A sender keeps ``SENDER_SLOTS`` such messages (slots), because it has up to
that many batches in flight at once (pipelining): each batch replaces the
slot no other batch in flight holds, and the sender's last committed batch is
the slot with the highest sequence number. Slot 0 has the message id a
single sync message had before slots.
"""

from __future__ import annotations

import hashlib
import json

from ..core.engine import QueueManagerCore
from ..core.objects import CHANNEL_SYNCQ
from ..core.queue import MessageMatch
from ..core.uow import UnitOfWork
from ..log.records import Message

SENDER, RECEIVER = "SDR", "RCVR"
#: batches a sender may have in flight at once (each with a sync slot of its own):
#: one awaiting its CONFIRM, one being prepared while the next is got, and slack
#: for a CONFIRM that comes late (queue managers before this had two slots: their
#: sync data reads the same, slots 2 and 3 are simply not there yet)
SENDER_SLOTS = 4


def owner(name: str) -> str:
    """The owner of a channel's units of work (DISPLAY UOW shows it)."""
    return f"channel {name}"


def sync_id(side: str, name: str, slot: int = 0) -> bytes:
    key = f"{side}:{name}" if slot == 0 else f"{side}:{name}#{slot}"
    return hashlib.sha256(key.encode()).digest()[:24]


def _ids(side: str, name: str) -> dict[bytes, int]:
    slots = SENDER_SLOTS if side == SENDER else 1
    return {sync_id(side, name, k): k for k in range(slots)}


async def ensure_syncq(core: QueueManagerCore) -> None:
    if CHANNEL_SYNCQ not in core.queues:
        await core.define_queue(CHANNEL_SYNCQ, {"DESCR": "channel synchronisation data",
                                                "DEFPSIST": "YES", "INDXTYPE": "MSGID",
                                                "MAXDEPTH": 999_999_999})


def read(core: QueueManagerCore, side: str, name: str) -> dict:
    """The last committed sync data ({"seq": 0, "luwid": ""} for a new channel;
    a sender's: the slot with the highest sequence number), also while a batch
    in doubt has it locked (a browse would skip it)."""
    q = core.queue(CHANNEL_SYNCQ)
    ids = _ids(side, name)
    best = {"seq": 0, "luwid": ""}
    for key in q.iter_keys():
        msg = q.lookup(key)
        if msg is not None and msg.msg_id in ids:
            state = json.loads(msg.body)
            if state["seq"] >= best["seq"]:
                best = state
    return best


def replace(core: QueueManagerCore, uow: UnitOfWork, side: str, name: str, state: dict,
            slot: int = 0) -> None:
    """Put the new sync data under ``uow`` in ``slot``, taking the old one under
    it too."""
    mid = sync_id(side, name, slot)
    core.get_nowait(CHANNEL_SYNCQ, uow, match=MessageMatch(msg_id=mid))
    body = json.dumps({"channel": name, "side": side, **state}, sort_keys=True).encode()
    core.put_nowait(CHANNEL_SYNCQ, Message(body=body, msg_id=mid, persistent=True), uow)


def reset(core: QueueManagerCore, uow: UnitOfWork, side: str, name: str, state: dict) -> None:
    """The same sync data in every slot of the side (RESET CHANNEL)."""
    for slot in range(SENDER_SLOTS if side == SENDER else 1):
        replace(core, uow, side, name, state, slot)


def in_doubt_all(core: QueueManagerCore, name: str) -> list[tuple[UnitOfWork, dict]]:
    """The sender's batches in doubt, oldest first: each prepared unit of work
    with the sync data it would commit (they survive restart: in the log)."""
    ids = _ids(SENDER, name)
    out = []
    for uow in core.uows.values():
        if uow.in_doubt and uow.owner == owner(name):
            for op in uow.ops:
                if op.kind == "put" and op.msg is not None and op.msg.msg_id in ids:
                    out.append((uow, json.loads(op.msg.body)))
                    break
    return sorted(out, key=lambda d: d[1]["seq"])


def in_doubt(core: QueueManagerCore, name: str) -> tuple[UnitOfWork, dict] | None:
    """The sender's newest batch in doubt (None: none)."""
    doubts = in_doubt_all(core, name)
    return doubts[-1] if doubts else None
