"""The channel protocol between two harbormq queue managers, over TCP.

Every frame::

    0   4   length       bytes after this field (little-endian)
    4   1   kind         HELLO, HELLO_OK, MSG, END_BATCH, CONFIRM, ERROR, CLOSE,
                         START_TLS, TLS_OK, HEARTBEAT
    5   4   header size  n
    9   n   header       JSON
    9+n     payload      the rest (MSG: a transmission-queue message body)

The conversation (docs/channels.md): a sender whose channel has an SSLCIPH
first says START_TLS (the channel, its queue manager, its CipherSpec); the
receiver answers TLS_OK when its own definition asks for the same CipherSpec,
or ERROR, and both sides turn the connection into TLS before anything else
flows. Then the sender says HELLO (its queue manager, the channel, the
sequence number it last committed, its in-doubt batch if it has one, its
HBINT); the receiver answers HELLO_OK with its own last committed sequence
number and batch id and the heartbeat interval both use, or ERROR. Then
batches: MSG frames numbered one by one, END_BATCH with the batch id, CONFIRM
once the receiver has committed it. A sender with nothing to send for the
heartbeat interval sends HEARTBEAT between batches and the receiver answers
HEARTBEAT.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct

from ..errors import HarbormqError

HELLO, HELLO_OK, MSG, END_BATCH, CONFIRM, ERROR, CLOSE, START_TLS, TLS_OK, HEARTBEAT = \
    range(1, 11)
KIND_NAMES = {HELLO: "HELLO", HELLO_OK: "HELLO_OK", MSG: "MSG", END_BATCH: "END_BATCH",
              CONFIRM: "CONFIRM", ERROR: "ERROR", CLOSE: "CLOSE", START_TLS: "START_TLS",
              TLS_OK: "TLS_OK", HEARTBEAT: "HEARTBEAT"}
#: 2: START_TLS, TLS_OK, HEARTBEAT and the HBINT of HELLO / HELLO_OK
PROTOCOL_VERSION = 2
_HEAD = struct.Struct("<IBI")
_LEN = struct.Struct("<I")
#: the largest frame accepted: a message of the largest MAXMSGL and its headers
MAX_FRAME = 101 * 1024 * 1024


class ChannelProtocolError(HarbormqError):
    """The partner sent something that is not the channel protocol."""
    msgid = "HMQ9504E"


def encode(kind: int, header: dict, payload: bytes = b"") -> bytes:
    head = json.dumps(header, separators=(",", ":")).encode()
    return _HEAD.pack(5 + len(head) + len(payload), kind, len(head)) + head + payload


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
    task asyncio.wait_for would create for every frame (a receiver reads one
    per message)."""
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
