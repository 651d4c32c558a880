"""The admission of a client connection (security/svrconn.py) without a
server: CHCKCLNT NONE, OPTIONAL, REQUIRED and REQDADM, a record's CHCKCLNT,
USERMAP on an anonymous client's OS user, WARN(YES), CHLAUTH(DISABLED),
MAXINSTC, an AUTHINFO that is missing, and what a refusal says."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from harbormq.core.objects import SecurityCatalog, authinfo_key, channel_key, chlauth_key
from harbormq.security import ClientAdmission, ConnectionRefused, NotAuthorized, Security
from harbormq.security.chlauth import record_attrs, record_name

LOOP = ("127.0.0.1", 40000)
US = ("127.0.0.1", 61613)
REMOTE = ("10.1.2.3", 40000)


@dataclass
class Conn:
    conn_id: str
    listener: str = "STOMP"


class Catalog:
    """A catalog of definitions by key, as the core keeps them."""

    def __init__(self):
        self.objects = {"QMGR": {"type": "QMGR", "name": "QMGR", "attrs": {}}}

    def put(self, objtype, name, key, **attrs):
        self.objects[key] = {"type": objtype, "name": name, "attrs": attrs}

    def rule(self, profile, **given):
        attrs = record_attrs(profile, given)
        name = record_name(profile, attrs)
        self.put("CHLAUTH", name, chlauth_key(name), **attrs)


@pytest.fixture
def setup(tmp_path):
    sec = Security.for_dir(tmp_path, owner="qmowner", owner_uid=4242,
                           peer_uid=lambda peer, local: 4242)   # the owner, on loopback
    sec.users.add("alice", "pw", groups=["apps"])
    sec.users.add("root", "rootpw", groups=["mqm"])
    cat = Catalog()
    cat.put("CHANNEL", "SYSTEM.DEF.SVRCONN", channel_key("SYSTEM.DEF.SVRCONN"),
            CHLTYPE="SVRCONN", MCAUSER="", MAXINST=999, MAXINSTC=999, MAXMSGL=1000)
    cat.put("AUTHINFO", "AI", authinfo_key("AI"), CHCKCLNT="OPTIONAL")
    cat.objects["QMGR"]["attrs"] = {"CONNAUTH": "AI", "CHLAUTH": "ENABLED"}
    cat.rule("*", TYPE="ADDRESSMAP", ADDRESS="127.*", USERSRC="CHANNEL")
    live: list[str] = []
    emitted: list[tuple[str, str]] = []
    adm = ClientAdmission(sec, SecurityCatalog(cat), {}, live=lambda: live,
                          emit=lambda m, t: emitted.append((m, t)))

    def admit(login=None, pw=None, peer=LOOP, conn="C1", **kw):
        sec.refresh_connauth(SecurityCatalog(cat))
        live.append(conn)
        return asyncio.run(adm.admit(Conn(conn), login, pw, peer, US, **kw))
    return sec, cat, admit, emitted, live


def test_checks_by_chckclnt(setup):
    sec, cat, admit, _, _ = setup
    p = admit()
    assert p.owner and p.channel == "SYSTEM.DEF.SVRCONN" and p.max_msg_length == 1000
    assert admit("alice", "pw").user == "alice"
    with pytest.raises(NotAuthorized, match="alice authentication failed"):
        admit("alice", "bad")
    cat.objects[authinfo_key("AI")]["attrs"]["CHCKCLNT"] = "NONE"
    assert admit("alice", "bad").owner              # NONE: the login is ignored
    cat.objects[authinfo_key("AI")]["attrs"]["CHCKCLNT"] = "REQDADM"
    with pytest.raises(NotAuthorized, match="privileged and CHCKCLNT\\(REQDADM\\)"):
        admit()                                       # the owner, without a password
    assert admit("root", "rootpw").user == "root"
    cat.objects[authinfo_key("AI")]["attrs"]["CHCKCLNT"] = "REQUIRED"
    with pytest.raises(NotAuthorized, match="required"):
        admit()
    cat.objects["QMGR"]["attrs"]["CONNAUTH"] = "GONE"
    with pytest.raises(NotAuthorized, match="GONE, which is not defined"):
        admit("alice", "pw")


def test_a_record_makes_the_check_stricter_and_maps_the_os_user(setup):
    sec, cat, admit, _, _ = setup
    cat.rule("SYSTEM.*", TYPE="ADDRESSMAP", ADDRESS="127.0.0.1", USERSRC="CHANNEL",
             CHCKCLNT="REQUIRED")
    with pytest.raises(NotAuthorized, match="required"):
        admit()
    assert admit(peer=("127.0.0.2", 1)).owner      # the default record: OPTIONAL
    cat.rule("*", TYPE="USERMAP", CLNTUSER="qmowner", USERSRC="MAP", MCAUSER="alice")
    # the profile SYSTEM.* is more specific than the USERMAP's *: its record wins
    with pytest.raises(NotAuthorized, match="required"):
        admit()
    p = admit(peer=("127.0.0.2", 1))                # USERMAP on the OS user, over 127.*
    assert (p.user, p.groups, p.owner) == ("alice", ("apps",), False)


def test_warn_records_log_and_let_through_and_chlauth_disabled(setup):
    sec, cat, admit, emitted, _ = setup
    cat.rule("*", TYPE="ADDRESSMAP", ADDRESS="10.*", USERSRC="NOACCESS", WARN="YES")
    cat.rule("*", TYPE="BLOCKADDR", ADDRLIST=["10.9.*"])
    assert admit("alice", "pw", peer=REMOTE).user == "alice"
    assert emitted[-1][0] == "HMQ9777W" and "WARN(YES)" in emitted[-1][1]
    with pytest.raises(ConnectionRefused, match="2059") as info:
        admit("alice", "pw", peer=("10.9.0.1", 1))
    assert info.value.msgid == "HMQ9782E" and emitted[-1][0] == "HMQ9782E"
    # anonymous from a remote address: no record gives it a user
    with pytest.raises(NotAuthorized, match="no CHLAUTH record gives it a user id"):
        admit(peer=REMOTE)
    cat.objects["QMGR"]["attrs"]["CHLAUTH"] = "DISABLED"
    assert admit("alice", "pw", peer=("10.9.0.1", 1)).user == "alice"   # not read


def test_maxinstc_counts_live_connections_per_address(setup):
    sec, cat, admit, _, live = setup
    cat.objects[channel_key("SYSTEM.DEF.SVRCONN")]["attrs"]["MAXINSTC"] = 1
    admit(conn="A")
    with pytest.raises(ConnectionRefused, match="MAXINSTC\\(1\\)") as info:
        admit(conn="B")
    assert info.value.msgid == "HMQ2537E"
    assert admit(conn="C", peer=("127.0.0.2", 5)).owner      # another address
    live.remove("A")                                          # A closed
    assert admit(conn="D").owner
    cat.objects.pop(channel_key("SYSTEM.DEF.SVRCONN"))
    with pytest.raises(ConnectionRefused, match="2540"):
        admit(conn="E")
