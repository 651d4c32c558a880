"""What the listener refuses before any feature acts, with MQ's error body:
no credentials (401), no authority (403), no CSRF header (403), a body of
100 MB (413, refused from its Content-Length before it is read), a request
dribbled a byte at a time (408) while other requests are served meanwhile."""

from __future__ import annotations

import json
import select
import socket
import threading
import time

from support.web_helpers import CSRF, WebClient, raw_socket, web_client

MSG = "/ibmmq/rest/v2/messaging/qmgr/QW/queue/{}/message"
MQSC = "/ibmmq/rest/v2/admin/action/qmgr/QW/mqsc"


def error_of(body: bytes) -> dict:
    """The one error of MQ's error body, its fields checked."""
    doc = json.loads(body)
    (err,) = doc["error"]
    assert set(err) == {"msgId", "action", "completionCode", "reasonCode", "type", "message",
                        "explanation"}
    assert err["msgId"].startswith("MQWB") and err["completionCode"] == 2
    assert err["type"] == "rest" and err["message"].startswith(err["msgId"] + ": ")
    return err


def depth(admin: WebClient, queue: str) -> int:
    status, doc = admin.json("POST", MQSC, {
        "type": "runCommandJSON", "command": "display", "qualifier": "qlocal", "name": queue,
        "responseParameters": ["curdepth"]})
    assert status == 200, doc
    return doc["commandResponse"][0]["parameters"]["curdepth"]


def test_wrong_password_is_401_with_a_basic_challenge(web):
    status, headers, body = web_client(web, "alice", "wrong").call(
        "GET", MSG.format("SYSTEM.DEFAULT.LOCAL.QUEUE"))
    assert status == 401
    assert headers["www-authenticate"] == 'Basic realm="harbormq QW"'
    assert error_of(body)["reasonCode"] == 2035


def test_a_browser_page_must_log_in(web):
    # an Origin: a page of some web site; the OS user's anonymous access is not its
    status, headers, body = web_client(web).call(
        "GET", MSG.format("SYSTEM.DEFAULT.LOCAL.QUEUE"), headers={"Origin": "http://evil"})
    assert status == 401 and "Origin" in error_of(body)["message"]
    # a name rebound to 127.0.0.1 by another site: refused too
    status, _h, body = web_client(web).call(
        "GET", MSG.format("SYSTEM.DEFAULT.LOCAL.QUEUE"), headers={"Host": "evil.example:80"})
    assert status == 401 and "Host" in error_of(body)["message"]


def test_anonymous_loopback_request_is_the_os_user(web, admin):
    # the test runs as the queue manager's owner: anonymous on loopback, it is the owner
    admin.mqsc("DEFINE QLOCAL(LIM.ANON)")
    status, _h, body = web_client(web).call("POST", MSG.format("LIM.ANON"), "x")
    assert status == 201, body
    assert depth(admin, "LIM.ANON") == 1


def test_no_authority_is_403(web, admin):
    admin.mqsc("DEFINE QLOCAL(LIM.AUTH)")
    alice = web_client(web, "alice", "alicepw")
    for method in ("POST", "DELETE", "GET"):
        status, _h, body = alice.call(method, MSG.format("LIM.AUTH"),
                                      "x" if method == "POST" else None)
        err = error_of(body)
        assert status == 403 and err["reasonCode"] == 2035 and "alice" in err["message"]
    assert depth(admin, "LIM.AUTH") == 0


def test_missing_csrf_header_is_403_and_changes_nothing(web, admin):
    admin.mqsc("DEFINE QLOCAL(LIM.CSRF)")
    admin.call("POST", MSG.format("LIM.CSRF"), "kept")
    clear = {"type": "runCommand", "parameters": {"command": "CLEAR QLOCAL(LIM.CSRF)"}}
    for method, path, body in (("POST", MSG.format("LIM.CSRF"), "more"),
                               ("DELETE", MSG.format("LIM.CSRF"), None),
                               ("POST", MQSC, clear)):
        status, _h, data = admin.call(method, path, body, csrf=False)
        assert status == 403 and error_of(data)["msgId"] == "MQWB0119E"
    assert depth(admin, "LIM.CSRF") == 1
    # a browse changes nothing and needs no header
    assert admin.call("GET", MSG.format("LIM.CSRF"), csrf=False)[0] == 200




def _read_answer(s: socket.socket) -> bytes:
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    return data


def test_100_mb_body_is_refused_before_it_is_read(web, admin):
    admin.mqsc("DEFINE QLOCAL(LIM.BIG)")
    s = raw_socket(web)
    head = (f"POST {MSG.format('LIM.BIG')} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Authorization: Basic cm9vdDpyb290cHc=\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {100 << 20}\r\n"
            "ibm-mq-rest-csrf-token: x\r\n\r\n").encode()
    started = time.monotonic()
    s.sendall(head + b"x" * 65536)           # the rest never comes
    answer = _read_answer(s)
    s.close()
    assert time.monotonic() - started < 5
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line.startswith(b"HTTP/1.1 413")
    err = error_of(rest.split(b"\r\n\r\n", 1)[1])
    assert err["msgId"] == "MQWB0108E" and str(100 << 20) in err["message"]
    assert depth(admin, "LIM.BIG") == 0


def test_chunked_body_past_the_limit_is_413(web, admin):
    admin.mqsc("DEFINE QLOCAL(LIM.CHUNK)")
    s = raw_socket(web)
    s.sendall((f"POST {MSG.format('LIM.CHUNK')} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               "Authorization: Basic cm9vdDpyb290cHc=\r\nTransfer-Encoding: chunked\r\n"
               "ibm-mq-rest-csrf-token: x\r\n\r\n").encode())
    chunk = b"y" * 65536
    try:
        for _ in range(40):                   # 2.5 MiB, past the 1 MiB limit
            s.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass                                  # refused and closed while we sent
    answer = _read_answer(s)
    s.close()
    assert answer.startswith(b"HTTP/1.1 413")
    assert depth(admin, "LIM.CHUNK") == 0


def _dribble(srv, data: bytes, out: list) -> None:
    """Send ``data`` a byte a second until the server answers; its answer and
    how long it took."""
    s = raw_socket(srv, timeout=30)
    started = time.monotonic()
    try:
        for i in range(len(data)):
            s.sendall(data[i:i + 1])
            if select.select([s], [], [], 1.0)[0]:
                break                         # answered (or closed)
    except (BrokenPipeError, ConnectionResetError):
        pass
    out.append((_read_answer(s), time.monotonic() - started))
    s.close()


def test_dribbled_headers_get_408_and_others_are_served_meanwhile(web, admin):
    request = (f"GET {MSG.format('SYSTEM.DEFAULT.LOCAL.QUEUE')} HTTP/1.1\r\n"
               "Host: 127.0.0.1\r\n\r\n").encode()
    out: list = []
    t = threading.Thread(target=_dribble, args=(web, request, out))
    t.start()
    time.sleep(0.3)
    # meanwhile the listener answers others at once
    for _ in range(5):
        started = time.monotonic()
        assert admin.mqsc("PING QMGR")[0] == 200
        assert time.monotonic() - started < 1.0
    t.join(30)
    answer, took = out[0]
    assert answer.startswith(b"HTTP/1.1 408")
    assert error_of(answer.split(b"\r\n\r\n", 1)[1])["msgId"] == "MQWB0408E"
    assert took < 6                           # request_timeout_ms is 2 s here


def test_dribbled_body_gets_408(web, admin):
    admin.mqsc("DEFINE QLOCAL(LIM.SLOW)")
    head = (f"POST {MSG.format('LIM.SLOW')} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Authorization: Basic cm9vdDpyb290cHc=\r\nContent-Length: 50\r\n"
            "ibm-mq-rest-csrf-token: x\r\n\r\n").encode()
    s = raw_socket(web, timeout=30)
    s.sendall(head)
    out: list = []
    t = threading.Thread(target=lambda: out.append(_read_answer(s)))
    t.start()
    for _ in range(5):
        try:
            s.sendall(b"z")
        except (BrokenPipeError, ConnectionResetError):
            break
        t.join(1.0)
        if not t.is_alive():
            break                             # answered
    t.join(30)
    s.close()
    assert out[0].startswith(b"HTTP/1.1 408")
    assert depth(admin, "LIM.SLOW") == 0


def test_csrf_header_constant_matches_mq():
    assert list(CSRF) == ["ibm-mq-rest-csrf-token"]
