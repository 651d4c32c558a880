"""MQ's messaging REST API: ``/ibmmq/rest/v2/messaging/qmgr/{qmgr}/queue/{queue}/message``.

(Filled in by the next commits; the skeleton adds no route yet.)
"""

from __future__ import annotations

from aiohttp import web

from .context import WebContext


def add_routes(app: web.Application, context: WebContext) -> None:
    """No route yet."""
