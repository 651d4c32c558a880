"""A raw-frame asyncio STOMP 1.2 load generator (used by ``bench_stomp.py``).

Built so that the client costs as little CPU per message as possible:

* one ``asyncio.Protocol`` per producer/consumer connection, everything driven
  from ``data_received`` callbacks (no task or future per message);
* outgoing frames are bytes built from prebuilt pieces (the SEND prefix, the
  1 KiB filler); only the receipt number and the 20-digit send timestamp at the
  start of the body change per message; every batch of frames leaves in one
  ``transport.write``;
* incoming frames are cut with ``bytearray.find`` (header end, the
  ``content-length`` header, else the NUL) and only the one or two headers a
  role needs are read (``ack`` on MESSAGE; RECEIPTs are simply counted,
  receipts come back in frame order on a connection).

The body starts with the sender's ``time.perf_counter_ns()`` (CLOCK_MONOTONIC,
so comparable across processes), which gives the end-to-end latency (SEND
written -> MESSAGE parsed) without any extra header for the server to carry.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

NUL = b"\0"
_now = time.perf_counter_ns


class StompError(Exception):
    pass


class Run:
    """State shared by every connection of one measured phase (one process)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, total: int, *, max_backlog: int = 0,
                 rate: float = 0.0, host: str = "localhost", connect_extra: bytes = b"",
                 subscribe_extra: bytes = b""):
        self.loop = loop
        # other brokers want other CONNECT/SUBSCRIBE headers (RabbitMQ: host is its
        # vhost, login needed; ActiveMQ: activemq.prefetchSize), as "name:value\n" lines
        self.host = host
        self.connect_extra = connect_extra
        self.subscribe_extra = subscribe_extra
        self.total = total               # messages the producers send in all
        self.sent = 0                    # SENDs written (all producers)
        self.receipted = 0               # SENDs confirmed by RECEIPT (or by COMMIT receipt)
        self.received = 0                # MESSAGE frames received (all consumers)
        self.max_backlog = max_backlog   # producers hold back while sent-received >= this
        self.rate = rate                 # total producer rate limit, msgs/s (0: none)
        self.t0 = 0                      # perf_counter_ns at the start
        self.t_last_receipt = 0
        self.t_last_message = 0
        self.t_first_message = 0
        self.all_received = loop.create_future()
        self.all_receipted = loop.create_future()
        self.producers: list[Producer] = []
        self.consumers: list[Consumer] = []
        self.error: BaseException | None = None
        self.send_lat: list[int] = []    # ns, receipt latency per receipted frame
        self.e2e_lat: list[int] = []     # ns, SEND written -> MESSAGE parsed
        self._held: list[Producer] = []  # producers waiting for backlog/rate

    def failed(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc
        for fut in (self.all_received, self.all_receipted):
            if not fut.done():
                fut.set_exception(exc)

    def on_received(self, n: int) -> None:
        self.received += n
        self.t_last_message = _now()
        if not self.t_first_message:
            self.t_first_message = self.t_last_message
        if self._held and self.max_backlog and \
                self.sent - self.received < self.max_backlog * 0.98:
            held, self._held = self._held, []
            for p in held:
                p.fill()
        if self.received >= self.total and not self.all_received.done():
            self.all_received.set_result(None)

    def on_receipted(self, n: int) -> None:
        self.receipted += n
        self.t_last_receipt = _now()
        if self.receipted >= self.total and not self.all_receipted.done():
            self.all_receipted.set_result(None)

    def allowance(self) -> int | None:
        """How many more SENDs may go now (None: no limit)."""
        limit = None
        if self.max_backlog:
            limit = max(0, self.max_backlog - (self.sent - self.received))
        if self.rate:
            due = int((_now() - self.t0) / 1e9 * self.rate) - self.sent + 1
            limit = max(0, due) if limit is None else max(0, min(limit, due))
        return limit

    def hold(self, p: "Producer") -> None:
        if p not in self._held:
            self._held.append(p)
        if self.rate:
            self.loop.call_later(0.005, self._release)

    def _release(self) -> None:
        held, self._held = self._held, []
        for p in held:
            p.fill()


class StompProto(asyncio.Protocol):
    """CONNECT, frame cutting, DISCONNECT; subclasses handle frames."""

    def __init__(self, run: Run, name: str):
        self.run = run
        self.name = name
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.connected = run.loop.create_future()
        self.closed = run.loop.create_future()
        self._disc_receipt = b""
        self.disconnected = run.loop.create_future()
        self._paused = False

    # -- transport
    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.write(b"CONNECT\naccept-version:1.2\nhost:" + self.run.host.encode() +
                        b"\nheart-beat:0,0\n" + self.run.connect_extra +
                        b"client-id:" + self.name.encode() + b"\n\n\0")

    def connection_lost(self, exc) -> None:
        if not self.closed.done():
            self.closed.set_result(None)
        if not self.disconnected.done():
            err = StompError(f"{self.name}: connection lost before DISCONNECT receipt ({exc})")
            self.disconnected.set_exception(err)
            self.run.failed(err)
        if not self.connected.done():
            self.connected.set_exception(StompError(f"{self.name}: connection lost"))

    def disconnect(self) -> asyncio.Future:
        self._disc_receipt = b"bye-" + self.name.encode()
        self.resume()
        self.transport.write(b"DISCONNECT\nreceipt:" + self._disc_receipt + b"\n\n\0")
        return self.disconnected

    def resume(self) -> None:
        if self._paused:
            self._paused = False
            self.transport.resume_reading()

    # -- frames in
    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        n = len(buf)
        pos = 0
        try:
            while pos < n:
                c = buf[pos]
                if c == 10 or c == 13:          # heart-beat
                    pos += 1
                    continue
                he = buf.find(b"\n\n", pos)
                if he < 0:
                    break
                cl = buf.find(b"\ncontent-length:", pos, he)
                if cl >= 0:
                    eol = buf.find(b"\n", cl + 16, he + 1)
                    end = he + 2 + int(buf[cl + 16:eol])
                    if end >= n:
                        break
                else:
                    end = buf.find(NUL, he + 2)
                    if end < 0:
                        break
                nl = buf.find(b"\n", pos)
                cmd = bytes(buf[pos:nl])
                if cmd == b"MESSAGE":
                    self.on_message(buf, pos, he, end)
                elif cmd == b"RECEIPT":
                    self.on_receipt(buf, pos, he)
                elif cmd == b"CONNECTED":
                    if not self.connected.done():
                        self.connected.set_result(None)
                elif cmd == b"ERROR":
                    text = bytes(buf[pos:end]).decode("utf-8", "replace")
                    raise StompError(f"{self.name}: server sent ERROR: {text[:600]!r}")
                else:
                    raise StompError(f"{self.name}: unexpected frame {cmd!r}")
                pos = end + 1
        except StompError as exc:
            self.run.failed(exc)
            if not self.connected.done():
                self.connected.set_exception(exc)
            self.transport.close()
            return
        if pos:
            del buf[:pos]
        self.after_batch()

    def header(self, buf: bytearray, pos: int, he: int, name: bytes) -> bytes | None:
        i = buf.find(b"\n" + name + b":", pos, he)
        if i < 0:
            return None
        start = i + len(name) + 2
        j = buf.find(b"\n", start, he + 1)
        return bytes(buf[start:j])

    def on_receipt(self, buf, pos, he) -> None:
        rid = self.header(buf, pos, he, b"receipt-id")
        if rid == self._disc_receipt and rid:
            if not self.disconnected.done():
                self.disconnected.set_result(None)
            return
        self.other_receipt(rid)

    def other_receipt(self, rid) -> None:
        raise StompError(f"{self.name}: unexpected RECEIPT {rid!r}")

    def on_message(self, buf, pos, he, end) -> None:
        raise StompError(f"{self.name}: unexpected MESSAGE")

    def after_batch(self) -> None:
        pass


class Producer(StompProto):
    """Sends its share of persistent messages to ``dest``.

    * ``txn_size`` 0: every SEND carries a receipt; at most ``window`` SENDs
      await their RECEIPT (window 1 = each SEND waits for its receipt).
    * ``txn_size`` N: BEGIN, N SENDs, COMMIT with receipt; at most ``window``
      transactions await their COMMIT receipt.
    """

    def __init__(self, run: Run, name: str, dest: str, count: int, body_size: int, *,
                 window: int = 1, txn_size: int = 0, sample_every: int = 1):
        super().__init__(run, name)
        self.count = count
        self.window = window
        self.txn_size = txn_size
        self.sample_every = sample_every
        self.sent = 0
        self.done = 0
        self.inflight: deque[int] = deque()     # send time of each awaited receipt
        self.rid = 0
        self.next_rid = 1
        self.txn_no = 0
        self.filler = b"x" * (body_size - 20)
        assert body_size >= 20
        self.prefix = (b"SEND\ndestination:" + dest.encode() + b"\npersistent:true\n"
                       b"content-type:application/octet-stream\n"
                       b"content-length:" + str(body_size).encode() + b"\n")
        if txn_size:
            self.prefix = self.prefix + b"transaction:" + name.encode() + b"-%d\n\n"
        else:
            self.prefix = self.prefix + b"receipt:%d\n\n"
        self.suffix = self.filler + NUL
        self.started = False

    def start(self) -> None:
        self.started = True
        self.fill()

    def fill(self) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        run = self.run
        room = self.window - len(self.inflight)
        if room <= 0 or self.sent >= self.count:
            return
        left = self.count - self.sent
        unit = self.txn_size or 1
        n = min(room * unit, left)
        allow = run.allowance()
        if allow is not None:
            if allow < min(unit, left):
                run.hold(self)
                return
            n = min(n, allow)
        out = []
        prefix = self.prefix
        suffix = self.suffix
        if self.txn_size:
            while n > 0:
                k = min(self.txn_size, n)
                self.txn_no += 1
                tx = self.name.encode() + b"-%d" % self.txn_no
                out.append(b"BEGIN\ntransaction:" + tx + b"\n\n\0")
                for _ in range(k):
                    out.append(prefix % self.txn_no)
                    out.append(b"%020d" % _now())
                    out.append(suffix)
                self.rid += 1
                out.append(b"COMMIT\ntransaction:" + tx + b"\nreceipt:%d\n\n\0" % self.rid)
                self.inflight.append((_now(), k))
                self.sent += k
                n -= k
        else:
            rid = self.rid
            t = _now()
            for _ in range(n):
                rid += 1
                out.append(prefix % rid)
                out.append(b"%020d" % t)
                out.append(suffix)
                self.inflight.append((t, 1))
            self.rid = rid
            self.sent += n
        run.sent += n
        self.transport.write(b"".join(out))

    def other_receipt(self, rid) -> None:
        if rid is None or int(rid) != self.next_rid:
            raise StompError(f"{self.name}: RECEIPT {rid!r} out of order (expected "
                             f"{self.next_rid})")
        self.next_rid += 1
        t, k = self.inflight.popleft()
        now = _now()
        if self.next_rid % self.sample_every == 0:
            self.run.send_lat.append(now - t)
        self.done += k
        self.run.on_receipted(k)

    def after_batch(self) -> None:
        if self.started:
            self.fill()


class Consumer(StompProto):
    """Subscribes to ``dest`` and acknowledges as a durable consumer would.

    ``ack``: ``auto``; ``client-individual`` (an ACK per MESSAGE); ``client``
    (a cumulative ACK every ``ack_every`` MESSAGEs). ``txn_size`` N: the ACKs go
    in transactions of N, each ended by COMMIT (with receipt). ``rate`` > 0
    makes it a slow consumer: it stops reading the socket whenever it is ahead
    of ``rate`` msgs/s, so the server's writes back up (transport
    backpressure)."""

    def __init__(self, run: Run, name: str, dest: str, *, ack: str = "client-individual",
                 prefetch: int = 64, ack_every: int = 32, txn_size: int = 0,
                 rate: float = 0.0, sample_every: int = 1):
        super().__init__(run, name)
        self.dest = dest
        self.ack = ack
        self.prefetch = prefetch
        self.ack_every = ack_every
        self.txn_size = txn_size
        self.rate = rate
        self.sample_every = sample_every
        self.received = 0
        self.subscribed = run.loop.create_future()
        self.out: list[bytes] = []
        self.last_ack: bytes | None = None
        self.unacked = 0            # ack:client, since the last cumulative ACK
        self.txn_no = 0
        self.in_txn = 0             # ACKs in the open transaction
        self.commit_rid = 0
        self.commits_pending = 0
        self.finishing = False
        self.t_start = 0
        self._counted = 0

    def subscribe(self) -> asyncio.Future:
        hdr = (b"SUBSCRIBE\nid:0\ndestination:" + self.dest.encode() + b"\nack:" +
               self.ack.encode() + b"\nreceipt:sub\n")
        if self.ack != "auto":
            hdr += b"prefetch-count:%d\n" % self.prefetch
        self.transport.write(hdr + self.run.subscribe_extra + b"\n\0")
        self.t_start = _now()
        return self.subscribed

    def other_receipt(self, rid) -> None:
        if rid == b"sub":
            if not self.subscribed.done():
                self.subscribed.set_result(None)
            return
        if rid is not None and rid.startswith(b"c"):
            self.commits_pending -= 1
            return
        raise StompError(f"{self.name}: unexpected RECEIPT {rid!r}")

    def on_message(self, buf, pos, he, end) -> None:
        self.received += 1
        if self.received % self.sample_every == 0:
            try:
                self.run.e2e_lat.append(_now() - int(buf[he + 2:he + 22]))
            except ValueError:
                pass
        ack = self.ack
        if ack == "auto":
            return
        i = buf.find(b"\nack:", pos, he)
        j = buf.find(b"\n", i + 5, he + 1)
        ack_id = bytes(buf[i + 5:j])
        out = self.out
        if self.txn_size:
            if self.in_txn == 0:
                self.txn_no += 1
                out.append(b"BEGIN\ntransaction:t%d\n\n\0" % self.txn_no)
            self.in_txn += 1
            if ack == "client-individual":
                out.append(b"ACK\nid:" + ack_id + b"\ntransaction:t%d\n\n\0" % self.txn_no)
            else:
                self.last_ack = ack_id
            if self.in_txn >= self.txn_size:
                self._commit()
        elif ack == "client-individual":
            out.append(b"ACK\nid:" + ack_id + b"\n\n\0")
        else:
            self.last_ack = ack_id
            self.unacked += 1
            if self.unacked >= self.ack_every:
                out.append(b"ACK\nid:" + ack_id + b"\n\n\0")
                self.unacked = 0

    def _commit(self) -> None:
        if self.ack == "client" and self.last_ack is not None:
            self.out.append(b"ACK\nid:" + self.last_ack +
                            b"\ntransaction:t%d\n\n\0" % self.txn_no)
        self.commit_rid += 1
        self.commits_pending += 1
        self.out.append(b"COMMIT\ntransaction:t%d\nreceipt:c%d\n\n\0"
                        % (self.txn_no, self.commit_rid))
        self.in_txn = 0

    def flush_acks(self) -> None:
        """End of run: acknowledge what is left (partial transaction, ack:client)."""
        if self.txn_size and self.in_txn:
            self._commit()
        elif self.ack == "client" and self.unacked and self.last_ack is not None:
            self.out.append(b"ACK\nid:" + self.last_ack + b"\n\n\0")
            self.unacked = 0
        if self.out and self.transport is not None:
            self.transport.write(b"".join(self.out))
            self.out.clear()

    def after_batch(self) -> None:
        if self.out:
            self.transport.write(b"".join(self.out))
            self.out.clear()
        got = self.received - self._counted
        if got:
            self._counted = self.received
            self.run.on_received(got)
        if self.rate and not self._paused and self.run.all_received.done() is False:
            ahead = self.received - (_now() - self.t_start) / 1e9 * self.rate
            if ahead > 0:
                self._paused = True
                self.transport.pause_reading()
                self.run.loop.call_later(ahead / self.rate, self.resume)
