"""Who gets a STOMP connection slot, and how a CONNECT is authenticated.

* **Two budgets.** A socket that has not completed CONNECT is *waiting*: the
  waiting have a budget of their own, ``stomp.max_unauthenticated``, apart
  from ``stomp.max_connections``, which counts connected clients only. So
  sockets that never authenticate cannot take the slots clients need. When
  the waiting budget is full, a new socket pushes out the one that has
  waited longest and is not having its password checked right now (an idle
  socket, or a CONNECT waiting for its address's turn): a client that
  connects and sends its CONNECT at once is in long before a flood of idle
  sockets turns over. Only when every waiting socket is being checked is
  the new one refused. Each waiting socket is dropped after
  ``stomp.connect_timeout_ms`` without a CONNECT (the connection's timer).
* **Password checks on their own threads.** scrypt takes tens of
  milliseconds a check: they run on a small executor of their own
  (``stomp.auth_threads``), never on the default executor that the rest of
  connection setup (an anonymous client's OS user lookup) uses, so a burst
  of wrong passwords delays only other password checks.
* **Failed logins are rate-limited per peer address**
  (``security/login_limits.py``: ``stomp.login_failure_limit`` failures in
  ``stomp.login_failure_window_ms``, then refused at once, without a check).
  One address has at most ``auth_threads`` checks under way; its other
  CONNECTs wait their turn, and are refused without a check once the
  failures before them reach the limit: a burst of 200 wrong passwords from
  one address costs about ``login_failure_limit`` checks, not 200, and
  occupies the threads only as long as those take.
* **Refusals are summarised in the operator log**: in each window, a peer's
  first refusal of each kind (each user named, anonymous) is written at once,
  up to ``_LINES_PER_PEER`` of them; the rest are counted and written as one
  line per peer at the window's end (HMQ5534E with the count), so a burst
  cannot rotate older entries out of the log.

Not here: the CONNECT frame itself, the version and the heart-beats
(``connection.py``), the users and their passwords (``security/``).
"""

from __future__ import annotations

import asyncio
import contextlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from ..config import StompSettings
from ..core.operator_log import OperatorLog
from ..errors import HarbormqError
from ..security import (
    CertificateMatch,
    ClientAdmission,
    ConnectionRefused,
    LoginFailures,
    NotAuthorized,
    Principal,
    Security,
)

#: refusals of a peer written at once in a window (each of a different kind)
_LINES_PER_PEER = 10
#: peers whose refusals are counted one by one in a window; the rest are summed
_MAX_SUMMARISED_PEERS = 1000
_OTHER_PEERS = "(other addresses)"


class Admitted(Protocol):
    """What admission asks of a connection: to be told to go, and who it is
    (``core.connections.Connection``: its id and listener)."""
    info: Any

    def fail(self, message: str, **kw) -> None: ...


class Dropped(HarbormqError):
    """The connection was pushed out while its CONNECT waited for its turn."""
    msgid = "HMQ9508E"


class Admission:
    def __init__(self, settings: StompSettings, security: Security, oplog: OperatorLog,
                 clients: ClientAdmission):
        self.settings = settings
        self.security = security
        #: who an admitted CONNECT is (its SVRCONN channel, CHLAUTH, CONNAUTH)
        self.clients = clients
        self.oplog = oplog
        #: sockets that have not completed CONNECT, oldest first (a dict keeps order)
        self.waiting: dict[Admitted, None] = {}
        #: of those, the ones whose password is being checked: kept
        self.authenticating: set[Admitted] = set()
        self.connected: set[Admitted] = set()
        self._executor = ThreadPoolExecutor(max_workers=settings.auth_threads,
                                            thread_name_prefix="stomp-auth")
        self.window_s = settings.login_failure_window_ms / 1000
        self.failures = LoginFailures(settings.login_failure_limit, self.window_s)
        #: peer -> [refusals not yet written, what they were (a few), what was written]
        #: in this window
        self._unreported: dict[str, list] = {}
        self._summary_timer: asyncio.TimerHandle | None = None
        #: peer -> [its checks under way or waiting, the semaphore they share]
        self._per_peer: dict[str, list] = {}

    # -- the budgets --------------------------------------------------------------------

    def arrived(self, conn: Admitted) -> str | None:
        """A new socket: None when it may wait for its CONNECT, else why not."""
        limit = self.settings.max_unauthenticated
        if len(self.waiting) >= limit:
            idle = next((c for c in self.waiting if c not in self.authenticating), None)
            if idle is None:
                return (f"{limit} connections are being authenticated "
                        "(stomp.max_unauthenticated): try again")
            self.left(idle)
            idle.fail(f"dropped without a CONNECT: {limit} connections were waiting for "
                      "theirs (stomp.max_unauthenticated) and this one had waited longest",
                      linger=False)
        self.waiting[conn] = None
        return None

    def connect_started(self, conn: Admitted) -> None:
        """Its CONNECT frame arrived: refused (HarbormqError) when the connected
        clients already fill max_connections, so that no password is checked
        for nothing."""
        self._check_room()

    def admit(self, conn: Admitted) -> None:
        """Authenticated: it counts against max_connections from now on (refused
        when a connection that finished first took the last slot)."""
        self._check_room()
        self.waiting.pop(conn, None)
        self.authenticating.discard(conn)
        self.connected.add(conn)

    def _check_room(self) -> None:
        limit = self.settings.max_connections
        if len(self.connected) >= limit:
            raise HarbormqError(f"the queue manager has reached its limit of {limit} "
                                "connections (stomp.max_connections) "
                                "(MQRC 2025 MAX_CONNS_LIMIT_REACHED)", msgid="HMQ9507E")

    def left(self, conn: Admitted) -> None:
        self.waiting.pop(conn, None)
        self.authenticating.discard(conn)
        self.connected.discard(conn)

    # -- authentication -----------------------------------------------------------------

    async def authenticate(self, conn: Admitted, login: str | None, passcode: str, *,
                           peer: tuple, local: tuple | None,
                           certified: CertificateMatch | None = None,
                           login_required: bool = False) -> Principal:
        """Who a CONNECT's login (or, without one, its loopback peer) is; refused
        with NotAuthorized (MQRC 2035), the refusal summarised in the operator
        log."""
        host = str(peer[0]) if peer else ""

        def identify(run=None):
            # the channel's rules on the loop, the password or OS user check by ``run``
            return self.clients.admit(conn.info, login, passcode, peer, local,
                                      certified=certified, run=run,
                                      login_required=login_required)
        try:
            if not login or certified is not None:
                # an anonymous client's OS user (a quick /proc lookup), or the user
                # its certificate maps to: no password to check. Its CONNECT is
                # under way: a flood of new sockets does not push it out meanwhile
                self.authenticating.add(conn)
                try:
                    return await identify()
                finally:
                    self.authenticating.discard(conn)
            self._check_rate(host)
            async with self._peer_turn(host):
                if conn not in self.waiting:
                    raise Dropped("pushed out while its CONNECT waited for its turn")
                self._check_rate(host)          # failures before it, meanwhile
                self.authenticating.add(conn)
                try:
                    return await identify(self._on_auth_threads)
                except NotAuthorized:
                    self.failures.failed(host)
                    raise
                finally:
                    self.authenticating.discard(conn)
        except (Dropped, ConnectionRefused):
            raise           # (its channel's and CHLAUTH's refusals: svrconn.py logs them)
        except HarbormqError as exc:
            if exc.msgid == "HMQ5540E":
                what = f"anonymous, its OS user not identified ({exc.message})"
            elif "too many failed logins" in exc.message:
                what = f"user {login!r} refused: too many failed logins"
            else:
                what = ("anonymous" if not login else f"user {login!r}") + \
                    " failed authentication"
            self.refused(host, what, exc.msgid)
            raise

    def _on_auth_threads(self, fn):
        return asyncio.get_running_loop().run_in_executor(self._executor, fn)

    def _check_rate(self, host: str) -> None:
        wait = self.failures.refused_for(host)
        if wait > 0:
            raise NotAuthorized(f"too many failed logins from {host}: "
                                f"{self.settings.login_failure_limit} in {self.window_s:g} s "
                                f"(stomp.login_failure_limit); try again in {wait:.1f} s "
                                "(MQRC 2035 NOT_AUTHORIZED)", msgid="HMQ5534E")

    @contextlib.asynccontextmanager
    async def _peer_turn(self, host: str):
        """One of ``auth_threads`` turns of this peer's password checks."""
        entry = self._per_peer.get(host)
        if entry is None:
            entry = self._per_peer[host] = [0, asyncio.Semaphore(self.settings.auth_threads)]
        entry[0] += 1
        try:
            async with entry[1]:
                yield
        finally:
            entry[0] -= 1
            if not entry[0]:
                del self._per_peer[host]

    def refused(self, host: str, what: str, msgid: str) -> None:
        """A refused CONNECT: written at once when it is the peer's first of its
        kind in this window, else counted for the window's summary line."""
        entry = self._unreported.get(host)
        if entry is None and len(self._unreported) >= _MAX_SUMMARISED_PEERS:
            host = _OTHER_PEERS
            entry = self._unreported.get(host)
        if entry is None:
            entry = self._unreported[host] = [0, set(), set()]
            if self._summary_timer is None:
                self._summary_timer = asyncio.get_running_loop().call_later(
                    self.window_s, self._summarise)
        written = entry[2]
        if what not in written and len(written) < _LINES_PER_PEER:
            written.add(what)
            self.oplog.emit(msgid, f"STOMP connection from {host} refused: {what}")
            return
        entry[0] += 1
        if len(entry[1]) < 5:
            entry[1].add(what)

    def _summarise(self) -> None:
        """One line per peer refused again in the window; peers quiet in it are
        forgotten (their next refusal is written at once again)."""
        self._summary_timer = None
        for host, entry in list(self._unreported.items()):
            count, whats, _written = entry
            if not count:
                del self._unreported[host]
                continue
            self.oplog.emit("HMQ5534E", f"{count} more STOMP connection(s) from {host} "
                            f"refused in the last {self.window_s:g} s: "
                            f"{'; '.join(sorted(whats))}{'; ...' if count > len(whats) else ''}")
            entry[0], entry[1] = 0, set()     # what was written stays written
        if self._unreported:
            self._summary_timer = asyncio.get_running_loop().call_later(
                self.window_s, self._summarise)

    def close(self) -> None:
        if self._summary_timer is not None:
            self._summary_timer.cancel()
            self._summarise()
            if self._summary_timer is not None:
                self._summary_timer.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)
