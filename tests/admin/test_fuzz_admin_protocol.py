"""The admin protocol (``admin/protocol.py``) fuzzed with hypothesis against a
running queue manager (``harbormq start --foreground``, a linear log so that
image and recreate run too): lines that are not JSON, JSON that is not an
object, requests of every kind with fields of the wrong type, unknown kinds,
truncated requests, requests nested deeper than any parser goes, and lines
over the 64 MiB limit.

The properties: every request line gets exactly one reply, a JSON object whose
refusal names its message id (HMQnnnnE), on the same connection, which then
serves a good request; a line over the limit gets HMQ8148E and a polite close;
the server never logs a traceback, never hangs (a wall-clock guard on every
reply), and never creates a file outside its queue manager's directories (its
home, working and temporary directories are compared before and after).

MQSC text itself is fuzzed in ``test_fuzz_mqsc.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.admin_fuzz import GUARD_S, AdminConn, FuzzServer

from harbormq.admin.client import call
from harbormq.admin.protocol import MAX_REQUEST_BYTES, AdminProtocol
from harbormq.core.operator_log import OperatorLog
from harbormq.errors import HarbormqError
from harbormq.qmgr.lifecycle import STOP_MODES

REFUSAL = re.compile(r"HMQ\d{4}E: \S")


def check_reply(reply: dict | None, request: bytes) -> None:
    assert reply is not None, f"the connection closed without a reply to {request[:300]!r}"
    assert isinstance(reply.get("ok"), bool), reply
    if reply["ok"]:
        return
    if "output" in reply:                  # an MQSC script ran: its output says what failed
        assert isinstance(reply["output"], str) and reply["errors"] >= 1, reply
        if reply["output"]:
            return
    assert isinstance(reply.get("error"), str) and REFUSAL.match(reply["error"]), \
        f"a refusal without its message id: {reply} for {request[:300]!r}"
    assert not reply["error"].startswith("HMQ8152E"), \
        f"the queue manager failed on {request[:300]!r}: {reply['error']}"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    s = FuzzServer(tmp_path_factory.mktemp("adminfuzz"), "QA").start()
    os.mkfifo(s.files / "fifo")
    (s.files / "dir").mkdir()
    (s.files / "empty.hmqload").write_bytes(b"")
    msg = {"msg_id": "01", "correl_id": "", "priority": 4, "persistent": True, "expiry_ns": 0,
           "put_time_ns": 1, "backout_count": 0, "reply_to": "", "format": "",
           "properties": {}, "body": "aGk="}
    (s.files / "good.hmqload").write_text("\n".join(json.dumps(o) for o in [
        {"format": "harbormq-load", "version": 1, "queue": "FUZZ.Q", "at_lsn": 0}, msg,
        {"end": True, "messages": 1}]) + "\n")
    s.mqsc("DEFINE QLOCAL(FUZZ.Q) DEFPSIST(YES) MAXDEPTH(999999)")
    yield s
    try:
        s.console_clean()
    finally:
        s.stop()


# -- what a client can send --------------------------------------------------------------

any_char = st.characters(exclude_categories=())          # lone surrogates included
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(),
                         st.text(any_char, max_size=20))
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3) |
                           st.dictionaries(st.text(max_size=6), inner, max_size=3),
                           max_leaves=8)
KINDS = ["ping", "status", "mqsc", "load", "log_need", "image", "recreate", "stop", "",
         "PING", "shutdown", "mqsc\x00", "../../etc/passwd"]


def field_values(files: Path):
    paths = [str(files / n) for n in ("fifo", "dir", "empty.hmqload", "good.hmqload", "none")] + \
        ["/dev/null", "/dev/zero", "/", "", "relative.hmqload", "a\x00b", "/proc/self/fd/0"]
    return {
        "cmd": st.sampled_from(KINDS),
        "text": st.sampled_from(["PING QMGR", "DIS QL(FUZZ.*) CURDEPTH", "BOGUS", "",
                                 "DEFINE QLOCAL(FUZZ.Q)", "*\n"]),
        "continue": st.sampled_from([True, False, "yes", 0]),
        "mode": st.sampled_from(["controlled", "immediate", "preemptive", "CONTROLLED",
                                 "later", ""]),
        "type": st.sampled_from(["all", "qmgr", "queue", "QUEUE", "channel", ""]),
        "name": st.sampled_from(["FUZZ.Q", "FUZZ.*", "*", "NOPE", "../x", "[", ""]),
        "dry_run": st.sampled_from([True, False, "no", None]),
        "queue": st.sampled_from(["FUZZ.Q", "NOPE", "..", "", "x" * 100]),
        "path": st.sampled_from(paths),
    }


def is_a_stop(req) -> bool:
    """A request that would really stop the server under test."""
    return isinstance(req, dict) and req.get("cmd") == "stop" and \
        isinstance(req.get("mode", "controlled"), str) and \
        req.get("mode", "controlled") in STOP_MODES


@st.composite
def requests(draw, files: Path):
    """A request object: the right fields with the right, wrong or hostile values."""
    fields = field_values(files)
    req = {}
    keys = draw(st.lists(st.sampled_from(sorted(fields) + ["extra"]), unique=True, max_size=5))
    for key in ["cmd"] + keys:
        strategy = fields.get(key, json_values)
        req[key] = draw(st.one_of(strategy, strategy, json_values))
    if is_a_stop(req):
        req["mode"] = "not-a-mode"
    return req


@st.composite
def request_lines(draw, files: Path) -> bytes:
    """One line a client might send (it may hold newlines of its own: then it is
    several lines, each answered)."""
    kind = draw(st.sampled_from(["request", "request", "json", "bytes", "cut", "special"]))
    if kind == "request":
        return json.dumps(draw(requests(files)), ensure_ascii=draw(st.booleans())).encode(
            "utf-8", "surrogatepass")
    if kind == "json":
        return json.dumps(draw(json_values)).encode()
    if kind == "bytes":
        return draw(st.binary(max_size=80))
    if kind == "cut":
        line = json.dumps(draw(requests(files))).encode()
        return line[:draw(st.integers(0, max(0, len(line) - 1)))]
    return draw(st.sampled_from([b"", b" ", b"\r", b"\x00", b"\xff\xfe", b"[]", b"null",
                                 b'"ping"', b"1", b"[" * 100_000, b'{"cmd":' * 50_000,
                                 b'{"cmd": "ping"} {"cmd": "ping"}', b"9" * 5000,
                                 b'{"cmd": "ping", "cmd": "status"}', b"\xef\xbb\xbf{}"]))


def check_exchange(served: FuzzServer, lines: list[bytes], end: bool) -> None:
    """Send ``lines`` on one connection, then a ping: one reply each, in order."""
    before = served.outside()
    console = served.console_size()
    data = b"".join(line + b"\n" for line in lines)
    with AdminConn(served.sock) as c:
        c.send(data)
        for line in data.split(b"\n")[:-1]:
            check_reply(c.reply(), line)
        if end:
            # a request cut short by the end of the stream is answered too
            c.send(b'{"cmd": "ping"}')
            c.end()
            check_reply(c.reply(), b"ping at the end of the stream")
            assert c.reply() is None
        else:
            c.send(b'{"cmd": "ping"}\n')
            reply = c.reply()
            assert reply is not None and reply["ok"] and "pid" in reply, reply
    served.ping()
    assert served.srv.running
    served.console_clean(console)
    assert served.outside() == before, "files appeared outside the queue manager"


# -- the properties ----------------------------------------------------------------------

@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(st.data(), st.booleans())
def test_any_request_gets_one_clear_reply_and_the_connection_serves_on(served, data, end):
    lines = data.draw(st.lists(request_lines(served.files), min_size=1, max_size=4))
    check_exchange(served, lines, end)


REGRESSIONS = [
    b"[]", b"null", b'"ping"', b"1",                        # JSON, but not an object
    b"[" * 100_000,                                          # deeper than json can parse
    b'{"cmd": "load", "queue": "FUZZ.Q", "path": 5}',       # fields of the wrong type
    b'{"cmd": "load", "queue": ["FUZZ.Q"], "path": "/dev/null"}',
    b'{"cmd": "image", "type": "queue", "name": 5}',
    b'{"cmd": "recreate", "type": "queue", "name": ["FUZZ.Q"], "dry_run": true}',
    b'{"cmd": "recreate", "type": {}, "name": "FUZZ.Q"}',
    b'{"cmd": "stop", "mode": ["controlled"]}',
    b'{"cmd": "mqsc", "text": ["PING QMGR"]}',
    b'{"cmd": ["ping"]}',
    b"\xff\xfe{}",                                           # not UTF-8
]


@pytest.mark.parametrize("line", REGRESSIONS, ids=[r[:40].decode("latin-1")
                                                   for r in REGRESSIONS])
def test_regressions(served, line):
    check_exchange(served, [line], False)


@pytest.mark.parametrize("name", ["fifo", "/dev/zero", "dir", "/dev/null", "empty.hmqload"])
def test_load_of_what_is_not_a_load_file_is_refused_at_once(served, name):
    """A FIFO held the queue manager's loop until something wrote to it, and
    /dev/zero filled its memory: load reads regular files only."""
    path = name if name.startswith("/") else str(served.files / name)
    start = time.monotonic()
    check_exchange(served, [json.dumps({"cmd": "load", "queue": "FUZZ.Q",
                                        "path": path}).encode()], False)
    assert time.monotonic() - start < GUARD_S


def test_a_good_load_still_loads(served):
    reply = served.request({"cmd": "load", "queue": "FUZZ.Q",
                            "path": str(served.files / "good.hmqload")})
    assert reply["ok"] and reply["result"]["loaded"] == 1, reply


def test_a_line_at_the_limit_is_read_and_one_over_is_refused(served):
    """Up to MAX_REQUEST_BYTES a line is read and answered; past it, HMQ8148E and
    the connection is closed politely (the rest is read away, so the client
    sees the reply), and the queue manager serves on."""
    script = "*" * (MAX_REQUEST_BYTES - 64)
    line = json.dumps({"cmd": "mqsc", "text": script}).encode()
    assert len(line) < MAX_REQUEST_BYTES
    console = served.console_size()
    with AdminConn(served.sock) as c:
        c.send(line + b"\n")
        reply = c.reply()
        assert reply["ok"] and "No MQSC commands read." in reply["output"], reply
    for over in (b"x" * (MAX_REQUEST_BYTES + 1), b"{" * (MAX_REQUEST_BYTES + 1) + b"\n"):
        with AdminConn(served.sock) as c:
            c.send(over)
            c.end()
            reply = c.reply()
            assert reply["ok"] is False and reply["error"].startswith("HMQ8148E: "), reply
            assert c.reply() is None
    served.ping()
    served.console_clean(console)


def test_a_failure_inside_a_request_is_answered_and_logged(tmp_path):
    """The last resort: a request that fails in the queue manager (here a status
    that raises) is answered with HMQ8152E, written to the operator log, and
    the connection serves on. The fuzzing above must never see it."""
    oplog = OperatorLog(None)

    def status():
        raise ZeroDivisionError("a defect")
    admin = AdminProtocol(SimpleNamespace(oplog=oplog), None, None, status=status,
                          request_stop=lambda mode: None)

    async def exchange():
        server = await asyncio.start_unix_server(admin.serve, path=str(tmp_path / "s"))
        async with server:
            reader, writer = await asyncio.open_unix_connection(str(tmp_path / "s"))
            writer.write(b'{"cmd": "status"}\n{"cmd": "ping"}\n')
            replies = [json.loads(await reader.readline()) for _ in range(2)]
            writer.close()
            return replies
    failed, ping = asyncio.run(exchange())
    assert failed["ok"] is False and failed["error"].startswith("HMQ8152E: ")
    assert "ZeroDivisionError('a defect')" in failed["error"]
    assert ping["ok"] and ping["pid"] == os.getpid()
    assert [m for m, _text in oplog.entries] == ["HMQ8152E"]


def test_the_client_raises_a_refusal_with_its_own_message_id(served):
    """The CLI printed "HMQ0001E: HMQ8147E: ..." for every refusal."""
    target = SimpleNamespace(name="QA", admin_socket=served.sock)
    for req, msgid in (({"cmd": "image", "type": "queue", "name": "NOPE"}, "HMQ8147E"),
                       ({"cmd": "stop", "mode": "later"}, "HMQ8151E")):
        with pytest.raises(HarbormqError) as info:
            call(target, req)
        assert info.value.msgid == msgid, info.value
        assert str(info.value).startswith(msgid + ": ") and str(info.value).count("HMQ") == 1


def test_a_client_that_goes_away_mid_request_is_forgotten(served):
    console = served.console_size()
    for data in (b"", b'{"cmd": "mq', b'{"cmd": "mqsc", "text": "DIS QL(*)"}\n'):
        with AdminConn(served.sock) as c:
            c.send(data)                # and gone, without reading the reply
    served.ping()
    served.console_clean(console)
