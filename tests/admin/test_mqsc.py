"""MQSC: the parser (malformed input included), the runmqsc-style output, every
command run against an in-process queue manager, and the ``sc`` client."""

from __future__ import annotations

import asyncio
import json
import pwd
import re
import time

import pytest
from click.testing import CliRunner
from support.stomp_helpers import QMServer

from harbormq.admin import commands
from harbormq.admin.commands import Executor, handle_admin_mqsc, run_mqsc
from harbormq.admin.mqsc import (
    Command,
    MqscSyntaxError,
    format_echo,
    format_pairs,
    format_summary,
    generic_match,
    parse,
    parse_command,
    parse_script,
    where_matches,
)
from harbormq.cli.admin import sc, user
from harbormq.core.connections import Connection, new_conn_id
from harbormq.errors import QueueManagerNotRunning
from harbormq.log.records import extent_file_name
from harbormq.security import Security, UserExists, UserStore, os_owner

# -- parser ------------------------------------------------------------------------------


def syntax_error(text: str) -> MqscSyntaxError:
    items = parse_script(text)
    errors = [i for i in items if isinstance(i, MqscSyntaxError)]
    assert errors, f"expected a syntax error in {text!r}, got {items}"
    return errors[0]


def test_parse_keywords_case_and_short_forms():
    cmd = parse_command("def ql(orders) descr('Order intake') maxdepth(100) defpsist(yes)")
    assert (cmd.verb, cmd.objtype, cmd.name) == ("DEFINE", "QLOCAL", "ORDERS")
    assert cmd.attrs == {"DESCR": "Order intake", "MAXDEPTH": "100", "DEFPSIST": "YES"}
    assert parse_command("DIS Q(*)").objtype == "QUEUE"
    assert parse_command("dis qs(q1)").objtype == "QSTATUS"
    assert parse_command("ALT QMGR DEADQ(DLQ)").attrs == {"DEADQ": "DLQ"}
    assert parse_command("ping qmgr").verb == "PING"


def test_quoted_values_keep_case_and_double_quotes_escape():
    cmd = parse_command("DEFINE QLOCAL('mixed.Case') DESCR('it''s   here')")
    assert cmd.name == "mixed.Case"
    assert cmd.attrs["DESCR"] == "it's   here"
    assert parse_command("DEFINE QLOCAL(Q1) DESCR('')").attrs["DESCR"] == ""


def test_continuation_plus_strips_and_minus_keeps_leading_blanks():
    text = ("DEFINE QLOCAL(Q1) +\n"
            "        DESCR('one +\n"
            "      two') -\n"
            "   MAXDEPTH(5)\n")
    cmd = parse_command(text)
    assert cmd.attrs == {"DESCR": "one two", "MAXDEPTH": "5"}
    assert cmd.line == 1 and len(cmd.lines) == 4
    cmd = parse_command("DEFINE QLOCAL(Q1) DESCR('a -\n  b')")
    assert cmd.attrs["DESCR"] == "a   b"


def test_comments_blank_lines_and_line_numbers():
    items = parse_script("* a comment\n\n   * indented comment\nPING QMGR\n\nDIS QMGR\n")
    assert [(c.verb, c.line) for c in items] == [("PING", 4), ("DISPLAY", 6)]


def test_generic_names_and_attribute_selection():
    cmd = parse_command("DISPLAY QLOCAL(Q*) CURDEPTH MAXDEPTH")
    assert cmd.name == "Q*" and cmd.flags == ["CURDEPTH", "MAXDEPTH"]
    assert cmd.requested == ["CURDEPTH", "MAXDEPTH"]
    assert parse_command("DIS QL(*) ALL").flags == ["ALL"]
    assert generic_match("Q*", "Q1") and generic_match("*", "ANY.THING")
    assert not generic_match("Q*", "XQ") and generic_match("Q1", "Q1")
    assert not generic_match("Q1", "Q10")


def test_lists_and_where():
    cmd = parse_command("SET AUTHREC PROFILE('pay.*') OBJTYPE(QUEUE) PRINCIPAL('app') "
                        "AUTHADD(PUT, GET) AUTHRMV(BROWSE)")
    assert cmd.attrs["AUTHADD"] == ["PUT", "GET"] and cmd.attrs["AUTHRMV"] == ["BROWSE"]
    assert cmd.attrs["PROFILE"] == "pay.*" and cmd.attrs["PRINCIPAL"] == "app"
    cmd = parse_command("DIS QL(*) WHERE(CURDEPTH GT 5)")
    assert cmd.where == ("CURDEPTH", "GT", "5")
    assert where_matches(cmd.where, {"CURDEPTH": 6})
    assert not where_matches(cmd.where, {"CURDEPTH": 5})
    assert where_matches(("QUEUE", "LK", "PAY*"), {"QUEUE": "PAY.IN"})
    assert where_matches(("AUTHLIST", "CT", "PUT"), {"AUTHLIST": ["GET", "PUT"]})


def test_unknown_object_type_names_position_and_expected_words():
    err = syntax_error("PING QMGR\n* note\nDISPLAY  FOO(X)")
    assert (err.line, err.column) == (3, 10)
    assert "expected QLOCAL, QUEUE, QSTATUS, CONN, QMSTATUS, QMGR, AUTHREC, LOG, UOW, " \
           "QREMOTE, CHANNEL, CHSTATUS, LISTENER, QALIAS, QMODEL, PROCESS, NAMELIST, " \
           "TOPIC, SUB, SBSTATUS, TPSTATUS, PUBSUB, AUTHINFO, CHLAUTH, USAGE, CFSTATUS, " \
           "CFSTRUCT or GROUP after DISPLAY" in str(err)
    assert "found FOO" in str(err)
    assert err.expected == ("QLOCAL", "QUEUE", "QSTATUS", "CONN", "QMSTATUS", "QMGR",
                            "AUTHREC", "LOG", "UOW", "QREMOTE", "CHANNEL", "CHSTATUS",
                            "LISTENER", "QALIAS", "QMODEL", "PROCESS", "NAMELIST",
                            "TOPIC", "SUB", "SBSTATUS", "TPSTATUS", "PUBSUB", "AUTHINFO",
                            "CHLAUTH", "USAGE", "CFSTATUS", "CFSTRUCT", "GROUP")


def test_unknown_verb():
    err = syntax_error("  FROB QLOCAL(Q1)")
    assert (err.line, err.column) == (1, 3)
    assert "expected a command (DEFINE, ALTER, DELETE, DISPLAY, CLEAR, START, STOP, PING, " \
           "SET, ARCHIVE, RESOLVE, RESET, REFRESH, BACKUP, RECOVER or END), found FROB" \
           in str(err)


def test_missing_object_type_at_end_of_command():
    err = syntax_error("DISPLAY")
    assert (err.line, err.column) == (1, 8)
    assert "found the end of the command" in str(err)


def test_missing_name_parenthesis_and_value():
    err = syntax_error("DEFINE QLOCAL MAXDEPTH(5)")
    assert (err.line, err.column) == (1, 15)
    assert "expected ( and a name after QLOCAL, found MAXDEPTH" in str(err)
    err = syntax_error("DEFINE QLOCAL(Q1) MAXDEPTH(10")
    assert (err.line, err.column) == (1, 30)
    assert "expected ) to close MAXDEPTH(" in str(err)
    err = syntax_error("DEFINE QLOCAL(Q1) MAXDEPTH 10")
    assert (err.line, err.column) == (1, 28)
    assert "expected ( and a value after MAXDEPTH, found 10" in str(err)


def test_unknown_keyword_lists_the_keywords():
    err = syntax_error("DEFINE QLOCAL(Q1) +\n   MAXDEPTH(5) COLOUR(RED)")
    assert (err.line, err.column) == (2, 16)
    assert "expected a keyword of DEFINE QLOCAL" in str(err) and "found COLOUR" in str(err)
    assert "MAXDEPTH" in err.expected and "REPLACE" in err.expected


def test_bad_values_and_conflicts():
    err = syntax_error("DEFINE QLOCAL(Q1) DESCR(two words)")
    assert (err.line, err.column) == (1, 29)
    assert "quote a value that holds blanks" in str(err)
    err = syntax_error("DEFINE QLOCAL(Q1) REPLACE NOREPLACE")
    assert "REPLACE and NOREPLACE exclude each other" in str(err) and err.column == 27
    err = syntax_error("DEFINE QLOCAL(Q1) MAXDEPTH(1) MAXDEPTH(2)")
    assert "MAXDEPTH is given twice" in str(err) and err.column == 31
    err = syntax_error("DELETE QLOCAL(Q1) PURGE(YES)")
    assert "PURGE takes no value" in str(err) and err.column == 24
    err = syntax_error("PING QMGR NOW")
    assert "PING QMGR takes no keywords" in str(err)
    err = syntax_error("DIS QL(*) WHERE(CURDEPTH ABOUT 5)")
    assert "expected an operator" in str(err) and err.column == 26


def test_unclosed_quote_and_dangling_continuation():
    err = syntax_error("DEFINE QLOCAL(Q1) DESCR('never closed)")
    assert (err.line, err.column) == (1, 25)
    assert "quoted string is not closed" in str(err)
    err = syntax_error("PING QMGR\nDEFINE QLOCAL(Q1) +")
    assert err.line == 2 and "expected a continuation line" in str(err)


def test_parse_raises_first_error_and_script_keeps_going():
    with pytest.raises(MqscSyntaxError, match="line 2"):
        parse("PING QMGR\nBOGUS\nPING QMGR\nALSO BAD")
    items = parse_script("PING QMGR\nBOGUS\nPING QMGR\nALSO BAD")
    assert [type(i).__name__ for i in items] == ["Command", "MqscSyntaxError", "Command",
                                                 "MqscSyntaxError"]
    assert len(parse_script("PING QMGR\nEND\nPING QMGR")) == 2   # END stops reading


# -- formatter ---------------------------------------------------------------------------

def test_pairs_two_per_line_in_runmqsc_columns():
    lines = format_pairs([("QUEUE", "Q1"), ("TYPE", "QLOCAL"), ("DESCR", ""),
                          ("BOQNAME", "B" * 40), ("MAXDEPTH", 5)])
    assert lines[0] == "   QUEUE(Q1)" + " " * 31 + "TYPE(QLOCAL)"
    assert lines[0].index("TYPE(") == 43
    assert lines[1] == "   DESCR( )".ljust(43) + "BOQNAME(" + "B" * 40 + ")"
    assert lines[2] == "   MAXDEPTH(5)" and len(lines) == 3
    # an item as wide as its column gets a line of its own
    assert format_pairs([("BOQNAME", "B" * 40), ("MAXDEPTH", 5)]) == [
        "   BOQNAME(" + "B" * 40 + ")", "   MAXDEPTH(5)"]


def test_echo_and_summary():
    assert format_echo(7, ["DEF QL(Q1) +", "  MAXDEPTH(5)"]) == \
        "     7 : DEF QL(Q1) +\n       :   MAXDEPTH(5)"
    assert format_summary(1, 0, 0) == ("One MQSC command read.\nNo commands have a syntax "
                                       "error.\nAll valid MQSC commands were processed.")
    text = format_summary(4, 1, 2, not_run=1)
    assert "4 MQSC commands read." in text and "One command has a syntax error." in text
    assert "2 valid MQSC commands could not be processed." in text
    assert "one more command was not run" in text


# -- executor against a queue manager -----------------------------------------------------

ATTR = re.compile(r"([A-Z]+)\(([^()]*)\)")


def objects(output: str, msgid: str) -> list[dict]:
    """Every object block with header ``msgid`` as {ATTR: value}."""
    out, current = [], None
    for line in output.splitlines():
        if line.startswith(msgid + ":"):
            current = {}
            out.append(current)
        elif current is not None and (line.startswith("   ") or not line):
            for k, v in ATTR.findall(line):
                current.setdefault(k, v.strip())
        else:
            current = None
    return out


@pytest.fixture
def qm(make_qm, open_qm):
    make_qm("QM1", log_type="linear")
    return open_qm("QM1")


def run(qm, text, *, cont=False, security=None, qm_info=None) -> dict:
    security = security or Security.for_config(qm.config)
    return qm._call(run_mqsc(qm.core, text, security=security, continue_on_error=cont,
                             qm_info=qm_info))


def ok(qm, text, **kw) -> str:
    r = run(qm, text, **kw)
    assert r["errors"] == 0, r["output"]
    return r["output"]


def fails(qm, text, msgid, **kw) -> str:
    r = run(qm, text, **kw)
    assert r["errors"] == 1, r["output"]
    assert msgid in r["output"], r["output"]
    return r["output"]


def test_define_display_with_attribute_selection(qm):
    out = ok(qm, "DEFINE QLOCAL(ORDERS) MAXDEPTH(100) DESCR('Order intake') DEFPSIST(YES)\n"
                 "define qlocal(payments)\n")
    assert out.count("HMQ8006I: harbormq queue created.") == 2
    assert "     1 : DEFINE QLOCAL(ORDERS)" in out and "2 MQSC commands read." in out
    assert qm.core.queues["ORDERS"].attrs["MAXDEPTH"] == 100
    assert "PAYMENTS" in qm.core.queues                  # unquoted names are folded
    out = ok(qm, "DISPLAY QLOCAL(ORDERS) MAXDEPTH DESCR")
    [obj] = objects(out, "HMQ8409I")
    assert obj == {"QUEUE": "ORDERS", "TYPE": "QLOCAL", "DESCR": "Order intake",
                   "MAXDEPTH": "100"}
    assert "HMQ8409I: Display Queue details." in out
    out = ok(qm, "DIS QL(ORDERS)")
    assert objects(out, "HMQ8409I") == [{"QUEUE": "ORDERS", "TYPE": "QLOCAL"}]   # MQ's default
    [obj] = objects(ok(qm, "DIS QL(ORDERS) ALL"), "HMQ8409I")
    assert obj["DEFPSIST"] == "YES" and obj["CURDEPTH"] == "0" and obj["IPPROCS"] == "0"
    assert set(obj) >= {"GET", "PUT", "BOTHRESH", "BOQNAME", "INDXTYPE", "MAXMSGL"}


def test_hardenbo_bare_switches_and_value(qm):
    """MQ writes HARDENBO and NOHARDENBO bare; HARDENBO(YES|NO) is the same."""
    ok(qm, "DEFINE QLOCAL(HB) HARDENBO\nDEFINE QLOCAL(NHB)\nDEFINE QLOCAL(V) HARDENBO(YES)")
    assert [qm.core.queues[n].attrs["HARDENBO"] for n in ("HB", "NHB", "V")] == \
        ["YES", "NO", "YES"]
    ok(qm, "ALTER QLOCAL(HB) NOHARDENBO\nALTER QLOCAL(NHB) HARDENBO")
    [hb] = objects(ok(qm, "DIS QL(HB) HARDENBO"), "HMQ8409I")
    [nhb] = objects(ok(qm, "DIS QL(NHB) HARDENBO"), "HMQ8409I")
    assert (hb["HARDENBO"], nhb["HARDENBO"]) == ("NO", "YES")
    fails(qm, "ALTER QLOCAL(HB) HARDENBO NOHARDENBO", "exclude each other")
    fails(qm, "ALTER QLOCAL(HB) HARDENBO(MAYBE)", "HARDENBO")
    assert qm.core.queues["HB"].attrs["HARDENBO"] == "NO"


def test_display_generic_names_and_where(qm):
    ok(qm, "DEF QL(Q1)\nDEF QL(Q2)\nDEF QL(R1)")
    qm.put("Q2", b"x")
    out = ok(qm, "DISPLAY QLOCAL(Q*) CURDEPTH")
    assert [(o["QUEUE"], o["CURDEPTH"]) for o in objects(out, "HMQ8409I")] == [
        ("Q1", "0"), ("Q2", "1")]
    names = [o["QUEUE"] for o in objects(ok(qm, "DIS QUEUE(*)"), "HMQ8409I")]
    assert names == sorted(names) and {"Q1", "R1", "SYSTEM.DEAD.LETTER.QUEUE"} <= set(names)
    out = ok(qm, "DIS QL(*) WHERE(CURDEPTH GT 0)")
    assert [(o["QUEUE"], o["CURDEPTH"]) for o in objects(out, "HMQ8409I")] == [("Q2", "1")]
    fails(qm, "DIS QL(NOPE*)", "HMQ8147E")
    fails(qm, "DIS QL(NOPE)", "object NOPE not found")


def test_define_noreplace_replace_and_like(qm):
    ok(qm, "DEFINE QLOCAL(Q1) MAXDEPTH(10) DESCR('first')")
    out = fails(qm, "DEFINE QLOCAL(Q1) MAXDEPTH(20)", "HMQ8150E")
    assert "already exists" in out and "REPLACE" in out
    fails(qm, "DEFINE QLOCAL(Q1) NOREPLACE", "HMQ8150E")
    assert qm.core.queues["Q1"].attrs["MAXDEPTH"] == 10
    ok(qm, "DEFINE QLOCAL(Q2) LIKE(Q1) BOTHRESH(3)")
    attrs = qm.core.queues["Q2"].attrs
    assert (attrs["MAXDEPTH"], attrs["DESCR"], attrs["BOTHRESH"]) == (10, "first", 3)
    out = ok(qm, "DEFINE QLOCAL(Q1) REPLACE MAXDEPTH(20)")
    assert "REPLACE" in out
    attrs = qm.core.queues["Q1"].attrs
    assert (attrs["MAXDEPTH"], attrs["DESCR"]) == (20, "")   # not given: the default
    fails(qm, "DEFINE QLOCAL(Q3) LIKE(NOPE)", "HMQ8147E")
    assert "Q3" not in qm.core.queues
    fails(qm, "DEFINE QLOCAL(Q4) MAXDEPTH(LOTS)", "is not a number")


def test_alter_delete_clear(qm):
    ok(qm, "DEF QL(Q1)")
    out = ok(qm, "ALTER QLOCAL(Q1) MAXDEPTH(7) PUT(DISABLED)")
    assert "HMQ8008I: harbormq queue changed." in out
    assert qm.core.queues["Q1"].attrs["PUT"] == "DISABLED"
    fails(qm, "ALTER QLOCAL(NOPE) MAXDEPTH(7)", "HMQ8147E")
    fails(qm, "ALTER QLOCAL(Q1) DEFPRTY(12)", "out of range")
    ok(qm, "ALTER QLOCAL(Q1) PUT(ENABLED)")
    for i in range(3):
        qm.put("Q1", f"m{i}".encode())
    out = fails(qm, "DELETE QLOCAL(Q1)", "PURGE")
    assert "Q1" in qm.core.queues
    out = ok(qm, "CLEAR QLOCAL(Q1)")
    assert "HMQ8022I: harbormq queue cleared (3 messages removed)." in out
    assert qm.core.queues["Q1"].curdepth == 0
    qm.put("Q1", b"again")
    fails(qm, "DELETE QLOCAL(Q1) NOPURGE", "PURGE")
    out = ok(qm, "DELETE QLOCAL(Q1) PURGE")
    assert "HMQ8007I: harbormq queue deleted." in out and "Q1" not in qm.core.queues
    fails(qm, "CLEAR QLOCAL(Q1)", "HMQ8147E")


def test_qstatus_queue_values(qm, monkeypatch):
    ok(qm, "DEF QL(Q1) DEFPSIST(YES)")
    out = ok(qm, "DIS QSTATUS(Q1)")
    [obj] = objects(out, "HMQ8450I")
    assert obj == {"QUEUE": "Q1", "TYPE": "QUEUE", "CURDEPTH": "0"}
    qm.put("Q1", b"a")
    qm.put("Q1", b"b")
    uow = qm.begin("test")
    uow.put("Q1", b"uncommitted")
    [obj] = objects(ok(qm, "DIS QS(Q1) ALL"), "HMQ8450I")
    assert obj["CURDEPTH"] == "3" and obj["UNCOM"] == "1"
    assert obj["LPUTDATE"] == time.strftime("%Y-%m-%d") and re.fullmatch(
        r"\d\d\.\d\d\.\d\d", obj["LPUTTIME"])
    assert obj["LGETDATE"] == "" and obj["MSGAGE"] == "0"
    assert uow.get("Q1") is not None           # a get under the same unit of work
    [obj] = objects(ok(qm, "DIS QS(Q1) UNCOM CURDEPTH LGETDATE"), "HMQ8450I")
    assert obj == {"QUEUE": "Q1", "TYPE": "QUEUE", "CURDEPTH": "2", "UNCOM": "2",
                   "LGETDATE": time.strftime("%Y-%m-%d")}
    uow.commit()
    [obj] = objects(ok(qm, "DIS QS(Q1) UNCOM CURDEPTH"), "HMQ8450I")
    assert (obj["CURDEPTH"], obj["UNCOM"]) == ("2", "NO")
    real = time.time_ns
    monkeypatch.setattr(commands, "_now_ns", lambda: real() + 7_000_000_000)
    [obj] = objects(ok(qm, "DIS QS(Q1) MSGAGE"), "HMQ8450I")
    assert 7 <= int(obj["MSGAGE"]) <= 8


def test_msgage_is_the_oldest_message_across_priorities(qm):
    ok(qm, "DEF QL(Q1)")
    first = qm.put("Q1", b"old, low priority", priority=0)
    time.sleep(0.01)
    qm.put("Q1", b"new, high priority", priority=9)
    q = qm.core.queues["Q1"]
    ex = Executor(qm.core, None)
    assert qm._call_sync(ex.oldest_message_ns, q) == first.put_time_ns
    assert qm.browse("Q1", limit=1)[0].priority == 9      # not simply the head


def test_qstatus_handles_and_procs(qm):
    ok(qm, "DEF QL(Q1)\nDEF QL(Q2)")
    conn = Connection(new_conn_id(), "stomp", peer="127.0.0.1:40001", user="alice",
                      app="orders-app")
    conn.open("Q1", "input")
    conn.open("Q1", "output")
    conn.open("Q2", "browse")
    qm._call_sync(qm.core.connections.add, conn)
    others = [c for c in qm.core.connections if c is not conn]   # the API's own
    ip0 = sum(h.input for c in others for h in c.handles.values() if h.queue == "Q1")
    op0 = sum(h.output for c in others for h in c.handles.values() if h.queue == "Q1")
    [obj] = objects(ok(qm, "DIS QS(Q1) IPPROCS OPPROCS"), "HMQ8450I")
    assert (obj["IPPROCS"], obj["OPPROCS"]) == (str(ip0 + 1), str(op0 + 1))
    [obj] = objects(ok(qm, "DIS QL(Q1) IPPROCS OPPROCS"), "HMQ8409I")
    assert (obj["IPPROCS"], obj["OPPROCS"]) == (str(ip0 + 1), str(op0 + 1))
    handles = [h for h in objects(ok(qm, "DIS QS(Q*) TYPE(HANDLE)"), "HMQ8450I")
               if h["CONN"] == conn.conn_id]
    assert len(handles) == 3
    assert {(h["QUEUE"], h["INPUT"], h["OUTPUT"], h["BROWSE"]) for h in handles} == {
        ("Q1", "SHARED", "NO", "NO"), ("Q1", "NO", "YES", "NO"), ("Q2", "NO", "NO", "YES")}
    assert all(h["CONN"] == conn.conn_id and h["USERID"] == "alice" and
               h["APPLTAG"] == "orders-app" and h["CONNAME"] == "127.0.0.1:40001"
               for h in handles)
    qm._call_sync(qm.core.connections.remove, conn)
    ok(qm, "DEF QL(UNUSED)")
    assert "HMQ8420I: Queue status not found." in ok(qm, "DIS QS(UNUSED) TYPE(HANDLE)")
    fails(qm, "DIS QS(Q1) TYPE(CHANNEL)", "TYPE(CHANNEL) is not valid")


def test_display_conn_finds_the_unit_of_work_pinning_the_log(qm):
    ok(qm, "DEF QL(Q1) DEFPSIST(YES) MAXDEPTH(100000)")
    for _ in range(300):                     # past the first 256 KiB extent
        qm.put("Q1", b"x" * 1024)
    uow = qm.begin("stomp")
    uow.put("Q1", b"in flight")
    first = uow.uow.first_lsn
    extent = extent_file_name(qm.core.log.extent_of(first).number)
    assert extent != "S0000000.LOG"
    for _ in range(300):                     # the log moves on past the unit of work
        qm.put("Q1", b"y" * 1024)
    qm.checkpoint()
    stopped = []
    conn = Connection(new_conn_id(), "stomp", peer="127.0.0.1:40002", user="alice",
                      app="billing", listener="STOMP.61613", uows=lambda: [uow.uow],
                      stop=stopped.append)
    conn.open("Q1", "output")
    idle = Connection(new_conn_id(), "api", user="owner", app="python")
    for c in (conn, idle):
        qm._call_sync(qm.core.connections.add, c)

    out = ok(qm, "DIS CONN(*)")
    listed = {o["CONN"] for o in objects(out, "HMQ8276I")}
    assert listed == {c.conn_id for c in qm.core.connections} >= {conn.conn_id, idle.conn_id}
    [obj] = objects(ok(qm, f"DIS CONN({conn.conn_id}) ALL"), "HMQ8276I")
    assert obj["CONNAME"] == "127.0.0.1:40002" and obj["USERID"] == "alice"
    assert obj["APPLTAG"] == "billing" and obj["APPLTYPE"] == "STOMP"
    assert obj["CHANNEL"] == "STOMP.61613"
    assert obj["UOWSTATE"] == "ACTIVE" and obj["UOWID"] == str(uow.id)
    assert obj["UOWLOG"] == extent and obj["QMURID"] == str(first)
    assert obj["UOWSTDA"] == time.strftime("%Y-%m-%d") and obj["UOWLOGDA"] == obj["UOWSTDA"]
    assert re.fullmatch(r"\d\d\.\d\d\.\d\d", obj["UOWSTTI"])
    [obj] = objects(ok(qm, f"DIS CONN({idle.conn_id}) UOWSTATE UOWLOG"), "HMQ8276I")
    assert obj == {"CONN": idle.conn_id, "TYPE": "CONN", "UOWSTATE": "NONE", "UOWLOG": ""}

    out = ok(qm, f"DIS CONN({conn.conn_id}) TYPE(HANDLE)")
    assert "OBJNAME(Q1)" in out and "OPENOPTS(MQOO_OUTPUT)" in out and "HSTATE(ACTIVE)" in out
    # the restart point is held by that unit of work: QMSTATUS names its extent
    [st] = objects(ok(qm, "DIS QMSTATUS RECLOG RECLSN"), "HMQ8705I")
    assert st["RECLOG"] == extent and int(st["RECLSN"]) == first
    [found] = objects(ok(qm, f"DIS CONN(*) WHERE(UOWLOG EQ {extent})"), "HMQ8276I")
    assert found["CONN"] == conn.conn_id

    out = ok(qm, f"STOP CONN({conn.conn_id.lower()})")
    assert "HMQ8123I" in out and len(stopped) == 1 and "STOP CONN" in stopped[0]
    fails(qm, "STOP CONN(ABCDEF0123456789)", "not found")
    fails(qm, f"STOP CONN({idle.conn_id})", "no stop callback")
    fails(qm, "DIS CONN(ABCDEF0123456789)", "not found")
    uow.backout()


def test_stop_conn_awaits_an_async_stop(qm):
    calls = []

    async def stop(reason):
        await asyncio.sleep(0)
        calls.append(reason)
    conn = Connection(new_conn_id(), "stomp", stop=stop)
    qm._call_sync(qm.core.connections.add, conn)
    ok(qm, f"STOP CONN({conn.conn_id})")
    assert len(calls) == 1


def expected_mb(n_extents: int, pages: int) -> str:
    return commands.megabytes(n_extents * pages * 4096)


def test_qmstatus_log_attributes_linear(qm):
    ok(qm, "DEF QL(Q1) DEFPSIST(YES) MAXDEPTH(100000)")
    for _ in range(500):
        qm.put("Q1", b"z" * 1024)
    qm.checkpoint()
    out = ok(qm, "DISPLAY QMSTATUS", qm_info={"started_ns": time.time_ns()})
    [obj] = objects(out, "HMQ8705I")
    log = qm.core.log
    st = log.state
    chain = log.chain()
    rec = log.extent_of(st.restart_lsn)
    media = log.extent_of(st.media_lsn)
    assert obj["QMNAME"] == "QM1" and obj["STATUS"] == "RUNNING"
    assert obj["CONNS"] == str(len(qm.core.connections))
    assert obj["STARTDA"] == time.strftime("%Y-%m-%d")
    assert obj["LOGTYPE"] == "LINEAR" and obj["LOGEXTSZ"] == "256"
    assert obj["CURRLOG"] == extent_file_name(st.active.number) != "S0000000.LOG"
    assert obj["RECLOG"] == extent_file_name(rec.number)
    n_rec = sum(1 for e in chain if e.first_lsn >= rec.first_lsn)
    assert obj["RECSZ"] == expected_mb(n_rec, 64)
    assert obj["LOGINUSE"] == str(round(100 * n_rec / st.primary))
    assert obj["MEDIALOG"] == extent_file_name(media.number) == "S0000000.LOG"
    assert obj["MEDIASZ"] == expected_mb(len(chain), 64)
    assert obj["REUSESZ"] == "0"
    assert int(obj["CURRLSN"]) == log.end_lsn and int(obj["RECLSN"]) == st.restart_lsn
    [only] = objects(ok(qm, "DIS QMSTATUS CURRLOG"), "HMQ8705I")
    assert only == {"QMNAME": "QM1", "CURRLOG": obj["CURRLOG"]}
    [logs] = objects(ok(qm, "DIS QMSTATUS LOG"), "HMQ8705I")
    assert "MEDIASZ" in logs and "STATUS" not in logs


def test_qmstatus_log_attributes_circular(make_qm, open_qm):
    make_qm("QMC", log_type="circular", log_primary=3, log_secondary=2)
    qm = open_qm("QMC")
    ok(qm, "DEF QL(Q1) DEFPSIST(YES) MAXDEPTH(100000)")
    for _ in range(600):
        qm.put("Q1", b"c" * 1024)
        qm.get("Q1")
    qm.checkpoint()
    [obj] = objects(ok(qm, "DIS QMSTATUS ALL"), "HMQ8705I")
    st = qm.core.log.state
    free = sum(1 for e in st.extents if e.state == "free")
    assert free >= 1
    assert obj["LOGTYPE"] == "CIRCULAR"
    assert obj["REUSESZ"] == expected_mb(free, 64)
    assert obj["CURRLOG"] == extent_file_name(st.active.number)
    rec = qm.core.log.extent_of(st.restart_lsn)
    n_rec = sum(1 for e in qm.core.log.chain() if e.first_lsn >= rec.first_lsn)
    assert obj["RECLOG"] == extent_file_name(rec.number)
    assert obj["LOGINUSE"] == str(round(100 * n_rec / 3))
    assert obj["MEDIALOG"] == "" and obj["MEDIASZ"] == ""


def test_qmgr_display_alter_ping(qm):
    [obj] = objects(ok(qm, "DISPLAY QMGR", qm_info={"connauth": "optional"}), "HMQ8408I")
    assert obj["QMNAME"] == "QM1" and obj["DEADQ"] == "SYSTEM.DEAD.LETTER.QUEUE"
    assert obj["CONNAUTH"] == "SYSTEM.DEFAULT.AUTHINFO.IDPWOS"   # the AUTHINFO it names
    out = ok(qm, "DEF QL(MY.DLQ)\nALTER QMGR DEADQ(MY.DLQ) DESCR('test qmgr')")
    assert "HMQ8005I" in out
    [obj] = objects(ok(qm, "DIS QMGR DEADQ"), "HMQ8408I")
    assert obj == {"QMNAME": "QM1", "DEADQ": "MY.DLQ"}
    fails(qm, "ALTER QMGR DEADQ(NOWHERE)", "HMQ8147E")
    assert "HMQ8415I: Ping harbormq queue manager command complete." in ok(qm, "PING QMGR")


def test_authrec_set_display_delete(qm):
    security = Security.for_config(qm.config)
    out = ok(qm, "SET AUTHREC PROFILE('PAY.*') OBJTYPE(QUEUE) PRINCIPAL('app') "
                 "AUTHADD(PUT,GET,BROWSE)\n"
                 "SET AUTHREC PROFILE(PAY.*) OBJTYPE(QUEUE) PRINCIPAL('app') AUTHRMV(BROWSE)\n"
                 "SET AUTHREC OBJTYPE(QMGR) GROUP('apps') AUTHADD(CONNECT)",
             security=security)
    assert out.count("HMQ8862I") == 3
    assert security.authorities.check("app", [], "QUEUE", "PAY.IN", "PUT")
    assert not security.authorities.check("app", [], "QUEUE", "PAY.IN", "BROWSE")
    assert security.authorities.check("x", ["apps"], "QMGR", "QM1", "CONNECT")
    recs = objects(ok(qm, "DISPLAY AUTHREC", security=security), "HMQ8864I")
    assert {(r["PROFILE"], r["ENTITY"], r["ENTTYPE"], r["OBJTYPE"], r["AUTHLIST"])
            for r in recs} == {("PAY.*", "app", "PRINCIPAL", "QUEUE", "GET,PUT"),
                               ("QM1", "apps", "GROUP", "QMGR", "CONNECT")}
    recs = objects(ok(qm, "DIS AUTHREC PRINCIPAL('app')", security=security), "HMQ8864I")
    assert [r["PROFILE"] for r in recs] == ["PAY.*"]
    fails(qm, "SET AUTHREC PROFILE(Q1) PRINCIPAL('app') AUTHADD(PUT)", "needs OBJTYPE",
          security=security)
    fails(qm, "SET AUTHREC PROFILE(Q1) OBJTYPE(QUEUE) PRINCIPAL('a') AUTHADD(FLY)",
          "unknown authority", security=security)
    fails(qm, "SET AUTHREC PROFILE(Q1) OBJTYPE(QUEUE) PRINCIPAL('a') GROUP('g') "
              "AUTHADD(PUT)", "exactly one of PRINCIPAL and GROUP", security=security)
    out = ok(qm, "DELETE AUTHREC PROFILE('PAY.*') OBJTYPE(QUEUE) PRINCIPAL('app')",
             security=security)
    assert "HMQ8863I" in out
    assert not security.authorities.check("app", [], "QUEUE", "PAY.IN", "PUT")
    fails(qm, "DELETE AUTHREC PROFILE('PAY.*') OBJTYPE(QUEUE) PRINCIPAL('app')",
          "no authority record", security=security)
    out = ok(qm, "DIS AUTHREC PROFILE('PAY.*')", security=security)
    assert "HMQ8865I: No matching authority records." in out
    # the records are on disk for the server's next start
    again = Security.for_config(qm.config)
    assert again.authorities.check("x", ["apps"], "QMGR", "QM1", "CONNECT")


def test_stops_at_first_error_unless_continue(qm):
    script = "DEFINE QLOCAL(A)\nDEFINE QLOCAL(A)\nDEFINE QLOCAL(B)\nDEFINE QLOCAL(C)\n"
    r = run(qm, script)
    assert r["errors"] == 1 and r["stopped_early"]
    assert "B" not in qm.core.queues
    assert "2 MQSC commands read." in r["output"]
    assert "2 more commands were not run" in r["output"]
    r = run(qm, script.replace("(A)", "(A2)", 1).replace("(B)", "(B2)")
            .replace("(C)", "(C2)"), cont=True)   # A2 new, then A exists, then B2, C2
    assert r["errors"] == 1 and not r["stopped_early"]
    assert {"A2", "B2", "C2"} <= set(qm.core.queues)
    assert "4 MQSC commands read." in r["output"]
    assert "One valid MQSC command could not be processed." in r["output"]


def test_syntax_error_in_a_script_stops_it_and_shows_the_place(qm):
    r = run(qm, "DEF QL(S1)\nDEF QL(S2) MAXDEPTH(5\nDEF QL(S3)\n")
    assert r["errors"] == 1 and r["stopped_early"] and "S3" not in qm.core.queues
    out = r["output"]
    assert "HMQ8405E: Syntax error at line 2, column 22" in out
    assert "   DEF QL(S2) MAXDEPTH(5\n" + " " * 24 + "^" in out
    assert "One command has a syntax error." in out
    r = run(qm, "BAD ONE\nDEF QL(S4)\nALSO BAD\n", cont=True)
    assert r["errors"] == 2 and "S4" in qm.core.queues
    assert "2 commands have a syntax error." in r["output"]


def test_end_and_empty_scripts(qm):
    r = run(qm, "DEF QL(E1)\nEND\nDEF QL(E2)\n")
    assert r["errors"] == 0 and "E2" not in qm.core.queues
    assert "One MQSC command read." in r["output"]
    assert "No MQSC commands read." in run(qm, "* only a comment\n")["output"]


def test_handle_admin_mqsc(qm):
    security = Security.for_config(qm.config)
    reply = qm._call(handle_admin_mqsc(qm.core, {"cmd": "mqsc", "text": "PING QMGR"},
                                       security))
    assert reply["ok"] and reply["errors"] == 0 and "HMQ8415I" in reply["output"]
    reply = qm._call(handle_admin_mqsc(qm.core, {"cmd": "mqsc", "text": "DIS QL(NONE)\n"
                                                 "PING QMGR", "continue": True}, security))
    assert not reply["ok"] and reply["errors"] == 1 and "HMQ8415I" in reply["output"]
    json.dumps(reply)
    reply = qm._call(handle_admin_mqsc(qm.core, {"cmd": "mqsc"}, security))
    assert not reply["ok"] and "text" in reply["error"]


# -- the sc client -----------------------------------------------------------------------

def test_sc_says_clearly_when_the_queue_manager_is_not_running(make_qm, home):
    make_qm("QM1")
    result = CliRunner().invoke(sc, ["QM1", "-c", "PING QMGR"])
    assert result.exit_code == 1
    exc = result.exception
    assert isinstance(exc, QueueManagerNotRunning)
    assert "queue manager QM1 is not running" in str(exc)
    assert "harbormq start QM1" in str(exc)


@pytest.fixture
def admin_socket(qm):
    """The admin socket protocol of the server, served on the queue manager's loop
    with handle_admin_mqsc (what admin/protocol.py does for {"cmd": "mqsc"})."""
    security = Security.for_config(qm.config)
    requests = []

    async def serve(reader, writer):
        line = await reader.readline()
        req = json.loads(line)
        requests.append(req)
        reply = await handle_admin_mqsc(qm.core, req, security)
        writer.write(json.dumps(reply).encode() + b"\n")
        await writer.drain()
        writer.close()

    server = qm._call(asyncio.start_unix_server(serve, path=str(qm.config.admin_socket)))
    yield requests

    async def close() -> None:
        # on the loop's own thread: asyncio's Server is not thread-safe, and a
        # close from this thread raced the loop ending the last connection
        # (TypeError in Server._wakeup, seen once in CI)
        server.close()
        await server.wait_closed()
    qm._call(close())


def test_sc_runs_stdin_and_dash_c(qm, admin_socket):
    runner = CliRunner()
    result = runner.invoke(sc, ["QM1"], input="DEFINE QLOCAL(VIA.SC)\nDIS QL(VIA.SC) "
                                              "MAXDEPTH\n")
    assert result.exit_code == 0, result.output
    assert "HMQ8006I" in result.output and "MAXDEPTH(5000)" in result.output
    assert admin_socket[-1]["cmd"] == "mqsc" and admin_socket[-1]["continue"] is False
    result = runner.invoke(sc, ["QM1", "-c", "DEFINE QLOCAL(VIA.SC)\nPING QMGR"])
    assert result.exit_code == 1 and "HMQ8150E" in result.output
    assert "HMQ8415I" not in result.output
    result = runner.invoke(sc, ["QM1", "--continue", "-c", "DEFINE QLOCAL(VIA.SC)\nPING QMGR"])
    assert result.exit_code == 1 and "HMQ8415I" in result.output
    assert admin_socket[-1]["continue"] is True


# -- the user commands -----------------------------------------------------------------------

def test_user_add_and_delete(make_qm, home):
    make_qm("QM1")
    runner = CliRunner()
    result = runner.invoke(user, ["add", "QM1", "alice", "--group", "apps", "-g", "ops"],
                           input="pa ss\n")
    assert result.exit_code == 0, result.output
    assert "user alice added" in result.output
    store = UserStore(home / "qmgrs" / "QM1" / "users.json")
    assert store.verify("alice", "pa ss") and store.groups_of("alice") == ["apps", "ops"]
    result = runner.invoke(user, ["add", "QM1", "alice"], input="x\n")
    assert result.exit_code == 1 and isinstance(result.exception, UserExists)
    result = runner.invoke(user, ["add", "QM1", "bob"], input="\n")
    assert result.exit_code == 1 and "must not be empty" in str(result.exception)
    result = runner.invoke(user, ["list", "QM1"])
    assert result.output == "alice\tapps,ops\n"
    result = runner.invoke(user, ["delete", "QM1", "alice"])
    assert result.exit_code == 0 and not store.exists("alice")


def test_command_objects_are_plain_data():
    cmd = Command("DISPLAY", "QLOCAL", "Q1", flags=["ALL", "CURDEPTH"])
    assert cmd.requested == ["CURDEPTH"]


def test_authrec_for_an_unknown_principal_warns_and_suggests_the_quoted_name(qm):
    security = Security.for_config(qm.config)
    security.users.add("alice", "secret-1")
    out = ok(qm, "SET AUTHREC PROFILE(Q1) OBJTYPE(QUEUE) PRINCIPAL(alice) AUTHADD(PUT)",
             security=security)
    assert "HMQ8866W" in out and "PRINCIPAL('alice')" in out
    assert not security.authorities.check("alice", [], "QUEUE", "Q1", "PUT")
    out = ok(qm, "SET AUTHREC PROFILE(Q1) OBJTYPE(QUEUE) PRINCIPAL('alice') AUTHADD(PUT)",
             security=security)
    assert "HMQ8866W" not in out
    assert security.authorities.check("alice", [], "QUEUE", "Q1", "PUT")


def test_authrec_for_an_os_user_does_not_warn(qm):
    """An OS user's anonymous loopback connections act as that user, so a
    record naming one applies without any harbormq user of that name."""
    security = Security.for_config(qm.config)
    os_user = next(e.pw_name for e in pwd.getpwall() if e.pw_name != os_owner())
    assert not security.users.exists(os_user)
    out = ok(qm, f"SET AUTHREC PROFILE(Q1) OBJTYPE(QUEUE) PRINCIPAL('{os_user}') AUTHADD(GET)",
             security=security)
    assert "HMQ8862I" in out and "HMQ8866W" not in out, out
    out = ok(qm, "SET AUTHREC PROFILE(Q1) OBJTYPE(QUEUE) PRINCIPAL('no-such-user.x') "
             "AUTHADD(GET)", security=security)
    assert "HMQ8866W" in out and "neither a harbormq user nor an OS user" in out, out


def test_mqsc_scripts_of_any_size_and_a_clear_error_past_the_limit(tmp_path):
    srv = QMServer(tmp_path / "hmq", "QS").create()
    srv.start()
    try:
        script = "\n".join(f"DEFINE QLOCAL(BULK.{i:05d}) DESCR('{'x' * 40}')"
                           for i in range(2500))
        assert len(script) > 64 * 1024
        srv.sc(script)
        assert "BULK.02499" in srv.sc("DISPLAY QLOCAL(BULK.02499)")
        from types import SimpleNamespace

        from harbormq.admin.client import request
        target = SimpleNamespace(name="QS", admin_socket=srv.qm_dir / "admin.sock")
        reply = request(target, {"cmd": "mqsc", "text": "*" * (65 << 20)}, timeout=60)
        assert reply["ok"] is False and "HMQ8148E" in reply["error"]
        assert "QS" in srv.sc("DISPLAY QMGR")      # and the queue manager serves on
    finally:
        srv.stop()
