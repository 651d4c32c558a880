"""The errors of the queue sharing group, each with MQ's reason code where
MQ for z/OS has one (docs/qsg.md, "Reason codes")."""

from __future__ import annotations

from ..errors import HarbormqError, InvalidAttribute, MessageError, ObjectError


class GroupError(HarbormqError):
    """A member that cannot join, leave or start: another group's database,
    a name taken, a group that still has members (nothing is changed)."""
    msgid = "HMQ5301E"


class GroupDatabaseError(GroupError):
    """The group's database cannot be reached or is not a group's (CONNINFO)."""
    msgid = "HMQ5302E"


class CFNotAvailable(MessageError):
    """PostgreSQL, the group's coupling facility, cannot be reached: shared
    queues fail until it is back (MQRC 2345 CF_NOT_AVAILABLE)."""
    msgid = "HMQ2345E"
    reason = 2345


class CFStructFailed(MessageError):
    """The structure of a shared queue has failed (RESET CFSTRUCT ACTION(FAIL),
    or lost) and waits for RECOVER CFSTRUCT (MQRC 2373 CF_STRUC_FAILED)."""
    msgid = "HMQ2373E"
    reason = 2373


class SharedUnitBackedOut(MessageError):
    """A unit of work whose shared messages a peer backed out while this
    member's connection to the group's database was lost: it cannot commit
    (MQRC 2003 BACKED_OUT)."""
    msgid = "HMQ2003E"
    reason = 2003


class CFStructError(ObjectError):
    """A structure that is not defined, or in use where it would be deleted
    (MQRC 2346 CF_STRUC_IN_USE; an unknown one MQRC 2349 CF_STRUC_ERROR)."""
    msgid = "HMQ2349E"
    reason = 2349


class CFStructInUse(CFStructError):
    msgid = "HMQ2346E"
    reason = 2346


class SharedPersistentNotAllowed(MessageError):
    """A persistent message put to a shared queue whose structure is
    RECOVER(NO) (MQRC 2048 PERSISTENT_NOT_ALLOWED), as in MQ."""
    msgid = "HMQ2048E"
    reason = 2048


class SharedDefinitionError(InvalidAttribute):
    """A QSGDISP a definition cannot have, or a shared queue without a usable
    CFSTRUCT."""
    msgid = "HMQ5303E"
