"""An ACK whose record meets a full log: the real queue manager and STOMP
connection in this process, with the log's append made to raise LogFull for
chosen records (a circular log full at that moment, on cue)."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from types import SimpleNamespace

import pytest
from support.stomp_helpers import build_frame, raw_connected

from harbormq.errors import LogFull
from harbormq.log.records import RecordType
from harbormq.security import Principal
from harbormq.stomp.connection import StompConnection
from harbormq.stomp.listener import StompService


class _Anyone:
    """Security that lets every connection in (what is tested is the log)."""
    def authenticate(self, login, passcode, **kw):
        return SimpleNamespace(user="tester", groups=[], owner=True)


class _AdmitAnyone:
    """The service's admission (stomp/admission.py), letting every connection
    in as ``_Anyone`` does: slots and channel rules are not what is tested."""
    def arrived(self, conn):
        return None

    def left(self, conn):
        pass

    def connect_started(self, conn):
        pass

    def admit(self, conn):
        pass

    async def authenticate(self, conn, login, passcode, **kw):
        return Principal("tester", owner=True)

    def close(self):
        pass


@pytest.fixture
def stomp_qm(make_qm, open_qm):
    """(queue manager, STOMP port, full(pred)): ``full`` makes every record
    for which ``pred`` is true fail with LogFull (None: none)."""
    make_qm()
    qm = open_qm()
    core = qm.core
    service = StompService(core, qm.config, _Anyone())
    service.admission = _AdmitAnyone()
    failing = {"pred": None}
    append = core.log.append

    def append_or_full(rec):
        if failing["pred"] is not None and failing["pred"](rec):
            raise LogFull("the circular log is full (injected)")
        return append(rec)

    async def start() -> int:
        service.loop = asyncio.get_running_loop()
        server = await service.loop.create_server(lambda: StompConnection(service, "T"),
                                                  "127.0.0.1", 0)
        service.servers.append(server)
        core.log.append = append_or_full
        return server.sockets[0].getsockname()[1]
    port = qm._call(start())
    yield qm, port, lambda pred: failing.update(pred=pred)
    failing["pred"] = None


def _settle(qm, until, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not until() and time.monotonic() < deadline:
        time.sleep(0.02)


@pytest.mark.parametrize("ack", ["client-individual", "client"])
def test_an_ack_the_full_log_refuses_gives_its_messages_back(stomp_qm, ack):
    """The ACK fails (ERROR, the connection ends), and every delivery it did
    not commit is backed out with the connection: available again, and a
    controlled close does not wait for it. (The connection forgot a delivery
    before committing it: one logged at its ACK held no log, so nothing ever
    released it, and a controlled stop waited for it forever.)"""
    qm, port, full = stomp_qm
    qm.define_queue("Q1", DEFPSIST="YES")
    for body in (b"a", b"b", b"c"):
        qm.put("Q1", body)
    c = raw_connected(port)
    c.send("SUBSCRIBE", {"id": "s", "destination": "/queue/Q1", "ack": ack})
    msgs = c.messages(3)
    gets = []

    def second_get_fails(rec) -> bool:
        if rec.type == RecordType.MSG_GET:
            gets.append(rec)
            return len(gets) == (2 if ack == "client" else 1)
        return False
    full(second_get_fails)
    c.send("ACK", {"id": msgs[-1 if ack == "client" else 0]["ack"], "receipt": "r"})
    frames = c.wait_closed()
    assert [f.command for f in frames][-1] == "ERROR" and "full" in frames[-1].body.decode()
    full(None)
    c.close()
    core = qm.core
    _settle(qm, lambda: not core.queues["Q1"].locked)
    assert not core.queues["Q1"].locked
    assert not core.uows, "no unit of work is left behind"
    left = {m.body: m.backout_count for m in qm.browse("Q1")}
    if ack == "client":
        assert left == {b"b": 1, b"c": 1}, "a was acknowledged before the log filled"
    else:
        assert left == {b"a": 1, b"b": 1, b"c": 1}
    t0 = time.monotonic()
    qm.close("controlled", timeout=10)
    assert time.monotonic() - t0 < 5


def test_a_hardenbo_delivery_whose_get_the_full_log_refuses_leaves_no_unit_of_work(stomp_qm):
    """From a HARDENBO queue a delivery logs UOW_BEGIN, then MSG_GET; the log
    fills between the two. The subscription fails (ERROR), and the unit of work
    with only its BEGIN is backed out, not left pinning the log (discarding it
    raised, as it had a record)."""
    qm, port, full = stomp_qm
    qm.define_queue("HB", DEFPSIST="YES", HARDENBO="YES")
    qm.put("HB", b"h")
    full(lambda rec: rec.type == RecordType.MSG_GET)
    c = raw_connected(port)
    c.send("SUBSCRIBE", {"id": "s", "destination": "/queue/HB", "ack": "client-individual"})
    frames = c.wait_closed()
    assert frames[-1].command == "ERROR" and "full" in frames[-1].body.decode()
    full(None)
    c.close()
    core = qm.core
    _settle(qm, lambda: not core.uows)
    assert not core.uows and not core.queues["HB"].locked
    assert [(m.body, m.backout_count) for m in qm.browse("HB")] == [(b"h", 0)]


def test_an_error_while_receipts_wait_for_a_force_sends_them_first(stomp_qm, monkeypatch, caplog):
    """Receipts waiting for a force when a later SEND fails (the log full): the
    frames before the failing one were applied, so their RECEIPTs go out, then
    the ERROR, then the close. (The ERROR went first and half-closed the
    socket; the receipts released by the force then wrote after write_eof:
    'RuntimeError: Cannot call write() after write_eof()', and were lost.)"""
    qm, port, full = stomp_qm
    qm.define_queue("Q1", DEFPSIST="YES")
    real_fdatasync = os.fdatasync

    def slow_fdatasync(fd):             # the force is still running when r2 fails
        time.sleep(0.3)
        real_fdatasync(fd)
    monkeypatch.setattr(os, "fdatasync", slow_fdatasync)
    puts = []

    def second_put_fails(rec) -> bool:
        if rec.type == RecordType.MSG_PUT:
            puts.append(rec)
            return len(puts) == 2
        return False
    full(second_put_fails)
    c = raw_connected(port)
    c.send_bytes(build_frame("SEND", {"destination": "/queue/Q1", "receipt": "r1"}, b"one")
                 + build_frame("SEND", {"destination": "/queue/Q1", "receipt": "r2"}, b"two"))
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        frames = c.wait_closed()
        time.sleep(0.6)             # the force ends meanwhile, and what it releases runs
    full(None)
    c.close()
    assert [(f.command, f.get("receipt-id")) for f in frames] == \
        [("RECEIPT", "r1"), ("ERROR", "r2")], frames
    assert "full" in frames[-1].body.decode()
    assert not [r for r in caplog.records if "write_eof" in r.getMessage()]
    assert [m.body for m in qm.browse("Q1")] == [b"one"]
