"""Model queues and dynamic queues, as in MQ: opening a model queue (QMODEL)
defines a local queue from it, named from a dynamic-name pattern (``AMQ.*``:
the ``*`` replaced by a unique part), with the model's attributes and its
DEFTYPE:

* PERMDYN, a permanent dynamic queue: logged and kept like any local queue
  until it is deleted;
* TEMPDYN, a temporary dynamic queue: it takes no persistent message (MQRC
  2048 PERSISTENT_NOT_ALLOWED, as MQ), it is deleted when the connection that
  made it closes it or ends, and a restart deletes whatever is left of it
  (its definition is logged like any queue's, so the delete is too).

``settle_dynamic_queues`` runs at every start, after restart recovery: it
deletes the temporary dynamic queues a stop or a crash left, each with an
operator-log line, and defines SYSTEM.DEFAULT.MODEL.QUEUE if it is missing
(a queue manager made before model queues existed gets it then).

``DynamicQueues`` is a part of the core (``engine.QueueManagerCore``), which
provides what ``DynamicHost`` lists. Not here: a model queue's definition
(``definitions.py``, ``objects.QMODEL_DEFAULTS``), STOMP's ``/temp-queue/``
(``stomp/tempqueues.py``).
"""

from __future__ import annotations

import itertools
import time
from typing import TYPE_CHECKING, Protocol

from ..errors import InvalidAttribute, ObjectExists, PersistentNotAllowed, UnknownObject
from .objects import DEFAULT_MODEL_QUEUE, QLOCAL_DEFAULTS, QMGR_OBJECT, check_name

if TYPE_CHECKING:
    from .operator_log import OperatorLog
    from .queue import LocalQueue

#: the dynamic-name pattern an open uses when it gives none (MQ's default prefix)
DEFAULT_DYNAMIC_NAME = "AMQ.*"
_unique = itertools.count(1)
#: how many deleted temporary queue names are remembered (``deleted_temporary``)
MAX_REMEMBERED_DELETIONS = 10_000


class DynamicHost(Protocol):
    """What dynamic queues use of the rest of the core."""
    name: str
    oplog: OperatorLog
    objects: dict[str, dict]
    queues: dict[str, LocalQueue]

    async def define_queue(self, name: str, attrs: dict | None = None, *,
                           like: str | None = None, replace: bool = False) -> dict: ...

    async def delete_queue(self, name: str, *, purge: bool = False,
                           handles: bool = True) -> None: ...

    async def define_object(self, objtype: str, name: str, attrs: dict, *,
                            replace: bool = False) -> dict: ...


def dynamic_name(pattern: str, taken) -> str:
    """A queue name from MQ's DynamicQName: a trailing ``*`` is replaced by a
    unique part (the name is at most 48 characters: a prefix of up to 33 and
    15 unique characters); a name without ``*`` is taken as it is."""
    if not pattern.endswith("*"):
        return check_name(pattern, "dynamic queue")
    prefix = pattern[:-1]
    if len(prefix) > 33 or "*" in prefix:
        raise InvalidAttribute(f"dynamic queue name {pattern!r}: give a prefix of up to 33 "
                               "characters and one trailing '*' (MQRC 2011 "
                               "Q_NAME_ERROR)")
    while True:
        unique = f"{time.time_ns() // 1_000_000 & 0xFFFFFFFF:08X}{next(_unique) & 0xFFFFFFF:07X}"
        name = check_name(prefix + unique, "dynamic queue")
        if name not in taken:
            return name


class DynamicQueues:
    """Opening model queues (a part of ``QueueManagerCore``, which is its
    ``DynamicHost``)."""

    def _init_dynamic(self) -> None:
        #: temporary dynamic queue -> who made it (a connection's owner text)
        self.temporary_owners: dict[str, str] = {}
        #: temporary dynamic queues deleted since the start, the newest last: a
        #: front end that defines queues on first use must not bring one back
        self.deleted_temporary: dict[str, None] = {}

    @staticmethod
    def refuse_persistent(q: LocalQueue) -> None:
        raise PersistentNotAllowed(f"queue {q.name} is a temporary dynamic queue: it takes "
                                   "no persistent message (MQRC 2048 PERSISTENT_NOT_ALLOWED); "
                                   "put it as non-persistent, or use a model queue with "
                                   "DEFTYPE(PERMDYN)", queue=q.name)

    async def open_model(self: DynamicHost, model: str,
                         dynamic: str = DEFAULT_DYNAMIC_NAME, *, owner: str = "") -> dict:
        """Open model queue ``model``: a new dynamic queue, defined from it and
        named from ``dynamic``; returns its definition."""
        d = self.objects.get(model)
        if d is None or d["type"] != "QMODEL":
            what = "is not defined" if d is None else f"is a {d['type']}, not a model queue"
            raise UnknownObject(f"model queue {model} {what} (MQRC 2085 "
                                "UNKNOWN_OBJECT_NAME)", queue=model)
        name = dynamic_name(dynamic or DEFAULT_DYNAMIC_NAME, self.objects)
        if name in self.objects:
            raise ObjectExists(f"dynamic queue {name} already exists (MQRC 2100 "
                               "OBJECT_ALREADY_EXISTS)", queue=name)
        attrs = {k: v for k, v in d["attrs"].items() if k in QLOCAL_DEFAULTS}
        if d["attrs"]["DEFTYPE"] == "TEMPDYN":
            attrs["DEFPSIST"] = "NO"      # its own puts as-queue are non-persistent
            self.temporary_owners[name] = owner
        attrs["DESCR"] = d["attrs"]["DESCR"] or f"dynamic queue from {model}"
        definition = await self.define_queue(name, attrs)
        return definition

    async def close_dynamic(self: DynamicHost, name: str, *, delete: bool = False) -> bool:
        """Close a dynamic queue made by ``open_model``: a temporary one is
        deleted with its messages, a permanent one only when ``delete``
        (MQCO_DELETE_PURGE). Returns whether it was deleted."""
        d = self.objects.get(name)
        if d is None or d["type"] != "QLOCAL":
            return False
        deftype = d["attrs"].get("DEFTYPE", "PREDEFINED")
        if deftype == "TEMPDYN":
            # others' open handles (a responder's) do not keep it, as MQ's
            # MQCO_DELETE of a temporary dynamic queue
            # remembered first: the delete awaits its force and its store's removal,
            # and a SEND meanwhile must not define the name again
            self.deleted_temporary[name] = None
            try:
                await self.delete_queue(name, purge=True, handles=False)
            except BaseException:
                self.deleted_temporary.pop(name, None)
                raise
            self.temporary_owners.pop(name, None)
            while len(self.deleted_temporary) > MAX_REMEMBERED_DELETIONS:
                del self.deleted_temporary[next(iter(self.deleted_temporary))]
            return True
        if delete and deftype == "PERMDYN":
            await self.delete_queue(name, purge=True)
            return True
        return False

    async def settle_dynamic_queues(self: DynamicHost) -> None:
        """(start, after restart recovery) The temporary dynamic queues left by
        the last run deleted; SYSTEM.DEFAULT.MODEL.QUEUE defined if missing."""
        left = sorted(n for n, d in self.objects.items() if d["type"] == "QLOCAL"
                      and d["attrs"].get("DEFTYPE") == "TEMPDYN")
        for name in left:
            q = self.queues.get(name)
            depth = q.depth if q is not None else 0
            await self.delete_queue(name, purge=True)
            self.oplog.emit("HMQ7731I", f"temporary dynamic queue {name} deleted at restart "
                            f"({depth} non-persistent message(s) with it): temporary dynamic "
                            "queues do not outlive the connection that made them")
        if QMGR_OBJECT in self.objects and DEFAULT_MODEL_QUEUE not in self.objects:
            await self.define_object("QMODEL", DEFAULT_MODEL_QUEUE,
                                     {"DESCR": "default model queue", "DEFTYPE": "TEMPDYN"})
            self.oplog.emit("HMQ7732I", f"model queue {DEFAULT_MODEL_QUEUE} defined: every "
                            "queue manager has it")
