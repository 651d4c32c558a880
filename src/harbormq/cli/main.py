"""The ``harbormq`` command's root group: each command group registers itself
here from its own module (``cli/__init__.py`` lists them). Errors become one
operator message and an exit status here, in one place (``main``)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..errors import HarbormqError
from ..pipeline.cli import pipeline
from . import admin, backup, lifecycle, log, media, standby, trigger, unload
from .consoles import console, err_console


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="harbormq")
def cli():
    """harbormq: a durable message queue manager (IBM MQ's logging and recovery design)."""


@cli.command()
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="keep the tour's HARBORMQ_HOME here instead of a temporary directory")
@click.option("--seconds", type=float, default=4.0, show_default=True,
              help="how long the workload runs before the SIGKILL")
def tour(workdir, seconds):
    """The end-to-end tour: create, load, SIGKILL, restart, verify."""
    # imported when run, not registered from its module: tour.py also runs as a
    # program (python -m harbormq.cli.tour --child), which must not find it imported
    from .tour import run_tour
    sys.exit(run_tour(workdir=workdir, seconds=seconds, console=console))


for group in (lifecycle, log, media, unload, backup, standby, admin, trigger):
    group.register(cli)
cli.add_command(pipeline)


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
