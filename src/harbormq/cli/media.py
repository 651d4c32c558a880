"""Media recovery of objects: ``harbormq image`` (rcdmqimg) and ``harbormq
recreate`` (rcrmqobj), both through a running queue manager.

    harbormq image QM [NAME] [--type all|qmgr|queue|qlocal|qalias|qmodel|qremote|process|namelist|
                                     channel|authinfo]
    harbormq recreate QM [NAME] [--type ...] [--dry-run]

``register(cli)`` adds them to the main command group (``cli/main.py``).
"""

from __future__ import annotations

import click

from ..admin.client import call
from ..config import QMConfig
from ..core.objects import IMAGE_TYPES
from ..errors import HarbormqError
from .consoles import console, err_console

#: the hint when image or recreate finds the queue manager stopped
MEDIA_NEEDS = "media images and recreate need a running queue manager"
_TYPES = click.Choice(list(IMAGE_TYPES))


def _print_progress(p: dict) -> None:
    pct = 100 * p["done"] // max(1, p["total"])
    err_console.print(f"  {p['object']}: {pct}%", highlight=False)


@click.command()
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


@click.command()
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
        if r.get("definition"):
            console.print(f"HMQ7741I Object {r['object']} is a definition, kept in the "
                          "catalog of the queue manager object: 'recreate --type qmgr' "
                          "rebuilds it from the log.")
        elif "definitions" in r:
            console.print(f"HMQ7474I Object {r['object']} recreated: {r['definitions']} "
                          f"definitions from LSN {r['from_lsn']} to {r['to_lsn']}.")
        else:
            console.print(f"HMQ7474I Queue {r['object']} recreated: {r['messages']} messages "
                          f"(image at LSN {r['image_lsn']}, {r['effects']} later effects "
                          f"replayed to LSN {r['to_lsn']}).")


def register(cli: click.Group) -> None:
    cli.add_command(image)
    cli.add_command(recreate)
