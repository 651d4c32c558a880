"""MQSC as administrators write it, against a queue manager (the embedded API,
no server): LIKE on every DEFINE, keywords without effect answered HMQ8890W
while an unknown one is a syntax error naming it, AUTHINFO and SET CHLAUTH's
refusals, the default objects, and DISPLAY USAGE."""

from __future__ import annotations

import pytest
from test_mqsc import fails, objects, ok


@pytest.fixture
def qm(make_qm, open_qm):
    make_qm("QF", log_type="circular")
    return open_qm("QF")


def test_the_defaults_are_there_at_creation(qm):
    out = ok(qm, "DISPLAY CHANNEL(SYSTEM.DEF.SVRCONN) CHLTYPE MAXINST\n"
                 "DISPLAY AUTHINFO(*) CHCKCLNT\nDISPLAY QMGR CONNAUTH CHLAUTH\n"
                 "DISPLAY CHLAUTH(*)")
    assert "CHLTYPE(SVRCONN)" in out and "MAXINST(999999999)" in out
    assert "AUTHINFO(SYSTEM.DEFAULT.AUTHINFO.IDPWOS)" in out and "CHCKCLNT(OPTIONAL)" in out
    assert "CONNAUTH(SYSTEM.DEFAULT.AUTHINFO.IDPWOS)" in out and "CHLAUTH(ENABLED)" in out
    assert len(objects(out, "HMQ8878I")) == 2


def test_like_on_every_define_and_keywords_without_effect(qm):
    out = ok(qm, "DEFINE CHANNEL(A.SVRCONN) CHLTYPE(SVRCONN) MCAUSER('app') MAXINST(3) "
                 "SHARECNV(10)\nDEFINE CHANNEL(B.SVRCONN) LIKE(A.SVRCONN) MAXINSTC(1)\n"
                 "DEFINE LISTENER(L1) PORT(0) DESCR('one')\nDEFINE LISTENER(L2) LIKE(L1)\n"
                 "DEFINE AUTHINFO(AI1) AUTHTYPE(IDPWOS) CHCKCLNT(REQUIRED) FAILDLAY(3)\n"
                 "DEFINE AUTHINFO(AI2) LIKE(AI1)\n"
                 "ALTER QMGR STATMQI(ON) MONQ(MEDIUM) DESCR('with stats')")
    assert "HMQ8890W: SHARECNV accepted: it has no effect on harbormq" in out
    assert "HMQ8890W: FAILDLAY accepted" in out
    assert "HMQ8890W: STATMQI accepted" in out and "HMQ8890W: MONQ accepted" in out
    [b] = objects(ok(qm, "DISPLAY CHANNEL(B.SVRCONN) ALL"), "HMQ8409I")
    assert (b["CHLTYPE"], b["MCAUSER"], b["MAXINST"], b["MAXINSTC"]) == \
        ("SVRCONN", "app", "3", "1")
    assert objects(ok(qm, "DISPLAY LISTENER(L2) DESCR"), "HMQ8409I")[0]["DESCR"] == "one"
    assert objects(ok(qm, "DISPLAY AUTHINFO(AI2) ALL"), "HMQ8566I")[0]["CHCKCLNT"] == \
        "REQUIRED"
    assert "DESCR(with stats)" in ok(qm, "DISPLAY QMGR DESCR")
    out = fails(qm, "ALTER QMGR STATFOO(ON)", "HMQ8405E")
    assert "found STATFOO" in out


def test_authinfo_and_chlauth_refusals(qm):
    fails(qm, "DEFINE AUTHINFO(X) AUTHTYPE(LDAP)", "AUTHTYPE")
    fails(qm, "DELETE AUTHINFO(SYSTEM.DEFAULT.AUTHINFO.IDPWOS)", "CONNAUTH")
    ok(qm, "SET CHLAUTH(APP.*) TYPE(BLOCKUSER) USERLIST('nobody')")
    fails(qm, "SET CHLAUTH(APP.*) TYPE(BLOCKUSER) USERLIST('other')", "ACTION(REPLACE)")
    ok(qm, "SET CHLAUTH(APP.*) TYPE(BLOCKUSER) USERLIST('other') ACTION(REPLACE)")
    assert "USERLIST(other)" in ok(qm, "DISPLAY CHLAUTH(APP.*) TYPE(BLOCKUSER) ALL")
    fails(qm, "SET CHLAUTH(APP.*) TYPE(USERMAP) CLNTUSER('zed') ACTION(REMOVE)", "2085")
    fails(qm, "SET CHLAUTH('*') TYPE(ADDRESSMAP) ADDRESS('1.2.3') USERSRC(CHANNEL)",
          "not an IPv4 pattern")
    out = ok(qm, "SET CHLAUTH(APP.*) TYPE(BLOCKUSER) ACTION(REMOVEALL)")
    assert "1 channel authentication record(s)" in out
    assert "HMQ8884I" in ok(qm, "DISPLAY CHLAUTH(APP.*)")


def test_display_usage_shows_stores_and_extents(qm):
    ok(qm, "DEFINE QLOCAL(USAGE.Q)")
    qm.put("USAGE.Q", b"x" * 1000, persistent=True)
    out = ok(qm, "DISPLAY USAGE")
    stores = {o["STORE"]: o for o in objects(out, "HMQ8896I")}
    assert stores["USAGE.Q"]["CURDEPTH"] == "1" and int(stores["USAGE.Q"]["FILESZ"]) > 0
    assert "*CATALOG" in stores, out
    extents = objects(out, "HMQ8897I")
    assert extents[-1]["STATUS"] == "ACTIVE" and extents[-1]["ENDLSN"] == "", out
    assert int(extents[-1]["USEDSZ"]) > 1000
    only = ok(qm, "DISPLAY USAGE TYPE(DATASET) WHERE(ONDISK EQ YES)")
    assert not objects(only, "HMQ8896I") and objects(only, "HMQ8897I")


def test_like_on_alias_model_process_namelist_and_topic(qm):
    ok(qm, "DEFINE QLOCAL(TGT)\n"
           "DEFINE QALIAS(A1) TARGET(TGT) DEFPRTY(6) PUT(DISABLED)\n"
           "DEFINE QALIAS(A2) LIKE(A1) DESCR('second')\n"
           "DEFINE QMODEL(M1) DEFTYPE(PERMDYN) MAXDEPTH(42)\nDEFINE QMODEL(M2) LIKE(M1)\n"
           "DEFINE PROCESS(P1) APPLICID('/bin/true') USERDATA('u')\n"
           "DEFINE PROCESS(P2) LIKE(P1)\n"
           "DEFINE NAMELIST(N1) NAMES(X, Y)\nDEFINE NAMELIST(N2) LIKE(N1)\n"
           "DEFINE TOPIC(T1) TOPICSTR('one') DEFPRTY(3)\n"
           "DEFINE TOPIC(T2) TOPICSTR('two') LIKE(T1)")
    [a2] = objects(ok(qm, "DISPLAY QALIAS(A2) ALL"), "HMQ8409I")
    assert (a2["TARGET"], a2["DEFPRTY"], a2["PUT"], a2["DESCR"]) == \
        ("TGT", "6", "DISABLED", "second")
    [m2] = objects(ok(qm, "DISPLAY QMODEL(M2) ALL"), "HMQ8409I")
    assert (m2["DEFTYPE"], m2["MAXDEPTH"]) == ("PERMDYN", "42")
    assert "USERDATA(u)" in ok(qm, "DISPLAY PROCESS(P2) ALL")
    assert "NAMES(X,Y)" in ok(qm, "DISPLAY NAMELIST(N2) ALL").replace(" ", "")
    t2 = ok(qm, "DISPLAY TOPIC(T2) ALL")
    assert "TOPICSTR(two)" in t2 and "DEFPRTY(3)" in t2
    fails(qm, "DEFINE QALIAS(A3) LIKE(NOPE) TARGET(TGT)", "NOPE")
    ok(qm, "DEFINE CHANNEL(S1) CHLTYPE(SDR) CONNAME('h(1)') XMITQ(XQ)")
    fails(qm, "DEFINE CHANNEL(V1) CHLTYPE(SVRCONN) LIKE(S1)", "of its own CHLTYPE")
