"""The life of a queue manager: ``harbormq create``, ``start``, ``stop``,
``delete`` and ``status`` (crtmqm, strmqm, endmqm, dltmqm, dspmq).

    harbormq create QM [--log circular|linear] [--log-file-pages N] [--log-primary N]
                       [--log-secondary N] [--log-path DIR] [--checkpoint-records N]
                       [--log-management manual|automatic|archive]
                       [--log-archive-path DIR ...] [--log-dual-path DIR] [--port P]
                       [--ws-port P]
    harbormq start QM [--foreground]
    harbormq stop QM [--immediate | --preemptive] [--wait]
    harbormq delete QM
    harbormq status [QM] [--json]

``register(cli)`` adds them to the main command group (``cli/main.py``).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import click

from ..admin.client import call
from ..config import QMConfig, harbormq_home
from ..errors import HarbormqError, QueueManagerNotRunning, QueueManagerRunning
from .consoles import console, server_console
from .progress import make_progress_callback
from .starting import start_in_background


@click.command()
@click.argument("qm")
@click.option("--log", "log_type", type=click.Choice(["circular", "linear"]),
              default="circular", show_default=True, help="logging type")
@click.option("--log-file-pages", type=int, default=4096, show_default=True,
              help="extent size in 4 KiB pages (32..65535)")
@click.option("--log-primary", type=int, default=3, show_default=True)
@click.option("--log-secondary", type=int, default=2, show_default=True)
@click.option("--log-path", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="put the log in this directory (another disk)")
@click.option("--checkpoint-records", type=int, default=10_000, show_default=True)
@click.option("--log-management", type=click.Choice(["manual", "automatic", "archive"]),
              default="manual", show_default=True,
              help="linear logs: keep extents until 'log delete', delete them once "
                   "unneeded, or archive them and then delete them")
@click.option("--log-archive-path", "log_archive_paths", multiple=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="archive directory (give it twice for two copies)")
@click.option("--log-dual-path", type=click.Path(file_okay=False, path_type=Path),
              default=None, help="dual logging: write a second copy of the log (every "
                                 "extent and the control file) to this directory")
@click.option("--port", type=click.IntRange(0, 65535), default=61613, show_default=True,
              help="STOMP listener port on 127.0.0.1 (0: any free port)")
@click.option("--ws-port", type=click.IntRange(0, 65535), default=None,
              help="also a STOMP over WebSocket listener (path /ws) on 127.0.0.1, this port "
                   "(0: any free port)")
@click.option("--qsg", "qsg_name", default=None,
              help="join this queue sharing group (the first member creates it; docs/qsg.md)")
@click.option("--qsg-db", default=None,
              help="the group's PostgreSQL database: a libpq conninfo or URI (with --qsg)")
def create(qm, log_type, log_file_pages, log_primary, log_secondary, log_path,
           checkpoint_records, log_management, log_archive_paths, log_dual_path, port,
           ws_port, qsg_name, qsg_db):
    """Create queue manager QM (crtmqm)."""
    from ..qmgr import lifecycle as qmgr
    if (qsg_name is None) != (qsg_db is None):
        raise click.UsageError("--qsg and --qsg-db go together")
    config = qmgr.create(qm, log_type=log_type, log_file_pages=log_file_pages,
                         log_primary=log_primary, log_secondary=log_secondary,
                         log_path=log_path, checkpoint_records=checkpoint_records,
                         log_management=log_management, log_archive_paths=log_archive_paths,
                         log_dual_path=log_dual_path, port=port, ws_port=ws_port,
                         qsg=qsg_name, qsg_db=qsg_db)
    console.print(f"HMQ8001I Queue manager {qm} created in {config.qm_dir} "
                  f"({log_type} log in {config.log_dir})"
                  + (f", member of queue sharing group {qsg_name}." if qsg_name else "."))


@click.command()
@click.argument("qm")
@click.option("--foreground", is_flag=True, help="run in this terminal until stopped")
def start(qm, foreground):
    """Start queue manager QM (strmqm): restart recovery, then serve."""
    from ..qmgr.lifecycle import running_pid
    config = QMConfig.load(qm)
    pid = running_pid(config)
    if pid is not None:
        raise QueueManagerRunning(f"queue manager {qm} is already running (process {pid})")
    from ..qmgr.standby import refuse_if_standby
    refuse_if_standby(config)
    if foreground:

        from ..server.process import QueueManagerServer, run_event_loop
        out = server_console()
        server = QueueManagerServer(config, console=out, progress=make_progress_callback(out))
        sys.exit(run_event_loop(server.run()))
    status = start_in_background(config)
    r = status.get("restart") or {}
    console.print(f"HMQ8003I Queue manager {qm} started (process {status['pid']}): replayed "
                  f"{r.get('records_replayed', 0)} log records, backed out "
                  f"{r.get('uows_backed_out', 0)} unit(s) of work, "
                  f"{len(status['in_doubt'])} in doubt; restart extent "
                  f"{status['restart_extent']}.")


@click.command()
@click.argument("qm")
@click.option("--immediate", "mode", flag_value="immediate",
              help="calls in progress complete, new calls fail, incomplete units of work "
                   "are backed out at the next start")
@click.option("--preemptive", "mode", flag_value="preemptive",
              help="stop at once; the process is killed if still alive after 30 s")
@click.option("--wait", is_flag=True, help="return only when the queue manager has ended")
def stop(qm, mode, wait):
    """Stop queue manager QM (endmqm); controlled by default."""
    from ..qmgr.lifecycle import is_instance, running_pid
    mode = mode or "controlled"
    config = QMConfig.load(qm)
    pid = running_pid(config)
    if pid is None:
        raise QueueManagerNotRunning(f"queue manager {qm} is not running")
    try:
        call(config, {"cmd": "stop", "mode": mode})
    except QueueManagerNotRunning:
        if mode != "preemptive":
            raise
    console.print(f"HMQ8025I Stop ({mode}) requested for queue manager {qm}.")
    if mode == "preemptive":
        # only a process proven to be this queue manager is ever signalled
        if is_instance(config, pid):
            deadline = time.monotonic() + 30
            while is_instance(config, pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if is_instance(config, pid):
                os.kill(pid, signal.SIGKILL)
                console.print(f"HMQ8026W Queue manager {qm} (process {pid}) did not end in "
                              "30 s and was killed.")
        elif _still_locked(config, 5.0):
            # (a process already ending is no longer provable, but lets go at once)
            raise HarbormqError(
                f"queue manager {qm} still holds its lock, but process {pid} cannot be "
                "proven to be it (its lock file names no harbormq process for it): nothing "
                "was killed", msgid="HMQ8027E",
                hint="find the process that holds qm.lock (fuser qmgrs/QM/qm.lock) and end it")
        wait = True
    if wait:
        while running_pid(config) is not None:
            time.sleep(0.1)
        console.print(f"HMQ8004I Queue manager {qm} ended.")


@click.command()
@click.argument("qm")
def delete(qm):
    """Delete queue manager QM and its log (dltmqm)."""
    from ..qmgr import lifecycle as qmgr
    qmgr.delete(qm)
    console.print(f"HMQ8002I Queue manager {qm} deleted.")


@click.command()
@click.argument("qm", required=False)
@click.option("--json", "as_json", is_flag=True)
def status(qm, as_json):
    """Show whether queue managers run, their log type, current and restart extents."""
    from ..log.inspect import log_map
    from ..qmgr.lifecycle import list_queue_managers, running_pid
    names = [qm] if qm else list_queue_managers()
    rows = []
    for name in names:
        config = QMConfig.load(name)
        m = log_map(config)
        pid = running_pid(config)
        rows.append({"name": name, "state": "running" if pid else "ended", "pid": pid,
                     "log_type": m["log_type"], "current_extent": m["current_extent"],
                     "restart_extent": m["restart_extent"], "checkpoint_lsn": m["checkpoint_lsn"]})
    if as_json:
        console.print_json(json.dumps(rows))
        return
    if not rows:
        console.print(f"No queue managers in {harbormq_home()}.")
        return
    from rich.table import Table
    table = Table("QMNAME", "STATUS", "PID", "LOG", "CURRENT EXTENT", "RESTART EXTENT")
    for r in rows:
        table.add_row(r["name"], r["state"], str(r["pid"] or ""), r["log_type"],
                      r["current_extent"], r["restart_extent"] or "")
    console.print(table)


def _still_locked(config: QMConfig, seconds: float) -> bool:
    """Whether the queue manager's lock is still held after ``seconds``."""
    from ..qmgr.lifecycle import running_pid
    deadline = time.monotonic() + seconds
    while running_pid(config) is not None:
        if time.monotonic() > deadline:
            return True
        time.sleep(0.1)
    return False


def register(cli: click.Group) -> None:
    for command in (create, start, stop, delete, status):
        cli.add_command(command)
