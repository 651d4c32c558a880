"""The errors of publish/subscribe, each with MQ's reason code in its text."""

from __future__ import annotations

from ..errors import InvalidAttribute, MessageError, ObjectError


class TopicStringError(InvalidAttribute):
    """A topic string that is not valid where it is used (MQRC 2425)."""
    msgid = "HMQ2425E"


class SubscriptionError(ObjectError):
    msgid = "HMQ2428E"


class NoSubscription(SubscriptionError):
    """MQRC 2428 NO_SUBSCRIPTION."""
    msgid = "HMQ2428E"


class SubscriptionExists(SubscriptionError):
    """MQRC 2432 SUB_ALREADY_EXISTS."""
    msgid = "HMQ2432E"


class DurabilityNotAllowed(SubscriptionError):
    """MQRC 2436 DURABILITY_NOT_ALLOWED (DURSUB(NO) on the topic)."""
    msgid = "HMQ2436E"


class SubNameError(SubscriptionError):
    """MQRC 2440 SUB_NAME_ERROR (a durable subscription needs a name)."""
    msgid = "HMQ2440E"


class SubInhibited(SubscriptionError):
    """MQRC 2503 SUB_INHIBITED (SUB(INHIBITED) on the topic)."""
    msgid = "HMQ2503E"


class PublicationFailure(MessageError):
    """MQRC 2502 PUBLICATION_FAILURE: a durable subscriber cannot take a
    persistent publication (PMSGDLV(ALLDUR))."""
    msgid = "HMQ2502E"
