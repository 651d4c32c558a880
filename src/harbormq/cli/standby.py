"""``harbormq replay`` and ``harbormq activate``: a standby queue manager kept
current by log replay (docs/standby.md).

    harbormq replay QM --from ARCHIVE_DIR [--from DIR2] [--follow] [--interval S] [--json]
    harbormq activate QM [--no-start] [--json]

``register(cli)`` adds them to the main command group (``cli/main.py``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from ..config import QMConfig
from .consoles import LazyConsole

console = LazyConsole(soft_wrap=True)
err_console = LazyConsole(stderr=True, soft_wrap=True)


def _round_line(qm: str, r) -> str:
    got = (f"fetched {len(r.fetched)} extent(s) ({r.fetched[0]}..{r.fetched[-1]}), "
           if r.fetched else "nothing new in the archive, ")
    lag = ""
    if r.last_record_ns:
        lag = (f"; the standby is current to {(time.time_ns() - r.last_record_ns) / 1e9:.1f} s "
               f"ago, {(time.time_ns() - r.archived_ns) / 1e9:.1f} s after the archive had it")
    return (f"HMQ7305I standby {qm}: {got}replayed to LSN {r.replayed_lsn} "
            f"({r.records} records, {r.effects} effects in {r.seconds:.2f} s), "
            f"{r.in_flight} unit(s) of work in flight, {r.in_doubt} in doubt{lag}")


def register(cli: click.Group) -> None:
    @cli.command("replay")
    @click.argument("qm")
    @click.option("--from", "archives", multiple=True,
                  type=click.Path(file_okay=False, path_type=Path),
                  help="the primary's archive path (as in its qm.toml; twice for two); "
                       "needed the first time, remembered after")
    @click.option("--follow", is_flag=True,
                  help="keep replaying extents as they are archived, until stopped "
                       "(SIGTERM, Ctrl-C) or activated")
    @click.option("--interval", type=click.FloatRange(0.05, 3600), default=1.0,
                  show_default=True, help="seconds between looks at the archive")
    @click.option("--json", "as_json", is_flag=True, help="one JSON line per round")
    def replay_cmd(qm, archives, follow, interval, as_json):
        """Keep standby queue manager QM current by replaying the primary's
        archived log (strmqm -r). It accepts no connections until activated."""
        from ..qmgr.standby import replay

        def on_round(r) -> None:
            if as_json:
                print(json.dumps(r.as_dict()), flush=True)
            else:
                console.print(_round_line(qm, r))

        def on_error(exc) -> None:
            err_console.print(f"{exc.msgid}: {exc.message} (retried every {interval} s)")

        replay(QMConfig.load(qm), list(archives), follow=follow, interval=interval,
               on_round=on_round, on_error=on_error, console=err_console)

    @cli.command("activate")
    @click.argument("qm")
    @click.option("--no-start", is_flag=True,
                  help="only end replay and make it an ordinary queue manager")
    @click.option("--force", is_flag=True,
                  help="activate even if the archive cannot be replayed to its end (what it "
                       "holds beyond the log replayed so far is lost)")
    @click.option("--json", "as_json", is_flag=True, help="the facts for scripts")
    def activate_cmd(qm, no_start, force, as_json):
        """Make standby QM the active queue manager (strmqm -a): end its replay,
        replay what is left in the archive, back out what was in flight, and
        start it."""
        from ..qmgr.standby import activate
        from .starting import start_in_background
        t0 = time.monotonic()
        config = QMConfig.load(qm)
        last = activate(config, force=force, console=err_console)
        facts = {"queue_manager": qm, "last_round": last.as_dict(),
                 "replayed_lsn": last.replayed_lsn,
                 "replay_ended_s": round(time.monotonic() - t0, 3)}
        if not no_start:
            status = start_in_background(config)
            r = status.get("restart") or {}
            facts.update(pid=status["pid"], backed_out=r.get("uows_backed_out", 0),
                         in_doubt=len(status["in_doubt"]))
        facts["seconds"] = round(time.monotonic() - t0, 3)
        if as_json:
            print(json.dumps(facts), flush=True)
            return
        console.print(_round_line(qm, last))
        console.print(f"HMQ7302I Standby queue manager {qm} activated in "
                      f"{facts['seconds']:.2f} s" +
                      (f": started (process {facts['pid']}), {facts['backed_out']} unit(s) "
                       f"of work backed out, {facts['in_doubt']} in doubt." if not no_start
                       else "; start it with 'harbormq start " + qm + "'."))
