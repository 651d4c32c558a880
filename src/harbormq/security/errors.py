"""The errors of users, authority records and connection authentication.

Every one is a HarbormqError with its own message id; ``PeerUnknown`` (the OS
user at the other end of a connection cannot be told) is not one of them: it
lives in ``peers.py`` and authentication turns it into NotAuthorized.
"""

from __future__ import annotations

from ..errors import HarbormqError


class SecurityError(HarbormqError):
    msgid = "HMQ8880E"


class UnknownUser(SecurityError):
    msgid = "HMQ8881E"


class UserExists(SecurityError):
    msgid = "HMQ8882E"


class NotAuthorized(SecurityError):
    """MQRC 2035 NOT_AUTHORIZED: authentication failed or an authority is missing."""
    msgid = "HMQ2035E"
    reason = 2035


class InvalidAuthority(SecurityError):
    msgid = "HMQ8883E"


class ConnectionRefused(SecurityError):
    """A client connection refused by its channel or a CHLAUTH record (the
    message id says which: HMQ2537E MAXINST, HMQ2540E unknown channel,
    HMQ9776E BLOCKUSER, HMQ9777E NOACCESS, HMQ9782E BLOCKADDR)."""
    msgid = "HMQ9777E"
