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
