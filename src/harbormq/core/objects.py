"""Object definitions: the queue manager object, local queues (QLOCAL),
remote queue definitions (QREMOTE), alias and model queues (QALIAS, QMODEL),
processes, namelists, channels (sender, receiver and server-connection) and
channel listeners, topics, connection authentication (AUTHINFO) and channel
authentication records (CHLAUTH).

Attributes use MQSC names. A definition is a plain dict (it is logged as JSON
in OBJECT_CREATE/ALTER records and kept in the catalog store)::

    {"type": "QLOCAL", "name": "Q1", "object_id": 7, "create_lsn": 4242,
     "attrs": {"DESCR": "", "DEFPSIST": "NO", ...}}

Queues (QLOCAL, QREMOTE, QALIAS, QMODEL) share one namespace, as in MQ;
channels, listeners, processes and namelists each have their own, kept in
the catalog under ``CHANNEL:name``, ``LISTENER:name``, ``PROCESS:name`` and
``NAMELIST:name`` (":" is never in an object name, so the keys cannot meet a
queue's).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..errors import InvalidAttribute
from ..security.svrconn import DEFAULT_SVRCONN as DEFAULT_SVRCONN  # the default SVRCONN

QMGR_OBJECT = "QMGR"
DEFAULT_LOCAL_QUEUE = "SYSTEM.DEFAULT.LOCAL.QUEUE"
DEAD_LETTER_QUEUE = "SYSTEM.DEAD.LETTER.QUEUE"
#: the channels' synchronisation data: one message per channel and side,
#: replaced under each batch's unit of work (MQ's SYSTEM.CHANNEL.SYNCQ)
CHANNEL_SYNCQ = "SYSTEM.CHANNEL.SYNCQ"
#: publish/subscribe (pubsub/): durable and administrative subscriptions, and
#: retained publications, each a message on its status queue (MQ's names)
DURABLE_SUBSCRIBER_QUEUE = "SYSTEM.DURABLE.SUBSCRIBER.QUEUE"
RETAINED_PUB_QUEUE = "SYSTEM.RETAINED.PUB.QUEUE"
BASE_TOPIC = "SYSTEM.BASE.TOPIC"
#: the queues pub/sub makes for subscriptions (SYSTEM.MANAGED.DURABLE.<id>,
#: SYSTEM.MANAGED.NDURABLE.<id>): made and deleted with their subscription
MANAGED_QUEUE_PREFIX = "SYSTEM.MANAGED."
#: the connection authentication a new queue manager's CONNAUTH names
DEFAULT_AUTHINFO = "SYSTEM.DEFAULT.AUTHINFO.IDPWOS"

#: MQ's characters, and '-' (not first: it would read as a command-line option),
#: which STOMP applications' destinations use as RabbitMQ, ActiveMQ and Artemis
#: accept it. Not ':' (the catalog's keys, ``CHANNEL:name``), nor the wildcards
#: of authority profiles and other brokers (``* ? # > +``), nor MQSC's
#: ``' ( ) ,`` and blanks.
NAME_RE = re.compile(r"^[A-Za-z0-9._/%][A-Za-z0-9._/%-]{0,47}$")

#: QLOCAL attributes and their MQ defaults
QLOCAL_DEFAULTS = {
    "DESCR": "",
    "DEFPSIST": "NO",          # MQ's default: messages are non-persistent unless asked
    "DEFPRTY": 0,
    "MAXDEPTH": 5000,
    "MAXMSGL": 4 * 1024 * 1024,
    "INDXTYPE": "NONE",
    "BOTHRESH": 0,
    "BOQNAME": "",
    #: YES: a delivery's get is logged when it is made, so a backout count
    #: survives a crash (MQ's HARDENBO); NO: at its acknowledgement (NOHARDENBO)
    "HARDENBO": "NO",
    "GET": "ENABLED",
    "PUT": "ENABLED",
    "USAGE": "NORMAL",         # XMITQ: a transmission queue, read by a sender channel
    # triggering (core/triggering.py): a trigger message on INITQ when a put meets TRIGTYPE
    "TRIGGER": "NO",           # MQSC's bare TRIGGER / NOTRIGGER
    "TRIGTYPE": "FIRST",
    "TRIGDPTH": 1,
    "TRIGMPRI": 0,
    "TRIGDATA": "",
    "INITQ": "",
    "PROCESS": "",
    #: PREDEFINED, or how a model queue made it (core/dynamic.py); never set by DEFINE
    "DEFTYPE": "PREDEFINED",
}

#: QREMOTE: a local name for a queue on another queue manager
QREMOTE_DEFAULTS = {
    "DESCR": "",
    "RNAME": "",               # the queue's name there
    "RQMNAME": "",             # the queue manager it is on
    "XMITQ": "",               # blank: the transmission queue named RQMNAME
    "DEFPSIST": "NO",
    "DEFPRTY": 0,
    "PUT": "ENABLED",
}

#: QALIAS: another name for a queue (or, TARGTYPE(TOPIC), a topic); core/aliases.py
QALIAS_DEFAULTS = {
    "DESCR": "",
    "TARGET": "",
    "TARGTYPE": "QUEUE",
    "DEFPSIST": "NO",
    "DEFPRTY": 0,
    "PUT": "ENABLED",
    "GET": "ENABLED",
}

#: QMODEL: the template of dynamic queues (core/dynamic.py): QLOCAL's attributes
#: and DEFTYPE, what kind of dynamic queue an open makes
QMODEL_DEFAULTS = dict(QLOCAL_DEFAULTS, DEFTYPE="TEMPDYN")

#: PROCESS: the application a trigger monitor starts (core/triggering.py)
PROCESS_DEFAULTS = {
    "DESCR": "",
    "APPLICID": "",
    "APPLTYPE": "UNIX",
    "USERDATA": "",
    "ENVRDATA": "",
}

#: NAMELIST: a named list of names
NAMELIST_DEFAULTS = {
    "DESCR": "",
    "NAMES": [],
}

#: media images' and recreate's ``--type`` values naming one kind of object
#: (rcdmqimg's -t), and the definition types of each
OBJECT_KINDS = {"qlocal": ("QLOCAL",), "qalias": ("QALIAS",), "qmodel": ("QMODEL",),
                "qremote": ("QREMOTE",), "process": ("PROCESS",), "namelist": ("NAMELIST",)}
#: ``channel`` takes the channels and the CHLAUTH records of the matching profiles
IMAGE_TYPES = ("all", "qmgr", "queue") + tuple(OBJECT_KINDS) + ("channel", "authinfo")

#: the model queue every queue manager has (created at start when missing)
DEFAULT_MODEL_QUEUE = "SYSTEM.DEFAULT.MODEL.QUEUE"

#: CHANNEL: a message channel agent's definition (sender or receiver)
CHANNEL_DEFAULTS = {
    "CHLTYPE": "SDR",
    "DESCR": "",
    "TRPTYPE": "TCP",
    "CONNAME": "",             # sender: 'host(port)'
    "XMITQ": "",               # sender: the transmission queue it reads
    "BATCHSZ": 50,
    "BATCHINT": 0,             # ms a batch waits for more messages
    "DISCINT": 6000,           # s idle before the sender disconnects
    "HBINT": 300,
    "SHORTRTY": 10,
    "SHORTTMR": 60,
    "LONGRTY": 999_999_999,
    "LONGTMR": 1200,
    "SSLCIPH": "",             # a CipherSpec: TLS (channels/tls.py); both ends the same
    "SSLPEER": "",             # e.g. 'CN=QMA,O=Example': the partner's certificate subject
    "MCAUSER": "",             # receiver: the user whose authority its puts have
    # server-connection channels (SVRCONN: a STOMP listener's connections)
    "MAXMSGL": 4 * 1024 * 1024,
    "MAXINST": 999_999_999,    # instances (connections) at once
    "MAXINSTC": 999_999_999,   # ... from one client address
    "SSLCAUTH": "REQUIRED",
}

#: LISTENER: where receiver channels are accepted
LISTENER_DEFAULTS = {
    "DESCR": "",
    "TRPTYPE": "TCP",
    "IPADDR": "127.0.0.1",
    "PORT": 1414,
    "CONTROL": "MANUAL",       # QMGR: started and stopped with the queue manager
}

#: TOPIC: attributes attached to a node of the topic tree; ASPARENT takes the
#: value of the closest administrative node above (pubsub/topics.py)
TOPIC_DEFAULTS = {
    "TOPICSTR": "",            # the node; set at DEFINE, never altered (as in MQ)
    "DESCR": "",
    "DURSUB": "ASPARENT",      # durable subscriptions allowed (YES/NO)
    "PUB": "ASPARENT",         # ENABLED/INHIBITED
    "SUB": "ASPARENT",         # ENABLED/INHIBITED
    "DEFPSIST": "ASPARENT",    # a publication's persistence when its publisher left it
    "DEFPRTY": "ASPARENT",     # 0..9
}
#: SYSTEM.BASE.TOPIC's: the root's, where every ASPARENT ends
BASE_TOPIC_ATTRS = {"TOPICSTR": "", "DESCR": "base topic of the topic tree",
                    "DURSUB": "YES", "PUB": "ENABLED", "SUB": "ENABLED", "DEFPSIST": "NO",
                    "DEFPRTY": 0}
TOPIC_CHOICES = {"DURSUB": ("YES", "NO", "ASPARENT"),
                 "PUB": ("ENABLED", "INHIBITED", "ASPARENT"),
                 "SUB": ("ENABLED", "INHIBITED", "ASPARENT"),
                 "DEFPSIST": ("YES", "NO", "ASPARENT")}

QMGR_DEFAULTS = {
    "DESCR": "",
    "DEADQ": DEAD_LETTER_QUEUE,
    "MAXMSGL": 4 * 1024 * 1024,
    "SSLKEYR": "",             # channels' key repository directory; blank: qmgrs/<QM>/ssl
    "CONNAUTH": DEFAULT_AUTHINFO,  # the AUTHINFO of connection authentication
    "CHLAUTH": "ENABLED",      # channel authentication records checked
}

#: the CipherSpecs SSLCIPH may name (channels/tls.py maps them onto TLS);
#: blank: no TLS
SSLCIPHS = ("", "ANY_TLS12_OR_HIGHER", "ANY_TLS13", "ECDHE_RSA_AES_128_GCM_SHA256",
            "ECDHE_RSA_AES_256_GCM_SHA384", "ECDHE_RSA_CHACHA20_POLY1305_SHA256")
#: SSLPEER's attribute names and the certificate subject's
PEER_KEYS = {"CN": "commonName", "O": "organizationName", "OU": "organizationalUnitName",
             "L": "localityName", "ST": "stateOrProvinceName", "C": "countryName",
             "DC": "domainComponent"}

_CHOICES = {
    "DEFPSIST": ("YES", "NO"),
    "HARDENBO": ("YES", "NO"),
    "INDXTYPE": ("NONE", "MSGID", "CORRELID"),
    "GET": ("ENABLED", "DISABLED"),
    "PUT": ("ENABLED", "DISABLED"),
    "USAGE": ("NORMAL", "XMITQ"),
    "CHLTYPE": ("SDR", "RCVR", "SVRCONN"),
    "TRPTYPE": ("TCP",),
    "CONTROL": ("QMGR", "MANUAL"),
    "SSLCIPH": SSLCIPHS,
    "TRIGGER": ("YES", "NO"),
    "TRIGTYPE": ("FIRST", "EVERY", "DEPTH", "NONE"),
    "TARGTYPE": ("QUEUE", "TOPIC"),
    "DEFTYPE": ("PREDEFINED", "PERMDYN", "TEMPDYN"),
    "SSLCAUTH": ("REQUIRED", "OPTIONAL"),
    "CHLAUTH": ("ENABLED", "DISABLED"),
    "AUTHTYPE": ("IDPWOS",),
    # ASQMGR: a CHLAUTH record's (as the queue manager's AUTHINFO says)
    "CHCKCLNT": ("NONE", "OPTIONAL", "REQUIRED", "REQDADM", "ASQMGR"),
    "CHCKLOCL": ("NONE", "OPTIONAL", "REQUIRED", "REQDADM"),
    "ADOPTCTX": ("YES", "NO"),
}
_RANGES = {
    "DEFPRTY": (0, 9),
    "MAXDEPTH": (0, 999_999_999),
    "MAXMSGL": (0, 100 * 1024 * 1024),
    "BOTHRESH": (0, 999_999_999),
    "BATCHSZ": (1, 9999),
    "BATCHINT": (0, 999_999_999),
    "DISCINT": (0, 999_999),
    "HBINT": (0, 999_999),
    "SHORTRTY": (0, 999_999_999),
    "SHORTTMR": (0, 999_999_999),
    "LONGRTY": (0, 999_999_999),
    "LONGTMR": (0, 999_999_999),
    "PORT": (0, 65535),
    "TRIGDPTH": (1, 999_999_999),
    "TRIGMPRI": (0, 9),
    "MAXINST": (0, 999_999_999),
    "MAXINSTC": (0, 999_999_999),
    "FAILDLAY": (0, 60),
}
#: attributes naming a queue, queue manager, process or authentication information object
_NAMES = ("BOQNAME", "DEADQ", "RNAME", "RQMNAME", "XMITQ", "TARGET", "INITQ", "PROCESS",
          "CONNAUTH")
CONNAME_RE = re.compile(r"^([A-Za-z0-9.\-:]+)\((\d{1,5})\)$")


def topic_key(name: str) -> str:
    return f"TOPIC:{name}"


def object_node(topicstr: str) -> str:
    """The node a TOPIC object's TOPICSTR names: the string, less one trailing
    '/'. MQ administrators write TOPICSTR('dev/') for the topics under dev/
    (MQ's own developer configuration does); harbormq takes it as the node
    'dev', whose attributes and authorities those topics resolve to."""
    return topicstr[:-1] if len(topicstr) > 1 and topicstr.endswith("/") else topicstr


# -- client-connection security: SVRCONN channels, AUTHINFO, CHLAUTH records ---------
# (their checks are harbormq.security's: security/svrconn.py, security/chlauth.py)


#: AUTHINFO AUTHTYPE(IDPWOS): user ids and passwords (harbormq's users)
AUTHINFO_DEFAULTS = {
    "AUTHTYPE": "IDPWOS",
    "DESCR": "",
    "CHCKCLNT": "OPTIONAL",    # client connections: NONE, OPTIONAL, REQUIRED, REQDADM
    "CHCKLOCL": "OPTIONAL",    # local bindings: accepted, no effect (HMQ8890W)
    "ADOPTCTX": "YES",         # the authenticated user is the connection's context
    "FAILDLAY": 1,             # accepted, no effect (HMQ8890W)
}

#: one channel authentication record (SET CHLAUTH); kept in the catalog as
#: ``CHLAUTH:<rule id>``, the id derived from what the record matches on
CHLAUTH_DEFAULTS = {
    "CHLPROF": "",             # the channel profile: a name or a generic name
    "TYPE": "",                # ADDRESSMAP USERMAP SSLPEERMAP BLOCKUSER BLOCKADDR
    "ADDRESS": "",
    "CLNTUSER": "",
    "SSLPEER": "",
    "USERLIST": "",            # BLOCKUSER: names, comma-separated
    "ADDRLIST": "",            # BLOCKADDR: address patterns, comma-separated
    "USERSRC": "",             # MAP NOACCESS CHANNEL
    "MCAUSER": "",
    "CHCKCLNT": "ASQMGR",      # ASQMGR REQUIRED REQDADM
    "WARN": "NO",
    "DESCR": "",
}


def authinfo_key(name: str) -> str:
    return f"AUTHINFO:{name}"


def chlauth_key(name: str) -> str:
    return f"CHLAUTH:{name}"


def channel_key(name: str) -> str:
    return f"CHANNEL:{name}"


def listener_key(name: str) -> str:
    return f"LISTENER:{name}"


def process_key(name: str) -> str:
    return f"PROCESS:{name}"


def namelist_key(name: str) -> str:
    return f"NAMELIST:{name}"


def parse_conname(conname: str) -> tuple[str, int]:
    """CONNAME('host(port)') -> (host, port)."""
    m = CONNAME_RE.match(conname or "")
    if m is None or not 0 < int(m.group(2)) < 65536:
        raise InvalidAttribute(f"CONNAME({conname}) is not valid: use 'host(port)', e.g. "
                               "'127.0.0.1(1414)'")
    return m.group(1), int(m.group(2))


def check_name(name: str, what: str = "queue") -> str:
    """MQ's rules for object and queue manager names: 1 to 48 characters from
    A-Z a-z 0-9 . _ / %, and (ours) '-' but not first, and never "." or "..",
    which read as paths."""
    if not isinstance(name, str) or not NAME_RE.match(name) or name in (".", ".."):
        raise InvalidAttribute(f"{what} name {name!r} is not valid: use 1 to 48 characters "
                               "from A-Z a-z 0-9 . _ / % - (not '-' first), not '.' or '..' "
                               "alone")
    return name


def _known_key(raw_key, defaults: dict, what: str) -> str:
    key = str(raw_key).upper()
    if key not in defaults:
        raise InvalidAttribute(f"{what} has no attribute {raw_key!r}; known: "
                               f"{', '.join(sorted(defaults))}")
    return key


def validate(attrs: dict, defaults: dict, what: str) -> dict:
    """Normalise attribute names and values; raise naming the bad one."""
    if defaults is TOPIC_DEFAULTS:
        return _validate_topic(attrs, what)
    out = {}
    for raw_key, value in attrs.items():
        key = _known_key(raw_key, defaults, what)
        if key in _CHOICES:
            v = str(value).upper() if not isinstance(value, bool) else \
                ("YES" if value else "NO") if key == "DEFPSIST" else \
                ("ENABLED" if value else "DISABLED")
            if v not in _CHOICES[key]:
                raise InvalidAttribute(f"{key}({value}) is not valid: choose one of "
                                       f"{', '.join(c or '(blank)' for c in _CHOICES[key])}")
            out[key] = v
        elif key in _RANGES:
            try:
                v = int(value)
            except (TypeError, ValueError):
                raise InvalidAttribute(f"{key}({value}) is not a number") from None
            lo, hi = _RANGES[key]
            if not lo <= v <= hi:
                raise InvalidAttribute(f"{key}({value}) is out of range {lo}..{hi}")
            out[key] = v
        elif key in _NAMES:
            out[key] = check_name(str(value), key) if value else ""
        elif key == "NAMES":
            items = value if isinstance(value, (list, tuple)) else \
                [v.strip() for v in str(value).split(",") if v.strip()]
            out[key] = [check_name(str(v), "NAMES item") for v in items]
        elif key == "CONNAME":
            out[key] = str(value)
            if value:
                parse_conname(out[key])
        elif key == "SSLPEER":
            out[key] = str(value)
            parse_sslpeer(out[key])
        elif key == "SSLKEYR":
            out[key] = str(value)
            if value and not out[key].startswith("/"):
                raise InvalidAttribute(f"SSLKEYR({value}): give the key repository as an "
                                       "absolute directory")
        else:
            out[key] = str(value)
    return out


def _validate_topic(attrs: dict, what: str) -> dict:
    """A TOPIC's attributes: each may be ASPARENT (DEFPRTY too, else 0..9)."""
    out = {}
    for raw_key, value in attrs.items():
        key = _known_key(raw_key, TOPIC_DEFAULTS, what)
        v = str(value)
        if key in TOPIC_CHOICES:
            v = v.upper()
            if v not in TOPIC_CHOICES[key]:
                raise InvalidAttribute(f"{key}({value}) is not valid: choose one of "
                                       f"{', '.join(TOPIC_CHOICES[key])}")
        elif key == "DEFPRTY" and v.upper() != "ASPARENT":
            if not v.isdigit() or not 0 <= int(v) <= 9:
                raise InvalidAttribute(f"DEFPRTY({value}) is not valid: 0..9 or ASPARENT")
            out[key] = int(v)
            continue
        elif key == "DEFPRTY":
            v = "ASPARENT"
        out[key] = v
    return out


def parse_sslpeer(value: str) -> list[tuple[str, str]]:
    """SSLPEER('CN=QMA,O=Example') as [("commonName", "QMA"), ...];
    InvalidAttribute naming the part that is not ``KEY=value`` with a known key."""
    out = []
    for part in filter(None, (x.strip() for x in str(value).split(","))):
        key, eq, val = part.partition("=")
        key = key.strip().upper()
        if not eq or key not in PEER_KEYS or not val.strip():
            raise InvalidAttribute(f"SSLPEER({value}): {part!r} is not KEY=value with KEY "
                                   f"one of {', '.join(PEER_KEYS)}")
        out.append((PEER_KEYS[key], val.strip()))
    return out


class SecurityCatalog:
    """The definitions client-connection security reads (the channels, the
    AUTHINFO objects, the CHLAUTH records, the queue manager's CONNAUTH and
    CHLAUTH), read from ``holder.objects`` (the core's catalog, looked up at
    each call as restore may replace it): what ``security.svrconn`` declares
    as ``CatalogView``."""

    def __init__(self, holder):
        self.holder = holder

    @property
    def objects(self) -> Mapping[str, dict]:
        return self.holder.objects

    def qmgr_attrs(self) -> dict:
        qmgr = self.objects.get(QMGR_OBJECT)
        return {**QMGR_DEFAULTS, **(qmgr["attrs"] if qmgr else {})}

    def _attrs(self, key: str, objtype: str) -> dict | None:
        d = self.objects.get(key)
        return d["attrs"] if d is not None and d["type"] == objtype else None

    def channel_attrs(self, name: str) -> dict | None:
        return self._attrs(channel_key(name), "CHANNEL")

    def authinfo_attrs(self, name: str) -> dict | None:
        return self._attrs(authinfo_key(name), "AUTHINFO")

    def chlauth_records(self) -> list[dict]:
        return [d["attrs"] for d in list(self.objects.values()) if d["type"] == "CHLAUTH"]
