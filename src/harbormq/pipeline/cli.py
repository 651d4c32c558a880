"""``harbormq pipeline JOB ...`` and ``python -m harbormq.pipeline JOB ...``.

Every Spark job takes ``--master`` (default: ``local[*]``, or what spark-submit
chose); ``SPARK_*`` settings and ``--conf KEY=VALUE`` pass through."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import click

from ..errors import ConfigError, HarbormqError
from ..log.inspect import parse_time

_master = click.option("--master", default=None,
                       help="Spark master URL (default local[*], or spark-submit's)")
_conf = click.option("--conf", "confs", multiple=True, metavar="KEY=VALUE",
                     help="extra Spark configuration, repeatable")
_log = click.option("--log", default=None,
                    help="log or archive directory, extent file or glob (comma separated)")
_lake = click.option("--lake", default=None, type=click.Path(file_okay=False),
                     help="a log lake made by 'ingest'")
_qm = click.option("--qm", "qm_name", default=None,
                   help="queue manager name, when the extents hold several")


def _session(job: str, master: str | None, confs: tuple[str, ...]):
    require_spark()
    from .session import session
    conf = {}
    for item in confs:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--conf {item!r} is not KEY=VALUE", msgid="HMQ7602E")
        conf[key] = value
    return session(job, master, conf)


def require_spark() -> None:
    """The pipeline is an optional install: say so instead of an ImportError."""
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        raise HarbormqError(f"the Spark pipeline is not installed ({exc.name} is missing)",
                            msgid="HMQ8870E",
                            hint="pip install 'harbormq[spark]' (Java 17 is needed too)") \
            from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def pipeline():
    """Spark jobs over the recovery log: ingest, rebuild, report, trace, channels, load."""


@pipeline.command()
@_log
@_lake
@_qm
@click.option("--with-bodies", is_flag=True, help="keep message bodies in the lake")
@_master
@_conf
def ingest(log, lake, qm_name, with_bodies, master, confs):
    """Append new log records to a Parquet lake (by day and record type)."""
    from .ingest import run_ingest
    if not log or not lake:
        raise ConfigError("ingest needs --log and --lake", msgid="HMQ7602E")
    spark = _session("ingest", master, confs)
    result = run_ingest(spark, log, lake, qm_name=qm_name, with_bodies=with_bodies)
    click.echo(json.dumps(result))


@pipeline.command()
@_log
@_lake
@_qm
@click.option("--at-lsn", type=int, default=None, help="state after every record <= this LSN")
@click.option("--at-time", default=None,
              help="state after every record at or before this time (ISO 8601, UTC default)")
@click.option("--queue", "queues", multiple=True, help="queue to rebuild (default: all)")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path))
@_master
@_conf
def rebuild(log, lake, qm_name, at_lsn, at_time, queues, out, master, confs):
    """The committed contents of queues at an LSN or a time."""
    from .logdata import LogInput
    from .rebuild import run_rebuild
    source = LogInput(log, lake, qm_name)
    if (at_lsn is None) == (at_time is None):     # before Spark starts: a usage error
        raise ConfigError("give exactly one of --at-lsn and --at-time", msgid="HMQ7602E")
    spark = _session("rebuild", master, confs)
    summary = run_rebuild(spark, source, at_lsn=at_lsn, at_time_ns=parse_time(at_time),
                          queues=list(queues) or None, out=out)
    click.echo(json.dumps(summary))


@pipeline.command()
@_log
@_lake
@_qm
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path))
@_master
@_conf
def report(log, lake, qm_name, out, master, confs):
    """Log retention, units of work and queue activity as JSON and plots."""
    from .logdata import LogInput
    from .report import run_report
    source = LogInput(log, lake, qm_name)
    spark = _session("report", master, confs)
    result = run_report(spark, source.records(spark), out)
    click.echo(json.dumps({"out": str(out), "records": result["records"],
                           "uows": result["uows"]["by_outcome"]}))


_logs = click.option("--log", "logs", multiple=True,
                     help="a queue manager's log or archive directory, extent file or glob "
                          "(comma separated); repeat it for each queue manager")
_lakes = click.option("--lake", "lakes", multiple=True,
                      type=click.Path(file_okay=False),
                      help="a queue manager's log lake made by 'ingest'; repeatable")


def _inputs(logs, lakes, qm_name) -> list:
    """One LogInput per queue manager (each --log or --lake is one)."""
    from .logdata import LogInput
    if not logs and not lakes:
        raise ConfigError("give --log or --lake (one per queue manager)", msgid="HMQ7602E")
    if qm_name and len(logs) + len(lakes) > 1:
        raise ConfigError("--qm chooses among the queue managers of one --log; with several "
                          "inputs each --log or --lake must be one queue manager's",
                          msgid="HMQ7602E")
    return [LogInput(log=x, qm_name=qm_name) for x in logs] + \
        [LogInput(lake=x, qm_name=qm_name) for x in lakes]


@pipeline.command()
@click.option("--msgid", default=None, help="message id in hex")
@click.option("--correlid", default=None,
              help="correlation id in hex: trace every message put with it")
@_logs
@_lakes
@_qm
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of text")
@_master
@_conf
def trace(msgid, correlid, logs, lakes, qm_name, as_json, master, confs):
    """The life of one message: put, channel batches, gets, backouts, outcome.

    Give one --log (or --lake) per queue manager to follow the message across
    channels, in time order."""
    from .trace import format_life, trace_across
    if (msgid is None) == (correlid is None):
        raise ConfigError("give exactly one of --msgid and --correlid", msgid="HMQ7602E")
    sources = _inputs(logs, lakes, qm_name)
    spark = _session("trace", master, confs)
    life = trace_across(spark, sources, msg_id_hex=msgid, correl_id_hex=correlid)
    click.echo(json.dumps(life, indent=1) if as_json else format_life(life))


@pipeline.command()
@_logs
@_lakes
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path))
@_master
@_conf
def channels(logs, lakes, out, master, confs):
    """Channels from both sides' logs: batches, sequence numbers, in-doubt windows."""
    from .chanreport import run_channels
    sources = _inputs(logs, lakes, None)
    spark = _session("channels", master, confs)
    result = run_channels(spark, sources, out)
    click.echo(json.dumps({"out": str(out), "channels": {
        name: {"batches": [c["sender"]["batches"], c["receiver"]["batches"]],
               "last_seq": [(c[s]["last_committed"] or {}).get("seq")
                            for s in ("sender", "receiver")],
               "in_doubt_windows": c["in_doubt"]["windows"],
               "mismatches": len(c["mismatches"])}
        for name, c in result["channels"].items()}}))


@pipeline.command()
@click.option("--qm", "qm_name", required=True, help="queue manager to load into")
@click.option("--queue", required=True)
@click.option("--file", "path", required=True,
              type=click.Path(dir_okay=False, exists=True, path_type=Path))
@click.option("--home", default=None, type=click.Path(file_okay=False, path_type=Path),
              help="HARBORMQ_HOME (default: the environment's)")
def load(qm_name, queue, path, home):
    """Put the messages of a load file (from 'rebuild') on a queue.

    A running queue manager loads it itself (its admin socket; it keeps serving
    meanwhile); a stopped one is opened in this process for the load."""
    from .. import QueueManager
    from ..admin.client import call
    from ..config import QMConfig
    from ..qmgr.lifecycle import running_pid
    from ..unload.loadfile import load_file_into
    config = QMConfig.load(qm_name, home)
    if running_pid(config) is not None:
        reply = call(config, {"cmd": "load", "queue": queue, "path": str(path.resolve())},
                     timeout=3600)
        click.echo(json.dumps(reply["result"]))
        return
    with QueueManager.open(qm_name, home=home) as qm:
        click.echo(json.dumps(load_file_into(qm, queue, path)))



# -- a queue sharing group's logs (pipeline/group.py) ---------------------------------------

_members = click.option("--member", "members", multiple=True, required=True,
                        metavar="QM=LOGDIR[,ARCHIVE...]",
                        help="a member of the group and its log directory (then its archive "
                             "paths, where its extents no longer in the log are); repeatable")


def _member_logs(members: tuple[str, ...]) -> dict:
    from ..qsg.merge import MemberLog
    out = {}
    for item in members:
        name, sep, paths = item.partition("=")
        if not sep or not name:
            raise ConfigError(f"--member {item!r} is not QM=LOGDIR[,ARCHIVE...]",
                              msgid="HMQ7602E")
        parts = [p for p in paths.split(",") if p]
        log_dir = Path(parts[0]) if parts and parts[0] != "-" else None
        out[name] = MemberLog(name, log_dir, tuple(Path(p) for p in parts[1:]))
    return out


@pipeline.command("group-ingest")
@_members
@click.option("--lake", required=True, type=click.Path(file_okay=False, path_type=Path))
@_master
@_conf
def group_ingest_cmd(members, lake, master, confs):
    """Every member's log into one lake in the group's stamp order."""
    from .group import group_ingest
    spark = _session("group-ingest", master, confs)
    click.echo(json.dumps(group_ingest(spark, _member_logs(members), lake)))


@pipeline.command("group-rebuild")
@click.option("--lake", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--queue", "queues", multiple=True, help="shared queue (default: all)")
@click.option("--at-stamp", type=int, default=None, help="state after this group stamp")
@click.option("--at-time", default=None, help="state at this time (ISO 8601)")
@_master
@_conf
def group_rebuild_cmd(lake, queues, at_stamp, at_time, master, confs):
    """The messages of shared queues at a past point, from every member's log."""
    from .group import group_rebuild
    spark = _session("group-rebuild", master, confs)
    at_ns = parse_time(at_time) if at_time else None
    out = group_rebuild(spark, lake, list(queues) or None, at_stamp=at_stamp, at_time_ns=at_ns)
    click.echo(json.dumps({q: [{**m, "msg_id": m["msg_id"].hex()} for m in msgs]
                           for q, msgs in out.items()}))


@pipeline.command("group-report")
@click.option("--lake", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path))
@_master
@_conf
def group_report_cmd(lake, out, master, confs):
    """Which member did what to each shared queue (group_report.json)."""
    from .group import group_report
    spark = _session("group-report", master, confs)
    click.echo(json.dumps(group_report(spark, lake, out)))

def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m harbormq.pipeline`` and of spark-submit."""
    try:
        pipeline.main(args=argv, prog_name="harbormq pipeline", standalone_mode=False)
        return 0
    except HarbormqError as exc:
        print(f"{exc.msgid}: {exc.message}" + (f"\n  hint: {exc.hint}" if exc.hint else ""),
              file=sys.stderr)
        return 1
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except Exception as exc:
        # an error raised on an executor or in planning reaches us wrapped by
        # Spark; its operator message (HMQnnnnE: ...) is what the operator needs
        found = _operator_message(str(exc))
        if found is None:
            raise
        print(found, file=sys.stderr)
        return 1


def _operator_message(text: str) -> str | None:
    match = re.search(r"harbormq\.errors\.\w+: (HMQ\d{4}[EW]: [^\n]*)", text) or \
        re.search(r"\b\w+Error: (HMQ\d{4}[EW]: [^\n]*)", text)
    return match.group(1) if match else None
