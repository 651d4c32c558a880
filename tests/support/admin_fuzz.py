"""Helpers for the admin fuzz tests (tests/admin/test_fuzz_mqsc.py and
tests/admin/test_fuzz_admin_protocol.py): a queue manager server whose working,
temporary and console directories are its own, a raw admin socket client with a
wall-clock guard on every reply, and the snapshot of a directory tree that
tells whether anything appeared outside the queue manager's directories.

The scripts run in the server process, not in the test's: a hang that holds
the GIL (a regular expression backtracking for hours) would freeze a test
process with the queue manager inside, guard and all; a socket timeout sees it.
"""

from __future__ import annotations

import contextlib
import json
import socket
from pathlib import Path

from support.stomp_helpers import QMServer

#: no reply this long after a request is a hang
GUARD_S = 30.0


class AdminConn:
    """A raw connection to admin.sock: bytes in, reply objects out."""

    def __init__(self, path: Path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(GUARD_S)
        self.sock.connect(str(path))
        self.buf = b""
        self.eof = False
        self.progress: list[dict] = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data: bytes) -> None:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.sock.sendall(data)

    def end(self) -> None:
        """Shut our side down: the request is complete."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_WR)

    def _line(self) -> bytes | None:
        while b"\n" not in self.buf:
            if self.eof:
                return None
            try:
                chunk = self.sock.recv(1 << 20)
            except TimeoutError:
                raise AssertionError(f"no reply from the queue manager within {GUARD_S} s: "
                                     "a hang") from None
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                self.eof = True
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line

    def reply(self) -> dict | None:
        """The next reply (progress lines checked and kept aside); None when the
        server closed the connection."""
        while True:
            line = self._line()
            if line is None:
                assert not self.buf, f"half a reply before the close: {self.buf[:200]!r}"
                return None
            reply = json.loads(line)
            assert isinstance(reply, dict), reply
            if "progress" in reply:
                p = reply["progress"]
                assert set(p) == {"object", "done", "total"} and 0 <= p["done"] <= p["total"]
                self.progress.append(p)
                continue
            return reply

    def close(self) -> None:
        self.sock.close()


def tree(root: Path, skip: tuple[Path, ...]) -> dict:
    """Every path under ``root`` (but not under ``skip``) with its kind and size."""
    out = {}
    for p in sorted(root.rglob("*")):
        if any(p == s or s in p.parents for s in skip) or ".hypothesis" in p.parts:
            continue
        st = p.lstat()
        out[str(p.relative_to(root))] = (st.st_mode >> 12, st.st_size if p.is_file() else 0)
    return out


class FuzzServer:
    """A queue manager server (linear log, so image and recreate run) under
    ``root``: its home, and empty directories of its own for its working
    directory, TMPDIR and console output. ``files`` is for what requests point
    at."""

    def __init__(self, root: Path, name: str):
        self.root = root
        self.srv = QMServer(root / "hmq", name, console_dir=root / "console")
        self.cwd = root / "cwd"
        self.tmp = root / "tmp"
        self.files = root / "files"

    def start(self) -> "FuzzServer":
        for d in (self.cwd, self.tmp, self.files, self.srv.home, self.srv.console_dir):
            d.mkdir(parents=True)
        self.srv.cli("create", self.srv.name, "--port", "0", "--log", "linear",
                     "--log-file-pages", "256")
        self.srv.env["TMPDIR"] = str(self.tmp)
        with contextlib.chdir(self.cwd):       # the server's working directory
            self.srv.start()
        return self

    def stop(self) -> None:
        self.srv.stop()

    @property
    def sock(self) -> Path:
        return self.srv.qm_dir / "admin.sock"

    @property
    def log_dir(self) -> Path:
        return self.srv.home / "log" / self.srv.name

    def outside(self) -> dict:
        """What lies outside the queue manager's own directories."""
        return tree(self.root, (self.srv.qm_dir, self.log_dir, self.srv.console_dir))

    def request(self, req: dict) -> dict | None:
        with AdminConn(self.sock) as c:
            c.send(json.dumps(req).encode() + b"\n")
            return c.reply()

    def mqsc(self, text: str, cont: bool = False) -> dict:
        reply = self.request({"cmd": "mqsc", "text": text, "continue": cont})
        assert reply is not None and "output" in reply, reply
        return reply

    def ping(self) -> None:
        reply = self.request({"cmd": "ping"})
        assert reply and reply["ok"] and reply["pid"] == self.srv.proc.pid, reply

    def console_size(self) -> int:
        return self.srv.console_path.stat().st_size

    def console_clean(self, since: int = 0) -> None:
        """No traceback in the server's output (from offset ``since`` on)."""
        with open(self.srv.console_path, "rb") as f:
            f.seek(since)
            text = f.read().decode(errors="replace")
        assert "Traceback" not in text and "Unhandled exception" not in text, text[-4000:]
