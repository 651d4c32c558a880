"""MQSC of client-connection security, and the forms MQ administrators write
that the rest of the executor does not: a mixin of ``commands.Executor``.

* ``SET CHLAUTH`` (ACTION ADD, REPLACE, REMOVE, REMOVEALL) and ``DISPLAY
  CHLAUTH`` (MATCH(RUNCHECK) too): records in the catalog (``CHLAUTH:<id>``),
  their meaning in ``security/chlauth.py``;
* ``DEFINE``/``ALTER``/``DELETE``/``DISPLAY AUTHINFO``, ``REFRESH SECURITY``;
* server-connection channels: ``DISPLAY CHSTATUS`` lists their instances (the
  STOMP connections of the listeners naming them), ``STOP CHANNEL`` ends them
  and refuses new ones until ``START CHANNEL``;
* ``LIKE`` on DEFINE QREMOTE, CHANNEL, LISTENER and AUTHINFO; ``IGNSTATE``;
  keywords accepted with no effect here (``mqsc.NO_EFFECT``: HMQ8890W);
* ``DISPLAY USAGE``: store and log space, per queue and per extent (MQ for
  z/OS's page sets and log data sets).

Not here: the checks made when a client connects (``security/svrconn.py``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from ..core.objects import SecurityCatalog, channel_key, chlauth_key
from ..errors import InvalidAttribute, ObjectExists, ObjectInUse, UnknownObject
from ..security import chlauth, listener_channels
from . import mqsc
from .mqsc import Command

#: the definition types whose DEFINE takes LIKE here (AUTHINFO's handler reads
#: LIKE itself; QLOCAL's is the queue's own)
_LIKE_TYPES = ("QREMOTE", "CHANNEL", "LISTENER", "QALIAS", "QMODEL", "PROCESS", "NAMELIST",
               "TOPIC")
#: what LIKE does not copy: a topic object's node is its own
_NOT_LIKE = {"TOPIC": ("TOPICSTR",)}


class SecurityCommands:
    """Handlers for ``Executor`` (which provides ``core``, ``security``,
    ``handlers``, ``define_object``, ``channel_action`` and
    ``display_chstatus``)."""

    def security_handlers(self) -> dict[tuple[str, str], Callable]:
        """The handlers this mixin adds or wraps, for ``self.handlers.update``."""
        base = dict(self.handlers)
        out = {
            ("SET", "CHLAUTH"): self.set_chlauth,
            ("DISPLAY", "CHLAUTH"): self.display_chlauth,
            ("DEFINE", "AUTHINFO"): self.define_authinfo,
            ("ALTER", "AUTHINFO"): self.alter_authinfo,
            ("DELETE", "AUTHINFO"): self.delete_authinfo,
            ("DISPLAY", "AUTHINFO"): self.display_authinfo,
            ("REFRESH", "SECURITY"): self.refresh_security,
            ("STOP", "CHANNEL"): self._svrconn_or(base[("STOP", "CHANNEL")],
                                                  self.stop_svrconn),
            ("START", "CHANNEL"): self._svrconn_or(base[("START", "CHANNEL")],
                                                   self.start_svrconn),
            ("DISPLAY", "CHSTATUS"): self.display_chstatus_all,
            ("DISPLAY", "USAGE"): self.display_usage,
        }
        for objtype in _LIKE_TYPES:
            out[("DEFINE", objtype)] = self._with_like(base[("DEFINE", objtype)])
        self._base_chstatus = base[("DISPLAY", "CHSTATUS")]
        for key, words in mqsc.NO_EFFECT.items():
            out[key] = self._without_no_effect(out.get(key) or base[key], words)
        return out

    # -- keywords with no effect --------------------------------------------------------

    @staticmethod
    def _without_no_effect(handler: Callable, words: tuple) -> Callable:
        async def run(cmd: Command) -> list[str]:
            ignored = [w for w in words if w in cmd.attrs]
            if ignored:
                cmd = Command(cmd.verb, cmd.objtype, cmd.name,
                              {k: v for k, v in cmd.attrs.items() if k not in ignored},
                              cmd.flags, cmd.where, cmd.line, cmd.lines, cmd.text)
            result = handler(cmd)
            if inspect.isawaitable(result):
                result = await result
            return [mqsc.format_message("HMQ8890W", f"{w} accepted: it has no effect on "
                                        "harbormq") for w in ignored] + list(result)
        return run

    # -- DEFINE ... LIKE ---------------------------------------------------------------

    def _with_like(self, handler: Callable) -> Callable:
        """DEFINE with LIKE(other): what is not given comes from the other object
        of the same type (MQ's LIKE), then from the defaults; then ``handler``."""
        async def run(cmd: Command) -> list[str]:
            like = cmd.attrs.get("LIKE")
            if like:
                base = {k: v for k, v in self.core.definition(cmd.objtype, like)["attrs"].items()
                        if k not in _NOT_LIKE.get(cmd.objtype, ())}
                given = {k: v for k, v in cmd.attrs.items() if k != "LIKE"}
                if cmd.objtype == "CHANNEL" and str(given.get("CHLTYPE", base["CHLTYPE"])
                                                    ).upper() != base["CHLTYPE"]:
                    raise InvalidAttribute(f"LIKE({like}) is a {base['CHLTYPE']} channel: a "
                                           "channel is defined like one of its own CHLTYPE")
                cmd = Command(cmd.verb, cmd.objtype, cmd.name, {**base, **given}, cmd.flags,
                              cmd.where, cmd.line, cmd.lines, cmd.text)
            result = handler(cmd)
            if inspect.isawaitable(result):
                result = await result
            return result
        return run

    # -- AUTHINFO --------------------------------------------------------------------

    @staticmethod
    def _authinfo_attrs(cmd: Command) -> dict:
        attrs = {k: v for k, v in cmd.attrs.items() if k != "LIKE"}
        if attrs.get("CHCKCLNT", "").upper() == "ASQMGR":
            raise mqsc.MqscSyntaxError("CHCKCLNT(ASQMGR) is for CHLAUTH records; an AUTHINFO "
                                       "takes NONE, OPTIONAL, REQUIRED or REQDADM",
                                       line=cmd.line, column=1, lines=cmd.lines)
        return attrs

    @staticmethod
    def _authinfo_warnings(cmd: Command) -> list[str]:
        """Kept (dump-config writes them back) but without effect here."""
        notes = {"CHCKLOCL": "there are no local bindings connections",
                 "FAILDLAY": "a failed login is answered at once"}
        out = [mqsc.format_message("HMQ8890W", f"{k} accepted: it has no effect on harbormq "
                                   f"({why})") for k, why in notes.items() if k in cmd.attrs]
        if str(cmd.attrs.get("ADOPTCTX", "")).upper() == "NO":
            out.append(mqsc.format_message("HMQ8890W", "ADOPTCTX(NO) accepted: it has no "
                                           "effect on harbormq (an authenticated user is "
                                           "always the connection's context)"))
        return out

    def _not_in_force_note(self, name: str) -> list[str]:
        if self.core.qmgr_attrs.get("CONNAUTH") == name:
            return [mqsc.format_message("HMQ8892I", f"AUTHINFO {name} is the queue manager's "
                                        "CONNAUTH: the change applies after REFRESH SECURITY "
                                        "TYPE(CONNAUTH).")]
        return []

    async def define_authinfo(self, cmd: Command) -> list[str]:
        attrs = self._authinfo_attrs(cmd)
        if cmd.attrs.get("LIKE"):
            attrs = {**self.core.definition("AUTHINFO", cmd.attrs["LIKE"])["attrs"], **attrs}
        replace = "REPLACE" in cmd.flags
        await self.core.define_object("AUTHINFO", cmd.name, attrs, replace=replace)
        return self._authinfo_warnings(cmd) + [
            mqsc.format_message("HMQ8006I", "harbormq authentication information object "
                                "created" + (" (REPLACE)." if replace else "."))] + \
            self._not_in_force_note(cmd.name)

    async def alter_authinfo(self, cmd: Command) -> list[str]:
        await self.core.alter_object("AUTHINFO", cmd.name, self._authinfo_attrs(cmd))
        return self._authinfo_warnings(cmd) + [
            mqsc.format_message("HMQ8008I", "harbormq authentication information object "
                                "changed.")] + self._not_in_force_note(cmd.name)

    async def delete_authinfo(self, cmd: Command) -> list[str]:
        if self.core.qmgr_attrs.get("CONNAUTH") == cmd.name:
            raise ObjectInUse(f"AUTHINFO {cmd.name} is named by the queue manager's CONNAUTH: "
                              "ALTER QMGR CONNAUTH(...) to another one first (MQRC 2045)")
        await self.core.delete_object("AUTHINFO", cmd.name)
        return [mqsc.format_message("HMQ8007I", "harbormq authentication information object "
                                    "deleted.")]

    def display_authinfo(self, cmd: Command) -> list[str]:
        out = []
        for d in sorted((d for d in self.core.objects.values() if d["type"] == "AUTHINFO"),
                        key=lambda d: d["name"]):
            if not mqsc.generic_match(cmd.name, d["name"]):
                continue
            values = {"AUTHINFO": d["name"], **d["attrs"]}
            if not mqsc.where_matches(cmd.where, values):
                continue
            shown = mqsc.select_attrs(cmd, mqsc.DISPLAY_AUTHINFO_ATTRS, ("AUTHINFO", "AUTHTYPE"))
            out.append(mqsc.format_object("HMQ8566I", "Display authentication information "
                                          "details.", [(a, values.get(a, "")) for a in shown]))
        if not out:
            if "*" not in cmd.name:
                raise UnknownObject(f"harbormq authentication information object {cmd.name} "
                                    "not found (MQRC 2085)", queue=cmd.name)
            out.append(mqsc.format_message("HMQ8566I", "No authentication information objects "
                                           "found."))
        return out

    # -- REFRESH SECURITY --------------------------------------------------------------

    def refresh_security(self, cmd: Command) -> list[str]:
        rtype = (cmd.attrs.get("TYPE") or "AUTHSERV").upper()
        if rtype not in ("AUTHSERV", "CONNAUTH", "SSL", "ALL"):
            raise mqsc.MqscSyntaxError(f"REFRESH SECURITY TYPE({rtype}): use AUTHSERV, "
                                       "CONNAUTH, SSL or ALL", line=cmd.line, column=1,
                                       lines=cmd.lines)
        out = []
        if rtype in ("CONNAUTH", "ALL") and self.security is not None:
            policy = self.security.refresh_connauth(SecurityCatalog(self.core))
            what = f"AUTHINFO {policy.authinfo} CHCKCLNT({policy.chckclnt})" \
                if policy.authinfo else "no AUTHINFO: user ids and passwords are not checked"
            if policy.chckclnt == "MISSING":
                what = f"AUTHINFO {policy.authinfo} is not defined: clients are refused"
            out.append(mqsc.format_message("HMQ8560I", f"connection authentication "
                                           f"refreshed: {what}."))
        if rtype in ("AUTHSERV", "ALL"):
            out.append(mqsc.format_message("HMQ8560I", "authority records refreshed (they are "
                                           "read again whenever they change)."))
        if rtype in ("SSL", "ALL"):
            out.append(mqsc.format_message("HMQ8890W", "TYPE(SSL) accepted: it has no effect "
                                           "on harbormq (TLS files are read when a listener "
                                           "starts)"))
        return out

    # -- CHLAUTH -----------------------------------------------------------------------

    def _records(self) -> list[dict]:
        return [d for d in self.core.objects.values() if d["type"] == "CHLAUTH"]

    async def set_chlauth(self, cmd: Command) -> list[str]:
        profile = cmd.name
        given = {k: v for k, v in cmd.attrs.items() if k != "ACTION"}
        action = str(cmd.attrs.get("ACTION") or "ADD").upper()
        core = self.core
        if action == "REMOVEALL":
            rtype = str(given.get("TYPE") or "").upper()
            gone = [d for d in self._records() if d["attrs"]["CHLPROF"] == profile and
                    d["attrs"]["TYPE"] == rtype]
            for d in gone:
                await core.delete_object("CHLAUTH", d["name"])
            return [mqsc.format_message("HMQ8877I", f"{len(gone)} channel authentication "
                                        f"record(s) of '{profile}' TYPE({rtype}) removed.")]
        if action == "REMOVE":
            rtype = str(given.get("TYPE") or "").upper()
            match = {k: str(given.get(k) or "") for k in chlauth.MATCH_FIELDS.get(rtype, ())}
            name = chlauth.record_name(profile, {"TYPE": rtype, **match})
            if chlauth_key(name) not in core.objects:
                raise UnknownObject(f"no channel authentication record of '{profile}' "
                                    f"TYPE({rtype or '?'}) " + " ".join(
                                        f"{k}({v})" for k, v in match.items() if v) +
                                    " exists (MQRC 2085)", queue=profile)
            await core.delete_object("CHLAUTH", name)
            return [mqsc.format_message("HMQ8877I", "harbormq channel authentication record "
                                        "removed.")]
        if action not in ("ADD", "REPLACE"):
            raise mqsc.MqscSyntaxError(f"ACTION({action}): use ADD, REPLACE, REMOVE or "
                                       "REMOVEALL", line=cmd.line, column=1, lines=cmd.lines)
        attrs = chlauth.record_attrs(profile, given)
        name = chlauth.record_name(profile, attrs)
        if chlauth_key(name) in core.objects and action == "ADD":
            raise ObjectExists(f"a channel authentication record of '{profile}' "
                               f"TYPE({attrs['TYPE']}) with these match values exists: give "
                               "ACTION(REPLACE) to change it (MQRC 2100)", queue=profile)
        await core.define_object("CHLAUTH", name, attrs, replace=True)
        return [mqsc.format_message("HMQ8877I", "harbormq channel authentication record set.")]

    def display_chlauth(self, cmd: Command) -> list[str]:
        records = sorted((d["attrs"] for d in self._records()),
                         key=lambda a: (a["CHLPROF"], a["TYPE"], a.get("ADDRESS", ""),
                                        a.get("CLNTUSER", "")))
        if (cmd.attrs.get("MATCH") or "").upper() == "RUNCHECK":
            records = self._runcheck(cmd, records)
        else:
            rtype = (cmd.attrs.get("TYPE") or "ALL").upper()
            records = [a for a in records if mqsc.generic_match(cmd.name, a["CHLPROF"]) or
                       a["CHLPROF"] == cmd.name]
            records = [a for a in records if rtype == "ALL" or a["TYPE"] == rtype]
        out = []
        for a in records:
            values = {"CHLAUTH": a["CHLPROF"], **{k: v for k, v in a.items() if v != ""}}
            if not mqsc.where_matches(cmd.where, values):
                continue
            shown = [k for k in mqsc.select_attrs(cmd, mqsc.CHLAUTH_ATTRS, ("CHLAUTH", "TYPE"),
                                              mqsc.CHLAUTH_ATTRS) if k in values]
            out.append(mqsc.format_object("HMQ8878I", "Display channel authentication record "
                                          "details.", [(k, values[k]) for k in shown]))
        if not out:
            out.append(mqsc.format_message("HMQ8884I", "Channel authentication record not "
                                           "found."))
        return out

    def _runcheck(self, cmd: Command, records: list[dict]) -> list[dict]:
        """MATCH(RUNCHECK): the records a connection on channel ``cmd.name`` from
        ADDRESS with CLNTUSER (and SSLPEER) would meet: its mapping record and
        its BLOCKUSER record."""
        if "*" in cmd.name or not cmd.attrs.get("ADDRESS"):
            raise mqsc.MqscSyntaxError("MATCH(RUNCHECK) needs a channel name that is not "
                                       "generic and ADDRESS(...), e.g. DISPLAY CHLAUTH(APP.SVRCONN)"
                                       " MATCH(RUNCHECK) ADDRESS('10.0.0.1') CLNTUSER('alice')",
                                       line=cmd.line, column=1, lines=cmd.lines)
        rules = [chlauth.Rule.from_attrs(a) for a in records]
        hits = [chlauth.mapping_rule(rules, cmd.name, cmd.attrs["ADDRESS"],
                             cmd.attrs.get("CLNTUSER"), cmd.attrs.get("SSLPEER")),
                chlauth.blocking_user_rule(rules, cmd.name)]
        chosen = {id(r) for r in hits if r is not None}
        return [a for a, r in zip(records, rules, strict=True) if id(r) in chosen]

    # -- server-connection channels: status, STOP and START ---------------------------

    def _channel_type(self, name: str) -> str:
        d = self.core.objects.get(channel_key(name))
        return d["attrs"].get("CHLTYPE", "") if d and d["type"] == "CHANNEL" else ""

    def _svrconn_or(self, other: Callable, mine: Callable) -> Callable:
        def route(cmd: Command):
            return mine(cmd) if self._channel_type(cmd.name) == "SVRCONN" else other(cmd)
        return route

    def svrconn_instances(self, pattern: str) -> list[tuple[str, object]]:
        """(channel, connection) of every STOMP connection on a SVRCONN channel
        whose name matches ``pattern``."""
        channels = listener_channels(self.core.config.listeners)
        out = []
        for conn in self.core.connections:
            channel = channels.get(conn.listener)
            if conn.kind == "stomp" and channel and mqsc.generic_match(pattern, channel):
                out.append((channel, conn))
        return sorted(out, key=lambda x: (x[0], x[1].conn_id))

    async def stop_svrconn(self, cmd: Command) -> list[str]:
        if self.security is not None:
            self.security.stopped_channels.add(cmd.name)
        ended = 0
        for _channel, conn in self.svrconn_instances(cmd.name):
            if conn.stop is not None:
                result = conn.stop(f"ended by STOP CHANNEL({cmd.name}) (MQRC 2009 "
                                   "CONNECTION_BROKEN)")
                if inspect.isawaitable(result):
                    await result
                ended += 1
        return [mqsc.format_message("HMQ8410I", f"channel {cmd.name} stopped: {ended} "
                                    "connection(s) ended; new ones are refused until START "
                                    f"CHANNEL({cmd.name}).")]

    def start_svrconn(self, cmd: Command) -> list[str]:
        if self.security is not None:
            self.security.stopped_channels.discard(cmd.name)
        return [mqsc.format_message("HMQ8410I", f"channel {cmd.name} started: it accepts "
                                    "connections.")]

    def display_chstatus_all(self, cmd: Command) -> list[str]:
        out = []
        for channel, conn in self.svrconn_instances(cmd.name):
            d = self.core.objects.get(channel_key(channel))
            attrs = d["attrs"] if d is not None else {}
            values = {"CHANNEL": channel, "CHLTYPE": "SVRCONN", "STATUS": "RUNNING",
                      "CONNAME": conn.peer, "CONN": conn.conn_id, "MCAUSER": conn.user,
                      "CHSTADA": mqsc.mq_date(conn.started_ns),
                      "CHSTATI": mqsc.mq_time(conn.started_ns),
                      "MAXMSGL": attrs.get("MAXMSGL", "")}
            if not mqsc.where_matches(cmd.where, values):
                continue
            shown = mqsc.select_attrs(cmd, mqsc.SVRCONN_CHSTATUS_ATTRS,
                                      ("CHANNEL", "CHLTYPE", "STATUS"),
                                      mqsc.SVRCONN_CHSTATUS_ATTRS)
            out.append(mqsc.format_object("HMQ8417I", "Display Channel Status details.",
                                          [(a, values.get(a, "")) for a in shown]))
        svrconns = {d["name"] for d in self.core.objects.values()
                    if d["type"] == "CHANNEL" and d["attrs"].get("CHLTYPE") == "SVRCONN"}
        if self.core.channels is None and (out or cmd.name in svrconns or "*" in cmd.name):
            return out or [mqsc.format_message("HMQ8417I", "No channel status found.")]
        if cmd.name in svrconns:
            return out or [mqsc.format_message("HMQ8417I", f"No channel status found: "
                                               f"{cmd.name} has no connections.")]
        others = [block for block in self._base_chstatus(cmd)
                  if not any(f"CHANNEL({n})" in block for n in svrconns)]
        if out:
            others = [b for b in others if "No channel status found" not in b]
        return out + others

    # -- DISPLAY USAGE -----------------------------------------------------------------

    def display_usage(self, cmd: Command) -> list[str]:
        """TYPE(PAGESET): every store (each queue's, the catalog's) with its
        files' size and the space they hold on disk; TYPE(DATASET): every log
        extent the control file lists, with the bytes of log it holds;
        TYPE(ALL), the default: both."""
        utype = (cmd.attrs.get("TYPE") or "ALL").upper()
        if utype not in ("PAGESET", "DATASET", "ALL"):
            raise mqsc.MqscSyntaxError(f"DISPLAY USAGE TYPE({utype}): use PAGESET, DATASET "
                                       "or ALL", line=cmd.line, column=1, lines=cmd.lines)
        core = self.core
        rows: list[tuple[str, str, tuple, dict]] = []
        if utype in ("PAGESET", "ALL"):
            stores = [(name, core.config.queue_dir(name), q.curdepth)
                      for name, q in sorted(core.queues.items())]
            stores.append(("*CATALOG", core.config.catalog_dir, ""))
            for name, path, depth in stores:
                size, alloc = _disk_usage(path)
                rows.append(("HMQ8896I", "Display store usage details.",
                             mqsc.USAGE_STORE_ATTRS,
                             {"STORE": name, "TYPE": "PAGESET", "CURDEPTH": depth,
                              "FILESZ": size, "ALLOCSZ": alloc, "PATH": str(path)}))
        if utype in ("DATASET", "ALL"):
            log = core.log
            ext_bytes = log.extent_size
            for e in core.log_management.status():
                end = e["end_lsn"] if e["end_lsn"] is not None else log.end_lsn
                rows.append(("HMQ8897I", "Display log extent usage details.",
                             mqsc.USAGE_EXTENT_ATTRS,
                             {"EXTENT": e["extent"], "TYPE": "DATASET",
                              "STATUS": e["state"].upper(), "FIRSTLSN": e["first_lsn"],
                              "ENDLSN": "" if e["end_lsn"] is None else e["end_lsn"],
                              "USEDSZ": end - e["first_lsn"],
                              "FILESZ": ext_bytes if e["on_disk"] else 0,
                              "ONDISK": e["on_disk"]}))
        out = []
        for msgid, title, order, values in rows:
            if not mqsc.where_matches(cmd.where, {k: mqsc.format_value(v)
                                                  for k, v in values.items()}):
                continue
            shown = mqsc.select_attrs(cmd, order, order[:2], order)
            out.append(mqsc.format_object(msgid, title, [(a, values.get(a, "")) for a in shown]))
        return out or [mqsc.format_message("HMQ8896I", "No usage found.")]


def _disk_usage(path) -> tuple[int, int]:
    """(bytes in the files under ``path``, bytes they hold on disk)."""
    size = alloc = 0
    try:
        entries = list(path.iterdir())
    except OSError:
        return 0, 0
    for entry in entries:
        try:
            st = entry.stat()
        except OSError:
            continue
        if entry.is_file():
            size += st.st_size
            alloc += st.st_blocks * 512
    return size, alloc
