"""The crash harness (docs/reliability.md): SIGKILL the queue manager at its named crash
points and at random moments under concurrent load, restart, and check what
the applications were promised against what the queue manager holds.

The load is tests/support/crash_workload.py, run as a child process; it journals every
call before ("attempt") and after ("acked") it. After each kill the harness
restarts the queue manager in this process (``QueueManager.open``) and checks:

* every acknowledged persistent put not consumed by an acknowledged get-commit
  is there exactly once, across all queues, with its body, queue and priority;
* nothing from a UOW whose commit was not attempted, or that was backed out, is
  visible (also checked live: a consumer never gets such a message), and
  nothing consumed by an acknowledged get-commit comes back;
* a message whose commit (or get-commit) was attempted but not acknowledged is
  there at most once; a get UOW that did not commit gives its messages back
  (backout count possibly incremented, never decremented);
* per producer, queue and priority the messages remaining are in put order,
  priorities are in delivery order, and across runs FIFO holds per priority;
* UOWs prepared (acknowledged) and not resolved are in doubt, their puts are
  invisible and their gets locked (UNCOM and LOCKED match); resolving them
  (some commit, some back out) has the expected effect;
* non-persistent messages are gone; restart reports no log/store mismatch
  (HMQ7512W); restarting twice, or crashing during restart, changes nothing;
* the controlled shutdown that ends each verification leaves nothing to redo
  (its checkpoint's restart point is the checkpoint, or an in-doubt UOW).

What a check finds unknown (an attempted, unacknowledged commit) is settled
by what the restart shows, and the next cycle starts from that exact model.

The named crash points and the restart scenarios run on a circular and on a
linear log. ``--crash-runs N`` sets the number of random SIGKILLs (default 50,
split between a circular and a linear log); ``HARBORMQ_CRASH_SEED`` fixes the seed (printed on
failure and in the summary line with the number of SIGKILLs).
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support import crash_workload as wl

from harbormq import QueueManager
from harbormq.crashpoints import POINTS

WORKLOAD = Path(wl.__file__).resolve()

DEFAULT_RANDOM_KILLS = 50
SEED = int(os.environ.get("HARBORMQ_CRASH_SEED") or random.randrange(1 << 30))
KILLED = -signal.SIGKILL

# outcome of a put, of the gets of a message
YES, MAYBE, NO, INDOUBT = "committed", "maybe committed", "not committed", "in doubt"
STAYS, MAYBE_GONE, LOCKED, GONE = "not consumed", "maybe consumed", "locked", "consumed"
_GET_RANK = {STAYS: 0, MAYBE_GONE: 1, LOCKED: 2, GONE: 3}

STATS: Counter = Counter()
UOW_OPS = ("commit", "backout", "prepare", "get-commit", "get-backout", "get-prepare")


@pytest.fixture(scope="module", autouse=True)
def _report_kills(request):
    yield
    pm = request.config.pluginmanager
    tr = pm.get_plugin("terminalreporter")
    capture = pm.get_plugin("capturemanager")
    text = (f"crash harness: {sum(STATS.values())} SIGKILLs "
            f"({', '.join(f'{k} {v}' for k, v in sorted(STATS.items()))}); seed {SEED}")
    if tr is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            tr.write_line("")
            tr.write_line(text)


# ------------------------------------------------------------------------------ model

@dataclass
class Put:
    wid: str
    q: str
    prio: int
    pers: bool
    body: bytes
    u: str | None              # UOW name, None for an auto-commit put
    acked: bool = False


@dataclass
class Uow:
    u: str
    kind: str                  # "put" | "get"
    qmu: int                   # the engine's UOW id
    ids: list = field(default_factory=list)   # wids put (attempted) / got
    prepare: str | None = None  # None | "attempt" | "acked" | "error"
    commit: str | None = None
    backout: str | None = None
    boc: dict = field(default_factory=dict)   # get UOWs: wid -> backout count when got


@dataclass
class Model:
    """What is known to be on the queue manager after the last verification."""
    present: dict = field(default_factory=dict)      # wid -> backout count (visible or locked)
    msgs: dict = field(default_factory=dict)         # wid -> Put, for present and in-doubt
    indoubt: dict = field(default_factory=dict)      # engine UOW id -> Uow, still in doubt
    locked_by: dict = field(default_factory=dict)    # wid -> UOW name of an in-doubt get

    def carried(self, name: str) -> Uow | None:
        for u in self.indoubt.values():
            if u.u == name:
                return u
        return None


class Cycle:
    """The journals of the runs since the last verification, absorbed in order,
    with the isolation checks that the journal order alone can decide."""

    def __init__(self, model: Model):
        self.model = model
        self.puts: dict[str, Put] = {}
        self.uows: dict[str, Uow] = {}
        self.gets: dict[str, list[str]] = defaultdict(list)    # wid -> get UOW names
        self.acked_get_backouts: Counter = Counter()
        self.holder: dict[str, str] = {}        # wid -> get UOW holding it (live)
        self.consumed: dict[str, str] = {}      # wid -> get UOW whose commit was attempted
        self.violations: list[str] = []
        self.ready_warnings: list[str] = []
        self.events = 0

    def uow(self, name: str) -> Uow | None:
        return self.uows.get(name) or self.model.carried(name)

    def absorb(self, path: Path) -> None:
        for ev in read_journal(path):
            self.events += 1
            self._event(ev, path.name)

    def _event(self, ev: dict, src: str) -> None:
        t = ev["t"]
        if t == "put-attempt":
            w = ev["id"]
            if w in self.puts or w in self.model.msgs:
                self.violations.append(f"{src}: message id {w} put twice (harness bug)")
            p = Put(w, ev["q"], ev["prio"], ev["pers"], ev["body"].encode(), ev["u"])
            self.puts[w] = p
            if p.u is not None:
                self.uows[p.u].ids.append(w)
        elif t == "put-acked":
            self.puts[ev["id"]].acked = True
        elif t == "begin":
            self.uows[ev["u"]] = Uow(ev["u"], ev["kind"], ev["qmu"])
        elif t == "got":
            self._got(ev, src)
        elif t.rpartition("-")[0] in UOW_OPS:
            if t.endswith("-error"):
                self.violations.append(f"{src}: the workload hit an error: {ev}")
            self._uow_event(t, ev)
        elif t == "failure" or t.endswith("-error"):
            self.violations.append(f"{src}: the workload hit an error: {ev}")
        elif t == "ready":
            self.ready_warnings += [w for w in ev.get("warnings", []) if "HMQ7512W" in w
                                    or "does not match" in w]

    def _uow_event(self, t: str, ev: dict) -> None:
        op, _, phase = t.rpartition("-")
        u = self.uow(ev["u"])
        if u is None:
            self.violations.append(f"journal names an unknown UOW: {ev}")
            return
        setattr(u, op.removeprefix("get-"), phase)
        if u.kind != "get":
            return
        if op in ("get-commit", "get-backout") and phase == "attempt":
            for w in u.ids:
                if self.holder.get(w) == u.u:
                    del self.holder[w]
                if op == "get-commit":
                    self.consumed[w] = u.u
        elif op == "get-commit" and phase == "error":
            for w in u.ids:
                self.consumed.pop(w, None)
        elif op == "get-backout" and phase == "acked":
            for w in u.ids:
                self.acked_get_backouts[w] += 1

    def _got(self, ev: dict, src: str) -> None:
        u = self.uows[ev["u"]]
        w = ev["id"]
        bad = self.violations.append
        if w is None:
            bad(f"{src}: UOW {u.u} got a message without a wid property: {ev}")
            return
        u.ids.append(w)
        u.boc[w] = ev["boc"]
        self.gets[w].append(u.u)
        p = self.puts.get(w)
        if p is None:
            if w not in self.model.present:
                bad(f"{src}: UOW {u.u} got {w}, which is not on any queue: consumed before, "
                    "never committed, or put by a UOW still in doubt")
            elif w in self.model.locked_by:
                bad(f"{src}: UOW {u.u} got {w}, which is locked by in-doubt UOW "
                    f"{self.model.locked_by[w]}")
        elif p.u is not None:
            pu = self.uow(p.u)
            if pu.commit is None:
                bad(f"{src}: dirty read: UOW {u.u} got {w} of UOW {p.u} before its commit "
                    f"was attempted (backout={pu.backout}, prepare={pu.prepare})")
        if w in self.consumed:
            bad(f"{src}: {w} delivered again to {u.u} after UOW {self.consumed[w]} "
                "committed its get")
        if w in self.holder:
            bad(f"{src}: {w} got by {u.u} while UOW {self.holder[w]} holds it")
        self.holder[w] = u.u


def read_journal(path: Path) -> list[dict]:
    data = path.read_bytes() if path.exists() else b""
    lines = data.split(b"\n")
    out = []
    for i, line in enumerate(lines):
        if not line:
            continue
        try:
            out.append(json.loads(line))
        except ValueError:
            if i == len(lines) - 1:     # torn last line of a killed process
                break
            raise AssertionError(f"{path}: damaged journal line {i + 1}: "
                                 f"{line[:200]!r}") from None
    return out


# ------------------------------------------------------------------------------ harness

class Child:
    def __init__(self, proc: subprocess.Popen, journal: Path, output: Path, tag: str,
                 crash_at: str | None):
        self.proc = proc
        self.journal = journal
        self.output = output
        self.tag = tag
        self.crash_at = crash_at

    def has(self, event: str) -> bool:
        try:
            return f'"t":"{event}"'.encode() in self.journal.read_bytes()
        except FileNotFoundError:
            return False

    def wait_for(self, event: str, timeout: float = 30) -> bool:
        """True once the journal holds ``event``; False if the child ended first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.has(event):
                return True
            if self.proc.poll() is not None:
                return self.has(event)
            time.sleep(0.005)
        raise AssertionError(f"child {self.tag} did not reach {event!r} in {timeout}s\n"
                             + self.tail())

    def wait(self, timeout: float = 120) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"child {self.tag} did not end in {timeout}s\n"
                                 + self.tail()) from None

    def kill(self) -> int:
        self.proc.send_signal(signal.SIGKILL)
        return self.proc.wait(30)

    def tail(self) -> str:
        out = self.output.read_text(errors="replace")[-3000:] if self.output.exists() else ""
        return f"--- output of {self.tag} (crash_at={self.crash_at}) ---\n{out}"


class CrashHarness:
    def __init__(self, qm: str, home: Path, env: dict, workdir: Path, open_qm, *,
                 seed: int, carry_indoubt: bool = False, producers: int = 3,
                 consumers: int = 2):
        self.qm = qm
        self.home = home
        self.env = env
        self.workdir = workdir
        self.open_qm = open_qm
        self.seed = seed
        self.rng = random.Random(seed)
        self.carry_indoubt = carry_indoubt
        self.producers = producers
        self.consumers = consumers
        self.model = Model()
        self.run_no = 0
        self.journals: list[Path] = []
        self.verifications = 0
        self.last_report = None

    # -- children ---------------------------------------------------------------------

    def spawn(self, *extra: str, crash_at: str | None = None, seconds: float = 60,
              end: str = "close") -> Child:
        self.run_no += 1
        tag = f"r{self.run_no}"
        journal = self.workdir / f"{self.qm}-{tag}.jsonl"
        output = self.workdir / f"{self.qm}-{tag}.out"
        cmd = [sys.executable, str(WORKLOAD), "--qm", self.qm, "--journal", str(journal),
               "--producers", str(self.producers), "--consumers", str(self.consumers),
               "--seconds", str(seconds), "--seed", str(self.rng.randrange(1 << 30)),
               "--tag", tag, "--end", end, *extra]
        env = dict(self.env)
        if crash_at:
            env["HARBORMQ_CRASH_AT"] = crash_at
        with open(output, "wb") as out:
            proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
        self.journals.append(journal)
        return Child(proc, journal, output, tag, crash_at)

    def restart_child(self, *, crash_at: str | None = None, snapshot: bool = False,
                      end: str = "close") -> Child:
        extra = ["--restart-only"] + (["--snapshot"] if snapshot else [])
        return self.spawn(*extra, crash_at=crash_at, end=end)

    def expect_killed(self, child: Child, what: str, kind: str) -> None:
        rc = child.wait()
        assert rc == KILLED, (f"{what}: expected the child to die by SIGKILL, it exited with "
                              f"{rc}\n{child.tail()}")
        STATS[kind] += 1

    def random_kill(self) -> None:
        """Start the workload and SIGKILL it at a random moment: usually under load,
        sometimes while it restarts."""
        child = self.spawn()
        if self.rng.random() < 0.15:
            child.wait_for("opening")
            time.sleep(self.rng.random() * 0.03)
        else:
            assert child.wait_for("ready"), child.tail()
            time.sleep(0.02 + self.rng.random() * 0.6)
        if child.proc.poll() is not None:
            raise AssertionError(f"workload ended before the kill: rc {child.proc.returncode}"
                                 f"\n{child.tail()}")
        rc = child.kill()
        assert rc == KILLED, child.tail()
        STATS["random"] += 1

    # -- verification ---------------------------------------------------------------------

    def fail(self, violations: list[str], where: str) -> None:
        shown = "\n  ".join(violations[:40])
        more = f"\n  ... and {len(violations) - 40} more" if len(violations) > 40 else ""
        pytest.fail(f"{where} (queue manager {self.qm}, seed {self.seed}, run r{self.run_no}, "
                    f"journals {[str(j) for j in self.journals]}):\n  {shown}{more}",
                    pytrace=False)

    def verify(self, *, resolve_all: bool | None = None) -> dict:
        """Restart in this process and check everything against the journals since
        the last verification; resolve in-doubt UOWs; update the model."""
        cycle = Cycle(self.model)
        for j in self.journals:
            cycle.absorb(j)
        try:
            qm = self.open_qm(self.qm)
        except Exception as exc:
            raise AssertionError(f"restart of {self.qm} failed after run r{self.run_no} "
                                 f"(seed {self.seed}, journals "
                                 f"{[str(j) for j in self.journals]}): {exc}") from exc
        try:
            self.last_report = qm.restart_report
            snap = self._verify_open(qm, cycle, resolve_all)
            qm.close(timeout=30)
            self._check_shutdown_checkpoint(qm)
        finally:
            if not qm.closed:
                qm.close(timeout=30)
        self.journals = []
        self.verifications += 1
        return snap

    def _verify_open(self, qm: QueueManager, cycle: Cycle, resolve_all: bool | None) -> dict:
        model = self.model
        v = list(cycle.violations)
        v += [f"restart inconsistency: {w}" for w in cycle.ready_warnings]
        v += [f"restart inconsistency: {w}" for w in qm.restart_report.warnings
              if "HMQ7512W" in w or "does not match" in w]

        # -- in-doubt UOWs ------------------------------------------------------------------
        in_doubt = set(qm.in_doubt())
        cands: dict[int, Uow] = {}
        must: set[int] = set()
        for qmu, u in model.indoubt.items():
            cands[qmu] = u
            must.add(qmu)
        for u in cycle.uows.values():
            if u.prepare is None or u.commit == "acked" or u.backout == "acked":
                continue
            if u.qmu in cands:
                v.append(f"two UOWs that may be in doubt share engine id {u.qmu}: "
                         f"{cands[u.qmu].u} and {u.u}")
            cands[u.qmu] = u
            if u.prepare == "acked" and u.commit is None and u.backout is None:
                must.add(u.qmu)
        for qmu in sorted(in_doubt - cands.keys()):
            v.append(f"UOW {qmu} is in doubt after restart, but no application prepared it "
                     "without resolving it")
        for qmu in sorted(must - in_doubt):
            u = cands[qmu]
            v.append(f"UOW {u.u} (engine id {qmu}) was prepared (acknowledged) and not "
                     f"resolved, but is not in doubt after restart (ids {u.ids})")
        live = {qmu: cands[qmu] for qmu in in_doubt & cands.keys()}
        live_names = {u.u: qmu for qmu, u in live.items()}

        # -- what each message should be ----------------------------------------------------
        def info(w: str) -> Put:
            return cycle.puts.get(w) or model.msgs[w]

        def put_status(p: Put) -> str:
            if p.u is None:
                return YES if p.acked else MAYBE
            u = cycle.uow(p.u)
            if u.u in live_names:
                return INDOUBT
            if not p.acked:
                return NO
            if u.prepare is not None:        # prepared once, no longer in doubt
                return YES if u.commit is not None else NO
            if u.commit == "acked":
                return YES
            return MAYBE if u.commit is not None else NO

        def get_uow_status(g: Uow) -> str:
            if g.u in live_names:
                return LOCKED
            if g.prepare is not None:
                return GONE if g.commit is not None else STAYS
            if g.commit == "acked":
                return GONE
            return MAYBE_GONE if g.commit is not None else STAYS

        def get_status(w: str) -> tuple[str, list[str]]:
            names = list(cycle.gets.get(w, []))
            if w in model.locked_by:
                names.insert(0, model.locked_by[w])
            st = STAYS
            for name in names:
                s = get_uow_status(cycle.uow(name))
                if _GET_RANK[s] > _GET_RANK[st]:
                    st = s
            return st, names

        universe = set(model.present)
        universe |= {w for w, p in cycle.puts.items() if p.pers}
        for u in model.indoubt.values():
            if u.kind == "put":
                universe |= set(u.ids)
        expect: dict[str, tuple[int, int, str]] = {}
        exp_locked: Counter = Counter()
        exp_uncom: Counter = Counter()
        for w in universe:
            p = info(w)
            ps = YES if w in model.present else put_status(p)
            gs, got_by = get_status(w)
            why = f"put {ps}" + (f" (UOW {p.u})" if p.u else " (auto-commit)") + \
                  (f", gets: {gs} by {got_by}" if got_by else "")
            if ps in (NO, INDOUBT) and gs in (GONE, LOCKED):
                v.append(f"{w}: {why}: a message that never committed was consumed")
            if ps == INDOUBT:
                expect[w] = (0, 0, why)
                exp_uncom[p.q] += 1
            elif ps == NO or gs == GONE:
                expect[w] = (0, 0, why)
            elif gs == LOCKED:
                expect[w] = (0, 0, why)
                exp_locked[p.q] += 1
            elif gs == MAYBE_GONE or ps == MAYBE:
                expect[w] = (0, 1, why)
            else:
                expect[w] = (1, 1, why)

        # -- snapshot A: before resolving -----------------------------------------------------
        seen_a = self._browse(qm)
        v += self._check_snapshot(seen_a, expect, info, cycle, "after restart")
        for name in qm.queue_names():
            st = qm.queue_status(name)
            if st["LOCKED"] != exp_locked[name]:
                v.append(f"{name}: LOCKED is {st['LOCKED']}, expected {exp_locked[name]} "
                         "(gets of in-doubt UOWs)")
            if st["UNCOM"] != exp_uncom[name]:
                v.append(f"{name}: UNCOM is {st['UNCOM']}, expected {exp_uncom[name]} "
                         "(persistent puts of in-doubt UOWs)")
        if v:
            self.fail(v, "after restart")

        # -- resolve in-doubt UOWs, some commit, some back out --------------------------------
        carry = self.carry_indoubt if resolve_all is None else not resolve_all
        decisions: dict[int, bool] = {}
        for qmu in sorted(live):
            if carry and qmu not in model.indoubt and self.rng.random() < 0.5:
                continue                     # stays in doubt through the next cycle
            decisions[qmu] = self.rng.random() < 0.5
        for qmu, commit in decisions.items():
            qm.resolve(qmu, commit=commit)
        kept = {qmu: u for qmu, u in live.items() if qmu not in decisions}
        if set(qm.in_doubt()) != set(kept):
            v.append(f"after resolving {sorted(decisions)}, in doubt: {sorted(qm.in_doubt())}, "
                     f"expected {sorted(kept)}")
        count_a = Counter(w for w, _, _ in seen_a)
        boc_a = {w: m.backout_count for w, _, m in seen_a}
        expect_b: dict[str, tuple[int, int, str]] = {}
        for w in expect:
            n = count_a.get(w, 0)
            expect_b[w] = (n, n, "unchanged by resolution")
        bump: dict[str, int] = {}
        for qmu, commit in decisions.items():
            u = live[qmu]
            how = "committed" if commit else "backed out"
            for w in u.ids:
                p = info(w)
                if not p.pers:
                    continue
                if u.kind == "put":
                    n = 1 if commit else 0
                else:
                    n = 0 if commit else 1
                    if not commit:
                        bump[w] = u.boc[w] + 1
                expect_b[w] = (n, n, f"{u.kind} UOW {u.u} resolved: {how}")
        seen_b = self._browse(qm)
        v += self._check_snapshot(seen_b, expect_b, info, cycle, "after resolving in-doubt UOWs",
                                  boc_before=boc_a, boc_set=bump)
        if v:
            self.fail(v, "after resolving in-doubt UOWs")

        # -- the model for the next cycle ---------------------------------------------------
        present = {w: m.backout_count for w, _, m in seen_b}
        locked_by = {}
        for u in kept.values():
            if u.kind == "get":
                for w in u.ids:
                    if info(w).pers:
                        present[w] = u.boc[w]
                        locked_by[w] = u.u
        msgs = {w: info(w) for w in present}
        for u in kept.values():
            if u.kind == "put":
                u.ids = [w for w in u.ids if info(w).pers]
                msgs.update({w: info(w) for w in u.ids})
            else:
                u.ids = [w for w in u.ids if info(w).pers]
        self.model = Model(present=present, msgs=msgs, indoubt=kept, locked_by=locked_by)
        return wl.snapshot(qm)

    def _check_shutdown_checkpoint(self, qm: QueueManager) -> None:
        """A controlled shutdown flushes every store, so its checkpoint leaves nothing
        to redo: the restart point is the checkpoint itself, or the first record of
        a UOW still in doubt. Anything older pins the log for no reason (and makes the
        next restart begin its redo in the middle of units of work)."""
        cp = qm.core.last_checkpoint
        firsts = [u.first_lsn for u in qm.core.uows.values() if u.first_lsn]
        expected = min([cp["begin_lsn"], *firsts])
        if cp["restart_lsn"] != expected:
            self.fail([f"the shutdown checkpoint (begin LSN {cp['begin_lsn']}) has restart "
                       f"LSN {cp['restart_lsn']}, expected {expected} (in-doubt UOWs start "
                       f"at {sorted(firsts)}); the store recovery LSNs it used: "
                       f"{ {n: i['recovery_lsn'] for n, i in cp['stores'].items()} }"],
                      "after a controlled shutdown")

    def _browse(self, qm: QueueManager) -> list[tuple]:
        """(wid, queue, message) of every visible message, queue by queue in delivery order."""
        out = []
        for name in qm.queue_names():
            for m in qm.browse(name):
                out.append((m.properties.get("wid"), name, m))
        return out

    def _check_snapshot(self, seen: list[tuple], expect: dict, info, cycle: Cycle, when: str,
                        *, boc_before: dict | None = None, boc_set: dict | None = None
                        ) -> list[str]:
        v = []
        model = self.model
        counts = Counter()
        for w, q, m in seen:
            counts[w] += 1
            if w is None:
                v.append(f"{when}: a message without wid on {q}: {m!r:.200}")
                continue
            if not m.persistent:
                v.append(f"{when}: non-persistent message {w} on {q} survived the restart")
                continue
            if w not in expect:
                v.append(f"{when}: {w} on {q} should not exist: "
                         + ("it was consumed or never committed in an earlier cycle"
                            if w not in cycle.puts else "unknown message"))
                continue
            p = info(w)
            if q != p.q or m.priority != p.prio:
                v.append(f"{when}: {w} is on {q} priority {m.priority}, was put to {p.q} "
                         f"priority {p.prio}")
            if m.body != p.body:
                v.append(f"{when}: {w} has a damaged body: {m.body[:60]!r}...")
            if boc_before is None:
                prev = model.present.get(w, 0)
                lo = prev + cycle.acked_get_backouts.get(w, 0)
                hi = prev + len(cycle.gets.get(w, [])) + 1
            elif w in boc_set:             # a get backed out by resolving its UOW
                lo = hi = boc_set[w]
            else:
                lo = hi = boc_before.get(w, 0)
            if not lo <= m.backout_count <= hi:
                v.append(f"{when}: {w} has backout count {m.backout_count}, expected "
                         f"{lo}..{hi}")
        for w, c in counts.items():
            if w in expect and c > 1:
                v.append(f"{when}: {w} is there {c} times (duplicate)")
        for w, (lo, hi, why) in expect.items():
            c = counts.get(w, 0)
            if c < lo:
                v.append(f"{when}: {w} is missing ({why})")
            elif c > hi and c <= 1:
                v.append(f"{when}: {w} must not be visible ({why})")
        v += self._check_order(seen, when)
        return v

    @staticmethod
    def _check_order(seen: list[tuple], when: str) -> list[str]:
        v = []
        by_queue = defaultdict(list)
        for w, q, m in seen:
            if w is not None:
                by_queue[q].append((w, m))
        for q, msgs in by_queue.items():
            last_prio = 9
            last_run: dict[int, tuple[int, str]] = {}
            last_n: dict[tuple, tuple[int, str]] = {}
            for w, m in msgs:
                if m.priority > last_prio:
                    v.append(f"{when}: {q}: {w} (priority {m.priority}) after a message of "
                             f"priority {last_prio}")
                last_prio = m.priority
                tag, prod, n = wl.parse_wid(w)
                run = int(tag[1:])
                prev_run = last_run.get(m.priority)
                if prev_run is not None and run < prev_run[0]:
                    v.append(f"{when}: {q}: {w} of run {run} is delivered after {prev_run[1]} "
                             f"of a later run (priority {m.priority})")
                if prev_run is None or run >= prev_run[0]:
                    last_run[m.priority] = (run, w)
                key = (tag, prod, m.priority)
                prev = last_n.get(key)
                if prev is not None and n <= prev[0]:
                    v.append(f"{when}: {q}: {w} is delivered after {prev[1]} (same producer "
                             f"and priority, put later)")
                last_n[key] = (n, w)
        return v


# ------------------------------------------------------------------------------ fixtures

@pytest.fixture
def harness(home, make_qm, open_qm, python_env, tmp_path):
    def make(name="QM1", *, carry_indoubt=False, producers=3, consumers=2, **create):
        make_qm(name, **create)
        work = tmp_path / f"work-{name}"
        work.mkdir()
        return CrashHarness(name, home, python_env, work, open_qm, seed=SEED,
                            carry_indoubt=carry_indoubt, producers=producers,
                            consumers=consumers)
    return make


def random_kill_count(request) -> int:
    n = request.config.getoption("--crash-runs")
    return DEFAULT_RANDOM_KILLS if n is None else n


# ------------------------------------------------------------------------------ tests

#: crash points the workload reaches under load, with hit counts that fire mid-load:
#: two fixed ones and one drawn from a range (seeded, so a failure can be replayed)
_POINT_HITS = {
    "log.after_write_before_fsync": (30, 400, (20, 900)),
    "log.after_fsync_before_ack": (30, 400, (20, 900)),
    "checkpoint.mid": (2, 5, (2, 9)),
    "store.mid_flush": (1, 500, (1, 1500)),
    "extent.mid_switch": (1, 4, (1, 7)),
    "control.mid_rewrite": (3, 8, (2, 14)),
}
LOAD_POINTS = [(p, n) for p, (a, b, _) in _POINT_HITS.items() for n in (a, b, "random")]

#: the named-crash-point and restart scenarios run on both log types (the random
#: SIGKILL campaign below splits its kills between them instead)
BOTH_LOGS = pytest.mark.parametrize("log_type", ["circular", "linear"])


#: crash points armed by harnesses of their own, and the test file that arms each
OTHER_HARNESSES = {
    "crestart.mid_apply": "recovery/test_crestart.py",
    "channel.sender_prepared": "channels/test_channel_crash.py",
    "channel.sender_confirmed": "channels/test_channel_crash.py",
    "channel.receiver_before_commit": "channels/test_channel_crash.py",
    "channel.receiver_committed": "channels/test_channel_crash.py",
    "backup.mid_copy": "backup/test_backup.py",
    "restore.mid_swap": "backup/test_backup_verify.py",
    "standby.after_fetch": "qmgr/test_standby.py",
    "publish.appended": "recovery/test_publish_recovery.py",
    "publish.applied": "recovery/test_publish_recovery.py",
    "publish.forced": "recovery/test_publish_recovery.py",
    "pubsub.managed_queue_made": "pubsub/test_pubsub_recovery.py",
    "pubsub.status_removed": "pubsub/test_pubsub_recovery.py",
    "trigger.before_commit": "core/test_triggering.py",
}


def test_every_crash_point_is_exercised():
    from support.crash_cases import MEDIA_CRASH_CASES
    covered = {p for p, _ in LOAD_POINTS} | {"restart.mid_redo", "restart.mid_undo"}
    covered |= {p.partition(":")[0] for p, _ in MEDIA_CRASH_CASES}
    tests = Path(__file__).resolve().parents[1]
    for point, path in OTHER_HARNESSES.items():
        text = (tests / path).read_text()     # armed as "point" or with a hit, "point:N"
        assert f'"{point}"' in text or f'"{point}:' in text, f"{path} does not arm {point}"
    covered |= set(OTHER_HARNESSES)
    assert covered == set(POINTS)


@BOTH_LOGS
@pytest.mark.parametrize("point,hit", LOAD_POINTS, ids=[f"{p}:{n}" for p, n in LOAD_POINTS])
def test_named_crash_point_under_load(harness, point, hit, log_type):
    if hit == "random":
        hit = random.Random(f"{SEED}-{point}").randint(*_POINT_HITS[point][2])
    h = harness(log_type=log_type, log_file_pages=64, checkpoint_records=500)
    child = h.spawn(crash_at=f"{point}:{hit}", seconds=20)
    h.expect_killed(child, f"crash point {point}:{hit}", "named")
    assert child.has("ready") and child.has("put-acked"), \
        f"{point}:{hit} fired before the load started\n{child.tail()}"
    h.verify()
    # the same point during the next restart (it fires there only if restart reaches it)
    again = h.restart_child(crash_at=point)
    rc = again.wait()
    assert rc in (0, KILLED), again.tail()
    if rc == KILLED:
        STATS["named (restart)"] += 1
    # and the queue manager carries on: more load, a random kill, verify
    h.random_kill()
    h.verify()


@BOTH_LOGS
def test_restart_mid_redo(harness, log_type):
    # big extents and rare checkpoints, so forward recovery reads more than 4 MiB
    h = harness(log_type=log_type, log_file_pages=4096, checkpoint_records=1_000_000,
                producers=2, consumers=1)
    child = h.spawn("--body-size", "8000", "--max-puts", "1100", "--pace-ms", "0",
                    end="kill")
    h.expect_killed(child, "workload --end kill", "end of load")
    assert child.has("kill"), child.tail()
    for _ in range(2):
        crashed = h.restart_child(crash_at="restart.mid_redo")
        h.expect_killed(crashed, "restart with HARBORMQ_CRASH_AT=restart.mid_redo", "named")
        assert not crashed.has("ready")
    h.verify()
    assert h.last_report.bytes_replayed >= 4 << 20, h.last_report.as_dict()
    h.random_kill()
    h.verify()


@BOTH_LOGS
def test_restart_mid_undo(harness, log_type):
    h = harness(log_type=log_type, log_file_pages=64, checkpoint_records=500)
    child = h.spawn(seconds=0.8, end="kill")
    h.expect_killed(child, "workload --end kill", "end of load")
    assert child.has("kill"), child.tail()
    crashed = h.restart_child(crash_at="restart.mid_undo:2")
    h.expect_killed(crashed, "restart with HARBORMQ_CRASH_AT=restart.mid_undo:2", "named")
    crashed = h.restart_child(crash_at="restart.mid_undo")
    h.expect_killed(crashed, "second restart with HARBORMQ_CRASH_AT=restart.mid_undo",
                    "named")
    h.verify()
    h.random_kill()
    h.verify()


@BOTH_LOGS
def test_double_restart_identical(harness, open_qm, log_type):
    h = harness(log_type=log_type, log_file_pages=64, checkpoint_records=500)
    child = h.spawn(seconds=0.8, end="kill")
    h.expect_killed(child, "workload --end kill", "end of load")
    # first restart in a child that records what it sees, then dies without shutdown
    first = h.restart_child(snapshot=True, end="kill")
    h.expect_killed(first, "restart child --end kill", "after restart")
    events = read_journal(first.journal)
    ready = next(e for e in events if e["t"] == "ready")
    snap1 = next(e["data"] for e in events if e["t"] == "snapshot")
    assert ready["uows_in_flight"] > 0 and ready["uows_in_doubt"] > 0, ready
    snaps = [snap1]
    for _ in range(2):
        qm = open_qm("QM1")
        assert qm.restart_report.uows_in_flight == 0, qm.restart_report.as_dict()
        snaps.append(json.loads(json.dumps(wl.snapshot(qm))))
        qm.close()
    assert snaps[1] == snaps[0], "second restart differs from the first"
    assert snaps[2] == snaps[1], "third restart differs from the second"
    assert any(q["msgs"] for q in snap1["queues"].values())
    h.verify()


DRAIN_CHILD = """
import os, signal, sys
from harbormq import QueueManager
qm = QueueManager.open(sys.argv[1])
qm.define_queue("CRASH.Q0", DEFPSIST="YES")
with qm.begin() as uow:
    uow.put("CRASH.Q0", b"one")
with qm.begin() as uow:
    assert uow.get("CRASH.Q0").body == b"one"
os.kill(os.getpid(), signal.SIGKILL)
"""


@BOTH_LOGS
def test_drained_queue_leaves_nothing_to_redo(harness, python_env, log_type):
    """SIGKILL right after a message went through a queue (put and got, both
    committed, no store flush in between). Restart redoes both, the queue ends
    as it was, and a controlled shutdown afterwards must leave nothing to redo."""
    h = harness(log_type=log_type, log_file_pages=64)
    child = subprocess.run([sys.executable, "-c", DRAIN_CHILD, "QM1"], env=python_env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert child.returncode == KILLED, child.stdout.decode(errors="replace")
    STATS["drained queue"] += 1
    h.verify()
    h.verify()


@pytest.mark.parametrize("log", ["circular", "linear"])
def test_random_sigkills_under_load(harness, request, log):
    total = random_kill_count(request)
    n = math.ceil(total / 2) if log == "circular" else total // 2
    if log == "circular":
        h = harness(log_file_pages=256, checkpoint_records=1000)
    else:     # linear: in-doubt UOWs may stay in doubt through later crashes
        h = harness(log_type="linear", log_file_pages=64, checkpoint_records=2000,
                    carry_indoubt=True)
    for _ in range(n):
        h.random_kill()
        if h.rng.random() < 0.15:
            # sometimes crash the next restart too, amid backing out what was in flight
            again = h.restart_child(crash_at="restart.mid_undo")
            rc = again.wait()
            assert rc in (0, KILLED), again.tail()
            if rc == KILLED:
                STATS["named (restart)"] += 1
        h.verify()
    # a clean shutdown after all that, and one more restart
    child = h.spawn(seconds=0.3)
    assert child.wait() == 0, child.tail()
    h.verify(resolve_all=True)
    assert not h.model.indoubt
