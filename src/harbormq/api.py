"""The embedded Python API: a queue manager running in this process.

    with harbormq.QueueManager.open("QM1") as qm:
        qm.define_queue("ORDERS", DEFPSIST="YES")
        qm.put("ORDERS", b"hello")
        with qm.begin() as uow:          # commits on success, backs out on error
            msg = uow.get("ORDERS")
            uow.put("AUDIT", msg.body)

The queue manager's state belongs to one asyncio event loop, run on a thread
of its own; every call here is handed to that loop and waits for its result,
so any number of application threads may call at once (their commits share
fsyncs). The STOMP server uses the same core on the same kind of loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
from pathlib import Path

from .config import QMConfig
from .core.connections import Connection, new_conn_id
from .core.queue import MessageMatch
from .core.uow import UnitOfWork
from .errors import HarbormqError, UnitOfWorkError
from .log.records import Message
from .qmgr.lifecycle import RunningQueueManager
from .recovery import images, need, recreate
from .recovery.restart import Progress, RestartReport
from .security import os_owner
from .unload.loadfile import LOAD_BATCH, load_into_core


class QueueManager:
    def __init__(self, config: QMConfig):
        self.config = config
        self.name = config.name
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever,
                                        name=f"harbormq-{config.name}", daemon=True)
        self._running: RunningQueueManager | None = None
        self.closed = False
        #: units of work begun through this object, with the thread that began each
        self._begun: list[tuple[UnitOfWork, int]] = []
        self._begun_lock = threading.Lock()
        #: temporary dynamic queues this object opened (deleted when it closes)
        self._temporary: list[str] = []

    # -- lifecycle -------------------------------------------------------------------

    @classmethod
    def open(cls, name: str, *, home: Path | str | None = None, console=None,
             progress: Progress | None = None) -> "QueueManager":
        """Start the queue manager in this process (restart recovery included);
        refuses if it is running anywhere else."""
        config = QMConfig.load(name, Path(home) if home else None)
        self = cls(config)
        self._thread.start()
        try:
            self._running = self._call(RunningQueueManager.start(config, console=console,
                                                                 progress=progress))
        except BaseException:
            self._shutdown_loop()
            raise
        self._register_connection()
        return self

    def _register_connection(self) -> None:
        """The application is a connection of its queue manager like a STOMP client
        (DISPLAY CONN, IPPROCS/OPPROCS); its units of work carry its connection id."""
        conn_id = new_conn_id()
        self._owner = f"API {conn_id}"
        self._conn = Connection(
            conn_id, "api", peer="(in process)", user=os_owner(),
            app=Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python",
            uows=lambda: [u for u in self.core.uows.values() if u.owner == self._owner])
        self._call_sync(self.core.connections.add, self._conn)

    @contextlib.contextmanager
    def _handle(self, queue: str, mode: str):
        """The queue is open for the duration of one call (a waiting get shows in
        IPPROCS while it waits); loop thread."""
        self._conn.open(queue, mode)
        try:
            yield
        finally:
            self._conn.close(queue, mode)

    @property
    def core(self):
        return self._running.core

    @property
    def restart_report(self) -> RestartReport:
        return self._running.report

    def close(self, mode: str = "controlled", timeout: float | None = None) -> None:
        """Stop the queue manager (``controlled`` waits for active units of
        work to end, up to ``timeout``)."""
        if self.closed:
            return
        try:
            if self._temporary and mode != "immediate":
                self._call(self._close_temporary())
            self._call(self._running.stop(mode, timeout=timeout))
            self._call(self._loop.shutdown_default_executor())
        finally:
            self.closed = True
            self._shutdown_loop()

    async def _close_temporary(self) -> None:
        """The temporary dynamic queues this connection made end with it."""
        for name in list(self._temporary):
            try:
                await self.core.close_dynamic(name)
            except HarbormqError:
                pass        # in use or stopping: the next restart deletes it
        self._temporary.clear()

    async def _back_out(self, uows: list[UnitOfWork]) -> None:
        for uow in uows:
            if uow.state != "active":
                continue
            try:
                await self.core.backout(uow, reason="an exception ended its application's "
                                                    "use of the queue manager")
            except HarbormqError:
                continue    # stopping already (preemptively): restart backs it out

    def _shutdown_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._loop.is_running():
            self._loop.close()

    def __enter__(self) -> "QueueManager":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        """An exception leaving the block backs out the units of work this
        thread began here and left active, then stops as ``close()`` does: a
        controlled stop waits for active units of work, and only this thread,
        now leaving, could end those (it waited forever). Units of work of
        other threads are waited for as ever; prepared ones stay in doubt."""
        if exc_type is not None and not self.closed:
            me = threading.get_ident()
            with self._begun_lock:
                mine = [u for u, thread in self._begun if thread == me]
            if mine:
                self._call(self._back_out(mine))
        self.close()

    def _call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _call_sync(self, fn, *args, **kwargs):
        async def run():
            return fn(*args, **kwargs)
        return self._call(run())

    # -- administration ----------------------------------------------------------------

    def define_queue(self, name: str, *, like: str | None = None, replace: bool = False,
                     **attrs) -> dict:
        return self._call(self.core.define_queue(name, attrs, like=like, replace=replace))

    def alter_queue(self, name: str, **attrs) -> dict:
        return self._call(self.core.alter_queue(name, attrs))

    def delete_queue(self, name: str, *, purge: bool = False) -> None:
        self._call(self.core.delete_queue(name, purge=purge))

    def clear_queue(self, name: str) -> int:
        return self._call(self.core.clear_queue(name))

    def alter_qmgr(self, **attrs) -> dict:
        return self._call(self.core.alter_qmgr(attrs))

    def define(self, objtype: str, name: str, *, replace: bool = False, **attrs) -> dict:
        """DEFINE of a definition type: QREMOTE, QALIAS, QMODEL, PROCESS, NAMELIST,
        CHANNEL, LISTENER (``define_queue`` defines a local queue)."""
        return self._call(self.core.define_object(objtype.upper(), name, attrs,
                                                  replace=replace))

    def open_model(self, model: str = "SYSTEM.DEFAULT.MODEL.QUEUE",
                   dynamic_name: str = "AMQ.*") -> str:
        """Open a model queue (MQOPEN of a QMODEL with a DynamicQName): a new
        dynamic queue made from it; returns its name. A temporary dynamic
        queue (the model's DEFTYPE(TEMPDYN)) is deleted by ``close_queue``,
        when this queue manager object closes, or at the next restart."""
        async def run():
            d = await self.core.open_model(model, dynamic_name, owner=self._owner)
            if d["attrs"]["DEFTYPE"] == "TEMPDYN":
                self._temporary.append(d["name"])
            return d["name"]
        return self._call(run())

    def close_queue(self, name: str, *, delete: bool = False) -> bool:
        """Close a dynamic queue (MQCLOSE): a temporary one is deleted with its
        messages, a permanent one only with ``delete`` (MQCO_DELETE_PURGE).
        Returns whether it was deleted."""
        async def run():
            deleted = await self.core.close_dynamic(name, delete=delete)
            if name in self._temporary:
                self._temporary.remove(name)
            return deleted
        return self._call(run())

    def queue_names(self) -> list[str]:
        return self._call_sync(lambda: sorted(self.core.queues))

    def queue_status(self, name: str) -> dict:
        def status():
            q = self.core.queue(name)
            now = time.time_ns()
            oldest = self.core.browse(name, limit=1)
            return {"QUEUE": name, "CURDEPTH": q.curdepth, "UNCOM": q.uncommitted_puts,
                    "LOCKED": len(q.locked),
                    "MSGAGE": (now - oldest[0].put_time_ns) // 1_000_000_000 if oldest else 0,
                    "LPUT": q.last_put_ns, "LGET": q.last_get_ns}
        return self._call_sync(status)

    def checkpoint(self) -> dict:
        return self._call(self.core.checkpoint("requested"))

    def load_file(self, queue: str, path: Path | str, *, batch: int = LOAD_BATCH) -> dict:
        """Put the messages of a load file (``*.hmqload``) on ``queue``, in batches
        of ``batch`` per unit of work; returns what was loaded."""
        return self._call(load_into_core(self.core, queue, Path(path), batch=batch))

    def flush(self) -> int:
        """Write every store's committed changes now (they are flushed lazily
        anyway, under the write-ahead rule); returns how many stores were written."""
        return self._call(self.core.flush_all())

    # -- media recovery (harbormq.recovery) ---------------------------------------------

    def image(self, obj_type: str = "all", name: str | None = None, progress=None) -> list[dict]:
        """Record media images (``harbormq image``); a linear log only."""
        return self._call(images.image_objects(self.core, obj_type, name,
                                              progress or images.no_progress))

    def recreate(self, obj_type: str = "all", name: str | None = None,
                 progress=None, *, dry_run: bool = False) -> list[dict]:
        """Recreate objects from their media images and the log (``harbormq
        recreate``); ``dry_run``: only the plan of each, nothing changed."""
        return self._call(recreate.recreate_objects(self.core, obj_type, name,
                                                    progress or images.no_progress,
                                                    dry_run=dry_run))

    def log_need(self) -> dict:
        """Which log extents are still needed (``harbormq log need``)."""
        return self._call_sync(lambda: need.log_need_facts(
            self.core.log, self.core.last_checkpoint.get("media")))

    def in_doubt(self) -> list[int]:
        return self._call_sync(lambda: [u.id for u in self.core.in_doubt()])

    def resolve(self, uow_id: int, *, commit: bool) -> None:
        self._call(self.core.resolve(uow_id, commit))

    # -- messages ---------------------------------------------------------------------

    def _message(self, queue: str, body, persistent, priority, msg_id, correl_id, expiry,
                 reply_to, format, properties) -> Message:
        prio, pers = self.core.defaults_for_name(queue, priority, persistent)
        if isinstance(body, str):
            body = body.encode()
        return Message(body=bytes(body), msg_id=_as_bytes(msg_id), correl_id=_as_bytes(correl_id),
                       priority=prio, persistent=pers,
                       expiry_ns=time.time_ns() + int(expiry * 1e9) if expiry else 0,
                       reply_to=reply_to or "", format=format or "",
                       properties=dict(properties or {}))

    def put(self, queue: str, body=b"", *, persistent: bool | None = None,
            priority: int | None = None, msg_id=None, correl_id=None,
            expiry: float | None = None, reply_to: str = "", format: str = "",
            properties: dict | None = None, _uow: UnitOfWork | None = None) -> Message:
        """Put one message; outside a unit of work a persistent put returns once it
        is on disk. ``expiry`` is in seconds."""
        async def run():
            msg = self._message(queue, body, persistent, priority, msg_id, correl_id, expiry,
                                reply_to, format, properties)
            with self._handle(queue, "output"):
                return await self.core.put(queue, msg, _uow)
        return self._call(run())

    def get(self, queue: str, *, wait: float = 0, msg_id=None, correl_id=None,
            _uow: UnitOfWork | None = None) -> Message | None:
        """Destructive get, by priority then arrival; None when nothing is there
        (after waiting up to ``wait`` seconds)."""
        match = MessageMatch(_as_bytes(msg_id) or None, _as_bytes(correl_id) or None)
        async def run():
            with self._handle(queue, "input"):
                return await self.core.get(queue, _uow, wait=wait, match=match)
        return self._call(run())

    def browse(self, queue: str, *, limit: int | None = None, msg_id=None,
               correl_id=None) -> list[Message]:
        match = MessageMatch(_as_bytes(msg_id) or None, _as_bytes(correl_id) or None)
        return self._call_sync(self.core.browse, queue, limit=limit,
                               match=match if match.ident is not None else None)

    def begin(self, owner: str = "") -> "UnitOfWorkHandle":
        uow = self._call_sync(self.core.begin, owner or self._owner)
        with self._begun_lock:      # (for __exit__; ended ones dropped as new ones begin)
            self._begun = [(u, t) for u, t in self._begun
                           if u.state in ("active", "prepared")]
            self._begun.append((uow, threading.get_ident()))
        return UnitOfWorkHandle(self, uow)


class UnitOfWorkHandle:
    """A unit of work (syncpoint). As a context manager it commits when the block
    ends normally and backs out when it raises."""

    def __init__(self, qm: QueueManager, uow: UnitOfWork):
        self.qm = qm
        self.uow = uow

    @property
    def id(self) -> int:
        return self.uow.id

    @property
    def state(self) -> str:
        return self.uow.state

    def put(self, queue: str, body=b"", **kw) -> Message:
        return self.qm.put(queue, body, _uow=self.uow, **kw)

    def get(self, queue: str, **kw) -> Message | None:
        return self.qm.get(queue, _uow=self.uow, **kw)

    def prepare(self) -> None:
        self.qm._call(self.qm.core.prepare(self.uow))

    def commit(self) -> None:
        self.qm._call(self.qm.core.commit(self.uow))

    def backout(self) -> None:
        self.qm._call(self.qm.core.backout(self.uow))

    def __enter__(self) -> "UnitOfWorkHandle":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.uow.state not in ("active", "prepared"):
            return
        if exc_type is None:
            self.commit()
        else:
            try:
                self.backout()
            except UnitOfWorkError:
                pass


def _as_bytes(value) -> bytes:
    if value is None:
        return b""
    if isinstance(value, str):
        return value.encode()
    return bytes(value)
