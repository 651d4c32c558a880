"""A shared queue as the core sees it (``core/shared.py``'s ``SharedQueue``):
a QLOCAL's attributes, the line of consumers and the waiting getters of a
local queue, its messages in the group's structure store.

Consumers (STOMP subscriptions) and getters are woken when a message may
have become available on any member (``available``: a NOTIFY on
``hmq_available``, a backout here, the store reconnecting), once per loop
turn however many arrive; a get that finds nothing costs one indexed query.

A get by message or correlation id is served by the store's query; a get
with a selector browses the available messages in order and takes the
first it selects by its id (another member may take it first: the next
one is tried)."""

from __future__ import annotations

import asyncio
from collections import deque

from ..core.objects import QLOCAL_DEFAULTS
from ..core.queue import Consumer, ConsumerLine, MessageMatch
from ..log.records import Message
from .errors import SharedPersistentNotAllowed
from .structure import StructureStore

#: messages handed out in one dispatch before other work gets a turn of the loop
DISPATCH_BATCH = 64
#: messages a selector's browse reads at a time
SELECTOR_BROWSE = 50


class SharedQueue(ConsumerLine):
    """One QSGDISP(SHARED) queue on this member."""

    shared = True
    object_id = 0
    damaged = False
    recreating = False
    #: nothing is uncommitted or locked in this process's memory: the store holds it
    uncommitted_puts = 0

    def __init__(self, name: str, attrs: dict, store: StructureStore):
        self.name = name
        self.definition = {"type": "QLOCAL", "name": name, "object_id": 0,
                           "attrs": {**QLOCAL_DEFAULTS, **attrs, "QSGDISP": "SHARED"}}
        self.store = store
        self.waiters: list = []
        self.listeners: list = []
        self.consumers: list[Consumer] = []
        self._ready: deque[Consumer] = deque()
        self.producers: deque = deque()
        self.locked: dict = {}
        self.last_put_ns = 0
        self.last_get_ns = 0
        self._told = False
        self._dispatching = False
        #: False while the store cannot be reached: consumers wait, unasked
        self.reachable = True

    @property
    def attrs(self) -> dict:
        return self.definition["attrs"]

    @property
    def structure(self) -> str:
        return self.attrs["CFSTRUCT"]

    @property
    def full(self) -> bool:
        """MAXDEPTH is not enforced on shared queues (docs/qsg.md): the
        structure's size is PostgreSQL's disk."""
        return False

    @property
    def curdepth(self) -> int:
        return self.store.depth(self.name)

    def redefine(self, attrs: dict) -> None:
        """The group's definition changed (ALTER on any member)."""
        self.definition["attrs"] = {**QLOCAL_DEFAULTS, **attrs, "QSGDISP": "SHARED"}

    # -- the operations the core uses ------------------------------------------------

    def check_put(self, msg: Message) -> None:
        recover = self.store.check_usable(self.structure)
        if msg.persistent and not recover:
            raise SharedPersistentNotAllowed(
                f"queue {self.name} is on structure {self.structure}, which is RECOVER(NO): "
                "persistent messages are not allowed (MQRC 2048 PERSISTENT_NOT_ALLOWED)",
                queue=self.name)

    def put(self, msg: Message, uow_id: int | None) -> int:
        return self.store.put(self.structure, self.name, msg, uow_id).stamp

    def get(self, uow_id: int | None, match) -> tuple[Message, int] | None:
        self.store.check_usable(self.structure)
        if match is None or isinstance(match, MessageMatch):
            got = self.store.get(self.name, uow_id,
                                 msg_id=getattr(match, "msg_id", None),
                                 correl_id=getattr(match, "correl_id", None))
            return None if got is None else (got.msg, got.stamp)
        # a selector: the first available message it selects, taken by its id
        for candidate in self.browse(limit=SELECTOR_BROWSE, match=match):
            got = self.store.get(self.name, uow_id, msg_id=candidate.msg_id)
            if got is not None:
                return got.msg, got.stamp
        return None

    def browse(self, *, limit: int | None = None, match=None) -> list[Message]:
        msgs = self.store.browse(self.name, None if match is not None else limit)
        if match is not None:
            msgs = [m for m in msgs if match(m)]
        return msgs if limit is None else msgs[:limit]

    def put_backed_out(self) -> None:
        """(a local queue's bookkeeping; the store holds a shared queue's)"""

    def room_check(self) -> None:
        """(no MAXDEPTH: producers are never held on a shared queue)"""

    # -- waking getters and consumers ---------------------------------------------------

    def available(self) -> None:
        """A message may be available: waiters and consumers are told on the
        next loop turn, once per turn."""
        if self._told or not (self.waiters or self.listeners or self._ready):
            return
        self._told = True
        asyncio.get_running_loop().call_soon(self._tell)

    def _tell(self) -> None:
        self._told = False
        while self.waiters:
            fut = self.waiters.pop(0)
            if not fut.done():
                fut.set_result(None)
        for listener in list(self.listeners):
            listener()
        self.dispatch()

    def dispatch(self) -> None:
        """Hand messages to the consumers in line, one at a time, until one
        finds none (the store is empty for them) or the batch is done."""
        if self._dispatching or not self.reachable:
            return
        self._dispatching = True
        try:
            for _ in range(DISPATCH_BATCH):
                if not self.serve_first():
                    return
            if self._ready:    # more may be there: the rest on a later turn
                self.available()
        finally:
            self._dispatching = False
