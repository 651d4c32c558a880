"""The pipeline across two queue managers: ``trace`` follows a message over a
channel, ``channels`` lays both sides' batches side by side.

Two real queue manager processes joined by a channel, stomp.py clients at both
ends, the sender SIGKILLed mid-batch at its named crash points; then the
pipeline on the local Spark session over both logs. Ground truth: the order
messages were sent in (message k has sequence number k + 1), the channel
status the queue managers display, and the in-doubt resolutions they report
in their error logs."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pytest
from support.stomp_helpers import stomp_client

from harbormq.config import QMConfig
from harbormq.errors import HarbormqError
from harbormq.pipeline.chanreport import pair_channels, run_channels
from harbormq.pipeline.logdata import LogInput
from harbormq.pipeline.trace import trace_across

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "channels"))
from test_channel_crash import crash_at, wait_dead  # noqa: E402
from test_channels import pair, send_all  # noqa: E402

CHANNEL = "QMA.TO.QMB"


def consume(port: int, queue: str, count: int) -> dict[str, dict]:
    """body -> headers of ``count`` messages got (auto-acknowledged)."""
    conn = stomp_client(port)
    try:
        conn.subscribe(f"/queue/{queue}", id="s", ack="auto")
        return {m.body: m.headers for m in conn.col.wait_messages(count, 60)}
    finally:
        conn.disconnect()


def kill_sender_at(a, point: str, bodies: list[str]) -> None:
    """Queue ``bodies`` while the channel is stopped, restart QMA with ``point``
    armed: its channel starts at once (a restart does not keep STOPPED), sends
    them as one batch and dies there. Leave QMA down a while (the batch stays
    in doubt meanwhile), then start it again."""
    a.sc(f"STOP CHANNEL({CHANNEL})")
    send_all(a.port, "/queue/TO.B", bodies)
    a.stop()
    crash_at(a, point)
    try:
        a.start()
    except AssertionError:
        assert a.proc.poll() is not None      # killed at the point while starting
    assert wait_dead(a, 60), f"{point} was never reached"
    time.sleep(1.5)
    crash_at(a, None)
    a.start()
    # the channel resolves its batch at once; wait for it (a STOP CHANNEL during
    # the resolution would cut it short)
    end = time.monotonic() + 60
    while status(a).get("INDOUBT") != "NO":
        assert time.monotonic() < end, status(a)
        time.sleep(0.1)


def status(srv) -> dict:
    text = srv.sc(f"DISPLAY CHSTATUS({CHANNEL}) ALL")
    return {k: v for k, v in re.findall(r"(\w+)\(([^)]*)\)", text)}


def log_of(srv) -> LogInput:
    return LogInput(log=str(QMConfig.load(srv.name, srv.home).log_dir))


@pytest.fixture(scope="module")
def two_logs(tmp_path_factory):
    """QMA -> QMB: 12 messages in batches of 5, a dead letter, a batch whose
    sender died after the receiver committed it (committed at the restart)
    and one whose sender died before sending END_BATCH (backed out at the
    restart, sent again)."""
    a, b, _ = pair(tmp_path_factory.mktemp("qms"), batchsz=5)
    try:
        a.sc("DEFINE QREMOTE(TO.NOWHERE) RNAME(NO.SUCH.Q) RQMNAME(QMB)")
        first = [f"m{i}" for i in range(12)]
        conn = stomp_client(a.port)
        try:
            for i, body in enumerate(first):
                conn.send("/queue/TO.B", body, headers={
                    "receipt": body, "persistent": "true", "correlation-id": f"order-{i % 4}"})
                conn.col.wait_receipt(body)
        finally:
            conn.disconnect()
        send_all(a.port, "/queue/TO.NOWHERE", ["lost"])
        got = consume(b.port, "IN", 12)
        kill_sender_at(a, "channel.sender_confirmed", [f"c{i}" for i in range(5)])
        kill_sender_at(a, "channel.sender_prepared", [f"p{i}" for i in range(5)])
        got |= consume(b.port, "IN", 10)
        end = time.monotonic() + 60
        while status(a).get("INDOUBT") != "NO" or status(a).get("LSTSEQNO") != "23":
            assert time.monotonic() < end, status(a)
            time.sleep(0.2)
        truth = {"sent": first + [f"c{i}" for i in range(5)] + [f"p{i}" for i in range(5)],
                 "ids": {body: h["message-id"] for body, h in got.items()},
                 "a_status": status(a), "b_status": status(b),
                 "a_errors": (a.qm_dir / "errors" / "HMQERR01.LOG").read_text()}
    finally:
        a.stop()
        b.stop()
    return a, b, truth


def test_trace_and_channel_report_across_two_queue_managers(two_logs, spark, tmp_path):
    a, b, truth = two_logs
    logs = [log_of(a), log_of(b)]
    ids = truth["ids"]
    assert len(ids) == 22

    # -- trace: m7 is the 8th message through the channel
    life = trace_across(spark, logs, msg_id_hex=ids["m7"])
    steps = [(e["qm"], e["queue"], e["event"].split(" ")[0], e["outcome"].split(" ")[0])
             for e in life["events"]]
    assert steps == [("QMA", "QMB", "put", "committed"), ("QMA", "QMB", "get", "committed"),
                     ("QMB", "IN", "put", "committed"), ("QMB", "IN", "get", "committed")], steps
    assert life["events"][0]["to"] == {"queue": "IN", "qm": "QMB"}
    sent, put = life["events"][1]["channel"], life["events"][2]["channel"]
    assert sent["channel"] == put["channel"] == CHANNEL
    assert (sent["side"], sent["partner"], put["side"], put["partner"]) == \
        ("SDR", "QMB", "RCVR", "QMA")
    assert sent["seq"] == put["seq"] == 8
    assert sent["luwid"] == put["luwid"]
    assert sent["batch_seq_first"] == put["batch_seq_first"] <= 8 <= \
        sent["batch_seq_last"] == put["batch_seq_last"]
    assert life["final"].startswith("got from IN on QMB at LSN ")

    # the last message: its batch is the one both queue managers display as the last
    last = trace_across(spark, logs, msg_id_hex=ids["p4"])
    hops = [e["channel"] for e in last["events"] if "channel" in e
            and e["outcome"].startswith("committed")]
    assert [h["seq"] for h in hops] == [23, 23]
    assert {h["luwid"] for h in hops} == {truth["a_status"]["LSTLUWID"],
                                          truth["b_status"]["LSTLUWID"]}
    # ... sent once in a batch backed out at the sender's restart, then again
    backed = [e for e in last["events"] if e["qm"] == "QMA" and "channel" in e
              and e["outcome"].startswith("backed out")]
    assert backed and backed[0]["channel"]["seq"] == 23
    assert backed[0]["channel"]["luwid"] != hops[0]["luwid"]
    # QMB had put it in a unit of work of its own, backed out when the connection
    # died before END_BATCH: the channel is named (its owner), no batch number
    lone = [e for e in last["events"] if e["qm"] == "QMB" and e["event"].startswith("put")
            and e["outcome"].startswith("backed out")]
    assert lone and lone[0]["channel"] == {"channel": CHANNEL, "luwid": None}
    assert "in a batch that never ended" in lone[0]["event"]

    # by correlation id: the three messages put with order-3
    by_correl = trace_across(spark, logs, correl_id_hex=b"order-3".hex())
    assert sorted(m["msg_id"] for m in by_correl["messages"]) == \
        sorted(ids[f"m{i}"] for i in (3, 7, 11))

    # the dead letter: its reason on QMB
    lost_life = trace_across(spark, [logs[1]], msg_id_hex=_dead_letter_id(spark, logs[1]))
    lost = lost_life["events"]
    assert lost[0]["dead_letter_reason"] == 2085
    assert lost[0]["event"].startswith("dead-lettered (reason 2085: ")
    assert re.search(rf"it was for queue NO.SUCH.Q\) by channel {CHANNEL} from QMA: message 13 "
                     r"of batch \d+\.\.13 ", lost[0]["event"]), lost[0]["event"]
    assert "(dead-lettered, reason 2085)" in lost_life["final"]

    # -- the channel report
    out = tmp_path / "channels"
    report = run_channels(spark, logs, out)
    ch = report["channels"][CHANNEL]
    s, r = ch["sender"], ch["receiver"]
    assert (s["qm"], s["partner"], r["qm"], r["partner"]) == ("QMA", "QMB", "QMB", "QMA")
    assert s["messages"] == r["messages"] == 23
    assert r["dead_letters"] == 1
    assert (s["seq_first"], s["seq_last"]) == (r["seq_first"], r["seq_last"]) == (1, 23)
    assert s["last_committed"]["seq"] == int(truth["a_status"]["LSTSEQNO"]) == 23
    assert r["last_committed"]["seq"] == int(truth["b_status"]["LSTSEQNO"]) == 23
    assert s["last_committed"]["luwid"] == truth["a_status"]["LSTLUWID"]
    assert r["last_committed"]["luwid"] == truth["b_status"]["LSTLUWID"]
    assert ch["last_committed_agree"] and not ch["mismatches"], ch["mismatches"]
    assert s["batches"] == r["batches"] and s["backed_out"] == 1
    assert not s["in_doubt_at_end"] and not r["in_flight_at_end"]

    # the two in-doubt batches the sender's restarts resolved, as QMA reported them
    committed = re.search(r"in-doubt batch (\w+) \(sequence number (\d+)\) committed",
                          truth["a_errors"])
    backed_out = re.search(r"in-doubt batch (\w+) backed out", truth["a_errors"])
    after = {p["luwid"]: p for p in ch["in_doubt"]["resolved_after_restart"]}
    assert set(after) == {committed.group(1), backed_out.group(1)}, after
    c, bo = after[committed.group(1)], after[backed_out.group(1)]
    assert (c["resolution"], c["seq_first"], c["seq_last"]) == \
        ("committed", 14, int(committed.group(2))) == ("committed", 14, 18)
    assert c["receiver"]["outcome"] == "committed"
    assert c["in_doubt_ms"] >= 1500 and c["receiver_commit_to_sender_commit_ms"] >= 1500
    assert (bo["resolution"], bo["seq_first"], bo["seq_last"]) == ("backed out", 19, 23)
    assert bo["receiver"] is None
    assert ch["in_doubt"]["ms_quantiles"]["max"] >= 1500
    # every other window closed while the sender ran: far shorter
    quick = [p["in_doubt_ms"] for p in json.loads(
        "[" + ",".join((out / ch["batches_file"]).read_text().split("\n")[:-1]) + "]")
        if p.get("in_doubt_ms") is not None and p["luwid"] not in after]
    assert quick and max(quick) < 1500
    assert (out / ch["plot"]).stat().st_size > 1000
    assert json.loads((out / "channels.json").read_text())["channels"][CHANNEL]["sender"] == s


def _dead_letter_id(spark, log: LogInput) -> str:
    rows = log.records(spark).filter("type = 'MSG_PUT' AND object = 'SYSTEM.DEAD.LETTER.QUEUE'") \
        .select("msg_id").collect()
    assert len(rows) == 1
    return rows[0][0].hex()


def test_one_queue_manager_log_per_input(two_logs, spark):
    """A trace of one log names no queue manager; two inputs naming no
    message fail with one message naming both."""
    a, _b, truth = two_logs
    life = trace_across(spark, [log_of(a)], msg_id_hex=truth["ids"]["m0"])
    assert "qm" not in life["events"][0] and life["final"].startswith("got from QMB at LSN")
    with pytest.raises(HarbormqError, match="no log record names message 00ff in the logs "
                                            "of QMA, QMB"):
        trace_across(spark, [log_of(a), log_of(_b)], msg_id_hex="00ff")


def test_the_commands(two_logs, spark, tmp_path, capsys):
    """``harbormq pipeline trace`` with a --log per queue manager prints one
    line per step, naming the queue manager; ``channels`` writes its files.
    (In this process: the commands take the tests' Spark session.)"""
    from harbormq.pipeline.cli import main
    a, b, truth = two_logs
    logs = ["--log", log_of(a).log, "--log", log_of(b).log]
    assert main(["trace", "--msgid", truth["ids"]["m0"], *logs]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"message {truth['ids']['m0']}"
    assert [ln.split()[0] for ln in lines[1:5]] == ["QMA", "QMA", "QMB", "QMB"], lines
    assert "for queue IN on QMB" in lines[1]
    assert f"QMB: get by channel {CHANNEL} for QMB: message 1 of batch 1.." in lines[2]
    assert f") by channel {CHANNEL} from QMA: message 1 of batch 1.." in lines[3]
    assert lines[5].startswith("  final: got from IN on QMB at LSN")
    assert main(["channels", *logs, "--out", str(tmp_path / "c")]) == 0
    summary = json.loads(capsys.readouterr().out)["channels"][CHANNEL]
    assert summary["last_seq"] == [23, 23] and summary["mismatches"] == 0
    assert (tmp_path / "c" / "channels.json").exists()
    # usage errors, before Spark is asked anything
    assert main(["trace", "--msgid", "00", "--qm", "QMA", *logs]) == 1
    assert "HMQ7602E: --qm chooses among" in capsys.readouterr().err
    assert main(["trace", *logs]) == 1
    assert "HMQ7602E: give exactly one of --msgid and --correlid" in capsys.readouterr().err
    assert main(["channels", "--out", str(tmp_path / "d")]) == 1
    assert "HMQ7602E: give --log or --lake" in capsys.readouterr().err


def test_lakes_as_inputs(two_logs, spark, tmp_path):
    """A lake ingested with bodies answers as its log does; one without bodies
    cannot give the sync data: the report says which lake and what to do, the
    trace shows the steps without the batch details and says why."""
    from harbormq.pipeline.chanlog import ChannelLogError
    from harbormq.pipeline.ingest import run_ingest
    a, b, truth = two_logs
    run_ingest(spark, log_of(a).log, str(tmp_path / "a"), with_bodies=True)
    run_ingest(spark, log_of(b).log, str(tmp_path / "b"))
    lake_a, lake_b = LogInput(lake=str(tmp_path / "a")), LogInput(lake=str(tmp_path / "b"))
    mixed = run_channels(spark, [lake_a, log_of(b)], tmp_path / "mixed")["channels"][CHANNEL]
    assert (mixed["sender"]["messages"], mixed["receiver"]["messages"]) == (23, 23)
    assert mixed["sender"]["last_committed"]["luwid"] == truth["a_status"]["LSTLUWID"]
    assert not mixed["mismatches"]
    with pytest.raises(ChannelLogError, match=f"HMQ7641E: the lake {re.escape(str(tmp_path))}"
                                              "/b holds no message bodies"):
        run_channels(spark, [lake_a, lake_b], tmp_path / "none")
    life = trace_across(spark, [lake_a, lake_b], msg_id_hex=truth["ids"]["m2"])
    on_b = [e for e in life["events"] if e["qm"] == "QMB"]
    assert "channel" not in on_b[0] and "holds no message bodies" in on_b[0]["note"]
    assert life["events"][1]["channel"]["seq"] == 3      # QMA's lake has them


def test_a_negated_filter_is_left_to_spark(tmp_path, spark):
    """``object != X`` reaches the reader as Not(EqualTo): it names no single
    column and must go back to Spark, not fail the query."""
    from support.pipeline_logbuilder import LogBuilder
    lb = LogBuilder(tmp_path / "log", pages=4)
    lb.define("Q", 1)
    lb.define("R", 2)
    for obj, name in ((1, "Q"), (2, "R"), (1, "Q")):
        lb.put(name, obj, lb.message(obj))
    lb.close()
    df = LogInput(log=str(tmp_path / "log")).records(spark)
    assert df.filter("type = 'MSG_PUT' AND object != 'R'").count() == 2


# -- the pairing, without Spark -------------------------------------------------------

def batch(side, seq, n, luwid, outcome="committed", t=0, qm=None, kind="batch"):
    qm = qm or ("QMA" if side == "SDR" else "QMB")
    done = outcome == "committed"
    return {"channel": "C", "side": side, "seq": seq, "seq_first": seq - n + 1, "messages": n,
            "luwid": luwid, "partner": "QMB" if side == "SDR" else "QMA", "qm": qm,
            "kind": kind, "outcome": outcome, "lsn": t, "uow_id": t, "ts_ns": t,
            "first_msg_ns": t, "dead_letters": 0,
            "prepare_ns": t + 1 if side == "SDR" else None,
            "commit_ns": t + 5 if done else None, "commit_lsn": t + 5 if done else None,
            "backout_lsn": None if done else t + 5, "backout_ns": None if done else t + 5,
            "end_ns": t + 5}


def logs_of(sdr, rcvr, restarts=()):
    return [{"qm": "QMA", "batches": sdr, "restarts_ns": list(restarts), "first_ns": 0,
             "last_ns": 10_000},
            {"qm": "QMB", "batches": rcvr, "restarts_ns": [], "first_ns": 0, "last_ns": 10_000}]


def test_the_sides_agreeing_raise_no_flag():
    ch = pair_channels(logs_of([batch("SDR", 5, 5, "a", t=10), batch("SDR", 8, 3, "b", t=20)],
                               [batch("RCVR", 5, 5, "a", t=11),
                                batch("RCVR", 8, 3, "b", t=21)]))["channels"]["C"]
    assert ch["mismatches"] == [] and ch["last_committed_agree"]
    assert [p["luwid"] for p in ch["pairs"]] == ["a", "b"]


def test_disagreements_are_flagged():
    ch = pair_channels(logs_of(
        [batch("SDR", 5, 5, "a", t=10), batch("SDR", 8, 3, "b", t=20, outcome="backed out"),
         batch("SDR", 12, 3, "c", t=30), batch("SDR", 14, 2, "d", t=40)],
        [batch("RCVR", 5, 5, "a", t=11), batch("RCVR", 8, 3, "b", t=21),
         batch("RCVR", 12, 4, "c", t=31)]))["channels"]["C"]
    kinds = sorted(m["kind"] for m in ch["mismatches"])
    assert kinds == [
        "committed by the receiver, backed out by the sender (its messages sent twice)",
        "committed by the sender, not by the receiver (not in its log)",
        "sequence gap",
        "sequence numbers differ: the sender numbered it 10..12, the receiver 9..12"], kinds
    gap = next(m for m in ch["mismatches"] if m["kind"] == "sequence gap")
    assert (gap["side"], gap["seq_first"], gap["detail"]) == \
        ("SDR", 10, "the batch before ended at 5")


def test_a_reset_excuses_the_jump_in_numbers():
    reset = batch("SDR", 99, 0, "a", t=15, kind="reset")
    ch = pair_channels(logs_of([batch("SDR", 5, 5, "a", t=10), reset,
                                batch("SDR", 101, 2, "b", t=20)],
                               [batch("RCVR", 5, 5, "a", t=11),
                                batch("RCVR", 101, 2, "b", t=21)]))["channels"]["C"]
    assert ch["mismatches"] == []
    assert ch["sender"]["resets"][0]["next_seq"] == 100
