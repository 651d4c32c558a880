"""Hostile clients: frames applied in arrival order up to a malformed one
whatever the TCP split, owed output (receipts included) bounded, password
checks that cannot starve connection setup and a rate limit of failed logins
summarised in the operator log, sockets that never authenticate kept apart
from max_connections, a CONNECT deadline and a frame timeout, a 13-digit
content-length, and what every ERROR frame carries.

The ``hostile`` server has small limits of its own so that each defence shows
in seconds. Clients that must not share a peer's login-failure count connect
from an address of their own (``127.0.0.N``: every 127/8 address reaches a
loopback listener).

Not here: the frame codec's other limits (test_stomp_frames.py), max_connections
on its own (test_stomp_errors.py), refused logins' texts (test_stomp_security.py).
"""

from __future__ import annotations

import asyncio
import socket
import statistics
import threading
import time

import pytest
from support.oplog import operator_log
from support.stomp_helpers import (
    QMServer,
    RawStomp,
    build_frame,
    deadline_wait,
    depth,
    expect_error,
    raw_connected,
)

from harbormq.security import LoginFailures
from harbormq.stomp.frames import FrameParser, Limits
from harbormq.stomp.transport import FRAMES_PER_TURN, MAX_HELD, FrameTransport

CONNECT_TIMEOUT_MS = 3000
FRAME_TIMEOUT_MS = 1500
FAILURE_LIMIT = 3
FAILURE_WINDOW_MS = 4000
MAX_CONNECTIONS = 10
MAX_UNAUTHENTICATED = 40


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    srv = QMServer(tmp_path_factory.mktemp("stomphostile") / "hmq", "QH")
    srv.create(max_connections=MAX_CONNECTIONS, max_unauthenticated=MAX_UNAUTHENTICATED,
               connect_timeout_ms=CONNECT_TIMEOUT_MS, frame_timeout_ms=FRAME_TIMEOUT_MS,
               login_failure_limit=FAILURE_LIMIT, login_failure_window_ms=FAILURE_WINDOW_MS,
               heartbeat_ms=0)
    srv.start()
    srv.user_add("dave", "davepw", "mqm")
    yield srv
    srv.stop()


def oplog_lines(srv: QMServer, fragment: str) -> list[str]:
    return [f"{m} {t}" for m, t in operator_log(srv.home, srv.name) if fragment in t]


def send_frame(queue: str, receipt: str, body: bytes = b"x", **headers) -> bytes:
    return build_frame("SEND", {"destination": f"/queue/{queue}", "persistent": "true",
                                "receipt": receipt, **headers}, body)


# ------------------------------------------------------------------ arrival order up to the error

GARBAGE = b"GARBAGE\n\n\0"


@pytest.mark.parametrize("writes", ["one write", "two writes"])
def test_frames_before_a_malformed_one_are_applied_whatever_the_tcp_split(hostile, writes):
    """A SEND with a receipt and garbage behind it: the RECEIPT (the message is
    on the queue), then the ERROR, in one write as in two (the ERROR alone came
    back for one write: the parser dropped the frames it had built)."""
    queue = f"SPLIT.{writes.split()[0].upper()}"
    c = raw_connected(hostile.port)
    data = send_frame(queue, "good") + GARBAGE
    if writes == "one write":
        c.send_bytes(data)
    else:
        cut = data.index(GARBAGE)
        c.send_bytes(data[:cut])
        time.sleep(0.2)
        c.send_bytes(data[cut:])
    frames = c.wait_closed(timeout=10)
    assert [f.command for f in frames] == ["RECEIPT", "ERROR"], frames
    assert frames[0]["receipt-id"] == "good"
    assert "unknown command" in frames[1]["message"]
    assert depth(hostile, queue) == 1


def test_connect_and_frames_and_garbage_in_one_write(hostile):
    """CONNECT, two SENDs and garbage in one write: CONNECTED, both RECEIPTs, ERROR."""
    c = RawStomp(hostile.port)
    c.send_bytes(build_frame("CONNECT", {"accept-version": "1.2", "host": "h",
                                         "heart-beat": "0,0"}) +
                 send_frame("SPLIT.CONNECT", "a") + send_frame("SPLIT.CONNECT", "b") + GARBAGE)
    frames = c.wait_closed(timeout=10)
    assert [f.command for f in frames] == ["CONNECTED", "RECEIPT", "RECEIPT", "ERROR"], frames
    assert depth(hostile, "SPLIT.CONNECT") == 2


def test_parser_hands_over_the_frames_before_its_error():
    p = FrameParser()
    p.version = "1.2"
    p.push(send_frame("Q", "r1") + send_frame("Q", "r2") + GARBAGE)
    assert p.next_frame().headers["receipt"] == "r1"
    assert p.next_frame().headers["receipt"] == "r2"
    with pytest.raises(Exception, match="unknown command"):
        p.next_frame()


# ------------------------------------------------------------------ content-length too large

def test_a_13_digit_content_length_is_too_large_not_not_a_number(hostile):
    c = raw_connected(hostile.port)
    c.send_bytes(b"SEND\ndestination:/queue/BIG.Q\nreceipt:r-big\ncontent-length:1234567890123"
                 b"\n\n")
    err = expect_error(c, "exceeds the frame size limit", "4194304")
    assert "not a number" not in err["message"]
    assert err["receipt-id"] == "r-big"
    for digits in ("99999999999999999999", "9" * 5000):
        p = FrameParser(Limits(max_header_bytes=16 * 1024))
        with pytest.raises(Exception, match="exceeds the frame size limit"):
            p.feed(b"SEND\ncontent-length:" + digits.encode() + b"\n\n")


# ------------------------------------------------------------------ ERROR frames

def test_error_frames_carry_content_type_body_receipt_and_reason_code(hostile):
    # an MQ reason code: a wrong password (from an address of its own: no rate limit)
    c = RawStomp(hostile.port, source="127.0.0.21")
    f = c.connect(login="dave", passcode="wrong", receipt="r-login")
    assert f.command == "ERROR"
    assert f["content-type"] == "text/plain" and f.body.strip()
    assert f["reason-code"] == "2035" and "2035" in f["message"]
    assert f["receipt-id"] == "r-login"
    c.close()
    # no reason code applies: none sent, the rest as always
    c = raw_connected(hostile.port)
    c.send("SEND", {"destination": "/queue/bad name", "receipt": "r-name"}, b"x")
    err = expect_error(c, "bad name")
    assert err["receipt-id"] == "r-name" and err["content-type"] == "text/plain"
    assert err.body.strip() and "reason-code" not in err.headers
    # a malformed frame whose headers could be read: its receipt
    c = raw_connected(hostile.port)
    c.send_bytes(b"SEND\ndestination:/queue/Q\nreceipt:r-bad\ncontent-length:x\n\nbody\0")
    err = expect_error(c, "content-length")
    assert err["receipt-id"] == "r-bad" and err["content-type"] == "text/plain"
    # the refusal of a version, which is sent before any version is agreed
    c = RawStomp(hostile.port)
    f = c.connect(version="3.0")
    assert f.command == "ERROR" and f["content-type"] == "text/plain" and f.body.strip()
    c.close()


# ------------------------------------------------------------------ owed output is bounded

class _FakeSocket(asyncio.Transport):
    """The socket under a FrameTransport: what it was told, what it wrote."""

    def __init__(self):
        super().__init__()
        self.reading = True
        self.written = bytearray()

    def pause_reading(self):
        self.reading = False

    def resume_reading(self):
        self.reading = True

    def write(self, data):
        self.written += data

    def get_write_buffer_size(self):
        return 0

    def is_closing(self):
        return False


def test_receipts_waiting_for_a_force_pause_reading():
    """A client pipelining persistent SENDs with receipts while the force is
    slow: FRAMES_PER_TURN frames a turn of the loop, at most MAX_HELD applied
    and held, the rest stay unread bytes, and reading resumes once the force
    is done (a client once made the server hold 153,316 receipts)."""

    async def run():
        loop = asyncio.get_running_loop()
        force = loop.create_future()

        class Producer(FrameTransport):
            applied = 0

            def _dispatch(self, frame):
                self.applied += 1
                self._receipt(frame, force)

        t = Producer(loop, Limits())
        t.version = t.parser.version = "1.2"
        sock = t.transport = _FakeSocket()
        t.data_received(b"".join(send_frame("Q", f"r{i}") for i in range(5000)))
        # a turn's worth at once, then the others' turn (fairness)
        assert t.applied == FRAMES_PER_TURN and not sock.reading
        for _ in range(50):
            await asyncio.sleep(0)
        assert t.applied == MAX_HELD and len(t._held) == MAX_HELD
        assert not sock.reading and t.parser.unparsed > 0
        force.set_result(None)
        for _ in range(200):
            await asyncio.sleep(0)
        assert t.applied == 5000 and sock.reading
        ids = [int(x.split(b"\n")[0]) for x in sock.written.split(b"receipt-id:r")[1:]]
        assert ids == list(range(5000))
        # a client that takes nothing: nothing more is applied until it does
        t.pause_writing()
        t.data_received(send_frame("Q", "later"))
        assert t.applied == 5000
        t.resume_writing()
        await asyncio.sleep(0)
        assert t.applied == 5001
    asyncio.run(run())


def test_clients_that_never_read_their_receipts_do_not_hold_up_others(hostile):
    """Eight clients pipeline persistent SENDs with receipts and never read:
    each ends up held by backpressure (it can no longer write), and another
    client's receipts keep coming."""
    hostile.sc("\n".join(f"DEFINE QLOCAL(FLOOD.{i}) MAXDEPTH(100000000)" for i in range(8)))
    floods = []
    for _ in range(8):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", hostile.port))
        s.sendall(build_frame("CONNECT", {"accept-version": "1.2", "host": "h"}))
        floods.append(s)
    stop = threading.Event()
    blocked = [False] * 8

    def flood(i, s):
        # receipts of 2 KB: the kernel's socket buffers fill in a few thousand
        chunk = b"".join(send_frame(f"FLOOD.{i}", f"{n:02000d}") for n in range(100))
        s.settimeout(1.0)
        while not stop.is_set():
            try:
                s.sendall(chunk)
            except TimeoutError:
                blocked[i] = True        # the server stopped reading from it
            except OSError:
                return
    threads = [threading.Thread(target=flood, args=(i, s), daemon=True)
               for i, s in enumerate(floods)]
    for t in threads:
        t.start()
    try:
        deadline_wait(lambda: all(blocked), 120, what="all eight floods held by backpressure")
        with raw_connected(hostile.port) as c:
            for _ in range(5):
                c.call("SEND", {"destination": "/queue/BYSTANDER", "persistent": "true"},
                       b"still served", timeout=30)
        assert depth(hostile, "BYSTANDER") == 5
    finally:
        stop.set()
        for s in floods:
            s.close()
        for t in threads:
            t.join(5)


# ------------------------------------------------------------------ connection budgets

def test_idle_sockets_do_not_lock_out_a_client(hostile):
    """Three hundred sockets that never send CONNECT (more than max_connections
    and than the budget of the unauthenticated): a client that logs in and an
    anonymous one still connect at once; the idle ones are pushed out, oldest
    first, or dropped at the CONNECT deadline."""
    idle = []
    for _ in range(300):
        idle.append(RawStomp(hostile.port, timeout=30))
    t0 = time.monotonic()
    c = RawStomp(hostile.port, source="127.0.0.31")
    assert c.connect(login="dave", passcode="davepw").command == "CONNECTED"
    anon = RawStomp(hostile.port)
    assert anon.connect().command == "CONNECTED"
    assert time.monotonic() - t0 < 10
    c.call("SEND", {"destination": "/queue/LOCKOUT.Q"}, b"in")
    pushed = idle[0].wait_closed(timeout=10)
    assert pushed and "stomp.max_unauthenticated" in pushed[-1]["message"], pushed
    late = idle[-1].wait_closed(timeout=CONNECT_TIMEOUT_MS / 1000 + 10)
    assert late and "stomp.connect_timeout_ms" in late[-1]["message"], late
    for s in idle + [c, anon]:
        s.close()


def test_max_connections_counts_connected_clients_with_its_reason_code(hostile):
    held = []
    try:
        def fill():
            c = RawStomp(hostile.port)
            f = c.connect()
            if f.command == "CONNECTED":
                held.append(c)
                return False
            c.close()
            return f
        refusal = deadline_wait(fill, 20, what="a refusal at max_connections")
        assert "stomp.max_connections" in refusal["message"]
        assert refusal["reason-code"] == "2025"
        assert len(held) <= MAX_CONNECTIONS
    finally:
        for c in held:
            c.close()


def test_a_silent_socket_is_dropped_at_the_connect_deadline(hostile):
    c = RawStomp(hostile.port)
    c.send_bytes(b"CONN")               # a CONNECT that dribbles counts as none
    t0 = time.monotonic()
    frames = c.wait_closed(timeout=CONNECT_TIMEOUT_MS / 1000 + 10)
    assert time.monotonic() - t0 >= CONNECT_TIMEOUT_MS / 1000 - 0.5
    assert [f.command for f in frames] == ["ERROR"]
    assert "stomp.connect_timeout_ms" in frames[0]["message"]


def test_a_dribbling_frame_is_cut_after_the_frame_timeout(hostile, conns):
    """Heart-beats 0,0 and a frame sent a byte at a time: cut after
    stomp.frame_timeout_ms. A connection idle between frames is not."""
    quiet = conns.raw(hostile.port, heart_beat="0,0")
    c = conns.raw(hostile.port, heart_beat="0,0")
    c.send_bytes(b"SEND\ndestination:/queue/DRIBBLE\n")
    t0 = time.monotonic()
    cut = None
    while cut is None and time.monotonic() - t0 < 4 * FRAME_TIMEOUT_MS / 1000:
        try:
            c.send_bytes(b"x")
        except OSError:
            pass
        frames = c.poll(0.2)
        cut = next((f for f in frames if f.command == "ERROR"), None)
    assert cut is not None, "the dribbling frame was never cut"
    assert "stomp.frame_timeout_ms" in cut["message"]
    assert time.monotonic() - t0 >= FRAME_TIMEOUT_MS / 1000 - 0.3
    quiet.call("SEND", {"destination": "/queue/DRIBBLE"}, b"idle between frames is fine")


# ------------------------------------------------------------------ logins

def _connect_time(port: int, source: str, **login) -> tuple[float, str]:
    c = RawStomp(port, source=source, timeout=60)
    try:
        t0 = time.monotonic()
        f = c.connect(**login)
        return time.monotonic() - t0, f.command
    finally:
        c.close()


def test_a_wrong_password_and_an_unknown_user_take_the_same_time(hostile):
    wrong, unknown = [], []
    for i in range(FAILURE_LIMIT - 1):         # under the limit of each address
        for times, user, source in ((wrong, "dave", f"127.0.1.{i + 1}"),
                                    (unknown, "nobody", f"127.0.2.{i + 1}")):
            took, command = _connect_time(hostile.port, source, login=user, passcode="bad")
            assert command == "ERROR"
            times.append(took)
    # both ran scrypt (tens of ms); neither is more than twice the other
    a, b = statistics.median(wrong), statistics.median(unknown)
    assert a > 0.005 and b > 0.005
    assert 0.5 < a / b < 2.0, (wrong, unknown)


def test_failed_logins_are_rate_limited_per_address_and_summarised(hostile):
    source = "127.0.0.41"
    for _ in range(FAILURE_LIMIT):
        c = RawStomp(hostile.port, source=source)
        f = c.connect(login="dave", passcode="bad")
        assert f.command == "ERROR" and "authentication failed" in f["message"]
        c.close()
    # over the limit: refused without a check, the right password too
    for passcode in ("bad", "davepw"):
        c = RawStomp(hostile.port, source=source)
        f = c.connect(login="dave", passcode=passcode)
        assert f.command == "ERROR" and "too many failed logins" in f["message"]
        assert f["reason-code"] == "2035" and "stomp.login_failure_limit" in f["message"]
        c.close()
    # another address is not affected
    assert RawStomp(hostile.port, source="127.0.0.42").connect(
        login="dave", passcode="davepw").command == "CONNECTED"
    # the operator log: the first refusal of each kind at once, the rest summed
    # in one line at the window's end
    lines = oplog_lines(hostile, f"from {source} ")
    assert len(lines) == 2, lines
    summary = deadline_wait(lambda: oplog_lines(hostile, f"more STOMP connection(s) from "
                                                         f"{source} refused"),
                            FAILURE_WINDOW_MS / 1000 + 10, what="the summary line")
    assert summary[0].startswith("HMQ5534E") and "3 more" in summary[0], summary
    # the window has passed: the right password is let in again
    deadline_wait(lambda: _connect_time(hostile.port, source, login="dave",
                                        passcode="davepw")[1] == "CONNECTED",
                  FAILURE_WINDOW_MS / 1000 + 10, interval=0.5, what="a login after the window")


def test_a_burst_of_wrong_passwords_does_not_starve_connection_setup(hostile):
    """200 concurrent wrong-password CONNECTs from one address: an anonymous
    client and a client logging in from elsewhere connect meanwhile without
    waiting for the burst's password checks; the burst costs a few checks,
    not 200, and a few operator-log lines, not 200."""
    source = "127.0.0.51"
    results: list[str] = []
    lock = threading.Lock()
    go = threading.Event()

    def attacker():
        go.wait()
        try:
            c = RawStomp(hostile.port, source=source, timeout=60)
            f = c.connect(login="dave", passcode="guess")
            with lock:
                results.append(f.get("message", f.command))
            c.close()
        except OSError as exc:
            with lock:
                results.append(repr(exc))
    threads = [threading.Thread(target=attacker, daemon=True) for _ in range(200)]
    for t in threads:
        t.start()
    t0 = time.monotonic()
    go.set()
    time.sleep(0.05)
    anon_took, anon = _connect_time(hostile.port, "127.0.0.1")
    login_took, login = _connect_time(hostile.port, "127.0.0.52", login="dave",
                                      passcode="davepw")
    for t in threads:
        t.join(60)
    burst_took = time.monotonic() - t0
    assert anon == "CONNECTED" and login == "CONNECTED"
    assert anon_took < 2.0 and login_took < 3.0, (anon_took, login_took)
    assert len(results) == 200
    # each refused: most without a check (rate-limited, or pushed out of the
    # budget of the unauthenticated while waiting for the address's turn)
    checked = [r for r in results if "authentication failed" in r]
    refused = [r for r in results if "too many failed logins" in r or
               "stomp.max_unauthenticated" in r]
    assert len(checked) + len(refused) == 200, [r for r in results if r not in checked + refused]
    assert len(checked) <= FAILURE_LIMIT + 2, checked
    assert burst_took < 20
    lines = oplog_lines(hostile, f"from {source} ")
    assert len(lines) <= 3, lines


def test_login_failures_limit_per_address_in_a_sliding_window():
    now = [0.0]
    lf = LoginFailures(
        3, 10.0, max_peers=2, clock=lambda: now[0])
    for t in (0.0, 1.0, 2.0):
        now[0] = t
        assert lf.refused_for("a") == 0
        lf.failed("a")
    assert lf.refused_for("a") == pytest.approx(8.0)      # the first failure + 10 s
    assert lf.refused_for("b") == 0
    now[0] = 10.5                                          # the first has left the window
    assert lf.refused_for("a") == 0
    lf.failed("a")
    assert lf.refused_for("a") == pytest.approx(0.5)
    lf.failed("b")
    lf.failed("c")                                         # over max_peers: "a" forgotten
    assert lf.refused_for("a") == 0
