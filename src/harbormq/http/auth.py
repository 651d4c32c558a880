"""Who an HTTP request is, what it may do, and MQ's CSRF header rule.

* **HTTP basic** (``Authorization: Basic``) with harbormq's users: the same
  users and passwords as STOMP's login and passcode, checked by the same
  ``Security.authenticate`` on threads of their own (scrypt takes tens of
  milliseconds; never on the loop), with the same rate limit of failed
  logins per address (``LoginFailures``). A good login is remembered for
  ``REMEMBER_S`` (keyed by a hash of the password, forgotten when users.json
  changes), so a script's requests do not each pay for scrypt.
* **Anonymous**, only with ``[web] connauth = "optional"``, on a loopback
  peer, with a ``Host`` that names this machine (a page of another site
  that rebinds its name to 127.0.0.1 is refused) and without an ``Origin``
  (a browser's page must log in, as a browser's STOMP WebSocket must): the
  OS user at the other end, as for an anonymous STOMP connection
  (``Security.anonymous_principal``), found once per connection (and
  again after ``REMEMBER_CONNECTION_S``).
* **Authority**: ``require`` is ``Security.require``, the one check STOMP and
  the channels make; a refusal is MQRC 2035 and answers 403.
* **CSRF**: a request that changes state (POST, PUT, PATCH, DELETE) must
  carry the header ``ibm-mq-rest-csrf-token`` (any value), which a form or
  a cross-site request of a browser cannot add without the listener's
  consent (it gives none: no CORS); else 403.

401 answers carry ``WWW-Authenticate: Basic realm="harbormq QM"``. Not here:
the users and authority records themselves (``security/``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import ipaddress
import os
import time
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web

from ..config import WebSettings
from ..security import LoginFailures, NotAuthorized, Principal, Security
from .errors import RestError

#: how long a verified login is taken without running scrypt again
REMEMBER_S = 60.0
#: logins remembered at most (the oldest go first)
REMEMBER_MAX = 1000
#: how long an anonymous connection's OS user is taken as found
REMEMBER_CONNECTION_S = 10.0
CSRF_HEADER = "ibm-mq-rest-csrf-token"
#: the methods that change state and so need the CSRF header
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: the request's key for the principal once known
PRINCIPAL_KEY = "harbormq.principal"
#: the request's key for what is told the principal once known (connections.py
#: makes the request a connection of the queue manager then)
ON_PRINCIPAL_KEY = "harbormq.on_principal"


def _loopback_host(host: str | None) -> bool:
    """The Host of a request (no port) names this machine."""
    host = (host or "").strip("[]").rstrip(".").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class WebAuthenticator:
    """The ``Authenticator`` of ``context.py`` over a queue manager's Security."""

    def __init__(self, security: Security, settings: WebSettings, qmgr_name: str, emit,
                 *, failure_limit: int = 10, failure_window_s: float = 60.0,
                 threads: int = 2):
        self.security = security
        self.settings = settings
        self.qmgr_name = qmgr_name
        self.emit = emit
        self.failures = LoginFailures(failure_limit, failure_window_s)
        self._checks = ThreadPoolExecutor(threads, thread_name_prefix="hmq-web-auth")
        #: (user, password hash) -> (principal, users.json stamp, when verified)
        self._remembered: dict[tuple[str, bytes], tuple[Principal, tuple, float]] = {}
        self._salt = os.urandom(16)
        #: an anonymous connection's principal, found once per connection and 10 s
        #: (the OS user at the other end is looked up in /proc/net/tcp: milliseconds)
        self._anonymous_by_connection: dict[tuple, tuple[Principal, float]] = {}

    def close(self) -> None:
        self._checks.shutdown(wait=False, cancel_futures=True)

    # -- who ---------------------------------------------------------------------------
    async def principal(self, request: web.Request) -> Principal:
        known = request.get(PRINCIPAL_KEY)
        if known is not None:
            return known
        header = request.headers.get("Authorization")
        if header is not None:
            principal = await self._basic(request, header)
        else:
            principal = self._anonymous(request)
        request[PRINCIPAL_KEY] = principal
        told = request.get(ON_PRINCIPAL_KEY)
        if told is not None:
            told(principal)
        return principal

    def _unauthorized(self, message: str) -> RestError:
        return RestError(401, "MQWB0104E", message, reason=2035,
                         explanation="The request did not authenticate.",
                         action="Send a harbormq user and password (HTTP basic "
                                "authentication).",
                         headers={"WWW-Authenticate":
                                  f'Basic realm="harbormq {self.qmgr_name}"'})

    async def _basic(self, request: web.Request, header: str) -> Principal:
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "basic":
            raise self._unauthorized(f"the Authorization scheme {scheme!r} is not supported: "
                                     "use Basic")
        try:
            user, sep, password = base64.b64decode(value.strip(),
                                                   validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise self._unauthorized("the Basic credentials are not base64 of "
                                     "user:password") from None
        if not sep or not user:
            raise self._unauthorized("the Basic credentials name no user")
        peer = _peer(request)
        key = (user, hashlib.sha256(self._salt + password.encode()).digest())
        stamp = self._users_stamp()
        remembered = self._remembered.get(key)
        if remembered is not None and remembered[1] == stamp and \
                time.monotonic() - remembered[2] < REMEMBER_S:
            return remembered[0]
        wait = self.failures.refused_for(peer[0])
        if wait > 0:
            raise self._unauthorized(f"too many failed logins from {peer[0]}: try again in "
                                     f"{wait:.0f} s")
        loop = asyncio.get_running_loop()
        try:
            principal = await loop.run_in_executor(
                self._checks, lambda: self.security.authenticate(
                    user, password, connauth="required", peer=peer))
        except NotAuthorized as exc:
            self.failures.failed(peer[0])
            self.emit("HMQ5534E", f"HTTP request from {peer[0]} refused: {exc.message}")
            raise self._unauthorized(f"user {user} could not be authenticated "
                                     "(MQRC 2035 NOT_AUTHORIZED)") from None
        if len(self._remembered) >= REMEMBER_MAX:
            self._remembered.pop(next(iter(self._remembered)))
        self._remembered[key] = (principal, stamp, time.monotonic())
        return principal

    def _users_stamp(self) -> tuple:
        """users.json's identity: a change of it forgets every remembered login."""
        try:
            st = os.stat(self.security.users.path)
        except OSError:
            return ()
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def _anonymous(self, request: web.Request) -> Principal:
        if self.settings.connauth != "optional":
            raise self._unauthorized("this listener requires a user and password "
                                     "(web.connauth = \"required\")")
        if "Origin" in request.headers:
            raise self._unauthorized("a browser's request (it has an Origin) must log in")
        if not _loopback_host(request.url.host):
            raise self._unauthorized(f"an anonymous request must name this machine (Host: "
                                     f"{request.host}); log in instead")
        transport = request.transport
        peer = _peer(request)
        sock = transport.get_extra_info("sockname") if transport else None
        # the connection: its transport object and both its addresses
        key = (id(transport), peer, tuple(sock) if sock else None)
        known = self._anonymous_by_connection.get(key)
        now = time.monotonic()
        if known is not None and now - known[1] < REMEMBER_CONNECTION_S:
            return known[0]
        try:
            principal = self.security.authenticate(None, None, connauth="optional",
                                                   peer=peer, local=sock)
        except NotAuthorized as exc:
            raise self._unauthorized(exc.message) from None
        if len(self._anonymous_by_connection) >= REMEMBER_MAX:
            self._anonymous_by_connection.pop(next(iter(self._anonymous_by_connection)))
        self._anonymous_by_connection[key] = (principal, now)
        return principal

    # -- what it may do ----------------------------------------------------------------
    def require(self, principal: Principal, objtype: str, name: str, authority: str) -> None:
        self.security.require(principal, objtype, name, authority)

    def visible(self, principal: Principal, objtype: str, names, authority: str) -> list[str]:
        return self.security.visible(principal, objtype, names, authority)

    def check_csrf(self, request: web.Request) -> None:
        if request.method in STATE_CHANGING and CSRF_HEADER not in request.headers:
            raise RestError(403, "MQWB0119E", f"the request ({request.method}) changes state "
                            f"and has no {CSRF_HEADER} header",
                            explanation="Requests that change state must carry the "
                            f"{CSRF_HEADER} header (any value) against cross-site request "
                            "forgery.", action=f"Add the header {CSRF_HEADER}.")


def _peer(request: web.Request) -> tuple:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    return tuple(peer) if peer else ("", 0)
