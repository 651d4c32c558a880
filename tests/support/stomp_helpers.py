"""Helpers for the STOMP tests: a queue manager server process on a free
loopback port, a raw-socket STOMP client (exact bytes in, parsed frames out),
the short steps the end-to-end tests repeat (a queue's depth, SENDs with
receipts, a SUBSCRIBE, the ERROR a connection ends with) and a collecting
listener for stomp.py.

Used by tests/stomp/, by tests of other folders that run STOMP clients
(backup, channels, recovery's power cuts, pipeline, unload, ...) and by the
crash workload child (tests/support/stomp_crash_workload.py), so it imports
nothing from pytest; the fixtures of tests/stomp/ are in its conftest.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import ssl
import subprocess
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import tomli_w

from support.procs import PYTHON, child_env


def deadline_wait(pred, timeout: float = 15.0, interval: float = 0.01, what: str = ""):
    """Poll ``pred`` until it returns something truthy (returned) or time runs out
    (AssertionError naming ``what``)."""
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or pred}")
        time.sleep(interval)


# ------------------------------------------------------------------------- server process

class QMServer:
    """One queue manager, created with ``--port 0`` and run as
    ``python -m harbormq start QM --foreground`` (its pid is the server's)."""

    def __init__(self, home: Path, name: str = "QS", console_dir: Path | None = None):
        self.home = Path(home)
        #: where each start's console output goes (the power-cut harness keeps it
        #: off the file system it cuts)
        self.console_dir = Path(console_dir) if console_dir else self.home
        self.name = name
        self.env = child_env(self.home)
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self.listeners: list[dict] = []
        self.starts = 0

    @property
    def qm_dir(self) -> Path:
        return self.home / "qmgrs" / self.name

    @property
    def config_path(self) -> Path:
        return self.qm_dir / "qm.toml"

    @property
    def console_path(self) -> Path:
        return self.console_dir / f"{self.name}.console.{self.starts}.log"

    def cli(self, *args, input: str | None = None, check: bool = True,
            timeout: float = 120) -> subprocess.CompletedProcess:
        r = subprocess.run([PYTHON, "-m", "harbormq", *args], env=self.env, input=input,
                           capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"harbormq {' '.join(args)} failed ({r.returncode}):\n"
                                 f"{r.stdout}\n{r.stderr}")
        return r

    def create(self, log_file_pages: int = 256, *, log_type: str = "circular",
               **stomp) -> "QMServer":
        self.home.mkdir(parents=True, exist_ok=True)
        self.cli("create", self.name, "--port", "0", "--log-file-pages", str(log_file_pages),
                 "--log", log_type)
        if stomp:
            self.configure(**stomp)
        return self

    def configure(self, *, listeners: list[dict] | None = None, tuning: dict | None = None,
                  **stomp) -> None:
        """Edit qm.toml: ``[stomp]`` settings, the listener list and ``[tuning]``
        settings if given."""
        data = tomllib.loads(self.config_path.read_text())
        data.setdefault("stomp", {}).update(stomp)
        if listeners is not None:
            data["listeners"] = listeners
        if tuning:
            data.setdefault("tuning", {}).update(tuning)
        self.config_path.write_text(tomli_w.dumps(data))

    def start(self, timeout: float = 90) -> "QMServer":
        assert self.proc is None or self.proc.poll() is not None, "already running"
        lj = self.qm_dir / "listeners.json"
        try:
            lj.unlink()          # left behind by a SIGKILLed server
        except FileNotFoundError:
            pass
        self.starts += 1
        out = open(self.console_path, "wb")
        self.proc = subprocess.Popen([PYTHON, "-m", "harbormq", "start", self.name,
                                      "--foreground"], env=self.env, stdin=subprocess.DEVNULL,
                                     stdout=out, stderr=subprocess.STDOUT)
        out.close()
        end = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"queue manager {self.name} exited with "
                                     f"{self.proc.returncode} at start:\n{self.console()}")
            if lj.exists() and self._admin_ok():
                try:
                    self.listeners = json.loads(lj.read_text())
                    break
                except ValueError:
                    pass
            if time.monotonic() > end:
                self.kill()
                raise AssertionError(f"queue manager {self.name} did not start in {timeout} s:"
                                     f"\n{self.console()}")
            time.sleep(0.02)
        self.port = self.listeners[0]["port"]
        return self

    def start_failure(self, timeout: float = 90) -> tuple[int, str]:
        """Start expecting failure: (exit status, console output)."""
        self.starts += 1
        r = subprocess.run([PYTHON, "-m", "harbormq", "start", self.name, "--foreground"],
                           env=self.env, stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=timeout)
        return r.returncode, r.stdout + r.stderr

    def _admin_ok(self) -> bool:
        path = str(self.qm_dir / "admin.sock")
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(5)
                s.connect(path)
                s.sendall(b'{"cmd": "ping"}\n')
                return b'"ok": true' in s.recv(4096)
        except OSError:
            return False

    def console(self) -> str:
        try:
            return self.console_path.read_text(errors="replace")[-4000:]
        except FileNotFoundError:
            return ""

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 60) -> int:
        """Controlled stop (SIGTERM to our own child), waiting for it to end."""
        if not self.running:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"queue manager {self.name} did not stop in {timeout} s") \
                from None

    def kill(self) -> None:
        if self.running:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def sc(self, text: str, check: bool = True, cli: bool = False) -> str:
        """MQSC over the admin socket: in this process (what ``harbormq sc`` does,
        without a Python start per call), or through the real command."""
        if cli:
            r = self.cli("sc", self.name, "-c", text, check=check)
            return r.stdout + r.stderr
        from types import SimpleNamespace

        from harbormq.admin.client import send_mqsc
        # only the socket and the name are needed: no qm.toml parsing here
        target = SimpleNamespace(name=self.name, admin_socket=self.qm_dir / "admin.sock")
        reply = send_mqsc(target, text)
        if check and reply.get("errors"):
            raise AssertionError(f"MQSC failed:\n{reply['output']}")
        return reply["output"]

    def user_add(self, name: str, password: str, *groups: str) -> None:
        args = ["user", "add", self.name, name]
        for g in groups:
            args += ["--group", g]
        self.cli(*args, input=password + "\n")


# ------------------------------------------------------------------------- raw client

@dataclass
class RFrame:
    command: str
    headers: dict = field(default_factory=dict)
    body: bytes = b""
    #: every header line in order (repeats included), unescaped
    pairs: list = field(default_factory=list)

    def __getitem__(self, name):
        return self.headers[name]

    def get(self, name, default=None):
        return self.headers.get(name, default)


_UNESC = {"\\\\": "\\", "\\c": ":", "\\n": "\n", "\\r": "\r"}


def unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\":
            pair = text[i:i + 2]
            if pair not in _UNESC:
                raise ValueError(f"server sent an undefined escape {pair!r} in {text!r}")
            out.append(_UNESC[pair])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def escape(text: str) -> str:
    return (text.replace("\\", "\\\\").replace(":", "\\c").replace("\n", "\\n")
            .replace("\r", "\\r"))


def build_frame(command: str, headers=(), body: bytes = b"", *, escape_headers=True,
                content_length: bool | None = None) -> bytes:
    """Client frame bytes. ``headers``: dict or pairs. ``content_length`` None: add
    one when there is a body and none given."""
    items = list(headers.items() if isinstance(headers, dict) else headers)
    if isinstance(body, str):
        body = body.encode()
    if content_length is None:
        content_length = bool(body) and not any(k == "content-length" for k, _ in items)
    if content_length:
        items.append(("content-length", str(len(body))))
    lines = [command]
    for k, v in items:
        if escape_headers and command not in ("CONNECT", "STOMP"):
            k, v = escape(str(k)), escape(str(v))
        lines.append(f"{k}:{v}")
    return ("\n".join(lines) + "\n\n").encode() + body + b"\0"


class ServerFrameReader:
    """Incremental parser for what the server sends (EOL heart-beats counted)."""

    def __init__(self, version: str = "1.2"):
        self.buf = bytearray()
        self.version = version
        self.heartbeats = 0

    def feed(self, data: bytes) -> list[RFrame]:
        self.buf += data
        out = []
        while True:
            while self.buf[:1] in (b"\n", b"\r"):
                if self.buf[:2] == b"\r\n":
                    del self.buf[:2]
                elif self.buf[:1] == b"\n":
                    del self.buf[:1]
                else:
                    break
                self.heartbeats += 1
            end = self.buf.find(b"\n\n")
            if end == -1:
                return out
            head = bytes(self.buf[:end]).decode("utf-8")
            lines = head.split("\n")
            command = lines[0]
            raw = command == "CONNECTED" or self.version == "1.0"
            headers, pairs = {}, []
            for line in lines[1:]:
                k, _, v = line.partition(":")
                if not raw:
                    k, v = unescape(k), unescape(v)
                pairs.append((k, v))
                headers.setdefault(k, v)
            start = end + 2
            if "content-length" in headers:
                n = int(headers["content-length"])
                if len(self.buf) < start + n + 1:
                    return out
                assert self.buf[start + n] == 0, "no NUL after content-length bytes"
                body = bytes(self.buf[start:start + n])
                del self.buf[:start + n + 1]
            else:
                nul = self.buf.find(b"\0", start)
                if nul == -1:
                    return out
                body = bytes(self.buf[start:nul])
                del self.buf[:nul + 1]
            if command == "CONNECTED":
                self.version = headers.get("version", "1.0")
            out.append(RFrame(command, headers, body, pairs))


class ConnectionClosed(Exception):
    pass


class RawStomp:
    """A blocking STOMP client over a plain socket: exact bytes out, frames in."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 20.0,
                 tls: ssl.SSLContext | None = None, source: str | None = None):
        # source: the client's own address (another loopback one, 127.0.0.2, for
        # the CHLAUTH address rules)
        self.sock = socket.create_connection((host, port), timeout=timeout,
                                             source_address=(source, 0) if source else None)
        if tls is not None:
            self.sock = tls.wrap_socket(self.sock, server_hostname=host)
        self.timeout = timeout
        self.reader = ServerFrameReader()
        self.frames: list[RFrame] = []
        self.eof = False
        self.connected: RFrame | None = None
        self._n = 0

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, command: str, headers=(), body: bytes = b"", **kw) -> None:
        self.sock.sendall(build_frame(command, headers, body, **kw))

    def _fill(self, timeout: float) -> bool:
        """Read once; False on timeout. Sets eof on a closed connection."""
        if self.eof:
            raise ConnectionClosed("connection closed by the server")
        self.sock.settimeout(max(timeout, 0.001))
        try:
            data = self.sock.recv(1 << 16)
        except (TimeoutError, socket.timeout):
            return False
        except (ConnectionResetError, BrokenPipeError):
            data = b""
        except ssl.SSLError:
            data = b""
        if not data:
            self.eof = True
            return True
        self.frames.extend(self.reader.feed(data))
        return True

    def recv(self, timeout: float | None = None) -> RFrame:
        """The next frame (heart-beats skipped); ConnectionClosed at EOF."""
        end = time.monotonic() + (self.timeout if timeout is None else timeout)
        while not self.frames:
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError("no frame from the server in time")
            self._fill(left)
        return self.frames.pop(0)

    def expect(self, command: str, timeout: float | None = None) -> RFrame:
        f = self.recv(timeout)
        if f.command != command:
            raise AssertionError(f"expected {command}, got {f.command} {f.headers} {f.body!r}")
        return f

    def poll(self, timeout: float = 0.2) -> list[RFrame]:
        """Frames that arrive within ``timeout`` (possibly none); never raises at EOF."""
        end = time.monotonic() + timeout
        while not self.eof:
            left = end - time.monotonic()
            if left <= 0:
                break
            self._fill(left)
        out, self.frames = self.frames, []
        return out

    def wait_closed(self, timeout: float | None = None) -> list[RFrame]:
        """Read until the server closes; the frames received meanwhile."""
        end = time.monotonic() + (self.timeout if timeout is None else timeout)
        while not self.eof:
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError("the server did not close the connection")
            self._fill(left)
        out, self.frames = self.frames, []
        return out

    def connect(self, version: str = "1.2", login: str | None = None,
                passcode: str | None = None, heart_beat: str | None = "0,0",
                command: str = "CONNECT", **headers) -> RFrame:
        h = {"accept-version": version, "host": "localhost"}
        if heart_beat is not None:
            h["heart-beat"] = heart_beat
        if login is not None:
            h["login"] = login
        if passcode is not None:
            h["passcode"] = passcode
        h.update(headers)
        self.send(command, h)
        f = self.recv()
        if f.command == "CONNECTED":
            self.connected = f
        return f

    def receipt_id(self) -> str:
        self._n += 1
        return f"r-{self._n}"

    def call(self, command: str, headers=None, body: bytes = b"",
             timeout: float | None = None) -> list[RFrame]:
        """Send a frame with a receipt and wait for the RECEIPT; the other frames
        that came before it (MESSAGEs) are returned. An ERROR raises."""
        rid = self.receipt_id()
        if isinstance(headers, (list, tuple)):
            h = [*headers, ("receipt", rid)]
        else:
            h = {**(headers or {}), "receipt": rid}
        self.send(command, h, body)
        others = []
        end = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            f = self.recv(max(0.001, end - time.monotonic()))
            if f.command == "RECEIPT" and f.get("receipt-id") == rid:
                return others
            if f.command == "ERROR":
                raise AssertionError(f"ERROR for {command}: {f.headers} {f.body!r}")
            others.append(f)

    def messages(self, n: int, timeout: float | None = None) -> list[RFrame]:
        """Exactly the next ``n`` MESSAGE frames (other frames are an error)."""
        out = []
        while len(out) < n:
            f = self.recv(timeout)
            assert f.command == "MESSAGE", f"expected MESSAGE, got {f}"
            out.append(f)
        return out


def raw_connected(port: int, **kw) -> RawStomp:
    c = RawStomp(port)
    f = c.connect(**kw)
    assert f.command == "CONNECTED", f"{f.headers} {f.body!r}"
    return c


# ------------------------------------------------------------------------- end-to-end helpers

def depth(srv: QMServer, queue: str) -> int:
    out = srv.sc(f"DISPLAY QSTATUS({queue}) CURDEPTH")
    m = re.search(r"CURDEPTH\((\d+)\)", out)
    assert m, out
    return int(m.group(1))


def send_all(c: RawStomp, queue: str, bodies, **headers) -> None:
    for b in bodies:
        c.call("SEND", {"destination": f"/queue/{queue}", **headers},
               b if isinstance(b, bytes) else b.encode())


def subscribe(c: RawStomp, queue: str, sub_id: str = "s1", ack: str = "client-individual",
              **headers) -> list:
    return c.call("SUBSCRIBE", {"destination": f"/queue/{queue}", "id": sub_id, "ack": ack,
                                **headers})


def bodies(frames) -> list[bytes]:
    return [f.body for f in frames]


def quiet(c: RawStomp, t: float = 0.3) -> None:
    """Nothing more arrives on ``c`` for ``t`` seconds."""
    extra = c.poll(t)
    assert extra == [], f"unexpected frames: {[(f.command, f.headers) for f in extra]}"


def expect_error(c: RawStomp, *fragments: str):
    frames = c.wait_closed(timeout=20)
    errors = [f for f in frames if f.command == "ERROR"]
    assert errors, f"no ERROR before the close: {frames}"
    msg = errors[-1].get("message", "")
    for frag in fragments:
        assert frag in msg, f"{frag!r} not in ERROR message {msg!r}"
    return errors[-1]


# ------------------------------------------------------------------------- stomp.py

def collecting_listener():
    import stomp

    class Collector(stomp.ConnectionListener):
        """Everything stomp.py hands us, with waits on a condition."""

        def __init__(self):
            self.cond = threading.Condition()
            self.messages: list = []
            self.receipts: list[str] = []
            self.errors: list = []
            self.connected = []
            self.disconnected = 0
            self.heartbeats = 0

        def _add(self, lst, item):
            with self.cond:
                lst.append(item)
                self.cond.notify_all()

        def on_connected(self, frame):
            self._add(self.connected, frame)

        def on_message(self, frame):
            self._add(self.messages, frame)

        def on_receipt(self, frame):
            self._add(self.receipts, frame.headers.get("receipt-id"))

        def on_error(self, frame):
            self._add(self.errors, frame)

        def on_disconnected(self):
            with self.cond:
                self.disconnected += 1
                self.cond.notify_all()

        def on_heartbeat(self):
            with self.cond:
                self.heartbeats += 1
                self.cond.notify_all()

        def wait(self, pred, timeout: float = 20.0, what: str = ""):
            end = time.monotonic() + timeout
            with self.cond:
                while True:
                    v = pred()
                    if v:
                        return v
                    left = end - time.monotonic()
                    if left <= 0:
                        raise AssertionError(
                            f"timed out waiting for {what or pred}: {len(self.messages)} "
                            f"messages, receipts {self.receipts[-5:]}, errors "
                            f"{[e.headers for e in self.errors]}")
                    self.cond.wait(left)

        def wait_receipt(self, rid: str, timeout: float = 20.0):
            return self.wait(lambda: rid in self.receipts, timeout, f"receipt {rid}")

        def wait_messages(self, n: int, timeout: float = 20.0):
            self.wait(lambda: len(self.messages) >= n, timeout, f"{n} messages")
            return list(self.messages)

        def take(self):
            with self.cond:
                out, self.messages = self.messages, []
                return out

    return Collector()


def stomp_client(port: int, version: str = "1.2", *, heartbeats=(0, 0), login=None,
                 passcode=None, wait: bool = True, tls_ca: str | None = None,
                 tls_noverify: bool = False, headers=None, with_connect_command=False):
    """A connected stomp.py Connection1x with a Collector as ``conn.col``."""
    import stomp
    hosts = [("127.0.0.1", port)]
    cls = {"1.0": stomp.Connection10, "1.1": stomp.Connection11, "1.2": stomp.Connection12}
    if version == "1.0":
        conn = cls[version](hosts, reconnect_attempts_max=1)
    else:
        conn = cls[version](hosts, heartbeats=heartbeats, reconnect_attempts_max=1)
    if tls_ca or tls_noverify:
        conn.set_ssl(for_hosts=hosts, ca_certs=tls_ca, verify=not tls_noverify)
    col = collecting_listener()
    conn.set_listener("col", col)
    conn.col = col
    kw = {}
    if version != "1.0":
        kw["with_connect_command"] = with_connect_command
    conn.connect(login, passcode, wait=wait, headers=headers or {}, **kw)
    return conn
