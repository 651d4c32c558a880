"""MQ's administrative REST API: MQSC through ``runCommand`` and
``runCommandJSON``, every command the admin socket takes with the same
outcome, as the request's user with that user's authority."""

from __future__ import annotations

import re

import pytest
from support.web_helpers import web_client

from harbormq.admin import mqsc

MQSC = "/ibmmq/rest/v2/admin/action/qmgr/QW/mqsc"

#: one command of every kind the admin socket takes, in an order in which each
#: finds what it needs; {s} makes the names of one run its own
EVERY_COMMAND = [
    "DEFINE QLOCAL(E{s}.Q) MAXDEPTH(100)",
    "ALTER QLOCAL(E{s}.Q) DESCR('altered')",
    "DISPLAY QLOCAL(E{s}.Q) MAXDEPTH DESCR",
    "DISPLAY QUEUE(E{s}.*) TYPE(ALL)",
    "DISPLAY QSTATUS(E{s}.Q)",
    "CLEAR QLOCAL(E{s}.Q)",
    "DEFINE QREMOTE(E{s}.R) RNAME(X) RQMNAME(QX) XMITQ(E{s}.Q)",
    "ALTER QREMOTE(E{s}.R) RNAME(Y)",
    "DISPLAY QREMOTE(E{s}.R)",
    "DEFINE QALIAS(E{s}.A) TARGET(E{s}.Q)",
    "ALTER QALIAS(E{s}.A) DESCR('alias')",
    "DISPLAY QALIAS(E{s}.A)",
    "DEFINE QMODEL(E{s}.M)",
    "ALTER QMODEL(E{s}.M) DESCR('model')",
    "DISPLAY QMODEL(E{s}.M)",
    "DEFINE PROCESS(E{s}.P) APPLICID('/bin/true')",
    "ALTER PROCESS(E{s}.P) DESCR('p')",
    "DISPLAY PROCESS(E{s}.P)",
    "DEFINE NAMELIST(E{s}.N) NAMES(A, B)",
    "ALTER NAMELIST(E{s}.N) NAMES(C)",
    "DISPLAY NAMELIST(E{s}.N)",
    "DEFINE CHANNEL(E{s}.SDR) CHLTYPE(SDR) CONNAME('127.0.0.1(1)') XMITQ(E{s}.Q)",
    "ALTER CHANNEL(E{s}.SDR) CHLTYPE(SDR) BATCHSZ(7)",
    "DISPLAY CHANNEL(E{s}.SDR)",
    "DISPLAY CHSTATUS(*)",
    "RESET CHANNEL(E{s}.SDR) SEQNUM(1)",
    "RESOLVE CHANNEL(E{s}.SDR) ACTION(BACKOUT)",
    "START CHANNEL(E{s}.SDR)",
    "STOP CHANNEL(E{s}.SDR)",
    "DEFINE LISTENER(E{s}.L) TRPTYPE(TCP) PORT(0) CONTROL(MANUAL)",
    "ALTER LISTENER(E{s}.L) DESCR('l')",
    "DISPLAY LISTENER(E{s}.L)",
    "START LISTENER(E{s}.L)",
    "STOP LISTENER(E{s}.L)",
    "DEFINE AUTHINFO(E{s}.AI) AUTHTYPE(IDPWOS) CHCKCLNT(OPTIONAL)",
    "ALTER AUTHINFO(E{s}.AI) DESCR('ai')",
    "DISPLAY AUTHINFO(E{s}.AI)",
    "SET CHLAUTH('E{s}.SVRCONN') TYPE(BLOCKUSER) USERLIST('nobody')",
    "DISPLAY CHLAUTH('E{s}.SVRCONN')",
    "REFRESH SECURITY TYPE(CONNAUTH)",
    "DEFINE TOPIC(E{s}.T) TOPICSTR('e{s}/t')",
    "ALTER TOPIC(E{s}.T) DESCR('t')",
    "DISPLAY TOPIC(E{s}.T)",
    "DISPLAY TPSTATUS('e{s}/t')",
    "DEFINE SUB(E{s}.S) TOPICSTR('e{s}/t') DEST(E{s}.Q)",
    "ALTER SUB(E{s}.S) EXPIRY(600)",
    "DISPLAY SUB(E{s}.S)",
    "DISPLAY SBSTATUS(E{s}.S)",
    "DISPLAY PUBSUB",
    "CLEAR TOPICSTR('e{s}/t') CLRTYPE(RETAINED)",
    "SET AUTHREC PROFILE(E{s}.Q) OBJTYPE(QUEUE) PRINCIPAL('bob') AUTHADD(BROWSE)",
    "DISPLAY AUTHREC PROFILE(E{s}.Q) OBJTYPE(QUEUE)",
    "DELETE AUTHREC PROFILE(E{s}.Q) OBJTYPE(QUEUE) PRINCIPAL('bob')",
    "DISPLAY QMGR QMNAME",
    "ALTER QMGR DESCR('qmgr')",
    "DISPLAY QMSTATUS",
    "PING QMGR",
    "DISPLAY CONN(*)",
    "STOP CONN(0000000000000000)",
    "DISPLAY UOW(*)",
    "RESOLVE UOW(999999) ACTION(BACKOUT)",
    "DISPLAY LOG",
    "SET LOG ARCHIVED('S9999999.LOG')",
    "ARCHIVE LOG",
    "DISPLAY USAGE",
    "DELETE SUB(E{s}.S)",
    "DELETE TOPIC(E{s}.T)",
    "DELETE AUTHINFO(E{s}.AI)",
    "DELETE LISTENER(E{s}.L)",
    "DELETE CHANNEL(E{s}.SDR)",
    "DELETE NAMELIST(E{s}.N)",
    "DELETE PROCESS(E{s}.P)",
    "DELETE QMODEL(E{s}.M)",
    "DELETE QALIAS(E{s}.A)",
    "DELETE QREMOTE(E{s}.R)",
    "DELETE QLOCAL(E{s}.Q)",
]
#: the queue sharing group's commands (docs/qsg.md): this queue manager is in no
#: group, so each fails, and must fail the same way on both paths
GROUP_COMMANDS = [
    "DISPLAY GROUP",
    "DEFINE CFSTRUCT(E{s}) CFLEVEL(5) RECOVER(YES)",
    "ALTER CFSTRUCT(E{s}) RECAUTO(NO)",
    "DISPLAY CFSTRUCT(E{s})",
    "DISPLAY CFSTATUS(E{s}) TYPE(SUMMARY)",
    "BACKUP CFSTRUCT(E{s})",
    "RESET CFSTRUCT(E{s}) ACTION(FAIL)",
    "RECOVER CFSTRUCT(E{s})",
    "DELETE CFSTRUCT(E{s})",
]


def outcome_of_socket(output: str) -> list[str]:
    """The message ids a runmqsc-style answer shows for its one command."""
    return re.findall(r"^(HMQ\d{4}[IWE]):", output, re.M)


def test_every_admin_socket_command_works_through_run_command(web, admin):
    kinds = {mqsc.parse_command(c.format(s="R")).verb + " " +
             mqsc.parse_command(c.format(s="R")).objtype
             for c in EVERY_COMMAND + GROUP_COMMANDS}
    assert kinds == {f"{v} {o}" for v, o in mqsc.SPECS}, "a command kind is not tried"
    ran = 0
    for command in EVERY_COMMAND + GROUP_COMMANDS:
        rest_text = command.format(s="R")
        status, doc = admin.mqsc(rest_text)
        assert status == 200, (rest_text, doc)
        socket_out = web.sc(command.format(s="S"), check=False)
        socket_ids = [i for i in outcome_of_socket(socket_out)
                      if i not in ("HMQ8403I",)]                    # (the script summary)
        rest_ids = [line.split(":")[0] for r in doc["commandResponse"] for line in r["text"]
                    if re.match(r"HMQ\d{4}[IWE]:", line)]
        assert rest_ids == socket_ids, (rest_text, doc, socket_out)
        failed = doc["overallCompletionCode"] == 2
        assert failed == ("HMQ8405E" in socket_out or any(
            i.endswith("E") for i in socket_ids)), (rest_text, doc, socket_out)
        if command in GROUP_COMMANDS:
            assert failed, (rest_text, doc)
            continue
        ran += not failed
    # the few that fail do so the same way on both paths (no such connection, unit
    # of work or extent; a circular log has no archive)
    assert ran >= len(EVERY_COMMAND) - 6


def test_run_command_answers_in_mqs_shape(admin):
    status, doc = admin.mqsc("DEFINE QLOCAL(RC.Q1) DESCR('first')")
    assert status == 200
    assert doc == {"commandResponse": [{"completionCode": 0, "reasonCode": 0,
                                        "text": ["HMQ8006I: harbormq queue created."]}],
                   "overallCompletionCode": 0, "overallReasonCode": 0}
    admin.mqsc("DEFINE QLOCAL(RC.Q2)")
    status, doc = admin.mqsc("DISPLAY QLOCAL(RC.*) DESCR")
    assert [r["text"][0] for r in doc["commandResponse"]] == \
        ["HMQ8409I: Display Queue details."] * 2              # one response per object
    assert "QUEUE(RC.Q1)" in doc["commandResponse"][0]["text"][1]
    status, doc = admin.mqsc("DISPLAY QLOCAL(RC.NONE)")
    assert status == 200 and doc["overallCompletionCode"] == 2
    assert doc["overallReasonCode"] == 3008                   # MQRCCF_COMMAND_FAILED
    assert doc["commandResponse"][0]["reasonCode"] == 2085
    status, doc = admin.mqsc("DISPLAY QLOCAL(RC.Q1")
    assert doc["overallCompletionCode"] == 2 and "Syntax error" in \
        doc["commandResponse"][0]["text"][0]


def test_run_command_json_builds_the_command_and_answers_parameters(admin):
    status, doc = admin.json("POST", MQSC, {
        "type": "runCommandJSON", "command": "define", "qualifier": "qlocal",
        "name": "rcj.lower", "parameters": {"maxdepth": 7, "descr": "it's json"}})
    assert status == 200 and doc["overallCompletionCode"] == 0, doc
    status, doc = admin.json("POST", MQSC, {
        "type": "runCommandJSON", "command": "display", "qualifier": "qlocal",
        "name": "rcj.lower", "responseParameters": ["maxdepth", "descr", "curdepth"]})
    assert doc["commandResponse"] == [{
        "completionCode": 0, "reasonCode": 0,
        "parameters": {"queue": "rcj.lower", "type": "QLOCAL", "maxdepth": 7,
                       "descr": "it's json", "curdepth": 0}}]
    status, doc = admin.json("POST", MQSC, {
        "type": "runCommandJSON", "command": "define", "qualifier": "qlocal",
        "name": "rcj.lower", "parameters": {"maxdepth": 9, "replace": True}})
    assert doc["overallCompletionCode"] == 0, doc
    status, doc = admin.json("POST", MQSC, {
        "type": "runCommandJSON", "command": "delete", "qualifier": "qlocal",
        "name": "rcj.none"})
    assert doc["overallCompletionCode"] == 2
    (item,) = doc["commandResponse"]
    assert item["reasonCode"] == 2085 and item["message"][0].startswith("HMQ")


@pytest.mark.parametrize("body, why", [
    ({"type": "runCmd"}, "runCommand"),
    ({"type": "runCommand", "parameters": {}}, "command"),
    ({"type": "runCommandJSON"}, "command"),
    ({"type": "runCommandJSON", "command": "display", "parameters": []}, "parameters"),
    # each part is one keyword: nothing can be spliced into the command
    ({"type": "runCommandJSON", "command": "define", "qualifier": "qlocal", "name": "RJ.X",
      "parameters": {"descr('x') put": "disabled"}}, "not an MQSC keyword"),
    ({"type": "runCommandJSON", "command": "display qlocal(*)"}, "not an MQSC keyword"),
    ({"type": "runCommandJSON", "command": "display", "qualifier": "qlocal", "name": "*",
      "responseParameters": ["curdepth) descr("]}, "not an MQSC keyword"),
    ([1, 2], "not an object"),
])
def test_bad_bodies_are_400(admin, body, why):
    status, doc = admin.json("POST", MQSC, body)
    assert status == 400 and why in doc["error"][0]["message"]


def test_not_json_unknown_qmgr_and_wrong_method(admin):
    status, _h, data = admin.call("POST", MQSC, b"{not json", {"Content-Type": "application/json"})
    assert status == 400 and b"MQWB0002E" in data
    status, doc = admin.json("POST", MQSC.replace("/QW/", "/QX/"),
                             {"type": "runCommand", "parameters": {"command": "PING QMGR"}})
    assert status == 404 and "QX" in doc["error"][0]["message"]
    status, doc = admin.json("GET", MQSC)
    assert status == 405 and doc["error"][0]["msgId"] == "MQWB0405E"


def test_authority_is_checked_per_command_as_for_stomp(web, admin):
    admin.mqsc("DEFINE QLOCAL(AU.OPEN)")
    admin.mqsc("DEFINE QLOCAL(AU.SECRET)")
    bob = web_client(web, "bob", "bobpw")
    status, doc = bob.mqsc("DISPLAY QLOCAL(AU.OPEN)")
    assert status == 403 and doc["error"][0]["reasonCode"] == 2035
    admin.mqsc("SET AUTHREC PROFILE('AU.OPEN') OBJTYPE(QUEUE) PRINCIPAL('bob') AUTHADD(DSP)")
    status, doc = bob.mqsc("DISPLAY QLOCAL(AU.OPEN) CURDEPTH")
    assert status == 200 and doc["overallCompletionCode"] == 0
    # a generic name shows only what bob may display, as MQ's DISPLAY does
    status, doc = bob.mqsc("DISPLAY QLOCAL(AU.*)")
    assert [r["text"][1].split()[0] for r in doc["commandResponse"]] == ["QUEUE(AU.OPEN)"]
    # displaying is not changing, deleting or defining
    for command in ("ALTER QLOCAL(AU.OPEN) DESCR('x')", "DELETE QLOCAL(AU.OPEN)",
                    "DEFINE QLOCAL(AU.NEW)", "ALTER QMGR DESCR('x')"):
        status, doc = bob.mqsc(command)
        assert status == 403, (command, doc)
    assert admin.mqsc("DISPLAY QLOCAL(AU.OPEN)")[1]["overallCompletionCode"] == 0
    assert admin.mqsc("DISPLAY QLOCAL(AU.NEW)")[1]["overallCompletionCode"] == 2
    admin.mqsc("DELETE AUTHREC PROFILE('AU.OPEN') OBJTYPE(QUEUE) PRINCIPAL('bob')")


def test_define_replace_needs_change_and_like_needs_display(web, admin):
    """+crt on the queue manager makes new objects; replacing an existing one
    changes it (+chg on it, as ALTER needs) and LIKE reads another (+dsp)."""
    admin.mqsc("DEFINE QLOCAL(AU.KEEP) MAXDEPTH(50)")
    admin.mqsc("DEFINE QLOCAL(AU.MODEL) MAXDEPTH(7)")
    admin.mqsc("SET AUTHREC OBJTYPE(QMGR) PRINCIPAL('bob') AUTHADD(CRT)")
    try:
        bob = web_client(web, "bob", "bobpw")
        status, doc = bob.mqsc("DEFINE QLOCAL(AU.KEEP) REPLACE MAXDEPTH(0)")
        assert status == 403 and doc["error"][0]["reasonCode"] == 2035, doc
        status, doc = bob.mqsc("DEFINE QLOCAL(AU.COPY) LIKE(AU.MODEL)")
        assert status == 403, doc
        status, doc = bob.mqsc("DEFINE QLOCAL(AU.FRESH) REPLACE MAXDEPTH(5)")    # new: +crt
        assert status == 200 and doc["overallCompletionCode"] == 0, doc
        shown = admin.mqsc("DISPLAY QLOCAL(AU.KEEP) MAXDEPTH")[1]["commandResponse"][0]
        assert "MAXDEPTH(50)" in " ".join(shown["text"])                         # unchanged
        admin.mqsc("SET AUTHREC PROFILE('AU.MODEL') OBJTYPE(QUEUE) PRINCIPAL('bob') "
                   "AUTHADD(DSP)")
        status, doc = bob.mqsc("DEFINE QLOCAL(AU.COPY) LIKE(AU.MODEL)")
        assert status == 200 and doc["overallCompletionCode"] == 0, doc
    finally:
        admin.mqsc("DELETE AUTHREC OBJTYPE(QMGR) PRINCIPAL('bob')")
        admin.mqsc("DELETE AUTHREC PROFILE('AU.MODEL') OBJTYPE(QUEUE) PRINCIPAL('bob')")
