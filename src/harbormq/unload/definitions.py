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

The script holds, in order: every process and namelist, local queue, remote
queue, listener, channel, AUTHINFO, alias and model queue and topic as
DEFINE ... REPLACE (system queues too: REPLACE makes them equal; temporary
dynamic queues not, as a restart deletes them; a permanent dynamic queue as
a local queue); the durable subscriptions as DEFINE SUB, when the caller
gives ``subscription`` (publish/subscribe's reading of a message of its
status queue, whose committed messages ``queue_messages`` reads the same
way, without the queue manager); ALTER QMGR (after the queues: its DEADQ
names one); every channel authentication record as SET CHLAUTH ...
ACTION(REPLACE); every authority record as SET AUTHREC. Names and strings are
quoted (an unquoted MQSC name is folded to upper case).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..config import QMConfig
from ..core.objects import (
    AUTHINFO_DEFAULTS,
    CHANNEL_DEFAULTS,
    DURABLE_SUBSCRIBER_QUEUE,
    LISTENER_DEFAULTS,
    MANAGED_QUEUE_PREFIX,
    NAMELIST_DEFAULTS,
    PROCESS_DEFAULTS,
    QALIAS_DEFAULTS,
    QLOCAL_DEFAULTS,
    QMGR_DEFAULTS,
    QMGR_OBJECT,
    QMODEL_DEFAULTS,
    QREMOTE_DEFAULTS,
    TOPIC_DEFAULTS,
)
from ..errors import HarbormqError, LogMissing
from ..log.manager import RecoveryLog
from ..log.records import LogRecord, Message, RecordType, decode_json
from ..log.replay import CommitRule, PendingOp
from ..security import AuthorityStore
from ..store.stores import CatalogStore, QueueStore

#: the order definitions come in (a channel's transmission queue before it; the
#: processes and namelists that queues name first)
_ORDER = {"PROCESS": -2, "NAMELIST": -1, "QLOCAL": 0, "QREMOTE": 1, "LISTENER": 2,
          "CHANNEL": 3, "AUTHINFO": 4, "QALIAS": 5, "QMODEL": 6, "TOPIC": 7}
#: the attributes written per type (a local queue's DEFTYPE is its model's doing)
_DEFAULTS = {"QLOCAL": {k: v for k, v in QLOCAL_DEFAULTS.items() if k != "DEFTYPE"},
             "QREMOTE": QREMOTE_DEFAULTS, "LISTENER": LISTENER_DEFAULTS,
             "CHANNEL": CHANNEL_DEFAULTS, "AUTHINFO": AUTHINFO_DEFAULTS,
             "QALIAS": QALIAS_DEFAULTS, "QMODEL": QMODEL_DEFAULTS,
             "PROCESS": PROCESS_DEFAULTS, "NAMELIST": NAMELIST_DEFAULTS,
             "TOPIC": TOPIC_DEFAULTS}
#: a CHLAUTH record's keywords in SET CHLAUTH (the lists quoted item by item)
_CHLAUTH_KEYWORDS = ("TYPE", "ADDRESS", "CLNTUSER", "SSLPEER", "USERLIST", "ADDRLIST",
                     "USERSRC", "MCAUSER", "CHCKCLNT", "WARN", "DESCR")


class DumpError(HarbormqError):
    msgid = "HMQ8620E"


def _temporary(d: dict) -> bool:
    """A temporary dynamic queue: a restart deletes it, a script does not make it."""
    return d["type"] == "QLOCAL" and d["attrs"].get("DEFTYPE") == "TEMPDYN"


def quote(value) -> str:
    """An MQSC value: numbers as they are, everything else quoted."""
    if isinstance(value, bool):
        return "YES" if value else "NO"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (list, tuple)):      # NAMES(...)
        return ", ".join(quote(v) for v in value)
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


class _QueueContents:
    """The commit rule's effects on one queue, kept as a dict of messages."""

    def __init__(self, name: str, object_id: int, from_lsn: int, msgs: dict[bytes, Message]):
        self.name, self.object_id, self.from_lsn, self.msgs = name, object_id, from_lsn, msgs

    def target(self, rec: LogRecord):
        return self if rec.object_name == self.name and rec.object_id == self.object_id \
            else None

    def due(self, target, lsn: int) -> bool:
        return lsn >= self.from_lsn

    def seen_put(self, target, msg: Message) -> None:
        pass

    def opened(self, op: PendingOp, rec: LogRecord) -> bool:
        return True

    def closed(self, op: PendingOp, applied: bool) -> None:
        pass

    def put(self, target, msg: Message, lsn: int) -> None:
        self.msgs[msg.key] = msg

    def delete(self, target, key: bytes, lsn: int, op: PendingOp | None) -> None:
        self.msgs.pop(key, None)

    def backed_out(self, op: PendingOp, backout_count: int, lsn: int) -> None:
        pass


def queue_messages(config: QMConfig, objects: dict[str, dict], name: str,
                   at_ns: int | None = None) -> list[Message]:
    """The committed messages of local queue ``name`` (as of ``at_ns``), read
    without the queue manager: its store, then the log after the store's
    recovery LSN through the commit rule (at a past time: the log alone,
    from the queue's creation)."""
    d = objects.get(name)
    if d is None or d["type"] != "QLOCAL":
        return []
    msgs: dict[bytes, Message] = {}
    from_lsn = d.get("create_lsn", 0)
    if at_ns is None:
        store = QueueStore(config.queue_dir(name))
        try:
            from_lsn = store.recovery_lsn
            for key in store.iter_keys():
                msg = store.get(key)
                if msg is not None:
                    msgs[key] = msg
        finally:
            store.close()
    rule = CommitRule(_QueueContents(name, d["object_id"], from_lsn, msgs))
    log = RecoveryLog(config.log_dir, config.name, config.log_dual_dir)
    log.open(repair=False)
    try:
        for rec in log.read_from(from_lsn):
            if at_ns is not None and rec.timestamp_ns > at_ns:
                break
            rule.feed(rec)
    except LogMissing as exc:
        raise DumpError(f"queue {name} cannot be read up to date: {exc.message}") from None
    return [msgs[k] for k in sorted(msgs)]


def dump_config(config: QMConfig, at_ns: int | None = None, *,
                subscription: Callable[[bytes], tuple[str, dict]] | None = None) -> str:
    """``subscription``: a status message of SYSTEM.DURABLE.SUBSCRIBER.QUEUE as
    the name and attributes of its DEFINE SUB (``pubsub/status.py``)."""
    objects = definitions(config, at_ns)
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime((at_ns or time.time_ns()) / 1e9))
    lines = [f"* harbormq dump-config of queue manager {config.name}, definitions as of {when}",
             "* replay with: harbormq sc QM < this file"]
    # a subscription's managed queue comes with its DEFINE SUB, not on its own
    for d in sorted((d for d in objects.values() if d["type"] in _ORDER
                     and not _temporary(d) and not (
                         d["type"] == "QLOCAL" and d["name"].startswith(MANAGED_QUEUE_PREFIX))),
                    key=lambda d: (_ORDER[d["type"]], d["name"])):
        known = _DEFAULTS[d["type"]]
        attrs = " ".join(f"{k}({quote(v)})" for k, v in d["attrs"].items() if k in known)
        lines.append(f"DEFINE {d['type']}({quote(d['name'])}) {attrs} REPLACE")
    if subscription is not None:
        for m in queue_messages(config, objects, DURABLE_SUBSCRIBER_QUEUE, at_ns):
            name, attrs = subscription(m.body)
            lines.append(f"DEFINE SUB({quote(name)}) " + " ".join(
                f"{k}({quote(v)})" for k, v in attrs.items()) + " REPLACE")
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
