"""A loopback TCP proxy for channel tests: between a sender channel (its
CONNAME names the proxy) and its receiver, reading the channel protocol's
frames as they pass, and cutting the n-th connection where its plan says.

A plan is a ``Cut``: in one direction ("out": sender to receiver, "back":
receiver to sender), at the n-th frame of one kind, either

* ``after``: forward the frame, then close both sockets;
* ``before``: close both sockets without forwarding it;
* ``mid``: forward half of the frame, then close both sockets;
* ``hold``: forward the frame, then forward nothing more either way while
  keeping both sockets open (a connection dropped silently on the way: no
  FIN, no RST, as when a firewall forgets it).

Connections past the list of plans pass through untouched.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from dataclasses import dataclass

from harbormq.channels import protocol as p


@dataclass(frozen=True)
class Cut:
    direction: str          # "out" or "back"
    kind: int               # a frame kind (protocol.MSGS, END_BATCH, CONFIRM, ...)
    nth: int = 1
    how: str = "after"      # after, before, mid, hold


class _Conn:
    def __init__(self, proxy: "ChannelProxy", index: int, client: socket.socket,
                 upstream: socket.socket, plan: Cut | None):
        self.proxy, self.index, self.plan = proxy, index, plan
        self.client, self.upstream = client, upstream
        self.seen = {"out": {}, "back": {}}
        self.held = threading.Event()
        self.closed = False
        self.lock = threading.Lock()

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
        for s in (self.client, self.upstream):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def pump(self, direction: str, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not self.closed:
                head = _recv_exactly(src, 4)
                if head is None:
                    break
                (length,) = struct.unpack("<I", head)
                body = _recv_exactly(src, length)
                if body is None:
                    break
                frame = head + body
                if self.held.is_set():
                    continue                   # swallowed: the connection is "dropped"
                kind = body[0]
                count = self.seen[direction][kind] = self.seen[direction].get(kind, 0) + 1
                plan = self.plan
                if plan and plan.direction == direction and plan.kind == kind and \
                        plan.nth == count:
                    self.proxy.events.append((self.index, direction, p.KIND_NAMES[kind],
                                              plan.how, time.monotonic()))
                    if plan.how == "before":
                        break
                    if plan.how == "mid":
                        dst.sendall(frame[:len(frame) // 2])
                        break
                    dst.sendall(frame)
                    if plan.how == "after":
                        break
                    self.held.set()            # hold: nothing more goes through
                    continue
                dst.sendall(frame)
        except OSError:
            pass
        if not self.held.is_set():
            self.close()


def _recv_exactly(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except OSError:
            return None
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


class ChannelProxy:
    def __init__(self, target_port: int, plans: list[Cut | None]):
        self.target = ("127.0.0.1", target_port)
        self.plans = list(plans)
        self.events: list[tuple] = []
        self.conns: list[_Conn] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._stop = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def connections(self) -> int:
        return len(self.conns)

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            index = len(self.conns)
            plan = self.plans[index] if index < len(self.plans) else None
            conn = _Conn(self, index, client, upstream, plan)
            self.conns.append(conn)
            for direction, src, dst in (("out", client, upstream), ("back", upstream, client)):
                threading.Thread(target=conn.pump, args=(direction, src, dst),
                                 daemon=True).start()

    def close(self) -> None:
        self._stop = True
        self.listener.close()
        for c in self.conns:
            c.close()
