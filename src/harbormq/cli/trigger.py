"""``harbormq trigger-monitor QM --initq Q`` (MQ's runmqtrm): a trigger
monitor, an application of the queue manager like any other, reading the
initiation queue over the queue manager's STOMP listener.

For each trigger message (an MQTM, ``core/triggering.py``) it starts the
process definition's APPLICID as MQ's trigger monitor does on UNIX, through
the shell, with the MQTMC2 (the trigger message's fields as one string of
732 characters) as its first argument and ENVRDATA after it::

    APPLICID 'MQTMC2' ENVRDATA

and does not wait for it. Every launch, and every message that is not a
trigger message, is written to the queue manager's operator log
(HMQ7737I, HMQ7738W) and to the console. A trigger message is acknowledged
once its application has been started: a monitor that dies before leaves it
on the initiation queue for the next one.

Not here: the trigger conditions and the MQTM itself (``core/triggering.py``).
"""

from __future__ import annotations

import json
import shlex
import socket
import subprocess

import click

from ..config import QMConfig
from ..errors import HarbormqError, QueueManagerNotRunning
from .consoles import console

#: the initiation queue runmqtrm reads when none is named
DEFAULT_INITQ = "SYSTEM.DEFAULT.INITIATION.QUEUE"


class TriggerMonitorError(HarbormqError):
    msgid = "HMQ7739E"


class _Client:
    """Just enough of a STOMP 1.2 client for one subscription."""

    def __init__(self, host: str, port: int, login: str | None, passcode: str | None):
        from ..stomp.frames import encode_frame
        self._encode = encode_frame
        self.sock = socket.create_connection((host, port), timeout=30)
        self.buf = b""
        headers = {"accept-version": "1.2", "host": "trigger-monitor"}
        if login:
            headers.update(login=login, passcode=passcode or "")
        self.send("CONNECT", headers)
        command, h, _ = self.recv()
        if command != "CONNECTED":
            raise TriggerMonitorError(f"the queue manager refused the trigger monitor's "
                                      f"connection: {h.get('message', command)}")
        self.sock.settimeout(None)

    def send(self, command: str, headers: dict) -> None:
        self.sock.sendall(self._encode(command, headers, b"", "1.2"))

    def recv(self) -> tuple[str, dict, bytes]:
        while True:
            self.buf = self.buf.lstrip(b"\r\n")              # heart-beats
            head_end = self.buf.find(b"\n\n")
            if head_end >= 0:
                lines = self.buf[:head_end].decode().split("\n")
                headers: dict[str, str] = {}
                for line in lines[1:]:
                    k, _, v = line.partition(":")
                    headers.setdefault(k, v.replace("\\c", ":").replace("\\n", "\n")
                                       .replace("\\\\", "\\"))
                start = head_end + 2
                if "content-length" in headers:
                    end = start + int(headers["content-length"])
                    complete = len(self.buf) > end
                else:
                    end = self.buf.find(b"\0", start)
                    complete = end >= 0
                if complete:
                    body, self.buf = self.buf[start:end], self.buf[end + 1:]
                    return lines[0], headers, body
            data = self.sock.recv(65536)
            if not data:
                raise TriggerMonitorError("the queue manager closed the trigger monitor's "
                                          "connection")
            self.buf += data


def _listener(config: QMConfig) -> tuple[str, int]:
    try:
        bound = json.loads(config.listeners_path.read_text())
    except (OSError, ValueError):
        raise QueueManagerNotRunning(f"queue manager {config.name} has no STOMP listener "
                                     "running (no listeners.json)",
                                     hint=f"start it: harbormq start {config.name}") from None
    # STOMP over TCP only: listeners.json also lists WebSocket listeners and the web
    # listener ("transport"), and during restart holds only the web entry
    stomp = [b for b in bound if b.get("transport", "tcp") == "tcp"]
    if not stomp:
        raise QueueManagerNotRunning(f"queue manager {config.name} has no STOMP listener "
                                     "running yet (it may be starting)",
                                     hint=f"wait for it: harbormq status {config.name}")
    plain = [b for b in stomp if not b.get("tls")]
    if not plain:
        raise TriggerMonitorError(f"queue manager {config.name} has only TLS listeners; the "
                                  "trigger monitor connects to a plain one")
    host = plain[0]["host"]
    return ("127.0.0.1" if host in ("0.0.0.0", "") else host), plain[0]["port"]


def launch(tm, qmgr: str) -> subprocess.Popen:
    """Start the application of trigger message ``tm`` as runmqtrm does."""
    from ..core.triggering import mqtmc2
    command = f"{tm.appl_id} {shlex.quote(mqtmc2(tm, qmgr))} {tm.env_data}".strip()
    return subprocess.Popen(command, shell=True, stdin=subprocess.DEVNULL,
                            start_new_session=True)


def run_monitor(config: QMConfig, initq: str, *, login: str | None = None,
                passcode: str | None = None, max_launches: int = 0) -> int:
    """Read ``initq`` and start an application per trigger message; returns the
    number started (after ``max_launches`` when it is not 0, else never)."""
    from ..core.operator_log import OperatorLog
    from ..core.triggering import decode_mqtm
    oplog = OperatorLog(config.errors_dir, console=console)
    client = _Client(*_listener(config), login, passcode)
    client.send("SUBSCRIBE", {"destination": f"/queue/{initq}", "id": "trigger-monitor",
                              "ack": "client-individual", "prefetch-count": "1"})
    oplog.emit("HMQ7740I", f"trigger monitor started on initiation queue {initq} of queue "
               f"manager {config.name}")
    launched = 0
    while not max_launches or launched < max_launches:
        command, headers, body = client.recv()
        if command == "ERROR":
            raise TriggerMonitorError(f"initiation queue {initq}: "
                                      f"{headers.get('message', '')}")
        if command != "MESSAGE":
            continue
        try:
            tm = decode_mqtm(body)
        except ValueError as exc:
            oplog.emit("HMQ7738W", f"trigger monitor: a message on {initq} is not a trigger "
                       f"message ({exc}); it is removed")
        else:
            proc = launch(tm, config.name)
            launched += 1
            oplog.emit("HMQ7737I", f"trigger monitor started process {tm.process} for queue "
                       f"{tm.queue}: {tm.appl_id} (pid {proc.pid}, trigger data "
                       f"{tm.trigger_data!r})")
        client.send("ACK", {"id": headers.get("ack", "")})
    client.send("DISCONNECT", {})
    return launched


@click.command("trigger-monitor")
@click.argument("qm")
@click.option("--initq", default=DEFAULT_INITQ, show_default=True,
              help="the initiation queue to read")
@click.option("--login", default=None, help="a harbormq user (default: this OS user, on "
                                             "the loopback)")
@click.option("--passcode", default=None, envvar="HARBORMQ_PASSCODE")
@click.option("--max-launches", type=int, default=0,
              help="stop after starting this many applications (0: run until stopped)")
def trigger_monitor(qm, initq, login, passcode, max_launches):
    """Start the applications that trigger messages name (runmqtrm)."""
    try:
        run_monitor(QMConfig.load(qm), initq, login=login, passcode=passcode,
                    max_launches=max_launches)
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        raise TriggerMonitorError(f"trigger monitor of {qm}: {exc}") from None


def register(cli: click.Group) -> None:
    cli.add_command(trigger_monitor)
