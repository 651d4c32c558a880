"""Client-connection security as a full citizen of recovery: SVRCONN
channels, AUTHINFO objects and CHLAUTH records (a removed default record
too) are written back by dump-config (CHLAUTH as SET CHLAUTH) and replayed
into an empty queue manager with the same definitions; media images and
recreate take them by type (``--type channel|authinfo``); a backup restored
on another home keeps them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from support.procs import child_env, hmq
from support.stomp_helpers import QMServer

from harbormq.config import QMConfig
from harbormq.unload.definitions import definitions

SETUP = """DEFINE CHANNEL(APP.SVRCONN) CHLTYPE(SVRCONN) MCAUSER('app') MAXINST(5) MAXINSTC(2)
DEFINE AUTHINFO(APP.IDPW) AUTHTYPE(IDPWOS) CHCKCLNT(REQUIRED) DESCR('it''s strict')
ALTER QMGR CONNAUTH(APP.IDPW)
SET CHLAUTH('APP.*') TYPE(BLOCKUSER) USERLIST('nobody', *MQADMIN)
SET CHLAUTH(APP.SVRCONN) TYPE(USERMAP) CLNTUSER('alice') USERSRC(MAP) MCAUSER('app') +
    ADDRESS('10.1.2.*') DESCR('alice as app')
SET CHLAUTH('*') TYPE(BLOCKADDR) ADDRLIST('192.168.9.1-20', '10.9.*')
SET CHLAUTH('*') TYPE(ADDRESSMAP) ADDRESS('::1') ACTION(REMOVE)"""


def comparable(config) -> dict:
    return {name: (d["type"], d["attrs"]) for name, d in definitions(config).items()}


def test_dump_config_writes_security_back_and_a_replay_gives_the_same(tmp_path):
    a = QMServer(tmp_path / "a", "QD").create(log_type="linear")
    b = QMServer(tmp_path / "b", "QD").create()
    a.start()
    try:
        a.sc(SETUP)
        script = a.cli("dump-config", "QD").stdout
        [chl] = [line for line in script.splitlines()
                 if line.startswith("DEFINE CHANNEL('APP.SVRCONN')")]
        assert "CHLTYPE('SVRCONN')" in chl and "MAXINSTC(2)" in chl, script
        assert "DEFINE AUTHINFO('APP.IDPW')" in script and "CONNAUTH('APP.IDPW')" in script
        assert "SET CHLAUTH('APP.*') TYPE(BLOCKUSER) USERLIST('nobody','*MQADMIN') " \
               "ACTION(REPLACE)" in script, script
        assert "ADDRESS('::1')" not in script
        # media images and recreate by type
        out = a.cli("image", "QD", "--type", "channel").stdout + \
            a.cli("image", "QD", "APP.*", "--type", "authinfo").stdout
        assert "APP.SVRCONN" in out and "APP.IDPW" in out, out
        r = a.cli("recreate", "QD", "--type", "authinfo", "--dry-run", check=False)
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        a.stop()
    b.start()
    try:
        # the queue manager replayed into is new: its default ::1 record goes first
        out = b.sc("SET CHLAUTH('*') TYPE(ADDRESSMAP) ADDRESS('::1') ACTION(REMOVE)\n" + script)
        assert "All valid MQSC commands were processed" in out, out
    finally:
        b.stop()
    assert comparable(QMConfig.load("QD", a.home)) == comparable(QMConfig.load("QD", b.home))


def test_a_restored_backup_keeps_the_records(tmp_path):
    srv = QMServer(tmp_path / "h1", "QB").create()
    srv.start()
    try:
        srv.sc(SETUP)
        before = srv.sc("DISPLAY CHLAUTH(*) ALL\nDISPLAY AUTHINFO(*) ALL\n"
                        "DISPLAY CHANNEL(APP.SVRCONN) ALL")
        res = json.loads(srv.cli("backup", "QB", "--to", str(tmp_path / "bk"),
                                 "--json").stdout)
    finally:
        srv.stop()
    shutil.rmtree(srv.home)
    home2 = tmp_path / "h2"
    home2.mkdir()
    hmq(child_env(home2), "restore", "QB", "--from", str(Path(res["path"])), "--port", "0")
    again = QMServer(home2, "QB")
    again.start()
    try:
        after = again.sc("DISPLAY CHLAUTH(*) ALL\nDISPLAY AUTHINFO(*) ALL\n"
                         "DISPLAY CHANNEL(APP.SVRCONN) ALL")
    finally:
        again.stop()
    strip = [line for line in before.splitlines() if "MQSC" not in line]
    assert strip == [line for line in after.splitlines() if "MQSC" not in line]
    assert "TYPE(BLOCKADDR)" in after and "ADDRESS(::1)" not in after
