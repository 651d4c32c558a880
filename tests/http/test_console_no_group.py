"""The console's group page on a queue manager of no group (the group itself:
tests/qsg/test_console_group.py): ``/console/api/group`` says it is not a
member, read with the requester's authority like every console read, and the
path is in the OpenAPI description."""

from __future__ import annotations

from support.web_helpers import web_client


def test_a_queue_manager_of_no_group_says_so(web, admin):
    status, body = admin.json("GET", "/console/api/group")
    assert status == 200
    assert body["member"] is False and body["qmgr"] == "QW"
    # alice may not display the queue manager: refused as the other reads are
    status, body = web_client(web, "alice", "alicepw").json("GET", "/console/api/group")
    assert status == 403 and body["error"][0]["reasonCode"] == 2035
    status, openapi = web_client(web).json("GET", "/ibmmq/rest/v2/openapi.json")
    assert status == 200 and "/console/api/group" in openapi["paths"]
