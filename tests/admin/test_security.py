"""Users (scrypt), authority records with generic profiles, connection authentication."""

from __future__ import annotations

import ipaddress
import json
import os
import pwd
import socket
import stat
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harbormq.errors import ConfigError
from harbormq.security import (
    AuthorityStore,
    InvalidAuthority,
    NotAuthorized,
    PeerUnknown,
    Security,
    SecurityError,
    UnknownUser,
    UserExists,
    UserStore,
    check_listener,
    loopback_peer_uid,
    os_owner,
)
from harbormq.security.authority import profile_matches, specificity
from harbormq.security.peers import (
    ProcTcpEntry,
    endpoint,
    is_loopback,
    parse_proc_net_tcp,
    socket_owner_uid,
)


@pytest.fixture
def users(tmp_path):
    return UserStore(tmp_path / "users.json")


@pytest.fixture
def auth(tmp_path):
    return AuthorityStore(tmp_path / "authrecs.json", owner="qmowner")


# -- users -----------------------------------------------------------------------------

def test_password_is_stored_as_scrypt_hash_and_verified(users):
    users.add("alice", "s3cret", groups=["apps", "apps", "ops"])
    data = json.loads(users.path.read_text())
    entry = data["users"]["alice"]
    assert "s3cret" not in users.path.read_text()
    scheme, n, r, p, salt, digest = entry["hash"].split("$")
    assert (scheme, int(n), int(r), int(p)) == ("scrypt", 16384, 8, 1)
    assert len(bytes.fromhex(salt)) == 16 and len(bytes.fromhex(digest)) == 32
    assert entry["groups"] == ["apps", "ops"]
    assert users.verify("alice", "s3cret")
    assert not users.verify("alice", "S3cret")
    assert not users.verify("alice", "")
    assert not users.verify("bob", "s3cret")
    assert users.groups_of("alice") == ["apps", "ops"]
    assert users.names() == ["alice"]


def test_same_password_gets_different_salts(users):
    users.add("a", "pw")
    users.add("b", "pw")
    data = json.loads(users.path.read_text())["users"]
    assert data["a"]["hash"] != data["b"]["hash"]
    assert users.verify("a", "pw") and users.verify("b", "pw")


def test_users_file_is_mode_0600(users):
    users.add("alice", "pw")
    assert stat.S_IMODE(users.path.stat().st_mode) == 0o600
    users.delete("alice")
    assert stat.S_IMODE(users.path.stat().st_mode) == 0o600
    assert not list(users.path.parent.glob("*.tmp"))


def test_user_errors_are_clear(users):
    users.add("alice", "pw")
    with pytest.raises(UserExists, match="user alice already exists"):
        users.add("alice", "other")
    with pytest.raises(SecurityError, match="password of user bob must not be empty"):
        users.add("bob", "")
    with pytest.raises(SecurityError, match="not valid"):
        users.add("bad name", "pw")
    with pytest.raises(UnknownUser, match="user carol is not defined"):
        users.delete("carol")
    with pytest.raises(UnknownUser):
        users.groups_of("carol")


def test_user_store_sees_changes_made_by_another_process(users):
    other = UserStore(users.path)          # the CLI editing while the server runs
    assert not users.verify("alice", "pw")
    other.add("alice", "pw")
    assert users.verify("alice", "pw")
    other.delete("alice")
    assert not users.verify("alice", "pw")


# -- generic profiles ------------------------------------------------------------------

@pytest.mark.parametrize("profile,name,matches", [
    ("PAY.IN", "PAY.IN", True),
    ("PAY.IN", "PAY.INX", False),
    ("PAY.*", "PAY.IN", True),
    ("PAY.*", "PAY.", True),
    ("PAY.*", "PAY.IN.X", False),         # * stays within one qualifier
    ("PAY.**", "PAY.IN.X", True),
    ("**", "ANYTHING.AT.ALL", True),
    ("*", "Q1", True),
    ("*", "A.B", False),
    ("PAY.?N", "PAY.IN", True),
    ("PAY.?N", "PAY.N", False),
    ("P*Y.IN", "PAY.IN", True),
])
def test_profile_matching(profile, name, matches):
    assert profile_matches(profile, name) is matches


def test_specificity_order():
    ordered = ["PAY.IN", "PAY.I?", "PAY.I*", "PAY.*", "PAY.**", "P*", "**"]
    assert sorted(ordered, key=specificity) == ordered


# -- authority checks ------------------------------------------------------------------

def test_no_record_means_no_authority(auth):
    assert not auth.check("app", [], "QUEUE", "Q1", "PUT")
    assert auth.authorities("app", ["apps"], "QUEUE", "Q1") == set()


def test_owner_and_mqm_members_have_every_authority(auth):
    assert auth.check("qmowner", [], "QUEUE", "Q1", "PUT")
    assert auth.check("qmowner", [], "QMGR", "QM1", "CTRL")
    assert auth.check("admin", ["mqm"], "QUEUE", "ANY", "DLT")
    assert not auth.check("admin", ["staff"], "QUEUE", "ANY", "DLT")


def test_principal_record_and_group_expansion(auth):
    rec = auth.set("ORDERS", "QUEUE", principal="app", add=["PUT", "GET"])
    assert rec.authlist == ["GET", "PUT"]
    assert auth.check("app", [], "QUEUE", "ORDERS", "PUT")
    assert auth.check("app", [], "QUEUE", "ORDERS", "get")
    assert not auth.check("app", [], "QUEUE", "ORDERS", "BROWSE")
    assert not auth.check("app", [], "QUEUE", "OTHER", "PUT")
    assert not auth.check("other", [], "QUEUE", "ORDERS", "PUT")
    rec = auth.set("ORDERS", "QUEUE", principal="app", add=["ALLMQI"], remove=["GET"])
    assert rec.authlist == ["BROWSE", "INQ", "PUT", "SET"]      # CONNECT is not a queue's
    rec = auth.set("ORDERS", "QUEUE", principal="app", remove=["ALL"])
    assert rec.authlist == ["NONE"]
    assert len(auth.records()) == 1   # the record stays, empty


def test_group_records_are_unioned_with_the_principal(auth):
    auth.set("Q.*", "QUEUE", group="readers", add=["GET", "BROWSE"])
    auth.set("Q.*", "QUEUE", group="writers", add=["PUT"])
    assert auth.authorities("u", ["readers", "writers"], "QUEUE", "Q.A") == {
        "GET", "BROWSE", "PUT"}
    assert auth.authorities("u", ["readers"], "QUEUE", "Q.A") == {"GET", "BROWSE"}
    assert auth.authorities("u", ["readers"], "QUEUE", "R.A") == set()


def test_most_specific_profile_wins_for_an_entity(auth):
    auth.set("PAY.**", "QUEUE", principal="app", add=["ALL"])
    auth.set("PAY.*", "QUEUE", principal="app", add=["BROWSE"])
    auth.set("PAY.SECRET", "QUEUE", principal="app", add=["NONE"])
    assert auth.check("app", [], "QUEUE", "PAY.A.B", "DLT")          # only PAY.** matches
    assert auth.authorities("app", [], "QUEUE", "PAY.IN") == {"BROWSE"}   # PAY.* beats PAY.**
    assert auth.authorities("app", [], "QUEUE", "PAY.SECRET") == set()    # exact wins
    # a group's record is judged for the group: it can still grant
    auth.set("PAY.SECRET", "QUEUE", group="auditors", add=["BROWSE"])
    assert auth.authorities("app", ["auditors"], "QUEUE", "PAY.SECRET") == {"BROWSE"}


def test_qmgr_object_type(auth):
    auth.set("QM1", "QMGR", principal="app", add=["CONNECT", "INQ"])
    assert auth.check("app", [], "QMGR", "QM1", "CONNECT")
    assert not auth.check("app", [], "QUEUE", "QM1", "INQ")
    with pytest.raises(InvalidAuthority, match="PUT does not apply to OBJTYPE.QMGR"):
        auth.set("QM1", "QMGR", principal="app", add=["PUT"])
    with pytest.raises(InvalidAuthority, match="unknown authority 'FLY'"):
        auth.set("Q1", "QUEUE", principal="app", add=["FLY"])
    with pytest.raises(SecurityError, match="exactly one of PRINCIPAL and GROUP"):
        auth.set("Q1", "QUEUE", add=["PUT"])
    with pytest.raises(SecurityError, match="OBJTYPE.CHANNEL. is not supported"):
        auth.set("Q1", "CHANNEL", principal="a", add=["PUT"])


def test_records_filter_delete_and_persistence(auth, tmp_path):
    auth.set("Q1", "QUEUE", principal="a", add=["PUT"])
    auth.set("Q.*", "QUEUE", group="g", add=["GET"])
    auth.set("QM1", "QMGR", principal="a", add=["CONNECT"])
    assert len(auth.records()) == 3
    assert [r.profile for r in auth.records(objtype="QUEUE", principal="a")] == ["Q1"]
    assert [r.profile for r in auth.records(profile="Q.*")] == ["Q.*"]
    assert [r.profile for r in auth.records(group="g")] == ["Q.*"]
    assert stat.S_IMODE(auth.path.stat().st_mode) == 0o600
    again = AuthorityStore(auth.path)
    assert again.check("a", [], "QUEUE", "Q1", "PUT")
    removed = auth.delete("Q1", "QUEUE", principal="a")
    assert removed.profile == "Q1"
    assert not auth.check("a", [], "QUEUE", "Q1", "PUT")
    assert not again.check("a", [], "QUEUE", "Q1", "PUT")   # reloaded from disk
    with pytest.raises(SecurityError, match="no authority record for profile Q1"):
        auth.delete("Q1", "QUEUE", principal="a")


def test_check_cache_is_dropped_when_records_change(auth):
    assert not auth.check("a", [], "QUEUE", "Q1", "PUT")
    auth.set("Q1", "QUEUE", principal="a", add=["PUT"])
    assert auth.check("a", [], "QUEUE", "Q1", "PUT")
    auth.set("Q1", "QUEUE", principal="a", remove=["PUT"])
    assert not auth.check("a", [], "QUEUE", "Q1", "PUT")


def test_not_authorized_names_2035(auth):
    with pytest.raises(NotAuthorized) as info:
        auth.require("app", [], "QUEUE", "ORDERS", "PUT")
    exc = info.value
    assert exc.reason == 2035 and exc.msgid == "HMQ2035E"
    assert "2035" in str(exc) and "NOT_AUTHORIZED" in str(exc)
    assert "app" in str(exc) and "ORDERS" in str(exc) and "PUT" in str(exc)
    auth.set("ORDERS", "QUEUE", principal="app", add=["PUT"])
    auth.require("app", [], "QUEUE", "ORDERS", "PUT")


# -- connection authentication -----------------------------------------------------------

LOOP = ("127.0.0.1", 40000)          # an anonymous client's address
US = ("127.0.0.1", 61613)            # the listener's


def test_authenticate(tmp_path):
    sec = Security.for_dir(tmp_path, owner="qmowner", owner_uid=4242,
                           peer_uid=lambda peer, local: 4242)
    sec.users.add("alice", "pw", groups=["apps"])
    p = sec.authenticate("alice", "pw", connauth="required", peer=("10.0.0.5", 5000))
    assert (p.user, p.groups, p.anonymous, p.owner) == ("alice", ("apps",), False, False)
    with pytest.raises(NotAuthorized, match="authentication failed.*2035"):
        sec.authenticate("alice", "bad", connauth="optional", peer=LOOP, local=US)
    anon = sec.authenticate(None, None, connauth="optional", peer=LOOP, local=US)
    assert anon.user == "qmowner" and anon.anonymous and anon.owner
    assert sec.check(anon, "QUEUE", "ANY", "PUT")
    assert not sec.check(p, "QUEUE", "ANY", "PUT")
    with pytest.raises(NotAuthorized, match="2035"):
        sec.authenticate(None, None, connauth="required", peer=LOOP, local=US)
    with pytest.raises(NotAuthorized, match="2035"):
        sec.authenticate("", None, connauth="optional", peer=("192.168.1.9", 5000), local=US)
    sec.authorities.set("Q1", "QUEUE", group="apps", add=["PUT"])
    sec.require(p, "QUEUE", "Q1", "PUT")
    with pytest.raises(NotAuthorized):
        sec.require(p, "QUEUE", "Q1", "GET")


def _other_os_user():
    """An OS user that is not the one running the tests (nobody, usually)."""
    for e in pwd.getpwall():
        if e.pw_uid != os.geteuid() and e.pw_name not in ("root", os_owner()):
            return e
    pytest.fail("this machine has a single OS user: no other one to test with")


def test_anonymous_connection_acts_as_its_os_user_never_the_owner(tmp_path):
    """The hardening issue: an anonymous loopback connection of another OS user
    used to be the owner. Now it is that user, holding only its records."""
    other = _other_os_user()
    seen = []

    def peer_uid(peer, local):
        seen.append((peer, local))
        return other.pw_uid
    sec = Security.for_dir(tmp_path, owner="qmowner", owner_uid=4242, peer_uid=peer_uid)
    p = sec.authenticate(None, None, connauth="optional", peer=LOOP, local=US)
    assert seen == [(LOOP, US)]
    assert (p.user, p.groups, p.anonymous, p.owner) == (other.pw_name, (), True, False)
    for authority in ("GET", "PUT", "BROWSE"):
        assert not sec.check(p, "QUEUE", "ANY.Q", authority)
    assert not sec.check(p, "QMGR", "QM1", "CRT")
    with pytest.raises(NotAuthorized, match=f"user {other.pw_name} is not authorized.*2035"):
        sec.require(p, "QUEUE", "ANY.Q", "GET")
    # exactly the records naming it, and its groups as a harbormq user of that name
    sec.authorities.set("MINE.*", "QUEUE", principal=other.pw_name, add=["GET"])
    assert sec.check(p, "QUEUE", "MINE.Q", "GET") and not sec.check(p, "QUEUE", "MINE.Q", "PUT")
    assert not sec.check(p, "QUEUE", "ANY.Q", "GET")
    sec.users.add(other.pw_name, "pw", groups=["apps"])
    sec.authorities.set("APPS.Q", "QUEUE", group="apps", add=["PUT"])
    p = sec.authenticate(None, None, connauth="optional", peer=LOOP, local=US)
    assert p.groups == ("apps",) and not p.owner
    assert sec.check(p, "QUEUE", "APPS.Q", "PUT") and not sec.check(p, "QUEUE", "ANY.Q", "PUT")


@pytest.mark.parametrize("peer_uid, local, why", [
    ("unknown", US, "no socket of this machine"),
    ("nameless", US, "has no user name"),
    ("owner-name", US, "has the owner's user name"),
    (4242, None, "own address is not known"),
])
def test_anonymous_connection_whose_os_user_is_not_identified_is_refused(
        tmp_path, peer_uid, local, why):
    """Fail closed: no peer, no principal; the refusal says to log in."""
    other = _other_os_user()

    def lookup(peer, local):
        if peer_uid == "unknown":
            raise PeerUnknown("no socket of this machine is connected from x to y")
        if peer_uid == "nameless":
            return next(u for u in range(60001, 65000) if u not in known)
        return other.pw_uid if peer_uid == "owner-name" else peer_uid
    known = {e.pw_uid for e in pwd.getpwall()}
    owner = other.pw_name if peer_uid == "owner-name" else "qmowner"
    sec = Security.for_dir(tmp_path, owner=owner, owner_uid=4242, peer_uid=lookup)
    with pytest.raises(NotAuthorized) as info:
        sec.authenticate(None, None, connauth="optional", peer=LOOP, local=local)
    exc = info.value
    assert exc.msgid == "HMQ5540E" and exc.reason == 2035
    assert why in str(exc) and "127.0.0.1:40000" in str(exc)
    assert "cannot be identified" in str(exc) and "log in" in str(exc), str(exc)


def test_peer_lookup_is_linux_only(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    with pytest.raises(PeerUnknown, match="Linux only"):
        loopback_peer_uid(LOOP, US)


# -- the /proc/net/tcp parser ---------------------------------------------------------------

#: addresses as the kernel prints them on this machine (each 32-bit word in host order)
if sys.byteorder == "little":
    V4_LO, V4_LO2 = "0100007F", "0200007F"                        # 127.0.0.1, 127.0.0.2
    V6_LO = "00000000000000000000000001000000"                    # ::1
    V6_MAPPED_LO = "0000000000000000FFFF00000100007F"             # ::ffff:127.0.0.1
else:
    V4_LO, V4_LO2 = "7F000001", "7F000002"
    V6_LO = "00000000000000000000000000000001"
    V6_MAPPED_LO = "00000000000000000000FFFF7F000001"
HEADER = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
          "timeout inode")


def tcp_line(sl, local, remote, state, uid, inode):
    return (f"{sl:4d}: {local} {remote} {state:02X} 00000000:00000000 00:00000000 00000000 "
            f"{uid:5d}        0 {inode} 1 0000000000000000 20 4 30 10 -1")


def ep(host, port):
    return (ipaddress.ip_address(host), port)


def test_proc_net_tcp_lines_parse_ipv4_ipv6_and_v4_mapped():
    assert parse_proc_net_tcp(HEADER) is None and parse_proc_net_tcp("") is None
    e = parse_proc_net_tcp(tcp_line(3, f"{V4_LO}:C488", f"{V4_LO2}:EA60", 1, 1001, 48213))
    assert e == ProcTcpEntry(ep("127.0.0.1", 50312), ep("127.0.0.2", 60000), 1, 1001, 48213)
    e = parse_proc_net_tcp(tcp_line(0, f"{V6_LO}:0050", f"{V6_LO}:D431", 1, 0, 7))
    assert (e.local, e.remote) == (ep("::1", 80), ep("::1", 54321))
    # an IPv6 socket connected to an IPv4 address: given as IPv4
    e = parse_proc_net_tcp(tcp_line(1, f"{V6_MAPPED_LO}:9C40", f"{V6_MAPPED_LO}:EA60", 1, 999,
                                    5))
    assert (e.local, e.remote) == (ep("127.0.0.1", 40000), ep("127.0.0.1", 60000))
    assert parse_proc_net_tcp(tcp_line(1, "0100:0050", f"{V4_LO}:0050", 1, 0, 7)) is None
    assert parse_proc_net_tcp("   1: garbage") is None


def test_socket_owner_found_by_both_addresses_live_sockets_only():
    us, them = ep("127.0.0.1", 60000), ep("127.0.0.1", 40000)
    lines = [
        HEADER,
        tcp_line(0, f"{V4_LO}:EA60", "00000000:0000", 0x0A, 0, 100),        # our listener
        tcp_line(1, f"{V4_LO}:EA60", f"{V4_LO}:9C40", 1, 0, 101),           # our end (root)
        tcp_line(2, f"{V4_LO}:9C40", f"{V4_LO2}:EA60", 1, 0, 102),          # other remote
        tcp_line(3, f"{V4_LO}:9C41", f"{V4_LO}:EA60", 1, 0, 103),           # other port
        tcp_line(4, f"{V4_LO}:9C40", f"{V4_LO}:EA60", 6, 0, 0),             # TIME_WAIT: uid 0
        tcp_line(5, f"{V4_LO}:9C40", f"{V4_LO}:EA60", 1, 1001, 104),        # the client
    ]
    assert socket_owner_uid(lines, them, us) == 1001
    assert socket_owner_uid(lines[:5], them, us) is None          # only root's lookalikes
    # an orphan (no inode) reports uid 0: never taken for root
    orphan = tcp_line(6, f"{V4_LO}:9C40", f"{V4_LO}:EA60", 5, 0, 0)
    assert socket_owner_uid([*lines[:5], orphan], them, us) is None
    with pytest.raises(PeerUnknown, match="several users"):
        socket_owner_uid([*lines, tcp_line(7, f"{V4_LO}:9C40", f"{V4_LO}:EA60", 1, 7, 105)],
                         them, us)
    # the client's socket as an IPv6 one (v4-mapped); asyncio's IPv6 peer with a scope
    mapped = [tcp_line(0, f"{V6_MAPPED_LO}:9C40", f"{V6_MAPPED_LO}:EA60", 1, 1002, 200)]
    assert socket_owner_uid(mapped, them, us) == 1002
    assert socket_owner_uid(mapped, endpoint("::ffff:127.0.0.1", 40000),
                            endpoint("127.0.0.1%lo", 60000)) == 1002


def test_peer_lookup_reads_tcp_then_tcp6(tmp_path):
    (tmp_path / "tcp").write_text(HEADER + "\n")
    (tmp_path / "tcp6").write_text(
        HEADER + "\n" + tcp_line(0, f"{V6_MAPPED_LO}:9C40", f"{V6_MAPPED_LO}:EA60", 1, 1003, 9)
        + "\n")
    assert loopback_peer_uid(("127.0.0.1", 40000), ("127.0.0.1", 60000),
                             proc_net=tmp_path) == 1003
    with pytest.raises(PeerUnknown, match=r"no socket .* from 127.0.0.1:40001 to "):
        loopback_peer_uid(("127.0.0.1", 40001), ("127.0.0.1", 60000), proc_net=tmp_path)
    (tmp_path / "tcp6").unlink()                          # a kernel without IPv6
    (tmp_path / "tcp6").mkdir()                           # unreadable as a file
    with pytest.raises(PeerUnknown, match="cannot read .*tcp6"):
        loopback_peer_uid(("127.0.0.1", 40000), ("127.0.0.1", 60000), proc_net=tmp_path)
    with pytest.raises(PeerUnknown, match="not a TCP connection"):
        loopback_peer_uid(("/run/x.sock",), ("127.0.0.1", 60000), proc_net=tmp_path)


def _pair(family, listen_host, connect_host):
    """(client socket, accepted socket) over loopback."""
    srv = socket.socket(family)
    srv.bind((listen_host, 0))
    srv.listen()
    client = socket.socket(socket.AF_INET6 if ":" in connect_host else socket.AF_INET)
    client.connect((connect_host, srv.getsockname()[1]))
    accepted, _ = srv.accept()
    srv.close()
    return client, accepted


@pytest.mark.parametrize("family, listen_host, connect_host", [
    (socket.AF_INET, "127.0.0.1", "127.0.0.1"),
    (socket.AF_INET, "127.0.0.1", "::ffff:127.0.0.1"),       # an IPv6 client socket, v4-mapped
    (socket.AF_INET6, "::1", "::1"),
])
def test_peer_lookup_on_real_sockets(family, listen_host, connect_host):
    """This process's own loopback connections: their peer is this process's
    uid; once the client has closed, nobody (fail closed)."""
    if not sys.platform.startswith("linux"):
        pytest.fail("the peer lookup is for Linux; elsewhere anonymous connections are refused")
    try:
        client, accepted = _pair(family, listen_host, connect_host)
    except OSError as exc:
        if family == socket.AF_INET6 or ":" in connect_host:
            pytest.skip(f"no IPv6 loopback here: {exc}")
        raise
    try:
        peer, local = accepted.getpeername(), accepted.getsockname()
        assert loopback_peer_uid(peer, local) == os.geteuid()
        client.close()
        with pytest.raises(PeerUnknown, match="no socket"):
            loopback_peer_uid(peer, local)
    finally:
        client.close()
        accepted.close()


def test_listener_rules():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert is_loopback("[::1]") and is_loopback("127.0.0.2")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.1.1") and not is_loopback("")
    check_listener("127.0.0.1", "optional")
    check_listener("0.0.0.0", "required")
    with pytest.raises(ConfigError, match="not a loopback address"):
        check_listener("0.0.0.0", "optional")
    with pytest.raises(ConfigError, match="connauth must be"):
        check_listener("127.0.0.1", "maybe")


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


@settings(max_examples=400, deadline=None)
@given(profile=st.from_regex(r"[AB.?*]{1,8}", fullmatch=True),
       name=st.from_regex(r"[AB.]{0,8}", fullmatch=True))
def test_profile_matching_agrees_with_its_definition(profile, name):
    """``**`` any characters, ``*`` a run without a dot, ``?`` one non-dot
    character: the matcher agrees with that definition written as a regex
    (fine on names this short)."""
    import re

    from harbormq.security.authority import _profile_tokens, is_generic, profile_matches
    if not is_generic(profile):
        assert profile_matches(profile, name) == (profile == name)
        return
    pattern = "".join({"**": ".*", "*": r"[^.]*", "?": r"[^.]"}.get(t, re.escape(t))
                      for t in _profile_tokens(profile))
    assert profile_matches(profile, name) == bool(re.fullmatch(pattern, name))


def test_profile_matching_does_not_backtrack():
    """A profile of many ``**`` against a name that almost matches took 206 s
    with a regex (found by fuzzing DISPLAY AUTHREC); now it is a few steps."""
    import time

    from harbormq.security.authority import profile_matches
    t = time.perf_counter()
    assert not profile_matches("**.**.**.**.**.**.**.**.**.**.X", "." * 47 + "A")
    assert not profile_matches("*" * 47 + "X", "A" * 47 + ".")
    assert time.perf_counter() - t < 1.0
