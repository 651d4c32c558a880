"""Queue contents and definitions as files: ``harbormq unload`` and ``load``
(dmpmqmsg) and ``harbormq dump-config`` (dmpmqcfg).

    harbormq unload QM QUEUE --to FILE [--move] [--msgid HEX] [--correlid HEX]
                                       [--older-than SECONDS]
    harbormq load QM QUEUE --from FILE
    harbormq dump-config QM [--at-time T] [--to FILE]

``register(cli)`` adds them to the main command group (``cli/main.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..admin.client import call
from ..config import QMConfig
from .consoles import say
from .options import parse_time


@click.command()
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
    say(f"HMQ8622I {reply['unloaded']} message(s) of {queue} "
        f"{'moved' if move else 'copied'} to {to_file}.")


@click.command()
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
    say(f"HMQ8623I {reply['loaded']} message(s) loaded onto {queue}"
        + (f" ({reply['expired_skipped']} expired, skipped)." if reply["expired_skipped"]
           else "."))


@click.command("dump-config")
@click.argument("qm")
@click.option("--at-time", default=None,
              help="the definitions as they were at this time (ISO 8601), from the log")
@click.option("--to", "to_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="write the script here (default: standard output)")
def dump_config_cmd(qm, at_time, to_file):
    """Every definition as an MQSC script (dmpmqcfg); 'harbormq sc' replays it."""
    from ..fsutil import atomic_write
    from ..pubsub.status import subscription_attrs
    from ..unload.definitions import dump_config
    text = dump_config(QMConfig.load(qm), parse_time(at_time) if at_time else None,
                       subscription=subscription_attrs)
    if to_file is None:
        sys.stdout.write(text)
    else:
        atomic_write(to_file, text.encode())
        say(f"HMQ8621I The definitions of {qm} were written to {to_file}.")


def register(cli: click.Group) -> None:
    for command in (unload, load, dump_config_cmd):
        cli.add_command(command)
