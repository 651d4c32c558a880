"""One MQSC command run as a principal, answered as MQ's command server
answers a REST or PCF caller: ``CommandRunner``.

The admin socket runs scripts as the queue manager's owner (``commands.py``:
``run_mqsc``). Front ends that act for other users (the HTTP front end's
``runCommand``, its console) run one command at a time through here:

* the command's **authority** is checked first by ``Security.require``, the
  one check STOMP's puts and gets make (``command_authority``: MQ's
  command authorities on distributed platforms, mapped onto harbormq's
  object types QUEUE, TOPIC and QMGR); the owner and the group ``mqm``
  hold every authority;
* a DISPLAY of a generic name shows only the objects the principal may
  display (+dsp), as MQ's does;
* the outcome is one response per message the command printed
  (``CommandResponse``: completion code, reason code, the lines, and their
  ``ATTR(value)`` pairs as parameters), with MQ's overall codes:
  0/0 when it ran, 2/3008 (MQRCCF_COMMAND_FAILED) when it failed.

Not here: the commands themselves (``commands.py``), the HTTP shape
(``http/mqsc_api.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..core.engine import QueueManagerCore
from ..errors import HarbormqError
from ..security import NotAuthorized, Principal
from . import mqsc
from .commands import Executor, MqscError
from .mqsc import Command, MqscSyntaxError

MQCC_OK, MQCC_FAILED = 0, 2
#: MQRCCF_COMMAND_FAILED: the overall reason of a command that failed
MQRCCF_COMMAND_FAILED = 3008
#: the object types whose objects have authority records of their own
QUEUE_TYPES = frozenset({"QLOCAL", "QUEUE", "QREMOTE", "QALIAS", "QMODEL", "QSTATUS"})
TOPIC_TYPES = frozenset({"TOPIC", "TPSTATUS"})
#: the authority a verb needs on its object (MQ: +dsp to display, +chg to alter,
#: +dlt to delete, +clr to clear, +ctrl to start, stop, reset or resolve)
VERB_AUTHORITY = {"DISPLAY": "DSP", "ALTER": "CHG", "DELETE": "DLT", "CLEAR": "CLR",
                  "START": "CTRL", "STOP": "CTRL", "RESET": "CTRL", "RESOLVE": "CTRL",
                  "ARCHIVE": "CTRL", "PING": "DSP", "SET": "CHG", "REFRESH": "CHG",
                  "DEFINE": "CRT"}
#: the authorities of the queue manager object the verbs use
QMGR_AUTHORITIES = frozenset({"DSP", "CHG", "CTRL", "CRT"})
#: one ATTR(value) of a response line; a value ends at ')' before the next
#: attribute or the line's end
_PAIR = re.compile(r"([A-Z][A-Z0-9]*)\((.*?)\)(?=\s+[A-Z][A-Z0-9]*\(|\s*$)")


@dataclass
class CommandResponse:
    completion_code: int
    reason_code: int
    text: list[str]
    parameters: dict = field(default_factory=dict)


@dataclass
class CommandOutcome:
    responses: list[CommandResponse]
    completion_code: int = MQCC_OK
    reason_code: int = 0


def command_authority(cmd: Command, qmgr: str) -> tuple[str, str, str]:
    """(object type, name, authority) the command needs. DEFINE needs +crt on
    the queue manager (as a STOMP destination defined on first use does);
    commands on queues and topics need their authority on the object; the
    others (channels, the log, units of work, security, ...) on the queue
    manager."""
    authority = VERB_AUTHORITY.get(cmd.verb, "CHG")
    if cmd.verb == "DEFINE":
        return "QMGR", qmgr, "CRT"
    if cmd.objtype in QUEUE_TYPES and cmd.name:
        return "QUEUE", cmd.name, authority
    if cmd.objtype in TOPIC_TYPES and cmd.name:
        return "TOPIC", cmd.name, authority
    # the queue manager has no +dlt or +clr: deleting or clearing what has no
    # authority records of its own (a channel, a topic string) changes it
    return "QMGR", qmgr, authority if authority in QMGR_AUTHORITIES else "CHG"


def response_parameters(block: str) -> dict:
    """The ``ATTR(value)`` pairs of one response, names in lower case; whole
    numbers as numbers, blank values as empty strings."""
    out: dict = {}
    for line in block.splitlines()[1:]:
        for name, value in _PAIR.findall(line):
            value = value.strip()
            out[name.lower()] = int(value) if re.fullmatch(r"-?\d+", value) else value
    return out


def _first_name(block: str) -> str | None:
    lines = block.splitlines()
    found = _PAIR.findall(lines[1]) if len(lines) > 1 else []
    return found[0][1].strip() if found else None


class CommandRunner:
    """The ``MqscRunner`` the HTTP front end is handed (``http/context.py``)."""

    def __init__(self, core: QueueManagerCore, security, qm_info: dict | None = None):
        self.core = core
        self.security = security
        self.qm_info = qm_info or {}

    async def run_command(self, text: str, principal: Principal) -> CommandOutcome:
        items = [i for i in mqsc.parse_script(text)
                 if not (isinstance(i, Command) and i.verb == "END")]
        if len(items) != 1:
            return _failed(MQRCCF_COMMAND_FAILED,
                           f"HMQ8400E: give exactly one MQSC command, not {len(items)}")
        item = items[0]
        if isinstance(item, MqscSyntaxError):
            return _failed(MQRCCF_COMMAND_FAILED, mqsc.format_syntax_error(item))
        executor = Executor(self.core, self.security, self.qm_info)
        if (item.verb, item.objtype) not in executor.handlers:
            return _failed(MQRCCF_COMMAND_FAILED, str(MqscError(
                f"{item.verb} {item.objtype} is not a command this queue manager runs")))
        try:
            objtype, name, authority = command_authority(item, self.core.name)
            generic_display = item.verb == "DISPLAY" and objtype != "QMGR" and "*" in name
            if not generic_display:
                self.security.require(principal, objtype, name, authority)
            self._require_define_extras(item, principal)
            blocks = await executor.execute(item)
            if generic_display:
                blocks = [b for b in blocks if self._may_display(principal, objtype, b)]
                if not blocks:
                    raise NotAuthorized(f"no object matching {name} that user "
                                        f"{principal.user} may display (+dsp) (MQRC 2035 "
                                        "NOT_AUTHORIZED)")
        except HarbormqError as exc:
            return _failed(exc.reason or MQRCCF_COMMAND_FAILED, _error_lines(exc))
        return CommandOutcome([CommandResponse(MQCC_OK, 0, b.splitlines(),
                                               response_parameters(b)) for b in blocks])

    def _require_define_extras(self, cmd: Command, principal: Principal) -> None:
        """DEFINE ... REPLACE changes the object when it exists: +chg on it, as
        ALTER needs; DEFINE ... LIKE(other) reads the other: +dsp on it."""
        if cmd.verb != "DEFINE" or not cmd.name:
            return
        kind = "QUEUE" if cmd.objtype in QUEUE_TYPES else \
            "TOPIC" if cmd.objtype in TOPIC_TYPES else None
        if kind is None:
            return
        if "REPLACE" in cmd.flags and self._exists(cmd.objtype, cmd.name):
            self.security.require(principal, kind, cmd.name, "CHG")
        like = cmd.attrs.get("LIKE")
        if isinstance(like, str) and like:
            self.security.require(principal, kind, like, "DSP")

    def _exists(self, objtype: str, name: str) -> bool:
        types = getattr(self.core, "DEFINITION_TYPES", {})
        key = types[objtype][1](name) if objtype in types else name
        return key in self.core.objects

    def _may_display(self, principal: Principal, objtype: str, block: str) -> bool:
        name = _first_name(block)
        return name is None or self.security.check(principal, objtype, name, "DSP")


def _error_lines(exc: HarbormqError) -> str:
    text = f"{exc.msgid}: {exc.message}"
    return text + (f"\n   hint: {exc.hint}" if exc.hint else "")


def _failed(reason: int, text: str) -> CommandOutcome:
    return CommandOutcome([CommandResponse(MQCC_FAILED, reason, text.splitlines())],
                          MQCC_FAILED, MQRCCF_COMMAND_FAILED)
