"""Connections and the queue handles they hold (MQ's hconn and hobj).

Every client of the queue manager — a STOMP connection, the embedded Python
API — is a :class:`Connection` in the core's :class:`ConnectionRegistry`. A
connection opens queues through handles: a handle open for input counts in
the queue's IPPROCS, one open for output in its OPPROCS (DISPLAY QSTATUS), and
DISPLAY CONN shows the handles with the connection's unit of work, which is
how an administrator finds the application whose long unit of work pins the
log. STOP CONN calls the connection's ``stop`` callback.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .uow import UnitOfWork

_conn_counter = itertools.count(1)
_conn_prefix = os.urandom(4).hex().upper()


def new_conn_id() -> str:
    """A 16-hex-digit connection id, unique in this queue manager process."""
    return f"{_conn_prefix}{next(_conn_counter):08X}"


@dataclass
class Handle:
    """One open queue of one connection. Opening the same queue again with the
    same options shares the handle (its ``uses`` count)."""
    queue: str
    input: bool = False      # gets, subscriptions (IPPROCS)
    output: bool = False     # puts (OPPROCS)
    browse: bool = False
    opened_ns: int = field(default_factory=time.time_ns)
    uses: int = 0


@dataclass
class Connection:
    conn_id: str
    kind: str                  # "stomp" | "api"
    peer: str = ""             # address:port of the client
    user: str = ""             # authenticated user; for anonymous: its OS user
    app: str = ""              # what the client says it is (STOMP 'host' / client-id)
    listener: str = ""
    started_ns: int = field(default_factory=time.time_ns)
    handles: dict[tuple[str, str], Handle] = field(default_factory=dict)
    #: units of work the connection owns now: its transactions and deliveries
    #: awaiting acknowledgement
    uows: Callable[[], list["UnitOfWork"]] = field(default=lambda: [], repr=False)
    #: ends the connection (STOP CONN); the owner backs out what is unfinished
    stop: Callable[[str], None] | None = field(default=None, repr=False)

    def open(self, queue: str, mode: str) -> Handle:
        """Count a use of ``queue`` for ``mode`` ("input" | "output" | "browse")."""
        h = self.handles.get((queue, mode))
        if h is None:
            h = self.handles[(queue, mode)] = Handle(queue, input=mode == "input",
                                                     output=mode == "output",
                                                     browse=mode == "browse")
        h.uses += 1
        return h

    def close(self, queue: str, mode: str) -> None:
        h = self.handles.get((queue, mode))
        if h is not None:
            h.uses -= 1
            if h.uses <= 0:
                del self.handles[(queue, mode)]

    def oldest_uow(self) -> "UnitOfWork | None":
        """The unit of work that pins the log furthest back, if any wrote to it."""
        logged = [u for u in self.uows() if u.first_lsn]
        if logged:
            return min(logged, key=lambda u: u.first_lsn)
        live = self.uows()
        return min(live, key=lambda u: u.started_ns) if live else None


class ConnectionRegistry:
    def __init__(self):
        self.by_id: dict[str, Connection] = {}
        #: connections opened and closed since the start (the metrics' counters)
        self.opened_total = 0
        self.closed_total = 0

    def add(self, conn: Connection) -> Connection:
        self.by_id[conn.conn_id] = conn
        self.opened_total += 1
        return conn

    def remove(self, conn: Connection) -> None:
        if self.by_id.pop(conn.conn_id, None) is not None:
            self.closed_total += 1

    def __iter__(self):
        return iter(list(self.by_id.values()))

    def __len__(self) -> int:
        return len(self.by_id)

    def get(self, conn_id: str) -> Connection | None:
        return self.by_id.get(conn_id.upper())

    def handles_on(self, queue: str) -> list[tuple[Connection, Handle]]:
        return [(c, h) for c in self.by_id.values() for h in c.handles.values()
                if h.queue == queue]

    def procs(self, queue: str) -> tuple[int, int]:
        """(IPPROCS, OPPROCS): handles open on ``queue`` for input and for output."""
        ip = op = 0
        for _c, h in self.handles_on(queue):
            ip += h.input
            op += h.output
        return ip, op
