"""The least a STOMP server can do for a receipted persistent SEND, for
bench_force_floor.py: read the frame, write its bytes to a preallocated file,
make them durable, send a RECEIPT. No queue, no parsing beyond the NUL that
ends a frame. What is left of a round trip here is the machine's floor: the
loopback, two event-loop wake-ups and an fdatasync.

    python _force_floor_server.py MODE PORT FILE

MODE says who makes the bytes durable:

* ``thread``: as harbormq's log does. Records are staged for one turn of the
  event loop, then handed to a writer thread (a Condition), which pwrites and
  fdatasyncs them and calls back into the loop (call_soon_threadsafe). The
  writer needs the GIL before it can start its write.
* ``process``: the loop pwrites at the end of its turn and asks a helper
  process, with an interpreter and a GIL of its own, to fdatasync the file
  (a pipe each way; the loop reads the answer as it reads sockets).

Both group-commit: forces asked for while one is in flight share the next.
It prints ``ready`` once it listens on 127.0.0.1:PORT, and runs until killed
(its helper process is in its process group).
"""

from __future__ import annotations

import asyncio
import os
import struct
import subprocess
import sys
import threading

import uvloop

#: the helper of ``process`` mode: fdatasync whenever asked, answer with the
#: furthest offset it was asked to cover
HELPER = r"""
import os, struct, sys
fd = os.open(sys.argv[1], os.O_RDWR)
ask, answer = int(sys.argv[2]), int(sys.argv[3])
while True:
    got = os.read(ask, 4096)
    if not got:
        break
    upto = struct.unpack_from("<q", got, len(got) - 8)[0]
    os.fdatasync(fd)
    os.write(answer, struct.pack("<q", upto))
"""

CONNECTED = b"CONNECTED\nversion:1.2\nheart-beat:0,0\n\n\0"
RECEIPT = b"RECEIPT\nreceipt-id:1\n\n\0"


class FloorLog:
    """Appends at the end of the file; ``force`` calls back once the bytes
    appended so far are durable."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int):
        self.loop = loop
        self.fd = fd
        self.end = 0            # bytes appended
        self.written = 0        # bytes handed to pwrite
        self.synced = 0         # bytes known durable
        self.staged: list[bytes] = []
        self.waiters: list[tuple[int, object]] = []
        self.turn_end_scheduled = False

    def append(self, data: bytes) -> None:
        self.staged.append(data)
        self.end += len(data)
        if not self.turn_end_scheduled:
            self.turn_end_scheduled = True
            self.loop.call_soon(self._turn_end)

    def force(self, callback) -> None:
        self.waiters.append((self.end, callback))

    def _synced_to(self, upto: int) -> None:
        self.synced = max(self.synced, upto)
        waiting = []
        for end, callback in self.waiters:
            if end <= self.synced:
                callback()
            else:
                waiting.append((end, callback))
        self.waiters = waiting

    def _turn_end(self) -> None:
        raise NotImplementedError


class ThreadLog(FloorLog):
    def __init__(self, loop, fd):
        super().__init__(loop, fd)
        self.cond = threading.Condition()
        self.ops: list[tuple[int, list[bytes]]] = []
        self.target = 0
        threading.Thread(target=self._run, daemon=True).start()

    def _turn_end(self) -> None:
        self.turn_end_scheduled = False
        chunks, self.staged = self.staged, []
        with self.cond:
            self.ops.append((self.written, chunks))
            self.written += sum(map(len, chunks))
            self.target = self.written
            self.cond.notify()

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.ops:
                    self.cond.wait()
                ops, self.ops = self.ops, []
                upto = self.target
            for offset, chunks in ops:
                os.pwrite(self.fd, b"".join(chunks), offset)
            os.fdatasync(self.fd)
            self.loop.call_soon_threadsafe(self._synced_to, upto)


class ProcessLog(FloorLog):
    def __init__(self, loop, fd, path: str):
        super().__init__(loop, fd)
        helper_ask, self.ask = os.pipe()
        self.answer, helper_answer = os.pipe()
        subprocess.Popen([sys.executable, "-c", HELPER, path, str(helper_ask),
                          str(helper_answer)], pass_fds=(helper_ask, helper_answer))
        os.close(helper_ask)
        os.close(helper_answer)
        self.in_flight = False
        loop.add_reader(self.answer, self._answered)

    def _turn_end(self) -> None:
        self.turn_end_scheduled = False
        data = b"".join(self.staged)
        self.staged = []
        os.pwrite(self.fd, data, self.written)
        self.written += len(data)
        if not self.in_flight:
            self._ask()

    def _ask(self) -> None:
        self.in_flight = True
        os.write(self.ask, struct.pack("<q", self.written))

    def _answered(self) -> None:
        got = os.read(self.answer, 4096)
        self.in_flight = False
        self._synced_to(struct.unpack_from("<q", got, len(got) - 8)[0])
        if self.written > self.synced:      # written while that sync ran
            self._ask()


class Connection(asyncio.Protocol):
    def __init__(self, log: FloorLog):
        self.log = log
        self.buf = bytearray()
        self.out: list[bytes] = []
        self.flush_scheduled = False

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while (nul := self.buf.find(b"\0")) != -1:
            frame = bytes(self.buf[:nul + 1])
            del self.buf[:nul + 1]
            if frame.startswith(b"CONNECT"):
                self.transport.write(CONNECTED)
                continue
            self.log.append(frame)
            self.log.force(self._receipt)

    def _receipt(self) -> None:
        self.out.append(RECEIPT)
        if not self.flush_scheduled:
            self.flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self.flush_scheduled = False
        self.transport.write(b"".join(self.out))
        self.out.clear()


async def serve(mode: str, port: int, path: str) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    os.posix_fallocate(fd, 0, 256 << 20)      # preallocated, as a log extent is
    os.fsync(fd)
    loop = asyncio.get_running_loop()
    log = ThreadLog(loop, fd) if mode == "thread" else ProcessLog(loop, fd, path)
    await loop.create_server(lambda: Connection(log), "127.0.0.1", port)
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    mode, port, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if mode not in ("thread", "process"):
        raise SystemExit(f"mode {mode!r}: expected thread or process")
    uvloop.run(serve(mode, port, path))
