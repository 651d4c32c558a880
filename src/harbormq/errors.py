"""One exception tree for harbormq.

Every error carries an operator message id (``HMQnnnn`` + severity letter,
reusing IBM MQ's number where one exists), the facts that explain it (path,
offset, LSN, queue, reason code) and, where useful, a hint saying what to do.
The CLI turns any of them into an operator message and exit status in one
place (``harbormq.cli.main``).
"""

from __future__ import annotations


class HarbormqError(Exception):
    """Root of every error harbormq raises on purpose."""

    msgid = "HMQ0001E"
    #: MQ reason code (MQRC) where the failure maps onto one, else None.
    reason: int | None = None

    def __init__(self, message: str, *, hint: str | None = None, msgid: str | None = None,
                 **facts):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.facts = facts
        if msgid:
            self.msgid = msgid

    def __str__(self) -> str:
        text = f"{self.msgid}: {self.message}"
        if self.hint:
            text += f" ({self.hint})"
        return text


# --- configuration and lifecycle -------------------------------------------------

class ConfigError(HarbormqError):
    msgid = "HMQ8101E"


class QueueManagerExists(HarbormqError):
    msgid = "HMQ8110E"


class QueueManagerNotFound(HarbormqError):
    msgid = "HMQ8118E"


class QueueManagerRunning(HarbormqError):
    msgid = "HMQ8041E"


class StandbyError(HarbormqError):
    """A standby queue manager started, or replay refused (qmgr/standby.py)."""
    msgid = "HMQ7310E"


class QueueManagerNotRunning(HarbormqError):
    msgid = "HMQ8146E"


class QueueManagerStopping(HarbormqError):
    """New calls during an immediate or controlled shutdown (MQRC 2161)."""
    msgid = "HMQ8161E"
    reason = 2161


class AdminRequestError(HarbormqError):
    """An admin socket request that cannot be read or is not a valid request: not
    a JSON object, an unknown ``cmd``, a field of the wrong type."""
    msgid = "HMQ8151E"


# --- the recovery log ----------------------------------------------------------

class LogError(HarbormqError):
    msgid = "HMQ7500E"


class LogCorrupt(LogError):
    """A record that is not a torn tail fails its checks: recovery must stop."""
    msgid = "HMQ7501E"


class LogMissing(LogError):
    """An extent needed for restart (or media recovery) is not there (AMQ6767)."""
    msgid = "HMQ6767E"


class ResetLogRefused(LogError):
    """``harbormq reset-log`` would lose or mix up data (the stores were not
    stopped cleanly, the log is not lost)."""
    msgid = "HMQ7136E"


class LogFull(LogError):
    """Every extent is pinned and nothing can be rolled back (MQRC 2102)."""
    msgid = "HMQ7463E"
    reason = 2102


class ControlFileMismatch(LogError):
    """Both control-file copies are readable but disagree (MQ's CSQJ120E)."""
    msgid = "HMQ7120E"


class ControlFileDamaged(LogError):
    msgid = "HMQ7121E"


# --- objects and messages ---------------------------------------------------------

class ObjectError(HarbormqError):
    msgid = "HMQ8147E"


class UnknownObject(ObjectError):
    msgid = "HMQ8147E"
    reason = 2085


class ObjectExists(ObjectError):
    msgid = "HMQ8150E"
    reason = 2100


class ObjectInUse(ObjectError):
    msgid = "HMQ8149E"
    reason = 2055


class ObjectDamaged(ObjectError):
    """The object's store is damaged (AMQ7472): only DELETE and recreate work."""
    msgid = "HMQ7472E"
    reason = 2101


class StoreDamaged(ObjectDamaged):
    """A store is missing, unreadable or fails its checksums."""


class MediaRecoveryNotAllowed(HarbormqError):
    """Media images and recreate need a linear log (AMQ7044)."""
    msgid = "HMQ7044E"


class InvalidAttribute(ObjectError):
    msgid = "HMQ8405E"


class MessageError(HarbormqError):
    msgid = "HMQ2000E"


class QueueFull(MessageError):
    msgid = "HMQ2053E"
    reason = 2053


class MessageTooLong(MessageError):
    msgid = "HMQ2030E"
    reason = 2030


class PutInhibited(MessageError):
    msgid = "HMQ2051E"
    reason = 2051


class GetInhibited(MessageError):
    msgid = "HMQ2016E"
    reason = 2016


class PersistentNotAllowed(MessageError):
    """A persistent message put on a temporary dynamic queue (core/dynamic.py)."""
    msgid = "HMQ2048E"
    reason = 2048


class NoMessageAvailable(MessageError):
    msgid = "HMQ2033E"
    reason = 2033


class UnitOfWorkError(HarbormqError):
    msgid = "HMQ2195E"


class UnknownUnitOfWork(UnitOfWorkError):
    msgid = "HMQ2018E"


# --- backup and restore (HMQ86xx) -------------------------------------------------

class BackupError(HarbormqError):
    """A backup that cannot be taken (nothing is published: at most a ``.part``
    directory is left, never mistaken for a backup)."""
    msgid = "HMQ8601E"


class BackupDamaged(BackupError):
    """A file of a backup fails its size or SHA-256, or the manifest is damaged:
    the message names the file."""
    msgid = "HMQ8602E"


class BackupChainBroken(BackupError):
    """An incremental backup whose previous backup is missing or changed, or a
    log extent missing from the chain a restore needs."""
    msgid = "HMQ8603E"


class RestoreRefused(HarbormqError):
    """A restore that would overwrite, or that cannot be done: nothing changed."""
    msgid = "HMQ8604E"


class VerifyMismatch(BackupError):
    """A trial restore of a backup does not give the queues its manifest lists."""
    msgid = "HMQ8608E"
