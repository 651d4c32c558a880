"""``Principal``: who a connection acts as (the principal model is in the
package's docstring, ``harbormq.security``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Principal:
    """Who a connection acts as."""
    user: str
    groups: tuple[str, ...] = ()
    #: connected without a login (its OS user identified it)
    anonymous: bool = False
    #: the queue manager's owner: every authority, never checked
    owner: bool = False
    #: the server-connection channel it came through, and that channel's MAXMSGL
    channel: str = ""
    max_msg_length: int = 0
