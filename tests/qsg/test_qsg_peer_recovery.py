"""Peer recovery with a real server and a STOMP client: member QM1, a server
process, is SIGKILLed while it holds a shared message in a consumer's unit
of work; a getter on member QM2 gets it within seconds, with no operator,
and QM2's operator log says each phase (CSQE011I..CSQE014I). QM1 then
starts again and takes its place in the group."""

from __future__ import annotations

import threading
import time

from support.stomp_helpers import QMServer, raw_connected, send_all, subscribe

from harbormq.admin.commands import run_mqsc


def test_a_killed_members_locked_message_is_redelivered_by_a_peer(home, make_qm, open_qm,
                                                                   qsg_db):
    make_qm("QM1", qsg="QSG1", qsg_db=qsg_db, port=0)
    make_qm("QM2", qsg="QSG1", qsg_db=qsg_db, port=0)
    qm2 = open_qm("QM2")
    r = qm2._call(run_mqsc(qm2.core, "DEFINE CFSTRUCT(APP1)\n"
                                     "DEFINE QLOCAL(SQ) QSGDISP(SHARED) CFSTRUCT(APP1)\n",
                           security=None))
    assert r["errors"] == 0, r["output"]
    qm1 = QMServer(home, "QM1").start()
    try:
        c1 = raw_connected(qm1.port)
        send_all(c1, "SQ", [b"held"], persistent="true")
        subscribe(c1, "SQ", "s1", ack="client-individual")
        [m1] = c1.messages(1)
        assert m1.body == b"held" and m1["redelivered"] == "false"
        assert qm2.get("SQ") is None                 # locked to QM1's unit of work
        got: list = []
        getter = threading.Thread(target=lambda: got.append(qm2.get("SQ", wait=20)))
        getter.start()
        t0 = time.monotonic()
        qm1.kill()
        getter.join(30)
        took = time.monotonic() - t0
        assert got and got[0] is not None and got[0].body == b"held", got
        assert got[0].backout_count == 1
        assert took < 5, f"redelivered {took:.2f} s after the SIGKILL"
        oplog = (home / "qmgrs" / "QM2" / "errors" / "HMQERR01.LOG").read_text()
        for phase in ("CSQE011I", "CSQE012I", "CSQE014I"):
            assert phase in oplog, oplog[-2000:]
        assert "failed member QM1" in oplog
    finally:
        qm1.kill()
    # the killed member starts again: ACTIVE in the group, its log's unit of
    # work backed out, the queue empty
    qm1 = open_qm("QM1")
    out = qm1._call(run_mqsc(qm1.core, "DISPLAY GROUP\nDISPLAY QLOCAL(SQ) CURDEPTH\n",
                             security=None))["output"]
    assert out.count("STATUS(ACTIVE)") == 2 and "CURDEPTH(0)" in out, out
    assert qm1.restart_report.uows_backed_out == 1
