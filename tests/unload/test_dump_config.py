"""``harbormq dump-config`` (dmpmqcfg): the MQSC script of every definition,
replayed into an empty queue manager, gives the same definitions; running or
stopped; and at a past time, from the log."""

from __future__ import annotations

import time

from support.stomp_helpers import QMServer

from harbormq.config import QMConfig
from harbormq.security import AuthorityStore
from harbormq.unload.definitions import definitions

SETUP = """DEFINE QLOCAL('orders.in') DESCR('it''s the orders queue') MAXDEPTH(77) DEFPSIST(YES)
DEFINE QLOCAL(XQ) USAGE(XMITQ) INDXTYPE(MSGID)
DEFINE QREMOTE(TO.B) RNAME(IN) RQMNAME(QMB) XMITQ(XQ) DEFPRTY(3)
DEFINE CHANNEL(A.TO.B) CHLTYPE(SDR) CONNAME('127.0.0.1(1)') XMITQ(XQ) BATCHSZ(7)
DEFINE LISTENER(L1) PORT(0) CONTROL(MANUAL)
ALTER QMGR DESCR('main queue manager')
SET AUTHREC PROFILE('orders.in') OBJTYPE(QUEUE) PRINCIPAL('alice') AUTHADD(PUT,GET)"""


def comparable(config) -> dict:
    return {name: (d["type"], d["attrs"]) for name, d in definitions(config).items()}


def test_a_replayed_dump_gives_the_same_definitions(tmp_path):
    a = QMServer(tmp_path / "a", "QD").create()
    b = QMServer(tmp_path / "b", "QD").create()
    a.start()
    try:
        a.sc(SETUP)
        script = a.cli("dump-config", "QD").stdout       # while it runs
        assert "DEFINE QLOCAL('orders.in')" in script and "''s the orders" in script
    finally:
        a.stop()
    assert a.cli("dump-config", "QD").stdout.split("\n")[1:] == script.split("\n")[1:], \
        "the same stopped as running (but for the time in its first line)"
    b.start()
    try:
        out = b.sc(script)
        assert "All valid MQSC commands were processed" in out, out
    finally:
        b.stop()
    ca, cb = QMConfig.load("QD", a.home), QMConfig.load("QD", b.home)
    assert comparable(ca) == comparable(cb)
    def records(config):
        return sorted(str(r.as_dict()) for r in AuthorityStore(config.authrecs_path).records())
    assert records(ca) == records(cb) and "alice" in " ".join(records(cb))


def test_definitions_at_a_past_time(tmp_path):
    srv = QMServer(tmp_path / "a", "QT").create(log_type="linear")
    srv.start()
    try:
        srv.sc("DEFINE QLOCAL(Q1) MAXDEPTH(10)")
        time.sleep(0.05)
        then = time.time()
        time.sleep(0.05)
        srv.sc("ALTER QLOCAL(Q1) MAXDEPTH(20)\nDEFINE QLOCAL(Q2)")
    finally:
        srv.stop()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(then)) + \
        f".{int(then % 1 * 1e6):06d}+00:00"
    past = srv.cli("dump-config", "QT", "--at-time", stamp).stdout
    now = srv.cli("dump-config", "QT").stdout
    assert "DEFINE QLOCAL('Q1')" in past and "MAXDEPTH(10)" in past and "'Q2'" not in past
    assert "MAXDEPTH(20)" in now and "DEFINE QLOCAL('Q2')" in now
