"""Running MQSC commands against the queue manager core.

Everything here runs on the queue manager's event loop (the server's admin
socket handler calls :func:`handle_admin_mqsc`, tests call :func:`run_mqsc`
through ``QueueManager._call``). Commands run one at a time in script order;
the first failing one (a syntax error or a command the queue manager refuses)
stops the script unless ``continue_on_error``.

The person at the admin socket is the OS user owning the queue manager (the
socket is 0600), so MQSC commands need no authority check: that user holds
every authority (see ``harbormq.security``).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable

from ..core.engine import ChannelCommands, QueueManagerCore
from ..core.objects import DEFAULT_LOCAL_QUEUE, QLOCAL_DEFAULTS, QMGR_DEFAULTS
from ..core.queue_figures import oldest_put_ns
from ..errors import AdminRequestError, HarbormqError, ObjectExists, UnknownObject
from ..log.records import PAGE_SIZE, extent_file_name
from ..qmgr.log_offline import deletion_plan
from ..recovery.need import log_need_facts
from . import mqsc
from .cfstruct_commands import CFStructCommands
from .groupdisp_commands import GroupDispCommands
from .mqsc import Command, MqscSyntaxError, mq_date, mq_time
from .object_commands import ObjectCommands
from .pubsub_commands import PubSubCommands
from .qsg_commands import QsgCommands
from .security_commands import SecurityCommands

#: at most this many message keys are walked to find the oldest message (MSGAGE)
MSGAGE_SCAN_LIMIT = 100_000


def _now_ns() -> int:
    """Wall-clock now (a function, so tests can move time forward)."""
    return time.time_ns()


class MqscError(HarbormqError):
    msgid = "HMQ8400E"


# -- value formatting --------------------------------------------------------------------

def megabytes(nbytes: int) -> str:
    """Sizes in MB as MQ shows them; below 10 MB with two decimals, so the small
    extents of a test queue manager do not all read 0."""
    mb = nbytes / (1 << 20)
    if mb >= 10 or mb == int(mb):
        return str(round(mb))
    return f"{mb:.2f}".rstrip("0").rstrip(".")


_select = mqsc.select_attrs


# -- the executor ------------------------------------------------------------------------

class Executor(PubSubCommands, ObjectCommands, SecurityCommands, CFStructCommands,
               QsgCommands, GroupDispCommands):
    def __init__(self, core: QueueManagerCore, security, qm_info: dict | None = None):
        self.core = core
        self.security = security
        self.qm_info = qm_info or {}
        self.handlers: dict[tuple[str, str], Callable] = {
            ("DEFINE", "QLOCAL"): self.define_qlocal,
            ("ALTER", "QLOCAL"): self.alter_qlocal,
            ("DELETE", "QLOCAL"): self.delete_qlocal,
            ("CLEAR", "QLOCAL"): self.clear_qlocal,
            ("DISPLAY", "QLOCAL"): self.display_queue,
            ("DISPLAY", "QUEUE"): self.display_queue,
            ("DISPLAY", "QSTATUS"): self.display_qstatus,
            ("DISPLAY", "CONN"): self.display_conn,
            ("STOP", "CONN"): self.stop_conn,
            ("DISPLAY", "QMSTATUS"): self.display_qmstatus,
            ("DISPLAY", "QMGR"): self.display_qmgr,
            ("ALTER", "QMGR"): self.alter_qmgr,
            ("PING", "QMGR"): self.ping_qmgr,
            ("SET", "AUTHREC"): self.set_authrec,
            ("DELETE", "AUTHREC"): self.delete_authrec,
            ("DISPLAY", "AUTHREC"): self.display_authrec,
            ("DISPLAY", "LOG"): self.display_log,
            ("SET", "LOG"): self.set_log,
            ("ARCHIVE", "LOG"): self.archive_log,
            ("DISPLAY", "UOW"): self.display_uow,
            ("RESOLVE", "UOW"): self.resolve_uow,
            ("DEFINE", "QREMOTE"): self.define_object,
            ("ALTER", "QREMOTE"): self.alter_object,
            ("DELETE", "QREMOTE"): self.delete_object,
            ("DISPLAY", "QREMOTE"): self.display_objects,
            ("DEFINE", "CHANNEL"): self.define_object,
            ("ALTER", "CHANNEL"): self.alter_object,
            ("DELETE", "CHANNEL"): self.delete_object,
            ("DISPLAY", "CHANNEL"): self.display_objects,
            ("DEFINE", "LISTENER"): self.define_object,
            ("ALTER", "LISTENER"): self.alter_object,
            ("DELETE", "LISTENER"): self.delete_object,
            ("DISPLAY", "LISTENER"): self.display_objects,
            ("START", "CHANNEL"): self.channel_action,
            ("STOP", "CHANNEL"): self.channel_action,
            ("RESET", "CHANNEL"): self.channel_action,
            ("RESOLVE", "CHANNEL"): self.channel_action,
            ("START", "LISTENER"): self.channel_action,
            ("STOP", "LISTENER"): self.channel_action,
            ("DISPLAY", "CHSTATUS"): self.display_chstatus,
        }
        self.handlers.update(self.pubsub_handlers())
        self.handlers.update(self.object_handlers())     # QALIAS, QMODEL, PROCESS, NAMELIST
        self.handlers.update(self.security_handlers())
        self.handlers.update(self.cfstruct_handlers())   # BACKUP/RECOVER/RESET CFSTRUCT
        self.handlers.update(self.qsg_handlers())   # it wraps QLOCAL's and QMSTATUS's
        self.handlers.update(self.groupdisp_handlers())   # last: QSGDISP wraps them all

    async def execute(self, cmd: Command) -> list[str]:
        """Run one command; returns its output blocks; raises HarbormqError when
        the command fails."""
        result = self.handlers[(cmd.verb, cmd.objtype)](cmd)
        if inspect.isawaitable(result):
            result = await result
        return result

    # -- queues ------------------------------------------------------------------------

    async def define_qlocal(self, cmd: Command) -> list[str]:
        core = self.core
        attrs = {k: v for k, v in mqsc.given_attrs(cmd).items() if k != "LIKE"}
        like = cmd.attrs.get("LIKE")
        exists = cmd.name in core.queues
        if exists and "REPLACE" not in cmd.flags:
            raise ObjectExists(f"queue {cmd.name} already exists (MQRC 2100); give REPLACE to "
                               "replace its definition", queue=cmd.name)
        if exists:
            # REPLACE: the new definition is complete, as DEFINE makes it: what is
            # not given comes from LIKE or the default queue, not the old definition
            base_name = like or DEFAULT_LOCAL_QUEUE
            base = core.objects.get(base_name)
            if base is None:
                raise UnknownObject(f"LIKE({base_name}): queue {base_name} is not defined",
                                    queue=base_name)
            full = dict(base["attrs"] if base else QLOCAL_DEFAULTS)
            if base_name == DEFAULT_LOCAL_QUEUE:
                full["DESCR"] = ""
            full.update(attrs)
            await core.alter_queue(cmd.name, full)
            return [mqsc.format_message("HMQ8006I", "harbormq queue created (REPLACE: the "
                                        "existing definition was replaced).")]
        await core.define_queue(cmd.name, attrs, like=like)
        return [mqsc.format_message("HMQ8006I", "harbormq queue created.")]

    async def alter_qlocal(self, cmd: Command) -> list[str]:
        await self.core.alter_queue(cmd.name, mqsc.given_attrs(cmd))
        return [mqsc.format_message("HMQ8008I", "harbormq queue changed.")]

    async def delete_qlocal(self, cmd: Command) -> list[str]:
        await self.core.delete_queue(cmd.name, purge="PURGE" in cmd.flags)
        return [mqsc.format_message("HMQ8007I", "harbormq queue deleted.")]

    async def clear_qlocal(self, cmd: Command) -> list[str]:
        count = await self.core.clear_queue(cmd.name)
        what = "1 message" if count == 1 else f"{count} messages"
        return [mqsc.format_message("HMQ8022I", f"harbormq queue cleared ({what} removed).")]

    def _queues(self, cmd: Command) -> list[str]:
        if "*" not in cmd.name:       # one queue: a look-up, not a walk of every queue
            names = [cmd.name] if cmd.name in self.core.queues else []
        else:
            names = sorted(n for n in self.core.queues if mqsc.generic_match(cmd.name, n))
        if not names:
            raise UnknownObject(f"harbormq object {cmd.name} not found", queue=cmd.name)
        return names

    def queue_attrs(self, name: str) -> dict:
        q = self.core.queues[name]
        ip, op = self.core.connections.procs(name)
        return {"QUEUE": name, "TYPE": "QLOCAL", **q.attrs, "CURDEPTH": q.curdepth,
                "IPPROCS": ip, "OPPROCS": op}

    def display_queue(self, cmd: Command) -> list[str]:
        qtype = cmd.attrs.get("TYPE", "QLOCAL")
        if qtype not in ("QLOCAL", "ALL", "*"):
            raise UnknownObject(f"harbormq object {cmd.name} of TYPE({qtype}) not found: "
                                "only local queues exist", queue=cmd.name)
        out = []
        for name in self._queues(cmd):
            values = self.queue_attrs(name)
            if not mqsc.where_matches(cmd.where, values):
                continue
            shown = _select(cmd, mqsc.DISPLAY_QUEUE_ATTRS, ("QUEUE", "TYPE"))
            out.append(mqsc.format_object("HMQ8409I", "Display Queue details.",
                                          [(a, values.get(a)) for a in shown]))
        return out

    def oldest_message_ns(self, q) -> int:
        """put time of the oldest message a get could take (0 if none), walking
        at most MSGAGE_SCAN_LIMIT keys (``core/queue_figures.py``)."""
        return oldest_put_ns(q, _now_ns(), MSGAGE_SCAN_LIMIT)

    def qstatus_queue(self, name: str) -> dict:
        q = self.core.queues[name]
        ip, op = self.core.connections.procs(name)
        oldest = self.oldest_message_ns(q)
        uncom = q.uncommitted_puts + len(q.locked)
        return {"QUEUE": name, "TYPE": "QUEUE", "CURDEPTH": q.curdepth, "IPPROCS": ip,
                "OPPROCS": op, "UNCOM": uncom if uncom else "NO",
                "MSGAGE": (_now_ns() - oldest) // 1_000_000_000 if oldest else "",
                "LPUTDATE": mq_date(q.last_put_ns), "LPUTTIME": mq_time(q.last_put_ns),
                "LGETDATE": mq_date(q.last_get_ns), "LGETTIME": mq_time(q.last_get_ns)}

    def display_qstatus(self, cmd: Command) -> list[str]:
        stype = cmd.attrs.get("TYPE", "QUEUE")
        if stype not in ("QUEUE", "HANDLE"):
            raise MqscError(f"TYPE({stype}) is not valid for DISPLAY QSTATUS: use QUEUE or "
                            "HANDLE")
        out = []
        for name in self._queues(cmd):
            if stype == "QUEUE":
                values = self.qstatus_queue(name)
                if not mqsc.where_matches(cmd.where, values):
                    continue
                shown = _select(cmd, mqsc.QSTATUS_QUEUE_ATTRS, ("QUEUE", "TYPE"),
                                ("CURDEPTH",))
                out.append(mqsc.format_object("HMQ8450I", "Display queue status details.",
                                              [(a, values.get(a)) for a in shown]))
                continue
            for conn, h in self.core.connections.handles_on(name):
                values = {"QUEUE": name, "TYPE": "HANDLE", "CONN": conn.conn_id,
                          "CONNAME": conn.peer, "USERID": conn.user, "APPLTAG": conn.app,
                          "APPLTYPE": conn.kind.upper(),
                          "INPUT": "SHARED" if h.input else "NO",
                          "OUTPUT": "YES" if h.output else "NO",
                          "BROWSE": "YES" if h.browse else "NO",
                          "HSTATE": "ACTIVE" if h.uses else "INACTIVE"}
                if not mqsc.where_matches(cmd.where, values):
                    continue
                shown = _select(cmd, mqsc.QSTATUS_HANDLE_ATTRS, ("QUEUE", "TYPE"),
                                mqsc.QSTATUS_HANDLE_ATTRS)
                out.append(mqsc.format_object("HMQ8450I", "Display queue status details.",
                                              [(a, values.get(a)) for a in shown]))
        if not out:
            out.append(mqsc.format_message("HMQ8420I", "Queue status not found."))
        return out

    # -- connections -------------------------------------------------------------------

    def _extent_name(self, lsn: int) -> str:
        e = self.core.log.extent_of(lsn) if lsn else None
        return extent_file_name(e.number) if e is not None else ""

    def conn_attrs(self, conn) -> dict:
        uow = conn.oldest_uow()
        values = {"CONN": conn.conn_id, "TYPE": "CONN", "CONNAME": conn.peer,
                  "USERID": conn.user, "APPLTAG": conn.app, "APPLTYPE": conn.kind.upper(),
                  "CHANNEL": conn.listener, "CONNSTDA": mq_date(conn.started_ns),
                  "CONNSTTI": mq_time(conn.started_ns)}
        if uow is None:
            values.update(UOWSTATE="NONE", UOWSTDA="", UOWSTTI="", UOWLOG="", UOWLOGDA="",
                          UOWLOGTI="", QMURID="", UOWID="")
        else:
            state = {"prepared": "PREPARED"}.get(uow.state, "ACTIVE")
            values.update(UOWSTATE=state, UOWSTDA=mq_date(uow.started_ns),
                          UOWSTTI=mq_time(uow.started_ns),
                          UOWLOG=self._extent_name(uow.first_lsn),
                          UOWLOGDA=mq_date(uow.first_log_ns), UOWLOGTI=mq_time(uow.first_log_ns),
                          QMURID=str(uow.begin) if uow.first_lsn else "", UOWID=uow.id)
        return values

    @staticmethod
    def handle_pairs(h) -> list[tuple[str, object]]:
        opts = (["MQOO_INPUT_SHARED"] if h.input else []) + \
            (["MQOO_OUTPUT"] if h.output else []) + (["MQOO_BROWSE"] if h.browse else [])
        return [("OBJNAME", h.queue), ("OBJTYPE", "QUEUE"), ("OPENOPTS", opts),
                ("HSTATE", "ACTIVE" if h.uses else "INACTIVE")]

    def display_conn(self, cmd: Command) -> list[str]:
        ctype = cmd.attrs.get("TYPE", "CONN")
        if ctype not in ("CONN", "HANDLE", "ALL", "*"):
            raise MqscError(f"TYPE({ctype}) is not valid for DISPLAY CONN: use CONN, HANDLE "
                            "or ALL")
        conns = sorted((c for c in self.core.connections
                        if mqsc.generic_match(cmd.name, c.conn_id)), key=lambda c: c.conn_id)
        if not conns and "*" not in cmd.name:
            raise MqscError(f"connection {cmd.name} not found", msgid="HMQ8147E")
        out = []
        for conn in conns:
            values = self.conn_attrs(conn)
            if not mqsc.where_matches(cmd.where, values):
                continue
            values["TYPE"] = "*" if ctype == "ALL" else ctype
            if ctype == "HANDLE":
                shown = ["CONN", "TYPE"]
            else:
                shown = _select(cmd, mqsc.CONN_ATTRS, ("CONN", "TYPE"))
            lines = [mqsc.format_object("HMQ8276I", "Display Connection details.",
                                        [(a, values.get(a)) for a in shown])]
            if ctype in ("HANDLE", "ALL", "*"):
                for (_q, _mode), h in sorted(conn.handles.items()):
                    lines.append("")
                    lines.extend(mqsc.format_pairs(self.handle_pairs(h)))
            out.append("\n".join(lines))
        if not out:
            out.append(mqsc.format_message("HMQ8276I", "No connections found."))
        return out

    async def stop_conn(self, cmd: Command) -> list[str]:
        conn = self.core.connections.get(cmd.name)
        if conn is None:
            raise MqscError(f"connection {cmd.name} not found", msgid="HMQ8147E")
        if conn.stop is None:
            raise MqscError(f"connection {conn.conn_id} ({conn.kind}) cannot be stopped: it "
                            "has no stop callback", msgid="HMQ8124E")
        result = conn.stop("stopped by STOP CONN (MQRC 2009 CONNECTION_BROKEN)")
        if inspect.isawaitable(result):
            await result
        return [mqsc.format_message("HMQ8123I", "harbormq connection stop request accepted.")]

    # -- the queue manager -------------------------------------------------------------

    def log_attrs(self) -> dict:
        """The log attributes of DISPLAY QMSTATUS. Which extents restart and
        media recovery need comes from the same facts as ``harbormq log need``."""
        core = self.core
        log = core.log
        st = log.state
        ext_bytes = st.pages * PAGE_SIZE
        linear = st.log_type == "linear"
        need = log_need_facts(log, core.last_checkpoint.get("media"))
        rec_n = sum(1 for e in need["extents"] if e["needed"] == "restart")
        media_n = sum(1 for e in need["extents"]
                      if e["end_lsn"] is None or e["end_lsn"] > st.media_lsn)
        values = {
            "LOGTYPE": st.log_type.upper(), "LOGPATH": str(log.dir),
            "LOGPRIM": st.primary, "LOGSEC": st.secondary, "LOGEXTSZ": ext_bytes // 1024,
            "CURRLOG": extent_file_name(st.active.number),
            "RECLOG": need["RECLOG"] or "", "RECSZ": megabytes(rec_n * ext_bytes),
            "LOGINUSE": round(100 * rec_n / st.primary),
            "REUSESZ": megabytes(sum(1 for e in st.extents if e.state == "free") * ext_bytes)
            if not linear else "0",
            "CURRLSN": log.end_lsn, "RECLSN": st.restart_lsn,
            # harbormq's own: the predicted restart time (s) at the measured replay rate
            "RECTIME": need["restart_estimate_s"],
            "MEDIALOG": "", "MEDIASZ": "", "MEDIALSN": "",
            # harbormq's own: bytes of log from the last checkpoint's BEGIN to its
            # END and the largest since the start; producers held for log space now
            "CKPTSPAN": core.checkpoint_span_last, "CKPTMAX": core.checkpoint_span_max,
            "LOGHELD": core.producers_held(),
        }
        if linear:
            values.update(MEDIALOG=need["MEDIALOG"] or "",
                          MEDIASZ=megabytes(media_n * ext_bytes), MEDIALSN=st.media_lsn)
        return values

    def display_qmstatus(self, cmd: Command) -> list[str]:
        core = self.core
        started = self.qm_info.get("started_ns", 0)
        values = {"QMNAME": core.name,
                  "STATUS": "QUIESCING" if core.stopping else "RUNNING",
                  "CONNS": len(core.connections), "STARTDA": mq_date(started),
                  "STARTTI": mq_time(started), "CHKPTLSN": core.log.state.checkpoint_lsn,
                  **self.log_attrs()}
        order = mqsc.QMSTATUS_ATTRS + mqsc.QMSTATUS_LOG_ATTRS
        if "LOG" in cmd.flags and "ALL" not in cmd.flags:
            cmd = Command(cmd.verb, cmd.objtype, cmd.name, cmd.attrs,
                          cmd.flags + list(mqsc.QMSTATUS_LOG_ATTRS), cmd.where)
        shown = _select(cmd, order, ("QMNAME",), order)
        if not mqsc.where_matches(cmd.where, values):
            return []
        return [mqsc.format_object("HMQ8705I", "Display Queue Manager Status Details.",
                                   [(a, values.get(a)) for a in shown])]

    def display_qmgr(self, cmd: Command) -> list[str]:
        core = self.core
        values = {"QMNAME": core.name, **QMGR_DEFAULTS, **core.qmgr_attrs}
        shown = _select(cmd, mqsc.DISPLAY_QMGR_ATTRS, ("QMNAME",), mqsc.DISPLAY_QMGR_ATTRS)
        return [mqsc.format_object("HMQ8408I", "Display Queue Manager details.",
                                   [(a, values.get(a)) for a in shown])]

    async def alter_qmgr(self, cmd: Command) -> list[str]:
        if cmd.attrs.get("DEADQ") and cmd.attrs["DEADQ"] not in self.core.queues:
            raise UnknownObject(f"DEADQ({cmd.attrs['DEADQ']}): queue is not defined",
                                queue=cmd.attrs["DEADQ"])
        await self.core.alter_qmgr(dict(cmd.attrs))
        return [mqsc.format_message("HMQ8005I", "harbormq queue manager changed.")]

    def ping_qmgr(self, cmd: Command) -> list[str]:
        self.core.check_running()
        return [mqsc.format_message("HMQ8415I", "Ping harbormq queue manager command "
                                    "complete.")]

    # -- units of work: DISPLAY UOW (dspmqtrn), RESOLVE UOW (rsvmqtrn) -------------------

    def display_uow(self, cmd: Command) -> list[str]:
        """The units of work in the log: UOW(*) all of them, UOW(id) one; WHERE
        (STATE EQ PREPARED) lists the in-doubt ones, as dspmqtrn does."""
        out = []
        for u in sorted(self.core.uows.values(), key=lambda u: u.id):
            if not u.first_lsn or not mqsc.generic_match(cmd.name, str(u.id)):
                continue
            ns = u.first_log_ns or u.started_ns
            values = {"UOWID": u.id, "STATE": "PREPARED" if u.in_doubt else u.state.upper(),
                      "OWNER": u.owner, "FIRSTLSN": u.begin, "LASTLSN": u.last_lsn,
                      "UOWLOGDA": mq_date(ns), "UOWLOGTI": mq_time(ns), "CHKPTS": u.checkpoints}
            if not mqsc.where_matches(cmd.where, values):
                continue
            shown = _select(cmd, mqsc.UOW_ATTRS, ("UOWID", "STATE"), mqsc.UOW_ATTRS)
            out.append(mqsc.format_object("HMQ8324I", "Display unit of work details.",
                                          [(a, values[a]) for a in shown]))
        if not out:
            if "*" not in cmd.name:
                raise MqscError(f"unit of work {cmd.name} is not in the log", msgid="HMQ8147E")
            out.append(mqsc.format_message("HMQ8324I", "No units of work found."))
        return out

    async def resolve_uow(self, cmd: Command) -> list[str]:
        """RESOLVE UOW(id) ACTION(COMMIT|BACKOUT): finish an in-doubt unit of work
        (rsvmqtrn); the outcome is logged and forced like any commit or backout."""
        action = (cmd.attrs.get("ACTION") or "").upper()
        if action not in ("COMMIT", "BACKOUT"):
            raise MqscError("RESOLVE UOW needs ACTION(COMMIT) or ACTION(BACKOUT)")
        if not cmd.name.isdigit():
            raise MqscError(f"UOW({cmd.name}): a unit of work is named by its number "
                            "(DISPLAY UOW(*) lists them)")
        self.core.check_running()
        await self.core.resolve(int(cmd.name), action == "COMMIT")
        return [mqsc.format_message("HMQ8325I", f"unit of work {cmd.name} resolved: "
                                    f"{'committed' if action == 'COMMIT' else 'backed out'}.")]

    # -- remote queues, channels, listeners (definitions) -----------------------------

    _NOUNS = {"QREMOTE": "queue", "CHANNEL": "channel", "LISTENER": "listener"}

    async def define_object(self, cmd: Command) -> list[str]:
        replace = "REPLACE" in cmd.flags
        await self.core.define_object(cmd.objtype, cmd.name, dict(cmd.attrs), replace=replace)
        noun = self._NOUNS[cmd.objtype]
        return [mqsc.format_message("HMQ8006I", f"harbormq {noun} created" +
                                    (" (REPLACE)." if replace else "."))]

    async def alter_object(self, cmd: Command) -> list[str]:
        await self.core.alter_object(cmd.objtype, cmd.name, dict(cmd.attrs))
        return [mqsc.format_message("HMQ8008I", f"harbormq {self._NOUNS[cmd.objtype]} "
                                    "changed.")]

    async def delete_object(self, cmd: Command) -> list[str]:
        channels = self.core.channels
        if cmd.objtype in ("CHANNEL", "LISTENER") and channels is not None:
            channels.check_deletable(cmd.objtype, cmd.name)
        await self.core.delete_object(cmd.objtype, cmd.name)
        return [mqsc.format_message("HMQ8007I", f"harbormq {self._NOUNS[cmd.objtype]} "
                                    "deleted.")]

    def display_objects(self, cmd: Command) -> list[str]:
        objtype = cmd.objtype
        head = {"QREMOTE": "QUEUE", "CHANNEL": "CHANNEL", "LISTENER": "LISTENER"}[objtype]
        order = {"QREMOTE": mqsc.DISPLAY_QREMOTE_ATTRS, "CHANNEL": mqsc.DISPLAY_CHANNEL_ATTRS,
                 "LISTENER": mqsc.DISPLAY_LISTENER_ATTRS}[objtype]
        always = (head, "TYPE") if objtype == "QREMOTE" else (head, "CHLTYPE") \
            if objtype == "CHANNEL" else (head,)
        channels = self.core.channels
        out = []
        for d in sorted((d for d in self.core.objects.values() if d["type"] == objtype),
                        key=lambda d: d["name"]):
            if not mqsc.generic_match(cmd.name, d["name"]):
                continue
            values = {head: d["name"], "TYPE": objtype, **d["attrs"]}
            if objtype == "LISTENER":
                values["STATUS"] = channels.listener_status(d["name"]) if channels else \
                    "STOPPED"
            if not mqsc.where_matches(cmd.where, values):
                continue
            shown = _select(cmd, order, always)
            out.append(mqsc.format_object("HMQ8409I", f"Display {self._NOUNS[objtype]} "
                                          "details.", [(a, values.get(a, "")) for a in shown]))
        if not out:
            if "*" not in cmd.name:
                raise UnknownObject(f"harbormq {self._NOUNS[objtype]} {cmd.name} not found",
                                    queue=cmd.name)
            out.append(mqsc.format_message("HMQ8409I", f"No {self._NOUNS[objtype]}s found."))
        return out

    def _channels(self) -> ChannelCommands:
        channels = self.core.channels
        if channels is None:
            raise MqscError(f"channels do not run in this process of queue manager "
                            f"{self.core.name}: start it with 'harbormq start'",
                            msgid="HMQ9501E")
        return channels

    async def channel_action(self, cmd: Command) -> list[str]:
        """START/STOP CHANNEL and LISTENER, RESET CHANNEL SEQNUM(n), RESOLVE
        CHANNEL ACTION(COMMIT|BACKOUT): the channel initiator does them."""
        self.core.check_running()
        channels = self._channels()
        if cmd.objtype == "LISTENER":
            text = await (channels.start_listener(cmd.name) if cmd.verb == "START"
                          else channels.stop_listener(cmd.name))
        elif cmd.verb == "START":
            text = await channels.start_channel(cmd.name)
        elif cmd.verb == "STOP":
            text = await channels.stop_channel(cmd.name)
        elif cmd.verb == "RESET":
            seq = cmd.attrs.get("SEQNUM", "1")
            if not str(seq).isdigit() or not 1 <= int(seq) <= 999_999_999:
                raise MqscError(f"SEQNUM({seq}) must be a number 1..999999999")
            text = await channels.reset_channel(cmd.name, int(seq))
        else:
            action = (cmd.attrs.get("ACTION") or "").upper()
            if action not in ("COMMIT", "BACKOUT"):
                raise MqscError("RESOLVE CHANNEL needs ACTION(COMMIT) or ACTION(BACKOUT)")
            text = await channels.resolve_channel(cmd.name, action == "COMMIT")
        return [mqsc.format_message("HMQ8410I", text)]

    def display_chstatus(self, cmd: Command) -> list[str]:
        out = []
        for values in self._channels().status(cmd.name):
            if not mqsc.where_matches(cmd.where, values):
                continue
            shown = _select(cmd, mqsc.CHSTATUS_ATTRS, ("CHANNEL", "CHLTYPE", "STATUS"),
                            ("CHANNEL", "CHLTYPE", "STATUS", "CONNAME", "INDOUBT", "LSTSEQNO",
                             "CURSEQNO", "LSTLUWID", "MSGS", "BATCHES", "XQMSGSA"))
            out.append(mqsc.format_object("HMQ8417I", "Display Channel Status details.",
                                          [(a, values.get(a, "")) for a in shown]))
        if not out:
            if "*" not in cmd.name:
                raise MqscError(f"channel {cmd.name} has no status (it is not defined, or "
                                "has never run)", msgid="HMQ8420E")
            out.append(mqsc.format_message("HMQ8417I", "No channel status found."))
        return out

    # -- the log: DISPLAY LOG, ARCHIVE LOG, SET LOG ARCHIVED -------------------------------

    def display_log(self, cmd: Command) -> list[str]:
        """The log as a whole, then every extent the control file lists (free
        circular extents aside) with its state; WHERE and attribute names
        select among the extents."""
        core = self.core
        log = core.log
        st = log.state
        linear = st.log_type == "linear"
        status = core.log_management.status()
        oldest_unarchived = next((e["extent"] for e in status if e["state"] == "full"
                                  and not e["archived"] and not e["deleted"]), "")
        paths = [str(p) for p in core.config.log_archive_paths]
        values = {"QMNAME": core.name, "LOGTYPE": st.log_type.upper(),
                  "LOGMGMT": core.config.log_management.upper() if linear else "",
                  "LOGPATH": str(log.dir), "ARCHPATH": paths if linear else "",
                  "MAXARCH": core.config.max_archives if linear else "",
                  "CURRLOG": extent_file_name(st.active.number),
                  "RECLOG": _holding(log, st.restart_lsn),
                  "MEDIALOG": _holding(log, st.media_lsn) if linear else "",
                  "ARCHLOG": oldest_unarchived if linear else ""}
        out = [mqsc.format_object("HMQ8322I", "Display log details.",
                                  [(a, values[a]) for a in mqsc.LOG_ATTRS])]
        shown = _select(cmd, mqsc.LOG_EXTENT_ATTRS, ("EXTENT",), mqsc.LOG_EXTENT_ATTRS)
        for e in status:
            end = e["end_lsn"]
            if end is None or end > st.restart_lsn:
                needed = "RESTART"
            elif linear and end > st.media_lsn:
                needed = "MEDIA"
            else:
                needed = "NO"
            ext = {"EXTENT": e["extent"], "STATUS": e["state"].upper(),
                   "ARCHIVED": e["archived"], "DELETED": e["deleted"], "ONDISK": e["on_disk"],
                   "NEEDED": needed, "FIRSTLSN": e["first_lsn"],
                   "ENDLSN": "" if end is None else end}
            if not mqsc.where_matches(cmd.where, {k: mqsc.format_value(v)
                                                  for k, v in ext.items()}):
                continue
            out.append(mqsc.format_object("HMQ8323I", "Display log extent details.",
                                          [(a, ext[a]) for a in shown]))
        return out

    async def archive_log(self, cmd: Command) -> list[str]:
        r = await archive_log(self.core)
        out = [mqsc.format_message("HMQ7480I", f"log extent {r['closed']} closed and ready "
                                   f"for archive; {r['current']} is now the current extent.")]
        where = ", ".join(r["paths"])
        if r["archived"]:
            out.append(mqsc.format_message("HMQ7481I", f"log extent(s) "
                                           f"{', '.join(r['archived'])} archived to {where}."))
        else:
            out.append(mqsc.format_message("HMQ7481I", f"every closed log extent is archived "
                                           f"(to {where})."))
        return out + _deleted_lines(r["deleted"])

    async def set_log(self, cmd: Command) -> list[str]:
        name = cmd.attrs.get("ARCHIVED")
        if not name:
            raise MqscError("SET LOG needs ARCHIVED(extent), the name of a closed log extent "
                            "an archiver has copied, e.g. ARCHIVED(S0000003.LOG)")
        r = await mark_log_archived(self.core, name)
        return [mqsc.format_message("HMQ7481I", f"log extent {r['extent']} marked "
                                    "archived.")] + _deleted_lines(r["deleted"])

    # -- authority records -------------------------------------------------------------

    def _authority_store(self):
        if self.security is None:
            raise MqscError("authority records are not available: this queue manager runs "
                            "without a security configuration")
        return self.security.authorities

    def _authrec_target(self, cmd: Command, *, need_entity: bool = True) -> dict:
        objtype = cmd.attrs.get("OBJTYPE")
        if not objtype:
            raise MqscError(f"{cmd.verb} AUTHREC needs OBJTYPE(QUEUE|QMGR|TOPIC)")
        profile = cmd.attrs.get("PROFILE") or (self.core.name if objtype == "QMGR" else "")
        if not profile:
            raise MqscError(f"{cmd.verb} AUTHREC OBJTYPE({objtype}) needs PROFILE(...)")
        principal, group = cmd.attrs.get("PRINCIPAL"), cmd.attrs.get("GROUP")
        if need_entity and bool(principal) == bool(group):
            raise MqscError(f"{cmd.verb} AUTHREC needs exactly one of PRINCIPAL and GROUP")
        return {"profile": profile, "objtype": objtype, "principal": principal,
                "group": group}

    def set_authrec(self, cmd: Command) -> list[str]:
        store = self._authority_store()
        target = self._authrec_target(cmd)
        if not cmd.attrs.get("AUTHADD") and not cmd.attrs.get("AUTHRMV"):
            raise MqscError("SET AUTHREC needs AUTHADD(...) or AUTHRMV(...)")
        store.set(**target, add=cmd.attrs.get("AUTHADD", ()),
                  remove=cmd.attrs.get("AUTHRMV", ()))
        out = [mqsc.format_message("HMQ8862I", "harbormq authority record set.")]
        principal = target.get("principal")
        # a record may name a harbormq user, or an OS user (its anonymous loopback
        # connections act as that user)
        if principal and not self.security.users.exists(principal) and \
                not self.security.is_os_user(principal):
            # MQSC folds unquoted values to upper case; user names keep their case
            hint = next((u for u in self.security.users.names()
                         if u.upper() == principal.upper()), None)
            out.append(mqsc.format_message(
                "HMQ8866W", f"principal {principal} is neither a harbormq user nor an OS "
                "user of this machine" +
                (f"; did you mean PRINCIPAL('{hint}')? Unquoted names are folded to upper "
                 "case" if hint else "; the record applies once a user of that name exists")))
        return out

    def delete_authrec(self, cmd: Command) -> list[str]:
        store = self._authority_store()
        store.delete(**self._authrec_target(cmd))
        return [mqsc.format_message("HMQ8863I", "harbormq authority record deleted.")]

    def display_authrec(self, cmd: Command) -> list[str]:
        store = self._authority_store()
        records = store.records(profile=cmd.attrs.get("PROFILE") or "*",
                                objtype=cmd.attrs.get("OBJTYPE") or None,
                                principal=cmd.attrs.get("PRINCIPAL") or None,
                                group=cmd.attrs.get("GROUP") or None)
        out = []
        for r in records:
            values = {"PROFILE": r.profile, "ENTITY": r.entity,
                      "ENTTYPE": r.entity_type.upper(), "OBJTYPE": r.objtype,
                      "AUTHLIST": r.authlist}
            if not mqsc.where_matches(cmd.where, values):
                continue
            out.append(mqsc.format_object("HMQ8864I", "Display authority record details.",
                                          list(values.items())))
        if not out:
            out.append(mqsc.format_message("HMQ8865I", "No matching authority records."))
        return out


# -- log management: the work behind ARCHIVE LOG and SET LOG ARCHIVED, shared with the
#    admin socket's log_archive, log_archived and log_delete requests -----------------------

def _holding(log, lsn: int) -> str:
    """The extent holding ``lsn`` (LSN 0 too: the first extent)."""
    e = log.extent_of(lsn)
    return extent_file_name(e.number) if e is not None else ""


def _deleted_now(core: QueueManagerCore, before: set[int]) -> list[str]:
    return [extent_file_name(e.number) for e in core.log.chain()
            if e.deleted and e.number not in before]


def _deleted_set(core: QueueManagerCore) -> set[int]:
    return {e.number for e in core.log.state.extents if e.deleted}


def _deleted_lines(names: list[str]) -> list[str]:
    if not names:
        return []
    return [mqsc.format_message("HMQ7482I", f"log extent(s) {', '.join(names)} deleted: "
                                "neither restart nor media recovery needs them.")]


async def archive_log(core: QueueManagerCore) -> dict:
    """ARCHIVE LOG: close the active extent, archive every closed one. Returns the
    extent closed, the new current one, those archived now, those the mode
    then deleted and the archive paths."""
    closed = extent_file_name(core.log.state.active.number)
    before = _deleted_set(core)
    archived = await core.log_management.archive_now()
    return {"closed": closed, "current": extent_file_name(core.log.state.active.number),
            "archived": archived, "deleted": _deleted_now(core, before),
            "paths": [str(p) for p in core.config.log_archive_paths]}


async def mark_log_archived(core: QueueManagerCore, name: str) -> dict:
    """SET LOG ARCHIVED(name): an external archiver copied this closed extent.
    In automatic and archive modes what is then deletable is deleted."""
    if not isinstance(name, str) or not name:
        raise ValueError("the name of a log extent is needed, e.g. S0000003.LOG")
    before = _deleted_set(core)
    await core.log_management.mark_archived(name)
    return {"extent": name.upper(), "deleted": _deleted_now(core, before)}


async def delete_log(core: QueueManagerCore, through: str | None) -> dict:
    """Delete the closed extents nothing needs, oldest first, through ``through``
    (every one when None); ``{"deleted": [...], "never_archived": [...]}``."""
    _check_through(through)
    return await core.log_management.delete(through or None)


def plan_log_delete(core: QueueManagerCore, through: str | None) -> dict:
    """What ``delete_log`` would delete now, deleting nothing (``harbormq log
    delete --dry-run``); ``{"would_delete": [...], "never_archived": [...]}``."""
    _check_through(through)
    core.log_management.need_linear("deleting log extents")
    return deletion_plan(core.log_management.plan_delete(through or None))


def _check_through(through) -> None:
    if through is not None and not isinstance(through, str):
        raise ValueError("'through' must name a log extent, e.g. S0000007.LOG")


async def backup_point(core: QueueManagerCore, *, checkpoint: bool, switch: bool) -> dict:
    """The two moments of a hot (fuzzy) backup (docs/backup.md; redbook §2.3.1,
    method 2). ``checkpoint``: before any store is copied, flush every store
    and checkpoint, so that the control file on disk names a recovery point
    (the checkpoint's restart LSN) from which the log brings any later copy
    of the stores forward. ``switch``: once the stores are copied, close the
    active extent (as ARCHIVE LOG does, without needing an archive path), so
    that every record a copied store can hold lies in a closed, stable
    extent; returns once that extent and the control file listing it are
    durable."""
    out: dict = {"qm_name": core.name, "log_type": core.log.state.log_type}
    if checkpoint:
        table = await core.checkpoint("backup")
        out.update(checkpoint_lsn=table["end_lsn"], restart_lsn=table["restart_lsn"],
                   media_lsn=core.log.state.media_lsn)
    if switch:
        closed = core.log.state.active
        core.log.switch_now()
        # ordered behind the switch's EXTENT_END, its fsync and its control file
        await core.log.update_control()
        out["closed"] = {"number": closed.number, "first_lsn": closed.first_lsn,
                         "end_lsn": closed.end_lsn, "name": extent_file_name(closed.number)}
    out["sequence"] = core.log.state.sequence
    return out


# -- scripts -------------------------------------------------------------------------------

def _error_text(exc: BaseException) -> str:
    if isinstance(exc, HarbormqError):
        text = f"{exc.msgid}: {exc.message}"
        if exc.hint:
            text += f"\n   hint: {exc.hint}"
        return text
    return f"HMQ8400E: the command failed: {exc!r}"


async def run_mqsc(core: QueueManagerCore, text: str, *, security, continue_on_error: bool = False,
                   qm_info: dict | None = None) -> dict:
    """Run an MQSC script on the queue manager's loop.

    Returns ``{"output": text, "errors": n, "stopped_early": bool}`` where ``n``
    counts syntax errors and failed commands."""
    items = mqsc.parse_script(text)
    ex = Executor(core, security, qm_info)
    out = [f"Starting MQSC for queue manager {core.name}.", ""]
    read = syntax = failed = 0
    stopped_at = None
    for index, item in enumerate(items):
        if isinstance(item, Command) and item.verb == "END":
            break
        read += 1
        out.append(mqsc.format_echo(read, item.lines))
        if isinstance(item, MqscSyntaxError):
            syntax += 1
            out.append(mqsc.format_syntax_error(item))
            ok = False
        else:
            try:
                out.extend(await ex.execute(item))
                ok = True
            except Exception as exc:  # noqa: BLE001 - reported, the script goes on or stops
                failed += 1
                out.append(_error_text(exc))
                ok = False
        if not ok and not continue_on_error:
            stopped_at = index
            break
    not_run = 0
    if stopped_at is not None:
        not_run = sum(1 for it in items[stopped_at + 1:]
                      if not (isinstance(it, Command) and it.verb == "END"))
    out.append(mqsc.format_summary(read, syntax, failed, not_run=not_run))
    return {"output": "\n".join(out) + "\n", "errors": syntax + failed,
            "stopped_early": bool(not_run)}


async def handle_admin_mqsc(core: QueueManagerCore, request: dict, security, *,
                            qm_info: dict | None = None) -> dict:
    """The admin socket's ``{"cmd": "mqsc", "text": ..., "continue": bool}``."""
    text = request.get("text")
    if not isinstance(text, str):
        return {"ok": False, "output": "", "errors": 1,
                "error": str(AdminRequestError("the mqsc request needs 'text' (the MQSC "
                                               "commands) as a string"))}
    result = await run_mqsc(core, text, security=security,
                            continue_on_error=bool(request.get("continue")), qm_info=qm_info)
    reply = {"ok": result["errors"] == 0, "output": result["output"],
             "errors": result["errors"], "stopped_early": result["stopped_early"]}
    if not reply["ok"]:
        reply["error"] = f"{result['errors']} MQSC command(s) failed"
    return reply
