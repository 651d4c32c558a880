"""RECAUTO(YES): the surviving members recover a failed structure by
themselves (docs/qsg.md, "Structure backup and recovery").

``AutoRecovery`` is a thread a member runs beside its peers' watch: every
``interval`` seconds (and at once when ``poke`` is called, on a structure's
change being announced) it looks for structures that are FAILED with
RECAUTO(YES) and recovers each with ``structure_recovery`` as RECOVER
CFSTRUCT(name) TYPE(NORMAL) would, reading every member's log from its
files under the same ``HARBORMQ_HOME``. Every member runs one; the
recovery's advisory lock lets one of them do it, and the others find the
structure ACTIVE. A recovery that cannot run (a member's log missing) is
said once in the operator log and tried again only when the plan changes.

Not here: the recovery itself (``structure_recovery.py``)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

import psycopg

from ..errors import HarbormqError
from . import structure_recovery as sr
from .merge import MemberLog

#: seconds between looks at the structures
INTERVAL = 1.0


class AutoRecovery:
    def __init__(self, conninfo: str, member: str, home: Path | None, scratch: Path,
                 say: Callable[[str, str], None], *, interval: float = INTERVAL,
                 logs: dict[str, MemberLog] | None = None):
        self.conninfo = conninfo
        #: where members' logs are when not under ``home`` (a DR site's copies)
        self.logs = logs
        self.member = member
        self.home = home
        self.scratch = scratch
        self.say = say
        self.interval = interval
        self._stop = threading.Event()
        self._poke = threading.Event()
        self._thread: threading.Thread | None = None
        #: structure -> the reason it could not be recovered, said once
        self._refused: dict[str, str] = {}
        #: structures this member recovered (for tests and DISPLAY)
        self.recovered: list[sr.RecoveryResult] = []

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"qsg-recauto-{self.member}",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._poke.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def poke(self) -> None:
        """Look now (a structure's change was announced)."""
        self._poke.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.look()
            except (psycopg.Error, HarbormqError):
                pass        # PostgreSQL unreachable: the next look tries again
            self._poke.wait(self.interval)
            self._poke.clear()

    def look(self) -> list[sr.RecoveryResult]:
        """Recover every failed RECAUTO(YES) structure this member can."""
        done = []
        with sr.connect(self.conninfo) as conn:
            failed = [r[0] for r in conn.execute(
                "SELECT name FROM hmq_structures WHERE status = 'FAILED' AND recauto "
                "ORDER BY name")]
            for name in failed:
                result = self._recover(conn, name)
                if result is not None:
                    done.append(result)
        self.recovered += done
        return done

    def _recover(self, conn: psycopg.Connection, name: str) -> sr.RecoveryResult | None:
        logs = sr.member_logs(sr.group_members(conn), self.home, self.logs)
        try:
            plan = sr.plan_recovery(conn, name, "NORMAL", logs)
            if not plan.runnable:
                why = "; ".join(f"{m}: {w}" for m, w in sorted(plan.missing.items()))
                if self._refused.get(name) != why:
                    self._refused[name] = why
                    self.say("HMQ5325E", f"structure {name} (RECAUTO(YES)) cannot be recovered "
                                         f"by {self.member}: {why}")
                return None
            self.say("HMQ5322I", "automatic recovery (RECAUTO(YES)) by " + self.member +
                     "\n" + "\n".join(plan.lines()))
            result = sr.recover_structure(conn, plan, self.scratch / name, say=self.say,
                                          logs=logs)
        except sr.StructureRecoveryError:
            return None      # another member is recovering it, or did
        self._refused.pop(name, None)
        self.say("HMQ5324I", f"structure {name} recovered automatically by {self.member}: "
                             f"{result.messages} messages, {result.bytes_read / 1e6:.1f} MB of "
                             f"log merged in {result.seconds} s")
        return result
