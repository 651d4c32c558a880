"""Publish/subscribe over STOMP under SIGKILL (issue 29's crash harness with
topics): publishers SEND to ``/topic/`` with a receipt and ``retain:true``,
durable subscribers (RabbitMQ's ``durable:true`` and ActiveMQ's
``activemq.subscriptionName``) ACK each MESSAGE with a receipt, a third durable
subscription is created in the middle of the run, and the server is
SIGKILLed at random moments and restarted; every client reconnects (a new port
each time) and goes on, the subscribers resuming under their names.

The rules, from what the clients saw (``verify``):

* every publication receipted after a subscription's first SUBSCRIBE receipt
  is delivered on it, and once acknowledged, only once: never two ACK
  receipts, never delivered again after its ACK's receipt (an ACK whose
  receipt a crash took may have committed: that delivery need not come
  again);
* a publication receipted before a subscription's first SUBSCRIBE was sent is
  never delivered on it, except as the retained publication (``retained:true``);
* each publisher's publications come in its order: per subscription and
  connection, the first deliveries of a publisher's sequence numbers rise;
* a publication is all or nothing: one delivered on any subscription is
  delivered on every subscription that existed when it was sent;
* the retained publication of each publisher's topic, read at the end, is its
  last receipted one or one sent after it (committed, its receipt lost).

The same campaign runs with the queue manager's home on lazyfs and a power
cut after each kill (tests/support/lazyfs.py: what was never fsynced is gone):
every start must come up without reporting damage. And a durable SUBSCRIBE
and a deleting UNSUBSCRIBE are killed at the named points of pub/sub
(``HARBORMQ_CRASH_AT``): neither leaves half a subscription.

``--crash-runs N`` sets the number of SIGKILLs (default 4 here; the ``slow``
test runs 30), ``--power-cuts N`` the cuts (default 4, at most 30);
``HARBORMQ_CRASH_SEED`` fixes the seed, printed on failure.
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

import pytest
from support.lazyfs import LazyFS
from support.stomp_helpers import ConnectionClosed, QMServer, RawStomp

from harbormq.fsutil import fsync_dir

SEED = int(os.environ.get("HARBORMQ_CRASH_SEED") or random.randrange(1 << 30))
PUBLISHERS = 2
#: durable subscriptions: (STOMP id, extra SUBSCRIBE headers, CONNECT client-id)
EARLY = [("crash-rabbit", {"durable": "true"}, ""),
         ("crash-amq", {"activemq.subscriptionName": "sub"}, "crash-client")]
LATE = ("crash-late", {"durable": "true"}, "")
PREFETCH = "8"
#: what a start must never say (as tests/recovery/test_power_cut.py): damage,
#: a missing or corrupt log, any other error
BAD_SIGN = re.compile(r"HMQ\d{4}E|HMQ7511W|[Cc]orrupt|Traceback")


def now() -> float:
    return time.monotonic()


@dataclass
class Journal:
    """What the clients saw, each event with its time (one lock for all)."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    sent: dict = field(default_factory=dict)           # (p, n) -> time SEND written
    receipted: dict = field(default_factory=dict)      # (p, n) -> time of its RECEIPT
    #: sub -> time its first SUBSCRIBE was written / first receipted
    sub_sent: dict = field(default_factory=dict)
    sub_ready: dict = field(default_factory=dict)
    #: sub -> [(session, p, n, redelivered, retained, time)]
    delivered: dict = field(default_factory=lambda: defaultdict(list))
    #: sub -> [(p, n, time of the ACK's receipt)]
    acked: dict = field(default_factory=lambda: defaultdict(list))


def connect(srv: QMServer, stop: threading.Event, client_id: str = "") -> RawStomp | None:
    """A connected client, retrying while the server restarts."""
    while not stop.is_set():
        try:
            c = RawStomp(srv.port, timeout=10)
            extra = {"client-id": client_id} if client_id else {}
            f = c.connect(**extra)
            if f.command == "CONNECTED":
                return c
            c.close()
        except (OSError, ConnectionClosed, TimeoutError, TypeError):
            pass
        time.sleep(0.05)
    return None


def publisher(srv: QMServer, j: Journal, p: int, stop: threading.Event) -> None:
    n = 0
    while not stop.is_set():
        c = connect(srv, stop)
        if c is None:
            return
        try:
            while not stop.is_set():
                n += 1
                rid = f"p{p}-{n}"
                with j.lock:
                    j.sent[(p, n)] = now()
                c.send("SEND", {"destination": f"/topic/crash/p{p}", "receipt": rid,
                                "persistent": "true", "retain": "true"}, f"{p}:{n}".encode())
                f = c.recv()
                if f.command != "RECEIPT" or f.get("receipt-id") != rid:
                    raise AssertionError(f"publisher {p}: {f.command} {f.headers}")
                with j.lock:
                    j.receipted[(p, n)] = now()
        except (OSError, ConnectionClosed, TimeoutError):
            pass
        finally:
            c.close()


def subscriber(srv: QMServer, j: Journal, spec, start: threading.Event,
               stop: threading.Event, idle: dict) -> None:
    sub_id, headers, client_id = spec
    start.wait()
    session = 0
    while not stop.is_set():
        c = connect(srv, stop, client_id)
        if c is None:
            return
        session += 1
        pending: dict[str, tuple[int, int]] = {}        # ACK receipt id -> (p, n)
        try:
            with j.lock:
                j.sub_sent.setdefault(sub_id, now())
            c.send("SUBSCRIBE", {"destination": "/topic/crash/#", "id": sub_id,
                                 "ack": "client-individual", "prefetch-count": PREFETCH,
                                 "receipt": "sub", **headers})
            while not stop.is_set():
                try:
                    f = c.recv(0.2)
                except TimeoutError:
                    idle[sub_id] = not pending
                    continue
                idle[sub_id] = False
                if f.command == "RECEIPT" and f["receipt-id"] == "sub":
                    with j.lock:
                        j.sub_ready.setdefault(sub_id, now())
                elif f.command == "RECEIPT":
                    p, n = pending.pop(f["receipt-id"])
                    with j.lock:
                        j.acked[sub_id].append((p, n, now()))
                elif f.command == "MESSAGE":
                    p, n = (int(x) for x in f.body.decode().split(":"))
                    with j.lock:
                        j.delivered[sub_id].append((session, p, n, f["redelivered"] == "true",
                                                    f.get("retained") == "true", now()))
                    rid = f"a{session}-{f['ack']}"
                    pending[rid] = (p, n)
                    c.send("ACK", {"id": f["ack"], "receipt": rid})
                else:
                    raise AssertionError(f"{sub_id}: {f.command} {f.headers} {f.body!r}")
        except (OSError, ConnectionClosed):
            pass
        finally:
            c.close()


def verify(j: Journal, retained: dict[int, int]) -> tuple[list[str], dict]:
    bad: list[str] = []
    subs = sorted(j.sub_ready)
    for sub in subs:
        ready, first_sent = j.sub_ready[sub], j.sub_sent[sub]
        acks = defaultdict(list)
        for p, n, t in j.acked[sub]:
            acks[(p, n)].append(t)
        for key, times in acks.items():
            if len(times) > 1:
                bad.append(f"{sub}: {key} acknowledged {len(times)} times")
        # an ACK whose receipt a crash took may have committed: a delivery
        # without an ACK receipt need not come again, but one must have come
        got = {(p, n) for _s, p, n, _r, _ret, _t in j.delivered[sub]}
        for key in j.receipted:
            if j.sent[key] > ready and key not in got:
                bad.append(f"{sub}: receipted publication {key} (sent after the "
                           "subscription was made) never delivered on it")
        seen_in_session: dict = defaultdict(dict)
        for session, p, n, _redelivered, was_retained, t in j.delivered[sub]:
            key = (p, n)
            if key in acks and t > min(acks[key]):
                bad.append(f"{sub}: {key} delivered again after its ACK's receipt")
            if not was_retained and key in j.receipted and j.receipted[key] < first_sent:
                bad.append(f"{sub}: {key}, receipted before the subscription was asked for, "
                           "was delivered on it")
            if was_retained:
                continue
            last = seen_in_session[(session, p)]
            if n in last:
                continue                      # redelivered in the same session
            if last and n < max(last):
                bad.append(f"{sub}: publisher {p}'s {n} after {max(last)} in session {session}")
            last[n] = True
    # all or nothing: delivered anywhere -> on every subscription made before its SEND
    got = {sub: {(p, n) for _s, p, n, _r, ret, _t in j.delivered[sub] if not ret}
           for sub in subs}
    for key in set().union(*got.values()):
        for sub in subs:
            if j.sub_ready[sub] < j.sent[key] and key not in got[sub]:
                bad.append(f"{sub}: {key} was delivered on another subscription, not on this "
                           "one, which existed when it was sent")
    for p in range(PUBLISHERS):
        done = [n for (q, n) in j.receipted if q == p]
        sent = [n for (q, n) in j.sent if q == p]
        last_receipted = max(done, default=0)
        got = retained.get(p)
        if done and (got is None or not last_receipted <= got <= max(sent)):
            bad.append(f"publisher {p}: retained publication {got}, last receipted "
                       f"{last_receipted}, last sent {max(sent)}")
    stats = {"receipted": len(j.receipted), "sent": len(j.sent),
             "acked": sum(len(v) for v in j.acked.values()),
             "redelivered": sum(1 for v in j.delivered.values() for e in v if e[3])}
    return bad, stats


def read_retained(srv: QMServer) -> dict[int, int]:
    """publisher -> the sequence number of its topic's retained publication."""
    c = RawStomp(srv.port)
    c.connect()
    c.call("SUBSCRIBE", {"destination": "/topic/crash/#", "id": "look", "ack": "auto"})
    out = {}
    for f in c.poll(1.0):
        if f.command == "MESSAGE" and f.get("retained") == "true":
            p, n = (int(x) for x in f.body.decode().split(":"))
            out[p] = n
    c.close()
    return out


def run_campaign(tmp_path, kills: int, fs: LazyFS | None = None) -> None:
    """``kills`` SIGKILLs under load; with ``fs`` (the queue manager's home on
    lazyfs) each is followed by a power cut, torn at random."""
    rng = random.Random(SEED)
    srv = QMServer((fs.mount if fs else tmp_path) / "hmq", "QP", console_dir=tmp_path)
    if fs is not None:
        srv.home.mkdir(parents=True)
        fsync_dir(srv.home.parent)          # a home made long before, as an operator's
    srv.create(log_file_pages=512)
    srv.start()
    j = Journal()
    stop_pub, stop_sub = threading.Event(), threading.Event()
    early_go, late_go = threading.Event(), threading.Event()
    idle: dict = {}
    threads = [threading.Thread(target=subscriber, args=(srv, j, spec, early_go, stop_sub,
                                                         idle), daemon=True) for spec in EARLY]
    threads.append(threading.Thread(target=subscriber, args=(srv, j, LATE, late_go, stop_sub,
                                                             idle), daemon=True))
    for t in threads:
        t.start()
    early_go.set()
    deadline_ready = now() + 30
    while len(j.sub_ready) < len(EARLY):
        assert now() < deadline_ready, "the durable subscriptions were not made"
        time.sleep(0.02)
    pubs = [threading.Thread(target=publisher, args=(srv, j, p, stop_pub), daemon=True)
            for p in range(PUBLISHERS)]
    for t in pubs:
        t.start()
    try:
        for k in range(kills):
            before = len(j.receipted)
            end = now() + 60
            while len(j.receipted) < before + 20:
                assert now() < end, "no publication receipted after a restart"
                time.sleep(0.02)
            if k == kills // 2:
                late_go.set()               # a subscription made in the middle of the run
            time.sleep(rng.uniform(0.0, 0.6))
            srv.kill()
            if fs is not None:
                fs.cut(rng.randrange(1 << 30), rng.random() < 0.5)
            srv.start()
        late_go.set()
        time.sleep(1.0)
        stop_pub.set()
        for t in pubs:
            t.join(30)
        # the subscribers drain: each idle with nothing awaiting a receipt
        end = now() + 60
        while not (len(idle) == len(EARLY) + 1 and all(idle.values())):
            assert now() < end, f"the subscribers did not drain: {idle}"
            time.sleep(0.2)
        time.sleep(0.5)
        stop_sub.set()
        for t in threads:
            t.join(30)
        retained = read_retained(srv)
    finally:
        stop_pub.set()
        stop_sub.set()
        srv.kill()
    said = [n for n in range(1, srv.starts + 1)
            if BAD_SIGN.search((tmp_path / f"{srv.name}.console.{n}.log").read_text(
                errors="replace"))]
    assert not said, f"starts {said} reported damage or errors (console in {tmp_path})"
    bad, stats = verify(j, retained)
    assert stats["receipted"] > 20 * kills, stats
    assert not bad, f"seed {SEED}, {stats}: {len(bad)} violations:\n" + "\n".join(bad[:30])


def test_stomp_pubsub_sigkills(tmp_path, request):
    n = request.config.getoption("--crash-runs")
    run_campaign(tmp_path, 4 if n is None else n)


@pytest.mark.slow
def test_stomp_pubsub_sigkills_long(tmp_path, request):
    n = request.config.getoption("--crash-runs")
    run_campaign(tmp_path, 30 if n is None else n)


def test_stomp_pubsub_power_cuts(tmp_path, request):
    """The same with a power cut after each kill: what was never fsynced is
    gone (status queues, managed queues and the log alike)."""
    n = request.config.getoption("--power-cuts")
    with LazyFS(tmp_path / "lazyfs") as fs:
        run_campaign(tmp_path, 4 if n is None else min(n, 30), fs)


def test_verify_catches_violations():
    """The checker itself: a lost publication, a duplicate ACK, one seen on a
    subscription made after it, out of order, half published, a stale retained."""
    j = Journal()
    j.sub_sent = {"A": 1.0, "B": 10.0}
    j.sub_ready = {"A": 1.5, "B": 10.5}
    for n, t in ((1, 2.0), (2, 3.0), (3, 11.0)):
        j.sent[(0, n)] = t
        j.receipted[(0, n)] = t + 0.1
    j.sent[(1, 1)] = 12.0                                # half published, not receipted
    j.delivered["A"] = [(1, 0, 2, False, False, 4.0), (1, 0, 1, False, False, 4.1),
                        (1, 1, 1, False, False, 13.0)]
    j.acked["A"] = [(0, 2, 5.0), (0, 2, 5.1), (0, 1, 5.2), (1, 1, 13.1)]
    j.delivered["B"] = [(1, 0, 1, False, False, 11.0)]
    j.acked["B"] = [(0, 1, 11.1)]
    bad, _ = verify(j, {0: 1})
    text = "\n".join(bad)
    for fragment in ("(0, 2) acknowledged 2 times", "(0, 3) (sent after the subscription "
                     "was made) never delivered", "receipted before the subscription was "
                     "asked for", "publisher 0's 1 after 2", "(1, 1) was delivered on another "
                     "subscription", "retained publication 1, last receipted 3"):
        assert fragment in text, f"{fragment!r} not reported:\n{text}"


def managed_queues(srv: QMServer) -> list[str]:
    out = srv.sc("DISPLAY QLOCAL('SYSTEM.MANAGED.*')", check=False)   # none: an error
    return re.findall(r"QUEUE\((SYSTEM\.MANAGED\.[^)]*)\)", out)


def crash_at(srv: QMServer, point: str, frame: tuple) -> None:
    """Restart the server set to SIGKILL itself at ``point``, send ``frame``
    (command, headers) on a connection of its own, see the server die before
    any RECEIPT, and start it again without the point."""
    srv.stop()
    srv.env["HARBORMQ_CRASH_AT"] = f"{point}:1"
    srv.start()
    c = RawStomp(srv.port)
    c.connect()
    command, headers = frame
    c.send(command, {**headers, "receipt": "r"})
    srv.proc.wait(timeout=60)
    assert srv.proc.returncode == -9, srv.console()
    assert not [f for f in c.poll(0.5) if f.command == "RECEIPT"], "a RECEIPT before the crash"
    c.close()
    del srv.env["HARBORMQ_CRASH_AT"]
    srv.start()


def test_sigkill_at_named_points_of_a_durable_subscribe_and_unsubscribe(tmp_path):
    """A SUBSCRIBE killed between its managed queue and its status message
    leaves no subscription (its queue deleted at the restart) and can be made
    again; a deleting UNSUBSCRIBE killed after its status message went leaves
    the subscription gone, its queue too."""
    srv = QMServer(tmp_path / "hmq", "QN")
    srv.create()
    srv.start()
    try:
        durable = {"destination": "/topic/np/x", "id": "np-sub", "durable": "true",
                   "ack": "client-individual"}
        crash_at(srv, "pubsub.managed_queue_made", ("SUBSCRIBE", durable))
        assert "np-sub" not in srv.sc("DISPLAY SUB(*)", check=False)
        assert managed_queues(srv) == []
        c = RawStomp(srv.port)
        c.connect()
        c.call("SUBSCRIBE", durable)
        p = RawStomp(srv.port)
        p.connect()
        p.call("SEND", {"destination": "/topic/np/x", "persistent": "true"}, b"one")
        m = c.messages(1)[0]
        assert m.body == b"one"
        c.call("ACK", {"id": m["ack"]})
        c.close()
        p.close()
        assert len(managed_queues(srv)) == 1
        crash_at(srv, "pubsub.status_removed", ("UNSUBSCRIBE", {"id": "np-sub",
                                                                "durable": "true"}))
        assert "np-sub" not in srv.sc("DISPLAY SUB(*)", check=False)
        assert managed_queues(srv) == []
    finally:
        srv.kill()
