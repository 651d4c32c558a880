"""``harbormq dump-config`` (MQ's dmpmqcfg, CSQUTIL MAKEDEF): every definition
of a queue manager as an MQSC script that ``harbormq sc`` replays into an
empty queue manager to give the same definitions.

The definitions are read without the queue manager's help, so it may be
running or stopped: the catalog store, brought up to date with the
definition records the log holds after the catalog's recovery LSN (a running
queue manager flushes its catalog only now and then). ``at_ns`` gives the
definitions as they were at a past time, from the log alone: the log must
then reach back to the queue manager's creation (a linear log kept whole, or
its extents recalled from the archive).

The script holds, in order: every local queue, remote queue, listener,
channel and AUTHINFO as DEFINE ... REPLACE (system queues too: REPLACE makes
them equal); ALTER QMGR (after the queues: its DEADQ names one); every
channel authentication record as SET CHLAUTH ... ACTION(REPLACE); every
authority record as SET AUTHREC. Names and strings are
quoted (an unquoted MQSC name is folded to upper case).
"""

from __future__ import annotations

import time

from ..config import QMConfig
from ..core.objects import (
    AUTHINFO_DEFAULTS,
    CHANNEL_DEFAULTS,
    LISTENER_DEFAULTS,
    QLOCAL_DEFAULTS,
    QMGR_DEFAULTS,
    QMGR_OBJECT,
    QREMOTE_DEFAULTS,
)
from ..errors import HarbormqError, LogMissing
from ..log.manager import RecoveryLog
from ..log.records import RecordType, decode_json
from ..security import AuthorityStore
from ..store.stores import CatalogStore

#: the order definitions come in (a channel's transmission queue before it)
_ORDER = {"QLOCAL": 0, "QREMOTE": 1, "LISTENER": 2, "CHANNEL": 3, "AUTHINFO": 4}
_DEFAULTS = {"QLOCAL": QLOCAL_DEFAULTS, "QREMOTE": QREMOTE_DEFAULTS,
             "LISTENER": LISTENER_DEFAULTS, "CHANNEL": CHANNEL_DEFAULTS,
             "AUTHINFO": AUTHINFO_DEFAULTS}
#: a CHLAUTH record's keywords in SET CHLAUTH (the lists quoted item by item)
_CHLAUTH_KEYWORDS = ("TYPE", "ADDRESS", "CLNTUSER", "SSLPEER", "USERLIST", "ADDRLIST",
                     "USERSRC", "MCAUSER", "CHCKCLNT", "WARN", "DESCR")


class DumpError(HarbormqError):
    msgid = "HMQ8620E"


def quote(value) -> str:
    """An MQSC value: numbers as they are, everything else quoted."""
    if isinstance(value, bool):
        return "YES" if value else "NO"
    if isinstance(value, int):
        return str(value)
    return "'" + str(value).replace("'", "''") + "'"


def set_chlauth(attrs: dict) -> str:
    """A CHLAUTH record as the SET CHLAUTH that makes it (ACTION(REPLACE))."""
    words = [f"SET CHLAUTH({quote(attrs['CHLPROF'])})"]
    for key in _CHLAUTH_KEYWORDS:
        value = attrs.get(key, "")
        if value == "" or (key == "WARN" and value == "NO") or \
                (key == "CHCKCLNT" and value == "ASQMGR"):
            continue
        if key in ("USERLIST", "ADDRLIST"):
            words.append(f"{key}(" + ",".join(quote(v) for v in str(value).split(",")) + ")")
        elif key in ("TYPE", "USERSRC", "CHCKCLNT", "WARN"):
            words.append(f"{key}({value})")
        else:
            words.append(f"{key}({quote(value)})")
    return " ".join(words + ["ACTION(REPLACE)"])


def definitions(config: QMConfig, at_ns: int | None = None) -> dict[str, dict]:
    """The queue manager's definitions now (or at ``at_ns``)."""
    log = RecoveryLog(config.log_dir, config.name, config.log_dual_dir)
    log.open(repair=False)
    if at_ns is None:
        catalog = CatalogStore(config.catalog_dir)
        try:
            objects, from_lsn = catalog.load(), catalog.recovery_lsn
        finally:
            catalog.close()
        # from where restart applies the log to the catalog: its recovery LSN, or
        # restart's starting point when that is above it (a catalog of the old log,
        # whole at its clean stop, under a new log 'harbormq reset-log' began above it)
        st, chain = log.state, log.chain()
        restart_from = chain[0].first_lsn if chain and not st.checkpoint_lsn else st.restart_lsn
        return _apply_records(objects, log, max(from_lsn, restart_from), None)
    chain = log.chain()
    if not chain or chain[0].first_lsn != 0 or not all(log.extent_present(e) for e in chain):
        raise DumpError(f"the definitions of {config.name} at a past time come from the log "
                        "since the queue manager was created, and it is no longer all on disk",
                        hint="recall the archived extents into the log directory first, or "
                             "dump the definitions as they are now")
    return _apply_records({}, log, 0, at_ns)


def _apply_records(objects: dict, log: RecoveryLog, from_lsn: int,
                   at_ns: int | None) -> dict:
    T = RecordType
    try:
        for rec in log.read_from(from_lsn):
            if at_ns is not None and rec.timestamp_ns > at_ns:
                break
            if rec.type == T.OBJECT_CREATE:
                objects[rec.object_name] = decode_json(rec.payload)
            elif rec.type == T.OBJECT_ALTER:
                cur = objects.get(rec.object_name)
                if cur is not None and cur["object_id"] == rec.object_id:
                    d = decode_json(rec.payload)
                    d.pop("clear", None)
                    objects[rec.object_name] = d
            elif rec.type == T.OBJECT_DELETE:
                cur = objects.get(rec.object_name)
                if cur is not None and cur["object_id"] == rec.object_id:
                    del objects[rec.object_name]
    except LogMissing as exc:
        raise DumpError(f"the definitions cannot be read up to date: {exc.message}",
                        hint="restore the missing extent (the archive recalls it at the "
                             "next start)") from None
    return objects


def dump_config(config: QMConfig, at_ns: int | None = None) -> str:
    objects = definitions(config, at_ns)
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime((at_ns or time.time_ns()) / 1e9))
    lines = [f"* harbormq dump-config of queue manager {config.name}, definitions as of {when}",
             "* replay with: harbormq sc QM < this file"]
    for d in sorted((d for d in objects.values() if d["type"] in _ORDER),
                    key=lambda d: (_ORDER[d["type"]], d["name"])):
        known = _DEFAULTS[d["type"]]
        attrs = " ".join(f"{k}({quote(v)})" for k, v in d["attrs"].items() if k in known)
        lines.append(f"DEFINE {d['type']}({quote(d['name'])}) {attrs} REPLACE")
    # after the queues: DEADQ must name a queue that is already defined
    qmgr = objects.get(QMGR_OBJECT)
    if qmgr is not None:
        attrs = {k: v for k, v in qmgr["attrs"].items() if k in QMGR_DEFAULTS}
        lines.append("ALTER QMGR " + " ".join(f"{k}({quote(v)})" for k, v in sorted(
            attrs.items())))
    # channel authentication records, after the channels and the queue manager
    for d in sorted((d for d in objects.values() if d["type"] == "CHLAUTH"),
                    key=lambda d: (d["attrs"]["CHLPROF"], d["attrs"]["TYPE"], d["name"])):
        lines.append(set_chlauth(d["attrs"]))
    if config.authrecs_path.exists():
        for r in AuthorityStore(config.authrecs_path, owner=None).records():
            who = "PRINCIPAL" if r.entity_type == "principal" else "GROUP"
            lines.append(f"SET AUTHREC PROFILE({quote(r.profile)}) OBJTYPE({r.objtype}) "
                         f"{who}({quote(r.entity)}) AUTHADD({','.join(r.authlist)})")
    return "\n".join(lines) + "\n"
