"""The admin protocol, client side: the one way every command-line tool (and
test) talks to a running queue manager over ``qmgrs/<QM>/admin.sock``.

One JSON object per line each way; long requests (image, recreate) send
``{"progress": {...}}`` lines before their reply. ``admin/protocol.py`` is the
server side and lists the requests.
"""

from __future__ import annotations

import json
import re
import socket
from typing import Callable

from ..errors import HarbormqError, QueueManagerNotRunning


def request(target, req: dict, *, timeout: float | None = 10.0,
            on_progress: Callable[[dict], None] | None = None, needs: str = "") -> dict:
    """Send ``req`` to the queue manager ``target`` (anything with ``name`` and
    ``admin_socket``) and return its reply, whatever it says. ``timeout`` bounds
    each wait for a line (None: no limit once connected, for long work).
    ``needs`` completes the "not running" hint (what needs a running queue
    manager)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(10 if timeout is None else timeout)
        try:
            s.connect(str(target.admin_socket))
        except (FileNotFoundError, ConnectionRefusedError):
            raise QueueManagerNotRunning(
                f"queue manager {target.name} is not running" + (f": {needs}" if needs else ""),
                hint=f"start it with 'harbormq start {target.name}'") from None
        s.settimeout(timeout)
        try:
            s.sendall(json.dumps(req).encode() + b"\n")
            s.shutdown(socket.SHUT_WR)      # the whole request: nothing more follows
        except (BrokenPipeError, ConnectionResetError):
            pass    # the queue manager stopped reading: its reply says why
        with s.makefile("rb") as lines:
            for line in lines:
                reply = json.loads(line)
                if "progress" in reply and on_progress is not None:
                    on_progress(reply["progress"])
                    continue
                return reply
    except TimeoutError:
        raise HarbormqError(f"queue manager {target.name} did not answer within {timeout:.0f} "
                            "s", msgid="HMQ8146E") from None
    finally:
        s.close()
    raise HarbormqError(f"queue manager {target.name} closed the admin connection without "
                        "a reply", msgid="HMQ8146E")


#: a refusal that names its message id: "HMQ8147E: queue Q is not defined"
_REFUSAL = re.compile(r"(HMQ\d{4}[IWE]): (.*)", re.S)


def refusal(reply: dict, default: str, msgid: str | None = None) -> HarbormqError:
    """The queue manager's refusal as an error with its own message id (not
    "HMQ0001E: HMQ8147E: ...", as the CLI printed it before)."""
    text = reply.get("error") or default
    m = _REFUSAL.fullmatch(text)
    return HarbormqError(m.group(2), msgid=m.group(1)) if m else HarbormqError(text, msgid=msgid)


def call(target, req: dict, **kw) -> dict:
    """``request``, raising the queue manager's refusal as an error (with the
    message id the queue manager gave it)."""
    reply = request(target, req, **kw)
    if not reply.get("ok"):
        raise refusal(reply, "the queue manager refused the request")
    return reply


#: how long ``sc`` waits for the queue manager's reply (a CLEAR of a deep queue,
#: a DEFINE waiting for its force on a busy log)
SC_TIMEOUT = 300.0


def send_mqsc(target, text: str, continue_on_error: bool = False,
              timeout: float = SC_TIMEOUT) -> dict:
    """One ``{"cmd": "mqsc"}`` request; the reply (``output``, ``errors``)."""
    reply = request(target, {"cmd": "mqsc", "text": text, "continue": continue_on_error},
                    timeout=timeout, needs="MQSC commands need a running queue manager")
    if "output" not in reply:
        raise refusal(reply, "the queue manager refused the MQSC request", "HMQ8400E")
    return reply
