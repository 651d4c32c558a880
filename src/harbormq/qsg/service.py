"""The queue sharing group in a running member (``core.group``): connected
before restart recovery, so that restart can ask what PostgreSQL decided of
the units of work its log leaves open; started after it, when the shared
queues are registered with the core, the peers' watch and the listener of
NOTIFYs begin.

It is the core's ``SharedGroup`` (``core/shared.py``): a unit of work's
shared rows decided, prepared, resolved once its COMMIT record is forced,
backed out. What cannot reach the store waits for its return: a resolve or
a backout is done when the member reconnects (``pending``); meanwhile the
rows stay as they were, owned by this member.

Not here: the SQL (``structure.py``, ``group.py``), the member's lock and
heartbeat (``member.py``), recovering dead peers (``peers.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import threading

import psycopg

from ..config import QsgSettings
from ..errors import ObjectExists, UnknownObject
from . import copies
from . import group as qgroup
from .auto_recovery import AutoRecovery
from .errors import CFNotAvailable
from .group import definitions
from .member import MemberSession
from .peers import PeerRecovery, PeerWatch, recover_own
from .queue import SharedQueue
from .schema import AVAILABLE_CHANNEL, DEFINITIONS_CHANNEL
from .structure import connect

#: seconds between two clean-ups of this member's recorded outcomes
OUTCOMES_INTERVAL = 5.0


class QueueSharingGroup:
    """One member's part in its group (the core's ``SharedGroup``)."""

    def __init__(self, core, settings: QsgSettings):
        self.core = core
        self.settings = settings
        self.session = MemberSession(settings.db, settings.name, core.name,
                                     heartbeat_interval=settings.heartbeat_interval)
        self.session.on_reconnected = self._reconnected_soon
        self.watch: PeerWatch | None = None
        #: units of work whose rows this process did not make: restart rebuilt
        #: them (in flight or in doubt) and their rows wait for the log's decision
        self.restart_rows: set[int] = set()
        #: resolves and backouts waiting for the store: uow -> commit?
        self.pending: dict[int, bool] = {}
        self._stop = threading.Event()
        self._listener: threading.Thread | None = None
        #: RECAUTO(YES): failed structures recovered by the members themselves
        self.auto_recovery: AutoRecovery | None = None
        #: one sync of the copies of group objects at a time (qsg/copies.py)
        self._copies_lock = asyncio.Lock()

    @property
    def member_number(self) -> int:
        return self.session.number

    # -- before and after restart ----------------------------------------------------------

    @classmethod
    def connect(cls, core, settings: QsgSettings) -> "QueueSharingGroup":
        """Join the running group: the member's lock taken (refused when the name
        runs elsewhere), and ``core.group`` set; restart recovery comes next."""
        group = cls(core, settings)
        group.session.start()
        core.group = group
        return group

    def outcomes_after_redo(self, open_ids: list[int], log_end: int) -> dict[int, str]:
        """(restart, after redo of the log up to ``log_end``) The store's side of
        this member's units of work: what PostgreSQL decided of those the log
        leaves open; rows of units the log closed or never began are settled
        now; rows of open units wait for restart's decision.

        Prepared rows of a unit the log does not hold open: its COMMIT record
        comes right after the prepare, so the unit committed when the log
        reaches past where it was at the prepare (the COMMIT is then on disk,
        or checkpointed long ago); when the log ends at or before that point,
        nothing of the unit after its prepare reached the disk and it is backed
        out. Other rows (a unit in flight that never reached the log) are
        backed out."""
        store = self.session
        open_set = set(open_ids)
        prepared_at = store.prepared_lsns()
        for uow, states in store.in_flight().items():
            if uow in open_set:
                self.restart_rows.add(uow)
            elif any(s.startswith("PREP_") for s in states) and \
                    prepared_at.get(uow, 0) < log_end:
                store.resolve(uow, commit=True)
            else:
                store.backout(uow)
        outcomes = {}
        for uow in open_ids:
            o = store.outcome(uow)
            if o is not None:
                outcomes[uow] = o
        return outcomes

    async def start(self) -> None:
        """After restart: the outcomes restart has written are in the log now
        (forgotten in the store); the shared queues registered; the listener
        and the peers' watch started."""
        self.session.forget_outcomes()
        self.load_definitions()
        try:
            await self.sync_copies(at_start=True)     # QSGDISP(COPY): made, refreshed, deleted
        except CFNotAvailable as e:
            self.core.oplog.emit("HMQ5341W", f"the copies of group objects were not brought "
                                 f"in line at start ({e.message}); the listener's reconnection "
                                 "does it")
        loop = asyncio.get_running_loop()
        self._listener = threading.Thread(target=self._listen, args=(loop,),
                                          name=f"qsg-listen-{self.core.name}", daemon=True)
        self._listener.start()
        self.watch = PeerWatch(self.settings.db, self.core.name,
                               lambda msgid, text: loop.call_soon_threadsafe(
                                   self.core.oplog.emit, msgid, text),
                               heartbeat_timeout=self.settings.heartbeat_timeout)
        self.watch.on_recovered = lambda r: loop.call_soon_threadsafe(self._peer_recovered, r)
        self.watch.start()
        self.auto_recovery = AutoRecovery(
            self.settings.db, self.core.name, self.core.config.home,
            self.core.config.qm_dir / "qsg-recall",
            lambda msgid, text: loop.call_soon_threadsafe(self.core.oplog.emit, msgid, text))
        self.auto_recovery.start()
        self.core.spawn(self._forget_outcomes_loop())
        self.core.oplog.emit("HMQ5305I", f"queue manager {self.core.name} is member "
                             f"{self.member_number} of queue sharing group {self.settings.name} "
                             f"({len(self.core.shared_queues)} shared queues)")

    async def _forget_outcomes_loop(self) -> None:
        while True:
            await asyncio.sleep(OUTCOMES_INTERVAL)
            await self.forget_outcomes()

    async def forget_outcomes(self) -> None:
        """The outcomes PostgreSQL records for this member's units of work are
        needed only until their COMMIT records are forced: those of units
        below the oldest still open are removed once a force has covered them
        (every OUTCOMES_INTERVAL seconds: the table stays small)."""
        below = min(list(self.core.uows) or [self.core.next_uow_id])
        await self.core.log.force()
        try:
            self.session.forget_outcomes(below=below)
        except CFNotAvailable:
            pass          # the next round, or the next start, does it

    def stop(self, mode: str = "controlled") -> None:
        """End the member's part: a preemptive stop leaves its rows for its
        peers (as a crash would); any other backs out what it left in flight
        (restart backs those units of work out of its log too) and marks it
        STOPPED."""
        self._stop.set()
        if self.watch is not None:
            self.watch.stop()
        if self.auto_recovery is not None:
            self.auto_recovery.stop()
        if self._listener is not None:
            self._listener.join(timeout=5)
        if mode == "preemptive":
            self.session.close()
        else:
            try:
                with self.session._lock:
                    recover_own(self.session.connection(), self.core.name)
            except (CFNotAvailable, psycopg.Error):
                pass      # its peers or its restart back them out
            self.session.stop()
        self.core.group = None

    def load_definitions(self) -> None:
        """The group's shared queues, registered with the core (and the ones
        deleted in the group dropped)."""
        with self.session._lock:
            conn = self.session.connection()
            shared = {d["name"]: d for d in definitions(conn, "SHARED")}
        queues = self.core.shared_queues
        for name in [n for n in queues if n not in shared]:
            del queues[name]
        for name, d in shared.items():
            if name in queues:
                queues[name].redefine(d["attrs"])
            else:
                queues[name] = SharedQueue(name, d["attrs"], self.session)
        self.session.forget_structures()

    async def sync_copies(self, *, at_start: bool = False) -> copies.SyncReport:
        """This member's copies of the group's QSGDISP(GROUP) objects brought in
        line with the group (at start, and when a definition's change is told)."""
        async with self._copies_lock:
            with self.admin() as conn:
                group_defs = definitions(conn, "GROUP")
            return await copies.sync(self.core, group_defs, at_start=at_start)

    async def refresh_copy(self, group_object: dict) -> str:
        """DEFINE ... QSGDISP(COPY): this member's copy made the group object's
        again (``"made"``, ``"refreshed"`` or ``"current"``)."""
        d = group_object
        async with self._copies_lock:
            return await copies.write_copy(self.core, d["type"], d["name"], d["attrs"],
                                           d["version"], at_start=True)

    async def _sync_copies_quietly(self) -> None:
        if self.core.stopping or self.core.group is not self:
            return
        try:
            await self.sync_copies()
        except CFNotAvailable:
            pass          # the next announcement, or the reconnection, does it

    # -- administration (MQSC: admin/qsg_commands.py) ----------------------------------------

    @contextlib.contextmanager
    def admin(self):
        """The session's connection for one administrative step; a lost
        connection is MQRC 2345 (nothing in the group changed)."""
        with self.session._lock:
            conn = self.session.connection()
            try:
                yield conn
            except (psycopg.OperationalError, psycopg.InterfaceError) as e:
                self.session._lost(e)
                raise CFNotAvailable("the group's database was lost during the command "
                                     "(MQRC 2345 CF_NOT_AVAILABLE)") from e

    def define_structure(self, name: str, attrs: dict, replace: bool) -> dict:
        with self.admin() as conn:
            out = qgroup.define_structure(conn, name, attrs, replace=replace)
        self.session.forget_structures()
        return out

    def alter_structure(self, name: str, attrs: dict) -> dict:
        with self.admin() as conn:
            out = qgroup.alter_structure(conn, name, attrs)
        self.session.forget_structures()
        return out

    def delete_structure(self, name: str) -> None:
        with self.admin() as conn:
            qgroup.delete_structure(conn, name)
        self.session.forget_structures()

    def structures(self) -> list[dict]:
        with self.admin() as conn:
            return qgroup.structures(conn)

    def define_shared_queue(self, name: str, attrs: dict, replace: bool) -> None:
        with self.admin() as conn:
            qgroup.put_definition(conn, "QLOCAL", name, "SHARED", attrs, replace=replace)
        self.load_definitions()

    def delete_shared_queue(self, name: str) -> None:
        with self.admin() as conn:
            qgroup.delete_definition(conn, "QLOCAL", name)
        self.load_definitions()

    def members(self) -> list[dict]:
        with self.admin() as conn:
            return qgroup.members(conn)

    # -- group objects (MQSC: admin/groupdisp_commands.py) ----------------------------------

    def group_object(self, objtype: str, name: str) -> dict | None:
        """The QSGDISP(GROUP) definition of ``objtype`` ``name``, or None."""
        with self.admin() as conn:
            row = conn.execute("SELECT qsgdisp, attrs, version FROM hmq_definitions WHERE "
                               "objtype = %s AND name = %s", (objtype, name)).fetchone()
        if row is None or row[0] != "GROUP":
            return None
        return {"type": objtype, "name": name, "qsgdisp": "GROUP", "attrs": row[1],
                "version": row[2]}

    def group_objects(self, objtype: str) -> list[dict]:
        with self.admin() as conn:
            return [d for d in definitions(conn, "GROUP") if d["type"] == objtype]

    def put_group_object(self, objtype: str, name: str, attrs: dict, *, replace: bool) -> int:
        """Store a QSGDISP(GROUP) definition (complete, checked attributes);
        refused, nothing changed, when a shared queue or a group queue of
        another type has the name. Every member's copy follows (NOTIFY)."""
        with self.admin() as conn, conn.transaction():
            # one key of its own (the two-key locks (LOCK_CLASS, n) are the members')
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('hmq_definitions GROUP'))")
            types = copies.QUEUE_TYPES if objtype in copies.QUEUE_TYPES else (objtype,)
            for t, disp in conn.execute("SELECT objtype, qsgdisp FROM hmq_definitions WHERE "
                                        "name = %s AND objtype = ANY(%s)",
                                        (name, list(types))).fetchall():
                if disp != "GROUP" or t != objtype:
                    raise ObjectExists(f"{t}({name}) QSGDISP({disp}) is defined in the group: "
                                       f"a group {objtype} of that name is refused (MQRC 2100 "
                                       "OBJECT_ALREADY_EXISTS)", queue=name)
            return qgroup.put_definition(conn, objtype, name, "GROUP", attrs, replace=replace)

    def delete_group_object(self, objtype: str, name: str) -> None:
        with self.admin() as conn, conn.transaction():
            row = conn.execute("SELECT qsgdisp FROM hmq_definitions WHERE objtype = %s AND "
                               "name = %s FOR UPDATE", (objtype, name)).fetchone()
            if row is None or row[0] != "GROUP":
                raise UnknownObject(f"{objtype}({name}) QSGDISP(GROUP) is not defined in the "
                                    "group (MQRC 2085 UNKNOWN_OBJECT_NAME)", queue=name)
            qgroup.delete_definition(conn, objtype, name)

    # -- the core's SharedGroup ---------------------------------------------------------

    def commit(self, uow_id: int) -> None:
        """Decide a unit of work of shared queues alone. When the connection is
        lost during the statement, PostgreSQL may have committed it: the
        outcome is read on a new connection before the commit is called failed."""
        try:
            self.session.commit(uow_id)
        except CFNotAvailable:
            try:
                decided = self.session.outcome(uow_id)
            except CFNotAvailable:
                decided = None      # unreachable: see docs/qsg.md, "a commit whose answer is lost"
            if decided != "commit":
                raise

    def prepare(self, uow_id: int, log_lsn: int) -> None:
        self.session.prepare(uow_id, log_lsn)

    def resolve_later(self, uow_id: int, commit: bool, forced) -> None:
        self.restart_rows.discard(uow_id)
        if forced is None:
            self._resolve(uow_id, commit)
            return

        def done(f: asyncio.Future) -> None:
            if not f.cancelled() and f.exception() is None:
                self._resolve(uow_id, commit)
        forced.add_done_callback(done)

    def backout(self, uow_id: int) -> None:
        self.restart_rows.discard(uow_id)
        self._resolve(uow_id, False)
        self._wake_all()

    def holds(self, uow_id: int) -> bool:
        return uow_id in self.restart_rows

    def _resolve(self, uow_id: int, commit: bool) -> None:
        try:
            self.session.resolve(uow_id, commit)
            self.pending.pop(uow_id, None)
        except CFNotAvailable as e:
            self.pending[uow_id] = commit
            self.core.oplog.emit("HMQ5320W", f"unit of work {uow_id}: its shared messages "
                                 f"wait for the group's database to be "
                                 f"{'committed' if commit else 'backed out'} ({e.message})")

    # -- the store lost and back -----------------------------------------------------------

    def _reconnected_soon(self) -> None:
        """(the session, on any thread) The main connection was made again."""
        try:
            self.core.loop.call_soon_threadsafe(self._reconnected)
        except RuntimeError:
            pass     # the loop is closed: the member is stopping

    def _reconnected(self) -> None:
        """Resolves and backouts that waited are done; units of work whose rows
        a peer backed out meanwhile end backed out (MQRC 2003)."""
        for uow_id, commit in list(self.pending.items()):
            self._resolve(uow_id, commit)
        for uow in list(self.core.uows.values()):
            if uow.state == "active" and uow.id in self.core.shared_uows:
                try:
                    outcome = self.session.outcome(uow.id)
                except CFNotAvailable:
                    return
                if outcome == "backout":
                    uow.rolled_back = ("its shared messages were backed out by a peer while "
                                       "the connection to the group's database was lost")
        self.core.oplog.emit("HMQ5321I", f"queue manager {self.core.name} is connected to "
                             f"queue sharing group {self.settings.name} again")
        self._wake_all()

    def _peer_recovered(self, r: PeerRecovery) -> None:
        for name in r.queues:
            q = self.core.shared_queues.get(name)
            if q is not None:
                q.available()

    def _wake_all(self) -> None:
        for q in self.core.shared_queues.values():
            q.reachable = True
            q.available()

    def _set_reachable(self, reachable: bool) -> None:
        """The listener lost or made its connection: consumers wait, or read
        the definitions again (changes told meanwhile were missed) and look."""
        if reachable:
            try:
                self.load_definitions()
            except CFNotAvailable:
                reachable = False
            else:
                self.core.spawn(self._sync_copies_quietly())    # changes told meanwhile
        for q in self.core.shared_queues.values():
            q.reachable = reachable
        if reachable:
            self._wake_all()

    def _notified(self, channel: str, payload: str) -> None:
        if channel == AVAILABLE_CHANNEL:
            q = self.core.shared_queues.get(payload)
            if q is not None:
                q.available()
        elif channel == DEFINITIONS_CHANNEL:
            if payload.startswith("CFSTRUCT") and self.auto_recovery is not None:
                self.auto_recovery.poke()     # a structure changed: failed, perhaps
            try:
                self.load_definitions()
            except CFNotAvailable:
                pass
            if not payload.startswith("CFSTRUCT"):
                self.core.spawn(self._sync_copies_quietly())

    def _listen(self, loop: asyncio.AbstractEventLoop) -> None:
        """The NOTIFY listener, on a connection and a thread of its own; each
        (re)connection wakes every shared queue (what was told meanwhile is lost)."""
        while not self._stop.is_set():
            conn = None
            try:
                conn = connect(self.settings.db, application=f"harbormq {self.core.name} listen")
                conn.execute(f"LISTEN {AVAILABLE_CHANNEL}")
                conn.execute(f"LISTEN {DEFINITIONS_CHANNEL}")
                loop.call_soon_threadsafe(self._set_reachable, True)
                while not self._stop.is_set():
                    for n in conn.notifies(timeout=0.5):
                        loop.call_soon_threadsafe(self._notified, n.channel, n.payload)
            except (CFNotAvailable, psycopg.Error):
                try:
                    loop.call_soon_threadsafe(self._set_reachable, False)
                except RuntimeError:
                    return
                self._stop.wait(0.5)
            except RuntimeError:
                return       # the loop closed under us: the member is stopping
            finally:
                if conn is not None:
                    conn.close()
