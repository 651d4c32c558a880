"""A SEND's headers read into a message, and a message written as a MESSAGE frame.

The two per-message conversions of the STOMP front end, as plain functions so
that mypyc compiles them (``harbormq/_compiled.py``; a compiled class cannot be
mixed into the interpreted connection, a function called from it can). They
are the rules' one place: ``connection.py`` and ``topics.py`` read a SEND with
``message_of_send``, ``delivery.py`` writes each MESSAGE with ``message_frame``.
Not here: what a SEND or a delivery does to the core, the bookkeeping of
deliveries and acknowledgements, the transport.
"""

from __future__ import annotations

from typing import Any, Callable

from ..log.records import Message
from .frames import escape
from .topics import PUBLICATION_PROPERTIES
from .transport import ProtocolError

#: SEND headers that are part of the protocol or the descriptor; all others
#: travel as user properties
RESERVED_SEND_HEADERS = frozenset({
    "destination", "transaction", "receipt", "content-length", "content-type", "persistent",
    "priority", "expires", "correlation-id", "reply-to", "message-id", "subscription", "ack",
    "id", "redelivered", "timestamp", "backout-count",
})
#: headers a MESSAGE sets itself; user properties of the same name are not sent
MESSAGE_HEADERS = frozenset({
    "subscription", "destination", "message-id", "ack", "redelivered", "backout-count",
    "persistent", "priority", "timestamp", "expires", "correlation-id", "reply-to",
    "content-type", "content-length",
})
#: a publication's: its topic and retained mark travel as headers of their own
PUBLICATION_HEADERS = MESSAGE_HEADERS | PUBLICATION_PROPERTIES

#: ``defaults(where, priority, persistent)``: what the headers left out, filled in
#: (its answer is passed on unchecked, as the definitions hold it)
Defaults = Callable[[Any, int | None, bool | None], tuple[Any, Any]]
#: a body as a caller may hold it: bytes, or a buffer over bytes
Body = bytes | bytearray | memoryview

# Compiled, a parameter or local annotated ``bytes``, ``int`` or ``bool`` is
# checked at run time (a bytearray, or a str priority, raises TypeError) where
# the source takes anything: what is not the module's own is typed ``Body`` or
# ``Any`` here, so that the build and the source answer alike
# (tests/test_compiled.py compares them).


def message_of_send(h: dict[str, str], body: Body, defaults: Defaults, where: Any) -> Message:
    """The message of a SEND's headers ``h`` and ``body``; ``defaults(where,
    priority, persistent)`` fills in what the headers leave out (a queue's or a
    topic's DEFPRTY and DEFPSIST). A header that is not what STOMP allows
    raises ProtocolError naming it. A body that is not bytes (a bytearray, a
    memoryview over a frame's buffer) is copied: the message outlives it."""
    if not isinstance(body, bytes):
        body = bytes(body)
    priority: int | None = None
    if "priority" in h:
        try:
            priority = int(h["priority"])
        except ValueError:
            raise ProtocolError(f"priority {h['priority']!r} is not a number 0-9") from None
        if not 0 <= priority <= 9:
            raise ProtocolError(f"priority {priority} is out of range 0-9")
    persistent: bool | None = None
    if "persistent" in h:
        value = h["persistent"].lower()
        if value not in ("true", "false"):
            raise ProtocolError(f"persistent {h['persistent']!r} must be true or false")
        persistent = value == "true"
    # (their own names: compiled, ``priority`` and ``persistent`` are int and bool)
    message_priority, message_persistent = defaults(where, priority, persistent)
    expiry_ns = 0
    if h.get("expires", "0") not in ("", "0"):
        try:
            expiry_ns = int(h["expires"]) * 1_000_000
        except ValueError:
            raise ProtocolError(f"expires {h['expires']!r} is not a time in milliseconds "
                                "since the epoch") from None
    props: dict[str, str] = {}
    if len(h.keys() - RESERVED_SEND_HEADERS):     # most SENDs carry no user property
        props = {k: v for k, v in h.items() if k not in RESERVED_SEND_HEADERS}
    return Message(body=body, correl_id=h.get("correlation-id", "").encode(),
                   priority=message_priority, persistent=message_persistent,
                   expiry_ns=expiry_ns,
                   reply_to=h.get("reply-to", ""), format=h.get("content-type", ""),
                   properties=props)


def message_frame(prefix: str, msg_hex: str, ack_id: str | None, msg: Message,
                  version: str, topic_lines: list[str] | None) -> bytes:
    """A MESSAGE frame's bytes: ``prefix`` (the command line and the
    subscription's constant headers, escaped once), the message's id, the
    ``ack`` header when ``ack_id`` is given, its descriptor and properties,
    and the body. ``topic_lines``: a publication's own header lines (its topic
    and retained mark), whose property names then travel as no header.
    Ids and numbers never need escaping."""
    parts = [prefix, "message-id:", msg_hex, "\n"]
    if ack_id is not None:
        parts += ("ack:", ack_id, "\n")
    # (the fields ``defaults`` and a caller's body give are read through
    # ``given``, unchecked, as the source reads them; the others as typed:
    # compiled, the typed ones are the faster)
    given: Any = msg
    backouts: int = msg.backout_count
    if backouts:
        parts.append(f"redelivered:true\nbackout-count:{backouts}\n")
    else:
        parts.append("redelivered:false\n")
    put_time_ns: int = msg.put_time_ns
    expiry_ns: int = msg.expiry_ns
    parts.append(f"persistent:{'true' if given.persistent else 'false'}\n"
                 f"priority:{given.priority}\ntimestamp:{put_time_ns // 1_000_000}\n"
                 f"expires:{expiry_ns // 1_000_000}\n")
    taken = MESSAGE_HEADERS
    if topic_lines is not None:
        parts += topic_lines
        taken = PUBLICATION_HEADERS
    correl_id: bytes = msg.correl_id
    if correl_id:
        parts += ("correlation-id:", escape(correl_id.decode("utf-8", "backslashreplace"),
                                            version), "\n")
    reply_to: str = msg.reply_to
    if reply_to:
        parts += ("reply-to:", escape(reply_to, version), "\n")
    content_type: str = msg.format
    if content_type:
        parts += ("content-type:", escape(content_type, version), "\n")
    properties: dict = msg.properties
    for k, v in properties.items():
        if k not in taken:
            parts += (escape(k, version, name=True), ":", escape(str(v), version), "\n")
    body = given.body       # (joined as it is: a buffer is not copied here)
    # (a memoryview's len counts items; content-length counts bytes)
    length = len(body) if isinstance(body, bytes) else memoryview(body).nbytes
    parts.append(f"content-length:{length}\n\n")
    return b"".join(("".join(parts).encode(), body, b"\0"))
