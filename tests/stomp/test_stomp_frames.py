"""STOMP frames: the parser (harbormq.stomp.frames) on its own, fuzzed with
hypothesis, and a corpus of nasty frames (tests/fixtures/stomp/*.frame, their
expected outcome in MANIFEST.json) fed to a live server.

Against the server every bad frame must get an ERROR frame with a readable
``message`` header, then the connection closes; a parallel healthy connection
keeps working and nothing it had receipted is lost.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from support.stomp_helpers import QMServer, RawStomp, build_frame, raw_connected

from harbormq.stomp.frames import (
    CLIENT_COMMANDS,
    Frame,
    FrameError,
    FrameParser,
    Limits,
    encode_frame,
    escape,
)

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "stomp"
MANIFEST = json.loads((CORPUS / "MANIFEST.json").read_text())


def parse_all(data: bytes, version: str = "1.2", limits: Limits | None = None,
              chunks: list[int] | None = None):
    """(frames, error or None, heartbeats) of feeding ``data``, in pieces split at
    ``chunks`` offsets if given."""
    p = FrameParser(limits)
    p.version = version
    frames = []
    cuts = sorted(set(c for c in (chunks or []) if 0 < c < len(data)))
    bounds = zip([0, *cuts], [*cuts, len(data)], strict=True)
    pieces = [data[a:b] for a, b in bounds] if data else []
    try:
        for piece in pieces:
            new = p.feed(piece)
            frames.extend(new)
            # the parser stops behind CONNECT/STOMP until the connection has set
            # the negotiated version; then feed(b"") goes on
            while new and new[-1].command in ("CONNECT", "STOMP"):
                new = p.feed(b"")
                frames.extend(new)
    except FrameError as exc:
        return frames, exc, p.heartbeats
    return frames, None, p.heartbeats


# ------------------------------------------------------------------------------ unit tests

def test_simple_frame_and_heartbeats():
    p = FrameParser()
    assert p.feed(b"\n\r\n\n") == []
    assert p.heartbeats == 3
    frames = p.feed(b"SEND\ndestination:/queue/A\n\n\0\n")
    assert frames == [Frame("SEND", {"destination": "/queue/A"}, b"")]
    assert p.heartbeats == 4


def test_parser_stops_behind_connect_until_version_set():
    p = FrameParser()
    frames = p.feed(b"CONNECT\naccept-version:1.2\n\n\0SEND\nk:a\\cb\n\n\0")
    assert [f.command for f in frames] == ["CONNECT"]
    p.version = "1.2"
    assert p.feed(b"") == [Frame("SEND", {"k": "a:b"}, b"")]


def test_crlf_line_endings():
    frames, err, _ = parse_all(b"SEND\r\ndestination:/queue/A\r\nx:y\r\n\r\nbody\0")
    assert err is None
    assert frames == [Frame("SEND", {"destination": "/queue/A", "x": "y"}, b"body")]


def test_content_length_body_with_nuls_and_blank_lines():
    body = b"\0\n\n\0abc\0"
    data = b"SEND\ndestination:/queue/A\ncontent-length:%d\n\n" % len(body) + body + b"\0"
    frames, err, _ = parse_all(data + data)
    assert err is None and [f.body for f in frames] == [body, body]


def test_a_body_without_content_length_is_searched_once_not_once_per_chunk():
    """Each chunk once made the parser search the body from its start again:
    quadratic in the body's size, before any authentication."""
    p = FrameParser(Limits(max_frame_bytes=8 << 20))
    body = 4 << 20
    assert p.feed(b"SEND\ndestination:/queue/Q\n\n") == []
    for _ in range(body // 4096):
        assert p.feed(b"b" * 4096) == []
    frames = p.feed(b"\0")
    assert len(frames) == 1 and len(frames[0].body) == body
    assert p.bytes_searched < 2 * body, p.bytes_searched


def test_body_without_content_length_ends_at_first_nul():
    frames, err, _ = parse_all(b"SEND\ndestination:/queue/A\n\nab\0SEND\ndestination:/q\n\n\0")
    assert err is None
    assert [f.body for f in frames] == [b"ab", b""]


def test_repeated_header_first_wins():
    frames, _, _ = parse_all(b"SEND\nfoo:1\nfoo:2\ndestination:/queue/A\n\n\0")
    assert frames[0].headers["foo"] == "1"


def test_escapes_by_version():
    raw = b"SEND\nk\\c1:a\\nb\\\\c\\cd\n\n\0"
    frames, err, _ = parse_all(raw, "1.2")
    assert err is None and frames[0].headers == {"k:1": "a\nb\\c:d"}
    frames, err, _ = parse_all(b"SEND\nk:a\\rb\n\n\0", "1.2")
    assert frames[0].headers == {"k": "a\rb"}
    # \r is 1.2 only
    _, err, _ = parse_all(b"SEND\nk:a\\rb\n\n\0", "1.1")
    assert err is not None and "escape" in str(err)
    # 1.0 has no escaping at all
    frames, err, _ = parse_all(b"SEND\nk:a\\tb\\c\n\n\0", "1.0")
    assert err is None and frames[0].headers == {"k": "a\\tb\\c"}


def test_connect_headers_are_never_unescaped():
    frames, err, _ = parse_all(b"CONNECT\nlogin:a\\b\npasscode:p\\cq\n\n\0", "1.2")
    assert err is None
    assert frames[0].headers == {"login": "a\\b", "passcode": "p\\cq"}


@pytest.mark.parametrize("data, fragment", [
    (b"SEND\nk:a\\tb\n\n\0", "escape"),
    (b"SEND\nk:ab\\\n\n\0", "escape"),
    (b"FOO\n\n\0", "unknown command"),
    (b"send\n\n\0", "unknown command"),
    (b"SEND\nnocolon\n\n\0", "malformed header"),
    (b"SEND\n:v\n\n\0", "malformed header"),
    (b"SEND\ncontent-length:-3\n\nabc\0", "negative"),
    (b"SEND\ncontent-length:x\n\nabc\0", "not a number"),
    (b"SEND\ncontent-length:1\n\nabc\0", "NUL"),
    (b"SEND\nk:\xff\n\n\0", "UTF-8"),
    (b"\rSEND\n\n\0", "CR"),
    (b"XYZZY", "unknown command"),
    (b"\x00", "unknown command"),
])
def test_malformed(data, fragment):
    frames, err, _ = parse_all(data)
    assert frames == []
    assert err is not None and fragment in str(err)


def test_limits_header_count():
    lim = Limits(max_frame_bytes=1 << 20, max_headers=5, max_header_bytes=4096)
    ok = b"SEND\n" + b"".join(b"h%d:v\n" % i for i in range(5)) + b"\n\0"
    frames, err, _ = parse_all(ok, limits=lim)
    assert err is None and len(frames[0].headers) == 5
    _, err, _ = parse_all(b"SEND\n" + b"".join(b"h%d:v\n" % i for i in range(6)) + b"\n\0",
                          limits=lim)
    assert err is not None and "6 headers" in str(err) and "limit is 5" in str(err)


def test_limits_header_bytes_with_and_without_end():
    lim = Limits(max_frame_bytes=1 << 20, max_headers=64, max_header_bytes=100)
    _, err, _ = parse_all(b"SEND\nk:" + b"a" * 200 + b"\n\n\0", limits=lim)
    assert err is not None and "100" in str(err)
    # a header block that never ends is refused as soon as it is over the limit
    p = FrameParser(lim)
    p.feed(b"SEND\nk:" + b"a" * 50)
    with pytest.raises(FrameError, match="100"):
        for _ in range(10):
            p.feed(b"a" * 20)


@pytest.mark.parametrize("with_length", [True, False])
def test_limits_frame_bytes(with_length):
    lim = Limits(max_frame_bytes=1000, max_headers=64, max_header_bytes=500)
    head = b"SEND\ndestination:/queue/A\n"

    def frame(n):
        body = b"x" * n
        cl = b"content-length:%d\n" % n if with_length else b""
        return head + cl + b"\n" + body + b"\0"
    n = max(k for k in range(1000) if len(frame(k)) - 1 <= 1000)   # NUL not counted
    assert len(frame(n)) - 1 == 1000
    frames, err, _ = parse_all(frame(n), limits=lim)
    assert err is None and len(frames) == 1
    _, err, _ = parse_all(frame(n + 1), limits=lim)
    assert err is not None and "1000" in str(err)
    # refused before the whole body has arrived
    p = FrameParser(lim)
    with pytest.raises(FrameError, match="limit"):
        p.feed(frame(5000)[:1500])


def test_huge_content_length_refused_at_once():
    p = FrameParser()
    with pytest.raises(FrameError, match="limit"):
        p.feed(b"SEND\ncontent-length:999999999999\n\n")


def test_early_refusal_of_garbage_prefix():
    p = FrameParser()
    assert p.feed(b"SUBS") == []          # may still become SUBSCRIBE
    with pytest.raises(FrameError, match="unknown command"):
        p.feed(b"KRIBE")


@pytest.mark.parametrize("value", ["1_0", "+3", " 3", "\u0663"])
def test_content_length_must_be_plain_digits(value):
    """Regression: int() accepted '1_0', '+3', ' 3' and non-ASCII digits."""
    body = b"x" * int(value)     # what the parser takes the value to mean
    _, err, _ = parse_all(b"SEND\ncontent-length:" + value.encode() + b"\n\n" + body + b"\0")
    assert err is not None


@pytest.mark.parametrize("data", [
    b"SEND\ndestination:/queue/A\nk:a\0b\n\nbody\0",
    b"BEGIN\ntransaction:t\0SEND\ndestination:/queue/A\n\nx\0",
])
def test_nul_in_header_block_refused(data):
    """Regression: a NUL in the header block was header text (stored, delivered,
    and a frame missing its blank line swallowed the next one)."""
    frames, err, _ = parse_all(data)
    assert err is not None, frames


def test_encode_frame_escapes_and_content_length():
    data = encode_frame("MESSAGE", {"a:b": "x\ny\\z\r"}, b"bo\0dy", "1.2")
    assert data == b"MESSAGE\na\\cb:x\\ny\\\\z\\r\ncontent-length:5\n\nbo\0dy\0"
    data = encode_frame("MESSAGE", {"k": "a:b\r"}, b"", "1.1")
    assert data == b"MESSAGE\nk:a\\cb\r\n\n\0"   # 1.1 has no \r escape
    data = encode_frame("CONNECTED", {"version": "1.2", "x": "a:b"}, b"", "1.2")
    assert data == b"CONNECTED\nversion:1.2\nx:a:b\n\n\0"


# ------------------------------------------------------------------------------ hypothesis

header_text = st.text(st.characters(codec="utf-8", exclude_characters="\0"), max_size=20)
header_name = header_text.filter(lambda s: s != "" and s != "content-length")
body_bytes = st.binary(max_size=300)


@st.composite
def frames_strategy(draw):
    command = draw(st.sampled_from(sorted(CLIENT_COMMANDS - {"CONNECT", "STOMP"})))
    headers = draw(st.dictionaries(header_name, header_text, max_size=8))
    body = draw(body_bytes)
    with_length = draw(st.booleans()) or b"\0" in body
    return command, headers, body, with_length


def frame_bytes(command, headers, body, with_length, eol=b"\n"):
    lines = [command.encode()]
    lines += [f"{escape(k, '1.2')}:{escape(v, '1.2')}".encode() for k, v in headers.items()]
    if with_length:
        lines.append(b"content-length:%d" % len(body))
    return eol.join(lines) + eol + eol + body + b"\0"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(frames_strategy(), st.sampled_from([b"\n", b"\r\n"]),
                          st.sampled_from([b"", b"\n", b"\r\n", b"\n\n\r\n"])),
                min_size=1, max_size=5),
       st.lists(st.integers(0, 5000), max_size=12))
def test_roundtrip_random_frames_split_anywhere(items, cuts):
    data = b""
    expected_beats = 0
    for (command, headers, body, with_length), eol, beats in items:
        data += beats + frame_bytes(command, headers, body, with_length, eol)
        expected_beats += beats.count(b"\n")
    frames, err, hb = parse_all(data, "1.2", Limits(1 << 20, 64, 1 << 16), cuts)
    assert err is None
    assert hb == expected_beats
    assert len(frames) == len(items)
    for f, ((command, headers, body, with_length), _, _) in zip(frames, items, strict=True):
        want = dict(headers)
        if with_length:
            want["content-length"] = str(len(body))
        assert (f.command, f.headers, f.body) == (command, want, body)


raw_connect_text = st.text(st.characters(codec="utf-8", exclude_characters="\0\r\n:"),
                           max_size=15)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["CONNECT", "STOMP"]),
       st.dictionaries(raw_connect_text.filter(bool), raw_connect_text, max_size=6),
       st.lists(st.integers(0, 400), max_size=6))
def test_roundtrip_connect_frames_raw(command, headers, cuts):
    assume(all(not v.endswith("\\") for v in headers.values()))
    data = (command + "\n" + "".join(f"{k}:{v}\n" for k, v in headers.items()) +
            "\n").encode() + b"\0"
    frames, err, _ = parse_all(data, "1.0", None, cuts)
    assert err is None and frames == [Frame(command, headers, b"")]


@settings(max_examples=200, deadline=None)
@given(frames_strategy())
def test_roundtrip_through_encode_frame(frame):
    """encode_frame (the server's encoder) and the parser agree for every command."""
    command, headers, body, _ = frame
    data = encode_frame(command, headers, body, "1.2")
    frames, err, _ = parse_all(data, "1.2", Limits(1 << 20, 64, 1 << 16))
    assert err is None
    want = dict(headers)
    if body:
        want["content-length"] = str(len(body))
    assert frames == [Frame(command, want, body)]


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=600), st.sampled_from(["1.0", "1.1", "1.2"]),
       st.lists(st.integers(0, 600), max_size=8))
@example(b"SEND\ncontent-length:1\n\n\0\0", "1.2", [])
@example(b"\r", "1.2", [])
def test_random_bytes_only_frameerror(data, version, cuts):
    lim = Limits(max_frame_bytes=300, max_headers=8, max_header_bytes=200)
    whole = parse_all(data, version, lim)
    split = parse_all(data, version, lim, cuts)
    # never anything but FrameError, and how the bytes are split changes nothing
    assert whole[0] == split[0]
    assert (whole[1] is None) == (split[1] is None)


@st.composite
def mutated_frames(draw):
    command, headers, body, with_length = draw(frames_strategy())
    data = bytearray(frame_bytes(command, headers, body, with_length))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        pos = draw(st.integers(0, max(0, len(data) - 1)))
        if op == "flip" and data:
            data[pos] = draw(st.integers(0, 255))
        elif op == "insert":
            data[pos:pos] = draw(st.sampled_from([b"\0", b"\n", b"\r", b":", b"\\", b"\xff",
                                                  b"content-length:7\n", b"\n\n"]))
        elif op == "delete" and data:
            del data[pos]
        elif op == "truncate":
            del data[pos:]
    return bytes(data)


@settings(max_examples=400, deadline=None)
@given(mutated_frames(), st.lists(st.integers(0, 400), max_size=6))
def test_mutated_frames_only_frameerror(data, cuts):
    lim = Limits(max_frame_bytes=400, max_headers=8, max_header_bytes=300)
    whole = parse_all(data, "1.2", lim)
    split = parse_all(data, "1.2", lim, cuts)
    assert whole[0] == split[0]
    assert (whole[1] is None) == (split[1] is None)


# ------------------------------------------------------------------------------ live server

@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory):
    srv = QMServer(tmp_path_factory.mktemp("stompfuzz") / "hmq", "QF")
    srv.create(auto_define_queues=False, max_frame_bytes=64 * 1024, max_headers=32,
               max_header_bytes=8 * 1024, heartbeat_ms=60_000)
    srv.start()
    srv.sc("DEFINE QLOCAL(FUZZ.Q)\nDEFINE QLOCAL(HEALTHY.Q) DEFPSIST(YES)")
    yield srv
    srv.stop()


class Healthy:
    """A connection that must keep working while others misbehave: each check
    sends a persistent message with a receipt and gets it back."""

    def __init__(self, port):
        self.port = port
        self.conn = raw_connected(port)
        self.conn.call("SUBSCRIBE", {"id": "h", "destination": "/queue/HEALTHY.Q",
                                     "ack": "client-individual"})
        self.n = 0

    def check(self):
        self.n += 1
        body = f"healthy {self.n}".encode()
        got = self.conn.call("SEND", {"destination": "/queue/HEALTHY.Q", "persistent": "true"},
                             body)
        got += self.conn.messages(1 - len(got))
        assert [m.body for m in got] == [body]
        self.conn.call("ACK", {"id": got[0]["ack"]})


@pytest.fixture(scope="module")
def healthy(fuzz_server):
    h = Healthy(fuzz_server.port)
    yield h
    h.conn.close()


def assert_error_then_closed(conn: RawStomp, fragment: str = "") -> RawStomp:
    frames = conn.wait_closed(timeout=5)
    errors = [f for f in frames if f.command == "ERROR"]
    assert len(errors) == 1, f"expected one ERROR, got {frames}"
    assert errors[0].command == frames[-1].command, "frames after the ERROR"
    msg = errors[0].get("message", "")
    assert msg and len(msg) > 10, f"no readable message: {errors[0].headers}"
    assert fragment.lower() in msg.lower(), f"{fragment!r} not in {msg!r}"
    return errors[0]


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_corpus_frame_against_server(fuzz_server, healthy, name):
    spec = MANIFEST[name]
    data = (CORPUS / f"{name}.frame").read_bytes()
    conn = RawStomp(fuzz_server.port)
    try:
        if spec["phase"] == "connected":
            assert conn.connect().command == "CONNECTED"
        # in pieces as well as whole: the outcome must not depend on it
        half = len(data) // 2
        conn.send_bytes(data[:half])
        time.sleep(0.01)
        try:
            conn.send_bytes(data[half:])
        except (BrokenPipeError, ConnectionResetError):
            pass   # refused after the first piece already
        if spec["expect"] == "error":
            assert_error_then_closed(conn, spec["message"])
        else:
            # incomplete: the server waits for the rest, sends nothing, stays up
            assert conn.poll(0.3) == []
            assert not conn.eof
    finally:
        conn.close()
    healthy.check()


def test_every_corpus_file_is_in_the_manifest():
    files = {p.stem for p in CORPUS.glob("*.frame")}
    assert files == set(MANIFEST)


def test_unsupported_version_error_names_versions(fuzz_server):
    with RawStomp(fuzz_server.port) as c:
        f = c.connect(version="2.0,3.1")
        assert f.command == "ERROR"
        assert f["version"] == "1.0,1.1,1.2"
        assert "unsupported" in f["message"]
        c.wait_closed()


def test_half_closed_client_is_released(fuzz_server, healthy):
    """A client that half-sends a frame and shuts its side down is dropped."""
    with RawStomp(fuzz_server.port) as c:
        c.connect()
        c.send_bytes(b"SEND\ndestination:/queue/FUZZ.Q\n\npartial")
        c.sock.shutdown(socket.SHUT_WR)
        c.wait_closed(timeout=10)
    healthy.check()


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.one_of(mutated_frames(), st.binary(min_size=1, max_size=200)), st.booleans())
def test_fuzz_live_server(fuzz_server, healthy, data, connect_first):
    """Random and mutated frames at a live server: only well-formed replies, an
    ERROR is followed by the close, and the healthy connection is unaffected."""
    conn = RawStomp(fuzz_server.port)
    try:
        if connect_first:
            assert conn.connect().command == "CONNECTED"
        try:
            conn.send_bytes(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        frames = conn.poll(0.15)
        for f in frames:
            assert f.command in ("CONNECTED", "RECEIPT", "MESSAGE", "ERROR"), f
        errors = [f for f in frames if f.command == "ERROR"]
        if errors:
            assert errors[0].get("message"), errors[0].headers
            assert frames[-1].command == "ERROR"
            if not conn.eof:
                assert conn.wait_closed(timeout=10) == []
    finally:
        conn.close()
    healthy.check()


def test_nothing_receipted_lost_after_fuzzing(fuzz_server, healthy):
    """After all of the above: the healthy connection's messages were each
    received and acknowledged exactly once; the queue is empty."""
    healthy.check()
    out = fuzz_server.sc("DISPLAY QSTATUS(HEALTHY.Q) CURDEPTH")
    assert "CURDEPTH(0)" in out, out


def test_build_frame_helper_matches_parser():
    data = build_frame("SEND", {"destination": "/queue/A", "k:x": "v\n"}, b"b\0dy")
    frames, err, _ = parse_all(data)
    assert err is None
    assert frames[0].headers == {"destination": "/queue/A", "k:x": "v\n", "content-length": "4"}
