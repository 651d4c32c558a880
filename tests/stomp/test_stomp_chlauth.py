"""Client connections the MQ way, end to end: a real server, real STOMP
clients. CHLAUTH records refuse a login by user (BLOCKUSER) and by address
(ADDRESSMAP NOACCESS, BLOCKADDR); the default loopback record, shown by
DISPLAY CHLAUTH, removed makes an anonymous loopback CONNECT fail; MAXINST
refuses the next connection with a clear ERROR frame; DISPLAY CHSTATUS shows a
SVRCONN channel's instances and STOP CHANNEL ends them; MCAUSER makes a
connection act as that user; MAXMSGL limits frames; a changed AUTHINFO
applies after REFRESH SECURITY.

The server here has two listeners: ``STOMP`` on SYSTEM.DEF.SVRCONN and
``APPL`` on APP.SVRCONN (MCAUSER('app')). Tests change rules and put them back.
"""

from __future__ import annotations

import pytest
from support.stomp_helpers import QMServer, RawStomp, expect_error

DEFAULT = "SYSTEM.DEF.SVRCONN"


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = QMServer(tmp_path_factory.mktemp("chlauth") / "hmq", "QC")
    s.create()
    s.configure(listeners=[{"name": "STOMP", "host": "127.0.0.1", "port": 0},
                           {"name": "APPL", "host": "127.0.0.1", "port": 0,
                            "channel": "APP.SVRCONN"}])
    s.start()
    s.user_add("alice", "alicepw")
    s.user_add("bob", "bobpw")
    s.sc("DEFINE CHANNEL(APP.SVRCONN) CHLTYPE(SVRCONN) MCAUSER('app')\n"
         "DEFINE QLOCAL(CA.Q)")
    s.app_port = s.listeners[1]["port"]
    yield s
    s.stop()


def connect(port: int, login=None, passcode=None, source=None) -> tuple[RawStomp, object]:
    c = RawStomp(port, source=source)
    return c, c.connect(login=login, passcode=passcode)


def refused(port: int, *fragments, login=None, passcode=None, source=None):
    c, f = connect(port, login, passcode, source)
    try:
        assert f.command == "ERROR", f"connection was not refused: {f}"
        for frag in fragments:
            assert frag in f["message"], f"{frag!r} not in {f['message']!r}"
        return f
    finally:
        c.close()


def admitted(port: int, login=None, passcode=None, source=None) -> RawStomp:
    c, f = connect(port, login, passcode, source)
    assert f.command == "CONNECTED", f"refused: {f.headers} {f.body!r}"
    return c


def test_default_loopback_record_shown_and_removing_it_refuses_anonymous(srv):
    out = srv.sc("DISPLAY CHLAUTH('*') ALL")
    assert "TYPE(ADDRESSMAP)" in out and "ADDRESS(127.*)" in out and \
        "USERSRC(CHANNEL)" in out and "ADDRESS(::1)" in out, out
    admitted(srv.port).close()
    srv.sc("SET CHLAUTH('*') TYPE(ADDRESSMAP) ADDRESS('127.*') ACTION(REMOVE)")
    try:
        assert "ADDRESS(127.*)" not in srv.sc("DISPLAY CHLAUTH('*')")
        f = refused(srv.port, "2035", "no CHLAUTH record gives it a user id")
        assert "anonymous" in f["message"]
        admitted(srv.port, "alice", "alicepw").close()      # a login still works
    finally:
        srv.sc("SET CHLAUTH('*') TYPE(ADDRESSMAP) ADDRESS('127.*') USERSRC(CHANNEL)")
    admitted(srv.port).close()


def test_blockuser_refuses_a_login(srv):
    srv.sc(f"SET CHLAUTH('{DEFAULT}') TYPE(BLOCKUSER) USERLIST('alice')")
    try:
        refused(srv.port, "2035", "alice", "BLOCKUSER", login="alice", passcode="alicepw")
        admitted(srv.port, "bob", "bobpw").close()
    finally:
        srv.sc(f"SET CHLAUTH('{DEFAULT}') TYPE(BLOCKUSER) ACTION(REMOVEALL)")
    admitted(srv.port, "alice", "alicepw").close()
    assert "HMQ9776E" in (srv.qm_dir / "errors" / "HMQERR01.LOG").read_text()


def test_address_records_refuse_by_address(srv):
    srv.sc("SET CHLAUTH('*') TYPE(ADDRESSMAP) ADDRESS('127.0.0.2') USERSRC(NOACCESS)\n"
           "SET CHLAUTH('*') TYPE(BLOCKADDR) ADDRLIST('127.0.0.3')")
    try:
        # the more specific address wins over the default 127.* record
        refused(srv.port, "2035", "NOACCESS", login="alice", passcode="alicepw",
                source="127.0.0.2")
        refused(srv.port, "2059", "BLOCKADDR", source="127.0.0.3")
        admitted(srv.port, "alice", "alicepw", source="127.0.0.4").close()
        admitted(srv.port, "alice", "alicepw").close()
        run = srv.sc(f"DISPLAY CHLAUTH({DEFAULT}) MATCH(RUNCHECK) ADDRESS('127.0.0.2')")
        assert "ADDRESS(127.0.0.2)" in run and "USERSRC(NOACCESS)" in run, run
    finally:
        srv.sc("SET CHLAUTH('*') TYPE(ADDRESSMAP) ADDRESS('127.0.0.2') ACTION(REMOVE)\n"
               "SET CHLAUTH('*') TYPE(BLOCKADDR) ACTION(REMOVEALL)")
    admitted(srv.port, source="127.0.0.2").close()


def test_maxinst_refuses_the_next_connection_and_chstatus_shows_instances(srv):
    srv.sc(f"ALTER CHANNEL({DEFAULT}) MAXINST(2)")
    held = []
    try:
        held = [admitted(srv.port, "alice", "alicepw"), admitted(srv.port)]
        refused(srv.port, "2537", "MAXINST(2)", login="bob", passcode="bobpw")
        status = srv.sc(f"DISPLAY CHSTATUS({DEFAULT}) ALL")
        assert status.count("CHLTYPE(SVRCONN)") == 2 and "MCAUSER(alice)" in status, status
        held.pop().close()
        c = None
        for _ in range(100):                 # the server sees the close a moment later
            c, f = connect(srv.port, "bob", "bobpw")
            if f.command == "CONNECTED":
                break
            c.close()
        assert f.command == "CONNECTED", f
        held.append(c)
        out = srv.sc(f"STOP CHANNEL({DEFAULT})")
        assert "2 connection(s) ended" in out, out
        for h in held:
            expect_error(h, "STOP CHANNEL")
        refused(srv.port, "2537", "stopped", login="bob", passcode="bobpw")
        srv.sc(f"START CHANNEL({DEFAULT})")
        admitted(srv.port, "bob", "bobpw").close()
    finally:
        for h in held:
            h.close()
        srv.sc(f"START CHANNEL({DEFAULT})\nALTER CHANNEL({DEFAULT}) MAXINST(999999999)")


def test_mcauser_makes_a_connection_act_as_that_user(srv):
    c = admitted(srv.app_port)                # anonymous, on APP.SVRCONN: acts as app
    try:
        conns = srv.sc("DISPLAY CONN(*) WHERE(USERID EQ 'app')")
        assert "USERID(app)" in conns, conns
        c.send("SEND", {"destination": "/queue/CA.Q", "receipt": "r1"}, b"x")
        expect_error(c, "2035", "app")
    finally:
        c.close()
    srv.sc("SET AUTHREC PROFILE(CA.Q) OBJTYPE(QUEUE) PRINCIPAL('app') AUTHADD(PUT)")
    c = admitted(srv.app_port, "alice", "alicepw")   # the channel's MCAUSER wins
    try:
        c.send("SEND", {"destination": "/queue/CA.Q", "receipt": "r2"}, b"y")
        f = c.recv()
        assert f.command == "RECEIPT", f
    finally:
        c.close()


def test_maxmsgl_limits_frames(srv):
    srv.sc("ALTER CHANNEL(APP.SVRCONN) MAXMSGL(1000)")
    try:
        c = admitted(srv.app_port)
        c.send("SEND", {"destination": "/queue/CA.Q"}, b"z" * 40_000)
        expect_error(c)
    finally:
        srv.sc("ALTER CHANNEL(APP.SVRCONN) MAXMSGL(4194304)")


def test_a_changed_authinfo_applies_after_refresh_security(srv):
    srv.sc("DEFINE AUTHINFO(STRICT.IDPW) AUTHTYPE(IDPWOS) CHCKCLNT(REQUIRED)\n"
           "ALTER QMGR CONNAUTH(STRICT.IDPW)")
    try:
        admitted(srv.port).close()            # not yet in force
        out = srv.sc("REFRESH SECURITY TYPE(CONNAUTH)")
        assert "STRICT.IDPW CHCKCLNT(REQUIRED)" in out, out
        refused(srv.port, "2035", "required")
        admitted(srv.port, "alice", "alicepw").close()
    finally:
        srv.sc("ALTER QMGR CONNAUTH('SYSTEM.DEFAULT.AUTHINFO.IDPWOS')\n"
               "REFRESH SECURITY TYPE(CONNAUTH)\nDELETE AUTHINFO(STRICT.IDPW)")
    admitted(srv.port).close()
