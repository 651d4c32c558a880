"""What every feature of the HTTP front end is given: ``WebContext``.

A feature module exposes ``add_routes(app, context)`` and ``server.py`` calls
it from its one list (``FEATURES``). The context bundles, each typed by the
narrow Protocol the front end uses of it:

* ``core``: the queue manager core (queues, messages, connections, the log);
* ``qmgr_name``: the queue manager's name, as the URLs spell it;
* ``mqsc``: the MQSC runner of ``admin/`` (``MqscRunner``): one command run
  as a principal, with that principal's authority, answered per response
  message as MQ's command server answers;
* ``authenticator``: who a request is and what it may do (``Authenticator``,
  ``auth.py``): the same users, passwords and authority records as STOMP;
* ``stomp_websocket``: STOMP over WebSocket for ``/ws`` (``StompWebSocket``),
  or None;
* ``settings``: qm.toml's ``[web]``;
* ``starting``: the start's status (``RestartView``, ``starting.py``) when
  the listener opens before restart recovery: until it says running, no
  feature's handler runs (``starting.starting_gate``), and ``core`` is a
  core restart is still rebuilding.

A feature's handler learns who is asking with
``await context.authenticator.principal(request)`` and checks an authority
with ``context.authenticator.require(principal, objtype, name, authority)``;
a state-changing request first passes ``context.authenticator.check_csrf``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

if TYPE_CHECKING:
    from aiohttp import web

    from ..config import WebSettings
    from ..core.engine import QueueManagerCore
    from ..security import Principal


class CommandResponse(Protocol):
    """One response message of a command: MQ's ``commandResponse`` item."""
    completion_code: int             # 0 ok, 2 failed (MQCC_OK, MQCC_FAILED)
    reason_code: int                 # 0, an MQRC or MQRCCF
    text: list[str]                  # the response's lines as MQSC prints them
    parameters: dict[str, Any]       # its ATTR(value) pairs, names in lower case


class CommandOutcome(Protocol):
    """A command's responses and MQ's overall codes."""
    responses: Sequence[CommandResponse]
    completion_code: int
    reason_code: int


class MqscRunner(Protocol):
    """The MQSC commands of ``admin/`` run as ``principal`` with its authority."""

    async def run_command(self, text: str, principal: "Principal") -> CommandOutcome: ...


class Authenticator(Protocol):
    """Who a request is, and the authority check STOMP and MQSC make."""

    async def principal(self, request: "web.Request") -> "Principal": ...

    def require(self, principal: "Principal", objtype: str, name: str,
                authority: str) -> None: ...

    def visible(self, principal: "Principal", objtype: str, names: list[str],
                authority: str) -> list[str]:
        """The names of ``names`` ``require`` would let through, in one step."""
        ...

    def check_csrf(self, request: "web.Request") -> None: ...

    def close(self) -> None: ...


class StompWebSocket(Protocol):
    """STOMP over the WebSocket a request asks for (``stomp/websocket.py``)."""

    async def __call__(self, request: "web.Request") -> "web.StreamResponse": ...


class RestartView(Protocol):
    """The start of the queue manager, as the listener shows it while restart
    recovery runs (``starting.RestartStatus``)."""
    qmgr: str
    state: str                      # starting, running, failed
    error: str | None

    @property
    def running(self) -> bool: ...

    def as_dict(self) -> dict: ...


@dataclass
class WebContext:
    """The bundle each feature's ``add_routes`` is given (see the module)."""
    core: "QueueManagerCore"
    qmgr_name: str
    mqsc: MqscRunner
    authenticator: Authenticator
    settings: "WebSettings"
    stomp_websocket: StompWebSocket | None = None
    #: the last restart's report (``RestartReport.as_dict``), for /metrics
    restart_report: Callable[[], dict | None] | None = None
    #: the start's status when the listener opened before restart recovery
    starting: RestartView | None = None
