"""The group's campaign: three members under STOMP load with receipts, a
random member SIGKILLed and started again, ``--crash-runs`` times (3 by
default; the issue's 50 with ``--crash-runs 50``). Producers send persistent
messages to a shared queue with receipts, through whichever member is up;
consumers on the members take them with client-individual ACKs, each ACK
with a receipt. At the end the queue is drained. Every receipted message is
consumed exactly once across the group (an ACK whose receipt never came may
or may not have committed: the message is then consumed once, by that ACK
or by a later delivery, never both), and each producer's receipted messages
reach each consumer in the order they were sent (a redelivery aside; a
message whose receipt never came may have been in doubt when its member
died, and is made available by the member's restart, after later ones).

Then the structure is failed under that same load and recovered from the
members' logs: the messages on it come back exactly once."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

import pytest
from support.qsg_campaign import (
    QUEUE,
    Consumer,
    Group,
    Producer,
    check_exactly_once,
    drain,
    member,
)

pytestmark = pytest.mark.slow

@pytest.fixture(scope="module")
def running_group(postgres, tmp_path_factory):
    """One group for the file's tests (its servers start once): each test
    leaves the shared queue empty."""
    db = postgres.create_database("qsg_campaign")
    home = tmp_path_factory.mktemp("campaign") / "hmq"
    members = [member(home, f"QM{i}", db) for i in (1, 2, 3)]
    for m in members:
        m.start()
    members[0].sc("DEFINE CFSTRUCT(APP1) RECAUTO(NO)\n"
                  f"DEFINE QLOCAL({QUEUE}) QSGDISP(SHARED) CFSTRUCT(APP1) DEFPSIST(YES)")
    yield Group(members)
    for m in members:
        m.kill()
    postgres.drop_database("qsg_campaign")


def load(group: Group, producers: int = 3, consumers: int = 2):
    stop_p, stop_c = threading.Event(), threading.Event()
    ps = [Producer(i, group, stop_p) for i in range(producers)]
    cs = [Consumer(i, group, stop_c) for i in range(consumers)]
    for t in ps + cs:
        t.start()
    return ps, cs, stop_p, stop_c


def test_sigkill_of_random_members_under_stomp_load_loses_and_doubles_nothing(
        running_group, request):
    runs = request.config.getoption("--crash-runs") or 3
    group = running_group
    rng = random.Random(1)
    ps, cs, stop_p, stop_c = load(group)
    kills = Counter()
    for _ in range(runs):
        time.sleep(rng.uniform(0.5, 1.5))
        victim = rng.choice(group.members)
        with group.lock:
            group.down.add(victim.name)
        victim.kill()
        kills[victim.name] += 1
        time.sleep(rng.uniform(0.2, 1.0))
        victim.start()
        with group.lock:
            group.down.discard(victim.name)
    time.sleep(1.0)
    stop_p.set()
    for p in ps:
        p.join(30)
    time.sleep(1.0)
    stop_c.set()
    for c in cs:
        c.join(30)
    drained = drain(group.members[0])
    sent = check_exactly_once(ps, cs, drained)
    assert sent > 0 and sum(len(c.confirmed) for c in cs) > 0
    print(f"{runs} kills {dict(kills)}: {sent} receipted, "
          f"{sum(len(c.confirmed) for c in cs)} consumed with a receipt, {len(drained)} drained")


def test_reset_fail_under_load_then_recover_gives_every_message_back_once(running_group):
    group = running_group
    qm1, qm2, _qm3 = group.members
    ps, cs, stop_p, stop_c = load(group, producers=2, consumers=0)
    time.sleep(1.0)
    assert "HMQ5320I" in qm2.sc("BACKUP CFSTRUCT(APP1)")
    time.sleep(1.0)
    out = qm1.sc("RESET CFSTRUCT(APP1) ACTION(FAIL)")     # under load
    assert "HMQ5321W" in out, out
    time.sleep(0.5)                                    # puts now fail (MQRC 2373)
    stop_p.set()
    for p in ps:
        p.join(30)
    out = qm1.sc("RECOVER CFSTRUCT(APP1)")
    assert "HMQ5324I" in out, out
    drained = drain(qm2)
    sent = check_exactly_once(ps, cs, drained)
    assert sent > 0
    stop_c.set()
