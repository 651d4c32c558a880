"""``harbormq log`` (the recovery log: look at it, archive, delete and scrub its
extents, repair it) and ``harbormq reset-log`` (docs/administration.md).

    harbormq log dump QM [--from-lsn N] [--to-lsn N] [--since T] [--until T]
                         [--queue Q] [--uow N] [--json]
    harbormq log map QM [--json]
    harbormq log need QM [--json]
    harbormq log archive QM
    harbormq log archived QM EXTENT
    harbormq log delete QM (--through EXTENT | --all) [--dry-run | --yes]
    harbormq log scrub QM [--json]
    harbormq log recover-copy QM [--dry-run]
    harbormq log rebuild-control QM [--dry-run | --yes]
    harbormq log crestart QM (--end-lsn N | --end-time T | --end-extent EXTENT)
                             [--dry-run | --yes] [--json]
    harbormq log crestart QM --cancel
    harbormq reset-log QM [--dry-run | --yes] [--force]

The plan-first ones (delete, recover-copy, rebuild-control, crestart,
reset-log) follow the convention of ``cli/__init__.py``.

``register(cli)`` adds them to the main command group (``cli/main.py``).
"""

from __future__ import annotations

import json
import sys

import click

from ..admin.client import call
from ..config import QMConfig
from ..errors import HarbormqError, QueueManagerNotRunning
from .consoles import LazyConsole, console, err_console, say
from .options import (
    ACT,
    PLAN,
    confirmed,
    dry_run_option,
    parse_time,
    plan_first,
    plan_then_act,
    yes_option,
)


@click.group()
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
        say(f"HMQ7480I Log extent {r['closed']} closed and ready for archive; "
            f"{r['current']} is now the current extent.")
    where = ", ".join(r["paths"])
    if r["archived"]:
        say(f"HMQ7481I Log extent(s) {', '.join(r['archived'])} archived to {where}.")
    else:
        say(f"HMQ7481I Every closed log extent was already archived (to {where}).")
    if r["closed"] is None:
        say(f"Queue manager {qm} is not running: the active extent {r['current']} "
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
    say(f"HMQ7481I Log extent {r['extent']} marked archived.")
    _print_deleted(r["deleted"])


@log.command("delete")
@click.argument("qm")
@click.option("--through", metavar="EXTENT",
              help="delete this extent and every older one (all must be unneeded)")
@click.option("--all", "everything", is_flag=True,
              help="delete every extent that neither restart nor media recovery needs")
@dry_run_option("say which extents would be deleted, delete none")
@yes_option("delete without asking (on a terminal it asks first)")
def log_delete(qm, through, everything, dry_run, yes):
    """Delete closed extents nothing needs any more, oldest first. In archive
    mode only archived ones; an extent never archived is deleted with a
    warning (HMQ7483W)."""
    if bool(through) == everything:
        raise click.UsageError("give --through EXTENT (that extent and every older one) or "
                               "--all (every extent nothing needs)")
    # off a terminal it deletes without --yes, as it did before it could ask
    how = plan_first(dry_run, yes, unattended=ACT)
    config = QMConfig.load(qm)
    if how != ACT:
        plan = _delete(config, through, plan_only=True)
        if not plan["would_delete"]:
            _say_nothing_deleted(config, qm, through)
            return
        say(f"Log extent(s) {', '.join(plan['would_delete'])} would be deleted: neither "
            "restart nor media recovery needs them" +
            (f"; never archived: {', '.join(plan['never_archived'])}"
             if plan["never_archived"] else "") + ".")
        if how == PLAN or not confirmed(f"Delete {len(plan['would_delete'])} log "
                                        f"extent(s) of {qm}?"):
            say("Nothing deleted: run again with --yes to delete them.")
            return
        through = plan["would_delete"][-1]      # what was shown, not what went since
    r = _delete(config, through)
    if not r["deleted"]:
        _say_nothing_deleted(config, qm, through)
        return
    _print_deleted(r["deleted"])
    if r["never_archived"]:
        say(f"HMQ7483W Log extent(s) {', '.join(r['never_archived'])} were deleted "
            "without ever being archived.", err=True)


def _delete(config: QMConfig, through: str | None, *, plan_only: bool = False) -> dict:
    """The deletion (or only its plan) by the running queue manager, or with it
    stopped on its control file, under its instance lock."""
    try:
        return call(config, {"cmd": "log_delete_plan" if plan_only else "log_delete",
                             "through": through})["result"]
    except QueueManagerNotRunning:
        from ..qmgr.log_offline import delete_stopped, plan_delete_stopped
        return (plan_delete_stopped if plan_only else delete_stopped)(config, through)


def _say_nothing_deleted(config: QMConfig, qm: str, through: str | None) -> None:
    if through:
        why = f"{through.upper()} and every extent before it are deleted already."
    else:
        why = ("every closed extent left is still needed" +
               (" or not archived yet" if config.log_management == "archive" else "") +
               f" (harbormq log need {qm}).")
    say(f"HMQ7482I No log extent deleted: {why}")


def _print_deleted(names: list[str]) -> None:
    if names:
        say(f"HMQ7482I Log extent(s) {', '.join(names)} deleted: neither restart "
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
                say(f"HMQ7485I Archive {r['path']}: {checked}, all good.")
            else:
                say(f"HMQ7486E Archive {r['path']}: {checked} before the first bad "
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


@log.command("rebuild-control")
@click.argument("qm")
@dry_run_option("say what would be written, write nothing")
@yes_option("write it without asking (off a terminal, without it: only say what would "
            "be written)")
def log_rebuild_control(qm, dry_run, yes):
    """Rebuild a lost log control file from the extents (queue manager stopped)."""
    from ..qmgr.log_offline import rebuild_control_stopped
    how = plan_first(dry_run, yes)
    config = QMConfig.load(qm)
    written = plan_then_act(lambda write: rebuild_control_stopped(config, write=write),
                            _say_lines, how, f"Write this control file for {qm}?")
    say(f"HMQ7123W The log control file of {qm} was rebuilt." if written else
        "Nothing written: run again with --yes to write it.")


def _say_lines(lines: list[str]) -> None:
    for line in lines:
        say(line)


@log.command("crestart")
@click.argument("qm")
@click.option("--end-lsn", type=click.IntRange(0), default=None,
              help="give up every record that ends after this LSN")
@click.option("--end-time", default=None,
              help="give up every record written after this time (ISO 8601; without a "
                   "zone, local time)")
@click.option("--end-extent", default=None,
              help="give up everything after this closed extent (e.g. the last one archived)")
@dry_run_option("say what it would lose, record nothing")
@yes_option("record it without asking (off a terminal, without it: only say what it "
            "would lose)")
@click.option("--cancel", is_flag=True, help="remove a recorded conditional restart")
@click.option("--json", "as_json", is_flag=True, help="the whole plan as JSON")
def log_crestart(qm, end_lsn, end_time, end_extent, dry_run, yes, cancel, as_json):
    """Conditional restart: give up the log after a point (queue manager stopped).

    Says exactly what is lost; once recorded (--yes, or confirmed) the next
    start carries it out."""
    from ..qmgr.log_offline import crestart_cancel, crestart_stopped
    if cancel and dry_run:
        raise click.UsageError("--cancel removes a recorded conditional restart at once: "
                               "there is no plan to print")
    how = plan_first(dry_run, yes)
    config = QMConfig.load(qm)
    if cancel:
        pending = crestart_cancel(config)
        say("HMQ7130W The conditional restart at LSN "
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
        end_ns, requested = parse_time(end_time), f"--end-time {end_time}"
    recorded = plan_then_act(
        lambda write: crestart_stopped(config, end_lsn=end_lsn, end_time_ns=end_ns,
                                       end_extent=end_extent, requested=requested,
                                       write=write),
        (lambda p: console.print_json(json.dumps(p))) if as_json else _print_crestart_plan,
        how, f"Record this conditional restart of {qm}?")
    say("HMQ7130W Recorded: the next start of " + qm + " carries it out." if recorded else
        "Nothing recorded: run again with --yes to record it.")


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


@click.command("reset-log")
@click.argument("qm")
@dry_run_option("say what it would do, change nothing")
@yes_option("do it without asking (off a terminal, without it: only say what it would do)")
@click.option("--force", is_flag=True,
              help="even if the stores were not stopped cleanly (units of work may be "
                   "half applied)")
def reset_log(qm, dry_run, yes, force):
    """Start a new, empty log when every copy of the old one is lost (queue
    manager stopped cleanly before; stores kept as they are)."""
    from ..qmgr.log_offline import reset_log_stopped
    how = plan_first(dry_run, yes)
    config = QMConfig.load(qm)
    reset = plan_then_act(lambda write: reset_log_stopped(config, write=write, force=force),
                          _say_lines, how, f"Start a new log for {qm}?")
    say(f"HMQ7135W The log of {qm} was reset." if reset else
        "Nothing changed: run again with --yes to reset the log.")


def register(cli: click.Group) -> None:
    cli.add_command(log)
    cli.add_command(reset_log)
