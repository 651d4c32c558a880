"""The web console in headless Chromium (one browser for the module) against a
real ``harbormq start`` with ``[web]``: each page loads and shows the figures
the queue manager reports, the queue list is paged and filtered on the
server, a queue's messages are browsed page by page, and what a user may not
display is not shown. Screenshots: ``HARBORMQ_SCREENSHOTS=1`` (support/screenshots.py)."""

from __future__ import annotations

import re

import pytest
from selenium.webdriver.common.by import By
from support.browser import headless_driver
from support.console_page import click_action, column, figure, last_action, log_in, show, wait_for
from support.screenshots import keep_screenshot
from support.stomp_helpers import QMServer, deadline_wait, depth, stomp_client
from support.web_helpers import start_web, web_client


@pytest.fixture(scope="module")
def browser():
    """This module's browser: it takes the session server's self-signed
    certificate (tests/http/conftest.py serves https)."""
    with headless_driver(accept_insecure_certs=True) as driver:
        yield driver


def mqsc_value(text: str, attr: str) -> str:
    m = re.search(rf"\b{attr}\(([^)]*)\)", text)
    assert m, text
    return m.group(1).strip()


@pytest.fixture(scope="module")
def deep(web):
    """CONSOLE.DEEP with 120 messages (m001..m120) and 60 more queues
    CONSOLE.PAGE.000..059 to page through; a STOMP connection open meanwhile."""
    web.sc("DEFINE QLOCAL(CONSOLE.DEEP) DEFPSIST(YES)\n" +
           "\n".join(f"DEFINE QLOCAL(CONSOLE.PAGE.{i:03d})" for i in range(60)))
    conn = stomp_client(web.port)
    for i in range(1, 121):
        conn.send("/queue/CONSOLE.DEEP", f"m{i:03d}")
    deadline_depth(web, "CONSOLE.DEEP", 120)
    yield conn
    conn.disconnect()


def deadline_depth(srv, queue: str, want: int) -> None:
    deadline_wait(lambda: depth(srv, queue) == want, 15, what=f"{queue} at depth {want}")


def test_pages_show_what_the_queue_manager_reports(web, deep, browser):
    log_in(browser, web, "root", "rootpw")
    show(browser, "overview")
    qmstatus = web.sc("DISPLAY QMSTATUS ALL")
    wait_for(browser, lambda b: figure(b, "status") == "RUNNING")
    assert figure(browser, "currlog") == mqsc_value(qmstatus, "CURRLOG")
    assert figure(browser, "reclog") == mqsc_value(qmstatus, "RECLOG")
    assert figure(browser, "logtype") == mqsc_value(qmstatus, "LOGTYPE")
    assert figure(browser, "rectime").endswith(("ms", "s", "min", "h", "days"))
    assert "restart point" in browser.find_element(By.ID, "restart-pin").text
    extents = column(browser, "extents", "extent")
    assert mqsc_value(qmstatus, "CURRLOG") in extents
    keep_screenshot(browser, "console", "overview")

    # the queue list: filtered and paged on the server
    show(browser, "queues")
    box = browser.find_element(By.ID, "queue-filter")
    box.send_keys("CONSOLE.PAGE*")
    wait_for(browser, lambda b: b.find_element(By.ID, "queue-range").get_attribute(
        "data-total") == "60" and len(column(b, "queue-table", "queue")) == 50)
    assert column(browser, "queue-table", "queue")[0] == "CONSOLE.PAGE.000"
    browser.find_element(By.ID, "queue-next").click()
    wait_for(browser, lambda b: column(b, "queue-table", "queue")[:1] == ["CONSOLE.PAGE.050"])
    assert len(column(browser, "queue-table", "queue")) == 10
    assert "51–60 of 60" in browser.find_element(By.ID, "queue-range").text
    box.clear()
    box.send_keys("CONSOLE.DEEP")
    wait_for(browser, lambda b: column(b, "queue-table", "queue") == ["CONSOLE.DEEP"])
    assert column(browser, "queue-table", "curdepth") == ["120"]
    keep_screenshot(browser, "console", "queues")

    # browsing it page by page, in delivery order
    browser.find_element(By.LINK_TEXT, "CONSOLE.DEEP").click()
    wait_for(browser, lambda b: len(column(b, "message-table", "body")) == 50)
    assert column(browser, "message-table", "body")[:2] == ["m001", "m002"]
    browser.find_element(By.ID, "browse-next").click()
    wait_for(browser, lambda b: column(b, "message-table", "body")[:1] == ["m051"])
    browser.find_element(By.ID, "browse-next").click()
    wait_for(browser, lambda b: column(b, "message-table", "body")[-1:] == ["m120"])
    assert len(column(browser, "message-table", "body")) == 20
    assert not browser.find_element(By.ID, "browse-next").is_enabled()
    assert column(browser, "message-table", "position")[0] == "101"
    keep_screenshot(browser, "console", "browse")
    assert depth(web, "CONSOLE.DEEP") == 120          # browsing took nothing

    # connections (the STOMP one is open), channels, topics
    show(browser, "connections")
    conns = web.sc("DISPLAY CONN(*)")
    ids = re.findall(r"CONN\(([0-9A-F]+)\)", conns)
    # ... and the page's own read, an HTTP connection while it runs (http.md)
    def shown(b):
        rows = zip(column(b, "conn-table", "conn"), column(b, "conn-table", "appltag"),
                   column(b, "conn-table", "userid"), strict=True)
        return sorted(c for c, tag, user in rows if (tag, user) != ("HTTP console", "root"))
    wait_for(browser, lambda b: shown(b) == sorted(ids))
    assert ids
    assert column(browser, "conn-table", "appltag").count("HTTP console") == 1
    keep_screenshot(browser, "console", "connections")
    show(browser, "channels")
    assert "SYSTEM.DEF.SVRCONN" in column(browser, "channel-table", "channel")
    keep_screenshot(browser, "console", "channels")
    show(browser, "topics")
    assert "SYSTEM.BASE.TOPIC" in column(browser, "topic-table", "topic")
    keep_screenshot(browser, "console", "topics")


def test_pages_live_update(web, deep, browser):
    """The queue list reads again by itself: a put shows without a reload."""
    web.sc("DEFINE QLOCAL(CONSOLE.LIVE)")
    log_in(browser, web, "root", "rootpw", view="queues")
    box = wait_for(browser, lambda b: b.find_element(By.ID, "queue-filter"))
    box.send_keys("CONSOLE.LIVE")
    wait_for(browser, lambda b: column(b, "queue-table", "curdepth") == ["0"])
    deep.send("/queue/CONSOLE.LIVE", "x")
    wait_for(browser, lambda b: column(b, "queue-table", "curdepth") == ["1"])


def test_a_user_sees_only_what_he_may_display(web, deep, browser):
    """alice has no authority: the overview says so (MQRC 2035) and the queue
    list is empty; with +dsp on one queue she sees that one alone."""
    log_in(browser, web, "alice", "alicepw")
    error = wait_for(browser, lambda b: b.find_element(By.ID, "view-error").text)
    assert "2035" in error or "not authorized" in error
    alice = web_client(web, "alice", "alicepw")
    status, body = alice.json("GET", "/console/api/queues?filter=CONSOLE.PAGE*")
    assert status == 200 and body["total"] == 0
    # a browser's request (an Origin) without a login gets no data
    status, _ = web_client(web).json("GET", "/console/api/overview",
                                             headers={"Origin": "http://elsewhere.example"})
    assert status == 401
    status, headers, page = web_client(web).call("GET", "/console/")
    assert status == 200 and b"console.js" in page   # the page itself holds none
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    status, openapi = web_client(web).json("GET", "/ibmmq/rest/v2/openapi.json")
    assert status == 200 and "/console/api/queues/{name}/messages" in openapi["paths"]
    status, body = alice.json("GET", "/console/api/queues/CONSOLE.DEEP/messages")
    assert status == 403 and body["error"][0]["reasonCode"] == 2035
    web.sc("SET AUTHREC PROFILE(CONSOLE.PAGE.007) OBJTYPE(QUEUE) PRINCIPAL('alice') "
           "AUTHADD(DSP)")
    status, body = alice.json("GET", "/console/api/queues?filter=CONSOLE.PAGE*")
    assert [q["queue"] for q in body["queues"]] == ["CONSOLE.PAGE.007"]
    assert body["total"] == 1


def test_actions_do_what_they_say_with_and_without_authority(web, deep, browser):
    """Clear is CLEAR QLOCAL through runCommand: refused for alice (+dsp, no +clr)
    with MQRC 2035 and the queue untouched; done for root; the MQSC box runs any
    command and shows its answer."""
    web.sc("DEFINE QLOCAL(CONSOLE.CLR)")
    putter = stomp_client(web.port)         # gone before the clear (an open queue is not
    for i in range(5):                      # cleared: MQRC 2055)
        putter.send("/queue/CONSOLE.CLR", f"c{i}")
    deadline_depth(web, "CONSOLE.CLR", 5)
    putter.disconnect()
    web.sc("SET AUTHREC PROFILE(CONSOLE.CLR) OBJTYPE(QUEUE) PRINCIPAL('alice') AUTHADD(DSP)")
    command = "CLEAR QLOCAL('CONSOLE.CLR')"

    log_in(browser, web, "alice", "alicepw", view="queues")
    # only the queues she may display (this one, and one an earlier test granted)
    wait_for(browser, lambda b: "CONSOLE.CLR" in column(b, "queue-table", "queue"))
    assert set(column(browser, "queue-table", "queue")) <= {"CONSOLE.CLR", "CONSOLE.PAGE.007"}
    click_action(browser, "queue-table", "CONSOLE.CLR", "Clear")
    refused = last_action(browser, command)
    assert refused["cc"] == "2" and refused["reason"] == "2035" and refused["status"] == "403"
    assert "failed" in refused["text"]
    assert depth(web, "CONSOLE.CLR") == 5

    log_in(browser, web, "root", "rootpw", view="queues")
    browser.find_element(By.ID, "queue-filter").send_keys("CONSOLE.CLR")
    wait_for(browser, lambda b: column(b, "queue-table", "curdepth") == ["5"])
    click_action(browser, "queue-table", "CONSOLE.CLR", "Clear")
    done = last_action(browser, command)
    assert done["cc"] == "0" and done["status"] == "200" and "done" in done["text"], done
    assert depth(web, "CONSOLE.CLR") == 0
    wait_for(browser, lambda b: column(b, "queue-table", "curdepth") == ["0"])

    show(browser, "overview")
    box = browser.find_element(By.ID, "mqsc-command")
    box.send_keys("DEFINE QLOCAL(CONSOLE.MADE)")
    box.submit()
    made = last_action(browser, "DEFINE QLOCAL(CONSOLE.MADE)")
    assert made["cc"] == "0"
    assert "CONSOLE.MADE" in web.sc("DISPLAY QLOCAL(CONSOLE.MADE)")
    keep_screenshot(browser, "console", "actions")


def test_an_in_doubt_unit_of_work_is_resolved(tmp_path, browser):
    """A unit of work prepared before a stop is in doubt after the start: the
    connections page lists it PREPARED and its Commit is RESOLVE UOW ... ACTION(COMMIT)."""
    from harbormq import QueueManager
    srv = QMServer(tmp_path / "hmq", "QD")
    srv.create()
    qm = QueueManager.open("QD", home=srv.home)
    qm.define_queue("CONSOLE.IND", DEFPSIST="YES")
    u = qm.begin()
    u.put("CONSOLE.IND", b"in doubt")
    u.prepare()
    uow_id = u.id
    qm.close("immediate")
    start_web(srv)
    srv.user_add("root", "rootpw", "mqm")
    try:
        assert "PREPARED" in srv.sc(f"DISPLAY UOW({uow_id})")
        log_in(browser, srv, "root", "rootpw", view="connections")
        wait_for(browser, lambda b: column(b, "uow-table", "state") == ["PREPARED"])
        keep_screenshot(browser, "console", "in-doubt")
        click_action(browser, "uow-table", str(uow_id), "Commit")
        done = last_action(browser, f"RESOLVE UOW({uow_id}) ACTION(COMMIT)")
        assert done["cc"] == "0", done
        assert depth(srv, "CONSOLE.IND") == 1
        wait_for(browser, lambda b: not column(b, "uow-table", "state"))
    finally:
        srv.stop()


def test_channel_start_and_stop(web, browser):
    """A sender channel to a port nobody listens on (it waits INACTIVE for its
    transmission queue): Stop is STOP CHANNEL (STOPPED), Start is START CHANNEL
    (no longer stopped); the page shows status and sequence numbers as DISPLAY
    CHSTATUS does."""
    web.sc("DEFINE QLOCAL(CONSOLE.XQ) USAGE(XMITQ)\n"
           "DEFINE CHANNEL(CONSOLE.TO.NOWHERE) CHLTYPE(SDR) CONNAME('127.0.0.1(1)') "
           "XMITQ(CONSOLE.XQ)")
    log_in(browser, web, "root", "rootpw", view="channels")
    row = "CONSOLE.TO.NOWHERE"

    def status(b):
        return b.execute_script(
            "const td = document.querySelector(`#channel-table tr[data-name='${arguments[0]}'] "
            "td[data-key='status']`); return td ? td.innerText : null", row)
    wait_for(browser, lambda b: status(b) == "INACTIVE")
    assert column(browser, "channel-table", "lstseqno")[
        column(browser, "channel-table", "channel").index(row)] == "0"
    click_action(browser, "channel-table", row, "Stop")
    assert last_action(browser, f"STOP CHANNEL('{row}')")["cc"] == "0"
    wait_for(browser, lambda b: status(b) == "STOPPED")
    assert "STATUS(STOPPED)" in web.sc(f"DISPLAY CHSTATUS({row})")
    click_action(browser, "channel-table", row, "Start")
    assert last_action(browser, f"START CHANNEL('{row}')")["cc"] == "0"
    wait_for(browser, lambda b: status(b) not in (None, "STOPPED"))
    assert "STATUS(STOPPED)" not in web.sc(f"DISPLAY CHSTATUS({row})")
