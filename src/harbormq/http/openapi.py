"""The OpenAPI description of what the HTTP listener serves, at
``/ibmmq/rest/v2/openapi.json``.

(Filled in by the next commits.)
"""

from __future__ import annotations

from aiohttp import web

from .context import WebContext

PATH = "/ibmmq/rest/v2/openapi.json"


def add_routes(app: web.Application, context: WebContext) -> None:
    async def serve(request: web.Request) -> web.Response:
        return web.json_response({"openapi": "3.0.3",
                                  "info": {"title": f"harbormq {context.qmgr_name}",
                                           "version": "2"}, "paths": {}})
    app.router.add_get(PATH, serve)
