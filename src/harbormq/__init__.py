"""harbormq: a durable message queue manager on IBM MQ's logging and recovery design."""

from . import _compiled
from .errors import HarbormqError

# before any compiled module is imported: HARBORMQ_PURE_PYTHON=1, or a build
# older than its source, loads the .py source (docs/performance.md)
_compiled.install()

__all__ = ["QueueManager", "UnitOfWorkHandle", "HarbormqError", "Message"]
__version__ = "0.1.0"


def __getattr__(name: str):
    # the API (and the whole queue manager under it) is imported on first use:
    # every 'harbormq' command starts without paying for what it does not run
    if name in ("QueueManager", "UnitOfWorkHandle"):
        from . import api
        return getattr(api, name)
    if name == "Message":
        from .log.records import Message
        return Message
    raise AttributeError(f"module 'harbormq' has no attribute {name!r}")
