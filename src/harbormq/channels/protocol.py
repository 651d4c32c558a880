"""The channel protocol between two harbormq queue managers, over TCP.

Every frame::

    0   4   length       bytes after this field (little-endian)
    4   1   kind         HELLO, HELLO_OK, MSGS, END_BATCH, CONFIRM, ERROR, CLOSE,
                         START_TLS, TLS_OK, HEARTBEAT
    5   4   header size  n
    9   n   header       JSON
    9+n     payload      the rest (MSGS: the batch's messages, below)

A MSGS frame carries several messages of a batch (version 3; version 2 sent
one MSG frame, with a JSON header, per message). Its header says the sequence
number of the first and how many there are; its payload is each message in
turn, binary::

    0   4   size         m (little-endian)
    4   m   body         a transmission-queue message body

A batch is one or more MSGS frames (a frame holds messages up to
``MSGS_BYTES``, or one larger message alone), then END_BATCH.

The conversation (docs/channels.md): a sender whose channel has an SSLCIPH
first says START_TLS (the channel, its queue manager, its CipherSpec); the
receiver answers TLS_OK when its own definition asks for the same CipherSpec,
or ERROR, and both sides turn the connection into TLS before anything else
flows. Then the sender says HELLO (its queue manager, the channel, the
sequence number it last committed, its in-doubt batch if it has one, its
HBINT); the receiver answers HELLO_OK with its own last committed sequence
number and batch id and the heartbeat interval both use, or ERROR. Then
batches: MSGS frames with the messages numbered one by one, END_BATCH with
the batch id, CONFIRM once the receiver has committed it. A sender with
nothing to send for the heartbeat interval sends HEARTBEAT between batches
and the receiver answers HEARTBEAT.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct

from ..errors import HarbormqError

HELLO, HELLO_OK, MSGS, END_BATCH, CONFIRM, ERROR, CLOSE, START_TLS, TLS_OK, HEARTBEAT = \
    range(1, 11)
KIND_NAMES = {HELLO: "HELLO", HELLO_OK: "HELLO_OK", MSGS: "MSGS", END_BATCH: "END_BATCH",
              CONFIRM: "CONFIRM", ERROR: "ERROR", CLOSE: "CLOSE", START_TLS: "START_TLS",
              TLS_OK: "TLS_OK", HEARTBEAT: "HEARTBEAT"}
#: 2: START_TLS, TLS_OK, HEARTBEAT and the HBINT of HELLO / HELLO_OK;
#: 3: MSGS (a batch's messages in one frame, each behind a binary size) for MSG
PROTOCOL_VERSION = 3
_HEAD = struct.Struct("<IBI")
_LEN = struct.Struct("<I")
#: the largest frame accepted: a message of the largest MAXMSGL and its headers
MAX_FRAME = 101 * 1024 * 1024
#: a MSGS frame takes messages while their bodies come to less than this
MSGS_BYTES = 256 * 1024


class ChannelProtocolError(HarbormqError):
    """The partner sent something that is not the channel protocol."""
    msgid = "HMQ9504E"


def encode(kind: int, header: dict, payload: bytes = b"") -> bytes:
    head = json.dumps(header, separators=(",", ":")).encode()
    return _HEAD.pack(5 + len(head) + len(payload), kind, len(head)) + head + payload


def encode_msgs(first_seq: int, bodies: list[bytes], reset: bool) -> list[bytes]:
    """The MSGS frames of a batch whose messages are numbered from
    ``first_seq``: as few as ``MSGS_BYTES`` allows."""
    frames = []
    i, n = 0, len(bodies)
    while i < n:
        parts, size, j = [], 0, i
        while j < n and (j == i or size + len(bodies[j]) <= MSGS_BYTES):
            parts.append(_LEN.pack(len(bodies[j])))
            parts.append(bodies[j])
            size += len(bodies[j])
            j += 1
        frames.append(encode(MSGS, {"seq": first_seq + i, "count": j - i, "reset": reset},
                             b"".join(parts)))
        i = j
    return frames


def decode_msgs(header: dict, payload: bytes) -> tuple[int, list[bytes]]:
    """(the first message's sequence number, the bodies) of a MSGS frame;
    ChannelProtocolError when the frame does not hold what its header says."""
    seq, count = header.get("seq"), header.get("count")
    if not isinstance(seq, int) or not isinstance(count, int) or count < 1:
        raise ChannelProtocolError(f"MSGS frame header {header} does not give a sequence "
                                   "number and a count of messages")
    bodies, pos, end = [], 0, len(payload)
    for _ in range(count):
        if pos + 4 > end:
            break
        (m,) = _LEN.unpack_from(payload, pos)
        pos += 4
        if pos + m > end:
            break
        bodies.append(payload[pos:pos + m])
        pos += m
    if len(bodies) != count or pos != end:
        raise ChannelProtocolError(f"MSGS frame says {count} messages in {end} bytes; it "
                                   f"holds {len(bodies)} whole ones and "
                                   f"{end - pos} bytes more")
    return seq, bodies


async def read_frame(reader: asyncio.StreamReader) -> tuple[int, dict, bytes]:
    """One frame; ChannelProtocolError when it is not a well-formed one,
    asyncio.IncompleteReadError when the connection ends."""
    (length,) = _LEN.unpack(await reader.readexactly(4))
    if not 5 <= length <= MAX_FRAME:
        raise ChannelProtocolError(f"channel frame of {length} bytes: not the harbormq "
                                   "channel protocol, or larger than any message")
    data = await reader.readexactly(length)
    kind = data[0]
    (n,) = _LEN.unpack_from(data, 1)
    if kind not in KIND_NAMES or 5 + n > length:
        raise ChannelProtocolError(f"malformed channel frame (kind {kind}, header {n} bytes)")
    try:
        header = json.loads(data[5:5 + n])
    except ValueError as exc:
        raise ChannelProtocolError(f"channel frame header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise ChannelProtocolError("channel frame header is not a JSON object")
    return kind, header, bytes(data[5 + n:])


def reply_timeout(hbint: int) -> float:
    """How long a partner has to answer (HELLO_OK, CONFIRM, a heartbeat): twice
    the heartbeat interval, at least 2 s and at most 60 s (no heartbeats: 60 s)."""
    return min(60.0, max(2.0, 2.0 * hbint)) if hbint else 60.0


async def read_frame_within(reader: asyncio.StreamReader, seconds: float
                            ) -> tuple[int, dict, bytes]:
    """``read_frame`` within ``seconds`` (else asyncio.TimeoutError), without the
    task asyncio.wait_for would create for every frame."""
    async with asyncio.timeout(seconds):
        return await read_frame(reader)


def no_delay(writer) -> None:
    """Frames go out at once (no Nagle delay behind an unacknowledged one):
    a batch's END_BATCH and CONFIRM are small and each waits for the other."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass


def expect(frame: tuple[int, dict, bytes], *kinds: int) -> tuple[int, dict, bytes]:
    """The frame if it is one of ``kinds``; an ERROR frame becomes the
    partner's error, anything else a protocol error."""
    kind, header, _payload = frame
    if kind in kinds:
        return frame
    if kind == ERROR:
        raise PartnerError(header.get("msgid", "HMQ9999E"), header.get("message", "?"))
    raise ChannelProtocolError(f"expected {' or '.join(KIND_NAMES[k] for k in kinds)}, the "
                               f"partner sent {KIND_NAMES[kind]}")


class PartnerError(HarbormqError):
    """The other side refused or ended the conversation with an ERROR frame."""

    def __init__(self, msgid: str, message: str):
        super().__init__(f"the partner queue manager says: {msgid} {message}", msgid=msgid)
