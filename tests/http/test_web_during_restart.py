"""The web listener while the queue manager starts: a real ``harbormq start
--foreground`` with ``[web]`` restarting a log with work to redo (a unit of work
of a few thousand puts left open by a SIGKILL), its redo slowed on cue by the
delay point ``restart.redo_batch`` (``HARBORMQ_DELAY_AT``: each batch of
records redone takes that much longer; restart itself runs as ever).

While it restarts, the console's status JSON and ``/metrics`` show the phases
advancing, the REST APIs answer MQ's "not available" (503, MQRC 2059), the
admin socket and STOMP are not open; then everything runs. The console's
starting page is checked in headless Chromium (screenshot
``docs/console/starting.png`` with ``HARBORMQ_SCREENSHOTS=1``). A start that
fails after restart (its STOMP port taken) says so on the listener until the
process ends.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client.parser import text_string_to_metric_families
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait
from support.browser import headless_driver
from support.procs import PYTHON
from support.screenshots import keep_screenshot
from support.stomp_helpers import QMServer, deadline_wait, raw_connected
from support.web_helpers import WebClient, start_web

from harbormq.http.starting import RestartStatus, restart_metrics
from harbormq.security import UserStore

QUEUE = "SLOW.REDO"
#: puts of the unit of work left open: batches of redo of 8, 32, ... 2048 records, 9 of them
PUTS = 10_000
#: each batch of redo this much slower
DELAY_MS = 250
#: the same for the browser's check of the starting page
BROWSER_DELAY_MS = 800
PHASE_ORDER = ["log initialisation", "status rebuild", "forward recovery",
               "backward recovery", "index rebuild", "checkpoint", "startup"]
RESTART = "/console/api/restart"
MQSC = "/ibmmq/rest/v2/admin/action/qmgr/QR/mqsc"


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    srv = QMServer(tmp_path_factory.mktemp("webstart") / "hmq", "QR")
    srv.create(log_file_pages=2048)           # (the open unit of work fits one extent)
    users = UserStore(srv.qm_dir / "users.json")
    users.add("root", "rootpw", ["mqm"])          # an administrator by group
    users.add("alice", "alicepw")                  # no authority records
    start_web(srv)
    srv.sc(f"DEFINE QLOCAL({QUEUE}) MAXDEPTH(100000)")
    yield srv
    srv.env.pop("HARBORMQ_DELAY_AT", None)
    if srv.running:
        srv.stop()


def leave_work_to_redo(srv: QMServer) -> None:
    """PUTS puts in a transaction never committed, then SIGKILL: restart redoes
    them and backs the unit of work out."""
    c = raw_connected(srv.port)
    try:
        for i in range(PUTS):
            c.send("SEND", {"destination": f"/queue/{QUEUE}", "transaction": "t1",
                            "persistent": "true"} if i else
                   {"destination": f"/queue/{QUEUE}", "persistent": "true"}, b"x" * 64)
            if i == 0:
                c.send("BEGIN", {"transaction": "t1"})
        # a persistent SEND with a receipt: the log is forced past the puts
        c.call("SEND", {"destination": f"/queue/{QUEUE}", "persistent": "true"}, b"end")
    finally:
        srv.kill()
        c.close()
    (srv.qm_dir / "listeners.json").unlink()      # (the killed server's)


class SlowStart:
    """``srv`` started in a thread with its redo slowed; ``port`` is the web
    listener's as soon as listeners.json names it (before restart ends)."""

    def __init__(self, srv: QMServer, delay_ms: int = DELAY_MS):
        self.srv = srv
        srv.env["HARBORMQ_DELAY_AT"] = f"restart.redo_batch:{delay_ms}"
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._start, daemon=True)
        self.thread.start()
        self.port = deadline_wait(lambda: web_port(srv), 60,
                                  what="the web listener during restart")

    def _start(self) -> None:
        try:
            self.srv.start()
        except BaseException as exc:  # noqa: BLE001 - reported by join
            self.error = exc

    def join(self) -> None:
        self.thread.join(120)
        self.srv.env.pop("HARBORMQ_DELAY_AT", None)
        assert not self.thread.is_alive(), "the queue manager did not start"
        if self.error is not None:
            raise self.error


def web_port(srv: QMServer) -> int | None:
    """The web listener's port once listeners.json names it."""
    try:
        entries = json.loads((srv.qm_dir / "listeners.json").read_text())
    except (OSError, ValueError):
        return None
    return next((e["port"] for e in entries if e.get("transport") == "http"), None)


def metrics(text: str) -> dict:
    """{(name, frozenset of labels but qmgr): value} of a scrape, read by
    prometheus_client's own parser."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = frozenset((k, v) for k, v in s.labels.items() if k != "qmgr")
            out[(s.name, labels)] = s.value
    return out


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_status_follows_restarts_progress_reports():
    """RestartStatus from the progress calls a restart makes, on a clock of its own."""
    clock = Clock()
    status = RestartStatus("QM1", replay_rate=1000.0, clock=clock)
    assert status.as_dict()["phase"] == "log initialisation"
    status.progress("log initialisation", 0, 1)
    clock.now += 0.5
    status.progress("log initialisation", 1, 1)      # complete: status rebuild follows
    assert status.phase == "status rebuild"
    clock.now += 0.25
    status.progress("forward recovery", 0, 10_000)
    # nothing done yet: the last restart's replay rate gives the estimate
    assert status.remaining_s() == 10.0
    clock.now += 2.0
    status.progress("forward recovery", 4_000, 10_000)
    d = status.as_dict()
    assert (d["phase"], d["phase_number"], d["unit"], d["fraction"]) == \
        ("forward recovery", 3, "bytes", 0.4)
    assert d["remaining_s"] == 3.0                   # 2 s for 4,000 bytes: 6,000 more
    assert d["elapsed_s"] == 2.75
    assert [(p["name"], p["state"], p["seconds"]) for p in d["phases"][:4]] == [
        ("log initialisation", "done", 0.5), ("status rebuild", "done", 0.25),
        ("forward recovery", "running", 2.0), ("backward recovery", "waiting", 0.0)]
    status.progress("backward recovery", 1, 1)       # complete: the checkpoint follows
    assert status.phase == "checkpoint"
    status.progress("index rebuild", 1, 2)           # reported after all: not a checkpoint
    assert status.phase == "index rebuild" and "checkpoint" not in status.finished
    report = {"phases": {name: 0.1 for name in ("log initialisation", "status rebuild",
                                                "forward recovery", "backward recovery",
                                                "index rebuild", "checkpoint")}}
    status.restart_ended(report)
    assert status.phase == "startup" and status.finished == report["phases"]
    clock.now += 0.5
    status.now_running()
    d = status.as_dict()
    assert status.running and d["restart"] == report and d["phase"] is None
    assert d["phases"][-1] == {"name": "startup", "state": "done", "seconds": 0.5}
    clock.now += 10
    assert status.as_dict()["elapsed_s"] == d["elapsed_s"]    # the clock stopped
    failed = RestartStatus("QM1", clock=clock)
    failed.progress("log initialisation", 1, 1)
    failed.progress("forward recovery", 5, 10)
    failed.start_failed(RuntimeError("log record at LSN 5 is damaged"))
    d = failed.as_dict()
    assert (d["state"], d["phase"], d["error"]) == ("failed", "forward recovery",
                                                    "log record at LSN 5 is damaged")
    assert d["phases"][2] == {"name": "forward recovery", "state": "failed", "seconds": 0.0}


def test_the_restart_metrics_are_valid_text():
    clock = Clock()
    status = RestartStatus("QM1", clock=clock)
    status.progress("log initialisation", 1, 1)
    status.progress("forward recovery", 0, 100)
    clock.now += 1.0
    status.progress("forward recovery", 25, 100)
    m = metrics(restart_metrics(status).decode())
    assert m[("harbormq_restart_in_progress", frozenset())] == 1
    assert m[("harbormq_restart_failed", frozenset())] == 0
    assert m[("harbormq_restart_current_phase",
              frozenset({("phase", "forward recovery")}))] == 1
    assert m[("harbormq_restart_current_phase", frozenset({("phase", "startup")}))] == 0
    assert m[("harbormq_restart_phase_done",
              frozenset({("phase", "forward recovery"), ("unit", "bytes")}))] == 25
    assert m[("harbormq_restart_phase_total",
              frozenset({("phase", "forward recovery"), ("unit", "bytes")}))] == 100
    assert m[("harbormq_restart_phase_estimated_remaining_seconds", frozenset())] == 3.0
    assert ("harbormq_restart_phase_duration_seconds",
            frozenset({("phase", "log initialisation")})) in m


def test_status_metrics_and_rest_while_restart_runs(srv):
    leave_work_to_redo(srv)
    start = SlowStart(srv)
    owner = WebClient(start.port)                     # anonymous loopback: the owner
    alice = WebClient(start.port, "alice", "alicepw")
    statuses, scrapes, listeners_seen, admin_open = [], [], set(), []
    pool = ThreadPoolExecutor(5)
    asked: dict = {}
    while True:
        status, body = owner.json("GET", RESTART)
        assert status == 200, body
        statuses.append(body)
        if body["state"] == "running":
            break
        assert body["state"] == "starting", body
        scrape_status, _, text = owner.call("GET", "/metrics")
        assert scrape_status == 200
        scrapes.append(metrics(text.decode()))
        entries = json.loads((srv.qm_dir / "listeners.json").read_text())
        listeners_seen.add(tuple(e.get("transport", "tcp") for e in entries))
        admin_open.append(srv._admin_ok())
        if not asked:
            # the REST and console calls during restart, beside the polling (each
            # is answered in one of restart's pauses, a login's scrypt on a thread)
            root = WebClient(start.port, "root", "rootpw")
            asked = {
                "mqsc": pool.submit(owner.mqsc, "DISPLAY QMSTATUS", qm="QR"),
                "put": pool.submit(owner.json, "POST", f"/ibmmq/rest/v2/messaging/qmgr/QR/"
                                   f"queue/{QUEUE}/message", "hello"),
                "alice status": pool.submit(alice.json, "GET", RESTART),
                "alice overview": pool.submit(alice.json, "GET", "/console/api/overview"),
                "root overview": pool.submit(root.json, "GET", "/console/api/overview"),
            }
        time.sleep(0.05)
    start.join()

    # the phases advanced in MQ's order, forward recovery's bytes growing, to running
    phases = [s["phase"] for s in statuses if s["state"] == "starting"]
    seen = [p for i, p in enumerate(phases) if i == 0 or phases[i - 1] != p]
    assert "forward recovery" in seen, seen
    assert [PHASE_ORDER.index(p) for p in seen] == sorted(PHASE_ORDER.index(p) for p in seen)
    redo = [s for s in statuses if s["phase"] == "forward recovery"]
    done = [s["done"] for s in redo]
    assert len(set(done)) >= 2 and done == sorted(done), done
    assert all(s["unit"] == "bytes" and s["total"] >= s["done"] for s in redo)
    assert any(s["remaining_s"] is not None and s["remaining_s"] > 0 for s in redo), redo
    assert redo[-1]["elapsed_s"] > redo[0]["elapsed_s"]
    assert {"name": "log initialisation", "state": "done"}.items() <= \
        redo[-1]["phases"][0].items()
    final = statuses[-1]
    assert final["restart"]["uows_backed_out"] == 1
    assert final["restart"]["records_replayed"] >= PUTS
    assert set(final["restart"]["phases"]) == set(PHASE_ORDER[:-1])

    # /metrics: the restart's gauges, the phase running marked
    assert all(m[("harbormq_restart_in_progress", frozenset())] == 1 for m in scrapes)
    assert any(m.get(("harbormq_restart_current_phase",
                      frozenset({("phase", "forward recovery")}))) == 1 for m in scrapes)
    assert any(m.get(("harbormq_restart_phase_done",
                      frozenset({("phase", "forward recovery"), ("unit", "bytes")})), 0) > 0
               for m in scrapes)
    assert not any(name == "harbormq_queue_depth" for m in scrapes for name, _ in m)
    # nothing but the web listener and its status before restart ended
    assert listeners_seen == {("http",)} and not any(admin_open)

    # REST during restart: MQ's "queue manager not available"
    answers = {what: future.result(30) for what, future in asked.items()}
    pool.shutdown()
    (mqsc_status, mqsc_body), (put_status, put_body) = answers["mqsc"], answers["put"]
    alice_status, alice_overview = answers["alice status"], answers["alice overview"]
    root_overview = answers["root overview"]
    for status, body in ((mqsc_status, mqsc_body), (put_status, put_body)):
        assert status == 503, body
        assert body["error"][0]["reasonCode"] == 2059
        assert body["error"][0]["msgId"] == "MQWB0059E"
    assert alice_status[0] == 403                           # no +dsp on the queue manager
    assert alice_overview[0] == 503 and "restart" not in alice_overview[1]
    assert root_overview[0] == 503 and root_overview[1]["restart"]["state"] == "starting"

    # then it runs: everything is served, the message put during restart never was
    status, body = owner.mqsc("DISPLAY QLOCAL(SLOW.REDO) CURDEPTH", qm="QR")
    assert status == 200 and "CURDEPTH(2)" in "\n".join(body["commandResponse"][0]["text"])
    after = metrics(owner.call("GET", "/metrics")[2].decode())
    assert after[("harbormq_restart_in_progress", frozenset())] == 0
    assert after[("harbormq_queue_depth", frozenset({("queue", QUEUE)}))] == 2
    entries = json.loads((srv.qm_dir / "listeners.json").read_text())
    assert [e.get("transport", "tcp") for e in entries] == ["tcp", "http"]


def test_the_console_shows_the_starting_page(srv):
    with headless_driver() as browser:
        leave_work_to_redo(srv)
        # forward recovery long enough (about 7 s) for a browser to log in and see it
        # on a loaded machine
        start = SlowStart(srv, delay_ms=BROWSER_DELAY_MS)
        base = f"http://127.0.0.1:{start.port}/console/"
        browser.get(base + "#queues")
        wait = WebDriverWait(browser, 30, poll_frequency=0.05, ignored_exceptions=(Exception,))
        wait.until(lambda b: b.find_element(By.ID, "login").is_displayed())
        browser.find_element(By.ID, "login-user").send_keys("root")
        browser.find_element(By.ID, "login-password").send_keys("rootpw")
        browser.find_element(By.ID, "login-submit").click()
        # the queues page, asked for during restart, shows the restart instead
        phase = wait.until(lambda b: b.find_element(By.ID, "starting").get_attribute(
            "data-phase") == "forward recovery" and b.find_element(By.ID, "starting"))
        text = phase.text
        assert "STARTING" in text and "forward recovery" in text and "phase 3 of 6" in text
        assert "MB" in text
        rows = browser.execute_script(
            "return [...document.querySelectorAll('#restart-phases tbody tr')].map("
            "tr => [tr.dataset.name, tr.querySelector('td[data-key=state]').innerText])")
        assert ["log initialisation", "done"] in rows and ["forward recovery", "running"] in rows
        keep_screenshot(browser, "console", "starting")
        # then the page it asked for, once the queue manager runs
        wait.until(lambda b: b.find_element(By.ID, "view").get_attribute("data-view")
                   == "queues" and QUEUE in b.find_element(By.ID, "view").text)
        start.join()


def test_a_failed_start_is_shown_until_the_process_ends(srv):
    if srv.running:
        srv.stop()
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    original = srv.config_path.read_text()
    srv.configure(listeners=[{"name": "TAKEN", "host": "127.0.0.1",
                              "port": taken.getsockname()[1]}])
    (srv.qm_dir / "listeners.json").unlink(missing_ok=True)
    proc = subprocess.Popen([PYTHON, "-m", "harbormq", "start", srv.name, "--foreground"],
                            env=srv.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    try:
        port = deadline_wait(lambda: web_port(srv), 60, what="the web listener")
        owner = WebClient(port)
        failed = deadline_wait(lambda: _failed_status(owner), 60, what="the failed state")
        assert "TAKEN" in failed["error"] and "cannot listen" in failed["error"]
        scrape = metrics(owner.call("GET", "/metrics")[2].decode())
        assert scrape[("harbormq_restart_failed", frozenset())] == 1
        status, body = owner.mqsc("DISPLAY QMSTATUS", qm="QR")
        assert status == 503 and body["error"][0]["reasonCode"] == 2059
        assert "TAKEN" in body["error"][0]["message"]
        # why it failed (paths, ports) only to a caller who may read the status
        status, body = WebClient(port, "alice", "alicepw").mqsc("DISPLAY QMSTATUS", qm="QR")
        assert status == 503 and body["error"][0]["reasonCode"] == 2059
        assert "its start failed" in body["error"][0]["message"]
        assert "TAKEN" not in body["error"][0]["message"]
        assert proc.wait(30) != 0
        assert not (srv.qm_dir / "listeners.json").exists()
        with pytest.raises(OSError):
            WebClient(port, timeout=2).call("GET", RESTART)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)
        proc.stdout.close()
        taken.close()
        srv.config_path.write_text(original)


def _failed_status(client: WebClient):
    try:
        status, body = client.json("GET", RESTART)
    except OSError:
        return None
    return body if status == 200 and body["state"] == "failed" else None

