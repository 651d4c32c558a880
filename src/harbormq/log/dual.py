"""Dual logging's repair: ``harbormq log recover-copy`` (z/OS's RECOVER BSDS and
re-creating a lost active log copy).

A dual log writes every extent to the log directory (the *primary* copy) and
to ``log.dual_path`` (the *dual* copy), and both control-file copies to each
(``writer.py``, ``control.py``). Reading goes around a bad copy
(``copies.py``), and a copy that fails while the queue manager runs is given
up (the log goes on with one copy). Either way the bad copy stays bad until
this re-creates it, with the queue manager stopped:

* every extent the control file lists (not free, not deleted by log
  management) is read in both copies; a copy that is missing, short, has a bad
  header or a record failing its checks, ends anywhere but where the control
  file says, or belongs to a copy given up after a failure (and so may be
  stale), is replaced by the other copy, which must read cleanly;
* the newest extent's copies may also differ in a tail that was never forced
  (a crash): the one reading further is copied over the other, whose own
  unforced tail is kept aside first (``S…LOG.torn.N``);
* last, the control file is written to both copies, saying the log is whole
  again. Every file is written as a temporary file, fsynced, renamed into
  place and its directory fsynced: a crash leaves the control file still
  naming the copy it had given up, and this can simply run again.

A log created single with ``log.dual_path`` added to qm.toml later is made
dual the same way: every extent is copied, then the control file is written to
both directories, saying the log is dual.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import ControlFileMismatch, HarbormqError, LogCorrupt, LogMissing
from ..fsutil import copy_durably, make_dirs
from .control import COPY_NAMES, DUAL, PRIMARY, ControlFile, ControlState, ExtentInfo
from .copies import read_copy, trusted
from .reader import ExtentEnd, keep_torn_tail, same_bytes
from .records import extent_file_name


@dataclass
class CopyCheck:
    copy: str
    path: Path
    end: ExtentEnd | None = None     # how it reads, if it reads cleanly
    why: str = ""                    # why it cannot be used

    @property
    def good(self) -> bool:
        return self.end is not None


def check_copy(copy: str, path: Path, e: ExtentInfo, state: ControlState) -> CopyCheck:
    """Whether one copy of extent ``e`` reads cleanly and holds what the
    control file says (a closed extent: exactly its LSN range)."""
    if not trusted(copy, e, state):
        return CopyCheck(copy, path, why="this copy was given up after a write failed "
                                         f"(whole only below LSN {state.degraded_lsn})")
    if not path.exists():
        return CopyCheck(copy, path, why="it is missing")
    try:
        end = read_copy(path, e, newest=e.state == "active")
    except (LogCorrupt, LogMissing) as exc:
        return CopyCheck(copy, path, why=exc.message)
    return CopyCheck(copy, path, end=end)


def recover_copy(log_dir: Path, dual_dir: Path, qm_name: str, *,
                 dry_run: bool = False) -> list[str]:
    """Re-create every missing or damaged copy of a dual log from the good one
    (the queue manager stopped; the caller holds its lock). Returns one line
    per thing done. Raises HMQ7494E naming whatever has no good copy (after
    repairing everything else). ``dry_run``: read both copies of everything
    and say what would be done, changing nothing (a scrub of the log)."""
    log_dir, dual_dir = Path(log_dir), Path(dual_dir)
    if not dry_run:
        make_dirs(log_dir)
        make_dirs(dual_dir)    # a new disk in place of the lost one
    control = ControlFile(log_dir, dual_dir)
    converting = False
    try:
        state = control.load(repair=False)
    except ControlFileMismatch as exc:
        if exc.facts.get("dual_mismatch") != "single":
            raise
        converting = True      # a single log becoming dual
        control = ControlFile(log_dir)
        state = control.load(repair=False)
    done: list[str] = []
    unrecoverable: list[str] = []
    for e in sorted(state.extents, key=lambda x: (x.first_lsn, x.number)):
        if e.state == "free" or e.deleted:
            continue
        name = extent_file_name(e.number)
        checks = [check_copy(PRIMARY, log_dir / name, e, state),
                  check_copy(DUAL, dual_dir / name, e, state)]
        if converting:
            checks[1] = CopyCheck(DUAL, dual_dir / name, why="the log had one copy")
        good = [c for c in checks if c.good]
        if not good:
            if all(not c.path.exists() for c in checks) and e.end_lsn is not None and \
                    e.end_lsn <= state.restart_lsn:
                done.append(f"log extent {name} is in neither copy; restart no longer "
                            "needs it (left as it is)")
                continue
            unrecoverable.append(f"log extent {name} (LSN {e.first_lsn}..): " + "; ".join(
                f"the {c.copy} copy: {c.why}" for c in checks))
            continue
        best = max(good, key=lambda c: c.end.lsn)       # the first of equals
        for c in checks:
            if c is best:
                continue
            if c.good:
                if same_bytes(best.path, c.path):
                    continue
                if c.end.lsn == best.end.lsn:
                    why = "its bytes after the end of the log differ"
                else:
                    why = f"it reads to LSN {c.end.lsn}, the {best.copy} copy to {best.end.lsn}"
                if c.end.how == "torn" and not dry_run:
                    keep_torn_tail(c.path, c.end)
            else:
                why = c.why
            if not dry_run:
                copy_durably(best.path, c.path)
            done.append(f"HMQ7492I log extent {name}: the {c.copy} copy ({c.path}) "
                        f"{'would be' if dry_run else 'was'} re-created from the {best.copy} "
                        f"copy ({why})")
    if unrecoverable:
        # the copies re-created above are whole, but the control file keeps
        # saying which copy was given up until every extent has a good copy
        raise HarbormqError(
            f"log of queue manager {qm_name}: no good copy of " + " | ".join(unrecoverable)
            + (f" (done meanwhile: {'; '.join(done)})" if done else ""),
            msgid="HMQ7494E",
            hint="restore the extent from the archive or a backup into either directory, "
                 "then run recover-copy again")
    problems = [text for _, text in control.warnings]
    if dry_run:
        if converting or state.degraded or problems:
            done.append("HMQ7492I the control file would be written to both copies")
        return done + [f"HMQ7493I recover-copy --dry-run of queue manager {qm_name}: "
                       + (f"{len(done)} thing(s) to do" if done else
                          "both copies of the log are whole")]
    if converting or state.degraded or problems:
        why = ("the log is made dual" if converting else
               f"the {state.degraded} copy is whole again" if state.degraded else
               "; ".join(problems))
        state.degraded, state.degraded_lsn, state.dual = "", 0, True
        state.sequence += 1
        ControlFile(log_dir, dual_dir).write(state)
        done.append(f"HMQ7492I control file ({', '.join(COPY_NAMES)}) written to both "
                    f"directories ({log_dir}, {dual_dir}), sequence {state.sequence}: {why}")
    done.append(f"HMQ7493I recover-copy of queue manager {qm_name} complete: "
                + ("both copies of the log are whole" if done else
                   "nothing to do, both copies of the log are whole"))
    return done
