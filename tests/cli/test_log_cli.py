"""``harbormq log archive | archived | delete | scrub`` and the archive columns of
``log map`` and ``log need``, run as real processes: against a running queue
manager (through its admin socket) and a stopped one (on its control file,
under its instance lock). Linear logs of 32-page extents, written in-process
before the commands run (support/log_extents.py)."""

from __future__ import annotations

import json

from click.testing import CliRunner
from support.log_extents import blocks, one_line, pin_media_point, write_extents
from support.oplog import operator_log
from support.procs import hmq
from support.stomp_helpers import QMServer

from harbormq import QueueManager
from harbormq.cli.main import cli
from harbormq.config import QMConfig
from harbormq.errors import ConfigError, ObjectError, QueueManagerRunning
from harbormq.log import archive
from harbormq.log.inspect import log_map as read_log_map
from harbormq.log.records import extent_file_name


def log_map(home, qm: str) -> dict:
    """What ``log map --json`` prints, read here (the commands under test run
    as processes; reading the control file needs none)."""
    return read_log_map(QMConfig.load(qm, home))


def full_extents(m: dict) -> list[str]:
    return [e["extent"] for e in m["extents"] if e["state"] == "full"]


def extent(m: dict, name: str) -> dict:
    return next(e for e in m["extents"] if e["extent"] == name)


def next_name(name: str) -> str:
    return extent_file_name(int(name[1:8]) + 1)


def table_row(text: str, name: str) -> list[str]:
    """The cells of the row of extent ``name`` in a rich table."""
    line = next(line for line in text.splitlines()
                if line.startswith("│") and f" {name} " in line)
    return [c.strip() for c in line.strip("│ ").split("│")]


def manifest_names(arch, qm: str) -> list[str]:
    return [e.name for e, _ in archive.read_manifest(archive.archive_dir(arch, qm))]


def create_linear(make_qm, qm: str, **options) -> None:
    make_qm(qm, log_type="linear", log_file_pages=32, port=0, **options)


def test_log_archive_while_running_and_scrub_of_a_damaged_copy(home, make_qm, tmp_path):
    arch = tmp_path / "arch"
    srv = QMServer(home, "QS")
    create_linear(make_qm, "QS", log_management="archive", log_archive_paths=[arch])
    write_extents(home, "QS")
    srv.start()
    try:
        active = log_map(home, "QS")["current_extent"]
        out = one_line(srv.cli("log", "archive", "QS").stdout)
        assert f"HMQ7480I Log extent {active} closed and ready for archive; " \
               f"{next_name(active)} is now the current extent." in out, out
        assert "HMQ7481I" in out and str(arch) in out
        m = log_map(home, "QS")
        full = full_extents(m)
        assert m["current_extent"] == next_name(active) and active in full
        assert all(extent(m, n)["archived"] for n in full), m["extents"]
        assert manifest_names(arch, "QS") == full, "every closed extent, oldest first"
        text = srv.cli("log", "map", "QS").stdout
        assert "ARCHIVED" in text and "DELETED" in text
        assert table_row(text, active)[-2:] == ["yes", "no"]        # archived, not deleted
        assert table_row(text, m["current_extent"])[-2:] == ["no", "no"]

        scrub = srv.cli("log", "scrub", "QS")                       # while running
        assert f"HMQ7485I Archive {archive.archive_dir(arch, 'QS')}: {len(full)} extent(s)" \
            in one_line(scrub.stdout) and "all good" in scrub.stdout
        victim = archive.archive_dir(arch, "QS") / full[1]
        data = bytearray(victim.read_bytes())
        data[len(data) // 2] ^= 0x01
        victim.write_bytes(bytes(data))
        bad = srv.cli("log", "scrub", "QS", check=False)
        assert bad.returncode == 1, bad.stdout
        assert f"{victim} fails its SHA-256" in one_line(bad.stdout + bad.stderr)
        assert "HMQ7486E" in bad.stdout and "HMQ7486E" in bad.stderr
    finally:
        srv.stop()
    # stopped: scrub reads only the archive
    again = srv.cli("log", "scrub", "QS", "--json", check=False)
    assert again.returncode == 1
    [report] = json.loads(again.stdout)
    assert report["extents"] == 1 and str(victim) in report["bad"], report


def test_log_delete_while_running_refuses_a_needed_extent_and_deletes_older_ones(home,
                                                                                 make_qm):
    """Manual mode: nothing is deleted until the operator says so, and an extent
    never archived goes with a warning."""
    srv = QMServer(home, "QS")
    create_linear(make_qm, "QS")
    pin_media_point(home, "QS")
    srv.start()
    try:
        m = log_map(home, "QS")
        names, media = full_extents(m), m["media_extent"]
        i = names.index(media)
        assert i >= 2 and len(names) > i + 1, (names, media)
        refused = srv.cli("log", "delete", "QS", "--through", media, check=False)
        assert refused.returncode == 1
        assert f"HMQ8147E: log extent {media} cannot be deleted: restart or media recovery " \
               f"still needs it (harbormq log need); {i} older extent(s) could be" \
               in one_line(refused.stderr), refused.stderr
        log_dir = home / "log" / "QS"
        assert all((log_dir / n).exists() for n in names), "a refusal deletes nothing"

        done = srv.cli("log", "delete", "QS", "--through", names[i - 1])
        assert f"HMQ7482I Log extent(s) {', '.join(names[:i])} deleted" \
            in one_line(done.stdout), done.stdout
        assert f"HMQ7483W Log extent(s) {', '.join(names[:i])} were deleted without ever " \
               "being archived" in one_line(done.stderr), done.stderr
        assert not any((log_dir / n).exists() for n in names[:i])
        assert all((log_dir / n).exists() for n in names[i:])
        said = [msgid for msgid, _ in operator_log(home, "QS")]
        assert "HMQ7482I" in said and "HMQ7483W" in said

        shown = {b["EXTENT"]: b for b in blocks(srv.sc("DISPLAY LOG"), "HMQ8323I")}
        assert shown[names[0]]["DELETED"] == "YES" and shown[names[0]]["ONDISK"] == "NO"
        assert shown[media]["DELETED"] == "NO" and shown[media]["NEEDED"] == "MEDIA"
        need = srv.cli("log", "need", "QS").stdout
        assert table_row(need, names[0])[-3:] == ["no", "no", "yes"]   # on disk, arch, del
        assert table_row(need, media)[-3:] == ["yes", "no", "no"]

        marked = srv.cli("log", "archived", "QS", media.lower())
        assert f"HMQ7481I Log extent {media} marked archived." in one_line(marked.stdout)
        assert extent(log_map(home, "QS"), media)["archived"]
        bad = srv.cli("log", "archived", "QS", "S0000999.LOG", check=False)
        assert bad.returncode == 1 and "HMQ8147E: log extent S0000999.LOG is not in the log" \
            in one_line(bad.stderr), bad.stderr
    finally:
        srv.stop()


def test_log_archive_archived_and_delete_with_the_queue_manager_stopped(home, make_qm,
                                                                         python_env, tmp_path):
    arch = tmp_path / "arch"
    run = lambda *a, **kw: hmq(python_env, *a, **kw)              # noqa: E731
    create_linear(make_qm, "QO", log_archive_paths=[arch])       # manual mode
    pin_media_point(home, "QO")
    m = log_map(home, "QO")
    names, media, active = full_extents(m), m["media_extent"], m["current_extent"]
    i = names.index(media)
    assert i >= 2, (names, media)

    refused = run("log", "delete", "QO", "--through", media, check=False)
    assert refused.returncode == 1 and "still needs it" in one_line(refused.stderr)
    done = run("log", "delete", "QO", "--through", names[i - 1])
    assert f"HMQ7482I Log extent(s) {', '.join(names[:i])} deleted" in one_line(done.stdout)
    assert "HMQ7483W" in done.stderr
    log_dir = home / "log" / "QO"
    assert not any((log_dir / n).exists() for n in names[:i])

    out = one_line(run("log", "archive", "QO").stdout)
    assert f"HMQ7481I Log extent(s) {', '.join(names[i:])} archived to {arch}." in out, out
    assert f"the active extent {active} stays open" in out
    m = log_map(home, "QO")
    assert m["current_extent"] == active, "no switch without the queue manager"
    assert [n for n in names if extent(m, n)["archived"]] == names[i:]
    assert all(extent(m, n)["deleted"] for n in names[:i])
    assert manifest_names(arch, "QO") == names[i:]
    again = one_line(run("log", "archive", "QO").stdout)
    assert "HMQ7481I Every closed log extent was already archived" in again

    run("log", "archived", "QO", names[0])          # an external copy of a deleted extent
    assert extent(log_map(home, "QO"), names[0])["archived"]
    active_refused = run("log", "archived", "QO", active, check=False)
    assert active_refused.returncode == 1
    assert f"log extent {active} is active, not closed" in one_line(active_refused.stderr)
    # the operator log says it too (nothing wrote these before the commands ran)
    said = {msgid for msgid, _ in operator_log(home, "QO")}
    assert {"HMQ7481I", "HMQ7482I", "HMQ7483W"} <= said

    with QueueManager.open("QO", home=home) as qm:  # it starts, and keeps its messages
        assert [msg.body for msg in qm.browse("KEEP")] == [b"kept"]


def test_log_commands_name_what_is_wrong(make_qm, open_qm, tmp_path):
    """The refusals, in-process (the commands above show the exit status and
    message of a real process)."""
    runner = CliRunner()

    def refused(*args, error=ObjectError):
        r = runner.invoke(cli, ["log", *args])
        assert isinstance(r.exception, error), (args, r.output, r.exception)
        return one_line(str(r.exception))

    make_qm("QC", log_file_pages=32)                                  # circular
    for args in (("archive", "QC"), ("archived", "QC", "S0000000.LOG"),
                 ("delete", "QC", "--all")):
        assert "needs a linear log: the log of queue manager QC is circular" \
            in refused(*args), args
    create_linear(make_qm, "QL")
    assert "queue manager QL has no log archive path (set log.archive_path in qm.toml" \
        in refused("archive", "QL", error=ConfigError)
    assert "no log archive path" in refused("scrub", "QL", error=ConfigError)
    usage = runner.invoke(cli, ["log", "delete", "QL"])
    assert usage.exit_code == 2 and "--through EXTENT" in usage.output
    qm = open_qm("QL")              # open in-process: the lock is held, no admin socket
    assert "holds its lock but does not answer" in refused("delete", "QL", "--all",
                                                           error=QueueManagerRunning)
    qm.close()
    assert "S0000999.LOG is not in the log of queue manager QL" in refused(
        "delete", "QL", "--through", "S0000999.LOG")
