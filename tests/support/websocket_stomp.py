"""A blocking STOMP client over WebSocket (``websocket-client``) for the tests of
the ``/ws`` endpoint: the raw client of ``stomp_helpers`` with WebSocket
messages in place of socket reads and writes, so the tests and their helpers
(``connect``, ``call``, ``messages``, ``expect_error``...) read the same.

Every message the server sends is fed to the frame reader as bytes; each
``send`` is one WebSocket message (text by default), and ``send_message``
sends any bytes (several frames, part of one) as one message.
"""

from __future__ import annotations

import ssl

import websocket

from support.stomp_helpers import ConnectionClosed, RawStomp, ServerFrameReader, build_frame

SUBPROTOCOLS = ("v12.stomp", "v11.stomp", "v10.stomp")


def ws_url(listener: dict, host: str = "127.0.0.1") -> str:
    """The ``ws://`` or ``wss://`` URL of a listener of listeners.json."""
    return f"{'wss' if listener['tls'] else 'ws'}://{host}:{listener['port']}{listener['path']}"


class WsStomp(RawStomp):
    """RawStomp over one WebSocket. ``origin``: False sends no Origin header (a
    program, not a browser page), a string sends that one."""

    def __init__(self, url: str, *, subprotocols=SUBPROTOCOLS, timeout: float = 20.0,
                 origin: str | bool = False, binary: bool = False,
                 sslopt: dict | None = None, sockopt: tuple = ()):
        kw = {"suppress_origin": True} if origin is False else {"origin": origin}
        self.ws = websocket.create_connection(url, subprotocols=list(subprotocols),
                                              timeout=timeout, sslopt=sslopt,
                                              sockopt=sockopt, skip_utf8_validation=True,
                                              **kw)
        self.timeout = timeout
        self.binary = binary
        self.reader = ServerFrameReader()
        self.frames = []
        self.eof = False
        self.connected = None
        self._n = 0
        #: the type of each message received: "text" or "binary"
        self.message_types: list[str] = []

    @property
    def subprotocol(self) -> str | None:
        return self.ws.getsubprotocol()

    def close(self) -> None:
        try:
            self.ws.close(timeout=1)
        except (OSError, websocket.WebSocketException):
            pass

    def send_message(self, data: bytes | str, binary: bool | None = None) -> None:
        """``data`` as one WebSocket message."""
        if isinstance(data, bytes) and not (self.binary if binary is None else binary):
            data = data.decode()
        if isinstance(data, str):
            self.ws.send(data)
        else:
            self.ws.send_binary(data)

    def send_bytes(self, data: bytes) -> None:
        self.send_message(data)

    def send(self, command: str, headers=(), body: bytes = b"", **kw) -> None:
        self.send_message(build_frame(command, headers, body, **kw))

    def _fill(self, timeout: float) -> bool:
        if self.eof:
            raise ConnectionClosed("connection closed by the server")
        self.ws.settimeout(max(timeout, 0.001))
        try:
            opcode, data = self.ws.recv_data()
        except websocket.WebSocketTimeoutException:
            return False
        except (websocket.WebSocketConnectionClosedException, ConnectionError, ssl.SSLError,
                OSError):
            self.eof = True
            return True
        if opcode == websocket.ABNF.OPCODE_CLOSE:
            self.eof = True
            return True
        self.message_types.append("text" if opcode == websocket.ABNF.OPCODE_TEXT else "binary")
        self.frames.extend(self.reader.feed(data))
        return True
