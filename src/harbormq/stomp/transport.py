"""The transport half of a STOMP connection: bytes in, frames out.

An asyncio protocol on the queue manager's event loop. It parses what the
client sends and applies the frames strictly in arrival order, one at a time;
a frame whose handler must wait (returns an awaitable) holds back the ones
behind it and pauses reading. Frames out are batched per loop turn, and a
frame that must wait for a log force (a RECEIPT, a delivery) is held, in
order, until the force is done. Heart-beats are sent and checked here. An
error is one ERROR frame, then the connection is closed.

What a connection owes its client is bounded, whatever kind of frame is owed:
while MAX_HELD frames wait for a force (receipts, deliveries), or the client
has not taken WRITE_HIGH bytes, nothing more is read or applied from it;
reading resumes once the held frames are down to RESUME_HELD and the unsent
bytes to WRITE_LOW (backpressure both ways). A connection applies at most
FRAMES_PER_TURN frames in a row, then lets the other connections have a turn
of the event loop, so a pipelining client cannot hold up the others' frames
and receipts. Bytes before a malformed frame
are applied, in order, before its ERROR, however TCP split them; a frame that
is started and not finished within ``frame_timeout_s`` is cut (the client is
dribbling), whatever heart-beats were agreed.

What a frame does is the subclass's business (``_dispatch``); so is what to
send once the client can take more (``_writable``).
"""

from __future__ import annotations

import abc
import asyncio
import re
import time
from collections import deque

from ..errors import HarbormqError
from .frames import Frame, FrameError, FrameParser, Limits, encode_frame, receipt_frame

#: frames waiting for a force, at most, before deliveries and reading pause
#: (memory bound); reading resumes when they are down to RESUME_HELD
MAX_HELD = 512
RESUME_HELD = MAX_HELD // 4
#: bytes written and not yet taken by the client: above WRITE_HIGH nothing more
#: is read or delivered until they are down to WRITE_LOW
WRITE_HIGH, WRITE_LOW = 256 * 1024, 64 * 1024
#: frames a connection applies in a row before the others get a turn of the loop
FRAMES_PER_TURN = 64
#: how long a connection closed with an ERROR reads on before it is dropped
LINGER_S = 5.0


class ProtocolError(HarbormqError):
    msgid = "HMQ9501E"


#: the MQ reason code an error's text names ("... (MQRC 2035 NOT_AUTHORIZED)")
_MQRC = re.compile(r"\bMQRC (\d{4})\b")


class FrameTransport(asyncio.Protocol, metaclass=abc.ABCMeta):
    def __init__(self, loop: asyncio.AbstractEventLoop, limits: Limits,
                 frame_timeout_s: float = 30.0):
        self.loop = loop
        self.parser = FrameParser(limits)
        self.frame_timeout_s = frame_timeout_s
        #: since when the frame being received has been on its way (None: none is)
        self._partial_since: float | None = None
        #: reading is paused because too much output is owed (held or unsent)
        self._owed_full = False
        self._out_bytes = 0
        #: this connection gave the others a turn: it goes on from _next_turn
        self._turn_pending = False
        #: a malformed frame arrived: the frames before it are applied, then this
        #: (message, receipt) is the ERROR
        self._frame_error: tuple[str, str | None] | None = None
        self.transport: asyncio.Transport | None = None
        self.version: str | None = None      # set by CONNECT
        #: frames waiting for a log force: (future | None, frame bytes), in order
        self._held: deque = deque()
        #: the force of the first held frame, which _release_held waits on
        self._waiting_on: asyncio.Future | None = None
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
        #: an ERROR waits behind held frames: close once they are out
        self._close_after_held = False
        #: our side is half-closed (write_eof): nothing more may be written
        self._eof_sent = False
        self.last_recv = time.monotonic()
        self.last_send = time.monotonic()
        #: the one pending timer of each kind (connect deadline, beat, alive check):
        #: a new one replaces the old, so timers never pile up
        self._timers: dict[str, asyncio.TimerHandle] = {}

    @abc.abstractmethod
    def _dispatch(self, frame: Frame):
        """Apply one frame; an awaitable when it must wait for something first."""

    def _writable(self) -> None:
        """The client takes frames again (or held frames went out): send more."""

    def data_received(self, data: bytes) -> None:
        if self._closing or self._frame_error is not None:
            return
        self.last_recv = time.monotonic()
        self.parser.push(data)
        self._process_frames()
        self._watch_partial_frame()

    def _next_frame(self) -> Frame | None:
        """The next frame to apply: one put back to be applied again, else the
        parser's next. Frames are parsed as they are applied, so what is not yet
        applied is held as bytes, and a malformed frame is found only once the
        frames before it have been applied."""
        if self._pending_frames:
            return self._pending_frames.popleft()
        try:
            frame = self.parser.next_frame()
        except FrameError as exc:
            self._frame_error = (str(exc), exc.receipt)
            self._pause_reading()        # nothing after the malformed frame counts
            return None
        if frame is not None:
            self._partial_since = None   # a frame was finished: the clock starts again
        return frame

    def _watch_partial_frame(self) -> None:
        """Start the frame timeout when a frame is on its way (after CONNECT: the
        CONNECT deadline covers the time before it)."""
        if self.closed or self._closing or self.version is None:
            return
        if not self.parser.unparsed:
            self._partial_since = None
            return
        if self._partial_since is None:
            self._partial_since = time.monotonic()
            if "frame" not in self._timers:
                self._timers["frame"] = self.loop.call_later(self.frame_timeout_s,
                                                             self._frame_deadline)

    def _frame_deadline(self) -> None:
        self._timers.pop("frame", None)
        if self.closed or self._closing or self._partial_since is None:
            return
        now = time.monotonic()
        if self._reading_paused:
            # we are not reading: the frame's delay is ours, not the client's
            self._partial_since = now
        elif now - self._partial_since >= self.frame_timeout_s:
            self.fail(f"a frame was started and not finished within "
                      f"{round(self.frame_timeout_s * 1000)} ms (stomp.frame_timeout_ms)")
            return
        self._timers["frame"] = self.loop.call_later(
            max(0.01, self._partial_since + self.frame_timeout_s - now), self._frame_deadline)

    def pause_writing(self) -> None:
        self._write_paused = True
        self._pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._resume_if_ready()
        self._writable()
        self._process_frames()

    def _resume_if_ready(self) -> None:
        """Read again unless something still holds the connection: a frame
        waiting for async work, a client not taking its output, too much owed."""
        if not (self._blocked or self._write_paused or self._owed_full or
                self._turn_pending or self._closing or self._frame_error is not None):
            self._resume_reading()

    def _pause_reading(self) -> None:
        if not self._reading_paused and self.transport is not None and not self.closed:
            self._reading_paused = True
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._reading_paused and self.transport is not None and not self.closed:
            self._reading_paused = False
            self.last_recv = time.monotonic()
            self.transport.resume_reading()

    def _send(self, data: bytes) -> None:
        if self.closed or self._eof_sent:
            return
        self._out.append(data)
        self._out_bytes += len(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._out and not self.closed and not self._eof_sent:
            self.transport.write(b"".join(self._out))
            self.last_send = time.monotonic()
        self._out.clear()
        self._out_bytes = 0

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
                not forced.cancelled() and forced.exception() is None:
            self._send(out)
            return
        self._held.append((forced, out))
        if len(self._held) == 1:
            self._release_held()        # the first held: wait on its force

    def _release_held(self, _fut=None) -> None:
        """Send the held frames whose forces are done, in order, and wait (one
        callback at a time) on the first whose force is not."""
        while self._held:
            fut, out = self._held[0]
            if fut is not None and fut.cancelled():
                # cancelled by something else that held it: that says nothing
                # about the disk, so the frame waits for a force of its own
                fut = self.core.log.force()
                self._held[0] = (fut, out)
            if fut is not None and not fut.done():
                if self._waiting_on is not fut:
                    self._waiting_on = fut
                    fut.add_done_callback(self._release_held)
                return
            self._held.popleft()
            if fut is not None and fut.exception() is not None:
                # the connection ends here: nothing held behind it is sent (each
                # would fail it again, after its ERROR), and their forces' failures
                # are this one (retrieved, not reported again as never retrieved)
                for dropped, _out in self._held:
                    if dropped is not None:
                        dropped.add_done_callback(_retrieve)
                self._held.clear()
                self._closing = False   # this failure must still be reported
                self._close_after_held = False
                self.fail(f"the log could not be forced: {fut.exception()}")
                return
            if out is not None:
                self._send(out)
        if self._close_after_held:      # the ERROR was the last held frame
            self._close_after_held = False
            self._flush()
            if self.transport is not None:
                self._close_politely()
            return
        if self._held_full and not self._closing:
            self._held_full = False
            self._writable()
        if self._owed_full and len(self._held) <= RESUME_HELD and not self._closing:
            self._owed_full = False
            self._resume_if_ready()
            self._process_frames()
        if self._disconnecting:
            self._flush()
            if self.transport is not None:
                self.transport.close()

    def fail(self, message: str, *, frame: Frame | None = None, detail: str = "",
             reason: int | None = None, receipt: str | None = None,
             linger: bool = True) -> None:
        """Send ERROR and close; nothing more is read from this connection.

        The ERROR carries ``receipt-id`` when the frame that failed had a
        receipt, and ``reason-code``, the MQ reason code (``reason``, or the
        ``MQRC nnnn`` its message names), where one applies. ``linger`` False
        closes at once instead of reading the client's rest away (a socket
        pushed out of a budget: holding it LINGER_S longer would defeat the
        budget)."""
        if self._closing:
            return
        self._closing = True
        error = self._frame("ERROR", *error_parts(message, frame, detail, reason, receipt))
        self._pending_frames.clear()
        if self._held:
            # the frames before this one were applied and their RECEIPTs wait for
            # a force: they go first, in order, then the ERROR, then the close
            self._pause_reading()
            self._held.append((None, error))
            self._close_after_held = True
            return
        self._send(error)
        self._flush()
        if self.transport is not None:
            if linger:
                self._close_politely()
            else:
                self.transport.close()

    def _close_politely(self) -> None:
        """End our side after the ERROR and read the client's rest away (dropped:
        we are closing) until it closes or LINGER_S pass. Closing with unread
        input would reset the connection, and the client would lose the ERROR
        that says why (a frame over the size limit, say)."""
        t = self.transport
        if not t.can_write_eof():        # TLS: no half-close
            t.close()
            return
        t.write_eof()
        self._eof_sent = True
        self._resume_reading()
        self._timers["linger"] = self.loop.call_later(LINGER_S, t.close)

    def _process_frames(self) -> None:
        if self._turn_pending:
            return                      # _next_turn goes on from where it stopped
        applied = 0
        held = self._held
        while (not self._blocked and not self._closing and not self._owed_full and
               not self._write_paused and self._frame_error is None):
            frame = self._next_frame()
            if frame is None:
                break
            if applied == FRAMES_PER_TURN:
                # another frame waits, but it is the others' turn: reading waits
                # too, or the bytes would pile up
                self._pending_frames.appendleft(frame)
                self._turn_pending = True
                self._pause_reading()
                self.loop.call_soon(self._next_turn)
                return
            applied += 1
            try:
                waiting = self._dispatch(frame)
            except (HarbormqError, FrameError) as exc:
                self.fail(str(exc), frame=frame, reason=getattr(exc, "reason", None))
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
            if len(held) >= MAX_HELD or self._out_bytes > WRITE_HIGH:
                self._check_owed()
        if self._frame_error is not None and not self._blocked and not self._closing:
            message, receipt = self._frame_error
            self.fail(message, receipt=receipt)

    def _next_turn(self) -> None:
        self._turn_pending = False
        self._resume_if_ready()
        self._process_frames()
        self._watch_partial_frame()

    def _check_owed(self) -> None:
        """Stop reading and applying frames while too much output is owed: held
        for a force (a pipelining producer's receipts, deliveries) or not yet
        taken by the client. _release_held and resume_writing go on."""
        if len(self._held) >= MAX_HELD:
            self._owed_full = True
            self._pause_reading()
        elif self._out_bytes > WRITE_HIGH:
            self._flush()               # the transport's buffer decides (pause_writing)

    async def _resume_after(self, coro, frame: Frame) -> None:
        try:
            await coro
        except HarbormqError as exc:
            self.fail(str(exc), frame=frame, reason=exc.reason)
            return
        except Exception as exc:
            self.fail(f"internal error processing {frame.command}: {exc!r}", frame=frame)
            return
        self._blocked = False
        self._resume_if_ready()
        self._pending_frames.appendleft(frame)   # now it can complete synchronously
        self._process_frames()
        self._watch_partial_frame()

    @staticmethod
    def _required(frame: Frame, name: str) -> str:
        value = frame.headers.get(name)
        if value is None or value == "":
            raise ProtocolError(f"{frame.command} frame is missing the required header "
                                f"'{name}'")
        return value

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
        self._timers["beat"] = self.loop.call_later(every_ms / 1000, self._beat, every_ms)

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
        self._timers["alive"] = self.loop.call_later(every_ms / 1000, self._check_alive,
                                                     every_ms)


def error_parts(message: str, frame: Frame | None = None, detail: str = "",
                reason: int | None = None, receipt: str | None = None) -> tuple[dict, bytes]:
    """The headers and body of an ERROR: ``message``, ``receipt-id`` (the failed
    frame's receipt), ``reason-code`` (the MQ reason code), ``content-type``
    text/plain, and a body saying it all again (``detail`` if given)."""
    headers = {"message": message[:500].replace("\n", " ")}
    if receipt is None and frame is not None:
        receipt = frame.headers.get("receipt")
    if receipt is not None:
        headers["receipt-id"] = receipt
    if reason is None:
        found = _MQRC.search(message)
        reason = int(found.group(1)) if found else None
    if reason is not None:
        headers["reason-code"] = str(reason)
    headers["content-type"] = "text/plain"
    return headers, ((detail or message) + "\n").encode()


def _retrieve(fut: asyncio.Future) -> None:
    if not fut.cancelled():
        fut.exception()
