"""The load file format and the trace's outcome logic, without Spark."""

from __future__ import annotations

import json

import pytest

from harbormq.pipeline.trace import describe_life
from harbormq.unload.loadfile import LoadFileError, read_load_file, write_load_file

ROW = {"msg_id": b"\x01\x02", "correl_id": b"", "priority": 4, "persistent": True,
       "expiry_ns": 0, "put_time_ns": 5, "backout_count": 2, "reply_to": "R", "format": "F",
       "properties_json": '{"a":[1,2]}', "body": b"\x00hello"}


def test_load_file_round_trip(tmp_path):
    path = tmp_path / "Q.hmqload"
    assert write_load_file(path, "Q", 99, [ROW, dict(ROW, msg_id=b"\x03")]) == 2
    header, messages = read_load_file(path)
    assert header == {"format": "harbormq-load", "version": 1, "queue": "Q", "at_lsn": 99}
    got = list(messages)
    assert [m["msg_id"] for m in got] == ["0102", "03"]
    assert got[0]["properties"] == {"a": [1, 2]} and got[0]["body"] == "AGhlbGxv"
    assert not (tmp_path / "Q.hmqload.tmp").exists()


def test_a_cut_short_or_foreign_file_is_refused(tmp_path):
    path = tmp_path / "Q.hmqload"
    write_load_file(path, "Q", 1, [ROW, ROW])
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(LoadFileError, match="no end line: the file was cut short"):
        list(read_load_file(path)[1])
    path.write_text("\n".join(lines[:2] + [json.dumps({"end": True, "messages": 2})]) + "\n")
    with pytest.raises(LoadFileError, match="says it holds 2 messages but 1 were read"):
        list(read_load_file(path)[1])
    path.write_text("hello\n")
    with pytest.raises(LoadFileError, match="is not a harbormq load file"):
        read_load_file(path)
    path.write_text(json.dumps({"format": "harbormq-load", "version": 7}) + "\n")
    with pytest.raises(LoadFileError, match="load file version 7"):
        read_load_file(path)


@pytest.mark.parametrize("line,problem", [
    ("[1, 2]", "is not a JSON object"),
    ('{"body": "AA=="}', "field 'msg_id' is missing"),
    ("MSG:priority=10", "priority 10 is not 0..9"),
    ("MSG:priority=true", "field 'priority' is missing or not int"),
    ("MSG:body=!!", "line 2"),
    ("MSG:msg_id=zz", "line 2"),
])
def test_a_malformed_message_line_is_named(tmp_path, line, problem):
    """Found by fuzzing the admin protocol: such lines once failed inside the
    load with KeyError or AttributeError (HMQ8152E), not HMQ7620E."""
    path = tmp_path / "Q.hmqload"
    write_load_file(path, "Q", 1, [ROW])
    lines = path.read_text().splitlines()
    if line.startswith("MSG:"):
        key, value = line[4:].split("=")
        good = json.loads(lines[1])
        good[key] = json.loads(value) if value in ("10", "true") else value
        line = json.dumps(good)
    path.write_text("\n".join([lines[0], line, lines[2]]) + "\n")
    with pytest.raises(LoadFileError, match=problem) as info:
        list(read_load_file(path)[1])
    assert info.value.msgid == "HMQ7620E"


def rec(lsn, type_, uow=0, obj="Q", **kw):
    base = {"lsn": lsn, "ts_ns": lsn * 1000, "type": type_, "auto_commit": uow == 0,
            "uow_id": uow, "object": obj, "priority": 5, "seq": 1, "backout_count": None,
            "undone_type": None, "image_id": None}
    return base | kw


def test_trace_follows_the_message_to_its_final_queue():
    rows = [rec(10, "MSG_PUT"), rec(20, "MSG_GET", uow=7),
            rec(30, "COMPENSATION", uow=7, undone_type="MSG_GET", backout_count=1),
            rec(40, "MSG_GET", uow=8), rec(50, "MSG_PUT", uow=8, obj="BO")]
    outcomes = {7: [{"type": "UOW_BACKOUT", "lsn": 35, "ts_ns": 35000}],
                8: [{"type": "UOW_COMMIT", "lsn": 60, "ts_ns": 60000}]}
    life = describe_life("0102", rows, outcomes)
    assert [e["event"] for e in life["events"]] == [
        "put (priority 5, seq 1)", "get", "get backed out (backout count 1)", "get",
        "put (priority 5, seq 1)"]
    assert life["events"][1]["outcome"].startswith("backed out at LSN 35")
    assert life["final"] == "on queue BO"


def test_trace_of_a_message_never_committed_or_got():
    life = describe_life("01", [rec(10, "MSG_PUT", uow=3)],
                         {3: [{"type": "UOW_PREPARE", "lsn": 12, "ts_ns": 1}]})
    assert life["final"] == "never on a queue (put in doubt at the end of the log)"
    life = describe_life("01", [rec(10, "MSG_PUT"), rec(20, "MSG_EXPIRE")], {})
    assert life["final"] == "expired on Q at LSN 20"


def test_load_into_a_running_queue_manager_while_it_serves(tmp_path):
    """`harbormq pipeline load` hands the file to a running queue manager (its
    admin socket); it keeps serving STOMP clients meanwhile, and the messages
    come back in the file's order with their ids and descriptors."""
    from support.stomp_helpers import QMServer, RawStomp

    rows = [dict(ROW, msg_id=i.to_bytes(4, "big"), priority=i % 3, body=b"m%d" % i)
            for i in range(1, 1201)]
    rows.append(dict(ROW, msg_id=b"\xee" * 4, expiry_ns=1))     # expired long ago
    path = tmp_path / "Q.hmqload"
    write_load_file(path, "RESTORED.Q", 7, rows)
    server = QMServer(tmp_path / "home").create().start()
    try:
        busy = RawStomp(server.port)
        busy.connect()
        busy.call("SEND", {"destination": "/queue/OTHER.Q", "persistent": "true"}, b"x")
        server.sc("DEFINE QLOCAL(RESTORED.Q) DEFPSIST(YES) MAXDEPTH(10000)")
        out = server.cli("pipeline", "load", "--qm", server.name, "--queue", "RESTORED.Q",
                         "--file", str(path))
        assert json.loads(out.stdout.strip().splitlines()[-1]) == {
            "queue": "RESTORED.Q", "loaded": 1200, "expired_skipped": 1}
        busy.call("SEND", {"destination": "/queue/OTHER.Q", "persistent": "true"}, b"y")
        busy.call("SUBSCRIBE", {"destination": "/queue/RESTORED.Q", "id": "1",
                                "ack": "auto", "prefetch-count": "1000"})
        got = busy.messages(1200)
        expected = sorted(rows[:-1], key=lambda r: -r["priority"])      # stable: file order
        assert [m["message-id"] for m in got] == [r["msg_id"].hex() for r in expected]
        assert [m.body for m in got] == [r["body"] for r in expected]
        assert got[0]["reply-to"] == "R" and got[0]["content-type"] == "F"
        busy.close()
    finally:
        server.stop()
