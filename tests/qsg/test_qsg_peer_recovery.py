"""Peer recovery with real servers and STOMP clients: a member SIGKILLed
while it holds a shared message in a consumer's unit of work; a consumer on
the other member gets it within seconds, with no operator, and the
survivor's operator log says each phase (CSQE011I..CSQE014I). The killed
member starts again and takes its place in the group."""

from __future__ import annotations

import time

from support.stomp_helpers import QMServer, raw_connected, send_all, subscribe


def member(home, name: str, db: str) -> QMServer:
    srv = QMServer(home, name)
    srv.home.mkdir(parents=True, exist_ok=True)
    srv.cli("create", name, "--port", "0", "--log-file-pages", "256", "--qsg", "QSG1",
            "--qsg-db", db)
    return srv


def test_a_killed_members_locked_message_is_redelivered_by_a_peer(tmp_path, qsg_db):
    home = tmp_path / "hmq"
    qm1, qm2 = member(home, "QM1", qsg_db), member(home, "QM2", qsg_db)
    qm1.start(); qm2.start()
    try:
        qm1.sc("DEFINE CFSTRUCT(APP1)\nDEFINE QLOCAL(SQ) QSGDISP(SHARED) CFSTRUCT(APP1)")
        c1 = raw_connected(qm1.port)
        send_all(c1, "SQ", [b"held"], persistent="true")
        subscribe(c1, "SQ", "s1", ack="client-individual")
        [m1] = c1.messages(1)
        assert m1.body == b"held" and m1["redelivered"] == "false"
        c2 = raw_connected(qm2.port)
        subscribe(c2, "SQ", "s2", ack="client-individual")
        assert not [f for f in c2.poll(0.5) if f.command == "MESSAGE"]   # locked to QM1
        t0 = time.monotonic()
        qm1.kill()
        [m2] = c2.messages(1, timeout=15)
        took = time.monotonic() - t0
        assert m2.body == b"held" and m2["redelivered"] == "true"
        assert took < 5, f"redelivered {took:.2f} s after the SIGKILL"
        c2.call("ACK", {"id": m2["ack"]})
        oplog = (qm2.qm_dir / "errors" / "HMQERR01.LOG").read_text()
        for phase in ("CSQE011I", "CSQE012I", "CSQE014I"):
            assert phase in oplog and "QM1" in oplog, oplog[-2000:]
        # the killed member starts again: ACTIVE in the group, the queue empty
        qm1.start()
        out = qm1.sc("DISPLAY GROUP\nDISPLAY QLOCAL(SQ) CURDEPTH")
        assert out.count("STATUS(ACTIVE)") == 2 and "CURDEPTH(0)" in out, out
        c2.close()
    finally:
        qm1.kill(); qm2.kill()
