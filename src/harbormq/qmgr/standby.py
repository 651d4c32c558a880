"""A standby queue manager kept current by log replay (MQ's backup queue
manager: ``strmqm -r`` replays, ``strmqm -a`` activates). docs/standby.md.

A standby is a queue manager restored from a backup of the primary (same
name, another home or machine) that never ran on its own log. ``replay``
keeps it current from the primary's archive:

1. **Fetch.** Each archived extent that continues the standby's log (its
   first LSN is where the standby's newest extent ends) is copied into the
   standby's log directory, checked against the archive manifest's SHA-256
   and the extent header's queue manager name, and durable before the control
   file lists it. The newest extent of the standby may be a partial copy (a
   cold backup's open extent): it is replaced by the archived extent of the
   same number only if its records are a prefix of it; anything else means
   the standby wrote a log of its own (it was started), and replay stops.
2. **Redo.** Restart's phases 1 to 3 (recovery/restart.py), which write
   nothing to the log: every effect committed in the log is applied to the
   stores, the stores are flushed with the end of the log as their recovery
   LSN. Units of work open at the end stay open: their outcome may be in the
   next extent. Nothing is backed out.
3. **The restart point moves on.** The last checkpoint the primary wrote in
   the replayed log becomes the standby's own (control file), so the next
   round reads from its restart point, not from the backup's.

Between rounds the standby holds its instance lock: it cannot be started,
and accepts no connections. ``activate`` ends replay (SIGTERM to the replay
process, proven by its command line), runs a last round, removes the standby
mark and starts the queue manager: restart backs out what was in flight at
the end of the last archived extent; in-doubt units stay in doubt.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..config import QMConfig
from ..core.engine import QueueManagerCore
from ..core.operator_log import OperatorLog
from ..crashpoints import crash_point
from ..errors import HarbormqError, LogMissing, StandbyError
from ..log import archive
from ..log.checkpoint import read_checkpoint
from ..log.control import ExtentInfo, decode_copy
from ..log.manager import RecoveryLog
from ..log.reader import ExtentReader
from ..log.records import extent_file_name
from ..recovery.restart import Progress, Restart
from .lifecycle import InstanceLock, running_pid

#: how long ``activate`` waits for a replay process to end its round
ACTIVATE_WAIT_S = 120.0


@dataclass
class RoundReport:
    """One replay round: what was fetched and how far the stores are."""
    fetched: list[str] = field(default_factory=list)
    replayed_lsn: int = 0
    records: int = 0
    bytes: int = 0
    effects: int = 0
    checkpoint_lsn: int = 0
    in_flight: int = 0
    in_doubt: int = 0
    seconds: float = 0.0
    #: the newest replayed extent's last record time and when it was archived
    last_record_ns: int = 0
    archived_ns: int = 0

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _archive_entries(archives: list[Path], qm_name: str) -> dict[int, archive.ArchiveEntry]:
    """The archive's entries by extent number (the first path that lists one)."""
    out: dict[int, archive.ArchiveEntry] = {}
    dirs = [archive.archive_dir(base, qm_name) for base in archives]
    if not any(d.is_dir() for d in dirs):
        raise LogMissing(f"the archive of queue manager {qm_name} is not there: "
                         f"{', '.join(map(str, dirs))} (a path unmounted, or lost)",
                         hint="mount the archive again, or give its new place with --from",
                         archive_gone=True)
    for d in dirs:
        for entry, _ in archive.read_manifest(d):
            out.setdefault(entry.number, entry)
    return out


def _records_end(path: Path) -> int:
    """Bytes of ``path`` that hold records (the header included)."""
    reader = ExtentReader(path, newest=True)
    for _rec in reader.records():
        pass
    return reader.end.offset


def _same_prefix(a: Path, b: Path, length: int) -> bool:
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while length > 0:
            n = min(length, archive.COPY_CHUNK)
            if fa.read(n) != fb.read(n):
                return False
            length -= n
    return True


class Standby:
    """Replay rounds for one standby queue manager (the caller holds its lock)."""

    def __init__(self, config: QMConfig, archives: list[Path] | None = None, console=None):
        self.config = config
        #: the operator log, and the console of the command when it has one
        self.oplog = OperatorLog(config.errors_dir, console=console)
        self.say = self.oplog.emit
        self.archives = [Path(a).absolute() for a in archives or []]

    # -- the log: marking and fetching ---------------------------------------------

    def _open_log(self) -> RecoveryLog:
        log = RecoveryLog(self.config.log_dir, self.config.name, self.config.log_dual_dir)
        log.open()
        return log

    def _write_control(self, log: RecoveryLog) -> None:
        log.state.sequence += 1
        log.control.write(log.state)

    def mark(self) -> list[Path]:
        """Make this queue manager a standby of ``self.archives`` (the first
        replay), or check it is one; returns the archive paths to follow."""
        log = self._open_log()
        st = log.state
        if st.log_type != "linear":
            raise StandbyError(f"queue manager {self.config.name} has a circular log: a "
                               "standby replays archived extents, which only a linear log has")
        if st.crestart:
            raise StandbyError(f"queue manager {self.config.name} has a conditional restart "
                               "recorded: a standby cannot replay past a point it will cut",
                               hint=f"'harbormq log crestart {self.config.name} --cancel', or "
                                    "restore it again without --to-time/--to-lsn")
        if st.standby is None:
            if not self.archives:
                raise StandbyError(f"queue manager {self.config.name} is not a standby yet: "
                                   "name the primary's archive with --from DIR")
            if not st.restored_ns:
                raise StandbyError(
                    f"queue manager {self.config.name} was not restored from a backup, or has "
                    "been started since: only a queue manager restored with 'harbormq "
                    "restore' and never started can follow the primary's log",
                    hint="restore a backup of the primary under the same name on the "
                         "standby's machine or home, and do not start it")
            # the archive is there and holds this log (nothing is marked otherwise)
            entry = _archive_entries(self.archives, self.config.name).get(st.active.number)
            if entry is not None:
                self._same_log(st.active, entry)
            # "stale": the log has records the stores may not have yet (set with
            # every extent fetched, cleared when a redo has read to the end)
            st.standby = {"archives": [str(a) for a in self.archives],
                          "since_ns": time.time_ns(), "replayed_lsn": 0, "active_sha": "",
                          "stale": True}
            self._write_control(log)
            self.say("HMQ7301I", f"queue manager {self.config.name} is now a standby: it "
                     f"replays the log archived in {', '.join(map(str, self.archives))} and "
                     f"cannot start until 'harbormq activate {self.config.name}'")
        elif self.archives and [str(a) for a in self.archives] != st.standby["archives"]:
            st.standby["archives"] = [str(a) for a in self.archives]
            self._write_control(log)
        self.archives = [Path(a) for a in st.standby["archives"]]
        return self.archives

    def _same_log(self, active: ExtentInfo, entry: archive.ArchiveEntry) -> None:
        if entry.first_lsn != active.first_lsn:
            raise StandbyError(
                f"the archive's {entry.name} starts at LSN {entry.first_lsn}, the standby's "
                f"at LSN {active.first_lsn}: the archive holds the log of another queue "
                f"manager named {self.config.name}",
                hint="name the primary's own archive with --from")

    def _cuts(self, own: list) -> list[dict]:
        """The conditional restarts of the primary (``harbormq log crestart``)
        that the archive's copies of its control file record and the standby's
        own log does not (those were carried out before its backup)."""
        seen = {(d["from"], d["to"]) for d in own}
        cuts = []
        for base in self.archives:
            path = archive.archive_dir(base, self.config.name) / archive.CONTROL_COPY
            try:
                known = decode_copy(path.read_bytes())
            except (OSError, ValueError):
                continue
            cuts += [d for d in known.discarded if (d["from"], d["to"]) not in seen]
        return cuts

    def _refuse_cut(self, at: int, replayed: int) -> None:
        beyond = (f"; it has already replayed log the primary gave up (to LSN {replayed})"
                  if replayed > at else "")
        raise StandbyError(
            f"the primary's log was cut at LSN {at} by a conditional restart and goes on "
            f"after a gap that a standby cannot replay across{beyond}",
            hint="take a new backup of the primary and restore the standby from it")

    def fetch(self, log: RecoveryLog, report: RoundReport) -> None:
        """Bring every archived extent that continues the log into it. Nothing
        is fetched from a log the primary cut (conditional restart) after the
        standby's backup: a standby cannot follow past a cut."""
        st = log.state
        name = self.config.name
        entries = _archive_entries(self.archives, name)
        cuts = self._cuts(st.discarded)
        if cuts:
            self._refuse_cut(min(d["from"] for d in cuts), st.standby["replayed_lsn"])
        while True:
            active = st.active
            entry = entries.get(active.number)
            if entry is None:
                later = sorted(n for n in entries if n > active.number)
                if later:
                    raise StandbyError(
                        f"the archive holds {extent_file_name(later[0])} and later, but not "
                        f"{extent_file_name(active.number)}, the extent the standby is in: "
                        "a gap it cannot replay across",
                        hint="put the missing extent back into the archive, or restore the "
                             "standby again from a newer backup")
                return          # the primary has not archived the extent we are in
            self._same_log(active, entry)
            if entry.cut:
                self._refuse_cut(entry.end_lsn, st.standby["replayed_lsn"])
            self._check_active(log, active, entry)
            nxt = next((e for e in entries.values() if e.first_lsn == entry.end_lsn), None)
            if nxt is None:
                if any(n > active.number for n in entries):
                    raise StandbyError(
                        f"no archived extent continues the log at LSN {entry.end_lsn} (the "
                        f"end of {entry.name}), yet the archive holds later ones: a gap "
                        "the standby cannot replay across",
                        hint="restore the standby again from a newer backup")
                return
            if nxt.cut:
                self._refuse_cut(nxt.end_lsn, st.standby["replayed_lsn"])
            for _, directory in log.healthy_copies():
                archive.recall(self.archives, name, nxt.number, nxt.first_lsn, directory,
                               self.say)
            active.state, active.end_lsn, active.archived = "full", entry.end_lsn, True
            st.extents.append(ExtentInfo(number=nxt.number, first_lsn=nxt.first_lsn,
                                         state="active"))
            st.next_extent_number = max(st.next_extent_number, nxt.number + 1)
            st.standby["active_sha"] = nxt.sha256
            st.standby["stale"] = True
            crash_point("standby.after_fetch")
            self._write_control(log)        # after the extent is durable
            report.fetched.append(nxt.name)
            report.last_record_ns, report.archived_ns = nxt.last_ns, nxt.archived_ns

    def _check_active(self, log: RecoveryLog, active: ExtentInfo,
                      entry: archive.ArchiveEntry) -> None:
        """The standby's newest extent is the archived one, or a prefix of it
        (then replaced by it, in every copy of a dual log); else the standby
        has written a log of its own."""
        st = log.state
        if st.standby.get("active_sha") == entry.sha256:
            return
        copies = [path for _, path in log.extent_copies(active)]
        stale = [p for p in copies if archive.file_sha256(p) != entry.sha256]
        if stale or not copies:
            good = next((src for src, e in archive.find(self.archives, self.config.name,
                                                        active.number)
                         if e.sha256 == entry.sha256 and src.exists()
                         and archive.file_sha256(src) == entry.sha256), None)
            if good is None:
                raise LogMissing(f"no archived copy of {entry.name} has the SHA-256 its "
                                 "manifest names", path=str(self.archives[0]))
            for path in stale:
                if not _same_prefix(path, good, _records_end(path)):
                    raise StandbyError(
                        f"the standby's log extent {path} differs from the primary's archived "
                        f"copy {good}: queue manager {self.config.name} has written a log of "
                        "its own since it was restored (it was started), and cannot follow "
                        "the primary any more",
                        hint="restore the standby again from a backup of the primary")
            stale_dirs = {p.parent for p in stale} if copies else \
                {d for _, d in log.healthy_copies()}
            for directory in sorted(stale_dirs):
                archive.recall(self.archives, self.config.name, active.number,
                               active.first_lsn, directory, self.say)
            st.standby["stale"] = True
        st.standby["active_sha"] = entry.sha256
        self._write_control(log)

    # -- one round ---------------------------------------------------------------------

    def replay_round(self, progress: Progress | None = None) -> RoundReport:
        """Fetch, then redo to the end of the log (the caller holds the lock)."""
        t0 = time.monotonic()
        report = RoundReport()
        log = self._open_log()
        if log.state.standby is None:
            raise StandbyError(f"queue manager {self.config.name} is not a standby")
        self.fetch(log, report)
        log.close()
        mark = log.state.standby
        if mark.get("stale", True):
            asyncio.run(self._redo(report, progress))
        else:             # nothing new: the stores are where the last redo left them
            report.replayed_lsn = mark["replayed_lsn"]
        report.seconds = time.monotonic() - t0
        return report

    async def _redo(self, report: RoundReport, progress: Progress | None) -> None:
        # restart's own messages go to the operator log only: one line a round
        # on the console is the round's report
        core = QueueManagerCore(self.config, OperatorLog(self.config.errors_dir))
        core.loop = asyncio.get_running_loop()
        restart = Restart(core, progress, replaying=True)
        try:
            end = restart.redo_only().end_lsn
            self._stamp_stores(core, end)
            st = core.log.state
            if restart.last_checkpoint_lsn:
                lsn = restart.last_checkpoint_lsn
                table = read_checkpoint(lambda at: next(core.log.read_from(at), None), lsn)
                media = [mp["replay_from"] for mp in table.get("media", {}).values()]
                st.checkpoint_lsn, st.restart_lsn = lsn, table["restart_lsn"]
                st.media_lsn = min(media) if media else st.media_lsn
            st.standby["replayed_lsn"] = end
            st.standby["stale"] = False
            self._write_control(core.log)
            r = restart.report
            report.replayed_lsn, report.records = end, r.records_replayed
            report.bytes, report.effects = r.bytes_replayed, r.effects_redone
            report.checkpoint_lsn = st.checkpoint_lsn
            report.in_flight = sum(1 for u in core.uows.values()
                                   if u.state in ("active", "backing_out"))
            report.in_doubt = sum(1 for u in core.uows.values() if u.state == "prepared")
        finally:
            core.log.close()
            core.close_stores()

    @staticmethod
    def _stamp_stores(core: QueueManagerCore, end: int) -> None:
        """Redo read the whole log below ``end``: every store holds each effect
        committed below it, the ones redo did not touch too. Recorded, so that
        the next round (and the activating start) finds no store behind the
        restart point the primary's checkpoint names."""
        for q in core.queues.values():
            if not q.damaged and q.store.recovery_lsn < end:
                q.store.apply({}, end, q.index_type, q.next_seq)
        if core.catalog_store is not None and core.catalog_store.recovery_lsn < end:
            core.catalog_store.apply({}, end)

    def unmark(self) -> None:
        log = self._open_log()
        if log.state.standby is not None:
            log.state.standby = None
            self._write_control(log)


# -- the commands ----------------------------------------------------------------------

def standby_mark(config: QMConfig) -> dict | None:
    """The control file's standby mark (None also when it cannot be read:
    whatever reads it next reports that)."""
    try:
        log = RecoveryLog(config.log_dir, config.name, config.log_dual_dir)
        return log.open(repair=False).standby
    except HarbormqError:
        return None


def refuse_if_standby(config: QMConfig) -> None:
    mark = standby_mark(config)
    if mark is not None:
        raise StandbyError(
            f"queue manager {config.name} is a standby kept current by log replay from "
            f"{', '.join(mark['archives'])}: it cannot be started",
            hint=f"make it the active queue manager with 'harbormq activate {config.name}'")


def replay(config: QMConfig, archives: list[Path], *, follow: bool, interval: float = 1.0,
           on_round: Callable[[RoundReport], None] | None = None,
           on_error: Callable[[HarbormqError], None] | None = None,
           progress: Progress | None = None, console=None) -> RoundReport:
    """``harbormq replay QM --from DIR [--follow]``: one round, or rounds every
    ``interval`` seconds until SIGTERM or SIGINT (``activate`` sends SIGTERM).
    In follow mode an archive that cannot be read is reported and retried;
    a standby that cannot follow at all stops it."""
    lock = InstanceLock(config)
    lock.acquire()
    stop = {"asked": False}

    def asked_to_stop(signum, frame):
        stop["asked"] = True

    old = {s: signal.signal(s, asked_to_stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        standby = Standby(config, archives, console=console)
        standby.mark()
        last = RoundReport()
        failing = None
        while True:
            try:
                last = standby.replay_round(progress)
                if on_round is not None and (last.fetched or not follow):
                    on_round(last)
                failing = None
            except StandbyError:
                raise
            except (HarbormqError, OSError) as exc:
                if not follow:
                    raise
                err = exc if isinstance(exc, HarbormqError) else HarbormqError(repr(exc))
                if failing != err.message and on_error is not None:
                    on_error(err)
                failing = err.message
            if not follow:
                return last
            deadline = time.monotonic() + interval
            while not stop["asked"] and time.monotonic() < deadline:
                time.sleep(0.05)
            if stop["asked"]:
                standby.say("HMQ7303I", f"replay of standby queue manager {config.name} ended "
                            f"at LSN {last.replayed_lsn or '-'}")
                return last
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        lock.release()


def _replay_process(config: QMConfig) -> int | None:
    """The pid of a ``harbormq replay`` of this queue manager holding its lock."""
    pid = running_pid(config)
    if pid is None or pid <= 1:
        return None
    import psutil  # here, not at import: it adds 50 ms of CPU to every start
    try:
        cmdline = psutil.Process(pid).cmdline()
    except psutil.Error:
        return None
    if "replay" in cmdline and config.name in cmdline and \
            any("harbormq" in part for part in cmdline):
        return pid
    raise StandbyError(f"queue manager {config.name} is held by process {pid}, which is not "
                       "its replay", hint="wait for that command to end and run activate again")


def activate(config: QMConfig, *, force: bool = False, console=None) -> RoundReport:
    """``harbormq activate QM``: end replay, replay what is left in the archive,
    remove the standby mark. The caller then starts the queue manager.

    If the archive is not there any more (it went with the primary's site),
    the standby is activated with the log it has (HMQ7304W). Any other failure
    of the last round (an extent that fails its hash, a full disk) refuses
    activation, unless ``force``: the archive holds log the standby would
    lose. A standby that cannot follow the primary's log (it was cut, or the
    standby wrote its own) is never activated: it holds log the primary gave
    up, or lacks log it kept."""
    if standby_mark(config) is None:
        raise StandbyError(f"queue manager {config.name} is not a standby",
                           hint=f"start it with 'harbormq start {config.name}'")
    pid = _replay_process(config)
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + ACTIVATE_WAIT_S
        while running_pid(config) is not None:
            if time.monotonic() > deadline:
                raise StandbyError(f"the replay of {config.name} (process {pid}) did not end "
                                   f"within {ACTIVATE_WAIT_S:.0f} s",
                                   hint="it ends after its round: run activate again")
            time.sleep(0.02)
    lock = InstanceLock(config)
    lock.acquire()
    try:
        standby = Standby(config, console=console)
        standby.mark()
        try:
            last = standby.replay_round()
        except StandbyError:
            raise
        except (HarbormqError, OSError) as exc:
            gone = isinstance(exc, HarbormqError) and exc.facts.get("archive_gone")
            if not gone and not force:
                raise StandbyError(
                    f"the last replay round of standby {config.name} failed ({exc}); "
                    "nothing was activated", hint="make the archive readable and run "
                    "activate again, or add --force to activate with the log replayed so far "
                    "(what the archive holds beyond it is then lost)") from None
            # the start redoes any extent fetched and not yet replayed
            standby.say("HMQ7304W", f"the last replay round of {config.name} before "
                        f"activation failed ({exc}); it is activated with the log it has")
            last = RoundReport(replayed_lsn=standby_mark(config)["replayed_lsn"])
        standby.unmark()
        standby.say("HMQ7302I", f"standby queue manager {config.name} activated: replay "
                    "ended, it starts as the active queue manager")
        return last
    finally:
        lock.release()
