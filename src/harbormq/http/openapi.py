"""The OpenAPI description of what the HTTP listener serves, at
``/ibmmq/rest/v2/openapi.json`` (OpenAPI 3.0, JSON).

It describes MQ's administrative REST API (``mqsc_api.py``), its messaging
REST API (``messaging.py``), the error body every refusal has
(``errors.py``), HTTP basic authentication and the CSRF header. Another
feature describes its own paths with ``describe(app, path, item)`` in its
``add_routes``; the document is made when asked for, so every path added
before the listener starts is in it. Not here: the handlers.
"""

from __future__ import annotations

from aiohttp import web

from .auth import CSRF_HEADER
from .context import WebContext

PATH = "/ibmmq/rest/v2/openapi.json"
#: the paths other features describe: {path: path item}
PATHS = web.AppKey("harbormq_openapi_paths", dict)

_QMGR = {"name": "qmgr", "in": "path", "required": True, "schema": {"type": "string"},
         "description": "the queue manager's name"}
_QUEUE = {"name": "queue", "in": "path", "required": True, "schema": {"type": "string"}}
_CSRF = {"name": CSRF_HEADER, "in": "header", "required": True, "schema": {"type": "string"},
         "description": "any value: requests that change state must carry it (CSRF)"}
_ERROR = {"description": "MQ's error body",
          "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
_ERRORS = {str(code): {**_ERROR, "description": why} for code, why in (
    (400, "the request is not valid"), (401, "no user, or a wrong password"),
    (403, "no authority (MQRC 2035), or no CSRF header"),
    (404, "no such queue manager or queue (MQRC 2085)"), (408, "the body came too slowly"),
    (413, "the body is longer than web.max_body_bytes"))}


def _id_query(name: str, what: str) -> dict:
    return {"name": name, "in": "query", "required": False,
            "schema": {"type": "string", "pattern": "^([0-9a-fA-F]{2}){0,24}$"},
            "description": what}


_SELECT = [_id_query("messageId", "the message with this id (hex)"),
           _id_query("correlationId", "the first message with this correlation id (hex)")]
_AFTER = _id_query("afterMessageId", "start after this message (paging)")
_MD_HEADERS = {f"ibm-mq-md-{name}": {"schema": {"type": "string"}, "description": what}
               for name, what in (
                   ("messageId", "hex"), ("correlationId", "hex, when set"),
                   ("persistence", "persistent or nonPersistent"), ("priority", "0-9"),
                   ("expiry", "milliseconds left, or unlimited"),
                   ("replyTo", "when set"), ("backoutCount", "times backed out"),
                   ("putDateTime", "ISO 8601, UTC"))}
_MESSAGE = {"description": "the message: its body, its descriptor in the headers",
            "headers": _MD_HEADERS,
            "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}}}


def document(context: WebContext, extra: dict) -> dict:
    mqsc = "/ibmmq/rest/v2/admin/action/qmgr/{qmgr}/mqsc"
    message = "/ibmmq/rest/v2/messaging/qmgr/{qmgr}/queue/{queue}/message"
    paths = {
        mqsc: {"post": {
            "summary": "run one MQSC command (runCommand: text; runCommandJSON: structured)",
            "parameters": [_QMGR, _CSRF],
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "oneOf": [{"$ref": "#/components/schemas/RunCommand"},
                          {"$ref": "#/components/schemas/RunCommandJSON"}]}}}},
            "responses": {"200": {"description": "the command ran (its codes say how)",
                                  "content": {"application/json": {"schema": {
                                      "$ref": "#/components/schemas/CommandResult"}}}},
                          **_ERRORS}}},
        message: {
            "post": {"summary": "put a message", "parameters": [
                _QMGR, _QUEUE, _CSRF,
                *({"name": f"ibm-mq-md-{n}", "in": "header", "required": False,
                   "schema": {"type": "string"}, "description": d} for n, d in (
                    ("persistence", "persistent or nonPersistent (default: DEFPSIST)"),
                    ("priority", "0-9 (default: DEFPRTY)"),
                    ("correlationId", "hex, up to 24 bytes"),
                    ("replyTo", "queue or queue@qmgr"),
                    ("expiry", "milliseconds, or unlimited"))),
                {"name": "ibm-mq-usr", "in": "header", "required": False,
                 "schema": {"type": "string"},
                 "description": "user properties: a JSON array of {name, value}"}],
                "requestBody": {"required": False, "content": {"*/*": {"schema": {
                    "type": "string", "format": "binary"}}}},
                "responses": {"201": {"description": "put (a persistent one is on disk)",
                                      "headers": {"ibm-mq-md-messageId": {
                                          "schema": {"type": "string"}}}}, **_ERRORS}},
            "delete": {"summary": "get a message (destructive)", "parameters": [
                _QMGR, _QUEUE, _CSRF, *_SELECT,
                {"name": "wait", "in": "query", "required": False,
                 "schema": {"type": "integer", "minimum": 0},
                 "description": "milliseconds to wait for a message"}],
                "responses": {"200": _MESSAGE, "204": {"description": "no message"},
                              **_ERRORS}},
            "get": {"summary": "browse a message", "parameters": [
                _QMGR, _QUEUE, *_SELECT, _AFTER],
                "responses": {"200": _MESSAGE, "204": {"description": "no message"},
                              **_ERRORS}}},
        message + "list": {"get": {
            "summary": "browse a page of messages' descriptors", "parameters": [
                _QMGR, _QUEUE, *_SELECT, _AFTER,
                {"name": "limit", "in": "query", "required": False,
                 "schema": {"type": "integer", "minimum": 1, "maximum": 1000}}],
            "responses": {"200": {"description": "the page and the link to the next",
                                  "content": {"application/json": {"schema": {
                                      "$ref": "#/components/schemas/MessageList"}}}},
                          **_ERRORS}}},
        PATH: {"get": {"summary": "this description", "security": [],
                       "responses": {"200": {"description": "OpenAPI 3.0"}}}},
    }
    if context.stomp_websocket is not None:
        paths["/ws"] = {"get": {"summary": "STOMP over WebSocket (subprotocols v12.stomp, "
                                           "v11.stomp, v10.stomp)", "security": [],
                                "responses": {"101": {"description": "switching protocols"}}}}
    paths.update(extra)
    return {
        "openapi": "3.0.3",
        "info": {"title": f"harbormq {context.qmgr_name}: MQ's REST API",
                 "version": "2",
                 "description": "MQ's administrative and messaging REST API as harbormq "
                                "serves them (docs/http.md)."},
        "paths": paths,
        "security": [{"basic": []}],
        "components": {"securitySchemes": {"basic": {"type": "http", "scheme": "basic"}},
                       "schemas": _SCHEMAS},
    }


_SCHEMAS = {
    "RunCommand": {"type": "object", "required": ["type", "parameters"], "properties": {
        "type": {"enum": ["runCommand"]},
        "parameters": {"type": "object", "required": ["command"],
                       "properties": {"command": {"type": "string"}}}}},
    "RunCommandJSON": {"type": "object", "required": ["type", "command"], "properties": {
        "type": {"enum": ["runCommandJSON"]}, "command": {"type": "string"},
        "qualifier": {"type": "string"}, "name": {"type": "string"},
        "parameters": {"type": "object"},
        "responseParameters": {"type": "array", "items": {"type": "string"}}}},
    "CommandResult": {"type": "object", "properties": {
        "commandResponse": {"type": "array", "items": {"type": "object", "properties": {
            "completionCode": {"type": "integer"}, "reasonCode": {"type": "integer"},
            "text": {"type": "array", "items": {"type": "string"}},
            "message": {"type": "array", "items": {"type": "string"}},
            "parameters": {"type": "object"}}}},
        "overallCompletionCode": {"type": "integer"},
        "overallReasonCode": {"type": "integer"}}},
    "MessageList": {"type": "object", "properties": {
        "messages": {"type": "array", "items": {"type": "object"}},
        "nextPage": {"type": "string", "nullable": True}}},
    "Error": {"type": "object", "properties": {"error": {"type": "array", "items": {
        "type": "object", "properties": {
            "msgId": {"type": "string"}, "action": {"type": "string"},
            "completionCode": {"type": "integer"}, "reasonCode": {"type": "integer"},
            "type": {"type": "string"}, "message": {"type": "string"},
            "explanation": {"type": "string"}}}}}},
}


def describe(app: web.Application, path: str, item: dict) -> None:
    """Add ``path`` (an OpenAPI path item) to the description: for a feature's
    ``add_routes``."""
    app.setdefault(PATHS, {})[path] = item


def add_routes(app: web.Application, context: WebContext) -> None:
    app.setdefault(PATHS, {})

    async def serve(request: web.Request) -> web.Response:
        return web.json_response(document(context, request.app[PATHS]))
    app.router.add_get(PATH, serve)
