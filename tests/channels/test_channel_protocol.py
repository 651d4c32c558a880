"""Channel protocol 3 on the wire: a batch's messages in MSGS frames, a batch
of large messages spread over several of them, and partners that do not speak
it (an older sender, a malformed frame) refused with HMQ9504E and nothing
put."""

from __future__ import annotations

import asyncio
import json
import socket
import struct

import pytest
from channel_proxy import ChannelProxy
from test_channels import pair, receive_all, send_all, wait_until

from harbormq.channels import protocol as p


def _read_frame(sock: socket.socket) -> tuple[int, dict, bytes]:
    """One frame from a plain socket, parsed by the protocol's own reader."""
    sock.settimeout(30)
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack_from("<I", data)[0]:
        chunk = sock.recv(65536)
        assert chunk, f"the connection closed after {len(data)} bytes, not a whole frame"
        data += chunk

    async def parse():
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        return await p.read_frame(reader)

    return asyncio.run(parse())


def _hello(version: int, seq: int = 0) -> bytes:
    return p.encode(p.HELLO, {"version": version, "channel": "QMA.TO.QMB", "qm": "QMX",
                              "seq": seq, "reset": False, "indoubt": [], "hbint": 0,
                              "batchint": 0})


def test_a_batch_of_large_messages_spans_several_msgs_frames(tmp_path):
    """Six 100 KiB messages in one batch (BATCHSZ 10) do not fit one MSGS
    frame (256 KiB): the batch goes in several, and arrives whole, in order."""
    a, b, port = pair(tmp_path, batchsz=10)
    proxy = ChannelProxy(port, [])
    try:
        a.sc(f"ALTER CHANNEL(QMA.TO.QMB) CHLTYPE(SDR) CONNAME('127.0.0.1({proxy.port})')")
        a.sc("STOP CHANNEL(QMA.TO.QMB)")
        bodies = [f"{i:03d}" + chr(65 + i) * (100 * 1024) for i in range(6)]
        send_all(a.port, "/queue/TO.B", bodies)
        a.sc("START CHANNEL(QMA.TO.QMB)")
        assert receive_all(b.port, "IN", 6) == bodies
        wait_until(lambda: proxy.conns and proxy.conns[0].seen["back"].get(p.CONFIRM), 30,
                   "the batch's CONFIRM")
        seen = proxy.conns[0].seen["out"]
        assert seen[p.END_BATCH] == 1, seen
        assert seen[p.MSGS] == 3, seen          # two messages per frame
        assert "LSTSEQNO(6)" in b.sc("DISPLAY CHSTATUS(QMA.TO.QMB) ALL")
    finally:
        proxy.close()
        a.stop()
        b.stop()


def test_a_sender_of_an_older_protocol_is_refused(tmp_path):
    """A protocol 2 sender (one MSG frame per message) is refused at HELLO with
    HMQ9504E naming both versions, in its ERROR and in the receiver's log."""
    a, b, port = pair(tmp_path)
    try:
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(_hello(2))
            kind, header, _ = _read_frame(s)
        assert kind == p.ERROR, (kind, header)
        assert header["msgid"] == "HMQ9504E", header
        assert "version 2 is not 3" in header["message"], header
        log = b.qm_dir / "errors" / "HMQERR01.LOG"
        wait_until(lambda: "HMQ9504E" in log.read_text() and "version 2 is not 3" in
                   log.read_text(), 10, "HMQ9504E in the receiver's log")
    finally:
        a.stop()
        b.stop()


@pytest.mark.parametrize("why, frame", ids=("short", "overrun", "uncounted"), argvalues=[
    ("says 3 messages, holds 2", p.encode(p.MSGS, {"seq": 1, "count": 3, "reset": False},
                                          struct.pack("<I", 2) + b"m1" +
                                          struct.pack("<I", 2) + b"m2")),
    ("a size past the end", p.encode(p.MSGS, {"seq": 1, "count": 1, "reset": False},
                                     struct.pack("<I", 99) + b"short")),
    ("no count", p.encode(p.MSGS, {"seq": 1, "reset": False},
                          struct.pack("<I", 2) + b"m1")),
])
def test_a_malformed_msgs_frame_is_refused_and_nothing_is_put(tmp_path, why, frame):
    a, b, port = pair(tmp_path)
    try:
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(_hello(p.PROTOCOL_VERSION))
            kind, hello, _ = _read_frame(s)
            assert kind == p.HELLO_OK, (kind, hello)
            s.sendall(frame)
            s.sendall(p.encode(p.END_BATCH, {"seq": 1, "luwid": "x" * 32}))
            kind, header, _ = _read_frame(s)
        assert kind == p.ERROR, (why, kind, header)
        assert header["msgid"] == "HMQ9504E", (why, header)
        assert "MSGS frame" in header["message"], (why, header)
        assert "CURDEPTH(0)" in b.sc("DISPLAY QLOCAL(IN) CURDEPTH"), why
        assert "LSTSEQNO(0)" in b.sc("DISPLAY CHSTATUS(QMA.TO.QMB) ALL"), why
    finally:
        a.stop()
        b.stop()


def test_msgs_frames_round_trip():
    """encode_msgs packs as few frames as MSGS_BYTES allows (a larger message
    alone); decode_msgs gives back the numbers and the bodies."""
    big = b"x" * (p.MSGS_BYTES + 1)
    bodies = [b"a", b"", big, b"b" * 100, b"c"]
    frames = p.encode_msgs(41, bodies, reset=False)
    assert len(frames) == 3
    got = []
    for frame in frames:
        (n,) = struct.unpack_from("<I", frame, 5)
        header = json.loads(frame[9:9 + n])
        first, part = p.decode_msgs(header, frame[9 + n:])
        assert first == 41 + len(got)
        got += part
    assert got == bodies


def test_a_receiver_ending_leaves_its_commit_force_to_the_other_waiters():
    """The confirmer awaits the force of a batch's commit, a future shared with
    every other waiter of its loop turn (STOMP deliveries of that batch, ACK
    receipts). It is cancelled when the connection ends; that once cancelled
    the force itself, and a STOMP consumer on the same queue manager lost a
    MESSAGE frame."""
    from harbormq.channels.receiver import ReceiverSession

    async def run():
        loop = asyncio.get_running_loop()
        force = loop.create_future()
        committed: asyncio.Queue = asyncio.Queue()
        committed.put_nowait((force, 1, "luwid"))
        session = object.__new__(ReceiverSession)   # _confirm uses it only after the force
        confirmer = asyncio.ensure_future(session._confirm(committed))
        for _ in range(3):
            await asyncio.sleep(0)
        confirmer.cancel()
        for _ in range(3):
            await asyncio.sleep(0)
        return confirmer.cancelled(), force.cancelled()
    assert asyncio.run(run()) == (True, False)
