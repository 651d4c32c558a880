"""The listener's limits on a request: its length and its pace.

* A body longer than ``max_body_bytes`` is refused (413) from its
  Content-Length before any of it is read (``body_limit``), or once that
  much has come when it is chunked (``read_body``).
* A request whose headers have not all come within ``request_timeout_ms``
  of its first byte is answered 408 and its connection closed
  (``DeadlineProtocol``, between the socket and aiohttp's handler); a body
  that has not all come within as long again is refused (408) too
  (``read_body``). A client dribbling bytes holds its own socket, never the
  loop, and never more than that long.

Errors are MQ's error body (``errors.py``). Not here: the listener
(``server.py``).
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from ..config import WebSettings
from .errors import RestError


def body_limit(settings: WebSettings):
    """The middleware that answers 413 from the Content-Length, before a byte of
    the body is read; the connection is then closed (its body is not drained)."""
    limit = settings.max_body_bytes

    @web.middleware
    async def middleware(request: web.Request, handler):
        if request.content_length is None or request.content_length <= limit:
            return await handler(request)
        error = RestError(413, "MQWB0108E", f"the request body is {request.content_length} "
                          f"bytes long; this listener takes at most {limit} (web."
                          "max_body_bytes)", explanation="The request body is too long.",
                          action="Send a shorter body.", headers={"Connection": "close"})
        return error.response()
    return middleware


async def read_body(request: web.Request, settings: WebSettings) -> bytes:
    """The whole body, within the listener's limits: 413 past max_body_bytes
    (a chunked body has no Content-Length), 408 when it has not all come by
    request_timeout_ms."""
    limit = settings.max_body_bytes
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(settings.request_timeout_ms / 1000):
            while True:
                chunk = await request.content.readany()
                if not chunk:
                    break
                size += len(chunk)
                if size > limit:
                    raise RestError(413, "MQWB0108E", f"the request body is longer than "
                                    f"{limit} bytes (web.max_body_bytes)",
                                    explanation="The request body is too long.",
                                    action="Send a shorter body.",
                                    headers={"Connection": "close"})
                chunks.append(chunk)
    except TimeoutError:
        raise timeout_error(settings, "body") from None
    return b"".join(chunks)


def timeout_error(settings: WebSettings, what: str) -> RestError:
    return RestError(408, "MQWB0408E", f"the request's {what} did not arrive within "
                     f"{settings.request_timeout_ms} ms (web.request_timeout_ms)",
                     explanation="The client sent the request too slowly.",
                     action="Send the whole request at once.", headers={"Connection": "close"})


class DeadlineProtocol(asyncio.Protocol):
    """Between a socket and aiohttp's request handler (``inner``), to which it
    passes everything: from a request's first byte, its headers have
    ``timeout_s`` to come whole (the middleware of ``server.py`` calls
    ``request_started`` when they have, ``request_finished`` after the
    answer); else the client gets 408 and the connection is closed."""

    def __init__(self, inner: asyncio.Protocol, timeout_s: float, answer: bytes,
                 registry: dict):
        self.inner = inner
        self.timeout_s = timeout_s
        self.answer = answer
        self.registry = registry
        self.transport: asyncio.BaseTransport | None = None
        self.in_request = False
        self.timer: asyncio.TimerHandle | None = None

    # -- the socket's side ----------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.registry[transport] = self
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if not self.in_request and self.timer is None:
            self.timer = asyncio.get_running_loop().call_later(self.timeout_s, self._expire)
        self.inner.data_received(data)

    def eof_received(self):
        return self.inner.eof_received()

    def connection_lost(self, exc) -> None:
        self._cancel()
        self.registry.pop(self.transport, None)
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    # -- the middleware's side ------------------------------------------------------------
    def request_started(self) -> None:
        self.in_request = True
        self._cancel()

    def request_finished(self) -> None:
        self.in_request = False

    def _cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _expire(self) -> None:
        self.timer = None
        if self.in_request or self.transport is None or self.transport.is_closing():
            return
        self.transport.write(self.answer)
        self.transport.close()


def raw_answer(error: RestError) -> bytes:
    """An error as the bytes of a whole HTTP/1.1 response (for a request
    aiohttp never parsed), closing the connection."""
    body = json.dumps(error.body()).encode()
    return (f"HTTP/1.1 {error.status} Request Timeout\r\n"
            "Content-Type: application/json; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


class DeadlineSite(web.TCPSite):
    """aiohttp's TCP site with every connection's handler behind a
    ``DeadlineProtocol`` (the same ``start``, the factory wrapped)."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, *, wrap,
                 handshake_timeout_s: float, **kw):
        super().__init__(runner, host, port, **kw)
        self._wrap = wrap
        self._handshake_timeout_s = handshake_timeout_s

    async def start(self) -> None:
        await web.BaseSite.start(self)            # registers the site with its runner
        loop = asyncio.get_running_loop()
        server = self._runner.server
        self._server = await loop.create_server(
            lambda: self._wrap(server()), self._host, self._port, ssl=self._ssl_context,
            backlog=self._backlog, reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
            # a TLS handshake not done by then is cut, as dribbled headers are
            **({"ssl_handshake_timeout": self._handshake_timeout_s}
               if self._ssl_context is not None else {}))
        if self._server.sockets:
            self._bound_port = self._server.sockets[0].getsockname()[1]
