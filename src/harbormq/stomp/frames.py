"""STOMP 1.0/1.1/1.2 frames: an incremental parser with limits, and the encoder.

Pure: no I/O. The parser is given bytes as they arrive (``push``) and hands
out whole frames one at a time (``next_frame``), or all of them (``feed``);
heart-beats (bare EOLs between frames) are counted, not returned. Anything
malformed or over a limit raises :class:`FrameError` naming what was wrong; the
connection then sends ERROR and closes (the spec's advice), so the parser never
has to resynchronise.

Header escaping (1.1 and 1.2, every frame except CONNECT and CONNECTED)::

    \\\\ -> backslash   \\c -> colon   \\n -> LF   \\r -> CR (1.2 only)

any other escape is a protocol error. STOMP 1.0 has no escaping. When a header
repeats, the first occurrence is the one that counts (1.2 §Repeated Header
Entries). A frame with ``content-length`` has exactly that many body bytes
followed by NUL; without it the body ends at the first NUL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

CLIENT_COMMANDS = frozenset({
    "CONNECT", "STOMP", "SEND", "SUBSCRIBE", "UNSUBSCRIBE", "ACK", "NACK", "BEGIN",
    "COMMIT", "ABORT", "DISCONNECT",
})
#: frames whose headers are never escaped
_RAW_HEADER_COMMANDS = frozenset({"CONNECT", "CONNECTED"})


@dataclass(slots=True)
class Limits:
    max_frame_bytes: int = 4 * 1024 * 1024   # headers + body
    max_headers: int = 64
    max_header_bytes: int = 16 * 1024         # the command line and header block


class FrameError(Exception):
    """A frame broke the protocol or a limit; the message is for the client.

    ``frames`` are the whole frames that came before the bad one in the same
    feed: they are applied before the ERROR, so what a client sent does not
    depend on how TCP split it. ``receipt`` is the bad frame's receipt header
    when its headers could be read (the ERROR's ``receipt-id``)."""

    def __init__(self, message: str, *, receipt: str | None = None):
        super().__init__(message)
        self.frames: list[Frame] = []
        self.receipt = receipt


@dataclass(slots=True)
class Frame:
    command: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    def get(self, name: str, default: str | None = None) -> str | None:
        return self.headers.get(name, default)


_UNESCAPE_12 = {"\\\\": "\\", "\\c": ":", "\\n": "\n", "\\r": "\r"}
_UNESCAPE_11 = {"\\\\": "\\", "\\c": ":", "\\n": "\n"}


def _unescape(text: str, version: str) -> str:
    if "\\" not in text:
        return text
    table = _UNESCAPE_12 if version == "1.2" else _UNESCAPE_11
    out = []
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            pair = text[i:i + 2]
            repl = table.get(pair)
            if repl is None:
                raise FrameError(f"undefined escape sequence {pair!r} in header {text!r} "
                                 f"(STOMP {version})")
            out.append(repl)
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


_NEEDS_ESCAPE = re.compile(r"[\\:\n\r]")
_DIGITS = re.compile(r"[0-9]+")
#: more digits than this is more than any frame size limit (and than int() of
#: a digit string of header size should be asked to convert)
_MAX_LENGTH_DIGITS = 18


def escape(text: str, version: str, *, name: bool = False) -> str:
    """A header name or value as written in ``version``. STOMP 1.0 cannot escape:
    its line breaks become spaces, and a colon in a name an underscore, so a
    value that came from a 1.1/1.2 peer can never end a 1.0 header early."""
    if not _NEEDS_ESCAPE.search(text):
        return text
    if version == "1.0":
        text = text.replace("\r", " ").replace("\n", " ")
        return text.replace(":", "_") if name else text
    text = text.replace("\\", "\\\\").replace(":", "\\c").replace("\n", "\\n")
    return text.replace("\r", "\\r") if version == "1.2" else text


class FrameParser:
    """Incremental parser. ``version`` is set by the connection once CONNECT has
    negotiated it; until then headers are read raw (CONNECT is never escaped)."""

    def __init__(self, limits: Limits | None = None):
        self.limits = limits or Limits()
        self.version = "1.0"
        self.buf = bytearray()
        self.pos = 0             # where the next frame starts in ``buf``
        self.heartbeats = 0
        #: bytes of the frame being received, from its start, known to hold no
        #: NUL: a body without content-length is searched once, not once per chunk
        self._no_nul = 0
        #: bytes searched for a body's end, in all (linear in the bytes received)
        self.bytes_searched = 0

    def push(self, data: bytes) -> None:
        """Buffer ``data``; ``next_frame`` takes the frames out one at a time.
        Bytes are consumed by moving a read position, and the buffer is
        compacted once per push, so a burst of many frames costs time linear
        in its size."""
        if self.pos:
            del self.buf[:self.pos]
            self.pos = 0
        self.buf += data

    def next_frame(self) -> Frame | None:
        """The next whole frame buffered, or None. A connection takes frames one
        at a time, as it applies them: what it has not yet applied stays here
        as bytes (and in order: a malformed frame raises only once the frames
        before it are taken)."""
        return self._next()

    def feed(self, data: bytes) -> list[Frame]:
        """``push``, then the whole frames now buffered, up to a CONNECT."""
        self.push(data)
        frames: list[Frame] = []
        while True:
            try:
                frame = self._next()
            except FrameError as exc:
                exc.frames = frames
                raise
            if frame is None:
                break
            frames.append(frame)
            if frame.command in ("CONNECT", "STOMP"):
                # what follows is read in the version CONNECT negotiates: the
                # caller sets ``version`` and calls feed(b"") for the rest
                break
        return frames

    @property
    def unparsed(self) -> int:
        """Bytes received and not yet returned as a frame: a frame on its way
        (or frames behind a CONNECT, until the connection reads them)."""
        return len(self.buf) - self.pos

    def _next(self) -> Frame | None:
        buf = self.buf
        limits = self.limits
        n = len(buf)
        start = self.pos
        # heart-beats: EOLs before a frame
        while start < n and buf[start] in (10, 13):
            if buf[start] == 13:
                if start + 1 >= n:
                    break
                if buf[start + 1] != 10:
                    raise FrameError("a bare CR between frames (expected CR LF)")
                start += 2
            else:
                start += 1
            self.heartbeats += 1
        self.pos = start
        if start >= n:
            return None
        # the blank line ending the headers: LF LF, or LF CR LF (1.2 allows CR LF)
        limit = min(n, start + limits.max_header_bytes + 3)
        end = buf.find(b"\n\n", start, limit)
        end_crlf = buf.find(b"\n\r\n", start, end + 1 if end != -1 else limit)
        if end_crlf != -1:
            head_end, body_start = end_crlf, end_crlf + 3
        elif end != -1:
            head_end, body_start = end, end + 2
        else:
            if n - start > limits.max_header_bytes:
                raise FrameError(f"the command line and headers exceed "
                                 f"{limits.max_header_bytes} bytes without ending")
            self._check_command_prefix(buf[start:])
            if buf.find(b"\0", start, n) != -1:
                raise FrameError("a frame ended (NUL) before the blank line that ends its "
                                 "headers")
            return None
        if head_end - start > limits.max_header_bytes:
            raise FrameError(f"the command line and headers are {head_end - start} bytes; "
                             f"the limit is {limits.max_header_bytes}")
        if buf.find(b"\0", start, head_end) != -1:
            # a NUL ends a frame for every reader that does not count bytes: a
            # frame with one in its headers could not be passed on safely
            raise FrameError("NUL byte in the command line or headers of a frame")
        try:
            head = buf[start:head_end].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FrameError(f"frame headers are not valid UTF-8 ({exc.reason} at byte "
                             f"{exc.start})") from None
        lines = head.split("\n")
        command = lines[0]
        if command.endswith("\r"):
            command = command[:-1]
        if command not in CLIENT_COMMANDS:
            raise FrameError(f"unknown command {command[:40]!r}; expected one of "
                             f"{', '.join(sorted(CLIENT_COMMANDS))}")
        if len(lines) - 1 > limits.max_headers:
            raise FrameError(f"{command} frame has {len(lines) - 1} headers; the limit is "
                             f"{limits.max_headers}")
        raw = command in _RAW_HEADER_COMMANDS or self.version == "1.0"
        version = self.version
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line.endswith("\r"):
                line = line[:-1]
            name, sep, value = line.partition(":")
            if not sep or not name:
                raise FrameError(f"malformed header line {line[:60]!r} in {command} frame "
                                 "(expected name:value)")
            if not raw and ("\\" in name or "\\" in value):
                name = _unescape(name, version)
                value = _unescape(value, version)
            if name not in headers:
                headers[name] = value
        length = headers.get("content-length")
        if length is not None:
            receipt = headers.get("receipt")
            if not _DIGITS.fullmatch(length):
                what = "is negative" if length.strip().startswith("-") else "is not a number"
                raise FrameError(f"content-length {length!r} {what}: it must be a byte count "
                                 "in decimal digits", receipt=receipt)
            if len(length) > _MAX_LENGTH_DIGITS:
                raise FrameError(f"{command} frame's content-length of {len(length)} digits "
                                 f"exceeds the frame size limit of {limits.max_frame_bytes} "
                                 "bytes", receipt=receipt)
            size = int(length)
            if body_start - start + size > limits.max_frame_bytes:
                raise FrameError(f"{command} frame of {body_start - start + size} bytes "
                                 f"exceeds the frame size limit of {limits.max_frame_bytes} "
                                 "bytes", receipt=receipt)
            if n < body_start + size + 1:
                return None
            if buf[body_start + size] != 0:
                raise FrameError(f"{command} frame body is not followed by NUL at "
                                 f"content-length {size}", receipt=receipt)
            body = bytes(buf[body_start:body_start + size])
            self.pos = body_start + size + 1
        else:
            search_from = max(body_start, start + self._no_nul)
            search_to = min(n, start + limits.max_frame_bytes + 1)
            self.bytes_searched += max(0, search_to - search_from)
            nul = buf.find(b"\0", search_from, search_to)
            if nul == -1:
                if n - start > limits.max_frame_bytes:
                    raise FrameError(f"{command} frame exceeds the frame size limit of "
                                     f"{limits.max_frame_bytes} bytes without ending",
                                     receipt=headers.get("receipt"))
                self._no_nul = search_to - start
                return None
            body = bytes(buf[body_start:nul])
            self.pos = nul + 1
        self._no_nul = 0
        return Frame(command, headers, body)

    def _check_command_prefix(self, buf: bytearray) -> None:
        """Fail early on garbage rather than waiting for a header block that a
        bad client may never send."""
        nl = buf.find(b"\n")
        line = bytes(buf[:nl if nl != -1 else min(len(buf), 16)]).rstrip(b"\r")
        if nl != -1:
            if line.decode("utf-8", "replace") not in CLIENT_COMMANDS:
                raise FrameError(f"unknown command {line[:40]!r}")
        elif not any(c.encode().startswith(line) for c in CLIENT_COMMANDS):
            raise FrameError(f"unknown command {line[:40]!r}")


def encode_frame(command: str, headers, body: bytes = b"", version: str = "1.2") -> bytes:
    """Serialise a server frame. ``headers`` is a dict or a list of pairs; a
    content-length is added whenever there is a body."""
    items = headers.items() if isinstance(headers, dict) else headers
    # CONNECTED is never escaped: written as 1.0 would be
    wire = "1.0" if command in _RAW_HEADER_COMMANDS else version
    parts = [command]
    needs_escape = _NEEDS_ESCAPE.search
    for k, v in items:
        v = str(v)
        if needs_escape(v) or needs_escape(k):
            parts.append(f"{escape(k, wire, name=True)}:{escape(v, wire)}")
        else:
            parts.append(f"{k}:{v}")
    if body:
        parts.append(f"content-length:{len(body)}")
    parts.append("")
    parts.append("")
    return "\n".join(parts).encode() + body + b"\0"


def receipt_frame(receipt_id: str, version: str | None) -> bytes:
    """RECEIPT, the most frequent server frame, without the general encoder."""
    return b"RECEIPT\nreceipt-id:" + escape(receipt_id, version or "1.2").encode() + b"\n\n\0"
