"""MQ administrators' MQSC run unchanged: the developer configuration an MQ
installation ships (tests/fixtures/mqsc/mq-dev-config.mqsc: queues, a
dead-letter queue, a topic, connection authentication, two SVRCONN channels,
CHLAUTH rules, authority records on queues, the queue manager and a topic, a
listener started with IGNSTATE) runs statement by statement, and then governs
who connects: ``app`` logs in on DEV.APP.SVRCONN and puts to a DEV queue, an
anonymous client there is refused (CHCKCLNT(REQUIRED) on its record), and the
owner without a password is refused by the AUTHINFO's REQDADM.

DEFINE TOPIC waits for publish/subscribe (the TOPIC object of another
change): until it is merged that one statement, exactly, is expected to fail
with a syntax error naming TOPIC.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.stomp_helpers import QMServer, RawStomp

from harbormq.admin.client import send_mqsc
from harbormq.admin.mqsc import OBJTYPES

SCRIPT = Path(__file__).parent.parent / "fixtures" / "mqsc" / "mq-dev-config.mqsc"
TOPIC_MERGED = "TOPIC" in OBJTYPES


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = QMServer(tmp_path_factory.mktemp("devcfg") / "hmq", "QDEV")
    s.create()
    s.configure(listeners=[{"name": "STOMP", "host": "127.0.0.1", "port": 0},
                           {"name": "APP", "host": "127.0.0.1", "port": 0,
                            "channel": "DEV.APP.SVRCONN"}])
    s.start()
    s.user_add("app", "apppw")
    yield s
    s.stop()


def run_script(s: QMServer) -> dict:
    from types import SimpleNamespace
    text = SCRIPT.read_text().replace("PORT(1414)", "PORT(0)")
    target = SimpleNamespace(name=s.name, admin_socket=s.qm_dir / "admin.sock")
    return send_mqsc(target, text, continue_on_error=True)


def error(answer: str) -> bool:
    return re.search(r"^HMQ\d{4}E: ", answer, re.M) is not None


def blocks(output: str) -> list[tuple[str, str]]:
    """(echoed command, its answer) for every command of a runmqsc output."""
    out, cur, answer = [], None, []
    for line in output.splitlines():
        if line[:6].strip().isdigit() and line[6:9] == " : ":
            if cur is not None:
                out.append((cur, "\n".join(answer)))
            cur, answer = line[9:], []
        elif line.startswith("       : ") and cur is not None:
            cur += " " + line[9:].strip()
        elif cur is not None:
            answer.append(line)
    if cur is not None:
        out.append((cur, "\n".join(answer)))
    return out


def test_the_developer_configuration_runs_and_governs_connections(srv):
    reply = run_script(srv)
    results = blocks(reply["output"])
    assert len(results) == 20, reply["output"]
    failed = [(cmd, ans) for cmd, ans in results if error(ans)]
    if TOPIC_MERGED:
        assert failed == [], failed
    else:
        assert [cmd for cmd, _ in failed] == [
            "DEFINE TOPIC('DEV.BASE.TOPIC') TOPICSTR('dev/') REPLACE"], failed
        assert "HMQ8405E" in failed[0][1] and "found TOPIC" in failed[0][1]
    warned = [cmd for cmd, ans in results if "HMQ8890W" in ans]
    assert warned and warned[0].startswith("DEFINE AUTHINFO('DEV.AUTHINFO')")
    assert "CHCKLOCL accepted: it has no effect" in reply["output"]

    display = srv.sc("DISPLAY CHLAUTH(*)\nDISPLAY AUTHINFO(DEV.AUTHINFO) CHCKCLNT\n"
                     "DISPLAY QMGR CONNAUTH DEADQ\nDISPLAY LISTENER(DEV.LISTENER.TCP) STATUS\n"
                     "DISPLAY AUTHREC PROFILE('DEV.**') OBJTYPE(TOPIC)")
    for fragment in ("CHLAUTH(DEV.APP.SVRCONN)", "CHCKCLNT(REQDADM)",
                     "CONNAUTH(DEV.AUTHINFO)", "DEADQ(DEV.DEAD.LETTER.QUEUE)",
                     "STATUS(RUNNING)", "AUTHLIST(PUB,SUB)",
                     "DESCR(Back-stop rule - Blocks everyone)"):
        assert fragment in display, (fragment, display)

    app_port = srv.listeners[1]["port"]
    c = RawStomp(app_port)
    try:
        f = c.connect(login="app", passcode="apppw")
        assert f.command == "CONNECTED", f
        c.send("SEND", {"destination": "/queue/DEV.QUEUE.1", "receipt": "r"}, b"hello")
        assert c.recv().command == "RECEIPT"
    finally:
        c.close()
    for port, login, why in ((app_port, None, "required"), (srv.port, None, "REQDADM")):
        c = RawStomp(port)
        try:
            f = c.connect(login=login)
            assert f.command == "ERROR" and "2035" in f["message"] and why in f["message"], \
                f.headers
        finally:
            c.close()
    # and again, unchanged: every DEFINE says REPLACE, every SET CHLAUTH ACTION(REPLACE)
    again = blocks(run_script(srv)["output"])
    assert [(c, a) for c, a in again if error(a)] == failed
