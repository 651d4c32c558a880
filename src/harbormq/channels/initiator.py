"""The channel initiator (MQ's runmqchi and runmqlsr in one): runs the
sender channels and the listeners inside the queue manager's process, and
answers the channel commands (START/STOP/RESET/RESOLVE CHANNEL, START/STOP
LISTENER, DISPLAY CHSTATUS) for admin/commands.py (as ``core.channels``).

Every sender channel not stopped by the operator waits on its transmission
queue and starts when a message arrives there (MQ's triggering); a sender
with a batch in doubt starts at once, to resolve it. Listeners with
CONTROL(QMGR) start and stop with the queue manager.
"""

from __future__ import annotations

import asyncio

from ..core.engine import QueueManagerCore
from ..errors import HarbormqError, ObjectInUse
from ..security import Security
from . import sync
from .receiver import ReceiverSession
from .sender import ChannelStopped, SenderChannel


class ChannelError(HarbormqError):
    msgid = "HMQ9510E"


class ChannelInitiator:
    def __init__(self, core: QueueManagerCore, security: Security | None = None):
        self.core = core
        #: whose authority MCAUSER is checked against (the server's users and records)
        self.security = security or Security.for_config(core.config)
        self.senders: dict[str, SenderChannel] = {}
        self.receivers: dict[str, ReceiverSession] = {}
        #: receiver status kept after its connection ends (DISPLAY CHSTATUS)
        self.receiver_seen: dict[str, dict] = {}
        #: transmission queue -> the sender channel in session on it: one at a
        #: time, as MQ's sender opens its transmission queue for exclusive input
        self.xmitq_served_by: dict[str, str] = {}
        self.listeners: dict[str, asyncio.Server] = {}
        self.listener_ports: dict[str, int] = {}
        self._sessions: set[asyncio.Task] = set()

    async def start(self) -> None:
        core = self.core
        await sync.ensure_syncq(core)
        core.channels = self
        core.definition_listeners.append(self._changed)
        for d in self._defs("CHANNEL"):
            if d["attrs"]["CHLTYPE"] == "SDR":
                self._sender(d["name"]).start()
        for d in self._defs("LISTENER"):
            if d["attrs"]["CONTROL"] == "QMGR":
                await self.start_listener(d["name"])

    async def stop(self) -> None:
        for s in list(self.senders.values()):
            await s.stop()
        for name in list(self.listeners):
            await self.stop_listener(name)
        for t in list(self._sessions):
            t.cancel()
        if self._sessions:
            await asyncio.gather(*self._sessions, return_exceptions=True)
        if self._changed in self.core.definition_listeners:
            self.core.definition_listeners.remove(self._changed)

    def _defs(self, objtype: str) -> list[dict]:
        return sorted((d for d in self.core.objects.values() if d["type"] == objtype),
                      key=lambda d: d["name"])

    def _sender(self, name: str) -> SenderChannel:
        s = self.senders.get(name)
        if s is None:
            s = self.senders[name] = SenderChannel(self, name)
        return s

    def serve_xmitq(self, xmitq: str, channel: str) -> None:
        """``channel`` starts a session on ``xmitq``; HMQ9515E (the channel
        retries) while another sender channel is in session on it."""
        serving = self.xmitq_served_by.setdefault(xmitq, channel)
        if serving != channel:
            raise ChannelStopped(_xmitq_in_use(xmitq, serving), msgid="HMQ9515E")

    def release_xmitq(self, xmitq: str, channel: str) -> None:
        if self.xmitq_served_by.get(xmitq) == channel:
            del self.xmitq_served_by[xmitq]

    def _changed(self, objtype: str, name: str) -> None:
        """A channel defined is started (it waits for messages); one deleted is
        stopped."""
        if objtype != "CHANNEL":
            return
        d = self.core.objects.get(f"CHANNEL:{name}")
        if d is not None and d["attrs"]["CHLTYPE"] == "SDR" and name not in self.senders:
            self._sender(name).start()
        elif d is None and name in self.senders:      # deleted (it was not running)
            self.core.spawn(self.senders.pop(name).stop())

    # -- commands -----------------------------------------------------------------------

    def _channel(self, name: str) -> dict:
        return self.core.definition("CHANNEL", name)

    async def start_channel(self, name: str) -> str:
        d = self._channel(name)
        if d["attrs"]["CHLTYPE"] != "SDR":
            return f"channel {name} is a receiver: it starts when its sender connects."
        s = self._sender(name)
        if s.task is not None and not s.task.done():
            s._wake.set()         # a retrying channel tries now
            return f"channel {name} is already running ({s.status})."
        serving = self.xmitq_served_by.get(d["attrs"]["XMITQ"])
        if serving is not None and serving != name:
            raise ObjectInUse(_xmitq_in_use(d["attrs"]["XMITQ"], serving),
                              hint=f"STOP CHANNEL({serving}) first, or give channel {name} "
                                   "a transmission queue of its own")
        s.start()
        return f"channel {name} started."

    async def stop_channel(self, name: str) -> str:
        d = self._channel(name)
        if d["attrs"]["CHLTYPE"] == "SDR":
            await self._sender(name).stop()
        else:
            session = self.receivers.get(name)
            if session is not None:
                session.writer.close()
        return f"channel {name} stopped."

    async def reset_channel(self, name: str, seqnum: int) -> str:
        """RESET CHANNEL SEQNUM(n): the next message is sent with number n
        (on a sender; a receiver then adopts it), or expected with it (on a
        receiver). Refused while a batch is in doubt: RESOLVE it first."""
        d = self._channel(name)
        core = self.core
        if sync.in_doubt(core, name) is not None:
            raise ChannelError(f"channel {name} has a batch in doubt: RESOLVE CHANNEL({name}) "
                               "ACTION(COMMIT|BACKOUT) first (MQ's AMQ9507)")
        side = sync.SENDER if d["attrs"]["CHLTYPE"] == "SDR" else sync.RECEIVER
        if side == sync.SENDER:
            s = self._sender(name)
            if s.status in ("RUNNING", "BINDING"):
                raise ObjectInUse(f"channel {name} is running: STOP CHANNEL({name}) first")
        elif name in self.receivers:
            raise ObjectInUse(f"channel {name} is running: STOP CHANNEL({name}) first")
        uow = core.begin(owner=sync.owner(name))
        old = sync.read(core, side, name)
        sync.reset(core, uow, side, name, {"seq": seqnum - 1, "luwid": old.get("luwid", ""),
                                           "reset": side == sync.SENDER})
        await core.commit(uow)
        core.oplog.emit("HMQ9530I", f"channel {name}: sequence number reset; the next message "
                        f"is number {seqnum}")
        return f"channel {name} reset: the next sequence number is {seqnum}."

    async def resolve_channel(self, name: str, commit: bool) -> str:
        """RESOLVE CHANNEL: the operator decides an in-doubt batch (when the
        partner is gone or cannot say)."""
        self._channel(name)
        s = self.senders.get(name)
        if s is not None and s.status in ("RUNNING", "BINDING", "RETRYING"):
            raise ObjectInUse(f"channel {name} is {s.status}: it resolves its batch in doubt "
                              f"itself; STOP CHANNEL({name}) first to decide by hand")
        doubts = sync.in_doubt_all(self.core, name)
        if not doubts:
            return f"channel {name} has no batch in doubt."
        # (a pipelined sender may have several: decided together, the newest backed
        # out first)
        for uow, _pending in (doubts if commit else reversed(doubts)):
            await (self.core.commit(uow) if commit else self.core.backout(uow))
        what = "committed" if commit else "backed out (their messages are sent again)"
        luwids = ", ".join(d[1]["luwid"] for d in doubts)
        self.core.oplog.emit("HMQ9531I", f"channel {name}: in-doubt batch(es) {luwids} "
                             f"{what} by the operator")
        return f"channel {name}: in-doubt batch(es) {luwids} {what}."

    def check_deletable(self, objtype: str, name: str) -> None:
        if objtype == "CHANNEL":
            s = self.senders.get(name)
            # (an inactive sender only waits for messages: it may go)
            if (s is not None and s.status in ("RUNNING", "BINDING", "RETRYING")) or \
                    name in self.receivers:
                raise ObjectInUse(f"channel {name} is running: STOP CHANNEL({name}) first")
            if sync.in_doubt(self.core, name) is not None:
                raise ObjectInUse(f"channel {name} has a batch in doubt: RESOLVE it first")
        elif name in self.listeners:
            raise ObjectInUse(f"listener {name} is running: STOP LISTENER({name}) first")

    # -- listeners ----------------------------------------------------------------------

    async def start_listener(self, name: str) -> str:
        d = self.core.definition("LISTENER", name)
        if name in self.listeners:
            return f"listener {name} is already running on port {self.listener_ports[name]}."
        a = d["attrs"]
        try:
            server = await asyncio.start_server(self._accept, a["IPADDR"], a["PORT"])
        except OSError as exc:
            raise ChannelError(f"listener {name} cannot listen on {a['IPADDR']} port "
                               f"{a['PORT']}: {exc.strerror or exc}") from None
        self.listeners[name] = server
        self.listener_ports[name] = server.sockets[0].getsockname()[1]
        self.core.oplog.emit("HMQ9001I", f"listener {name} started on {a['IPADDR']} port "
                             f"{self.listener_ports[name]}")
        return f"listener {name} started on port {self.listener_ports[name]}."

    async def stop_listener(self, name: str) -> str:
        self.core.definition("LISTENER", name)
        server = self.listeners.pop(name, None)
        self.listener_ports.pop(name, None)
        if server is None:
            return f"listener {name} is not running."
        server.close()
        await server.wait_closed()
        self.core.oplog.emit("HMQ9003I", f"listener {name} stopped")
        return f"listener {name} stopped."

    def listener_status(self, name: str) -> str:
        return "RUNNING" if name in self.listeners else "STOPPED"

    async def _accept(self, reader, writer) -> None:
        task = asyncio.current_task()
        self._sessions.add(task)
        session = ReceiverSession(self, reader, writer)
        try:
            await session.run()
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, RuntimeError,
                asyncio.CancelledError):      # (RuntimeError: uvloop, a closed transport)
            pass
        except HarbormqError as exc:
            try:
                await session.refuse(exc.msgid, exc.message)
            except (OSError, ConnectionError):
                pass
        finally:
            self._sessions.discard(task)
            writer.close()

    def claim_receiver(self, session: ReceiverSession) -> bool:
        if session.name in self.receivers:
            return False
        self.receivers[session.name] = session
        return True

    def release_receiver(self, session: ReceiverSession) -> None:
        if self.receivers.get(session.name) is session:
            del self.receivers[session.name]
        self.receiver_seen[session.name] = self._receiver_values(session, "INACTIVE")

    # -- status -------------------------------------------------------------------------

    def _receiver_values(self, r: ReceiverSession, status: str | None = None) -> dict:
        return {"CHANNEL": r.name, "CHLTYPE": "RCVR", "STATUS": status or r.status,
                "CONNAME": r.conname, "RQMNAME": r.partner, "INDOUBT": "NO",
                "LSTSEQNO": r.last_seq, "CURSEQNO": r.last_seq, "LSTLUWID": r.last_luwid,
                "CURLUWID": "", "MSGS": r.msgs, "BATCHES": r.batches}

    def status(self, pattern: str) -> list[dict]:
        out = []
        for d in self._defs("CHANNEL"):
            name = d["name"]
            if not _generic(pattern, name):
                continue
            if d["attrs"]["CHLTYPE"] == "SDR":
                s = self.senders.get(name)
                last = sync.read(self.core, sync.SENDER, name)
                doubt = sync.in_doubt(self.core, name)
                xq = self.core.queues.get(d["attrs"]["XMITQ"])
                out.append({"CHANNEL": name, "CHLTYPE": "SDR",
                            "STATUS": s.status if s else "INACTIVE",
                            "CONNAME": d["attrs"]["CONNAME"],
                            "RQMNAME": s.partner if s else "", "XMITQ": d["attrs"]["XMITQ"],
                            "INDOUBT": "YES" if doubt else "NO", "LSTSEQNO": last["seq"],
                            "CURSEQNO": doubt[1]["seq"] if doubt else last["seq"],
                            "LSTLUWID": last.get("luwid", ""),
                            "CURLUWID": doubt[1]["luwid"] if doubt else "",
                            "MSGS": s.msgs if s else 0, "BATCHES": s.batches if s else 0,
                            "XQMSGSA": xq.depth if xq is not None else 0,
                            "SHORTRTS": s.short_left if s else 0,
                            "LONGRTS": s.long_left if s else 0})
            else:
                r = self.receivers.get(name)
                if r is not None:
                    out.append(self._receiver_values(r))
                elif name in self.receiver_seen:
                    out.append(self.receiver_seen[name])
                else:
                    last = sync.read(self.core, sync.RECEIVER, name)
                    out.append({"CHANNEL": name, "CHLTYPE": "RCVR", "STATUS": "INACTIVE",
                                "INDOUBT": "NO", "LSTSEQNO": last["seq"],
                                "CURSEQNO": last["seq"], "LSTLUWID": last.get("luwid", "")})
        return out


def _generic(pattern: str, name: str) -> bool:
    if pattern.endswith("*"):
        return name.startswith(pattern[:-1])
    return name == pattern


def _xmitq_in_use(xmitq: str, serving: str) -> str:
    return (f"transmission queue {xmitq} is in use by sender channel {serving}: one sender "
            "channel at a time serves a transmission queue (MQRC 2042 OBJECT_IN_USE)")
