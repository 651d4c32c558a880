"""The channel protocol between two harbormq queue managers, over TCP.

Every frame::

    0   4   length       bytes after this field (little-endian)
    4   1   kind         HELLO, HELLO_OK, MSG, END_BATCH, CONFIRM, ERROR, CLOSE
    5   4   header size  n
    9   n   header       JSON
    9+n     payload      the rest (MSG: a transmission-queue message body)

The conversation (docs/channels.md): the sender says HELLO (its queue manager,
the channel, the sequence number it last committed, its in-doubt batch if it
has one); the receiver answers HELLO_OK with its own last committed sequence
number and batch id, or ERROR. Then batches: MSG frames numbered one by one,
END_BATCH with the batch id, CONFIRM once the receiver has committed it.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct

from ..errors import HarbormqError

HELLO, HELLO_OK, MSG, END_BATCH, CONFIRM, ERROR, CLOSE = range(1, 8)
KIND_NAMES = {HELLO: "HELLO", HELLO_OK: "HELLO_OK", MSG: "MSG", END_BATCH: "END_BATCH",
              CONFIRM: "CONFIRM", ERROR: "ERROR", CLOSE: "CLOSE"}
PROTOCOL_VERSION = 1
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
