"""The clients of the group's campaigns (tests/qsg/test_group_campaign*.py):
members as servers, producers that send with receipts through whichever
member is up, consumers that ACK with receipts, and the exactly-once and
order checks of what they saw."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter, defaultdict

from support.stomp_helpers import ConnectionClosed, QMServer, RawStomp

QUEUE = "SQ"


def member(home, name: str, db: str) -> QMServer:
    srv = QMServer(home, name)
    srv.home.mkdir(parents=True, exist_ok=True)
    srv.cli("create", name, "--port", "0", "--log-file-pages", "256", "--qsg", "QSG1",
            "--qsg-db", db)
    return srv


class Group:
    """The members, which of them are up, and a client's pick of one."""

    def __init__(self, members: list[QMServer]):
        self.members = members
        self.lock = threading.Lock()
        self.down: set[str] = set()

    def pick(self, rng: random.Random) -> int | None:
        with self.lock:
            up = [m.port for m in self.members if m.name not in self.down and m.running]
        return rng.choice(up) if up else None


def connect(group: Group, rng: random.Random) -> RawStomp | None:
    port = group.pick(rng)
    if port is None:
        return None
    try:
        c = RawStomp(port, timeout=10)
        f = c.connect()
        if f.command != "CONNECTED":
            c.close()
            return None
        return c
    except (OSError, ConnectionClosed, AssertionError):
        return None


class Producer(threading.Thread):
    def __init__(self, pid: int, group: Group, stop: threading.Event):
        super().__init__(daemon=True)
        self.pid, self.group, self.stop = pid, group, stop
        self.queue = QUEUE
        self.receipted: list[int] = []
        self.rng = random.Random(pid)

    def run(self) -> None:
        seq = 0
        c = None
        while not self.stop.is_set():
            if c is None:
                c = connect(self.group, self.rng)
                if c is None:
                    time.sleep(0.1)
                    continue
            seq += 1
            try:
                c.call("SEND", {"destination": f"/queue/{self.queue}", "persistent": "true"},
                       f"P{self.pid}-{seq:07d}".encode())
                self.receipted.append(seq)
            except (OSError, ConnectionClosed, AssertionError, TimeoutError):
                c.close()
                c = None
        if c is not None:
            c.close()


class Consumer(threading.Thread):
    def __init__(self, cid: int, group: Group, stop: threading.Event):
        super().__init__(daemon=True)
        self.cid, self.group, self.stop = cid, group, stop
        #: (body, redelivered, session) of each delivery whose ACK receipt came
        self.confirmed: list[tuple[bytes, bool, int]] = []
        #: bodies whose ACK was sent but whose receipt never came
        self.unconfirmed: list[bytes] = []
        self.rng = random.Random(100 + cid)

    def run(self) -> None:
        session = 0
        c = None
        while not self.stop.is_set():
            if c is None:
                c = connect(self.group, self.rng)
                if c is None:
                    time.sleep(0.1)
                    continue
                session += 1
                try:
                    c.call("SUBSCRIBE", {"destination": f"/queue/{QUEUE}", "id": "s",
                                         "ack": "client-individual"})
                except (OSError, ConnectionClosed, AssertionError, TimeoutError):
                    c.close(); c = None
                    continue
            try:
                frames = c.poll(0.2)
            except (OSError, ConnectionClosed):
                c.close(); c = None
                continue
            for f in frames:
                if f.command != "MESSAGE":
                    continue
                try:
                    c.call("ACK", {"id": f["ack"]})
                except (OSError, ConnectionClosed, AssertionError, TimeoutError):
                    self.unconfirmed.append(f.body)
                    c.close(); c = None
                    break
                self.confirmed.append((f.body, f.get("redelivered") == "true", session))
        if c is not None:
            c.close()


def depth(srv: QMServer) -> int:
    """The shared queue's CURDEPTH: every message on it, committed or not."""
    out = srv.sc(f"DISPLAY QLOCAL({QUEUE}) CURDEPTH")
    return int(out.split("CURDEPTH(", 1)[1].split(")", 1)[0])


def drain(srv: QMServer, timeout: float = 300.0) -> list[tuple[bytes, bool]]:
    """Every message on the shared queue, taken through ``srv``: until its
    depth is 0 and nothing came for a second (messages locked by a unit of
    work still open are waited for, up to ``timeout``). (body, redelivered)."""
    c = RawStomp(srv.port, timeout=10)
    c.connect()
    c.call("SUBSCRIBE", {"destination": f"/queue/{QUEUE}", "id": "d", "ack": "auto"})
    out, quiet_since = [], time.monotonic()
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        frames = [f for f in c.poll(0.3) if f.command == "MESSAGE"]
        if frames:
            quiet_since = time.monotonic()
            out += [(f.body, f.get("redelivered") == "true") for f in frames]
        elif time.monotonic() - quiet_since > 1.0 and depth(srv) == 0:
            break
    c.close()
    left = depth(srv)
    assert left == 0, f"{left} messages left on {QUEUE} after the drain ({len(out)} taken)"
    return out


def check_exactly_once(producers, consumers, drained_frames: list[tuple[bytes, bool]]) -> int:
    drained = [b for b, _r in drained_frames]
    confirmed = Counter(b for c in consumers for b, _r, _s in c.confirmed)
    dup = [b for b, n in confirmed.items() if n > 1]
    assert not dup, f"consumed twice: {dup[:5]}"
    both = set(confirmed) & set(drained)
    assert not both, f"consumed and still on the queue: {sorted(both)[:5]}"
    assert len(drained) == len(set(drained)), "a message twice on the queue"
    unconfirmed = {b for c in consumers for b in c.unconfirmed}
    seen = set(confirmed) | set(drained) | unconfirmed
    lost = [(p.pid, s) for p in producers for s in p.receipted
            if f"P{p.pid}-{s:07d}".encode() not in seen]
    assert not lost, f"receipted and never consumed: {lost[:5]} of {len(lost)}"
    # in order per producer: each consumer session, first deliveries only; and the drain.
    # Of receipted messages only: one whose receipt never came may have been in doubt
    # when its member died, and made available by the member's restart, later
    receipted = {f"P{p.pid}-{s:07d}".encode() for p in producers for s in p.receipted}
    streams = [[b for b, redelivered, s in c.confirmed
                if s == session and not redelivered and b in receipted]
               for c in consumers for session in {s for _b, _r, s in c.confirmed}]
    first_drained = [b for b, redelivered in drained_frames if not redelivered]
    for stream in [*streams, [b for b in first_drained if b in receipted]]:
        last: dict[str, int] = defaultdict(int)
        for body in stream:
            pid, seq = body.decode().split("-")
            assert int(seq) > last[pid], f"{body!r} after {pid}-{last[pid]:07d}"
            last[pid] = int(seq)
    return sum(len(p.receipted) for p in producers)
