"""PostgreSQL, the group's coupling facility, SIGKILLed and started again
under STOMP load on three members: sends to a local queue of each member go
on receipted while it is down; sends to the shared queue fail with a clear
reason (MQRC 2345) and resume by themselves once it is back; at the end
every receipted message, shared or local, is on its queue exactly once."""

from __future__ import annotations

import threading
import time

import pytest
from support.qsg_campaign import QUEUE, Group, Producer, drain, member
from support.stomp_helpers import RawStomp

pytestmark = pytest.mark.slow


class LocalProducer(Producer):
    """A producer of one member's local queue LQ (it does not move)."""

    def __init__(self, pid: int, srv, stop: threading.Event):
        super().__init__(pid, Group([srv]), stop)
        self.queue = "LQ"


def test_postgres_killed_and_restarted_under_load(tmp_path, private_postgres):
    pg = private_postgres
    db = pg.create_database("qsg_pgkill")
    home = tmp_path / "hmq"
    members = [member(home, f"QM{i}", db) for i in (1, 2, 3)]
    try:
        for m in members:
            m.start()
        members[0].sc("DEFINE CFSTRUCT(APP1) RECAUTO(NO)\n"
                      f"DEFINE QLOCAL({QUEUE}) QSGDISP(SHARED) CFSTRUCT(APP1) DEFPSIST(YES)")
        for m in members:
            m.sc("DEFINE QLOCAL(LQ) DEFPSIST(YES)")
        group = Group(members)
        stop = threading.Event()
        shared = [Producer(i, group, stop) for i in range(2)]
        local = [LocalProducer(10 + i, m, stop) for i, m in enumerate(members)]
        for t in shared + local:
            t.start()
        time.sleep(1.0)
        pg.kill()
        before = [len(p.receipted) for p in local]
        time.sleep(2.0)
        # local queues are unaffected; the shared queue says why it fails
        assert all(len(p.receipted) > n for p, n in zip(local, before, strict=True))
        c = RawStomp(members[1].port, timeout=10)
        c.connect()
        c.send("SEND", {"destination": f"/queue/{QUEUE}", "persistent": "true",
                        "receipt": "r"}, b"while down")
        f = c.recv(15)
        assert f.command == "ERROR" and b"2345" in (f.body + f.get("message", "").encode()), \
            (f.headers, f.body)
        c.close()
        pg.start()
        shared_before = sum(len(p.receipted) for p in shared)
        deadline = time.monotonic() + 30
        while sum(len(p.receipted) for p in shared) < shared_before + 20:
            assert time.monotonic() < deadline, "shared sends did not resume"
            time.sleep(0.2)
        stop.set()
        for t in shared + local:
            t.join(30)
        drained = [b for b, _r in drain(members[0])]
        assert len(drained) == len(set(drained))
        for p in shared:
            want = {f"P{p.pid}-{s:07d}".encode() for s in p.receipted}
            assert want <= set(drained), sorted(want - set(drained))[:5]
        for p, m in zip(local, members, strict=True):
            c = RawStomp(m.port, timeout=10)
            c.connect()
            c.call("SUBSCRIBE", {"destination": "/queue/LQ", "id": "d", "ack": "auto"})
            got, quiet = [], time.monotonic()
            while time.monotonic() - quiet < 1.5:
                frames = [f.body for f in c.poll(0.3) if f.command == "MESSAGE"]
                if frames:
                    quiet = time.monotonic()
                got += frames
            c.close()
            assert len(got) == len(set(got))
            want = {f"P{p.pid}-{s:07d}".encode() for s in p.receipted}
            assert want <= set(got), sorted(want - set(got))[:5]
    finally:
        for m in members:
            m.kill()
