"""Who may connect and what they may do: logins and passwords, authority
records (refused, then granted), the administrators' group, a user added while
the queue manager runs, an anonymous connection acting as the OS user at the
other end of the loopback socket, and ``connauth = required``.

Not here: which addresses a listener may bind without connauth
(test_stomp_listeners.py).
"""

from __future__ import annotations

import os

import pytest
import stomp
from support.os_users import PEER_USER, ensure_os_user, nameless_user, run_as
from support.stomp_helpers import (
    QMServer,
    RawStomp,
    bodies,
    deadline_wait,
    depth,
    expect_error,
    send_all,
    stomp_client,
    subscribe,
)


def test_wrong_password_refused_with_2035(server, conns):
    for login, pw in [("alice", "wrong"), ("nobody", "x"), ("alice", "")]:
        c = conns.unconnected(server.port)
        f = c.connect(login=login, passcode=pw)
        assert f.command == "ERROR"
        assert "2035" in f["message"]
        c.wait_closed()


def test_a_login_that_looks_like_console_markup_is_refused_as_any_other(server, conns):
    """The operator message naming the login goes to the server's console as it
    is: '[/x]' once raised rich's MarkupError in place of the 2035 refusal."""
    for login in ("[/x]", "[bold]mallory", ":skull:"):
        c = conns.unconnected(server.port)
        f = c.connect(login=login, passcode="wrong")
        assert f.command == "ERROR"
        assert "2035" in f["message"], f["message"]
        c.wait_closed()
        line = f"user {login!r} failed authentication"
        deadline_wait(lambda line=line: line in server.console(),
                      what=f"the refusal of {login!r} on the console, word for word")
    assert conns.raw(server.port, login="root", passcode="rootpw")


def test_password_with_colon_and_backslash_via_stomp_py(server, conns):
    c = conns.stomp(server.port, login="alice", passcode="alice:pass\\word")
    assert c.is_connected()


def test_authority_refusal_then_grant(server, conns):
    server.sc("DEFINE QLOCAL(AUTH.Q)")
    c = conns.raw(server.port, login="alice", passcode="alice:pass\\word")
    c.send("SEND", {"destination": "/queue/AUTH.Q"}, b"x")
    expect_error(c, "2035", "PUT", "AUTH.Q")
    c = conns.raw(server.port, login="alice", passcode="alice:pass\\word")
    c.send("SUBSCRIBE", {"destination": "/queue/AUTH.Q", "id": "1"})
    expect_error(c, "2035", "GET")
    # auto-define needs CRT on the queue manager
    c = conns.raw(server.port, login="alice", passcode="alice:pass\\word")
    c.send("SEND", {"destination": "/queue/AUTH.NEW"}, b"x")
    expect_error(c, "2035")

    server.sc("SET AUTHREC PROFILE(AUTH.Q) OBJTYPE(QUEUE) PRINCIPAL('bob') AUTHADD(PUT)",
              cli=True)                            # through the real 'harbormq sc'
    b = conns.raw(server.port, login="bob", passcode="bobpw")
    send_all(b, "AUTH.Q", ["granted"])
    b.send("SUBSCRIBE", {"destination": "/queue/AUTH.Q", "id": "1"})
    expect_error(b, "2035", "GET")
    server.sc("SET AUTHREC PROFILE('AUTH.*') OBJTYPE(QUEUE) PRINCIPAL('bob') AUTHADD(PUT,GET)")
    server.sc("SET AUTHREC PROFILE(AUTH.Q) OBJTYPE(QUEUE) PRINCIPAL('bob') AUTHADD(GET)")
    b = conns.raw(server.port, login="bob", passcode="bobpw")
    subscribe(b, "AUTH.Q", ack="auto")
    assert bodies(b.messages(1)) == [b"granted"]
    # alice still has nothing
    c = conns.raw(server.port, login="alice", passcode="alice:pass\\word")
    c.send("SUBSCRIBE", {"destination": "/queue/AUTH.Q", "id": "1"})
    expect_error(c, "2035")


def test_admin_group_user_has_every_authority(server, conns):
    c = conns.raw(server.port, login="root", passcode="rootpw")
    send_all(c, "ROOTNEW.Q", ["x"])              # auto-define included
    subscribe(c, "ROOTNEW.Q", ack="auto")
    assert bodies(c.messages(1)) == [b"x"]


def test_user_added_while_running_can_log_in(server, conns):
    server.user_add("late", "latepw")
    c = conns.stomp(server.port, login="late", passcode="latepw")
    assert c.is_connected()
    server.cli("user", "delete", server.name, "late")
    c2 = conns.unconnected(server.port)
    f = c2.connect(login="late", passcode="latepw")
    assert f.command == "ERROR" and "2035" in f["message"]


def _stomp_py_try(port: int, op: str, queue: str, login=None, passcode=None) -> dict:
    """One stomp.py connection that gets one message from ``queue`` (``op`` "get")
    or puts one with a receipt ("put"); what the server answered. Runs in the
    child that ``run_as`` makes, as another OS user."""
    try:
        conn = stomp_client(port, login=login, passcode=passcode)
    except stomp.exception.ConnectFailedException as exc:
        return {"connected": False, "refusal": str(exc)}
    col = conn.col
    if op == "get":
        conn.subscribe(f"/queue/{queue}", id="1", ack="auto")
        col.wait(lambda: col.messages or col.errors, what=f"a message or an ERROR on {queue}")
    else:
        conn.send(f"/queue/{queue}", "from the peer", headers={"receipt": "p1"})
        col.wait(lambda: col.receipts or col.errors, what=f"a RECEIPT or an ERROR on {queue}")
    out = {"connected": True, "uid": os.getuid(), "bodies": [m.body for m in col.messages],
           "receipts": list(col.receipts),
           "errors": [e.headers.get("message", "") for e in col.errors]}
    try:
        conn.disconnect()
    except Exception:
        pass                     # closed by the server after its ERROR
    return out


def test_anonymous_connection_acts_as_the_connecting_os_user(server, conns):
    """The hardening issue's defect: an anonymous loopback connection used to get
    the owner's authority whoever made it. Now it is the OS user at the other
    end: the owner (root, who runs these tests and the server) as before, and
    any other user with only what authority records give that user."""
    peer = ensure_os_user()
    server.sc("DEFINE QLOCAL(PEER.SECRET)\nDEFINE QLOCAL(PEER.MINE)")
    server.user_add("peerapp", "peerpw")
    owner = conns.stomp(server.port)                     # anonymous, as the owner
    owner.send("/queue/PEER.SECRET", "secret", headers={"receipt": "o1"})
    owner.send("/queue/PEER.MINE", "for the peer", headers={"receipt": "o2"})
    owner.col.wait_receipt("o2")
    owner.subscribe("/queue/PEER.SECRET", id="1", ack="client-individual")
    [got] = owner.col.wait_messages(1)
    assert got.body == "secret"                          # the owner reads any queue
    owner.disconnect()                                   # not acknowledged: back on the queue
    deadline_wait(lambda: depth(server, "PEER.SECRET") == 1, what="the secret back")

    # the same anonymous connection from a process of another OS user
    for op, queue, authority in [("get", "PEER.SECRET", "GET"), ("put", "PEER.SECRET", "PUT"),
                                 ("get", "PEER.MINE", "GET"), ("put", "PEER.NEW", "PUT")]:
        r = run_as(peer, _stomp_py_try, server.port, op, queue)
        assert r["connected"] and r["uid"] == peer.pw_uid != os.getuid(), r
        assert r["bodies"] == [] and r["receipts"] == [], r
        [error] = r["errors"]
        assert "2035" in error and authority in error and PEER_USER in error, r
    assert depth(server, "PEER.SECRET") == 1 and depth(server, "PEER.MINE") == 1
    assert "PEER.NEW" not in server.sc("DISPLAY QLOCAL(PEER.*)")

    # exactly what records give that OS user
    server.sc(f"SET AUTHREC PROFILE(PEER.MINE) OBJTYPE(QUEUE) PRINCIPAL('{PEER_USER}') "
              "AUTHADD(GET)")
    r = run_as(peer, _stomp_py_try, server.port, "get", "PEER.MINE")
    assert (r["bodies"], r["errors"]) == (["for the peer"], []), r
    r = run_as(peer, _stomp_py_try, server.port, "get", "PEER.SECRET")
    assert r["bodies"] == [] and "2035" in r["errors"][0], r

    # a login from that process is the harbormq user, granted by its records
    r = run_as(peer, _stomp_py_try, server.port, "get", "PEER.SECRET", "peerapp", "peerpw")
    assert r["bodies"] == [] and "2035" in r["errors"][0] and "peerapp" in r["errors"][0], r
    server.sc("SET AUTHREC PROFILE(PEER.SECRET) OBJTYPE(QUEUE) PRINCIPAL('peerapp') "
              "AUTHADD(GET)")
    r = run_as(peer, _stomp_py_try, server.port, "get", "PEER.SECRET", "peerapp", "peerpw")
    assert (r["bodies"], r["errors"]) == (["secret"], []), r


def _raw_anonymous_connect(port: int) -> dict:
    """An anonymous CONNECT; the server's answer (runs as another uid)."""
    with RawStomp(port) as c:
        f = c.connect()
        return {"uid": os.getuid(), "command": f.command, "headers": f.headers}


def test_anonymous_connection_whose_os_user_cannot_be_identified_is_refused(server):
    """Fail closed: a uid with no user name is nobody the queue manager can check,
    so its anonymous connection is refused, saying to log in (never the owner)."""
    from support.oplog import operator_log
    nameless = nameless_user()
    r = run_as(nameless, _raw_anonymous_connect, server.port)
    assert r["uid"] == nameless.pw_uid
    assert r["command"] == "ERROR", r
    msg = r["headers"]["message"]
    assert msg.startswith("HMQ5540E") and "2035" in msg, msg
    assert f"uid {nameless.pw_uid} has no user name" in msg and "log in" in msg, msg
    entries = [t for m, t in operator_log(server.home, server.name) if m == "HMQ5540E"]
    assert any(f"uid {nameless.pw_uid}" in t for t in entries), entries


# ------------------------------------------------------------------------------ connauth required

@pytest.fixture(scope="module")
def required(tmp_path_factory):
    """connauth required, listening on every interface (allowed only so)."""
    srv = QMServer(tmp_path_factory.mktemp("stompreq") / "hmq", "QR")
    srv.create(connauth="required")
    srv.configure(listeners=[{"name": "ALL", "host": "0.0.0.0", "port": 0,
                              "tls_cert": "", "tls_key": ""}])
    srv.start()
    srv.user_add("carol", "carolpw")
    yield srv
    srv.stop()


def test_connauth_required_refuses_anonymous(required, conns):
    c = conns.unconnected(required.port)
    f = c.connect()
    assert f.command == "ERROR" and "2035" in f["message"]
    c.wait_closed()
    with pytest.raises(stomp.exception.ConnectFailedException):
        stomp_client(required.port)
    ok = conns.stomp(required.port, login="carol", passcode="carolpw")
    assert ok.is_connected()
    c = conns.unconnected(required.port)
    assert c.connect(login="carol", passcode="bad").command == "ERROR"
