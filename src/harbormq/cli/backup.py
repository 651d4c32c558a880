"""``harbormq backup`` and ``harbormq restore`` (docs/backup.md).

    harbormq backup QM --to DIR [--incremental] [--keep N] [--idle] [--max-rate MB/S]
    harbormq backup verify BACKUP|FOLDER [--all] [--scratch DIR] [--json]
    harbormq restore QM --from BACKUP [--archive DIR ...] [--as NEWNAME] [--port P]
                        [--replace] [--dry-run] [--log-path DIR] [--log-dual-path DIR]

``register(cli)`` adds them to the main command group (``cli/main.py``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from ..admin.client import call
from ..config import QMConfig
from ..errors import HarbormqError
from .consoles import LazyConsole

console = LazyConsole(soft_wrap=True)
err_console = LazyConsole(stderr=True, soft_wrap=True)


def _progress(done_word: str):
    """A line on stderr about every second: MB copied and the rate."""
    def progress(r: dict) -> None:
        total = f" of {r['total'] / 1e6:.1f}" if r.get("total") else ""
        err_console.print(f"  {done_word} {r['bytes'] / 1e6:.1f}{total} MB in {r['files']} "
                          f"file(s), {r['mb_s']:.1f} MB/s", highlight=False)
    return progress


class _BackupGroup(click.Group):
    """``backup QM ...`` takes a backup; ``backup verify ...`` is a subcommand
    (``backup take QM`` for a queue manager named like one)."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["take", *args]
        return super().parse_args(ctx, args)


@click.group("backup", cls=_BackupGroup)
def backup():
    """Back up queue manager QM (hot while it runs, cold when stopped), or verify a backup.

    harbormq backup QM --to DIR [--incremental] [--keep N];
    harbormq backup verify BACKUP (or a queue manager's backup folder)"""


@backup.command("take")
@click.argument("qm")
@click.option("--to", "to", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="directory of backups (each queue manager's in a folder of its own)")
@click.option("--incremental", is_flag=True,
              help="copy only the log written since the previous backup")
@click.option("--keep", type=click.IntRange(1), default=None,
              help="then keep only the newest N backups (never the last full one)")
@click.option("--nice", type=click.IntRange(0, 19), default=10, show_default=True,
              help="CPU niceness (and lowest best-effort I/O priority when above 0) of the "
                   "backup: the queue manager it copies keeps serving first")
@click.option("--idle", is_flag=True,
              help="run in the CPU's idle class (Linux SCHED_IDLE): the backup takes only "
                   "CPU time nothing else wants; on a machine never idle it crawls, and its "
                   "store snapshots stay open (their pages kept) as long")
@click.option("--max-rate", type=click.FloatRange(min=1), default=None, metavar="MB/S",
              help="stream at most this many MB a second (copies, and the trial restore's "
                   "copies, replay and hashing): the slower, the less a serving queue "
                   "manager loses to the backup, but the longer each store snapshot (an "
                   "LMDB read transaction) keeps pages the queue manager cannot reuse; "
                   "default: as fast as it can")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON")
def take(qm, to, incremental, keep, nice, idle, max_rate, as_json):
    """Take a backup of QM into DIR/QM/<time>.full|.incr."""
    from ..backup.take import take_backup
    config = QMConfig.load(qm)
    _lower_priority(nice)
    if idle:
        _idle_class()
    result = take_backup(config, to, incremental=incremental, keep=keep,
                         ask=lambda req: call(config, req, timeout=None).get("result", {}),
                         progress=None if as_json else _progress("copied"),
                         max_rate=None if max_rate is None else max_rate * 1e6)
    if as_json:
        print(json.dumps({"path": str(result.path), "kind": result.kind, "mode": result.mode,
                          "bytes": result.bytes, "seconds": round(result.seconds, 3),
                          "copy_seconds": round(result.copy_seconds, 3),
                          "trial_seconds": round(result.trial_seconds, 3),
                          "mb_s": round(result.mb_s, 1), "max_rate_mb_s": max_rate,
                          "paced_seconds": round(result.paced_seconds, 3),
                          "first_lsn": result.first_lsn,
                          "end_lsn": result.end_lsn, "removed": result.removed}))
        return
    console.print(f"HMQ8600I {result.mode.capitalize()} {result.kind} backup of queue manager "
                  f"{qm} complete: {result.path} ({result.bytes / 1e6:.1f} MB copied in "
                  f"{result.copy_seconds:.1f} s, {result.mb_s:.1f} MB/s; trial restore "
                  f"{result.trial_seconds:.1f} s; log LSN {result.first_lsn}..{result.end_lsn})")
    if result.removed:
        console.print(f"HMQ8609I Backups removed (--keep {keep}): {', '.join(result.removed)}")


@backup.command("verify")
@click.argument("backup_dir", metavar="BACKUP",
                type=click.Path(file_okay=False, path_type=Path))
@click.option("--all", "every", is_flag=True,
              help="BACKUP being a queue manager's backup folder: verify every backup in it, "
                   "not only the newest")
@click.option("--scratch", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="where the trial restore goes (default: beside the backup)")
@click.option("--json", "as_json", is_flag=True)
def verify(backup_dir, every, scratch, as_json):
    """Verify BACKUP: every file's SHA-256, then a trial restore compared with its manifest.

    BACKUP may be a queue manager's backup folder (DIR/QM of 'backup QM --to
    DIR'): its newest backup is verified, or every one with --all."""
    from ..backup.verify import backups_to_verify, verify_backup
    results, failed = [], []
    backups = backups_to_verify(backup_dir, every=every)
    for path in backups:
        try:
            r = verify_backup(path, scratch=scratch,
                              progress=None if as_json else _progress("checked"))
        except HarbormqError as exc:
            if not every:
                raise
            # --all goes on: a damaged old backup says nothing of the newer ones
            failed.append((path, exc))
            results.append({"backup": str(path), "error": f"{exc.msgid}: {exc.message}"})
            if not as_json:
                err_console.print(f"{exc.msgid}: {exc.message}")
            continue
        results.append(r)
        if not as_json:
            console.print(f"HMQ8607I Backup {path} verified: {len(r['chain'])} backup(s) in "
                          f"its chain, {r['files_bytes'] / 1e6:.1f} MB of files good, "
                          f"{r['extents']} extent(s); the trial restore to LSN "
                          f"{r['consistency_lsn']} gives the {len(r['queues'])} queue(s) of "
                          "the manifest")
    if as_json:
        print(json.dumps(results if every else results[0], default=str))
    if failed:
        raise HarbormqError(f"{len(failed)} of {len(backups)} backup(s) in {backup_dir} failed "
                            "verification: " + ", ".join(path.name for path, _ in failed),
                            msgid=failed[0][1].msgid)


@click.command("restore")
@click.argument("qm")
@click.option("--from", "source", required=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="the backup (or a directory of backups: the newest)")
@click.option("--to-time", default=None,
              help="bring it forward to this time (ISO 8601), not to the end of the log")
@click.option("--to-lsn", type=int, default=None,
              help="bring it forward to this LSN, not to the end of the log")
@click.option("--archive", "archives", multiple=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="archive path(s) to roll forward through (default: the backup's)")
@click.option("--as", "as_name", default=None, help="restore under this name")
@click.option("--port", type=click.IntRange(0, 65535), default=None,
              help="the STOMP listener's port of the restored queue manager")
@click.option("--replace", is_flag=True, help="replace an existing queue manager of that name")
@click.option("--dry-run", is_flag=True, help="print the plan, change nothing")
@click.option("--log-path", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="put the restored log in this directory")
@click.option("--log-dual-path", type=click.Path(file_okay=False, path_type=Path),
              default=None, help="the restored dual log's second directory")
def restore(qm, source, to_time, to_lsn, archives, as_name, port, replace, dry_run, log_path,
            log_dual_path):
    """Restore queue manager QM from a backup; its next start rolls forward."""
    from ..backup.restore import apply_restore, plan_restore
    plan = plan_restore(qm, source, as_name=as_name, archives=list(archives), port=port,
                        replace=replace, log_path=log_path, dual_path=log_dual_path,
                        to_time=to_time, to_lsn=to_lsn)
    for line in plan.lines():
        console.print(line, highlight=False)
    if dry_run:
        console.print("Dry run: nothing was changed.")
        return
    r = apply_restore(plan, progress=_progress("restored"))
    console.print(f"HMQ8606I Queue manager {r['target']} restored in {r['qm_dir']} "
                  f"({r['bytes'] / 1e6:.1f} MB, {r['extents']} extent(s)); start it to roll "
                  f"forward to LSN {r['end_lsn']}: harbormq start {r['target']}")


def _lower_priority(nice: int) -> None:
    if nice <= 0:
        return
    os.nice(nice)
    try:
        import psutil
        psutil.Process().ionice(psutil.IOPRIO_CLASS_BE, 7)
    except (ImportError, AttributeError, OSError):
        pass      # not Linux, or not allowed: the CPU niceness alone


def _idle_class() -> None:
    if not hasattr(os, "SCHED_IDLE"):
        raise click.UsageError("--idle needs Linux's SCHED_IDLE scheduling class")
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except OSError as exc:
        raise click.UsageError(f"--idle: the idle scheduling class was refused: {exc}") from None


def register(cli: click.Group) -> None:
    cli.add_command(backup)
    cli.add_command(restore)

