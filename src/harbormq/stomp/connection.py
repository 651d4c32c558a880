"""One STOMP connection: frames in, effects on the core, frames out.

The connection is an asyncio protocol on the queue manager's event loop and
calls the core directly, the same core the embedded API uses. Frames are
applied strictly in arrival order, each in one synchronous step where it can
be (``put_nowait``, ``get_nowait``, ``commit_nowait``); the force that makes a
step durable is shared with everything else appended meanwhile (group commit),
and its RECEIPT is sent once that force is done. Receipts leave in the order
their frames came. A frame that needs to wait (a queue being defined on first
use, a SEND to a full queue) holds back the frames behind it until it is done.

Producer flow control: a SEND that finds its queue full (MAXDEPTH) holds its
connection, reading nothing more from it, so a pipelining producer is slowed
through TCP rather than dropped, until the queue has room or
``stomp.full_queue_wait_ms`` passes; then it fails with MQRC 2053. Held
producers of a queue take the room it makes one at a time, in the order they
came (``LocalQueue.producers``). A persistent SEND is held the same way while
the circular log has no spare extent, until a checkpoint frees one
(``core/log_space.py``).

The connection is four parts: ``transport.py`` (bytes and frames, order,
held frames, backpressure, heart-beats), ``delivery.py`` (subscriptions,
deliveries, ACK and NACK), ``topics.py`` (SEND, SUBSCRIBE and UNSUBSCRIBE on
``/topic/``: publish/subscribe) and this module, the session: CONNECT and
authentication, SEND, transactions, DISCONNECT, and what a lost connection
leaves to back out. While the client is not reading, the server stops reading
from it too, so a slow consumer or a flood of sends cannot make the server's
memory grow.

Every error is an ERROR frame naming what was wrong, after which the
connection is closed (STOMP 1.2 §ERROR); what it left unfinished is backed out.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..core import aliases
from ..core.connections import Connection, new_conn_id
from ..core.engine import PutTarget
from ..core.objects import DEFAULT_LOCAL_QUEUE, check_name
from ..core.queue import LocalQueue
from ..core.uow import UnitOfWork
from ..errors import HarbormqError, InvalidAttribute, QueueFull, UnknownObject
from ..log.records import Message
from .delivery import Delivery, DeliveryMixin
from .frames import CLIENT_COMMANDS, Frame, Limits, receipt_frame
from .message_codec import Defaults, message_of_send
from .tempqueues import TempQueues
from .topics import TOPIC_PREFIX, TopicsMixin
from .transport import WRITE_HIGH, WRITE_LOW, FrameTransport, ProtocolError, error_parts

if TYPE_CHECKING:
    from .listener import StompService

SUPPORTED_VERSIONS = ("1.0", "1.1", "1.2")
SERVER_NAME = "harbormq/0.1"

@dataclass
class Transaction:
    name: str
    uow: UnitOfWork
    acks: list[Delivery] = field(default_factory=list)
    nacks: list[Delivery] = field(default_factory=list)


class HeldSend:
    """A SEND held because its queue is full: its place in the queue's line of
    held producers, and until when it may wait."""

    __slots__ = ("queue", "deadline", "waker")

    def __init__(self, queue: LocalQueue, deadline: float):
        self.queue = queue
        self.deadline = deadline
        self.waker: asyncio.Future | None = None

    def __call__(self) -> None:
        """The queue has room and this producer is first in line."""
        if self.waker is not None and not self.waker.done():
            self.waker.set_result(None)


class StompConnection(TopicsMixin, DeliveryMixin, FrameTransport):
    def __init__(self, service: "StompService", listener_name: str):
        s = service.settings
        super().__init__(service.loop,
                         Limits(s.max_frame_bytes, s.max_headers, s.max_header_bytes),
                         frame_timeout_s=s.frame_timeout_ms / 1000)
        self._init_deliveries()
        self._init_topics()
        self.service = service
        self.core = service.core
        self.settings = s
        self.listener_name = listener_name
        self.info: Connection | None = None
        self.user = ""
        self.groups: list[str] = []
        self.is_admin = False                # the owner (anonymous, its uid): unchecked
        self._principal = None               # set by CONNECT's authentication
        self._certified = None               # mutual TLS: the user its certificate maps to
        self._addresses: tuple = ((), None)  # (peer, local) as the socket sees them
        self.transactions: dict[str, Transaction] = {}
        self._output_queues: set[str] = set()
        self._destinations: dict[str, str] = {}     # destination header -> queue name
        #: the SEND waiting for room on a full queue (flow control), if any
        self._held_send: HeldSend | None = None
        #: until when the SEND held for log space may wait (log-space flow control)
        self._log_space_deadline: float | None = None
        #: /temp-queue/ destinations and their temporary dynamic queues
        self.temp_queues = TempQueues(self)

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        peer_text = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer or "")
        self._addresses = (peer if isinstance(peer, tuple) else (str(peer or ""),),
                           transport.get_extra_info("sockname"))
        self.info = Connection(new_conn_id(), "stomp", peer=peer_text,
                               listener=self.listener_name, uows=self._owned_uows,
                               stop=self.stop)
        transport.set_write_buffer_limits(high=WRITE_HIGH, low=WRITE_LOW)
        # until its CONNECT is done it counts against stomp.max_unauthenticated,
        # not max_connections (admission.py)
        refusal = self.service.admission.arrived(self)
        if refusal is not None:
            self.fail(refusal, linger=False)
            return
        self.service.connections.add(self)
        # mutual TLS: who the client certificate makes it, or a refusal before any frame
        self._certified, refusal = self.service.certificate_user(self.listener_name, transport)
        if refusal is not None:
            self.fail(refusal)
            return
        # a client that never sends CONNECT is dropped
        self._timers["connect"] = self.loop.call_later(
            self.settings.connect_timeout_ms / 1000, self._connect_deadline)

    def _connect_deadline(self) -> None:
        if self.version is None and not self.closed:
            self.fail(f"no CONNECT frame arrived within {self.settings.connect_timeout_ms} ms "
                      "(stomp.connect_timeout_ms)")

    def connection_lost(self, exc) -> None:
        self.closed = True
        self._closing = True
        for t in self._timers.values():
            t.cancel()
        self.service.connections.discard(self)
        self.service.admission.left(self)
        self.core.connections.remove(self.info)
        self._release_everything()

    def fail(self, message: str, **kw) -> None:
        # the held SEND will never be put: the next producer's turn, now, not
        # when the client has read the ERROR and closed
        self._leave_line()
        super().fail(message, **kw)

    def stop(self, reason: str = "stopped by the administrator (STOP CONN)") -> None:
        """STOP CONN: end the connection; its unfinished work is backed out."""
        self.fail(f"connection {self.info.conn_id} {reason}")

    def _dispatch(self, frame: Frame):
        cmd = frame.command
        if self.version is None:
            if cmd not in ("CONNECT", "STOMP"):
                raise ProtocolError(f"{cmd} before CONNECT: the first frame must be CONNECT "
                                    "or STOMP")
            return self.on_connect(frame)
        handler = _HANDLERS.get(cmd)
        if handler is None:
            raise ProtocolError(f"{cmd}: already connected")
        return getattr(self, handler)(frame)

    def on_connect(self, frame: Frame):
        accepted = frame.headers.get("accept-version", "1.0")
        offered = [v.strip() for v in accepted.split(",")]
        common = [v for v in SUPPORTED_VERSIONS if v in offered]
        if not common:
            self.version = "1.2"
            headers, body = error_parts(f"unsupported STOMP version(s) {accepted}; this "
                                        f"server speaks {', '.join(SUPPORTED_VERSIONS)}",
                                        frame)
            headers = {"version": ",".join(SUPPORTED_VERSIONS), **headers}
            self._send(self._frame("ERROR", headers, body))
            self._closing = True
            self._flush()
            self.transport.close()
            return None
        version = common[-1]
        if self._principal is None:
            timer = self._timers.pop("connect", None)
            if timer is not None:        # its CONNECT is here: authenticated, not dropped
                timer.cancel()
            self.service.admission.connect_started(self)
            # scrypt takes tens of milliseconds: never on the event loop
            return self._authenticate(frame, version)
        self.service.admission.admit(self)
        principal = self._principal
        self.user = principal.user
        self.groups = list(principal.groups)
        self.is_admin = principal.owner
        if principal.max_msg_length:          # the SVRCONN channel's MAXMSGL
            limits = self.parser.limits
            limits.max_frame_bytes = min(limits.max_frame_bytes,
                                         principal.max_msg_length + limits.max_header_bytes)
        self.version = version
        self.parser.version = version
        self.info.user = self.user
        self.client_id = frame.headers.get("client-id", "")
        self.info.app = self.client_id or frame.headers.get("host", "")
        self.core.connections.add(self.info)
        self._owner = f"STOMP {self.info.conn_id}"
        hb_headers = {}
        if version != "1.0":
            cx, cy = self._heartbeat(frame.headers.get("heart-beat", "0,0"))
            server_hb = self.settings.heartbeat_ms
            send_ms = max(server_hb, cy) if cy and server_hb else 0
            recv_ms = max(cx, server_hb) if cx and server_hb else 0
            hb_headers["heart-beat"] = f"{server_hb},{server_hb}"
            if send_ms:
                self._timers["beat"] = self.loop.call_later(send_ms / 1000, self._beat, send_ms)
            if recv_ms:
                self._timers["alive"] = self.loop.call_later(recv_ms / 1000,
                                                             self._check_alive, recv_ms)
        self._send(self._frame("CONNECTED", {"version": version, "server": SERVER_NAME,
                                             "session": self.info.conn_id, **hb_headers}))
        # the frames the client sent behind CONNECT are parsed from here on in the
        # agreed version (the transport takes them from the parser one by one)
        return None

    async def _authenticate(self, frame: Frame, version: str) -> None:
        """Who the CONNECT is (admission.py: the password check's own threads,
        the rate limit, the refusal in the operator log)."""
        peer, local = self._addresses
        try:
            self._principal = await self.service.admission.authenticate(
                self, frame.headers.get("login"), frame.headers.get("passcode", ""), peer=peer,
                local=local, certified=self._certified,
                # (a browser over WebSocket: its settings say connauth required)
                login_required=self.settings.connauth == "required")
        except HarbormqError:
            self.version = version
            raise

    def _queue_name(self, frame: Frame) -> str:
        dest = frame.headers.get("destination")
        name = self._destinations.get(dest)
        if name is not None:
            return name
        dest = self._required(frame, "destination")
        if not dest.startswith("/queue/"):
            raise ProtocolError(f"destination {dest!r} is not supported: use /queue/NAME or "
                                "/topic/TOPIC/STRING")
        name = dest[len("/queue/"):]
        try:
            check_name(name)
        except InvalidAttribute as exc:
            raise ProtocolError(f"destination {dest!r}: {exc}") from None
        if len(self._destinations) < 1024:     # a connection's working set, bounded
            self._destinations[dest] = name
        return name

    def _needs_define(self, name: str):
        """None when the queue exists; else the coroutine that defines it (or an
        error when queues are not defined on first use)."""
        if name in self.core.queues or self.core.is_queue_definition(name):
            return None
        if not self.settings.auto_define_queues:
            raise UnknownObject(f"queue {name} is not defined on queue manager "
                                f"{self.core.name} and stomp.auto_define_queues is false "
                                "(MQRC 2085 UNKNOWN_OBJECT_NAME)", queue=name)
        self._authorize(name, "crt", objtype="QMGR", object_name=self.core.name)
        return self._define(name)

    async def _define(self, name: str) -> None:
        if name not in self.core.queues:
            try:
                await self.core.define_queue(name, like=DEFAULT_LOCAL_QUEUE)
            except HarbormqError:
                if name not in self.core.queues:   # not a race with another definer
                    raise

    def _authorize(self, queue: str, authority: str, *, objtype: str = "QUEUE",
                   object_name: str | None = None) -> None:
        if self.is_admin:
            return
        self.service.security.require(self._principal, objtype, object_name or queue,
                                      authority)

    def on_send(self, frame: Frame):
        if (making := self.temp_queues.rewrite(frame, ("destination", "reply-to"))) is not None:
            return making
        if frame.headers.get("destination", "").startswith(TOPIC_PREFIX):
            return self._publish(frame)             # topics.py
        name = self._queue_name(frame)
        self._authorize(name, "put")
        define = self._needs_define(name)
        if define is not None:
            return define
        if (topic := aliases.topic_of(self.core.objects, name)) is not None:
            # an alias of a topic (TARGTYPE(TOPIC)): the SEND is a publication there
            frame.headers["destination"] = TOPIC_PREFIX + topic
            return self._publish(frame)             # topics.py
        h = frame.headers
        txn = None
        if "transaction" in h:
            txn = self._transaction(frame)
        msg, target = self._message(frame, name)
        if name not in self._output_queues:
            # open (OPPROCS) before any wait for room, as MQOPEN comes before MQPUT
            self._output_queues.add(name)
            self.info.open(name, "output")
        checked = bool(self.settings.full_queue_wait_ms)
        if checked:
            self.core.check_put_to(target, msg)    # what room cannot cure fails at once
            if self._must_wait(target.queue):
                return self._wait_for_room(target.queue)
        if msg.persistent and self.core.log_space_short():
            # out of the queue's line first: the room it was given goes to the next
            self._leave_line()
            return self._wait_for_log_space()
        self._leave_line()           # this SEND was held: it puts now, the next may go
        self._log_space_deadline = None
        _msg, forced = self.core.put_nowait(name, msg, txn.uow if txn else None,
                                            target=target, checked=checked)
        self._receipt(frame, forced)
        return None

    # -- flow control ------------------------------------------------------------------

    def _wait_for_log_space(self):
        """Hold this SEND (and the connection) while the circular log has no spare
        extent, up to ``tuning.log_space_wait_ms`` from its first hold; then
        dispatch it again."""
        if self._log_space_deadline is None:
            self._log_space_deadline = (time.monotonic() +
                                        self.core.config.tuning.log_space_wait_ms / 1000)
        return self.core.wait_for_log_space(self._log_space_deadline)

    def _must_wait(self, q: LocalQueue) -> bool:
        """The SEND must wait for room: the queue is full, or other producers were
        held on it first (they take the room first, in turn)."""
        held = self._held_send
        if held is not None and held.queue is not q:
            self._leave_line()       # the queue was replaced (recreated) meanwhile
            held = None
        if held is not None and q.producers and q.producers[0] is held:
            return q.full            # our turn: a put in between may have taken the room
        return held is not None or q.full or bool(q.producers)

    def _wait_for_room(self, q: LocalQueue):
        """Hold this SEND (and so the connection: nothing more is read from it)
        until the queue has room and it is first in line, then dispatch it again."""
        held = self._held_send
        if held is None:
            held = HeldSend(q, time.monotonic() + self.settings.full_queue_wait_ms / 1000)
            q.producers.append(held)
            self._held_send = held
        held.waker = self.loop.create_future()
        q.room_check()               # room already, and first in line: go at once
        return self._await_room(held)

    async def _await_room(self, held: HeldSend) -> None:
        try:
            await asyncio.wait_for(held.waker, max(0.0, held.deadline - time.monotonic()))
        except TimeoutError:
            if self._held_send is held:
                self._leave_line()
            q = held.queue
            raise QueueFull(f"queue {q.name} is full: MAXDEPTH is {q.attrs['MAXDEPTH']} "
                            f"and it had no room for {self.settings.full_queue_wait_ms} ms "
                            "(stomp.full_queue_wait_ms) (MQRC 2053 Q_FULL)",
                            queue=q.name) from None

    def _leave_line(self) -> None:
        """This connection's SEND is no longer held: out of its queue's line,
        and the next held producer may take the room."""
        held, self._held_send = self._held_send, None
        if held is None:
            return
        try:
            held.queue.producers.remove(held)
        except ValueError:
            pass
        if held.waker is not None and not held.waker.done():
            held.waker.set_result(None)      # a waiting _await_room ends (closing)
        held.queue.room_check()

    def _message(self, frame: Frame, queue: str) -> tuple[Message, PutTarget]:
        """The message a SEND puts, and where it goes (resolved once per SEND:
        the put itself and the flow control use the same answer)."""
        target = self.core.output_queue(queue)
        return self._message_from(frame, self.core.put_defaults, target.attrs), target

    def _message_from(self, frame: Frame, defaults: Defaults, where) -> Message:
        """The message of a SEND's headers and body (``message_codec.py``);
        ``defaults(where, priority, persistent)`` fills in what the headers
        leave out (a queue's or a topic's DEFPRTY and DEFPSIST)."""
        return message_of_send(frame.headers, frame.body, defaults, where)

    def _transaction(self, frame: Frame) -> Transaction:
        name = self._required(frame, "transaction")
        txn = self.transactions.get(name)
        if txn is None:
            raise ProtocolError(f"{frame.command}: transaction {name!r} has not begun on this "
                                "connection")
        return txn

    def on_begin(self, frame: Frame):
        name = self._required(frame, "transaction")
        if name in self.transactions:
            raise ProtocolError(f"BEGIN: transaction {name!r} is already in progress")
        self.transactions[name] = Transaction(
            name, self.core.begin(owner=f"STOMP {self.info.conn_id} tx {name}"))
        self._receipt(frame, None)
        return None

    def on_commit(self, frame: Frame):
        txn = self._transaction(frame)
        del self.transactions[txn.name]
        acks = txn.acks
        try:
            # refused (MQRC 2003) when the queue manager backed out the transaction
            # or one of its deliveries to release log space: nothing commits
            forced = self.core.commit_nowait(txn.uow, joined=[d.uow for d in acks])
        except HarbormqError:
            self._back_out(txn.uow)
            raise
        for d in acks:
            self._forget(d)
        for d in txn.nacks:
            self._forget(d)
            self._back_out(d.uow)
        self._receipt(frame, forced)
        self._refill(acks + txn.nacks)
        return None

    def on_abort(self, frame: Frame):
        txn = self._transaction(frame)
        del self.transactions[txn.name]
        for d in txn.acks + txn.nacks:
            d.txn = None          # unacknowledged again
            if self.subscriptions.get(d.sub.id) is not d.sub:
                self._forget(d)   # ...but its subscription is gone: back it out
                self._back_out(d.uow)
        self._back_out(txn.uow)
        self._receipt(frame, None)
        return None

    def on_disconnect(self, frame: Frame):
        """Back out what is unfinished, send the receipt once every earlier receipt
        has gone, then close."""
        self._closing = True
        self._disconnecting = True
        self._release_everything()
        # behind every frame still held; _release_held closes once they are gone
        self._held.append((None, receipt_frame(frame.headers["receipt"], self.version)
                           if "receipt" in frame.headers else None))
        self._release_held()
        return None

    def _release_everything(self) -> None:
        self._leave_line()
        for txn in list(self.transactions.values()):
            for d in txn.acks + txn.nacks:
                d.txn = None
            self._back_out(txn.uow)
        self.transactions.clear()
        for sub in list(self.subscriptions.values()):
            self._end_subscription(sub)
        self._end_topic_subscriptions()
        for name in self._output_queues:
            self.info.close(name, "output")
        self._output_queues.clear()
        self.temp_queues.release()        # after the backouts it waits for

    def _owned_uows(self) -> list[UnitOfWork]:
        uows = [t.uow for t in self.transactions.values()]
        uows += [d.uow for d in self.deliveries.values()]
        return uows


#: the method that applies each frame once connected (not one built per frame)
_HANDLERS = {cmd: "on_" + cmd.lower() for cmd in CLIENT_COMMANDS
             if cmd not in ("CONNECT", "STOMP")}
