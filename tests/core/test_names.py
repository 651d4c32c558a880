"""Names a user gives (queues, queue managers) never reach a file outside
their directory: MQ's name rules, '.' and '..' refused, and one mapping from
names to file names (``fsutil.file_name``). Each test failed before its fix
(issue 10 §1.1: ``DEFINE QLOCAL(..)`` made its store in the queue manager's
own directory, and ``DELETE QLOCAL(..) PURGE`` then removed it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.stomp_helpers import QMServer, RawStomp

from harbormq.errors import InvalidAttribute
from harbormq.fsutil import file_name, name_of_file


@given(st.text(max_size=80))
def test_no_name_maps_to_a_file_outside_its_parent(name):
    parent = Path("/srv/hmq/queues")
    try:
        mapped = file_name(name)
    except ValueError:
        assert name == "" or len(name.encode("utf-8", "surrogatepass")) * 3 > 255
        return
    assert mapped not in ("", ".", "..") and not mapped.startswith(".")
    assert "/" not in mapped and "\0" not in mapped
    assert os.path.normpath(parent / mapped) == str(parent / mapped)
    assert (parent / mapped).parent == parent
    assert name_of_file(mapped) == name          # one name, one file: it decodes back


def test_names_keep_their_directories_where_they_were_safe():
    """Queue stores made before the mapping keep their directories."""
    assert file_name("ORDERS.EU_1") == "ORDERS.EU_1"
    assert file_name("A/B%C") == "A%2FB%25C"     # as queue_dir_name always escaped them
    assert file_name("..") == "%2E."
    assert file_name(".hidden") == "%2Ehidden"


@pytest.mark.parametrize("name", [".", "..", "a" * 49, "", "Q\x00", "Q Q"])
def test_hostile_queue_names_are_refused(make_qm, open_qm, home, name):
    make_qm()
    qm = open_qm()
    with pytest.raises(InvalidAttribute):
        qm.define_queue(name)
    assert (home / "qmgrs" / "QM1" / "qm.toml").exists()
    assert sorted(p.name for p in (home / "qmgrs" / "QM1" / "queues").iterdir()) == \
        ["SYSTEM.DEAD.LETTER.QUEUE", "SYSTEM.DEFAULT.LOCAL.QUEUE"]


def test_a_legal_name_that_reads_like_a_path_stays_in_its_directory(make_qm, open_qm, home):
    """'../x' is a valid MQ queue name ('.' and '/' are allowed characters): its
    store is a directory inside queues/, nothing else."""
    make_qm()
    qm = open_qm()
    qm.define_queue("../x", DEFPSIST="YES")
    qm.put("../x", b"kept")
    qm.checkpoint()
    assert (home / "qmgrs" / "QM1" / "queues" / "%2E.%2Fx" / "data.mdb").exists()
    assert sorted(p.name for p in (home / "qmgrs").iterdir()) == ["QM1"]
    qm.delete_queue("../x", purge=True)
    assert (home / "qmgrs" / "QM1" / "qm.toml").exists()


def test_define_and_delete_of_dotdot_leaves_the_queue_manager_whole(tmp_path):
    """DEFINE QLOCAL(..) once made its store in the queue manager's directory, and
    DELETE QLOCAL(..) PURGE then removed the queue manager."""
    srv = QMServer(tmp_path / "hmq", "QN").create()
    srv.start()
    try:
        out = srv.sc("DEFINE QLOCAL(..)\nDELETE QLOCAL(..) PURGE", check=False)
        assert "not valid" in out
        assert srv.config_path.exists() and (srv.qm_dir / "qmgr").is_dir()
        with RawStomp(srv.port) as c:
            c.connect()
            c.send("SEND", {"destination": "/queue/..", "receipt": "r"}, b"x")
            frame = c.expect("ERROR")
            assert "not valid" in frame.headers["message"]
        assert sorted(p.name for p in (srv.qm_dir / "queues").iterdir()) == \
            ["SYSTEM.CHANNEL.SYNCQ", "SYSTEM.DEAD.LETTER.QUEUE", "SYSTEM.DEFAULT.LOCAL.QUEUE",
             "SYSTEM.DURABLE.SUBSCRIBER.QUEUE", "SYSTEM.RETAINED.PUB.QUEUE"]
    finally:
        srv.stop()


def test_queue_manager_names_cannot_reach_another_directory(tmp_path):
    srv = QMServer(tmp_path / "hmq", "QM1").create()
    dot = srv.cli("create", ".", check=False)
    assert dot.returncode != 0 and "not valid" in dot.stdout + dot.stderr
    nested = srv.cli("create", "a/b", "--port", "0", check=False)
    assert nested.returncode == 0, nested.stdout + nested.stderr
    assert (srv.home / "qmgrs" / "a%2Fb" / "qm.toml").exists()
    assert not (srv.home / "qmgrs" / "a").exists()
    status = srv.cli("status").stdout
    assert "a/b" in status and "QM1" in status
    srv.cli("delete", "a/b")
    assert srv.config_path.exists() and "a/b" not in srv.cli("status").stdout


@pytest.mark.parametrize("name", ["stomp12-ack-id", "a-b-c", "orders.eu-west_1", "x-"])
def test_stomp_names_with_hyphens_are_valid(name):
    """Hyphens, as STOMP applications name their queues (issue 31), and the
    directory keeps them as they are."""
    from harbormq.core.objects import check_name
    assert check_name(name) == name and file_name(name) == name


@pytest.mark.parametrize("name", ["-", "-q", "a:b", "CHANNEL:X", "a*", "a#b", "a>b", "a+b",
                                  "a b", "a'b", "a" * 47 + "-" * 2])
def test_names_other_brokers_read_as_wildcards_or_options_are_refused(name):
    from harbormq.core.objects import check_name
    with pytest.raises(InvalidAttribute, match="not valid"):
        check_name(name)


def test_hyphenated_queue_over_stomp_mqsc_restart_and_dump_config(tmp_path):
    """The peer suite's destination, /queue/stomp12-ack-id: defined by MQSC
    (quoted, case kept), used by stomp.py (send, subscribe, ack), one
    auto-defined on first use, both kept over a restart and through a
    dump-config round trip."""
    from support.stomp_helpers import stomp_client
    srv = QMServer(tmp_path / "hmq", "QH").create()
    other = QMServer(tmp_path / "other", "QH").create()
    srv.start()
    try:
        out = srv.sc("DEFINE QLOCAL('stomp12-ack-id') DEFPSIST(YES) MAXDEPTH(50)\n"
                     "SET AUTHREC PROFILE('stomp12-*') OBJTYPE(QUEUE) PRINCIPAL('app') "
                     "AUTHADD(PUT,GET)")
        assert "not valid" not in out
        assert "QUEUE(stomp12-ack-id)" in srv.sc("DISPLAY QLOCAL('stomp12-ack-id')")
        c = stomp_client(srv.port)
        try:
            for i in range(3):
                c.send("/queue/stomp12-ack-id", f"m{i}", headers={"receipt": f"r{i}"})
                c.col.wait_receipt(f"r{i}")
            c.send("/queue/auto-made-q", "kept", headers={"receipt": "auto",
                                                           "persistent": "true"})
            c.col.wait_receipt("auto")
            c.subscribe("/queue/stomp12-ack-id", id="s", ack="client-individual")
            got = c.col.wait_messages(3)
            assert [f.body for f in got] == ["m0", "m1", "m2"]
            assert got[0].headers["destination"] == "/queue/stomp12-ack-id"
            c.ack(got[0].headers["ack"], receipt="acked")
            c.col.wait_receipt("acked")
        finally:
            c.disconnect()
    finally:
        srv.stop()
    assert (srv.qm_dir / "queues" / "stomp12-ack-id").is_dir()
    srv.start()
    try:
        out = srv.sc("DISPLAY QSTATUS('stomp12-ack-id') CURDEPTH\n"
                     "DISPLAY QSTATUS('auto-made-q') CURDEPTH")
        assert out.count("CURDEPTH(2)") == 1 and out.count("CURDEPTH(1)") == 1, out
    finally:
        srv.stop()
    script = srv.cli("dump-config", "QH").stdout
    assert "DEFINE QLOCAL('stomp12-ack-id')" in script and "'auto-made-q'" in script
    assert "PROFILE('stomp12-*')" in script
    other.start()
    try:
        out = other.sc(script)
        assert "All valid MQSC commands were processed" in out, out
        assert "MAXDEPTH(50)" in other.sc("DISPLAY QLOCAL('stomp12-ack-id') MAXDEPTH")
    finally:
        other.stop()
