"""The default objects of client-connection security, made when a queue
manager is created and put back at a start where they are missing (as MQ
recreates its SYSTEM.DEF objects): the channel ``SYSTEM.DEF.SVRCONN``, the
AUTHINFO ``SYSTEM.DEFAULT.AUTHINFO.IDPWOS`` that CONNAUTH names, and the
default CHLAUTH records for loopback addresses (an anonymous client there
acts as its OS user: the rule harbormq always had, now a record an
administrator sees with DISPLAY CHLAUTH and may remove).

The records are made once: at creation, or at the first start of a queue
manager made before them (its queue manager object has no CHLAUTH
attribute yet). A record the administrator removed stays removed.

Not here: what the objects mean when a client connects
(``security/svrconn.py``).
"""

from __future__ import annotations

from ..core.engine import QueueManagerCore
from ..core.objects import (
    DEFAULT_AUTHINFO,
    DEFAULT_SVRCONN,
    QMGR_OBJECT,
    authinfo_key,
    channel_key,
    chlauth_key,
)
from ..security import chlauth

#: the default records: anonymous clients on loopback addresses act as their OS user
LOOPBACK_RULES = [
    {"TYPE": "ADDRESSMAP", "ADDRESS": address, "USERSRC": "CHANNEL",
     "DESCR": "Default rule: an anonymous client on loopback acts as its OS user"}
    for address in ("127.*", "::1")
]


async def ensure_client_defaults(core: QueueManagerCore, *, created: bool = False) -> list[str]:
    """Define what is missing; returns what was defined (for the operator log)."""
    made = []
    if channel_key(DEFAULT_SVRCONN) not in core.objects:
        await core.define_object("CHANNEL", DEFAULT_SVRCONN, {
            "CHLTYPE": "SVRCONN", "DESCR": "default server-connection channel (STOMP)"})
        made.append(f"CHANNEL({DEFAULT_SVRCONN})")
    if authinfo_key(DEFAULT_AUTHINFO) not in core.objects:
        await core.define_object("AUTHINFO", DEFAULT_AUTHINFO, {
            "AUTHTYPE": "IDPWOS", "CHCKCLNT": "OPTIONAL",
            "DESCR": "default connection authentication: user ids and passwords"})
        made.append(f"AUTHINFO({DEFAULT_AUTHINFO})")
    qmgr_attrs = core.objects[QMGR_OBJECT]["attrs"]
    if created or "CHLAUTH" not in qmgr_attrs:
        for given in LOOPBACK_RULES:
            attrs = chlauth.record_attrs("*", given)
            name = chlauth.record_name("*", attrs)
            if chlauth_key(name) not in core.objects:
                await core.define_object("CHLAUTH", name, attrs)
                made.append(f"CHLAUTH('*') TYPE(ADDRESSMAP) ADDRESS('{given['ADDRESS']}')")
        if "CHLAUTH" not in qmgr_attrs:
            await core.alter_qmgr({"CHLAUTH": "ENABLED",
                                   "CONNAUTH": qmgr_attrs.get("CONNAUTH") or DEFAULT_AUTHINFO})
    if made:
        core.oplog.emit("HMQ8891I", "client-connection defaults defined: " + ", ".join(made))
    return made
