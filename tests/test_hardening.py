"""Defects found at the edges (issue 10 §1), each with the test that failed
before its fix: hostile names, a stop that could signal every process, files
readable by others, an admin request limit, heart-beat timers piling up."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from stomp_helpers import PYTHON, QMServer, RawStomp

from harbormq import QueueManager
from harbormq.errors import InvalidAttribute
from harbormq.fsutil import file_name, name_of_file
from harbormq.qmgr import lifecycle as qmgr
from harbormq.stomp.frames import Limits
from harbormq.stomp.transport import FrameTransport

# -- names ---------------------------------------------------------------------------------


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
            ["SYSTEM.DEAD.LETTER.QUEUE", "SYSTEM.DEFAULT.LOCAL.QUEUE"]
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


# -- stop --preemptive ---------------------------------------------------------------------


def test_preemptive_stop_never_signals_a_process_it_cannot_prove(make_qm, home, python_env):
    """A lock held with a pid file that is not a number once became kill(-1)."""
    make_qm()
    qm = QueueManager.open("QM1", home=home)       # this process holds the lock
    try:
        lock = home / "qmgrs" / "QM1" / "qm.lock"
        lock.write_text("not-a-pid\n")
        r = subprocess.run([PYTHON, "-m", "harbormq", "stop", "QM1", "--preemptive"],
                           env=python_env, capture_output=True, text=True, timeout=60)
        said = " ".join((r.stdout + r.stderr).split())      # (the console wraps lines)
        assert r.returncode != 0
        assert "HMQ8027E" in said and "nothing was killed" in said
        config = qm.config
        assert not qmgr.is_instance(config, -1) and not qmgr.is_instance(config, os.getpid())
    finally:
        qm.close("immediate")


# -- private files -------------------------------------------------------------------------


def test_everything_under_the_queue_manager_is_private(make_qm, open_qm, home):
    make_qm()
    qm = open_qm()
    qm.define_queue("SECRET", DEFPSIST="YES")
    qm.put("SECRET", b"a message body")
    qm.checkpoint()
    qm.close()
    found = []
    for top in (home / "qmgrs" / "QM1", home / "log" / "QM1"):
        for root, _dirs, files in os.walk(top):
            for p in [root, *(os.path.join(root, f) for f in files)]:
                mode = stat.S_IMODE(os.stat(p).st_mode)
                if mode & 0o077:
                    found.append(f"{p} {oct(mode)}")
    assert not found, found


# -- the admin socket ----------------------------------------------------------------------


def test_mqsc_scripts_of_any_size_and_a_clear_error_past_the_limit(tmp_path):
    srv = QMServer(tmp_path / "hmq", "QS").create()
    srv.start()
    try:
        script = "\n".join(f"DEFINE QLOCAL(BULK.{i:05d}) DESCR('{'x' * 40}')"
                           for i in range(2500))
        assert len(script) > 64 * 1024
        srv.sc(script)
        assert "BULK.02499" in srv.sc("DISPLAY QLOCAL(BULK.02499)")
        from types import SimpleNamespace

        from harbormq.admin.client import request
        target = SimpleNamespace(name="QS", admin_socket=srv.qm_dir / "admin.sock")
        reply = request(target, {"cmd": "mqsc", "text": "*" * (65 << 20)}, timeout=60)
        assert reply["ok"] is False and "HMQ8148E" in reply["error"]
        assert "QS" in srv.sc("DISPLAY QMGR")      # and the queue manager serves on
    finally:
        srv.stop()


# -- heart-beats ---------------------------------------------------------------------------


def test_heart_beat_timers_do_not_pile_up():
    """Each period once added a timer handle that was never dropped."""
    class Quiet(FrameTransport):
        def _send(self, data: bytes) -> None:
            self.last_send = 0.0

    async def run() -> int:
        t = Quiet(asyncio.get_running_loop(), Limits(1 << 20, 100, 8192))
        t._beat(5)
        t._check_alive(1000)
        await asyncio.sleep(0.3)
        n = len(t._timers)
        for h in t._timers.values():
            h.cancel()
        return n
    assert asyncio.run(run()) <= 3


# -- qm.toml -------------------------------------------------------------------------------

BAD_CONFIGS = [
    ("log = 5\n", "log must be a table"),
    ("[image]\ninterval_minutes = 'x'\n", "image.interval_minutes = 'x' is not a number"),
    ("[tuning]\nflush_interval_ms = 'abc'\n", "tuning.flush_interval_ms = 'abc' is not a whole"),
    ("[tuning]\nflush_interval_ms = -1\n", "tuning.flush_interval_ms = -1 is out of range"),
    ("[tuning]\nflush_max_entries = 0\n", "tuning.flush_max_entries = 0 is out of range"),
    ("[tuning]\nstore_map_size_mb = 0\n", "tuning.store_map_size_mb = 0 is out of range"),
    ("[[listeners]]\nport = 'abc'\n", "listeners[0].port = 'abc' is not a whole number"),
    ("[nonsense]\nx = 1\n", "unknown key(s) nonsense"),
    ("[stomp]\nmax_frame = 1\n", "unknown key stomp.max_frame"),
    ("[stomp]\nconnauth = 'sometimes'\n", "stomp.connauth = 'sometimes' is not one of"),
    ("[log]\ntype = 'spiral'\n", "log.type = 'spiral' is not one of"),
    ("[log]\nfile_pages = 3\n", "out of range"),
]


@pytest.mark.parametrize("text,said", BAD_CONFIGS, ids=[s for _, s in BAD_CONFIGS])
def test_bad_qm_toml_is_named_key_and_file(make_qm, home, text, said):
    from harbormq.config import QMConfig
    from harbormq.errors import ConfigError
    make_qm()
    path = home / "qmgrs" / "QM1" / "qm.toml"
    path.write_text('name = "QM1"\n' + text)
    with pytest.raises(ConfigError) as info:
        QMConfig.load("QM1", home)
    assert said in info.value.message and str(path) in info.value.message


def test_an_empty_or_misnamed_qm_toml_is_refused(make_qm, home):
    from harbormq.config import QMConfig
    from harbormq.errors import ConfigError
    make_qm()
    path = home / "qmgrs" / "QM1" / "qm.toml"
    for text in ("", 'name = "OTHER"\n'):
        path.write_text(text)
        with pytest.raises(ConfigError, match="does not match the queue manager's directory"):
            QMConfig.load("QM1", home)


_toml_values = st.recursive(
    st.one_of(st.integers(-2**40, 2**40), st.floats(allow_nan=False), st.booleans(),
              st.text(max_size=10)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=3),
    max_leaves=8)
_known_keys = st.sampled_from(["log", "tuning", "image", "listeners", "stomp", "type", "port",
                               "flush_interval_ms", "file_pages", "schedule", "connauth",
                               "heartbeat_ms", "x"])


@given(st.dictionaries(_known_keys | st.text(max_size=6), _toml_values, max_size=5))
def test_any_qm_toml_loads_or_fails_with_a_config_error(tmp_path_factory, data):
    """Fuzzed qm.toml (of any shape): a checked config or ConfigError, nothing else."""
    import tomli_w

    from harbormq.config import QMConfig
    from harbormq.errors import ConfigError
    home = tmp_path_factory.mktemp("fuzz")
    d = home / "qmgrs" / "QM1"
    d.mkdir(parents=True)
    try:
        text = tomli_w.dumps({"name": "QM1", **data})
    except (TypeError, ValueError):
        return
    (d / "qm.toml").write_text(text)
    try:
        QMConfig.load("QM1", home)
    except ConfigError:
        pass
