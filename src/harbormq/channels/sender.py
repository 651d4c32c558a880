"""The sender channel agent: reads its transmission queue in batches and sends
them to the receiver, exactly once (docs/channels.md).

A batch: up to BATCHSZ messages got from the transmission queue under one
unit of work (in one scan of the queue), sent in one MSGS frame (or a few,
for large messages), numbered one by one; the new sync data put
under the same unit of work; the unit **prepared** (forced: from here the
batch is in doubt and survives a crash); END_BATCH sent; on the receiver's
CONFIRM (it has committed the batch) the unit of work is committed. At the
next HELLO the batches in doubt are resolved against the receiver's last
batch id: that batch and the ones before it were committed there, so are
committed here; any after it are backed out here and sent again.

Batches are pipelined: while one batch waits for its CONFIRM the next ones
are got, sent and prepared (up to ``sync.SENDER_SLOTS`` in flight), so the
receiver's commit of one overlaps the sender's work on the next; and the next
batch is got from the transmission queue while the last one's prepare is
being forced (its MSGS go out only after that batch's END_BATCH). The receiver commits
them in order, one connection at a time, so "the receiver's last batch and
every one before it" is always the right rule. The commit after a CONFIRM is
not forced on its own (nor is a force asked for: one fdatasync per batch, not
two): the next prepare's force carries it, or a force when the channel finds
its transmission queue empty; a crash before that leaves the batch in doubt,
decided as committed at the next HELLO (the receiver's last batch is it, or
a later one).
"""

from __future__ import annotations

import asyncio
import ssl
import time
import uuid
from collections import deque
from dataclasses import dataclass

from ..core import remote
from ..core.objects import DEAD_LETTER_QUEUE, parse_conname
from ..crashpoints import crash_point
from ..errors import HarbormqError
from . import protocol as p
from . import sync, tls

#: errors that a retry may cure: the receiver still holds the channel for a
#: connection it has not yet seen end (HMQ9514E); another sender channel
#: serves the transmission queue for now (HMQ9515E)
RETRYABLE = ("HMQ9514E", "HMQ9515E")


class ChannelStopped(HarbormqError):
    """The channel cannot go on until the operator acts (sequence numbers
    disagree, the partner refused it): it goes to STOPPED."""
    msgid = "HMQ9526E"


class ConnectionLost(HarbormqError):
    """The partner stopped answering (a heartbeat or a batch's confirm): the
    connection is taken as lost and the channel retries."""
    msgid = "HMQ9135E"


@dataclass
class _InFlight:
    """A batch sent and prepared, its CONFIRM awaited."""
    uow: object
    seq: int
    luwid: str
    count: int
    slot: int
    #: the force of its prepare
    prepared: asyncio.Future | None = None


class SenderChannel:
    def __init__(self, initiator, name: str):
        self.initiator = initiator
        self.core = initiator.core
        self.name = name
        self.status = "INACTIVE"
        self.stop_requested = False
        self.task: asyncio.Task | None = None
        self.msgs = self.batches = 0
        self.cur_seq = 0
        self.cur_luwid = ""
        self.partner = ""
        self.short_left = self.long_left = 0
        self.last_msg_ns = 0
        #: the heartbeat interval agreed with the partner (s; 0: none)
        self.hbint = 0
        #: a batch committed (after its CONFIRM) whose commit is not forced yet
        self._unforced = False
        self._wake = asyncio.Event()

    @property
    def definition(self) -> dict:
        return self.core.definition("CHANNEL", self.name)

    @property
    def attrs(self) -> dict:
        return self.definition["attrs"]

    def say(self, msgid: str, text: str) -> None:
        self.core.oplog.emit(msgid, f"channel {self.name}: {text}")

    # -- running ----------------------------------------------------------------------

    def start(self) -> None:
        self.stop_requested = False
        if self.task is None or self.task.done():
            self.status = "INACTIVE"
            self.task = self.core.spawn(self.run())

    async def stop(self) -> None:
        self.stop_requested = True
        self._wake.set()
        if self.task is not None and not self.task.done():
            self.task.cancel()
            try:
                await self.task
            except (asyncio.CancelledError, Exception):
                pass
        self.status = "STOPPED"

    async def run(self) -> None:
        a = self.attrs
        self.short_left, self.long_left = a["SHORTRTY"], a["LONGRTY"]
        while not self.stop_requested:
            try:
                if sync.in_doubt(self.core, self.name) is None:
                    self.status = "INACTIVE"
                    await self._work_available()
                await self._session()
                self.short_left, self.long_left = self.attrs["SHORTRTY"], self.attrs["LONGRTY"]
            except asyncio.CancelledError:
                raise
            except (ChannelStopped, p.PartnerError) as exc:
                if exc.msgid in RETRYABLE and not self.stop_requested:
                    if await self._retry_wait(exc):
                        continue
                    return
                self.status = "STOPPED"
                self.say(exc.msgid, f"stopped: {exc.message}")
                return
            # (uvloop raises RuntimeError for a write to a transport already closed)
            except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, RuntimeError,
                    p.ChannelProtocolError, HarbormqError) as exc:
                if self.stop_requested or self.core.stopping:
                    return
                if isinstance(exc, ConnectionLost):
                    self.say(exc.msgid, exc.message)
                if not await self._retry_wait(exc):
                    return

    async def _work_available(self) -> None:
        """Wait until the transmission queue has a message to send (MQ triggers
        the channel then)."""
        xmitq = self.attrs["XMITQ"]
        while not self.stop_requested:
            q = self.core.queue(xmitq)
            if q.first_available(None, time.time_ns())[1] is not None:
                return
            fut = self.core.loop.create_future()
            q.waiters.append(fut)
            try:
                await asyncio.wait_for(fut, 1.0)
            except asyncio.TimeoutError:
                pass
            finally:
                if fut in q.waiters:
                    q.waiters.remove(fut)

    async def _retry_wait(self, exc: BaseException) -> bool:
        a = self.attrs
        why = exc.message if isinstance(exc, HarbormqError) else repr(exc)
        if self.short_left > 0:
            self.short_left -= 1
            wait = a["SHORTTMR"]
        elif self.long_left > 0:
            self.long_left -= 1
            wait = a["LONGTMR"]
        else:
            self.status = "STOPPED"
            self.say("HMQ9999E", f"ended: {why}; no retries left (SHORTRTY, LONGRTY)")
            return False
        self.status = "RETRYING"
        self.say("HMQ9509W", f"cannot reach its partner ({why}); retrying in {wait} s")
        self._wake.clear()
        try:
            await asyncio.wait_for(self._wake.wait(), wait)
        except asyncio.TimeoutError:
            pass
        return not self.stop_requested

    async def _session(self) -> None:
        a = self.attrs
        host, port = parse_conname(a["CONNAME"])
        xmitq = a["XMITQ"]
        self.initiator.serve_xmitq(xmitq, self.name)
        try:
            self.status = "BINDING"
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 30)
            p.no_delay(writer)
            try:
                await self._converse(reader, writer)
            finally:
                writer.close()
                try:
                    await writer.wait_closed()
                except (OSError, ConnectionError):
                    pass
        finally:
            self.initiator.release_xmitq(xmitq, self.name)

    async def _start_tls(self, reader, writer) -> str:
        """START_TLS, the partner's TLS_OK, the handshake, the session checked
        (CipherSpec, SSLPEER); a failure the operator must cure stops the
        channel. Returns the session's description."""
        core, a = self.core, self.attrs
        spec = a["SSLCIPH"]
        try:
            ctx = tls.context(tls.repository(core.config.qm_dir,
                                             core.qmgr_attrs.get("SSLKEYR", "")),
                              spec, server=False)
        except tls.KeyRepositoryError as exc:
            raise ChannelStopped(exc.message, msgid=exc.msgid) from None
        writer.write(p.encode(p.START_TLS, {"version": p.PROTOCOL_VERSION,
                                            "channel": self.name, "qm": core.name,
                                            "sslciph": spec}))
        await writer.drain()
        p.expect(await p.read_frame_within(reader, p.reply_timeout(0)), p.TLS_OK)
        try:
            await writer.start_tls(ctx, ssl_handshake_timeout=tls.HANDSHAKE_TIMEOUT)
            return tls.check_session(writer.get_extra_info("ssl_object"), spec,
                                     a.get("SSLPEER", ""), f"the receiver at {a['CONNAME']}")
        except (ssl.SSLError, ConnectionError, asyncio.IncompleteReadError) as exc:
            raise ChannelStopped(f"TLS handshake with the receiver at {a['CONNAME']} failed: "
                                 f"{tls.describe_failure(exc)}", msgid="HMQ9132E") from None
        except (tls.CipherSpecMismatch, tls.PeerNameMismatch) as exc:
            raise ChannelStopped(exc.message, msgid=exc.msgid) from None

    async def _converse(self, reader, writer) -> None:
        core, a = self.core, self.attrs
        session = await self._start_tls(reader, writer) if a["SSLCIPH"] else ""
        state = sync.read(core, sync.SENDER, self.name)
        doubts = sync.in_doubt_all(core, self.name)
        writer.write(p.encode(p.HELLO, {
            "version": p.PROTOCOL_VERSION, "channel": self.name, "qm": core.name,
            "seq": state["seq"], "reset": bool(state.get("reset")),
            "indoubt": [d[1] for d in doubts], "hbint": a["HBINT"],
            "batchint": a["BATCHINT"]}))
        await writer.drain()
        try:
            _k, hello, _ = p.expect(
                await p.read_frame_within(reader, p.reply_timeout(a["HBINT"])), p.HELLO_OK)
        except (ssl.SSLError, ConnectionError, asyncio.IncompleteReadError) as exc:
            if not session:
                raise
            # TLS 1.3: the receiver checks our certificate after our side of the
            # handshake is done; its refusal (an alert, or the connection closed)
            # arrives as the answer to HELLO
            raise ChannelStopped(f"TLS handshake with the receiver at {a['CONNAME']} failed: "
                                 f"{tls.describe_failure(exc)}", msgid="HMQ9132E") from None
        self.partner = hello.get("qm", "")
        self.hbint = int(hello.get("hbint", a["HBINT"]))
        if doubts:
            await self._resolve(doubts, hello)
            state = sync.read(core, sync.SENDER, self.name)
        if not state.get("reset") and hello["seq"] != state["seq"]:
            writer.write(p.encode(p.ERROR, {"msgid": "HMQ9526E", "message": (
                f"message sequence number error for channel {self.name}: {core.name} last "
                f"sent {state['seq']}, {self.partner} last received {hello['seq']}")}))
            await writer.drain()
            raise ChannelStopped(
                f"message sequence number error: this queue manager last sent sequence "
                f"number {state['seq']}, {self.partner} last received {hello['seq']} (MQ's "
                f"AMQ9526); {self._mismatch_meaning(state['seq'], hello['seq'])}; RESET "
                f"CHANNEL({self.name}) SEQNUM(n) on one side once the operator knows which "
                "messages arrived")
        self.cur_seq = state["seq"]
        self.status = "RUNNING"
        self.say("HMQ9002I", f"started to {self.partner} at {a['CONNAME']} (heartbeat "
                 f"interval {self.hbint or 'none'}{' s' if self.hbint else ''}"
                 f"{'; TLS ' + session if session else ''})")
        reset = bool(state.get("reset"))
        #: batches whose END_BATCH is sent, oldest first, awaiting their CONFIRM
        inflight: deque[_InFlight] = deque()
        #: the batch sent whose prepare is being forced (its END_BATCH not sent)
        preparing: _InFlight | None = None
        while not self.stop_requested:
            busy = len(inflight) + (preparing is not None)
            got = None
            if busy < sync.SENDER_SLOTS:
                # the next batch is got while the last one's prepare is forced; with
                # batches in flight, only what is there now (a CONFIRM comes next)
                got = await self._gather(reader, writer, wait=not busy)
                if got is False:
                    writer.write(p.encode(p.CLOSE, {}))
                    await writer.drain()
                    self.status = "INACTIVE"
                    return
            try:
                if preparing is not None:
                    await self._end_batch(writer, preparing)
                    inflight.append(preparing)
                    preparing = None
                if got is not None:
                    preparing = self._send(writer, got, reset, inflight)
                    reset = False
            except BaseException:
                if got is not None and got[0].state == "active":
                    await self.core.backout(got[0])     # its messages go back on the queue
                raise
            if got is None and inflight:
                await self._confirmed(reader, inflight.popleft())

    async def _first_message(self, reader, writer, uow):
        """The batch's first message: None when the transmission queue stays
        empty for DISCINT seconds; meanwhile a heartbeat every HBINT seconds,
        whose answer must come in time or the connection is taken as lost."""
        core, a = self.core, self.attrs
        msg = core.get_nowait(a["XMITQ"], uow)[0]
        if msg is not None:
            return msg
        if self._unforced:
            # idle: the last commits go to disk now rather than with a next
            # prepare that may be long in coming (a crash would leave them in doubt)
            self._unforced = False
            await core.log.force()
        end = time.monotonic() + a["DISCINT"] if a["DISCINT"] else float("inf")
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return None
            wait = min(left, self.hbint) if self.hbint else left
            msg = await core.get(a["XMITQ"], uow, wait=min(wait, 10**9))
            if msg is not None:
                return msg
            if self.hbint and end - time.monotonic() > 0:
                await self._heartbeat(reader, writer)

    async def _heartbeat(self, reader, writer) -> None:
        writer.write(p.encode(p.HEARTBEAT, {}))
        await writer.drain()
        limit = p.reply_timeout(self.hbint)
        try:
            p.expect(await p.read_frame_within(reader, limit), p.HEARTBEAT)
        except asyncio.TimeoutError:
            raise ConnectionLost(f"{self.partner} did not answer a heartbeat in {limit:g} s "
                                 f"(heartbeat interval {self.hbint} s): the connection is "
                                 "taken as lost") from None

    def _mismatch_meaning(self, sent: int, received: int) -> str:
        """What a mismatch means for the messages between the two numbers."""
        lo, hi = sorted((sent, received))
        span = f"sequence numbers {lo + 1}..{hi} ({hi - lo} messages)"
        if sent > received:
            return (f"{span} were committed on {self.partner} and confirmed, and are not in "
                    f"its state now ({self.partner} restored from a backup?): whatever of "
                    "them was still on its queues is lost there unless sent again")
        return (f"{span} reached {self.partner} but this queue manager has no record of "
                "sending them (restored from a backup?): those still on its transmission "
                "queue would arrive a second time")

    async def _resolve(self, doubts: list, hello: dict) -> None:
        """The batches in doubt (oldest first): the receiver's last one and those
        before it were committed there; those after it were not."""
        luwids = [pending["luwid"] for _uow, pending in doubts]
        last = luwids.index(hello["luwid"]) if hello.get("luwid") in luwids else -1
        for uow, pending in doubts:
            if uow.state != "prepared":      # decided meanwhile (it cannot be, RESOLVE waits)
                raise ChannelStopped(f"batch {pending['luwid']} was {uow.state} while the "
                                     "channel resolved it")
        for uow, pending in doubts[:last + 1]:
            await self.core.commit(uow)
            self.say("HMQ9520I", f"in-doubt batch {pending['luwid']} (sequence number "
                     f"{pending['seq']}) committed: {self.partner} had committed it")
        for uow, pending in reversed(doubts[last + 1:]):
            await self.core.backout(uow)
            self.say("HMQ9520I", f"in-doubt batch {pending['luwid']} backed out: "
                     f"{self.partner} had not committed it; its messages are sent again")

    def _sendable(self, msg, uow) -> bool:
        """A message without a transmission header (it cannot be put on a
        transmission queue now, but one may be there from elsewhere) goes to
        the dead-letter queue here, in the batch's unit of work (MQRC 2091)."""
        if remote.is_wrapped(msg.body):
            return True
        core = self.core
        dlq = core.qmgr_attrs.get("DEADQ") or DEAD_LETTER_QUEUE
        msg.properties = dict(msg.properties, DLH_REASON="2091",
                              DLH_REASON_TEXT="no transmission header on a transmission "
                              "queue", DLH_DESTQ=self.attrs["XMITQ"],
                              DLH_PUTAPPLNAME=f"channel {self.name}")
        msg.raw = None
        core.put_nowait(dlq, msg, uow)
        self.say("HMQ9544W", f"a message on transmission queue {self.attrs['XMITQ']} has no "
                 f"transmission header: put on the dead-letter queue {dlq}")
        return False

    async def _gather(self, reader, writer, wait: bool) -> tuple | None | bool:
        """Get the next batch under a unit of work of its own: (unit of work,
        messages). False when the transmission queue stayed empty for DISCINT
        seconds (``wait``; the channel then disconnects); None when there is
        nothing to send (no message there now, without ``wait``; or only dead
        letters)."""
        core, a = self.core, self.attrs
        xmitq = a["XMITQ"]
        uow = core.begin(owner=sync.owner(self.name))
        try:
            size = a["BATCHSZ"]
            if wait:
                first = await self._first_message(reader, writer, uow)
                batch = [first] if first is not None else []
            else:
                batch = core.get_batch_nowait(xmitq, uow, size)
            if not batch:
                core.discard_empty(uow)
                return False if wait else None
            deadline = time.monotonic() + a["BATCHINT"] / 1000
            while len(batch) < size:
                # what is there now in one scan; then wait (BATCHINT) for one more
                more = core.get_batch_nowait(xmitq, uow, size - len(batch))
                if more:
                    batch += more
                    continue
                left = deadline - time.monotonic()
                msg = await core.get(xmitq, uow, wait=left) if left > 0 else None
                if msg is None:
                    break
                batch.append(msg)
            batch = [m for m in batch if self._sendable(m, uow)]
            if not batch:
                await core.commit(uow)      # only dead letters: nothing to send
                return None
        except BaseException:
            if uow.state == "active":
                await core.backout(uow)      # the messages go back on the queue
            raise
        return uow, batch

    def _send(self, writer, got: tuple, reset: bool, inflight: deque) -> _InFlight:
        """Send a batch got (its MSGS frames), put its sync data in the slot no
        batch in flight holds, and prepare it: the force runs on (``_end_batch``
        awaits it)."""
        core = self.core
        uow, batch = got
        first_seq = (inflight[-1].seq if inflight else self.cur_seq) + 1
        for frame in p.encode_msgs(first_seq, [m.body for m in batch], reset):
            writer.write(frame)
        seq = first_seq + len(batch) - 1
        luwid = uuid.uuid4().hex
        slot = min(set(range(sync.SENDER_SLOTS)) - {b.slot for b in inflight})
        sync.replace(core, uow, sync.SENDER, self.name,
                     {"seq": seq, "luwid": luwid, "partner": self.partner}, slot)
        return _InFlight(uow, seq, luwid, len(batch), slot, core.prepare_nowait(uow))

    async def _end_batch(self, writer, sent: _InFlight) -> None:
        """Once the batch's prepare is on disk (from here it is in doubt and
        survives a crash), its END_BATCH."""
        await writer.drain()
        await sent.prepared
        crash_point("channel.sender_prepared")
        self.cur_luwid = sent.luwid
        writer.write(p.encode(p.END_BATCH, {"seq": sent.seq, "luwid": sent.luwid}))
        await writer.drain()

    async def _confirmed(self, reader, sent: _InFlight) -> None:
        """The oldest batch in flight: its CONFIRM, then its commit."""
        limit = p.reply_timeout(self.hbint)
        try:
            _k, h, _ = p.expect(await p.read_frame_within(reader, limit), p.CONFIRM)
        except asyncio.TimeoutError:
            raise ConnectionLost(f"{self.partner} did not confirm batch {sent.luwid} in "
                                 f"{limit:g} s: the connection is taken as lost; the batch "
                                 "stays in doubt until the next connection resolves it") from None
        if h.get("luwid") != sent.luwid:
            raise p.ChannelProtocolError(f"the partner confirmed batch {h.get('luwid')}, "
                                         f"not {sent.luwid}")
        crash_point("channel.sender_confirmed")
        # not forced here: the next prepare's force carries it, or the force when
        # the channel goes idle (module docstring)
        self.core.commit_nowait(sent.uow, force=False)
        self._unforced = True
        self.cur_seq = sent.seq
        self.msgs += sent.count
        self.batches += 1
        self.last_msg_ns = time.time_ns()
