"""MQ's administrative REST API: ``POST /ibmmq/rest/v2/admin/action/qmgr/{qmgr}/mqsc``.

(Filled in by the next commits; the skeleton adds no route yet.)
"""

from __future__ import annotations

from aiohttp import web

from .context import WebContext


def add_routes(app: web.Application, context: WebContext) -> None:
    """No route yet."""
