"""One STOMP connection: frames in, effects on the core, frames out.

The connection is an asyncio protocol on the queue manager's event loop and
calls the core directly, the same core the embedded API uses. Frames are
applied strictly in arrival order, each in one synchronous step where it can
be (``put_nowait``, ``get_nowait``, ``commit_nowait``); the force that makes a
step durable is shared with everything else appended meanwhile (group commit),
and its RECEIPT is sent once that force is done. Receipts leave in the order
their frames came. A frame that needs to wait (a queue being defined on first
use) holds back the frames behind it until it is done.

Delivery. A subscription with ``ack:auto`` gets messages outside any unit of
work: the message is gone when it is sent. With ``ack:client`` or
``ack:client-individual`` each delivery is a get under a unit of work of its
own, owned by this connection; ACK commits it (inside a transaction, at the
transaction's COMMIT, in the same COMMIT record), NACK, UNSUBSCRIBE, a lost
connection or a crash backs it out, which counts the backout and redelivers
the message or moves it at BOTHRESH. At most ``prefetch-count`` deliveries of a
subscription await acknowledgement; with ``ack:auto`` the transport's write
buffer is the window. While the client is not reading, the server stops
reading from it too, so a slow consumer or a flood of sends cannot make the
server's memory grow.

Every error is an ERROR frame naming what was wrong, after which the
connection is closed (STOMP 1.2 §ERROR); what it left unfinished is backed out.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..core.connections import Connection, new_conn_id
from ..core.engine import MessageMatch, UnitOfWork
from ..core.objects import DEFAULT_LOCAL_QUEUE, check_name
from ..errors import HarbormqError, InvalidAttribute, UnknownObject
from ..log.records import Message
from .frames import (
    Frame,
    FrameError,
    FrameParser,
    Limits,
    encode_frame,
    escape,
    receipt_frame,
)

if TYPE_CHECKING:
    from .listener import StompService

SUPPORTED_VERSIONS = ("1.0", "1.1", "1.2")
SERVER_NAME = "harbormq/0.1"

#: SEND headers that are part of the protocol or the descriptor; all others
#: travel as user properties
_RESERVED = frozenset({
    "destination", "transaction", "receipt", "content-length", "content-type", "persistent",
    "priority", "expires", "correlation-id", "reply-to", "message-id", "subscription", "ack",
    "id", "redelivered", "timestamp", "backout-count",
})
_SELECTOR = re.compile(r"^\s*(JMSCorrelationID|JMSMessageID)\s*=\s*'((?:[^']|'')*)'\s*$",
                       re.IGNORECASE)
#: headers a MESSAGE sets itself; user properties of the same name are not sent
_MESSAGE_HEADERS = frozenset({
    "subscription", "destination", "message-id", "ack", "redelivered", "backout-count",
    "persistent", "priority", "timestamp", "expires", "correlation-id", "reply-to",
    "content-type", "content-length",
})
#: frames waiting for a force, at most, before deliveries pause (memory bound)
_MAX_HELD = 512
#: deliveries sent in one go before other connections get a turn
_PUMP_BATCH = 64


class ProtocolError(HarbormqError):
    msgid = "HMQ9501E"


@dataclass(slots=True)
class Delivery:
    ack_id: str
    msg_hex: str
    sub: "Subscription"
    uow: UnitOfWork
    #: the transaction whose COMMIT will acknowledge (or NACK) it, if any
    txn: str | None = None


@dataclass
class Subscription:
    id: str
    queue: str
    ack: str                              # auto | client | client-individual
    prefetch: int
    match: MessageMatch | None
    outstanding: "OrderedDict[str, Delivery]" = field(default_factory=OrderedDict)
    listener: object = None
    #: "MESSAGE", then its subscription and destination headers
    frame_prefix: str = ""


@dataclass
class Transaction:
    name: str
    uow: UnitOfWork
    acks: list[Delivery] = field(default_factory=list)
    nacks: list[Delivery] = field(default_factory=list)


class StompConnection(asyncio.Protocol):
    def __init__(self, service: "StompService", listener_name: str):
        self.service = service
        self.core = service.core
        self.settings = service.settings
        self.listener_name = listener_name
        self.loop = service.loop
        s = self.settings
        self.parser = FrameParser(Limits(s.max_frame_bytes, s.max_headers, s.max_header_bytes))
        self.transport: asyncio.Transport | None = None
        self.info: Connection | None = None
        self.version: str | None = None      # set by CONNECT
        self.user = ""
        self.groups: list[str] = []
        self.is_admin = False                # anonymous loopback: the owner, unchecked
        self._principal = None               # set by CONNECT's authentication
        self.subscriptions: dict[str, Subscription] = {}
        self.deliveries: dict[str, Delivery] = {}     # ack id -> delivery (1.2)
        self.by_msg_id: dict[str, Delivery] = {}      # message-id -> delivery (1.0/1.1)
        self.transactions: dict[str, Transaction] = {}
        self._ack_seq = 0
        #: frames waiting for a log force: (future | None, frame bytes), in order
        self._held: deque = deque()
        self._held_full = False
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._pending_frames: deque[Frame] = deque()
        self._blocked = False                # a frame is waiting for async work
        self._write_paused = False
        self._reading_paused = False
        self.closed = False
        self._closing = False
        self._disconnecting = False
        self.last_recv = time.monotonic()
        self.last_send = time.monotonic()
        self._timers: list[asyncio.TimerHandle] = []
        self._output_queues: set[str] = set()
        self._destinations: dict[str, str] = {}     # destination header -> queue name

    # ------------------------------------------------------------------ transport

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        peer_text = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer or "")
        self.info = Connection(new_conn_id(), "stomp", peer=peer_text,
                               listener=self.listener_name, uows=self._owned_uows,
                               stop=self.stop)
        transport.set_write_buffer_limits(high=256 * 1024, low=64 * 1024)
        if len(self.service.connections) >= self.settings.max_connections:
            self.fail(f"the queue manager has reached its limit of "
                      f"{self.settings.max_connections} connections (stomp.max_connections)")
            return
        self.service.connections.add(self)
        # a client that never sends CONNECT is dropped
        self._timers.append(self.loop.call_later(max(5.0, self.settings.heartbeat_ms / 1000),
                                                 self._connect_deadline))

    def _connect_deadline(self) -> None:
        if self.version is None and not self.closed:
            self.fail("no CONNECT frame arrived in time")

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        self.last_recv = time.monotonic()
        try:
            frames = self.parser.feed(data)
        except FrameError as exc:
            self.fail(str(exc))
            return
        if frames:
            self._pending_frames.extend(frames)
            self._process_frames()

    def pause_writing(self) -> None:
        self._write_paused = True
        self._pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        if not self._blocked:
            self._resume_reading()
        for sub in list(self.subscriptions.values()):
            self._pump(sub)

    def _pause_reading(self) -> None:
        if not self._reading_paused and self.transport is not None and not self.closed:
            self._reading_paused = True
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._reading_paused and self.transport is not None and not self.closed:
            self._reading_paused = False
            self.last_recv = time.monotonic()
            self.transport.resume_reading()

    def connection_lost(self, exc) -> None:
        self.closed = True
        self._closing = True
        for t in self._timers:
            t.cancel()
        self.service.connections.discard(self)
        self.core.connections.remove(self.info)
        self._release_everything()

    # ------------------------------------------------------------------ output

    def _send(self, data: bytes) -> None:
        if self.closed:
            return
        self._out.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._out and not self.closed:
            self.transport.write(b"".join(self._out))
            self.last_send = time.monotonic()
        self._out.clear()

    def _frame(self, command: str, headers, body: bytes = b"") -> bytes:
        return encode_frame(command, headers, body, self.version or "1.2")

    def _receipt(self, frame: Frame, forced: asyncio.Future | None) -> None:
        """Send the RECEIPT for ``frame`` once ``forced`` (None: nothing to wait for)
        is done, in order with every frame held before it."""
        receipt = frame.headers.get("receipt")
        if receipt is not None:
            self._send_after(forced, receipt_frame(receipt, self.version))

    def _send_after(self, forced: asyncio.Future | None, out: bytes) -> None:
        """Send ``out`` once the log force ``forced`` is done. Frames leave in the
        order they were made, so a frame held for a force holds back the ones
        behind it."""
        if forced is None and not self._held:
            self._send(out)
            return
        if forced is not None and forced.done() and not self._held and \
                forced.exception() is None:
            self._send(out)
            return
        # the forces of one loop turn share a future: a run of frames held behind
        # it needs one callback (a done future may have run its callback already)
        known = bool(self._held) and forced is not None and not forced.done() \
            and self._held[-1][0] is forced
        self._held.append((forced, out))
        if forced is not None and not known:
            forced.add_done_callback(self._release_held)

    def _release_held(self, _fut=None) -> None:
        while self._held:
            fut, out = self._held[0]
            if fut is not None and not fut.done():
                return
            self._held.popleft()
            if fut is not None and fut.exception() is not None:
                self._closing = False   # this failure must still be reported
                self.fail(f"the log could not be forced: {fut.exception()}")
                return
            if out is not None:
                self._send(out)
        if self._held_full and not self._closing:
            self._held_full = False
            for sub in list(self.subscriptions.values()):
                self._pump(sub)
        if self._disconnecting:
            self._flush()
            if self.transport is not None:
                self.transport.close()

    def fail(self, message: str, *, frame: Frame | None = None, detail: str = "") -> None:
        """Send ERROR and close; nothing more is read from this connection."""
        if self._closing:
            return
        self._closing = True
        headers = {"message": message[:500].replace("\n", " ")}
        if frame is not None and "receipt" in frame.headers:
            headers["receipt-id"] = frame.headers["receipt"]
        body = ((detail or message) + "\n").encode()
        headers["content-type"] = "text/plain"
        self._send(self._frame("ERROR", headers, body))
        self._flush()
        self._pending_frames.clear()
        if self.transport is not None:
            self.transport.close()

    def stop(self, reason: str = "stopped by the administrator (STOP CONN)") -> None:
        """STOP CONN: end the connection; its unfinished work is backed out."""
        self.fail(f"connection {self.info.conn_id} {reason}")

    # ------------------------------------------------------------------ frames in

    def _process_frames(self) -> None:
        while self._pending_frames and not self._blocked and not self._closing:
            frame = self._pending_frames.popleft()
            try:
                waiting = self._dispatch(frame)
            except (HarbormqError, FrameError) as exc:
                self.fail(str(exc), frame=frame)
                return
            except Exception as exc:   # a bug must not take the queue manager down
                self.core.oplog.emit("HMQ9502E", f"STOMP connection {self.info.conn_id}: "
                                     f"{frame.command} failed: {exc!r}")
                self.fail(f"internal error processing {frame.command}: {exc!r}", frame=frame)
                return
            if waiting is not None:
                self._blocked = True
                self._pause_reading()
                self.loop.create_task(self._resume_after(waiting, frame))
                return

    async def _resume_after(self, coro, frame: Frame) -> None:
        try:
            await coro
        except HarbormqError as exc:
            self.fail(str(exc), frame=frame)
            return
        except Exception as exc:
            self.fail(f"internal error processing {frame.command}: {exc!r}", frame=frame)
            return
        self._blocked = False
        if not self._write_paused:
            self._resume_reading()
        self._pending_frames.appendleft(frame)   # now it can complete synchronously
        self._process_frames()

    def _dispatch(self, frame: Frame):
        cmd = frame.command
        if self.version is None:
            if cmd not in ("CONNECT", "STOMP"):
                raise ProtocolError(f"{cmd} before CONNECT: the first frame must be CONNECT "
                                    "or STOMP")
            return self.on_connect(frame)
        handler = getattr(self, "on_" + cmd.lower(), None)
        if handler is None or cmd in ("CONNECT", "STOMP"):
            raise ProtocolError(f"{cmd}: already connected")
        return handler(frame)

    @staticmethod
    def _required(frame: Frame, name: str) -> str:
        value = frame.headers.get(name)
        if value is None or value == "":
            raise ProtocolError(f"{frame.command} frame is missing the required header "
                                f"'{name}'")
        return value

    # ------------------------------------------------------------------ CONNECT

    def on_connect(self, frame: Frame):
        accepted = frame.headers.get("accept-version", "1.0")
        offered = [v.strip() for v in accepted.split(",")]
        common = [v for v in SUPPORTED_VERSIONS if v in offered]
        if not common:
            self.version = "1.2"
            headers = {"version": ",".join(SUPPORTED_VERSIONS),
                       "message": f"unsupported STOMP version(s) {accepted}; this server "
                                  f"speaks {', '.join(SUPPORTED_VERSIONS)}"}
            self._send(self._frame("ERROR", headers, b"unsupported protocol version\n"))
            self._closing = True
            self._flush()
            self.transport.close()
            return None
        version = common[-1]
        if self._principal is None:
            # scrypt takes tens of milliseconds: never on the event loop
            return self._authenticate(frame, version)
        principal = self._principal
        self.user = principal.user
        self.groups = list(principal.groups)
        self.is_admin = principal.anonymous
        self.version = version
        self.parser.version = version
        self.info.user = self.user
        self.info.app = frame.headers.get("client-id") or frame.headers.get("host", "")
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
                self._timers.append(self.loop.call_later(send_ms / 1000, self._beat, send_ms))
            if recv_ms:
                self._timers.append(self.loop.call_later(recv_ms / 1000, self._check_alive,
                                                         recv_ms))
        self._send(self._frame("CONNECTED", {"version": version, "server": SERVER_NAME,
                                             "session": self.info.conn_id, **hb_headers}))
        # frames the client sent behind CONNECT, now parsed in the agreed version
        self._pending_frames.extend(self.parser.feed(b""))
        return None

    async def _authenticate(self, frame: Frame, version: str) -> None:
        login = frame.headers.get("login")
        peer_host = self.info.peer.rsplit(":", 1)[0]
        try:
            self._principal = await self.loop.run_in_executor(None, lambda: (
                self.service.security.authenticate(
                    login, frame.headers.get("passcode", ""), connauth=self.settings.connauth,
                    peer_host=peer_host)))
        except HarbormqError:
            self.version = version
            self.core.oplog.emit("HMQ5534E", f"STOMP connection from {self.info.peer} refused: "
                                 f"{'user ' + repr(login) if login else 'anonymous'} failed "
                                 "authentication")
            raise

    @staticmethod
    def _heartbeat(value: str) -> tuple[int, int]:
        try:
            cx, cy = (int(p) for p in value.split(","))
        except ValueError:
            raise ProtocolError(f"heart-beat header {value!r} is not two numbers "
                                "'cx,cy'") from None
        if cx < 0 or cy < 0:
            raise ProtocolError(f"heart-beat header {value!r} has a negative value")
        return cx, cy

    def _beat(self, every_ms: int) -> None:
        if self.closed:
            return
        if time.monotonic() - self.last_send >= every_ms / 1000 * 0.9:
            self._send(b"\n")
        self._timers.append(self.loop.call_later(every_ms / 1000, self._beat, every_ms))

    def _check_alive(self, every_ms: int) -> None:
        if self.closed:
            return
        if self._reading_paused:
            # we stopped reading (the client is not reading its MESSAGEs fast
            # enough): its heart-beats wait unread, so silence proves nothing
            self.last_recv = time.monotonic()
        elif time.monotonic() - self.last_recv > 2 * every_ms / 1000:
            self.fail(f"no frame or heart-beat from the client for {2 * every_ms} ms")
            return
        self._timers.append(self.loop.call_later(every_ms / 1000, self._check_alive,
                                                 every_ms))

    # ------------------------------------------------------------------ queues

    def _queue_name(self, frame: Frame) -> str:
        dest = frame.headers.get("destination")
        name = self._destinations.get(dest)
        if name is not None:
            return name
        dest = self._required(frame, "destination")
        if not dest.startswith("/queue/"):
            raise ProtocolError(f"destination {dest!r} is not supported: use /queue/NAME")
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
        if name in self.core.queues:
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

    # ------------------------------------------------------------------ SEND

    def on_send(self, frame: Frame):
        name = self._queue_name(frame)
        self._authorize(name, "put")
        define = self._needs_define(name)
        if define is not None:
            return define
        h = frame.headers
        txn = None
        if "transaction" in h:
            txn = self._transaction(frame)
        msg = self._message(frame, name)
        if name not in self._output_queues:
            self._output_queues.add(name)
            self.info.open(name, "output")
        _msg, forced = self.core.put_nowait(name, msg, txn.uow if txn else None)
        self._receipt(frame, forced)
        return None

    def _message(self, frame: Frame, queue: str) -> Message:
        h = frame.headers
        q = self.core.queue(queue)
        priority = None
        if "priority" in h:
            try:
                priority = int(h["priority"])
            except ValueError:
                raise ProtocolError(f"priority {h['priority']!r} is not a number 0-9") from None
            if not 0 <= priority <= 9:
                raise ProtocolError(f"priority {priority} is out of range 0-9")
        persistent = None
        if "persistent" in h:
            value = h["persistent"].lower()
            if value not in ("true", "false"):
                raise ProtocolError(f"persistent {h['persistent']!r} must be true or false")
            persistent = value == "true"
        priority, persistent = self.core.defaults_for(q, priority, persistent)
        expiry_ns = 0
        if h.get("expires", "0") not in ("", "0"):
            try:
                expiry_ns = int(h["expires"]) * 1_000_000
            except ValueError:
                raise ProtocolError(f"expires {h['expires']!r} is not a time in milliseconds "
                                    "since the epoch") from None
        props = {k: v for k, v in h.items() if k not in _RESERVED}
        return Message(body=frame.body, correl_id=h.get("correlation-id", "").encode(),
                       priority=priority, persistent=persistent, expiry_ns=expiry_ns,
                       reply_to=h.get("reply-to", ""), format=h.get("content-type", ""),
                       properties=props)

    # ------------------------------------------------------------------ subscriptions

    def on_subscribe(self, frame: Frame):
        name = self._queue_name(frame)
        sub_id = frame.headers.get("id")
        if sub_id is None:
            if self.version != "1.0":
                self._required(frame, "id")
            sub_id = frame.headers["destination"]
        if sub_id in self.subscriptions:
            raise ProtocolError(f"subscription id {sub_id!r} is already in use on this "
                                "connection")
        if len(self.subscriptions) >= self.settings.max_subscriptions:
            raise ProtocolError(f"this connection has {len(self.subscriptions)} "
                                "subscriptions, the limit (stomp.max_subscriptions)")
        ack = frame.headers.get("ack", "auto")
        if ack not in ("auto", "client", "client-individual"):
            raise ProtocolError(f"ack mode {ack!r} is not one of auto, client, "
                                "client-individual")
        self._authorize(name, "get")
        define = self._needs_define(name)
        if define is not None:
            return define
        prefetch = self._prefetch(frame)
        match = self._selector(frame.headers.get("selector"))
        q = self.core.queue(name)
        sub = Subscription(sub_id, name, ack, prefetch, match)
        sub.frame_prefix = (f"MESSAGE\nsubscription:{escape(sub_id, self.version)}\n"
                            f"destination:{escape('/queue/' + name, self.version)}\n")
        sub.listener = lambda s=sub: self._pump(s)
        q.listeners.append(sub.listener)
        self.subscriptions[sub_id] = sub
        self.info.open(name, "input")
        self._receipt(frame, None)
        self._pump(sub)
        return None

    def _prefetch(self, frame: Frame) -> int:
        raw = frame.headers.get("prefetch-count", frame.headers.get("activemq.prefetchSize"))
        if raw is None:
            return self.settings.default_prefetch
        try:
            value = int(raw)
        except ValueError:
            raise ProtocolError(f"prefetch-count {raw!r} is not a number") from None
        if not 1 <= value <= self.settings.max_prefetch:
            raise ProtocolError(f"prefetch-count {value} is out of range "
                                f"1-{self.settings.max_prefetch} (stomp.max_prefetch)")
        return value

    @staticmethod
    def _selector(text: str | None) -> MessageMatch | None:
        if text is None:
            return None
        m = _SELECTOR.match(text)
        if m is None:
            raise ProtocolError(f"selector {text!r} is not supported: use "
                                "JMSCorrelationID = '...' or JMSMessageID = '...'")
        field_name, value = m.group(1).lower(), m.group(2).replace("''", "'")
        if field_name == "jmsmessageid":
            hex_id = value[3:] if value.upper().startswith("ID:") else value
            try:
                return MessageMatch(msg_id=bytes.fromhex(hex_id))
            except ValueError:
                raise ProtocolError(f"JMSMessageID {value!r} is not a message id "
                                    "(hex, as sent in message-id)") from None
        return MessageMatch(correl_id=value.encode())

    def on_unsubscribe(self, frame: Frame):
        sub_id = frame.headers.get("id")
        if sub_id is None:
            if self.version != "1.0":
                self._required(frame, "id")
            sub_id = frame.headers.get("destination", "")
        sub = self.subscriptions.get(sub_id)
        if sub is None:
            raise ProtocolError(f"UNSUBSCRIBE: no subscription {sub_id!r} on this connection")
        self._end_subscription(sub)
        self._receipt(frame, None)
        return None

    def _end_subscription(self, sub: Subscription) -> None:
        self.subscriptions.pop(sub.id, None)
        q = self.core.queues.get(sub.queue)
        if q is not None and sub.listener in q.listeners:
            q.listeners.remove(sub.listener)
        self.info.close(sub.queue, "input")
        for d in list(sub.outstanding.values()):
            if d.txn is not None and d.txn in self.transactions:
                continue    # its transaction decides it at COMMIT or ABORT
            self._forget(d)
            self._back_out(d.uow)

    def _pump(self, sub: Subscription) -> None:
        """Deliver what the subscription's window allows."""
        if self._closing or self._write_paused or self.subscriptions.get(sub.id) is not sub:
            return
        core = self.core
        q = core.queues.get(sub.queue)
        auto = sub.ack == "auto"
        sent = 0
        while sent < _PUMP_BATCH:
            if len(self._held) >= _MAX_HELD:
                self._held_full = True    # _release_held pumps again
                return
            if not auto and len(sub.outstanding) >= sub.prefetch:
                return
            if q is not None and q.depth - len(q.locked) <= 0:
                return          # nothing committed and unlocked: no get can succeed
            uow = None
            try:
                if auto:
                    msg, _forced = core.get_nowait(sub.queue, None, match=sub.match)
                else:
                    uow = core.begin(owner=self._owner)
                    msg, _forced = core.get_nowait(sub.queue, uow, match=sub.match)
                    if msg is None:
                        core.discard_empty(uow)
            except HarbormqError as exc:
                if uow is not None and not uow.ops:
                    core.discard_empty(uow)
                self.fail(f"subscription {sub.id} on {sub.queue}: {exc}")
                return
            if msg is None:
                return
            self._deliver(sub, msg, uow)
            sent += 1
            if self.transport.get_write_buffer_size() > 256 * 1024:
                self._flush()
                if self._write_paused:
                    return
        # more may be waiting: give other connections a turn first
        self.loop.call_soon(self._pump, sub)

    def _deliver(self, sub: Subscription, msg: Message, uow: UnitOfWork | None) -> None:
        """Send one MESSAGE. The hottest frame is built here directly: the
        subscription's constant headers once, the rest formatted per message
        (ids and numbers never need escaping)."""
        msg_hex = msg.msg_id.hex()
        parts = [sub.frame_prefix, "message-id:", msg_hex, "\n"]
        if uow is not None:
            self._ack_seq += 1
            ack_id = f"{self.info.conn_id}-{self._ack_seq}"
            d = Delivery(ack_id, msg_hex, sub, uow)
            sub.outstanding[ack_id] = d
            self.deliveries[ack_id] = d
            self.by_msg_id[msg_hex] = d
            if self.version == "1.2":
                parts += ("ack:", ack_id, "\n")
        if msg.backout_count:
            parts.append(f"redelivered:true\nbackout-count:{msg.backout_count}\n")
        else:
            parts.append("redelivered:false\n")
        parts.append(f"persistent:{'true' if msg.persistent else 'false'}\n"
                     f"priority:{msg.priority}\ntimestamp:{msg.put_time_ns // 1_000_000}\n"
                     f"expires:{msg.expiry_ns // 1_000_000}\n")
        version = self.version
        taken = _MESSAGE_HEADERS
        if msg.correl_id:
            value = msg.correl_id.decode("utf-8", "backslashreplace")
            parts += ("correlation-id:", escape(value, version), "\n")
        if msg.reply_to:
            parts += ("reply-to:", escape(msg.reply_to, version), "\n")
        if msg.format:
            parts += ("content-type:", escape(msg.format, version), "\n")
        for k, v in msg.properties.items():
            if k not in taken:
                parts += (escape(k, version, name=True), ":", escape(str(v), version), "\n")
        body = msg.body
        parts.append(f"content-length:{len(body)}\n\n")
        frame = "".join(parts).encode() + body + b"\0"
        # never show a message that a crash could still take back: a persistent
        # message leaves once its put, and its get, are on disk
        log = self.core.log
        forced = log.force() if msg.persistent and log.synced_lsn < log.end_lsn else None
        self._send_after(forced, frame)

    def _forget(self, d: Delivery) -> None:
        d.sub.outstanding.pop(d.ack_id, None)
        self.deliveries.pop(d.ack_id, None)
        self.by_msg_id.pop(d.msg_hex, None)

    # ------------------------------------------------------------------ ACK / NACK

    def _acked(self, frame: Frame) -> list[Delivery]:
        """The deliveries an ACK or NACK covers: one, or with ack:client every
        earlier delivery of the subscription too (cumulative)."""
        if self.version == "1.2":
            ack_id = self._required(frame, "id")
            d = self.deliveries.get(ack_id)
            what = f"id {ack_id!r}"
        else:
            msg_id = self._required(frame, "message-id")
            d = self.by_msg_id.get(msg_id)
            what = f"message-id {msg_id!r}"
        if d is None:
            raise ProtocolError(f"{frame.command}: {what} is not a delivery awaiting "
                                "acknowledgement on this connection")
        if d.sub.ack != "client":
            return [d]
        covered = []
        for other in d.sub.outstanding.values():
            covered.append(other)
            if other is d:
                break
        return covered

    def _defer_to_transaction(self, frame: Frame, covered: list[Delivery], verdicts: str) -> bool:
        """An ACK or NACK inside a transaction is carried out at its COMMIT:
        record it there (``verdicts``: "acks" or "nacks"); False outside one."""
        if "transaction" not in frame.headers:
            return False
        txn = self._transaction(frame)
        for d in covered:
            if d.txn is None:
                d.txn = txn.name
                getattr(txn, verdicts).append(d)
        self._receipt(frame, None)
        return True

    def on_ack(self, frame: Frame):
        covered = self._acked(frame)
        if self._defer_to_transaction(frame, covered, "acks"):
            return None
        covered = [d for d in covered if d.txn is None]
        forced = None
        for d in covered:
            self._forget(d)
            f = self.core.commit_nowait(d.uow)
            forced = f or forced
        self._receipt(frame, forced)
        self._refill(covered)
        return None

    def on_nack(self, frame: Frame):
        if self.version == "1.0":
            raise ProtocolError("NACK is not part of STOMP 1.0 (connect with "
                                "accept-version 1.1 or 1.2)")
        covered = self._acked(frame)
        if self._defer_to_transaction(frame, covered, "nacks"):
            return None
        covered = [d for d in covered if d.txn is None]
        for d in covered:
            self._forget(d)
            self._back_out(d.uow)
        self._receipt(frame, None)
        self._refill(covered)
        return None

    def _refill(self, done: list[Delivery]) -> None:
        for sub in {id(d.sub): d.sub for d in done}.values():
            self._pump(sub)

    def _back_out(self, uow: UnitOfWork) -> None:
        if uow.state in ("active", "prepared"):
            task = self.loop.create_task(self.core.backout(uow))
            self.service.backouts.add(task)
            task.add_done_callback(self._backout_done)

    def _backout_done(self, task: asyncio.Task) -> None:
        self.service.backouts.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.core.oplog.emit("HMQ9503E", f"STOMP connection {self.info.conn_id}: "
                                 f"backout failed: {task.exception()!r}")

    # ------------------------------------------------------------------ transactions

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

    # ------------------------------------------------------------------ DISCONNECT

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
        for txn in list(self.transactions.values()):
            for d in txn.acks + txn.nacks:
                d.txn = None
            self._back_out(txn.uow)
        self.transactions.clear()
        for sub in list(self.subscriptions.values()):
            self._end_subscription(sub)
        for name in self._output_queues:
            self.info.close(name, "output")
        self._output_queues.clear()

    def _owned_uows(self) -> list[UnitOfWork]:
        uows = [t.uow for t in self.transactions.values()]
        uows += [d.uow for d in self.deliveries.values()]
        return uows
