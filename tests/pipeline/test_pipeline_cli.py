"""The pipeline commands as an operator runs them: usage errors before Spark
starts, and an error raised on an executor turned into one operator message."""

from __future__ import annotations

import subprocess
import sys

from support.pipeline_logbuilder import LogBuilder

from harbormq.cli import main as harbormq_main
from harbormq.pipeline.cli import main


def test_usage_errors_name_what_is_wrong(capsys, tmp_path):
    assert main(["rebuild", "--log", str(tmp_path), "--out", str(tmp_path / "o")]) == 1
    assert "HMQ7602E: give exactly one of --at-lsn and --at-time" in capsys.readouterr().err
    assert main(["rebuild", "--log", "a", "--lake", "b", "--at-lsn", "1", "--out", "o"]) == 1
    assert "give exactly one of --log and --lake" in capsys.readouterr().err
    assert harbormq_main(["pipeline", "ingest", "--log", str(tmp_path)]) == 1
    assert "ingest needs --log and --lake" in capsys.readouterr().err


def test_corruption_found_on_an_executor_is_one_operator_message(tmp_path, python_env):
    lb = LogBuilder(tmp_path / "log", pages=2)
    lb.define("Q", 1)
    for _ in range(80):
        lb.put("Q", 1, lb.message(1, body=b"z" * 200))
    lb.close()
    victim = tmp_path / "log" / "S0000002.LOG"
    raw = bytearray(victim.read_bytes())
    raw[4096 + 90] ^= 0x01
    victim.write_bytes(bytes(raw))
    done = subprocess.run([sys.executable, "-m", "harbormq.pipeline", "rebuild", "--log",
                           str(tmp_path / "log"), "--at-lsn", str(lb.lsn), "--out",
                           str(tmp_path / "out"), "--master", "local[1]"],
                          env=python_env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    # our one operator line; Spark's own log lines about the failed task are on
    # stderr too, where the message appears only inside a traceback line
    assert any(line.startswith("HMQ7501E: log extent S0000002.LOG is corrupt at offset 4096 "
                               "(LSN ") for line in done.stderr.splitlines()), done.stderr[-3000:]


def test_load_command_puts_the_file_on_a_queue(tmp_path, make_qm, home, capsys):
    from harbormq import QueueManager
    from harbormq.unload.loadfile import write_load_file
    row = {"msg_id": b"\x07" * 4, "correl_id": b"c", "priority": 6, "persistent": True,
           "expiry_ns": 0, "put_time_ns": 1, "backout_count": 0, "reply_to": "", "format": "",
           "properties_json": '{"n":1}', "body": b"payload"}
    path = tmp_path / "Q.hmqload"
    write_load_file(path, "Q", 10, [row, dict(row, msg_id=b"\x08" * 4, priority=9)])
    make_qm("QM1")
    with QueueManager.open("QM1", home=home) as qm:
        qm.define_queue("TARGET", DEFPSIST="YES")
    assert harbormq_main(["pipeline", "load", "--qm", "QM1", "--queue", "TARGET", "--file",
                          str(path), "--home", str(home)]) == 0
    assert '"loaded": 2' in capsys.readouterr().out
    with QueueManager.open("QM1", home=home) as qm:
        got = [qm.get("TARGET"), qm.get("TARGET")]
    assert [m.msg_id for m in got] == [b"\x08" * 4, b"\x07" * 4]     # priority 9 first
    assert got[1].properties == {"n": 1} and got[1].body == b"payload" and got[1].persistent
