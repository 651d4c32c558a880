"""STOMP's temporary queues: ``/temp-queue/<name>`` in a SEND's or a
SUBSCRIBE's ``destination`` or a SEND's ``reply-to`` (the convention of
RabbitMQ and ActiveMQ for replies).

The first use of ``/temp-queue/<name>`` on a connection opens
SYSTEM.DEFAULT.MODEL.QUEUE, as an MQ application opens a model queue for its
replies: a temporary dynamic queue (``AMQ.*``) private to the connection.
Every later use of the same name on the connection means that queue. The
frame is rewritten to ``/queue/<real name>`` before anything else reads it,
so a responder receives ``reply-to:/queue/AMQ....`` and answers to it as to
any queue. Only the connection that made the queue may subscribe to it; others may
send to it (a responder), and their open handles do not keep it. A deleted
one is not defined again by a late SEND (MQRC 2085).
When the connection ends (DISCONNECT, a lost socket, STOP CONN) its
temporary queues are deleted with their messages, once its unfinished work
is backed out; a crash leaves them to the next restart, which deletes them
(``core/dynamic.py``). Their messages are non-persistent: a persistent SEND
to one fails with MQRC 2048, as in MQ.

Not here: the connection's frames (``connection.py``, ``delivery.py`` call
``TempQueues.rewrite`` first and ``release`` at the end).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ..core.objects import DEFAULT_MODEL_QUEUE
from ..errors import HarbormqError, ObjectInUse, UnknownObject

if TYPE_CHECKING:
    from .connection import StompConnection
    from .frames import Frame

PREFIX = "/temp-queue/"
#: at most this many temporary queues per connection
MAX_PER_CONNECTION = 100
#: how long a deletion waits for others' uncommitted puts to end, in all
RELEASE_PATIENCE_S = 30.0


class TempQueues:
    """One connection's temporary queues."""

    def __init__(self, conn: StompConnection):
        self.conn = conn
        #: "/temp-queue/<name>" -> the temporary dynamic queue's name
        self.names: dict[str, str] = {}

    def rewrite(self, frame: Frame, headers: tuple[str, ...]):
        """Rewrite ``/temp-queue/`` in ``headers`` of ``frame`` to the real
        queue; None when done, or the coroutine that makes the queue first
        (the frame is applied again after it). Refuses a subscription to
        another connection's temporary queue."""
        for h in headers:
            dest = frame.headers.get(h)
            if not dest:
                continue
            if dest.startswith(PREFIX):
                real = self.names.get(dest)
                if real is None:
                    return self._open(dest)
                frame.headers[h] = "/queue/" + real
            elif h == "destination":
                self._check_open(dest[len("/queue/"):], frame.command)
        return None

    def _check_open(self, name: str, command: str) -> None:
        """A deleted temporary queue is not defined again on first use; only
        its maker subscribes to a temporary queue."""
        core = self.conn.core
        if name in core.deleted_temporary:
            raise UnknownObject(f"queue {name} was a temporary queue, deleted when the "
                                "connection that made it ended (MQRC 2085 "
                                "UNKNOWN_OBJECT_NAME)", queue=name)
        owners = core.temporary_owners
        if command == "SUBSCRIBE" and name in owners and owners[name] != self.owner:
            raise ObjectInUse(f"queue {name} is another connection's temporary queue: only "
                              "that connection may subscribe to it (MQRC 2042 "
                              "OBJECT_IN_USE)", queue=name)

    @property
    def owner(self) -> str:
        return f"STOMP {self.conn.info.conn_id}"

    async def _open(self, dest: str) -> None:
        if len(self.names) >= MAX_PER_CONNECTION:
            raise ObjectInUse(f"{dest}: this connection has {len(self.names)} temporary "
                              "queues, the most it may have")
        if not dest[len(PREFIX):]:
            raise ObjectInUse(f"destination {dest!r} names no temporary queue: use "
                              "/temp-queue/NAME")
        d = await self.conn.core.open_model(DEFAULT_MODEL_QUEUE, owner=self.owner)
        self.names[dest] = d["name"]

    def release(self) -> None:
        """(the connection ended) Delete its temporary queues, in the background."""
        if self.names:
            names, self.names = list(self.names.values()), {}
            self.conn.core.spawn(self._delete(names))

    async def _delete(self, names: list[str]) -> None:
        core = self.conn.core
        # the connection's own transactions and deliveries are backed out first
        await asyncio.gather(*list(self.conn.service.backouts), return_exceptions=True)
        deadline = asyncio.get_running_loop().time() + RELEASE_PATIENCE_S
        for name in names:
            while True:
                try:
                    await core.close_dynamic(name)
                    break
                except HarbormqError as exc:
                    if core.stopping or asyncio.get_running_loop().time() > deadline:
                        core.oplog.emit("HMQ7733W", f"temporary queue {name} of a closed "
                                        f"STOMP connection is not deleted yet ({exc.message}); "
                                        "the next restart deletes it")
                        break
                    await asyncio.sleep(0.2)
