"""harbormq: a durable message queue manager on IBM MQ's logging and recovery design."""

from .api import QueueManager, UnitOfWorkHandle
from .errors import HarbormqError
from .log.records import Message

__all__ = ["QueueManager", "UnitOfWorkHandle", "HarbormqError", "Message"]
__version__ = "0.1.0"
