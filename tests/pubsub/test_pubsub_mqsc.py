"""Every MQSC command of publish/subscribe, run as 'harbormq sc' runs them
(run_mqsc), with the errors of bad input."""

from __future__ import annotations

import pytest

from harbormq.admin.commands import run_mqsc
from harbormq.log.records import Message
from harbormq.security import Security


@pytest.fixture
def qm(make_qm, open_qm):
    make_qm()
    return open_qm()


def sc(qm, text: str, *, ok: bool = True) -> str:
    r = qm._call(run_mqsc(qm.core, text, security=Security.for_config(qm.config),
                          continue_on_error=True))
    assert (r["errors"] == 0) is ok, r["output"]
    return r["output"]


def test_define_alter_display_delete_topic(qm):
    out = sc(qm, "DEFINE TOPIC(SPORTS) TOPICSTR('sports') DESCR('all sport') DEFPSIST(YES) "
                 "DEFPRTY(5) PUB(ENABLED) SUB(ASPARENT) DURSUB(YES)")
    assert "HMQ8006I: harbormq topic created." in out
    out = sc(qm, "DISPLAY TOPIC(SPORTS) ALL")
    for pair in ("TOPIC(SPORTS)", "TOPICSTR(sports)", "DESCR(all sport)", "DEFPSIST(YES)",
                 "DEFPRTY(5)", "SUB(ASPARENT)", "DURSUB(YES)"):
        assert pair in out
    assert "TOPIC(SYSTEM.BASE.TOPIC)" in sc(qm, "DISPLAY TOPIC(*)")
    assert "HMQ8008I" in sc(qm, "ALTER TOPIC(SPORTS) PUB(INHIBITED) DEFPRTY(ASPARENT)")
    assert "PUB(INHIBITED)" in sc(qm, "DISPLAY TOPIC(SPORTS) PUB")
    assert qm.core.pubsub.topics.resolve("sports/x", "DEFPRTY") == 0
    assert "HMQ8006I" in sc(qm, "DEFINE TOPIC(SPORTS) TOPICSTR('sports') DESCR('r') REPLACE")
    out = sc(qm, "DEFINE TOPIC(SPORTS) TOPICSTR('sports')\n"
                 "DEFINE TOPIC(TWIN) TOPICSTR('sports')\n"
                 "DEFINE TOPIC(NOSTR)\n"
                 "DEFINE TOPIC(WILD) TOPICSTR('a/#')\n"
                 "DEFINE TOPIC(EMPTY) TOPICSTR('a//b')\n"
                 "DEFINE TOPIC(BAD) TOPICSTR('a') PUB(MAYBE)\n"
                 "ALTER TOPIC(SPORTS) TOPICSTR('other')\n"
                 "DELETE TOPIC(SYSTEM.BASE.TOPIC)\n"
                 "DISPLAY TOPIC(NOPE)", ok=False)
    for text in ("topic SPORTS already exists", "already has topic object SPORTS",
                 "needs TOPICSTR", "without wildcards", "empty level",
                 "PUB(MAYBE) is not valid", "TOPICSTR cannot be altered",
                 "root of the topic tree", "topic NOPE not found"):
        assert text in out
    assert "HMQ8007I" in sc(qm, "DELETE TOPIC(SPORTS)")
    assert "No topics found" in sc(qm, "DISPLAY TOPIC(SP*)")


def test_define_alter_display_delete_sub_and_sbstatus(qm):
    sc(qm, "DEFINE QLOCAL(DQ) DEFPSIST(YES)\nDEFINE QLOCAL(DQ2)\n"
           "DEFINE TOPIC(NEWS) TOPICSTR('news')")
    assert "HMQ8094I" in sc(qm, "DEFINE SUB(S1) TOPICSTR('news/#') DEST(DQ)")
    assert "HMQ8094I" in sc(qm, "DEFINE SUB(S2) TOPICOBJ(NEWS) TOPICSTR('sport') "
                                "DESTCLAS(MANAGED) EXPIRY(UNLIMITED)")
    s2 = qm.core.pubsub.find("S2")
    assert s2.topic == "news/sport" and s2.dest.startswith("SYSTEM.MANAGED.DURABLE.")
    qm._call(qm.core.pubsub.publish("news/sport", Message(b"x")))
    out = sc(qm, "DISPLAY SUB(*) ALL")
    for pair in ("SUB(S1)", "TOPICSTR(news/#)", "DEST(DQ)", "DESTCLAS(PROVIDED)",
                 "SUB(S2)", "TOPICOBJ(NEWS)", "DESTCLAS(MANAGED)", "DURABLE(YES)",
                 "SUBTYPE(ADMIN)", f"SUBID({s2.sub_id})"):
        assert pair in out
    out = sc(qm, "DISPLAY SBSTATUS(S1)")
    assert "NUMMSGS(1)" in out and "LMSGDATE(" in out
    assert "SUB(S2)" in sc(qm, "DISPLAY SUB(*) WHERE(DESTCLAS EQ MANAGED)")
    assert "SUB(S1)" not in sc(qm, "DISPLAY SUB(*) WHERE(DESTCLAS EQ MANAGED)")
    assert "HMQ8096I" in sc(qm, "ALTER SUB(S1) DEST(DQ2) EXPIRY(600)")
    assert qm.core.pubsub.find("S1").dest == "DQ2"
    assert "EXPIRY(" in sc(qm, "DISPLAY SUB(S1) EXPIRY") and \
        "EXPIRY(UNLIMITED)" not in sc(qm, "DISPLAY SUB(S1) EXPIRY")
    assert "HMQ8096I" in sc(qm, "DEFINE SUB(S1) TOPICSTR('news/#') DEST(DQ) REPLACE")
    assert qm.core.pubsub.find("S1").dest == "DQ"
    out = sc(qm, "DEFINE SUB(S1) TOPICSTR('news/#') DEST(DQ)\n"
                 "DEFINE SUB(S3)\n"
                 "DEFINE SUB(S4) TOPICSTR('x') DEST(NO.SUCH.Q)\n"
                 "DEFINE SUB(S5) TOPICSTR('x') SELECTOR('a = = 1')\n"
                 "DEFINE SUB(S6) TOPICSTR('x') EXPIRY(never)\n"
                 "DEFINE SUB(S7) TOPICSTR('x') DESTCLAS(PROVIDED)\n"
                 "ALTER SUB(S2) TOPICSTR('other')\n"
                 "ALTER SUB(S2) DEST(DQ)\n"
                 "DELETE SUB(NOPE)", ok=False)
    for text in ("SUB_ALREADY_EXISTS", "needs TOPICSTR or TOPICOBJ", "NO.SUCH.Q",
                 "position 5", "EXPIRY(NEVER) is not valid",
                 "DESTCLAS(PROVIDED) needs DEST", "TOPICSTR cannot be altered",
                 "managed queue: its DEST cannot change", "NOPE does not exist (MQRC 2428"):
        assert text in out
    assert "HMQ8095I" in sc(qm, "DELETE SUB(S2)")
    assert s2.dest not in qm.core.queues
    assert "No subscriptions found" in sc(qm, "DISPLAY SBSTATUS(S2*)")


def test_tpstatus_pubsub_and_clear_topicstr(qm):
    ps = qm.core.pubsub
    sc(qm, "DEFINE TOPIC(PRICES) TOPICSTR('prices') DEFPSIST(YES)\n"
           "DEFINE SUB(G) TOPICSTR('prices/gold')")
    qm._call(ps.publish("prices/gold", Message(b"1850"), retain=True))
    qm._call(ps.publish("prices/gold", Message(b"1851")))
    out = sc(qm, "DISPLAY TPSTATUS('prices/#') TYPE(TOPIC)")
    assert "TOPICSTR(prices)" in out and "ADMIN(PRICES)" in out
    gold = out[out.index("TOPICSTR(prices/gold)"):]
    for pair in ("RETAINED(YES)", "SUBCOUNT(1)", "PUBCOUNT(2)", "DEFPSIST(YES)"):
        assert pair in gold
    out = sc(qm, "DISPLAY TPSTATUS('prices/gold') TYPE(SUB)")
    assert "SUB(G)" in out and "NUMMSGS(2)" in out
    out = sc(qm, "DISPLAY TPSTATUS('prices/gold') TYPE(PUB)")
    assert "NUMPUBS(2)" in out and "LPUBDATE(" in out
    assert "No topic status found" in sc(qm, "DISPLAY TPSTATUS('none') TYPE(PUB)")
    assert "TYPE(BAD) is not valid" in sc(qm, "DISPLAY TPSTATUS('x') TYPE(BAD)", ok=False)
    out = sc(qm, "DISPLAY PUBSUB ALL")
    for pair in ("QMNAME(QM1)", "TYPE(LOCAL)", "STATUS(ACTIVE)", "SUBCOUNT(1)",
                 "RETCOUNT(1)"):
        assert pair in out
    assert "retained publication cleared" in sc(qm, "CLEAR TOPICSTR('prices/gold') "
                                                    "CLRTYPE(RETAINED)")
    assert "no retained publication" in sc(qm, "CLEAR TOPICSTR('prices/gold')")
    assert ps.retained() == {}
    out = sc(qm, "CLEAR TOPICSTR('prices/#')\nCLEAR TOPICSTR('x') CLRTYPE(ALL)", ok=False)
    assert "wildcard" in out and "CLRTYPE(ALL) is not valid" in out


def test_topic_authority_records(qm):
    out = sc(qm, "SET AUTHREC PROFILE(SPORTS.**) OBJTYPE(TOPIC) PRINCIPAL('bob') "
                 "AUTHADD(PUB,SUB)\nDISPLAY AUTHREC OBJTYPE(TOPIC)")
    assert "AUTHLIST(PUB,SUB)" in out and "OBJTYPE(TOPIC)" in out
    out = sc(qm, "SET AUTHREC PROFILE(SPORTS) OBJTYPE(TOPIC) PRINCIPAL('bob') AUTHADD(GET)",
             ok=False)
    assert "GET does not apply to OBJTYPE(TOPIC)" in out
