"""Kill -9 either side of a channel, at its named crash points and at random
moments, while a STOMP producer sends through it: every receipted message
arrives exactly once, in the order sent; nothing is duplicated (issue:
channels §3). Receipts on QMA are the ground truth; each body is unique, so
a message that was sent but not receipted may arrive at most once.

``--crash-runs N`` sets the number of random kills (default 92, which with the
8 named-point kills makes 100 in CI); ``HARBORMQ_CRASH_SEED`` fixes the seed.
"""

from __future__ import annotations

import os
import random
import threading
import time

import pytest
from support.stomp_helpers import stomp_client
from test_channels import pair, receive_all, send_all

DEFAULT_RANDOM_KILLS = 92
SEED = int(os.environ.get("HARBORMQ_CRASH_SEED") or random.randrange(1 << 30))
NAMED = [("a", "channel.sender_prepared"), ("a", "channel.sender_confirmed"),
         ("b", "channel.receiver_before_commit"), ("b", "channel.receiver_committed")]


class Producer(threading.Thread):
    """Sends m0, m1, ... to /queue/TO.B on QMA, one at a time with a receipt;
    reconnects (QMA's port changes at each start) when QMA is down."""

    def __init__(self, srv):
        super().__init__(daemon=True)
        self.srv = srv
        self.receipted: list[str] = []
        self.unknown: list[str] = []       # sent, no receipt: at most once
        self.stop_flag = threading.Event()
        self.n = 0

    def run(self):
        conn = None
        while not self.stop_flag.is_set():
            if conn is None:
                try:
                    if not self.srv.running:
                        time.sleep(0.05)
                        continue
                    conn = stomp_client(self.srv.port)
                except Exception:
                    time.sleep(0.05)
                    continue
            body = f"m{self.n}"
            self.n += 1
            try:
                conn.send("/queue/TO.B", body, headers={"receipt": body, "persistent": "true"})
                conn.col.wait_receipt(body, 10)
                self.receipted.append(body)
            except Exception:
                self.unknown.append(body)
                try:
                    conn.disconnect()
                except Exception:
                    pass
                conn = None
        if conn is not None:
            try:
                conn.disconnect()
            except Exception:
                pass


def crash_at(srv, point: str | None) -> None:
    """Restart ``srv`` with (or without) a crash point armed."""
    if point:
        srv.env["HARBORMQ_CRASH_AT"] = point
    else:
        srv.env.pop("HARBORMQ_CRASH_AT", None)


def wait_dead(srv, timeout: float = 30) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if srv.proc.poll() is not None:
            return True
        time.sleep(0.02)
    return False


def settle_and_check(a, b, producer) -> dict:
    """Stop producing; wait for the channel to drain QMA's transmission queue;
    read everything on QMB; check the rules."""
    producer.stop_flag.set()
    producer.join(30)
    end = time.monotonic() + 120
    while True:
        # UNCOM(NO) too: a batch the sender has got but not yet prepared is in no
        # CURDEPTH and not in doubt, only locked
        status = a.sc("DISPLAY QSTATUS(QMB) CURDEPTH UNCOM\n"
                      "DISPLAY CHSTATUS(QMA.TO.QMB) INDOUBT")
        if "CURDEPTH(0)" in status and "UNCOM(NO)" in status and "INDOUBT(NO)" in status:
            break
        assert time.monotonic() < end, f"the channel did not drain:\n{status}\n{a.console()}"
        time.sleep(0.2)
    depth = int(b.sc("DISPLAY QLOCAL(IN) CURDEPTH").split("CURDEPTH(")[1].split(")")[0])
    # (one ACK at a time: some 200 messages/s on a loaded machine)
    got = receive_all(b.port, "IN", depth, timeout=60 + depth / 50) if depth else []
    seen = set()
    dups = [x for x in got if x in seen or seen.add(x)]
    assert not dups, f"duplicated: {dups[:10]}"
    missing = [x for x in producer.receipted if x not in seen]
    assert not missing, f"receipted and lost: {missing[:10]} (seed {SEED})"
    stray = seen - set(producer.receipted) - set(producer.unknown)
    assert not stray, f"never sent: {sorted(stray)[:10]}"
    order = [x for x in got if x in set(producer.receipted)]
    assert order == producer.receipted, f"order broken (seed {SEED})"
    return {"receipted": len(producer.receipted), "unknown": len(producer.unknown),
            "arrived": len(got)}


@pytest.mark.parametrize("side,point", NAMED)
def test_kill_at_a_named_crash_point(tmp_path, side, point):
    a, b, _ = pair(tmp_path, batchsz=5)
    producer = Producer(a)
    producer.start()
    try:
        victim = a if side == "a" else b
        for _ in range(2):       # twice: also while a batch from the first is in doubt
            victim.stop()
            crash_at(victim, point)
            try:
                victim.start()
            except AssertionError:
                assert victim.proc.poll() is not None   # killed at the point while starting
            assert wait_dead(victim, 60), f"{point} was never reached"
            crash_at(victim, None)
            victim.start()
        stats = settle_and_check(a, b, producer)
        assert stats["receipted"] > 0
        assert "HMQ9520I" in (a.qm_dir / "errors" / "HMQERR01.LOG").read_text() or \
            point.startswith("channel.receiver_before"), "an in-doubt batch was resolved"
    finally:
        producer.stop_flag.set()
        a.stop()
        b.stop()


def test_random_kills_of_either_side(tmp_path, request):
    n = request.config.getoption("--crash-runs")
    kills = DEFAULT_RANDOM_KILLS if n is None else n
    rng = random.Random(SEED)
    a, b, _ = pair(tmp_path, batchsz=rng.choice([1, 5, 20]))
    producer = Producer(a)
    producer.start()
    try:
        for _ in range(kills):
            time.sleep(rng.uniform(0.05, 0.6))
            victim = a if rng.random() < 0.5 else b
            victim.kill()
            victim.start()
        stats = settle_and_check(a, b, producer)
        print(f"channel kills: {kills}, {stats}; seed {SEED}")
        assert stats["receipted"] > kills, "the producer made progress between kills"
    finally:
        producer.stop_flag.set()
        a.stop()
        b.stop()


def test_a_reset_channel_whose_first_batch_is_cut_short_goes_on(tmp_path):
    """RESET CHANNEL SEQNUM(10) on the sender, then the receiver dies before it
    commits the first batch: the batch is backed out at the sender and sent
    again with number 10, and the receiver, which never committed it, adopts
    the reset numbering (a review found it stopped with HMQ9526E instead)."""
    a, b, _ = pair(tmp_path, batchsz=5)
    try:
        send_all(a.port, "/queue/TO.B", ["m0"])
        assert receive_all(b.port, "IN", 1) == ["m0"]
        a.sc("STOP CHANNEL(QMA.TO.QMB)\nRESET CHANNEL(QMA.TO.QMB) SEQNUM(10)")
        b.stop()
        crash_at(b, "channel.receiver_before_commit")
        b.start()
        send_all(a.port, "/queue/TO.B", ["x0"])
        a.sc("START CHANNEL(QMA.TO.QMB)")
        assert wait_dead(b, 60)
        crash_at(b, None)
        b.start()
        assert receive_all(b.port, "IN", 1) == ["x0"]
        assert "LSTSEQNO(10)" in b.sc("DISPLAY CHSTATUS(QMA.TO.QMB) ALL")
        assert "HMQ9526E" not in (a.qm_dir / "errors" / "HMQERR01.LOG").read_text()
    finally:
        a.stop()
        b.stop()
