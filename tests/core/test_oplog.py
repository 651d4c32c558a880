"""The operator log rotates like MQ's AMQERR01..03 and keeps one message id per entry."""

from __future__ import annotations

from harbormq.core.operator_log import OperatorLog


def test_entries_have_time_and_id_and_rotate_through_three_files(tmp_path):
    log = OperatorLog(tmp_path, max_bytes=400)
    for i in range(40):
        log.emit("HMQ7467I", f"entry {i} with a line\nbreak")
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["HMQERR01.LOG", "HMQERR02.LOG", "HMQERR03.LOG"]
    newest = (tmp_path / "HMQERR01.LOG").read_text().splitlines()
    assert newest[-1].split(" ", 2)[1:] == ["HMQ7467I", "entry 39 with a line break"]
    assert all(line.split(" ")[1].startswith("HMQ") for p in tmp_path.iterdir()
               for line in p.read_text().splitlines())
    assert all(p.stat().st_size <= 400 for p in tmp_path.iterdir())
    oldest_kept = int((tmp_path / "HMQERR03.LOG").read_text().split("entry ")[1].split()[0])
    assert oldest_kept > 0, "the oldest entries were dropped, not kept forever"


def test_listeners_see_every_entry(tmp_path):
    seen = []
    log = OperatorLog(tmp_path)
    log.listeners.append(lambda msgid, text: seen.append(msgid))
    log.emit("HMQ7469W", "released")
    assert seen == ["HMQ7469W"] and log.ids() == ["HMQ7469W"]
