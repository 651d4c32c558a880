"""MQ's administrative REST API: MQSC over HTTP.

``POST /ibmmq/rest/v2/admin/action/qmgr/{qmgr}/mqsc`` (v1 and v3 too), a
JSON body of one of MQ's two shapes:

* ``{"type": "runCommand", "parameters": {"command": "DISPLAY QLOCAL(Q1)"}}``:
  the command's responses as text, one ``commandResponse`` item per message
  it printed: ``{"completionCode", "reasonCode", "text": [lines]}``;
* ``{"type": "runCommandJSON", "command": "display", "qualifier": "qlocal",
  "name": "Q1", "parameters": {"maxdepth": 10}, "responseParameters":
  ["curdepth"]}``: the same command built from its parts, each item's
  ``ATTR(value)`` pairs as ``"parameters"`` (names in lower case, whole
  numbers as numbers); a failed item has ``"message": [lines]`` instead.

Either answers 200 with ``overallCompletionCode`` and ``overallReasonCode``
(0/0, or 2/3008 when the command failed), as MQ does; a command refused
for want of authority (MQRC 2035) answers 403 with MQ's error body. The
command runs as the request's principal, with its authority, through the
MQSC runner ``server/`` hands over (``admin/command_runner.py``): every
command the admin socket takes, with the same outcome. The request needs
the CSRF header. Not here: the commands (``admin/``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from aiohttp import web

from .context import CommandOutcome, WebContext
from .errors import RestError, bad_request
from .server_support import body_json, check_qmgr

PATH = r"/ibmmq/rest/{version:v[123]}/admin/action/qmgr/{qmgr}/mqsc"
#: MQRC_NOT_AUTHORIZED
NOT_AUTHORIZED = 2035


def add_routes(app: web.Application, context: WebContext) -> None:
    async def mqsc(request: web.Request) -> web.Response:
        check_qmgr(request, context)
        principal = await context.authenticator.principal(request)
        context.authenticator.check_csrf(request)
        body = await body_json(request, context)
        kind = body.get("type")
        if kind == "runCommand":
            outcome = await context.mqsc.run_command(run_command_text(body), principal)
            items = [{"completionCode": r.completion_code, "reasonCode": r.reason_code,
                      "text": r.text} for r in outcome.responses]
        elif kind == "runCommandJSON":
            outcome = await context.mqsc.run_command(run_command_json_text(body), principal)
            items = [_json_item(r) for r in outcome.responses]
        else:
            raise bad_request(f"the body's type is {json.dumps(kind)}: it must be "
                              "\"runCommand\" or \"runCommandJSON\"")
        _refuse_if_not_authorized(outcome)
        return web.json_response({"commandResponse": items,
                                  "overallCompletionCode": outcome.completion_code,
                                  "overallReasonCode": outcome.reason_code})

    app.router.add_post(PATH, mqsc)


def _json_item(response) -> dict:
    item: dict[str, Any] = {"completionCode": response.completion_code,
                            "reasonCode": response.reason_code}
    if response.completion_code:
        item["message"] = response.text
    else:
        item["parameters"] = response.parameters
    return item


def _refuse_if_not_authorized(outcome: CommandOutcome) -> None:
    refused = [r for r in outcome.responses if r.reason_code == NOT_AUTHORIZED]
    if refused:
        raise RestError(403, "MQWB0035E", " ".join(refused[0].text), reason=NOT_AUTHORIZED,
                        explanation="The user is not authorized for the command.",
                        action="Ask the queue manager's administrator for the authority "
                               "(SET AUTHREC).")


def run_command_text(body: dict) -> str:
    """runCommand's ``parameters.command``."""
    params = body.get("parameters")
    command = params.get("command") if isinstance(params, dict) else None
    if not isinstance(command, str) or not command.strip():
        raise bad_request("runCommand needs \"parameters\": {\"command\": \"...\"}, the MQSC "
                          "command as a string")
    return command


def quote(value: Any) -> str:
    """One MQSC value: a quoted string (case kept, quotes doubled), a number as it is."""
    if isinstance(value, bool):
        return "YES" if value else "NO"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    raise bad_request(f"a parameter's value {json.dumps(value)[:60]} is not a string, a number, "
                      "true, false or a list of them")


#: a verb, an object type, an attribute's name
_KEYWORD = re.compile(r"[A-Za-z][A-Za-z0-9]*")


def run_command_json_text(body: dict) -> str:
    """runCommandJSON's parts as one MQSC command: ``command`` (the verb),
    ``qualifier`` (the object type), ``name``, ``parameters`` (ATTR(value);
    ``true`` alone is a bare keyword such as REPLACE, a list a list of values),
    ``responseParameters`` (DISPLAY's attributes, ``all`` for ALL)."""
    verb, qualifier = body.get("command"), body.get("qualifier")
    if not isinstance(verb, str) or not verb.strip():
        raise bad_request("runCommandJSON needs \"command\", the verb (display, define, ...)")
    if qualifier is not None and not isinstance(qualifier, str):
        raise bad_request("runCommandJSON's \"qualifier\" is the object type, a string")
    # the words are spliced into one MQSC command: each must be one keyword
    params = body.get("parameters", {})
    for what, word in [("command", verb), ("qualifier", qualifier or "X"),
                       *((f"parameter {k!r}", k) for k in (
                           params if isinstance(params, dict) else {})),
                       *((f"responseParameter {w!r}", w) for w in (
                           body.get("responseParameters") or []) if isinstance(w, str))]:
        if not _KEYWORD.fullmatch(str(word)):
            raise bad_request(f"runCommandJSON's {what} is not an MQSC keyword (letters and "
                              "digits, a letter first)")
    words = [verb.upper()]
    if qualifier:
        words.append(qualifier.upper())
    name = body.get("name")
    if name is not None:
        if not isinstance(name, str):
            raise bad_request("runCommandJSON's \"name\" is a string")
        words[-1] += f"({quote(name)})"
    params = body.get("parameters", {})
    if not isinstance(params, dict):
        raise bad_request("runCommandJSON's \"parameters\" is an object of attributes")
    for key, value in params.items():
        keyword = str(key).upper()
        if value is True:
            words.append(keyword)
        elif isinstance(value, list):
            words.append(f"{keyword}({','.join(quote(v) for v in value)})")
        else:
            words.append(f"{keyword}({quote(value)})")
    wanted = body.get("responseParameters", [])
    if not isinstance(wanted, list) or not all(isinstance(w, str) for w in wanted):
        raise bad_request("runCommandJSON's \"responseParameters\" is a list of attribute "
                          "names")
    words.extend(w.upper() for w in wanted)
    return " ".join(words)
