"""A real browser for the WebSocket tests: Debian's Chromium, headless, running
``@stomp/stompjs`` from npm in a page served from this process.

What it needs is installed on first use, idempotently, each under a lock file
so that parallel test processes install it once: ``chromium`` and
``chromium-driver`` with apt-get (``apt-get update`` first, once; as root, or
through ``sudo -n``), Debian's ``npm`` (with node.js) the same way, and the
npm package into ``.cache/npm-stompjs`` of the checkout (gitignored). An
install that cannot be done raises ``BrowserUnavailable`` saying why: the
tests do not skip.

``headless_driver`` is a Selenium WebDriver on the same Chromium through
Debian's ``chromedriver`` (the ``browser`` fixture of tests/conftest.py, one
per test module), for pages that are driven rather than self-reporting.

``run_page`` serves a directory (the page, the stompjs bundle) on a free
loopback port, opens it in headless Chromium, and waits for the page to POST
its report to ``/report`` (a JSON object); Chromium is then ended through its
own process group.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache"
NPM_DIR = CACHE / "npm-stompjs"
STOMPJS_VERSION = "7"
STOMPJS_BUNDLE = NPM_DIR / "node_modules" / "@stomp" / "stompjs" / "bundles" / \
    "stomp.umd.min.js"
#: apt-get's own lock is waited on this long (another install running)
APT_LOCK_WAIT_S = 900
LOCK_DIR = Path(tempfile.gettempdir())


class BrowserUnavailable(RuntimeError):
    """Chromium or stompjs could not be installed; the text says why."""


@contextmanager
def _locked(name: str):
    """An exclusive lock shared by every process of this machine."""
    with open(LOCK_DIR / f"harbormq-{name}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _run(cmd: list[str], timeout: float, env=None) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if r.returncode != 0:
        raise BrowserUnavailable(f"{' '.join(cmd)} failed ({r.returncode}):\n"
                                 f"{r.stdout[-2000:]}\n{r.stderr[-2000:]}")


def apt_install(command: str, packages: list[str]) -> str:
    """The path of ``command``, installing Debian's ``packages`` with apt-get if
    it is not there (once, under a lock against a parallel install)."""
    found = shutil.which(command)
    if found:
        return found
    with _locked(f"apt-{command}"):
        found = shutil.which(command)
        if found:                     # another process installed it meanwhile
            return found
        if os.geteuid() == 0:
            as_root = []
        elif shutil.which("sudo"):
            as_root = ["sudo", "-n", "env", "DEBIAN_FRONTEND=noninteractive"]
        else:
            raise BrowserUnavailable(f"{command} is not installed and this user cannot "
                                     f"install it: run apt-get install -y "
                                     f"{' '.join(packages)} as root")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        lock_wait = f"DPkg::Lock::Timeout={APT_LOCK_WAIT_S}"
        _run([*as_root, "apt-get", "-o", lock_wait, "update", "-q"], APT_LOCK_WAIT_S + 600,
             env)
        _run([*as_root, "apt-get", "-o", lock_wait, "install", "-y", "-q", *packages],
             APT_LOCK_WAIT_S + 1200, env)
    found = shutil.which(command)
    if not found:
        raise BrowserUnavailable(f"apt-get installed {' '.join(packages)} but {command} is "
                                 "not on PATH")
    return found


def chromium() -> str:
    """The path of Chromium, installed with apt-get if it is not there."""
    return apt_install("chromium", ["chromium", "chromium-driver"])


def chromedriver() -> str:
    """The path of Debian's chromedriver (with Chromium), installed if it is not there."""
    chromium()
    return apt_install("chromedriver", ["chromium", "chromium-driver"])


@contextmanager
def headless_driver(width: int = 1280, height: int = 900, *, accept_insecure_certs=False):
    """A Selenium WebDriver on headless Chromium, quit on exit. Selenium is given
    both paths, so it downloads nothing. ``accept_insecure_certs``: a test
    server's self-signed certificate is taken."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium()
    options.accept_insecure_certs = accept_insecure_certs
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--disable-extensions", "--disable-background-networking",
                f"--window-size={width},{height}"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=chromedriver()), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def stompjs_bundle() -> Path:
    """The UMD bundle of ``@stomp/stompjs`` (global ``StompJs``), installed with npm
    into the checkout's .cache if it is not there."""
    if STOMPJS_BUNDLE.is_file():
        return STOMPJS_BUNDLE
    npm = apt_install("npm", ["npm"])           # Debian's npm brings node.js
    NPM_DIR.mkdir(parents=True, exist_ok=True)
    with _locked("npm-stompjs"):
        if not STOMPJS_BUNDLE.is_file():
            _run([npm, "install", "--no-audit", "--no-fund", "--no-save", "--prefix",
                  str(NPM_DIR), f"@stomp/stompjs@{STOMPJS_VERSION}"], 600)
    if not STOMPJS_BUNDLE.is_file():
        raise BrowserUnavailable(f"npm installed @stomp/stompjs but {STOMPJS_BUNDLE} is missing")
    return STOMPJS_BUNDLE


def stompjs_version() -> str:
    package = STOMPJS_BUNDLE.parents[1] / "package.json"
    return json.loads(package.read_text())["version"]


class _PageServer(ThreadingHTTPServer):
    daemon_threads = True
    report: dict | None = None
    reported: threading.Event


def _handler(directory: Path):
    class Handler(SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(directory), **kw)

        def do_POST(self):                     # noqa: N802 (http.server's name)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            if self.server.report is None:           # the first report is the page's answer
                try:
                    self.server.report = json.loads(body or b"{}")
                except ValueError:
                    self.server.report = {"ok": False,
                                          "error": f"report not JSON: {body[:200]!r}"}
            self.send_response(204)
            self.end_headers()
            self.server.reported.set()

        def log_message(self, *args):          # quiet
            pass
    return Handler


def run_page(directory: Path, page: str, timeout: float = 90) -> dict:
    """Serve ``directory``, open ``page`` of it in headless Chromium and return the
    JSON the page POSTs to ``/report``; TimeoutError (with Chromium's output)
    when none comes in ``timeout`` seconds."""
    browser = chromium()
    server = _PageServer(("127.0.0.1", 0), _handler(directory))
    server.reported = threading.Event()
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/{page}"
    with tempfile.TemporaryDirectory(prefix="hmq-chromium-") as profile:
        log_path = Path(profile) / "chromium.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [browser, "--headless=new", "--no-sandbox", "--disable-gpu",
                 "--disable-dev-shm-usage", "--no-first-run", "--disable-extensions",
                 "--disable-background-networking", f"--user-data-dir={profile}/profile",
                 url], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        try:
            end = time.monotonic() + timeout
            while not server.reported.wait(0.2):
                if proc.poll() is not None or time.monotonic() > end:
                    output = log_path.read_text(errors="replace")[-3000:]
                    raise TimeoutError(f"the page {url} reported nothing in {timeout} s "
                                       f"(chromium exit {proc.poll()}):\n{output}")
            return server.report
        finally:
            _end_group(proc)
            server.shutdown()
            server.server_close()


def _end_group(proc: subprocess.Popen) -> None:
    """End Chromium and its helper processes: the session it leads (ours)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=10)
    else:   # helpers may outlive the main process
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
