"""The ``harbormq`` command. Errors become one operator message and an exit
status here, in one place (``main``)."""

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
from .consoles import LazyConsole, console, err_console, server_console
from .progress import make_progress_callback
from .starting import start_in_background

#: the hint when image or recreate finds the queue manager stopped
MEDIA_NEEDS = "media images and recreate need a running queue manager"


# -- commands ---------------------------------------------------------------------------

@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="harbormq")
def cli():
    """harbormq: a durable message queue manager (IBM MQ's logging and recovery design)."""


@cli.command()
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
def create(qm, log_type, log_file_pages, log_primary, log_secondary, log_path,
           checkpoint_records, log_management, log_archive_paths, log_dual_path, port):
    """Create queue manager QM (crtmqm)."""
    from ..qmgr import lifecycle as qmgr
    config = qmgr.create(qm, log_type=log_type, log_file_pages=log_file_pages,
                         log_primary=log_primary, log_secondary=log_secondary,
                         log_path=log_path, checkpoint_records=checkpoint_records,
                         log_management=log_management, log_archive_paths=log_archive_paths,
                         log_dual_path=log_dual_path, port=port)
    console.print(f"HMQ8001I Queue manager {qm} created in {config.qm_dir} "
                  f"({log_type} log in {config.log_dir}).")


@cli.command()
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


@cli.command()
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


@cli.command()
@click.argument("qm")
def delete(qm):
    """Delete queue manager QM and its log (dltmqm)."""
    from ..qmgr import lifecycle as qmgr
    qmgr.delete(qm)
    console.print(f"HMQ8002I Queue manager {qm} deleted.")


@cli.command()
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


@cli.group()
def log():
    """Look at the recovery log and manage its extents: archive, delete, scrub
    (works with the queue manager stopped or running)."""


@log.command("dump")
@click.argument("qm")
@click.option("--from-lsn", type=int)
@click.option("--to-lsn", type=int)
@click.option("--since", help="ISO 8601 time (UTC if no zone) or epoch seconds")
@click.option("--until")
@click.option("--queue")
@click.option("--uow", type=int)
@click.option("--json", "as_json", is_flag=True, help="one JSON object per record")
def log_dump(qm, from_lsn, to_lsn, since, until, queue, uow, as_json):
    """Print log records (dmpmqlog)."""
    from ..log.inspect import DumpFilter, dump, parse_time
    flt = DumpFilter(from_lsn, to_lsn, parse_time(since), parse_time(until), queue, uow)
    out = sys.stdout
    for d in dump(QMConfig.load(qm), flt, say=lambda m, t: err_console.print(f"{m} {t}")):
        if as_json:
            out.write(json.dumps(d, default=str) + "\n")
        else:
            extra = " ".join(f"{k}={v}" for k, v in d.items()
                             if k not in ("lsn", "type", "uow", "object", "time", "prev_lsn",
                                          "object_id", "ts_ns", "length", "extent"))
            out.write(f"LSN {d['lsn']:>12}  {d['time']}  {d['type']:<17} uow={d['uow']:<6} "
                      f"prev={d['prev_lsn']:<10} {d['object'] or '-':<24} {extra}\n")


@log.command("map")
@click.argument("qm")
@click.option("--json", "as_json", is_flag=True)
def log_map_cmd(qm, as_json):
    """Print the log map: extents, LSN ranges, checkpoint, restart point (CSQJU004)."""
    from ..log.inspect import log_map
    m = log_map(QMConfig.load(qm))
    if as_json:
        console.print_json(json.dumps(m))
        return
    console.print(f"Queue manager {m['queue_manager']}: {m['log_type']} log, extents of "
                  f"{m['pages']} pages; control file sequence {m['control_sequence']} written "
                  f"{m['control_written']}")
    console.print(f"Last checkpoint LSN {m['checkpoint_lsn']}; restart LSN {m['restart_lsn']} "
                  f"in {m['restart_extent']}" + (f"; media recovery LSN {m['media_lsn']} in "
                                                 f"{m['media_extent']}" if m['media_lsn']
                                                 is not None else ""))
    from rich.table import Table
    table = Table("EXTENT", "STATE", "FIRST LSN", "END LSN", "NEEDED FOR", "ON DISK",
                  "ARCHIVED", "DELETED")
    for e in m["extents"]:
        table.add_row(e["extent"], e["state"], "" if e["first_lsn"] is None else
                      str(e["first_lsn"]), "" if e["end_lsn"] is None else str(e["end_lsn"]),
                      {"restart": "restart", "media": "media recovery",
                       "none": "not needed"}[e["needed"]], _yes(e["present"]),
                      _yes(e["archived"]), _yes(e["deleted"]))
    _print_table(table)
    if m.get("dual_path"):
        one = [f"{e['extent']} ({', '.join(e['copies']) or 'none'})" for e in m["extents"]
               if e["state"] != "free" and not e["deleted"] and len(e["copies"]) < 2]
        console.print(f"Dual log: second copy in {m['dual_path']}" +
                      (f"; the {m['degraded_copy']} copy was given up (harbormq log "
                       f"recover-copy {qm})" if m["degraded_copy"] else "") +
                      (f"; extents on disk in one copy only: {', '.join(one)}" if one else ""))
    for w in m["warnings"]:
        err_console.print(w)


_TYPES = click.Choice(["all", "qmgr", "queue"])


def _print_progress(p: dict) -> None:
    pct = 100 * p["done"] // max(1, p["total"])
    err_console.print(f"  {p['object']}: {pct}%", highlight=False)


@cli.command()
@click.argument("qm")
@click.argument("name", required=False)
@click.option("--type", "obj_type", type=_TYPES, default="all", show_default=True,
              help="which objects; NAME may be generic (APP.*, *)")
def image(qm, name, obj_type):
    """Record media images of objects (rcdmqimg); the queue manager must run."""
    reply = call(QMConfig.load(qm), {"cmd": "image", "type": obj_type, "name": name},
                 timeout=None, on_progress=_print_progress, needs=MEDIA_NEEDS)
    for r in reply["results"]:
        if "skipped" in r:
            err_console.print(f"HMQ7472E No media image of {r['object']}: {r['skipped']}.")
            continue
        console.print(f"HMQ7477I Media image of {r['object']} recorded at LSN {r['image_lsn']} "
                      f"({r['messages']} messages, {r['bytes']} bytes; media recovery of it "
                      f"reads from LSN {r['replay_from']}).")


@cli.command()
@click.argument("qm")
@click.argument("name", required=False)
@click.option("--type", "obj_type", type=_TYPES, default="all", show_default=True,
              help="which objects; NAME may be generic (APP.*, *)")
@click.option("--dry-run", is_flag=True,
              help="print what each recreate would read (image, LSNs, extents) and stop")
def recreate(qm, name, obj_type, dry_run):
    """Recreate objects from their media images and the log (rcrmqobj)."""
    reply = call(QMConfig.load(qm), {"cmd": "recreate", "type": obj_type, "name": name,
                                     "dry_run": dry_run},
                 timeout=None, on_progress=_print_progress, needs=MEDIA_NEEDS)
    if dry_run:
        for r in reply["results"]:
            console.print(f"HMQ7478I Plan: {r['plan']}.")
        if not all(r["runnable"] for r in reply["results"]):
            raise HarbormqError("the plan cannot be carried out: an extent it needs is missing",
                                msgid="HMQ6767E",
                                hint="restore the missing extents from the archive or a backup")
        return
    for r in reply["results"]:
        if "definitions" in r:
            console.print(f"HMQ7474I Object {r['object']} recreated: {r['definitions']} "
                          f"definitions from LSN {r['from_lsn']} to {r['to_lsn']}.")
        else:
            console.print(f"HMQ7474I Queue {r['object']} recreated: {r['messages']} messages "
                          f"(image at LSN {r['image_lsn']}, {r['effects']} later effects "
                          f"replayed to LSN {r['to_lsn']}).")


@log.command("rebuild-control")
@click.argument("qm")
@click.option("--yes", is_flag=True, help="write it (without: only say what would be written)")
def log_rebuild_control(qm, yes):
    """Rebuild a lost log control file from the extents (queue manager stopped)."""
    from ..qmgr.log_offline import rebuild_control_stopped
    notes = rebuild_control_stopped(QMConfig.load(qm), write=yes)
    for line in notes:
        _say(line)
    _say(f"HMQ7123W The log control file of {qm} was rebuilt." if yes else
         "Nothing written: run again with --yes to write it.")


@log.command("crestart")
@click.argument("qm")
@click.option("--end-lsn", type=click.IntRange(0), default=None,
              help="give up every record that ends after this LSN")
@click.option("--end-time", default=None,
              help="give up every record written after this time (ISO 8601; without a "
                   "zone, local time)")
@click.option("--end-extent", default=None,
              help="give up everything after this closed extent (e.g. the last one archived)")
@click.option("--yes", is_flag=True, help="record it (without: only say what it would lose)")
@click.option("--cancel", is_flag=True, help="remove a recorded conditional restart")
@click.option("--json", "as_json", is_flag=True, help="the whole plan as JSON")
def log_crestart(qm, end_lsn, end_time, end_extent, yes, cancel, as_json):
    """Conditional restart: give up the log after a point (queue manager stopped).

    Says exactly what is lost; with --yes the next start carries it out."""
    from ..qmgr.log_offline import crestart_cancel, crestart_stopped
    config = QMConfig.load(qm)
    if cancel:
        pending = crestart_cancel(config)
        _say("HMQ7130W The conditional restart at LSN "
             f"{pending['cut_lsn']} was cancelled." if pending else
             f"No conditional restart is recorded for {qm}.")
        return
    given = [x for x in (end_lsn, end_time, end_extent) if x is not None]
    if len(given) != 1:
        raise click.UsageError("give exactly one of --end-lsn, --end-time, --end-extent")
    end_ns, requested = None, None
    if end_lsn is not None:
        requested = f"--end-lsn {end_lsn}"
    elif end_extent is not None:
        requested = f"after {end_extent.upper()}"
    else:
        end_ns, requested = _parse_time(end_time), f"--end-time {end_time}"
    p = crestart_stopped(config, end_lsn=end_lsn, end_time_ns=end_ns,
                         end_extent=end_extent, requested=requested, write=yes)
    if as_json:
        console.print_json(json.dumps(p))
    else:
        _print_crestart_plan(p)
    _say("HMQ7130W Recorded: the next start of " + qm + " carries it out." if yes else
         "Nothing recorded: run again with --yes to record it.")


def _parse_time(text: str) -> int:
    from datetime import datetime
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not an ISO 8601 time "
                                 "(e.g. 2026-11-24T10:15:00+00:00)") from None
    return int(when.timestamp() * 1e9) if when.tzinfo else int(when.astimezone().timestamp() * 1e9)


def _print_crestart_plan(p: dict) -> None:
    from rich.table import Table
    from rich.text import Text
    console.print(f"Cut at LSN {p['cut_lsn']} in {p['cut_extent']} ({p['requested']}); restart "
                  f"then starts from the checkpoint at LSN {p['checkpoint_lsn'] or '-'} (redo "
                  f"from LSN {p['restart_lsn']}); the log goes on at LSN {p['resume_lsn']}.")
    console.print(f"Given up: {p['records_discarded']} records ({p['bytes_discarded']} bytes) "
                  f"up to LSN {p['log_end_lsn']}" +
                  (f"; extents set aside: {', '.join(p['discarded_extents'])}"
                   if p["discarded_extents"] else "") + ".")
    if p["unreadable_extents"]:
        console.print(Text.assemble(("Not readable, not counted:", "bold"),
                                    " " + ", ".join(p["unreadable_extents"])))
    table = Table("unit of work", "owner", "committed at LSN", "queues (puts/gets)")
    for u in p["uows_lost"]:
        table.add_row(str(u["id"]), u["owner"] or "-", str(u["commit_lsn"]), ", ".join(
            f"{n} {c['puts']}/{c['gets']}" for n, c in u["queues"].items()))
    if p["uows_lost"]:
        console.print("Units of work committed after the point (lost):")
        console.print(table)
    queues = sorted(set(p["puts_lost"]) | set(p["gets_undone"]))
    for n in queues:
        console.print(f"  queue {n}: {p['puts_lost'].get(n, 0)} committed put(s) lost, "
                      f"{p['gets_undone'].get(n, 0)} committed get(s) undone (the messages "
                      "come back)")
    for d in p["definitions"]:
        console.print(f"  definition lost: {d['change']} {d['object']} at LSN {d['lsn']}")
    if p["stores_past_point"]:
        console.print("Stores written after the point, damaged at restart (a linear log "
                      "recreates them from their media images): " + ", ".join(
                          f"{n} (LSN {lsn})" for n, lsn in p["stores_past_point"].items()))
    if p["uows_in_flight"]:
        console.print("In flight at the point, backed out at restart: " +
                      ", ".join(map(str, p["uows_in_flight"])))
    if p["uows_in_doubt"]:
        console.print("In doubt at the point, kept in doubt (RESOLVE UOW): " +
                      ", ".join(map(str, p["uows_in_doubt"])))
    if not (p["uows_lost"] or queues or p["definitions"]):
        console.print("No committed work lies after the point.")


@cli.command()
@click.argument("qm")
@click.argument("queue")
@click.option("--to", "to_file", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="the load file to write (harbormq-load format)")
@click.option("--move", is_flag=True, help="take the messages off the queue too")
@click.option("--msgid", default=None, help="only the message with this id (hex)")
@click.option("--correlid", default=None, help="only messages with this correlation id (hex)")
@click.option("--older-than", type=click.FloatRange(0), default=None,
              help="only messages put more than this many seconds ago")
def unload(qm, queue, to_file, move, msgid, correlid, older_than):
    """Copy (or move) a queue's messages to a load file (dmpmqmsg), queue manager running."""
    reply = call(QMConfig.load(qm), {"cmd": "unload", "queue": queue,
                                     "path": str(to_file.absolute()), "move": move,
                                     "msg_id": msgid, "correl_id": correlid,
                                     "older_than_s": older_than},
                 timeout=None, needs="unloading a queue needs a running queue manager")["result"]
    _say(f"HMQ8622I {reply['unloaded']} message(s) of {queue} "
         f"{'moved' if move else 'copied'} to {to_file}.")


@cli.command()
@click.argument("qm")
@click.argument("queue")
@click.option("--from", "from_file", required=True,
              type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="the load file to put on the queue")
def load(qm, queue, from_file):
    """Put the messages of a load file on a queue, in their order (queue manager running)."""
    reply = call(QMConfig.load(qm), {"cmd": "load", "queue": queue,
                                     "path": str(from_file.absolute())},
                 timeout=None, needs="loading a queue needs a running queue manager")["result"]
    _say(f"HMQ8623I {reply['loaded']} message(s) loaded onto {queue}"
         + (f" ({reply['expired_skipped']} expired, skipped)." if reply["expired_skipped"]
            else "."))


@cli.command("dump-config")
@click.argument("qm")
@click.option("--at-time", default=None,
              help="the definitions as they were at this time (ISO 8601), from the log")
@click.option("--to", "to_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="write the script here (default: standard output)")
def dump_config_cmd(qm, at_time, to_file):
    """Every definition as an MQSC script (dmpmqcfg); 'harbormq sc' replays it."""
    from ..fsutil import atomic_write
    from ..unload.definitions import dump_config
    text = dump_config(QMConfig.load(qm), _parse_time(at_time) if at_time else None)
    if to_file is None:
        sys.stdout.write(text)
    else:
        atomic_write(to_file, text.encode())
        _say(f"HMQ8621I The definitions of {qm} were written to {to_file}.")


def _still_locked(config: QMConfig, seconds: float) -> bool:
    """Whether the queue manager's lock is still held after ``seconds``."""
    from ..qmgr.lifecycle import running_pid
    deadline = time.monotonic() + seconds
    while running_pid(config) is not None:
        if time.monotonic() > deadline:
            return True
        time.sleep(0.1)
    return False


@cli.command("reset-log")
@click.argument("qm")
@click.option("--yes", is_flag=True, help="do it (without: only say what it would do)")
@click.option("--force", is_flag=True,
              help="even if the stores were not stopped cleanly (units of work may be "
                   "half applied)")
def reset_log(qm, yes, force):
    """Start a new, empty log when every copy of the old one is lost (queue
    manager stopped cleanly before; stores kept as they are)."""
    from ..qmgr.log_offline import reset_log_stopped
    for line in reset_log_stopped(QMConfig.load(qm), write=yes, force=force):
        _say(line)
    _say(f"HMQ7135W The log of {qm} was reset." if yes else
         "Nothing changed: run again with --yes to reset the log.")


@log.command("need")
@click.argument("qm")
@click.option("--json", "as_json", is_flag=True, help="the facts for scripts (AMQJRNINF)")
def log_need(qm, as_json):
    """Which log extents can be archived or deleted now, and what pins the rest."""
    from ..recovery.need import log_need_report
    config = QMConfig.load(qm)
    try:
        facts = call(config, {"cmd": "log_need"})["log_need"]
    except QueueManagerNotRunning:
        facts = log_need_report(config)
    if as_json:
        console.print_json(json.dumps(facts))
        return
    console.print(f"Queue manager {facts['queue_manager']} ({facts['log_type']} log): restart "
                  f"needs {facts['RECLOG']} onwards (RECSZ {facts['RECSZ']} MB)" +
                  (f", media recovery needs {facts['MEDIALOG']} onwards (MEDIASZ "
                   f"{facts['MEDIASZ']} MB)" if facts["log_type"] == "linear" else "") + ".")
    console.print(f"Oldest extent needed: {facts['oldest_extent_needed']} (its oldest needed "
                  f"record was written {facts['oldest_entry_time']}).")
    console.print("Can be archived or deleted now: " + (", ".join(facts["removable"]) or
                                                         "none"))
    rate = (f"{facts['replay_rate_mb_s']} MB/s as the last long restart measured"
            if facts["replay_rate_measured"] else
            f"an assumed {facts['replay_rate_mb_s']} MB/s: no long restart measured yet")
    console.print(f"Estimated restart time: {facts['restart_estimate_s']} s ({rate}).")
    slow = sorted(facts["media_estimates_s"].items(), key=lambda kv: -kv[1])[:5]
    if slow:
        console.print("Estimated media recovery time, longest first: " +
                      ", ".join(f"{name} {secs} s" for name, secs in slow) + ".")
    from rich.table import Table
    table = Table("EXTENT", "STATE", "NEEDED FOR", "ON DISK", "ARCHIVED", "DELETED")
    for e in facts["extents"]:
        table.add_row(e["extent"], e["state"], {"restart": "restart", "media": "media recovery",
                                                "none": "not needed"}[e["needed"]],
                      _yes(e["present"]), _yes(e["archived"]), _yes(e["deleted"]))
    _print_table(table)
    if facts["pinned_by"]:
        console.print(f"The media recovery point stays in {facts['MEDIALOG']} because of:")
        for p in facts["pinned_by"]:
            console.print(f"  {p['object']}: {p['why']} (LSN {p['replay_from']}, since "
                          f"{p['since'] or 'its creation'})")
        console.print(f"  To move it: harbormq image {qm} --type queue NAME (or --type all).")


def _say(text: str, *, err: bool = False) -> None:
    """One message, never broken into lines by rich: paths stay whole for
    scripts (a terminal still wraps it)."""
    (err_console if err else console).print(text, soft_wrap=True)


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _print_table(table) -> None:
    """A table of extents, extent names never cut short (min_width); 120
    columns wide when the output is no terminal (rich would assume 80)."""
    table.columns[0].min_width = 12
    if console.is_terminal or console.width >= 120:
        console.print(table)
    else:
        LazyConsole(width=120).print(table)


@log.command("archive")
@click.argument("qm")
def log_archive(qm):
    """Archive the log (ARCHIVE LOG): close the active extent, then copy every
    closed extent not archived yet to the archive path(s). With the queue
    manager stopped, the closed extents only (the active one stays open)."""
    config = QMConfig.load(qm)
    try:
        r = call(config, {"cmd": "log_archive"}, timeout=None)["result"]
    except QueueManagerNotRunning:
        from ..qmgr.log_offline import archive_stopped
        r = archive_stopped(config)
    if r["closed"]:
        _say(f"HMQ7480I Log extent {r['closed']} closed and ready for archive; "
             f"{r['current']} is now the current extent.")
    where = ", ".join(r["paths"])
    if r["archived"]:
        _say(f"HMQ7481I Log extent(s) {', '.join(r['archived'])} archived to {where}.")
    else:
        _say(f"HMQ7481I Every closed log extent was already archived (to {where}).")
    if r["closed"] is None:
        _say(f"Queue manager {qm} is not running: the active extent {r['current']} "
             "stays open and is archived once it is closed.")
    _print_deleted(r["deleted"])


@log.command("archived")
@click.argument("qm")
@click.argument("extent")
def log_archived(qm, extent):
    """Say that an archiver copied closed extent EXTENT (SET LOG ARCHIVED)."""
    config = QMConfig.load(qm)
    try:
        r = call(config, {"cmd": "log_archived", "extent": extent})["result"]
    except QueueManagerNotRunning:
        from ..qmgr.log_offline import mark_archived_stopped
        r = mark_archived_stopped(config, extent)
    _say(f"HMQ7481I Log extent {r['extent']} marked archived.")
    _print_deleted(r["deleted"])


@log.command("delete")
@click.argument("qm")
@click.option("--through", metavar="EXTENT",
              help="delete this extent and every older one (all must be unneeded)")
@click.option("--all", "everything", is_flag=True,
              help="delete every extent that neither restart nor media recovery needs")
def log_delete(qm, through, everything):
    """Delete closed extents nothing needs any more, oldest first. In archive
    mode only archived ones; an extent never archived is deleted with a
    warning (HMQ7483W)."""
    if bool(through) == everything:
        raise click.UsageError("give --through EXTENT (that extent and every older one) or "
                               "--all (every extent nothing needs)")
    config = QMConfig.load(qm)
    try:
        r = call(config, {"cmd": "log_delete", "through": through})["result"]
    except QueueManagerNotRunning:
        from ..qmgr.log_offline import delete_stopped
        r = delete_stopped(config, through)
    if not r["deleted"]:
        if through:
            why = f"{through.upper()} and every extent before it are deleted already."
        else:
            why = ("every closed extent left is still needed" +
                   (" or not archived yet" if config.log_management == "archive" else "") +
                   f" (harbormq log need {qm}).")
        _say(f"HMQ7482I No log extent deleted: {why}")
        return
    _print_deleted(r["deleted"])
    if r["never_archived"]:
        _say(f"HMQ7483W Log extent(s) {', '.join(r['never_archived'])} were deleted "
             "without ever being archived.", err=True)


def _print_deleted(names: list[str]) -> None:
    if names:
        _say(f"HMQ7482I Log extent(s) {', '.join(names)} deleted: neither restart "
             "nor media recovery needs them.")


@log.command("scrub")
@click.argument("qm")
@click.option("--json", "as_json", is_flag=True)
def log_scrub(qm, as_json):
    """Check the archive: each archive path's manifest (its chain of hashes),
    every archived extent's size, SHA-256 and records. Exit status 1 when
    anything is bad."""
    from ..errors import ConfigError
    from ..log.archive import scrub
    config = QMConfig.load(qm)
    if not config.log_archive_paths:
        raise ConfigError(f"queue manager {qm} has no log archive path: there is no archive "
                          "to scrub", hint="set log.archive_path in qm.toml (one or two "
                                           "directories)")
    reports = scrub(list(config.log_archive_paths), config.name)
    if as_json:
        console.print_json(json.dumps(reports))
    else:
        for r in reports:
            checked = f"{r['extents']} extent(s), {r['bytes']} bytes checked"
            if r["bad"] is None:
                _say(f"HMQ7485I Archive {r['path']}: {checked}, all good.")
            else:
                _say(f"HMQ7486E Archive {r['path']}: {checked} before the first bad "
                     f"entry: {r['bad']}")
    bad = [r for r in reports if r["bad"] is not None]
    if bad:
        raise HarbormqError(f"{len(bad)} of {len(reports)} archive path(s) of queue manager "
                            f"{qm} hold a bad entry; the first: {bad[0]['bad']}",
                            msgid="HMQ7486E",
                            hint="copy the extent back from the other archive path or a "
                                 "backup; the manifest says what it must hash to")


@log.command("recover-copy")
@click.argument("qm")
@click.option("--dry-run", is_flag=True, help="read both copies and say what would be "
                                              "re-created, changing nothing")
def log_recover_copy(qm, dry_run):
    """Re-create the missing or damaged copies of a dual log (queue manager stopped)."""
    from ..qmgr.lifecycle import recover_log_copy
    for line in recover_log_copy(QMConfig.load(qm), dry_run=dry_run):
        console.print(line)


@cli.command()
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="keep the tour's HARBORMQ_HOME here instead of a temporary directory")
@click.option("--seconds", type=float, default=4.0, show_default=True,
              help="how long the workload runs before the SIGKILL")
def tour(workdir, seconds):
    """The end-to-end tour: create, load, SIGKILL, restart, verify."""
    from .tour import run_tour
    sys.exit(run_tour(workdir=workdir, seconds=seconds, console=console))


def _attach_subcommands() -> None:
    """Commands that live beside the subsystem they drive."""
    from ..pipeline.cli import pipeline
    from .admin import sc, user
    from .backup import register as register_backup
    from .standby import register as register_standby
    register_backup(cli)
    register_standby(cli)
    cli.add_command(sc)
    cli.add_command(user)
    cli.add_command(pipeline)


_attach_subcommands()


def main(argv: list[str] | None = None) -> int:
    try:
        cli.main(args=argv, prog_name="harbormq", standalone_mode=False)
        return 0
    except HarbormqError as exc:
        from rich.text import Text
        err_console.print(Text.assemble((exc.msgid, "bold red"), f": {exc.message}" +
                                        (f"\n  hint: {exc.hint}" if exc.hint else "")))
        return 1
    except click.exceptions.Abort:
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
