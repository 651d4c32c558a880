"""MQSC text: the parser and the runmqsc-style output formatter (pure, no I/O).

Input rules (IBM MQ's):

* one command per line; a line whose first non-blank character is ``*`` is a
  comment; blank lines are ignored;
* a line ending in ``+`` continues with the first non-blank character of the
  next line, one ending in ``-`` with the next line as it is (leading blanks
  kept);
* keywords are case-insensitive, and so are unquoted values, which are folded
  to upper case (``define qlocal(q1)`` defines ``Q1``); a value in single
  quotes keeps its case and blanks, ``''`` inside it being one quote;
* a keyword's value is in parentheses directly or after blanks:
  ``MAXDEPTH(100)``, ``AUTHADD(PUT, GET)``;
* short forms: ``DEF``, ``DIS``, ``ALT``, ``DEL``, ``ARC``, ``QL``, ``Q``, ``QS``.

:func:`parse_script` returns one :class:`Command` or :class:`MqscSyntaxError`
per command; a syntax error names the line and column and what was expected
there. :func:`format_object`, :func:`format_message` and :func:`format_summary`
produce runmqsc's layout: ``HMQnnnnI: title.`` then ``ATTR(value)`` pairs, two
per line in columns of 40, and the closing "N MQSC commands read." lines.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..core.objects import (
    AUTHINFO_DEFAULTS,
    CHANNEL_DEFAULTS,
    LISTENER_DEFAULTS,
    NAMELIST_DEFAULTS,
    PROCESS_DEFAULTS,
    QALIAS_DEFAULTS,
    QLOCAL_DEFAULTS,
    QMGR_DEFAULTS,
    QMODEL_DEFAULTS,
    QREMOTE_DEFAULTS,
    TOPIC_DEFAULTS,
)
from ..errors import HarbormqError


class MqscSyntaxError(HarbormqError):
    """A command that does not parse: where, and what was expected there."""
    msgid = "HMQ8405E"

    def __init__(self, message: str, *, line: int, column: int, expected=(),
                 lines: list[str] | None = None, first_line: int | None = None):
        super().__init__(f"line {line}, column {column}: {message}", line=line, column=column)
        self.line = line
        self.column = column
        self.expected = tuple(expected)
        self.detail = message
        #: the command's source lines (for the echo) and where it started
        self.lines = lines or []
        self.first_line = first_line or line


# -- the command language ---------------------------------------------------------------

VERBS = {"DEFINE": "DEFINE", "DEF": "DEFINE", "ALTER": "ALTER", "ALT": "ALTER",
         "DELETE": "DELETE", "DEL": "DELETE", "DISPLAY": "DISPLAY", "DIS": "DISPLAY",
         "CLEAR": "CLEAR", "STOP": "STOP", "PING": "PING", "SET": "SET",
         "ARCHIVE": "ARCHIVE", "ARC": "ARCHIVE", "RESOLVE": "RESOLVE", "RES": "RESOLVE",
         "START": "START", "STA": "START", "RESET": "RESET", "END": "END"}
VERB_ORDER = ("DEFINE", "ALTER", "DELETE", "DISPLAY", "CLEAR", "START", "STOP", "PING", "SET",
              "ARCHIVE", "RESOLVE", "RESET", "END")
OBJTYPES = {"QLOCAL": "QLOCAL", "QL": "QLOCAL", "QUEUE": "QUEUE", "Q": "QUEUE",
            "QSTATUS": "QSTATUS", "QS": "QSTATUS", "CONN": "CONN", "QMSTATUS": "QMSTATUS",
            "QMGR": "QMGR", "AUTHREC": "AUTHREC", "LOG": "LOG", "UOW": "UOW",
            "QREMOTE": "QREMOTE", "QR": "QREMOTE", "CHANNEL": "CHANNEL", "CHL": "CHANNEL",
            "CHSTATUS": "CHSTATUS", "CHS": "CHSTATUS", "LISTENER": "LISTENER",
            "LSTR": "LISTENER", "QALIAS": "QALIAS", "QA": "QALIAS", "QMODEL": "QMODEL",
            "QM": "QMODEL", "PROCESS": "PROCESS", "PRO": "PROCESS", "NAMELIST": "NAMELIST",
            "NL": "NAMELIST",
            # publish/subscribe (admin/pubsub_commands.py)
            "TOPIC": "TOPIC", "SUB": "SUB", "SBSTATUS": "SBSTATUS", "TPSTATUS": "TPSTATUS",
            "PUBSUB": "PUBSUB", "TOPICSTR": "TOPICSTR"}

#: (DEFTYPE is shown, never given: a model queue's open sets it)
QLOCAL_ATTRS = tuple(k for k in QLOCAL_DEFAULTS if k != "DEFTYPE")
QREMOTE_ATTRS = tuple(QREMOTE_DEFAULTS)
CHANNEL_ATTRS = tuple(CHANNEL_DEFAULTS)
LISTENER_ATTRS = tuple(LISTENER_DEFAULTS)
DISPLAY_QREMOTE_ATTRS = ("QUEUE", "TYPE") + QREMOTE_ATTRS
DISPLAY_CHANNEL_ATTRS = ("CHANNEL",) + CHANNEL_ATTRS
DISPLAY_LISTENER_ATTRS = ("LISTENER",) + LISTENER_ATTRS + ("STATUS",)
#: DISPLAY CHSTATUS (MQ's names): the channel's state and its synchronisation data
CHSTATUS_ATTRS = ("CHANNEL", "CHLTYPE", "STATUS", "CONNAME", "RQMNAME", "XMITQ", "INDOUBT",
                  "LSTSEQNO", "CURSEQNO", "LSTLUWID", "CURLUWID", "MSGS", "BATCHES",
                  "XQMSGSA", "LONGRTS", "SHORTRTS", "LSTMSGDA", "LSTMSGTI", "STOPREQ")
QMGR_ATTRS = tuple(QMGR_DEFAULTS)
QALIAS_ATTRS = tuple(QALIAS_DEFAULTS)
QMODEL_ATTRS = tuple(QMODEL_DEFAULTS)
PROCESS_ATTRS = tuple(PROCESS_DEFAULTS)
NAMELIST_ATTRS = tuple(NAMELIST_DEFAULTS)
DISPLAY_QALIAS_ATTRS = ("QUEUE", "TYPE") + QALIAS_ATTRS
DISPLAY_QMODEL_ATTRS = ("QUEUE", "TYPE") + QMODEL_ATTRS
DISPLAY_PROCESS_ATTRS = ("PROCESS",) + PROCESS_ATTRS
DISPLAY_NAMELIST_ATTRS = ("NAMELIST", "NAMCOUNT") + NAMELIST_ATTRS

#: what DISPLAY can show, per object type, in display order
DISPLAY_QUEUE_ATTRS = ("QUEUE", "TYPE") + QLOCAL_ATTRS + ("DEFTYPE", "CURDEPTH", "IPPROCS",
                                                           "OPPROCS")
#: DISPLAY QUEUE TYPE(ALL): every queue type's attributes, local queues' first
DISPLAY_ANY_QUEUE_ATTRS = tuple(dict.fromkeys(DISPLAY_QUEUE_ATTRS + DISPLAY_QALIAS_ATTRS
                                              + DISPLAY_QMODEL_ATTRS + DISPLAY_QREMOTE_ATTRS))
QSTATUS_QUEUE_ATTRS = ("QUEUE", "TYPE", "CURDEPTH", "IPPROCS", "OPPROCS", "UNCOM", "MSGAGE",
                       "LPUTDATE", "LPUTTIME", "LGETDATE", "LGETTIME")
QSTATUS_HANDLE_ATTRS = ("QUEUE", "TYPE", "CONN", "CONNAME", "USERID", "APPLTAG", "APPLTYPE",
                        "INPUT", "OUTPUT", "BROWSE", "HSTATE")
CONN_ATTRS = ("CONN", "TYPE", "CONNAME", "USERID", "APPLTAG", "APPLTYPE", "CHANNEL",
              "CONNSTDA", "CONNSTTI", "UOWSTATE", "UOWSTDA", "UOWSTTI", "UOWLOG", "UOWLOGDA",
              "UOWLOGTI", "QMURID", "UOWID")
CONN_HANDLE_ATTRS = ("OBJNAME", "OBJTYPE", "OPENOPTS", "HSTATE")
QMSTATUS_ATTRS = ("QMNAME", "STATUS", "CONNS", "STARTDA", "STARTTI", "CHKPTLSN")
QMSTATUS_LOG_ATTRS = ("LOGTYPE", "LOGPATH", "LOGPRIM", "LOGSEC", "LOGEXTSZ", "CURRLOG",
                      "RECLOG", "RECSZ", "LOGINUSE", "REUSESZ", "MEDIALOG", "MEDIASZ",
                      "CURRLSN", "RECLSN", "MEDIALSN", "CKPTSPAN", "CKPTMAX", "LOGHELD")
DISPLAY_QMGR_ATTRS = ("QMNAME",) + QMGR_ATTRS
AUTHREC_ATTRS = ("PROFILE", "ENTITY", "ENTTYPE", "OBJTYPE", "AUTHLIST")
#: DISPLAY LOG: the log as a whole (always shown), then one block per extent
LOG_ATTRS = ("QMNAME", "LOGTYPE", "LOGMGMT", "LOGPATH", "ARCHPATH", "MAXARCH", "CURRLOG",
             "RECLOG", "MEDIALOG", "ARCHLOG")
LOG_EXTENT_ATTRS = ("EXTENT", "STATUS", "ARCHIVED", "DELETED", "ONDISK", "NEEDED",
                    "FIRSTLSN", "ENDLSN")
#: DISPLAY UOW: units of work in the log (dspmqtrn lists the in-doubt ones)
UOW_ATTRS = ("UOWID", "STATE", "OWNER", "FIRSTLSN", "LASTLSN", "UOWLOGDA", "UOWLOGTI",
             "CHKPTS")

#: publish/subscribe: TOPIC objects, subscriptions and their status (MQ's names)
TOPIC_ATTRS = tuple(TOPIC_DEFAULTS)
DISPLAY_TOPIC_ATTRS = ("TOPIC", "TYPE") + TOPIC_ATTRS
SUB_ATTRS = ("TOPICSTR", "TOPICOBJ", "DEST", "DESTCLAS", "SELECTOR", "EXPIRY")
DISPLAY_SUB_ATTRS = ("SUB", "SUBID") + SUB_ATTRS + ("DURABLE", "SUBTYPE", "SUBUSER", "CRDATE",
                                                   "CRTIME", "ALTDATE", "ALTTIME")
SBSTATUS_ATTRS = ("SUB", "SUBID", "DURABLE", "SUBTYPE", "TOPICSTR", "DEST", "LMSGDATE",
                  "LMSGTIME", "NUMMSGS", "ACTCONN")
TPSTATUS_TOPIC_ATTRS = ("TOPICSTR", "TYPE", "ADMIN", "DURSUB", "PUB", "SUB", "DEFPSIST",
                        "DEFPRTY", "RETAINED", "SUBCOUNT", "PUBCOUNT")
TPSTATUS_SUB_ATTRS = ("TOPICSTR", "TYPE", "SUBID", "SUB", "DURABLE", "SUBTYPE", "SUBUSER",
                      "DEST", "LMSGDATE", "LMSGTIME", "NUMMSGS")
TPSTATUS_PUB_ATTRS = ("TOPICSTR", "TYPE", "LPUBDATE", "LPUBTIME", "NUMPUBS")
PUBSUB_ATTRS = ("QMNAME", "TYPE", "STATUS", "SUBCOUNT", "TPCOUNT", "RETCOUNT")

WHERE_OPS = ("EQ", "NE", "LT", "GT", "LE", "GE", "LK", "NL", "CT", "EX")


@dataclass(frozen=True)
class Spec:
    """The grammar of one VERB OBJTYPE pair."""
    name: str = ""                               # "" no (name); "required" / "optional"
    valued: tuple = ()                           # KEYWORD(value)
    bare: tuple = ()                             # KEYWORD
    lists: tuple = ()                            # valued keywords taking a list
    exclusive: tuple = ()                        # groups of bare keywords, at most one


_DISPLAY_COMMON = ("WHERE",)
#: MQ's bare switches for a YES/NO attribute: HARDENBO is HARDENBO(YES)
_SWITCHES = {"HARDENBO": ("HARDENBO", "YES"), "NOHARDENBO": ("HARDENBO", "NO"),
             "TRIGGER": ("TRIGGER", "YES"), "NOTRIGGER": ("TRIGGER", "NO")}
_TRIGGER_SWITCHES = ("TRIGGER", "NOTRIGGER")


def _definition_specs(objtype: str, attrs: tuple, display: tuple, *, switches: tuple = (),
                      lists: tuple = ()) -> dict[tuple[str, str], Spec]:
    """DEFINE (REPLACE/NOREPLACE), ALTER, DELETE and DISPLAY of a type defined
    by its attributes alone; ``switches``: a bare YES/NO pair (TRIGGER/NOTRIGGER)."""
    pair = (switches,) if switches else ()
    return {("DEFINE", objtype): Spec("required", attrs + ("LIKE",),
                                      ("REPLACE", "NOREPLACE") + switches,
                                      lists=lists, exclusive=(("REPLACE", "NOREPLACE"),) + pair),
            ("ALTER", objtype): Spec("required", attrs, switches, lists=lists, exclusive=pair),
            ("DELETE", objtype): Spec("required"),
            ("DISPLAY", objtype): Spec("required", _DISPLAY_COMMON, display + ("ALL",))}


SPECS: dict[tuple[str, str], Spec] = {
    ("DEFINE", "QLOCAL"): Spec("required", QLOCAL_ATTRS + ("LIKE",),
                               ("REPLACE", "NOREPLACE", "HARDENBO", "NOHARDENBO")
                               + _TRIGGER_SWITCHES,
                               exclusive=(("REPLACE", "NOREPLACE"), ("HARDENBO", "NOHARDENBO"),
                                          _TRIGGER_SWITCHES)),
    ("ALTER", "QLOCAL"): Spec("required", QLOCAL_ATTRS, ("HARDENBO", "NOHARDENBO")
                              + _TRIGGER_SWITCHES,
                              exclusive=(("HARDENBO", "NOHARDENBO"), _TRIGGER_SWITCHES)),
    ("DELETE", "QLOCAL"): Spec("required", (), ("PURGE", "NOPURGE"),
                               exclusive=(("PURGE", "NOPURGE"),)),
    ("CLEAR", "QLOCAL"): Spec("required"),
    ("DISPLAY", "QLOCAL"): Spec("required", _DISPLAY_COMMON, DISPLAY_QUEUE_ATTRS + ("ALL",)),
    ("DISPLAY", "QUEUE"): Spec("required", _DISPLAY_COMMON + ("TYPE",),
                               DISPLAY_ANY_QUEUE_ATTRS + ("ALL",)),
    ("DISPLAY", "QSTATUS"): Spec("required", _DISPLAY_COMMON + ("TYPE",),
                                 tuple(dict.fromkeys(QSTATUS_QUEUE_ATTRS + QSTATUS_HANDLE_ATTRS))
                                 + ("ALL",)),
    ("DISPLAY", "CONN"): Spec("required", _DISPLAY_COMMON + ("TYPE",),
                              CONN_ATTRS + CONN_HANDLE_ATTRS + ("ALL",)),
    ("STOP", "CONN"): Spec("required"),
    ("DISPLAY", "QMSTATUS"): Spec("", _DISPLAY_COMMON + ("TYPE",),
                                  QMSTATUS_ATTRS + QMSTATUS_LOG_ATTRS + ("ALL", "LOG")),
    ("DISPLAY", "QMGR"): Spec("", (), DISPLAY_QMGR_ATTRS + ("ALL",)),
    ("ALTER", "QMGR"): Spec("", QMGR_ATTRS),
    ("PING", "QMGR"): Spec(""),
    ("SET", "AUTHREC"): Spec("", ("PROFILE", "OBJTYPE", "PRINCIPAL", "GROUP", "AUTHADD",
                                  "AUTHRMV"), lists=("AUTHADD", "AUTHRMV")),
    ("DELETE", "AUTHREC"): Spec("", ("PROFILE", "OBJTYPE", "PRINCIPAL", "GROUP")),
    ("DISPLAY", "AUTHREC"): Spec("", ("PROFILE", "OBJTYPE", "PRINCIPAL", "GROUP"),
                                 AUTHREC_ATTRS + ("ALL",)),
    ("DISPLAY", "LOG"): Spec("", _DISPLAY_COMMON, LOG_EXTENT_ATTRS + ("ALL",)),
    ("SET", "LOG"): Spec("", ("ARCHIVED",)),
    ("ARCHIVE", "LOG"): Spec(""),
    ("DISPLAY", "UOW"): Spec("required", _DISPLAY_COMMON, UOW_ATTRS + ("ALL",)),
    ("RESOLVE", "UOW"): Spec("required", ("ACTION",)),
    ("DEFINE", "QREMOTE"): Spec("required", QREMOTE_ATTRS, ("REPLACE", "NOREPLACE"),
                                exclusive=(("REPLACE", "NOREPLACE"),)),
    ("ALTER", "QREMOTE"): Spec("required", QREMOTE_ATTRS),
    ("DELETE", "QREMOTE"): Spec("required"),
    ("DISPLAY", "QREMOTE"): Spec("required", _DISPLAY_COMMON,
                                 DISPLAY_QREMOTE_ATTRS + ("ALL",)),
    ("DEFINE", "CHANNEL"): Spec("required", CHANNEL_ATTRS, ("REPLACE", "NOREPLACE"),
                                exclusive=(("REPLACE", "NOREPLACE"),)),
    ("ALTER", "CHANNEL"): Spec("required", CHANNEL_ATTRS),
    ("DELETE", "CHANNEL"): Spec("required"),
    ("DISPLAY", "CHANNEL"): Spec("required", _DISPLAY_COMMON,
                                 DISPLAY_CHANNEL_ATTRS + ("ALL",)),
    ("START", "CHANNEL"): Spec("required"),
    ("STOP", "CHANNEL"): Spec("required"),
    ("RESET", "CHANNEL"): Spec("required", ("SEQNUM",)),
    ("RESOLVE", "CHANNEL"): Spec("required", ("ACTION",)),
    ("DISPLAY", "CHSTATUS"): Spec("required", _DISPLAY_COMMON, CHSTATUS_ATTRS + ("ALL",)),
    ("DEFINE", "LISTENER"): Spec("required", LISTENER_ATTRS, ("REPLACE", "NOREPLACE"),
                                 exclusive=(("REPLACE", "NOREPLACE"),)),
    ("ALTER", "LISTENER"): Spec("required", LISTENER_ATTRS),
    ("DELETE", "LISTENER"): Spec("required"),
    ("DISPLAY", "LISTENER"): Spec("required", _DISPLAY_COMMON,
                                  DISPLAY_LISTENER_ATTRS + ("ALL",)),
    ("START", "LISTENER"): Spec("required"),
    ("STOP", "LISTENER"): Spec("required"),
    # alias and model queues, processes, namelists (admin/object_commands.py)
    **_definition_specs("QALIAS", QALIAS_ATTRS, DISPLAY_QALIAS_ATTRS),
    **_definition_specs("QMODEL", QMODEL_ATTRS, DISPLAY_QMODEL_ATTRS,
                        switches=_TRIGGER_SWITCHES),
    **_definition_specs("PROCESS", PROCESS_ATTRS, DISPLAY_PROCESS_ATTRS),
    **_definition_specs("NAMELIST", NAMELIST_ATTRS, DISPLAY_NAMELIST_ATTRS, lists=("NAMES",)),
    ("DEFINE", "TOPIC"): Spec("required", TOPIC_ATTRS + ("LIKE",), ("REPLACE", "NOREPLACE"),
                              exclusive=(("REPLACE", "NOREPLACE"),)),
    ("ALTER", "TOPIC"): Spec("required", TOPIC_ATTRS),
    ("DELETE", "TOPIC"): Spec("required"),
    ("DISPLAY", "TOPIC"): Spec("required", _DISPLAY_COMMON, DISPLAY_TOPIC_ATTRS + ("ALL",)),
    ("DEFINE", "SUB"): Spec("required", SUB_ATTRS, ("REPLACE", "NOREPLACE"),
                            exclusive=(("REPLACE", "NOREPLACE"),)),
    ("ALTER", "SUB"): Spec("required", SUB_ATTRS),
    ("DELETE", "SUB"): Spec("required"),
    ("DISPLAY", "SUB"): Spec("required", _DISPLAY_COMMON, DISPLAY_SUB_ATTRS + ("ALL",)),
    ("DISPLAY", "SBSTATUS"): Spec("required", _DISPLAY_COMMON, SBSTATUS_ATTRS + ("ALL",)),
    ("DISPLAY", "TPSTATUS"): Spec("required", _DISPLAY_COMMON + ("TYPE",),
                                  tuple(dict.fromkeys(TPSTATUS_TOPIC_ATTRS + TPSTATUS_SUB_ATTRS
                                                      + TPSTATUS_PUB_ATTRS)) + ("ALL",)),
    ("DISPLAY", "PUBSUB"): Spec("", ("TYPE",), PUBSUB_ATTRS + ("ALL",)),
    ("CLEAR", "TOPICSTR"): Spec("required", ("CLRTYPE", "SCOPE")),
}
# -- client-connection security, and MQ administrators' forms (admin/security_commands.py)
VERBS.update({"REFRESH": "REFRESH", "REF": "REFRESH"})
VERB_ORDER = VERB_ORDER[:-1] + ("REFRESH", "END")
OBJTYPES.update({"AUTHINFO": "AUTHINFO", "CHLAUTH": "CHLAUTH", "SECURITY": "SECURITY",
                 "USAGE": "USAGE"})
#: DISPLAY USAGE (MQ for z/OS's page sets and log data sets): one block per
#: store (a queue's, the catalog's), then one per log extent
USAGE_STORE_ATTRS = ("STORE", "TYPE", "CURDEPTH", "FILESZ", "ALLOCSZ", "PATH")
USAGE_EXTENT_ATTRS = ("EXTENT", "TYPE", "STATUS", "FIRSTLSN", "ENDLSN", "USEDSZ", "FILESZ",
                      "ONDISK")
AUTHINFO_ATTRS = tuple(AUTHINFO_DEFAULTS)
DISPLAY_AUTHINFO_ATTRS = ("AUTHINFO",) + AUTHINFO_ATTRS
#: SET CHLAUTH's keywords; DISPLAY CHLAUTH shows a record's (MQ's names)
CHLAUTH_KEYWORDS = ("TYPE", "ADDRESS", "CLNTUSER", "SSLPEER", "USERLIST", "ADDRLIST",
                    "USERSRC", "MCAUSER", "CHCKCLNT", "WARN", "DESCR", "ACTION")
CHLAUTH_ATTRS = ("CHLAUTH", "TYPE", "DESCR", "ADDRESS", "CLNTUSER", "SSLPEER", "USERLIST",
                 "ADDRLIST", "USERSRC", "MCAUSER", "CHCKCLNT", "WARN")
#: DISPLAY CHSTATUS of a server-connection channel: one block per instance
SVRCONN_CHSTATUS_ATTRS = ("CHANNEL", "CHLTYPE", "STATUS", "CONNAME", "CONN", "MCAUSER",
                          "CHSTADA", "CHSTATI", "MAXMSGL")
#: keywords harbormq accepts where MQ has them but that have no effect here:
#: answered with HMQ8890W naming the keyword, not a syntax error
NO_EFFECT = {
    ("ALTER", "QMGR"): ("STATMQI", "STATQ", "STATCHL", "STATINT", "MONQ", "MONCHL", "MONACLS",
                        "MAXHANDS", "MAXUMSGS", "ACTIVREC", "EXPRYINT", "PERFMEV", "SSLEV",
                        "CHLEV", "AUTHOREV", "INHIBTEV", "LOCALEV", "REMOTEEV", "STRSTPEV",
                        "CMDEV", "CONFIGEV", "LOGGEREV", "TRIGINT", "CHAD", "CHADEV",
                        "MAXPROPL", "CCSID", "REVDNS", "ADOPTNEWMCA", "SSLFIPS"),
    ("DEFINE", "CHANNEL"): ("SHARECNV", "MONCHL", "STATCHL", "KAINT", "CERTLABL", "PROPCTL"),
    ("ALTER", "CHANNEL"): ("SHARECNV", "MONCHL", "STATCHL", "KAINT", "CERTLABL", "PROPCTL"),
    ("DEFINE", "AUTHINFO"): ("AUTHENMD",),
    ("ALTER", "AUTHINFO"): ("AUTHENMD",),
}
SPECS.update({
    ("DEFINE", "AUTHINFO"): Spec("required", AUTHINFO_ATTRS + ("LIKE",) +
                                NO_EFFECT[("DEFINE", "AUTHINFO")], ("REPLACE", "NOREPLACE"),
                                exclusive=(("REPLACE", "NOREPLACE"),)),
    ("ALTER", "AUTHINFO"): Spec("required", AUTHINFO_ATTRS + NO_EFFECT[("ALTER", "AUTHINFO")]),
    ("DELETE", "AUTHINFO"): Spec("required"),
    ("DISPLAY", "AUTHINFO"): Spec("required", _DISPLAY_COMMON,
                                  DISPLAY_AUTHINFO_ATTRS + ("ALL",)),
    ("SET", "CHLAUTH"): Spec("required", CHLAUTH_KEYWORDS, lists=("USERLIST", "ADDRLIST")),
    ("DISPLAY", "CHLAUTH"): Spec("required", _DISPLAY_COMMON + ("TYPE", "MATCH", "ADDRESS",
                                                                "CLNTUSER", "SSLPEER"),
                                 CHLAUTH_ATTRS + ("ALL",)),
    ("REFRESH", "SECURITY"): Spec("optional", ("TYPE",)),
    ("DISPLAY", "USAGE"): Spec("", _DISPLAY_COMMON + ("TYPE",), tuple(dict.fromkeys(
        USAGE_STORE_ATTRS + USAGE_EXTENT_ATTRS)) + ("ALL",)),
    # LIKE and REPLACE/NOREPLACE on every DEFINE, IGNSTATE on START and STOP
    ("DEFINE", "QREMOTE"): Spec("required", QREMOTE_ATTRS + ("LIKE",), ("REPLACE", "NOREPLACE"),
                                exclusive=(("REPLACE", "NOREPLACE"),)),
    ("DEFINE", "CHANNEL"): Spec("required", CHANNEL_ATTRS + ("LIKE",) +
                                NO_EFFECT[("DEFINE", "CHANNEL")], ("REPLACE", "NOREPLACE"),
                                exclusive=(("REPLACE", "NOREPLACE"),)),
    ("ALTER", "CHANNEL"): Spec("required", CHANNEL_ATTRS + NO_EFFECT[("ALTER", "CHANNEL")]),
    ("DEFINE", "LISTENER"): Spec("required", LISTENER_ATTRS + ("LIKE",),
                                 ("REPLACE", "NOREPLACE"), exclusive=(("REPLACE", "NOREPLACE"),)),
    ("START", "CHANNEL"): Spec("required", ("IGNSTATE",)),
    ("STOP", "CHANNEL"): Spec("required", ("IGNSTATE",)),
    ("START", "LISTENER"): Spec("required", ("IGNSTATE",)),
    ("STOP", "LISTENER"): Spec("required", ("IGNSTATE",)),
    ("DISPLAY", "CHSTATUS"): Spec("required", _DISPLAY_COMMON, tuple(dict.fromkeys(
        CHSTATUS_ATTRS + SVRCONN_CHSTATUS_ATTRS)) + ("ALL",)),
    ("ALTER", "QMGR"): Spec("", QMGR_ATTRS + NO_EFFECT[("ALTER", "QMGR")]),
})
# -- structure backup and recovery of a queue sharing group (admin/cfstruct_commands.py)
VERBS.update({"BACKUP": "BACKUP", "RECOVER": "RECOVER", "REC": "RECOVER"})
VERB_ORDER = VERB_ORDER[:-1] + ("BACKUP", "RECOVER", "END")
OBJTYPES.update({"CFSTRUCT": "CFSTRUCT", "CFSTATUS": "CFSTATUS"})
#: DISPLAY CFSTATUS's attributes by TYPE (MQ's names)
CFSTATUS_SUMMARY_ATTRS = ("CFSTATUS", "TYPE", "CFTYPE", "STATUS", "RECOVER", "RECAUTO",
                          "ENTSUSED", "SIZEUSED", "FAILDATE", "FAILTIME")
CFSTATUS_BACKUP_ATTRS = ("CFSTATUS", "TYPE", "STATUS", "QMNAME", "BKUPDATE", "BKUPTIME",
                         "BKUPSIZE", "BKUPSRBA", "BKUPERBA", "BKUPMSGS", "EXCLINT", "LOGS",
                         "FAILDATE", "FAILTIME")
CFSTATUS_CONNECT_ATTRS = ("CFSTATUS", "TYPE", "QMNAME", "STATUS", "CONNDATE", "CONNTIME",
                          "FAILDATE", "FAILTIME")
SPECS.update({
    ("BACKUP", "CFSTRUCT"): Spec("required", ("EXCLINT",)),
    ("RECOVER", "CFSTRUCT"): Spec("required", ("TYPE",)),
    ("RESET", "CFSTRUCT"): Spec("required", ("ACTION",)),
    ("DISPLAY", "CFSTATUS"): Spec("required", _DISPLAY_COMMON + ("TYPE",), tuple(dict.fromkeys(
        CFSTATUS_SUMMARY_ATTRS + CFSTATUS_BACKUP_ATTRS + CFSTATUS_CONNECT_ATTRS)) + ("ALL",)),
})

# -- queue sharing groups (admin/qsg_commands.py; docs/qsg.md)
OBJTYPES.update({"CFSTRUCT": "CFSTRUCT", "GROUP": "GROUP"})
CFSTRUCT_ATTRS = ("CFLEVEL", "RECOVER", "RECAUTO", "DESCR")
DISPLAY_CFSTRUCT_ATTRS = ("CFSTRUCT",) + CFSTRUCT_ATTRS + ("STATUS", "ALTDATE", "ALTTIME")
#: DISPLAY GROUP: one block per member (MQ's names where it has them)
GROUP_ATTRS = ("QMNAME", "QSGNAME", "NUMBER", "STATUS", "STARTDA", "STARTTI", "HBTIME")
#: DISPLAY QMSTATUS's block of a member of a group
QMSTATUS_QSG_ATTRS = ("QMNAME", "QSGNAME", "QSGNUM", "QSGSTAT", "SHQUEUES")
SPECS.update({
    **_definition_specs("CFSTRUCT", CFSTRUCT_ATTRS, DISPLAY_CFSTRUCT_ATTRS),
    ("DISPLAY", "GROUP"): Spec("", (), GROUP_ATTRS + ("ALL",)),
    ("DEFINE", "QLOCAL"): Spec("required", SPECS[("DEFINE", "QLOCAL")].valued
                               + ("QSGDISP", "CFSTRUCT"), SPECS[("DEFINE", "QLOCAL")].bare,
                               exclusive=SPECS[("DEFINE", "QLOCAL")].exclusive),
    ("DELETE", "QLOCAL"): Spec("required", ("QSGDISP",), SPECS[("DELETE", "QLOCAL")].bare,
                               exclusive=SPECS[("DELETE", "QLOCAL")].exclusive),
})

# -- QSGDISP(GROUP) objects and their QSGDISP(COPY) copies (admin/groupdisp_commands.py)
#: the types that take QSGDISP on DEFINE, ALTER, DELETE and DISPLAY
GROUPDISP_TYPES = ("QLOCAL", "QREMOTE", "QALIAS", "QMODEL", "PROCESS", "NAMELIST", "CHANNEL",
                   "TOPIC")
for _o in GROUPDISP_TYPES:
    for _v in ("DEFINE", "ALTER", "DELETE", "DISPLAY"):
        _s = SPECS[(_v, _o)]
        if "QSGDISP" not in _s.valued:
            SPECS[(_v, _o)] = Spec(_s.name, _s.valued + ("QSGDISP",), _s.bare, lists=_s.lists,
                                   exclusive=_s.exclusive)

#: object types each verb takes, in the order error messages list them
VERB_OBJTYPES: dict[str, tuple[str, ...]] = {}
for (_v, _o) in SPECS:
    VERB_OBJTYPES.setdefault(_v, ())
    VERB_OBJTYPES[_v] += (_o,)


@dataclass
class Command:
    verb: str                         # DEFINE, DISPLAY, ... (long form)
    objtype: str = ""                 # QLOCAL, QUEUE, ..., AUTHREC, LOG (long forms)
    name: str | None = None           # the (name) after the object type
    attrs: dict = field(default_factory=dict)     # KEYWORD -> str (or list for AUTHADD ...)
    flags: list = field(default_factory=list)     # bare keywords, in the order given
    where: tuple | None = None        # (KEYWORD, OP, value)
    line: int = 0                     # first source line
    lines: list = field(default_factory=list)     # source lines, for the echo
    text: str = ""                    # the command, continuations joined

    @property
    def requested(self) -> list[str]:
        """DISPLAY: attributes asked for (bare keywords other than ALL/LOG)."""
        return [f for f in self.flags if f not in ("ALL", "LOG")]


# -- reading lines into commands -------------------------------------------------------

@dataclass
class _Chunk:
    """One command's text with the (line, column) of every character."""
    chars: list            # [(ch, line, col)]
    lines: list            # source lines
    first_line: int
    end_pos: tuple         # (line, col) just past the end
    dangling: bool = False # ended on a continuation character with no next line


def _chunks(text: str):
    src = text.splitlines()
    i = 0
    while i < len(src):
        raw = src[i]
        stripped = raw.strip()
        if not stripped or stripped.startswith("*"):
            i += 1
            continue
        chars: list = []
        lines: list = []
        first = i + 1
        keep_blanks = True
        while True:
            lineno = i + 1
            raw = src[i]
            lines.append(raw)
            body = raw.rstrip()
            start = 0
            if not keep_blanks:
                start = len(body) - len(body.lstrip())
            cont = body[-1:] if body[-1:] in ("+", "-") else ""
            end = len(body) - 1 if cont else len(body)
            for col in range(start, end):
                chars.append((body[col], lineno, col + 1))
            i += 1
            if not cont:
                yield _Chunk(chars, lines, first, (lineno, len(body) + 1))
                break
            keep_blanks = cont == "-"
            # comment lines inside a continued command are skipped too
            while i < len(src) and src[i].strip().startswith("*"):
                i += 1
            if i >= len(src):
                yield _Chunk(chars, lines, first, (lineno, len(body)), dangling=True)
                break


# -- tokens -------------------------------------------------------------------------------

@dataclass
class _Tok:
    kind: str          # WORD QUOTED ( ) , END
    value: str
    line: int
    col: int


_SPECIAL = "(),'"


def _tokens(chunk: _Chunk) -> list[_Tok]:
    chars = chunk.chars
    out: list[_Tok] = []
    i = 0
    n = len(chars)
    while i < n:
        ch, line, col = chars[i]
        if ch.isspace():
            i += 1
            continue
        if ch in "(),":
            out.append(_Tok(ch, ch, line, col))
            i += 1
            continue
        if ch == "'":
            buf = []
            i += 1
            while True:
                if i >= n:
                    raise _error(chunk, line, col, "quoted string is not closed: expected ' "
                                 "before the end of the command", ("'",))
                c = chars[i][0]
                if c == "'":
                    if i + 1 < n and chars[i + 1][0] == "'":
                        buf.append("'")
                        i += 2
                        continue
                    i += 1
                    break
                buf.append(c)
                i += 1
            out.append(_Tok("QUOTED", "".join(buf), line, col))
            continue
        buf = []
        while i < n and not chars[i][0].isspace() and chars[i][0] not in _SPECIAL:
            buf.append(chars[i][0])
            i += 1
        out.append(_Tok("WORD", "".join(buf), line, col))
    out.append(_Tok("END", "", *chunk.end_pos))
    return out


def _error(chunk: _Chunk, line: int, col: int, message: str, expected=()) -> MqscSyntaxError:
    return MqscSyntaxError(message, line=line, column=col, expected=expected,
                           lines=chunk.lines, first_line=chunk.first_line)


def _or_list(words) -> str:
    words = list(words)
    if len(words) == 1:
        return words[0]
    return ", ".join(words[:-1]) + " or " + words[-1]


def _found(tok: _Tok) -> str:
    if tok.kind == "END":
        return "found the end of the command"
    if tok.kind == "QUOTED":
        return f"found '{tok.value}'"
    return f"found {tok.value}" if tok.kind == "WORD" else f"found '{tok.value}'"


# -- parsing -------------------------------------------------------------------------------

class _Parser:
    def __init__(self, chunk: _Chunk):
        self.chunk = chunk
        if chunk.dangling:
            line, col = chunk.end_pos
            raise _error(chunk, line, col, "expected a continuation line after '+' or '-', "
                         "found the end of the input", ("continuation line",))
        self.toks = _tokens(chunk)
        self.i = 0

    def peek(self) -> _Tok:
        return self.toks[self.i]

    def next(self) -> _Tok:
        tok = self.toks[self.i]
        if tok.kind != "END":
            self.i += 1
        return tok

    def fail(self, tok: _Tok, message: str, expected=()) -> MqscSyntaxError:
        return _error(self.chunk, tok.line, tok.col, message, expected)

    def value_items(self, keyword: str) -> list[tuple[str, _Tok]]:
        """After KEYWORD: '(' items ')' -> [(value, token)]; unquoted values in upper case."""
        tok = self.next()
        if tok.kind != "(":
            raise self.fail(tok, f"expected ( and a value after {keyword}, {_found(tok)}",
                            ("(",))
        items = []
        while True:
            tok = self.next()
            if tok.kind == ")":
                return items
            if tok.kind == ",":
                continue
            if tok.kind == "WORD":
                items.append((tok.value.upper(), tok))
            elif tok.kind == "QUOTED":
                items.append((tok.value, tok))
            else:
                raise self.fail(tok, f"expected ) to close {keyword}(, {_found(tok)}", (")",))

    def single(self, keyword: str) -> str:
        items = self.value_items(keyword)
        if len(items) > 1:
            raise self.fail(items[1][1], f"expected ) after the value of {keyword}, "
                            f"found {items[1][0]} (quote a value that holds blanks)", (")",))
        return items[0][0] if items else ""

    def parse(self) -> Command:
        chunk = self.chunk
        cmd = Command(verb="", line=chunk.first_line, lines=list(chunk.lines),
                      text="".join(c for c, _l, _c in chunk.chars).strip())
        tok = self.next()
        verb = VERBS.get(tok.value.upper()) if tok.kind == "WORD" else None
        if verb is None:
            raise self.fail(tok, f"expected a command ({_or_list(VERB_ORDER)}), {_found(tok)}",
                            VERB_ORDER)
        cmd.verb = verb
        if verb == "END":
            self.expect_end(cmd)
            return cmd
        allowed = VERB_OBJTYPES[verb]
        tok = self.next()
        objtype = OBJTYPES.get(tok.value.upper()) if tok.kind == "WORD" else None
        if objtype not in allowed:
            raise self.fail(tok, f"expected {_or_list(allowed)} after {verb}, {_found(tok)}",
                            allowed)
        cmd.objtype = objtype
        spec = SPECS[(verb, objtype)]
        if spec.name and (spec.name == "required" or self.peek().kind == "("):
            if self.peek().kind != "(":
                tok = self.peek()
                raise self.fail(tok, f"expected ( and a name after {objtype}, {_found(tok)}",
                                ("(",))
            name = self.single(objtype)
            if not name:
                raise self.fail(tok, f"expected a name in {objtype}( )", ("name",))
            cmd.name = name
        self.keywords(cmd, spec)
        return cmd

    def expect_end(self, cmd: Command) -> None:
        tok = self.peek()
        if tok.kind != "END":
            raise self.fail(tok, f"expected the end of the {cmd.verb} command, {_found(tok)}",
                            ("end of command",))

    def keywords(self, cmd: Command, spec: Spec) -> None:
        where = f"{cmd.verb} {cmd.objtype}"
        known = spec.valued + spec.bare
        seen: dict[str, _Tok] = {}
        while True:
            tok = self.next()
            if tok.kind == "END":
                break
            if tok.kind != "WORD":
                if known:
                    raise self.fail(tok, f"expected a keyword of {where}, {_found(tok)}",
                                    known)
                raise self.fail(tok, f"expected the end of the {where} command, "
                                f"{_found(tok)}", ("end of command",))
            kw = tok.value.upper()
            if kw not in known:
                if not known:
                    raise self.fail(tok, f"{where} takes no keywords, found {tok.value}",
                                    ("end of command",))
                raise self.fail(tok, f"expected a keyword of {where} ({', '.join(known)}), "
                                f"found {tok.value}", known)
            if kw in seen:
                raise self.fail(tok, f"{kw} is given twice", ())
            seen[kw] = tok
            if kw in spec.valued and (kw not in spec.bare or self.peek().kind == "("):
                if kw == "WHERE":
                    cmd.where = self.where_clause(tok, spec)
                elif kw in spec.lists:
                    cmd.attrs[kw] = [v for v, _t in self.value_items(kw)]
                else:
                    cmd.attrs[kw] = self.single(kw)
            else:
                if self.peek().kind == "(":
                    raise self.fail(self.peek(), f"{kw} takes no value: expected a keyword "
                                    "or the end of the command, found '('", ())
                cmd.flags.append(kw)
        for group in spec.exclusive:
            given = [k for k in group if k in seen]
            if len(given) > 1:
                raise self.fail(seen[given[1]], f"{given[0]} and {given[1]} exclude each "
                                "other", ())

    def where_clause(self, kw_tok: _Tok, spec: Spec) -> tuple:
        items = self.value_items("WHERE")
        if len(items) != 3:
            raise self.fail(kw_tok, "expected WHERE(keyword operator value), e.g. "
                            "WHERE(CURDEPTH GT 0)", ("keyword operator value",))
        (attr, atok), (op, otok), (value, _vtok) = items
        if attr not in spec.bare or attr in ("ALL", "LOG"):
            raise self.fail(atok, f"expected an attribute to filter on, found {attr}",
                            spec.bare)
        if op not in WHERE_OPS:
            raise self.fail(otok, f"expected an operator ({_or_list(WHERE_OPS)}), "
                            f"found {op}", WHERE_OPS)
        return (attr, op, value)


def given_attrs(cmd: Command) -> dict:
    """A DEFINE's or ALTER's attributes, MQ's bare switches among them
    (``HARDENBO`` is HARDENBO(YES), ``NOHARDENBO`` HARDENBO(NO))."""
    attrs = dict(cmd.attrs)
    for flag in cmd.flags:
        if flag in _SWITCHES:
            attr, value = _SWITCHES[flag]
            attrs[attr] = value
    return attrs


def parse_script(text: str) -> list[Command | MqscSyntaxError]:
    """Every command of ``text`` in order: a Command, or the syntax error of that
    command. Reading stops after END, as runmqsc's does."""
    out: list[Command | MqscSyntaxError] = []
    for chunk in _chunks(text):
        try:
            cmd = _Parser(chunk).parse()
        except MqscSyntaxError as exc:
            out.append(exc)
            continue
        out.append(cmd)
        if cmd.verb == "END":
            break
    return out


def parse(text: str) -> list[Command]:
    """Every command of ``text``; raises the first syntax error."""
    cmds = []
    for item in parse_script(text):
        if isinstance(item, MqscSyntaxError):
            raise item
        cmds.append(item)
    return cmds


def parse_command(text: str) -> Command:
    cmds = parse(text)
    if len(cmds) != 1:
        raise ValueError(f"expected one command, got {len(cmds)}")
    return cmds[0]


def select_attrs(cmd: Command, order: tuple, always: tuple, default: tuple | None = None) -> list:
    """DISPLAY: attribute names to show, in display order: ``always`` first, then
    ALL or the requested ones (and the WHERE keyword), else ``default``."""
    if "ALL" in cmd.flags:
        wanted = set(order)
    else:
        wanted = set(cmd.requested) if cmd.requested else set(default or ())
    if cmd.where:
        wanted.add(cmd.where[0])
    wanted |= set(always)
    return [a for a in order if a in wanted]


# -- generic names and WHERE ------------------------------------------------------------

def generic_match(pattern: str, name: str) -> bool:
    """MQ's generic names: a trailing ``*`` matches any characters (``Q*``, ``*``);
    elsewhere ``*`` is taken the same way, which MQ does not allow."""
    if "*" not in pattern:
        return pattern == name
    # no regex: one '.*' per star backtracks exponentially, and DIS QL('***...*A')
    # held the queue manager's loop for hours. The leftmost match of each part
    # between stars is the one that leaves the most for the rest.
    first, *middle, last = pattern.split("*")
    if len(first) + len(last) > len(name) or not name.startswith(first) or \
            not name.endswith(last):
        return False
    pos, end = len(first), len(name) - len(last)
    for part in middle:
        found = name.find(part, pos, end)
        if found < 0:
            return False
        pos = found + len(part)
    return True


def _num(v):
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def where_matches(where: tuple | None, attrs: dict) -> bool:
    if where is None:
        return True
    key, op, want = where
    have = attrs.get(key)
    if have is None:
        return False
    if isinstance(have, (list, tuple)):
        if op == "CT":
            return want in have
        if op == "EX":
            return want not in have
        have = ",".join(str(h) for h in have)
    if op == "LK":
        return generic_match(want, str(have))
    if op == "NL":
        return not generic_match(want, str(have))
    a, b = _num(have), _num(want)
    if a is None or b is None:
        a, b = str(have), str(want)
    return {"EQ": a == b, "NE": a != b, "LT": a < b, "GT": a > b, "LE": a <= b,
            "GE": a >= b, "CT": str(b) in str(a), "EX": str(b) not in str(a)}[op]


# -- output --------------------------------------------------------------------------------

def mq_date(ns: int) -> str:
    return time.strftime("%Y-%m-%d", time.localtime(ns / 1e9)) if ns else ""


def mq_time(ns: int) -> str:
    """MQ writes times as hh.mm.ss."""
    return time.strftime("%H.%M.%S", time.localtime(ns / 1e9)) if ns else ""


COLUMN = 40
INDENT = "   "


def format_value(value) -> str:
    if value is None or value == "":
        return " "
    if isinstance(value, bool):
        return "YES" if value else "NO"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value) or " "
    return str(value)


def format_pairs(pairs) -> list[str]:
    """``ATTR(value)`` two per line, the second at column 44 as in runmqsc; an item
    too wide for its column gets a line of its own."""
    items = [f"{k}({format_value(v)})" for k, v in pairs]
    lines = []
    i = 0
    while i < len(items):
        first = items[i]
        if i + 1 < len(items) and len(first) < COLUMN:
            lines.append(INDENT + first.ljust(COLUMN) + items[i + 1])
            i += 2
        else:
            lines.append(INDENT + first)
            i += 1
    return lines


def format_object(msgid: str, title: str, pairs) -> str:
    return "\n".join([f"{msgid}: {title}"] + format_pairs(pairs))


def format_message(msgid: str, text: str) -> str:
    return f"{msgid}: {text}"


def format_echo(seq: int, lines: list[str]) -> str:
    """runmqsc's echo: ``     1 : DEFINE QLOCAL(Q1)``; continuation lines unnumbered."""
    out = []
    for j, line in enumerate(lines):
        label = f"{seq:6d}" if j == 0 else " " * 6
        out.append(f"{label} : {line.rstrip()}")
    return "\n".join(out)


def format_syntax_error(exc: MqscSyntaxError) -> str:
    """The error, then the offending source line with a caret under the column."""
    out = [f"{exc.msgid}: Syntax error at line {exc.line}, column {exc.column}: {exc.detail}"]
    idx = exc.line - exc.first_line
    if 0 <= idx < len(exc.lines):
        out.append("   " + exc.lines[idx].rstrip())
        out.append("   " + " " * (exc.column - 1) + "^")
    return "\n".join(out)


def _count(n: int, one: str, many: str, zero: str | None = None) -> str:
    if n == 0 and zero is not None:
        return zero
    if n == 1:
        return one
    return many.format(n=n)


def format_summary(read: int, syntax_errors: int, failed: int, *,
                   not_run: int = 0) -> str:
    lines = [
        _count(read, "One MQSC command read.", "{n} MQSC commands read.",
               "No MQSC commands read."),
        _count(syntax_errors, "One command has a syntax error.",
               "{n} commands have a syntax error.", "No commands have a syntax error."),
        _count(failed, "One valid MQSC command could not be processed.",
               "{n} valid MQSC commands could not be processed.",
               "All valid MQSC commands were processed."),
    ]
    if not_run:
        lines.append(_count(not_run, "Processing stopped at the first error: one more "
                            "command was not run.", "Processing stopped at the first error: "
                            "{n} more commands were not run."))
    return "\n".join(lines)
