"""The console's group page on a queue manager of no group (the group itself:
tests/qsg/test_console_group.py): ``/console/api/group`` says it is not a
member, read with the requester's authority like every console read, and the
path is in the OpenAPI description; in the browser the Group link is hidden
and the page, opened by its address, says the queue manager is in no group."""

from __future__ import annotations

from selenium.webdriver.common.by import By
from support.browser import headless_driver
from support.console_page import log_in, show, wait_for
from support.web_helpers import web_client


def test_a_queue_manager_of_no_group_says_so(web, admin):
    status, body = admin.json("GET", "/console/api/group")
    assert status == 200
    assert body["member"] is False and body["qmgr"] == "QW"
    status, session = admin.json("GET", "/console/api/session")
    assert status == 200 and session["qsg_member"] is False
    # alice may not display the queue manager: refused as the other reads are
    status, body = web_client(web, "alice", "alicepw").json("GET", "/console/api/group")
    assert status == 403 and body["error"][0]["reasonCode"] == 2035
    status, openapi = web_client(web).json("GET", "/ibmmq/rest/v2/openapi.json")
    assert status == 200 and "/console/api/group" in openapi["paths"]

    with headless_driver(accept_insecure_certs=True) as browser:
        log_in(browser, web, "root", "rootpw")
        link = browser.find_element(By.CSS_SELECTOR, "#nav a[data-view='group']")
        wait_for(browser, lambda b: not link.is_displayed())
        show(browser, "group")
        text = browser.find_element(By.ID, "no-group").text
        assert "QW is not a member of a queue sharing group" in text
