"""The synchronisation data of each channel (MQ's SYSTEM.CHANNEL.SYNCQ).

One message per channel and side on SYSTEM.CHANNEL.SYNCQ, its message id
derived from both: the sequence number and batch id (LUWID) of the last batch
that side committed. It is replaced inside each batch's own unit of work, so
it commits, backs out or stays in doubt with the batch: after any crash the
two sides' sync data say exactly which batch is in doubt. Being a queue, it
is logged, imaged and recreated after damage like any other object.
"""

from __future__ import annotations

import hashlib
import json

from ..core.engine import MessageMatch, QueueManagerCore, UnitOfWork
from ..core.objects import CHANNEL_SYNCQ
from ..log.records import Message

SENDER, RECEIVER = "SDR", "RCVR"


def owner(name: str) -> str:
    """The owner of a channel's units of work (DISPLAY UOW shows it)."""
    return f"channel {name}"


def sync_id(side: str, name: str) -> bytes:
    return hashlib.sha256(f"{side}:{name}".encode()).digest()[:24]


async def ensure_syncq(core: QueueManagerCore) -> None:
    if CHANNEL_SYNCQ not in core.queues:
        await core.define_queue(CHANNEL_SYNCQ, {"DESCR": "channel synchronisation data",
                                                "DEFPSIST": "YES", "INDXTYPE": "MSGID",
                                                "MAXDEPTH": 999_999_999})


def read(core: QueueManagerCore, side: str, name: str) -> dict:
    """The last committed sync data ({"seq": 0, "luwid": ""} for a new channel),
    also while a batch in doubt has it locked (a browse would skip it)."""
    q = core.queue(CHANNEL_SYNCQ)
    mid = sync_id(side, name)
    for key in q.iter_keys():
        msg = q.lookup(key)
        if msg is not None and msg.msg_id == mid:
            return json.loads(msg.body)
    return {"seq": 0, "luwid": ""}


def replace(core: QueueManagerCore, uow: UnitOfWork, side: str, name: str, state: dict) -> None:
    """Put the new sync data under ``uow``, taking the old one under it too."""
    mid = sync_id(side, name)
    core.get_nowait(CHANNEL_SYNCQ, uow, match=MessageMatch(msg_id=mid))
    body = json.dumps({"channel": name, "side": side, **state}, sort_keys=True).encode()
    core.put_nowait(CHANNEL_SYNCQ, Message(body=body, msg_id=mid, persistent=True), uow)


def in_doubt(core: QueueManagerCore, name: str) -> tuple[UnitOfWork, dict] | None:
    """The sender's batch in doubt: its prepared unit of work and the sync data
    it would commit (survives restart: it is in the log)."""
    mid = sync_id(SENDER, name)
    for uow in core.uows.values():
        if uow.in_doubt and uow.owner == owner(name):
            for op in uow.ops:
                if op.kind == "put" and op.msg is not None and op.msg.msg_id == mid:
                    return uow, json.loads(op.msg.body)
    return None
