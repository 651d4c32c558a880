"""Startup scripts: MQSC run at every start of the server, after restart
recovery, with the channel initiator running (START LISTENER works), before
the STOMP listeners open (MQ for z/OS's CSQINP2 data sets, MQ's
AutoConfig scripts).

The scripts are qm.toml's ``[startup] scripts`` (relative to the queue
manager's directory), or else every ``startup/*.mqsc`` there in name order.
Each command's outcome goes to the operator log (HMQ8893I run, HMQ8894E
failed). With ``on_error = "stop"`` the first failing command (a syntax error
or a refusal) fails the start (HMQ8895E); with ``"continue"`` the rest runs.

Not here: the MQSC language and its commands (``admin/``).
"""

from __future__ import annotations

from pathlib import Path

from ..admin import mqsc
from ..admin.commands import Executor
from ..admin.mqsc import Command, MqscSyntaxError
from ..config import QMConfig
from ..core.engine import QueueManagerCore
from ..errors import ConfigError, HarbormqError


class StartupScriptFailed(HarbormqError):
    msgid = "HMQ8895E"


def startup_scripts(config: QMConfig) -> list[Path]:
    """The scripts to run, in order."""
    if config.startup.scripts:
        out = []
        for name in config.startup.scripts:
            path = Path(name) if Path(name).is_absolute() else config.qm_dir / name
            if not path.is_file():
                raise ConfigError(f"startup script {path} (qm.toml [startup] scripts) does not "
                                  "exist", msgid="HMQ8895E")
            out.append(path)
        return out
    folder = config.qm_dir / "startup"
    return sorted(folder.glob("*.mqsc")) if folder.is_dir() else []


async def run_startup_scripts(core: QueueManagerCore, config: QMConfig, security) -> dict:
    """Run them; ``{"commands": n, "failed": n}``. Raises StartupScriptFailed at
    the first failure when ``on_error = "stop"``."""
    stop = config.startup.on_error == "stop"
    executor = Executor(core, security)
    run = failed = 0
    for path in startup_scripts(config):
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"startup script {path} cannot be read: {exc}",
                              msgid="HMQ8895E") from None
        for item in mqsc.parse_script(text):
            if isinstance(item, Command) and item.verb == "END":
                break
            run += 1
            line = item.first_line if isinstance(item, MqscSyntaxError) else item.line
            where = f"{path.name} line {line}"
            try:
                if isinstance(item, MqscSyntaxError):
                    raise item
                outcome = await executor.execute(item)
            except HarbormqError as exc:
                failed += 1
                core.oplog.emit("HMQ8894E", f"startup script {where}: {_first_line(item)} "
                                f"failed: {exc.msgid}: {exc.message}")
                if stop:
                    raise StartupScriptFailed(
                        f"startup script {where} failed ({exc.msgid}: {exc.message}); the "
                        "start stops as qm.toml's [startup] on_error = \"stop\" says",
                        hint="correct the script, or set on_error = \"continue\"") from None
                continue
            summary = "; ".join(block.splitlines()[0] for block in outcome if block) or "done"
            core.oplog.emit("HMQ8893I", f"startup script {where}: {_first_line(item)}: "
                            f"{summary}")
    if run:
        core.oplog.emit("HMQ8893I", f"startup scripts: {run} command(s) run, {failed} "
                        "failed")
    return {"commands": run, "failed": failed}


def _first_line(item) -> str:
    lines = item.lines if item.lines else [""]
    text = item.text if isinstance(item, Command) else lines[0]
    return text.strip()[:120]
