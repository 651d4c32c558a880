"""The receiver channel agent: one per connection a listener accepts.

It puts each batch's messages, and the batch's sync data, under one unit of
work, commits it, and confirms it once the commit is forced (meanwhile it
reads and puts the next batch's messages): a batch is either wholly
committed here with its sequence number and id, or not at all, and the
sender learns which at the next HELLO. A message that cannot be put where it
is addressed goes to the dead-letter queue with a dead-letter header (the
reason, where it was going); only when that fails too does the batch fail,
and the messages stay on the sender's transmission queue.
"""

from __future__ import annotations

import asyncio
import ssl
import time

from ..core import remote
from ..core.objects import CHANNEL_SYNCQ, DEAD_LETTER_QUEUE
from ..crashpoints import crash_point
from ..errors import HarbormqError
from ..security import Principal, UnknownUser
from . import protocol as p
from . import sync, tls


def _undeliverable(text: str, reason: int) -> HarbormqError:
    exc = HarbormqError(text, msgid="HMQ9544W")
    exc.reason = reason
    return exc


#: how long a sender may stay silent when no heartbeats flow (HBINT 0)
BATCH_TIMEOUT = 300.0


class ReceiverSession:
    def __init__(self, initiator, reader, writer):
        self.initiator = initiator
        self.core = initiator.core
        self.reader, self.writer = reader, writer
        self.name = ""
        self.partner = ""
        self.conname = ""
        self.status = "BINDING"
        self.msgs = self.batches = 0
        self.last_seq = 0
        self.last_luwid = ""
        self.last_msg_ns = 0
        self.hbint = 0
        #: MCAUSER's principal (None: the queue manager's own authority)
        self.principal: Principal | None = None
        peer = writer.get_extra_info("peername")
        if peer:
            self.conname = f"{peer[0]}({peer[1]})"

    def say(self, msgid: str, text: str) -> None:
        self.core.oplog.emit(msgid, f"channel {self.name or '?'}: {text}")

    async def refuse(self, msgid: str, text: str) -> None:
        self.writer.write(p.encode(p.ERROR, {"msgid": msgid, "message": text}))
        await self.writer.drain()
        self.say(msgid, f"refused a connection from {self.conname}: {text}")

    async def run(self) -> None:
        core = self.core
        p.no_delay(self.writer)
        kind, hello, _ = p.expect(await p.read_frame_within(self.reader, 60),
                                  p.HELLO, p.START_TLS)
        self.name, self.partner = str(hello.get("channel", "")), str(hello.get("qm", ""))
        d = core.objects.get(f"CHANNEL:{self.name}")
        if d is None or d["attrs"]["CHLTYPE"] != "RCVR":
            await self.refuse("HMQ9520E", f"channel {self.name} is not defined as a receiver "
                              f"(CHLTYPE(RCVR)) on queue manager {core.name}")
            return
        if hello.get("version") != p.PROTOCOL_VERSION:
            await self.refuse("HMQ9504E", f"channel protocol version {hello.get('version')} "
                              f"is not {p.PROTOCOL_VERSION}")
            return
        spec, theirs = d["attrs"].get("SSLCIPH", ""), str(hello.get("sslciph", ""))
        if spec != theirs:
            plain = "" if theirs else " and connected without TLS"
            await self.refuse("HMQ9131E", f"CipherSpec mismatch on channel {self.name}: the "
                              f"receiver on {core.name} has SSLCIPH({spec}), the sender on "
                              f"{self.partner} has SSLCIPH({theirs}){plain}; both ends must "
                              "name the same one (MQ's AMQ9631)")
            return
        if kind == p.START_TLS:
            if not await self._start_tls(d, spec):
                return
            kind, hello, _ = p.expect(await p.read_frame_within(self.reader, 60),
                                      p.HELLO)
            if hello.get("channel") != self.name:
                raise p.ChannelProtocolError(f"HELLO for channel {hello.get('channel')} after "
                                             f"START_TLS for {self.name}")
        if not self.initiator.claim_receiver(self):
            await self.refuse("HMQ9514E", f"channel {self.name} is in use by another "
                              "connection")
            return
        try:
            self.principal = self._mcauser(d["attrs"].get("MCAUSER", ""))
            self.hbint = max(int(d["attrs"]["HBINT"]), int(hello.get("hbint") or 0))
            await self._converse(hello)
        finally:
            self.initiator.release_receiver(self)

    async def _start_tls(self, d: dict, spec: str) -> bool:
        """TLS_OK, the handshake (the sender's certificate verified against our
        CAs), the session checked; False, the operator told, when it fails."""
        core = self.core
        try:
            ctx = tls.context(tls.repository(core.config.qm_dir,
                                             core.qmgr_attrs.get("SSLKEYR", "")),
                              spec, server=True)
        except tls.KeyRepositoryError as exc:
            await self.refuse(exc.msgid, f"the receiver cannot start TLS: {exc.message}")
            return False
        self.writer.write(p.encode(p.TLS_OK, {}))
        await self.writer.drain()
        try:
            await self.writer.start_tls(ctx, ssl_handshake_timeout=tls.HANDSHAKE_TIMEOUT)
        except (ssl.SSLError, OSError, asyncio.TimeoutError) as exc:
            self.say("HMQ9132E", f"TLS handshake with the sender on {self.partner} at "
                     f"{self.conname} failed: {tls.describe_failure(exc)}")
            return False
        try:
            session = tls.check_session(self.writer.get_extra_info("ssl_object"), spec,
                                        d["attrs"].get("SSLPEER", ""),
                                        f"the sender on {self.partner} at {self.conname}")
        except (tls.CipherSpecMismatch, tls.PeerNameMismatch) as exc:
            await self.refuse(exc.msgid, exc.message)
            return False
        self.say("HMQ9136I", f"TLS with the sender on {self.partner}: {session}")
        return True

    def _mcauser(self, user: str) -> Principal | None:
        """MCAUSER's principal: a harbormq user with its groups, or (an OS user)
        the authority records that name it."""
        if not user:
            return None
        try:
            groups = self.initiator.security.users.groups_of(user)
        except UnknownUser:
            groups = []
        return Principal(user, tuple(groups))

    async def _converse(self, hello: dict) -> None:
        core = self.core
        # a connection that ended while its last commit was being forced left
        # that batch committed in memory: it must be on disk before HELLO_OK
        # tells the sender it was committed (the sender then commits its gets)
        await core.log.force()
        state = sync.read(core, sync.RECEIVER, self.name)
        self.last_seq, self.last_luwid = state["seq"], state["luwid"]
        self.writer.write(p.encode(p.HELLO_OK, {"qm": core.name, "seq": state["seq"],
                                                "luwid": state["luwid"], "hbint": self.hbint}))
        await self.writer.drain()
        # a reset sender's numbers are adopted, unless one of its batches in doubt is
        # the one committed here last (it commits it, and the numbers then agree)
        doubts = {d.get("luwid") for d in hello.get("indoubt") or [] if isinstance(d, dict)}
        adopt = hello.get("reset") and state["luwid"] not in doubts
        expected = hello["seq"] if adopt else None
        self.status = "RUNNING"
        self.say("HMQ9002I", f"started from {self.partner} at {self.conname} (heartbeat "
                 f"interval {self.hbint or 'none'}{' s' if self.hbint else ''})")
        # a sender heartbeats every HBINT s when idle; silence for three times that
        # (and its BATCHINT) is a dead sender or a connection dropped on the way
        batchint = max(0, int(hello.get("batchint") or 0)) / 1000
        silence = 3 * self.hbint + batchint if self.hbint else BATCH_TIMEOUT
        uow = None
        # batches committed whose force is still running: (force, seq, luwid), in
        # log order; the confirmer sends each CONFIRM once its commit is on disk
        committed: asyncio.Queue = asyncio.Queue()
        confirmer = asyncio.ensure_future(self._confirm(committed))
        try:
            while True:
                try:
                    kind, h, payload = p.expect(
                        await p.read_frame_within(self.reader, silence),
                        p.MSGS, p.END_BATCH, p.CLOSE, p.HEARTBEAT)
                except asyncio.TimeoutError:
                    self.say("HMQ9135E", f"nothing from the sender on {self.partner} for "
                             f"{silence:g} s (heartbeat interval {self.hbint} s): the connection "
                             "is taken as lost and closed")
                    return
                if kind == p.CLOSE:
                    # (the sender closes with no batch unconfirmed; wait anyway)
                    joined = asyncio.ensure_future(committed.join())
                    await asyncio.wait((joined, confirmer),
                                       return_when=asyncio.FIRST_COMPLETED)
                    joined.cancel()
                    self.status = "INACTIVE"
                    return
                if kind == p.HEARTBEAT:
                    self.writer.write(p.encode(p.HEARTBEAT, {}))
                    await self.writer.drain()
                    continue
                if kind == p.MSGS:
                    first, bodies = p.decode_msgs(h, payload)
                    want = (self.last_seq if expected is None else expected) + 1
                    if first != want:
                        await self.refuse("HMQ9526E", f"message sequence number error for "
                                          f"channel {self.name}: received {first}, "
                                          f"expected {want}")
                        return
                    expected = first + len(bodies) - 1
                    if uow is None:
                        uow = core.begin(owner=sync.owner(self.name))
                    for body in bodies:
                        self._deliver(body, uow)
                    continue
                # END_BATCH
                if uow is None:
                    uow = core.begin(owner=sync.owner(self.name))
                seq = h["seq"]
                sync.replace(core, uow, sync.RECEIVER, self.name,
                             {"seq": seq, "luwid": h["luwid"], "partner": self.partner})
                crash_point("channel.receiver_before_commit")
                # not awaited here: the next batch's messages are read and put
                # while this commit is forced (its records follow the commit's)
                committed.put_nowait((core.commit_nowait(uow), seq, h["luwid"]))
                uow = None
        finally:
            confirmer.cancel()
            if uow is not None and uow.state == "active":
                await core.backout(uow)

    async def _confirm(self, committed: asyncio.Queue) -> None:
        """CONFIRM each batch, in order, once its commit is forced: never before
        (the sender then commits its gets)."""
        while True:
            forced, seq, luwid = await committed.get()
            try:
                if forced is not None:
                    # shielded: cancelling this task when the connection ends must
                    # not cancel the force it waits on (each caller of log.force
                    # has a future of its own; this holds for any other too)
                    await asyncio.shield(forced)
                crash_point("channel.receiver_committed")
                self.last_seq, self.last_luwid = seq, luwid
                self.batches += 1
                self.writer.write(p.encode(p.CONFIRM, {"luwid": luwid, "seq": seq}))
                await self.writer.drain()
            except (OSError, RuntimeError, HarbormqError) as exc:
                # the log cannot be written or the connection is gone: the batch
                # stays in doubt at the sender, which resolves it at the next HELLO
                self.say("HMQ9540E", f"batch {luwid} (sequence number {seq}) not "
                         f"confirmed: {exc}")
                self.writer.close()
                return
            finally:
                committed.task_done()

    def _deliver(self, payload: bytes, uow) -> None:
        core = self.core
        try:
            header, msg = remote.unwrap(payload)
        except ValueError as exc:
            raise p.ChannelProtocolError(f"a message on channel {self.name} is not a "
                                         f"transmission message: {exc}") from None
        try:
            if header.rqm != core.name:
                raise _undeliverable(f"it is addressed to queue manager {header.rqm}, not "
                                     f"{core.name} (MQRC 2087 UNKNOWN_REMOTE_Q_MGR)", 2087)
            target = core.objects.get(header.rq)
            if target is not None and target["type"] == "QALIAS" and \
                    target["attrs"].get("TARGTYPE") == "TOPIC":
                raise _undeliverable(f"queue {header.rq} is an alias of topic object "
                                     f"{target['attrs']['TARGET']}: a channel's messages are "
                                     "put on queues, not published (MQRC 2085)", 2085)
            if target is not None and target["type"] == "QALIAS":
                # MQ's name resolution: an alias stands for its target (authority and
                # PUT(DISABLED) are the alias's, checked here and by the put)
                target = core.objects.get(target["attrs"]["TARGET"]) or target
            if target is not None and (target["type"] != "QLOCAL" or
                                       target["attrs"].get("USAGE") == "XMITQ" or
                                       header.rq == CHANNEL_SYNCQ):
                raise _undeliverable(f"queue {header.rq} is not a local queue a channel may "
                                     "put to (a remote queue, a transmission queue or the "
                                     "channel sync queue: no routing onward) (MQRC 2085)", 2085)
            if target is not None and self.principal is not None and not \
                    self.initiator.security.check(self.principal, "QUEUE", header.rq, "put"):
                raise _undeliverable(f"MCAUSER {self.principal.user} of channel {self.name} is "
                                     f"not authorized to PUT on queue {header.rq} (MQRC 2035 "
                                     "NOT_AUTHORIZED)", 2035)
            core.put_nowait(header.rq, msg, uow)
        except HarbormqError as exc:
            self._dead_letter(header, msg, exc, uow)
        self.msgs += 1
        self.last_msg_ns = time.time_ns()

    def _dead_letter(self, header, msg, exc: HarbormqError, uow) -> None:
        """MQ's dead-letter header, as message properties: the reason, where
        the message was going, which channel brought it."""
        core = self.core
        dlq = core.qmgr_attrs.get("DEADQ") or DEAD_LETTER_QUEUE
        msg.properties = dict(msg.properties, DLH_REASON=str(exc.reason or 0),
                              DLH_REASON_TEXT=exc.message, DLH_DESTQ=header.rq,
                              DLH_DESTQMGR=header.rqm, DLH_PUTAPPLNAME=f"channel {self.name}",
                              DLH_FROMQMGR=header.from_qm)
        msg.raw = None
        try:
            core.put_nowait(dlq, msg, uow)
        except HarbormqError as dlq_exc:
            raise HarbormqError(
                f"a message for {header.rq} cannot be put ({exc.message}) nor put on the "
                f"dead-letter queue {dlq} ({dlq_exc.message}); the batch is backed out and "
                "stays on the sender's transmission queue", msgid="HMQ9544E") from None
        self.say("HMQ9544W", f"a message for queue {header.rq} was put on the dead-letter "
                 f"queue {dlq}: {exc.message}")
