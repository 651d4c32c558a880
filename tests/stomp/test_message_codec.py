"""The STOMP front end's per-message conversions (harbormq.stomp.message_codec):
a SEND's headers read into a message, a message written as a MESSAGE frame.

The module is compiled (harbormq/_compiled.py); these tests run on whichever
build the process loaded, and scripts/test.sh runs them again on the Python
source. tests/test_compiled.py checks that both give the same bytes.
"""

from __future__ import annotations

import pytest
from support.stomp_helpers import ServerFrameReader

from harbormq.log.records import Message
from harbormq.stomp.message_codec import message_frame, message_of_send
from harbormq.stomp.transport import ProtocolError


def _defaults(where, priority, persistent):
    assert where == "Q"
    return (4 if priority is None else priority, False if persistent is None else persistent)


def test_a_send_without_descriptor_headers_takes_the_defaults():
    msg = message_of_send({"destination": "/queue/Q", "receipt": "r1"}, b"hi", _defaults, "Q")
    assert (msg.body, msg.priority, msg.persistent, msg.expiry_ns) == (b"hi", 4, False, 0)
    assert msg.properties == {} and msg.correl_id == b"" and msg.reply_to == ""


def test_a_sends_descriptor_headers_and_user_properties():
    h = {"destination": "/queue/Q", "priority": "9", "persistent": "TRUE",
         "expires": "1700000000000", "correlation-id": "c-1", "reply-to": "/queue/R",
         "content-type": "text/plain", "colour": "blue", "size": "3"}
    msg = message_of_send(h, b"x", _defaults, "Q")
    assert (msg.priority, msg.persistent) == (9, True)
    assert msg.expiry_ns == 1_700_000_000_000 * 1_000_000
    assert (msg.correl_id, msg.reply_to, msg.format) == (b"c-1", "/queue/R", "text/plain")
    assert msg.properties == {"colour": "blue", "size": "3"}


def test_each_message_gets_a_properties_dict_of_its_own():
    """A publication pops its retain property from the message's dict."""
    h = {"destination": "/queue/Q"}
    first = message_of_send(h, b"", _defaults, "Q")
    first.properties["retain"] = "true"
    assert message_of_send(h, b"", _defaults, "Q").properties == {}


@pytest.mark.parametrize("header, value, says", [
    ("priority", "high", "priority 'high' is not a number 0-9"),
    ("priority", "10", "priority 10 is out of range 0-9"),
    ("persistent", "yes", "persistent 'yes' must be true or false"),
    ("expires", "soon", "expires 'soon' is not a time in milliseconds since the epoch"),
])
def test_a_bad_descriptor_header_is_refused_by_name(header, value, says):
    with pytest.raises(ProtocolError) as caught:
        message_of_send({"destination": "/queue/Q", header: value}, b"", _defaults, "Q")
    assert caught.value.message == says


def _parsed(data: bytes, version: str):
    (frame,) = ServerFrameReader(version).feed(data)
    return frame


def test_a_message_frame_carries_the_descriptor_and_parses_back():
    msg = Message(b"body\0with nul", msg_id=b"\x01" * 24, correl_id=b"c:1", priority=7,
                  persistent=True, expiry_ns=5_000_000, put_time_ns=1_764_000_000_123_456_789,
                  backout_count=2, reply_to="/queue/R", format="text/plain",
                  properties={"colour": "blue\nsky", "priority": "not sent", "n": 3})
    data = message_frame("MESSAGE\nsubscription:s1\ndestination:/queue/Q\n", "01" * 24,
                         "conn-1-9", msg, "1.2", None)
    frame = _parsed(data, "1.2")
    assert frame.command == "MESSAGE" and frame.body == b"body\0with nul"
    assert frame.headers == {
        "subscription": "s1", "destination": "/queue/Q", "message-id": "01" * 24,
        "ack": "conn-1-9", "redelivered": "true", "backout-count": "2", "persistent": "true",
        "priority": "7", "timestamp": "1764000000123", "expires": "5",
        "correlation-id": "c:1", "reply-to": "/queue/R", "content-type": "text/plain",
        "colour": "blue\nsky", "n": "3", "content-length": str(len(msg.body))}


def test_a_first_delivery_without_ack_header_in_stomp_1_0():
    msg = Message(b"", msg_id=b"\x02" * 24, persistent=False,
                  properties={"a:b": "x\ny"})
    data = message_frame("MESSAGE\nsubscription:s\n", "02" * 24, None, msg, "1.0", None)
    assert data == (b"MESSAGE\nsubscription:s\nmessage-id:" + b"02" * 24 +
                    b"\nredelivered:false\npersistent:false\npriority:0\ntimestamp:0\n"
                    b"expires:0\na_b:x y\ncontent-length:0\n\n\0")


def test_a_publications_topic_lines_replace_its_topic_properties():
    msg = Message(b"p", msg_id=b"\x03" * 24,
                  properties={"MQTopicString": "a/b", "MQIsRetained": "true", "k": "v"})
    data = message_frame("MESSAGE\nsubscription:t\n", "03" * 24, None, msg, "1.2",
                         ["destination:", "/topic/a/b", "\n", "retained:true\n"])
    frame = _parsed(data, "1.2")
    assert frame.headers["destination"] == "/topic/a/b"
    assert frame.headers["retained"] == "true" and frame.headers["k"] == "v"
    assert "MQTopicString" not in frame.headers and "MQIsRetained" not in frame.headers
