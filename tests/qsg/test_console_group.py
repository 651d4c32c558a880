"""The web console's queue sharing group page (http/console_group.py) in
headless Chromium, on two real ``harbormq start`` members of one group (a
private PostgreSQL): the page shows both members, the structure and the shared
queue's depth and uncommitted messages as MQSC shows them; BACKUP CFSTRUCT
from the page is refused without authority (MQRC 2035 shown, nothing backed
up) and done with it (DISPLAY CFSTATUS TYPE(BACKUP) shows it); RESET
CFSTRUCT ACTION(FAIL) asks to confirm, and RECOVER CFSTRUCT shows its plan
and outcome. Screenshot ``docs/console/group.png`` (HARBORMQ_SCREENSHOTS=1)."""

from __future__ import annotations

import re

import pytest
from selenium.webdriver.common.by import By
from support.browser import headless_driver
from support.console_page import click_action, column, figure, last_action, log_in, show, wait_for
from support.screenshots import keep_screenshot
from support.stomp_helpers import QMServer, deadline_wait, stomp_client
from support.web_helpers import start_web, web_client

from harbormq.security import UserStore


@pytest.fixture
def members(qsg_db, tmp_path):
    """QA (with the web listener) and QB, members of QSG1; APP1 a structure and
    SQ a shared queue on it; users root (mqm) and alice (+dsp on QA only)."""
    servers = []
    try:
        for name in ("QA", "QB"):
            srv = QMServer(tmp_path / "hmq", name)
            srv.home.mkdir(parents=True, exist_ok=True)
            srv.cli("create", name, "--port", "0", "--log-file-pages", "64",
                    "--qsg", "QSG1", "--qsg-db", qsg_db)
            users = UserStore(srv.qm_dir / "users.json")
            users.add("root", "rootpw", ["mqm"])
            users.add("alice", "alicepw")
            servers.append(srv)
        qa, qb = servers
        start_web(qa)
        qb.start()
        # a group without structures or shared queues yet: shown as none
        status, doc = web_client(qa, "root", "rootpw").json("GET", "/console/api/group")
        assert status == 200 and doc["member"] is True, doc
        assert (doc["structures"], doc["queues"]) == ([], [])
        assert [m["qmname"] for m in doc["members"] if m["this"]] == ["QA"]
        qa.sc("DEFINE CFSTRUCT(APP1) RECOVER(YES) RECAUTO(NO)\n"
              "DEFINE QLOCAL(SQ) QSGDISP(SHARED) CFSTRUCT(APP1) DEFPSIST(YES)\n"
              "SET AUTHREC OBJTYPE(QMGR) PRINCIPAL('alice') AUTHADD(DSP)")
        deadline_wait(lambda: "QUEUE(SQ)" in qb.sc("DISPLAY QLOCAL(SQ)", check=False), 15,
                      what="SQ known to QB")
        yield qa, qb
    finally:
        for srv in servers:
            srv.stop()


@pytest.fixture
def browser():
    with headless_driver() as driver:
        yield driver


def attr(text: str, name: str) -> str:
    m = re.search(rf"\b{name}\(([^)]*)\)", text)
    assert m, text
    return m.group(1).strip()


def test_group_page_shows_the_group_and_drives_its_structure(members, browser):
    qa, qb = members
    producer = stomp_client(qb.port)                   # puts on the other member
    for i in range(6):
        producer.send("/queue/SQ", f"m{i}")
    producer.begin("tx1")                              # one uncommitted
    producer.send("/queue/SQ", "held", transaction="tx1")
    deadline_wait(lambda: attr(qa.sc("DISPLAY QLOCAL(SQ) CURDEPTH"), "CURDEPTH") == "7", 15,
                  what="SQ at depth 7")

    log_in(browser, qa, "root", "rootpw", view="group")
    show(browser, "group")
    wait_for(browser, lambda b: sorted(column(b, "member-table", "qmname")) ==
             ["QA (this one)", "QB"])
    assert column(browser, "member-table", "status") == ["ACTIVE", "ACTIVE"]
    group = qa.sc("DISPLAY GROUP")
    heartbeats = re.findall(r"HBTIME\(([^)]*)\)", group)
    assert all(heartbeats) and column(browser, "member-table", "hbtime")[0]
    assert figure(browser, "qsgname") == "QSG1" and figure(browser, "qsgstat") == "CONNECTED"
    assert browser.find_element(By.CSS_SELECTOR, "#nav a[data-view='group']").is_displayed()
    assert column(browser, "cfstruct-table", "cfstruct") == ["APP1"]
    assert column(browser, "cfstruct-table", "status") == ["ACTIVE"]
    assert column(browser, "cfstruct-table", "recauto") == ["NO"]
    assert column(browser, "cfstruct-table", "connected") == ["QA, QB"]
    assert column(browser, "cfstruct-table", "backup") == ["none"]
    depth = attr(qa.sc("DISPLAY QLOCAL(SQ) CURDEPTH"), "CURDEPTH")
    assert column(browser, "shared-queue-table", "curdepth") == [depth] == ["7"]
    assert column(browser, "shared-queue-table", "uncom") == ["1"]
    # live: the commit shows without a reload
    producer.commit("tx1")
    wait_for(browser, lambda b: column(b, "shared-queue-table", "uncom") == ["0"])
    producer.disconnect()

    # BACKUP CFSTRUCT without authority (alice: +dsp, no +chg): refused, nothing done
    command = "BACKUP CFSTRUCT('APP1')"
    log_in(browser, qa, "alice", "alicepw", view="group")
    wait_for(browser, lambda b: column(b, "cfstruct-table", "cfstruct") == ["APP1"])
    click_action(browser, "cfstruct-table", "APP1", "Back up")
    refused = last_action(browser, command)
    assert (refused["cc"], refused["reason"], refused["status"]) == ("2", "2035", "403")
    assert "failed" in refused["text"]
    assert attr(qa.sc("DISPLAY CFSTATUS(APP1) TYPE(BACKUP)"), "QMNAME") == ""

    # with authority: done, and DISPLAY CFSTATUS TYPE(BACKUP) shows it
    log_in(browser, qa, "root", "rootpw", view="group")
    click_action(browser, "cfstruct-table", "APP1", "Back up")
    done = last_action(browser, command)
    assert done["cc"] == "0" and "HMQ5320I" in done["text"], done
    backup = qa.sc("DISPLAY CFSTATUS(APP1) TYPE(BACKUP)")
    assert attr(backup, "QMNAME") == "QA" and attr(backup, "BKUPMSGS") == "7"
    wait_for(browser, lambda b: "by QA: 7 messages" in column(b, "cfstruct-table", "backup")[0])
    keep_screenshot(browser, "console", "group")

    # RESET CFSTRUCT ACTION(FAIL) asks to confirm; RECOVER shows its plan and outcome
    click_action(browser, "cfstruct-table", "APP1", "Fail")
    failed = last_action(browser, "RESET CFSTRUCT('APP1') ACTION(FAIL)")
    assert failed["cc"] == "0", failed
    wait_for(browser, lambda b: column(b, "cfstruct-table", "status") == ["FAILED"])
    click_action(browser, "cfstruct-table", "APP1", "Recover")
    recovered = last_action(browser, "RECOVER CFSTRUCT('APP1')")
    assert recovered["cc"] == "0", recovered
    text = recovered["text"]
    assert text.index("HMQ5322I") < text.index("HMQ5324I")       # the plan, then the outcome
    wait_for(browser, lambda b: column(b, "cfstruct-table", "status") == ["ACTIVE"])
    assert attr(qa.sc("DISPLAY QLOCAL(SQ) CURDEPTH"), "CURDEPTH") == "7"
