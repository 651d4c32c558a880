"""``harbormq sc`` (runmqsc) and ``harbormq user`` (users for STOMP logins).

    harbormq sc QM [-c MQSC] [--continue]
    harbormq user add QM NAME [--group G ...]
    harbormq user delete QM NAME
    harbormq user list QM

``register(cli)`` adds them to the main command group (``cli/main.py``).
Errors are HarbormqError, turned into an operator message and exit status 1
by ``harbormq.cli.main.main``.
"""

from __future__ import annotations

import sys

import click

from ..admin.client import send_mqsc
from ..config import QMConfig
from ..security import Security


@click.command("sc")
@click.argument("qm")
@click.option("-c", "--command", "command_text", default=None, metavar="MQSC",
              help="run these MQSC commands instead of reading standard input")
@click.option("--continue", "continue_on_error", is_flag=True,
              help="go on after a failing command (default: stop at the first)")
def sc(qm, command_text, continue_on_error):
    """Run MQSC commands against running queue manager QM (runmqsc).

    Commands come from -c or standard input, one per line ('+'/'-' continue a
    line, '*' starts a comment). The exit status is 1 if any command had a
    syntax error or failed; processing stops at the first one unless --continue."""
    config = QMConfig.load(qm)
    text = command_text if command_text is not None else sys.stdin.read()
    reply = send_mqsc(config, text, continue_on_error)
    click.echo(reply["output"], nl=False)
    if reply.get("errors"):
        sys.exit(1)


@click.group("user")
def user():
    """Users of a queue manager (STOMP login and passcode, scrypt hashes)."""


def _read_password(name: str) -> str:
    stdin = sys.stdin
    if stdin.isatty():
        return click.prompt(f"Password for {name}", hide_input=True, confirmation_prompt=True)
    line = stdin.readline()
    return line[:-1] if line.endswith("\n") else line


@user.command("add")
@click.argument("qm")
@click.argument("name")
@click.option("--group", "-g", "groups", multiple=True,
              help="a group the user belongs to (repeat for more); mqm makes an administrator")
def user_add(qm, name, groups):
    """Add user NAME to QM; the password is prompted for (or one line of stdin)."""
    config = QMConfig.load(qm)
    password = _read_password(name)
    Security.for_config(config).users.add(name, password, groups)
    click.echo(f"HMQ8886I: user {name} added to queue manager {qm}"
               + (f" (groups {', '.join(sorted(set(groups)))})" if groups else "") + ".")


@user.command("delete")
@click.argument("qm")
@click.argument("name")
def user_delete(qm, name):
    """Delete user NAME from QM (its authority records stay until deleted)."""
    config = QMConfig.load(qm)
    Security.for_config(config).users.delete(name)
    click.echo(f"HMQ8887I: user {name} deleted from queue manager {qm}.")


@user.command("list")
@click.argument("qm")
def user_list(qm):
    """List the users of QM and their groups."""
    users = Security.for_config(QMConfig.load(qm)).users
    for name in users.names():
        click.echo(f"{name}\t{','.join(users.groups_of(name))}")


def register(cli: click.Group) -> None:
    cli.add_command(sc)
    cli.add_command(user)
