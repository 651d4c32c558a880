"""Volume: slow consumers held back by the transport (not buffered in the server
without bound, not dropped while they still send heart-beats), stomp.py clients
producing and consuming at once, and thousands of pipelined frames cut at random
points.

Not here: a full queue holding its producers back (test_stomp_flow_control.py).
"""

from __future__ import annotations

import socket
import threading
import time

from support.stomp_helpers import (
    deadline_wait,
    depth,
    subscribe,
)


def test_slow_consumer_is_not_buffered_without_bound(server, conns):
    """ack:auto removes a message as it is written; a consumer that does not read
    must stop the server writing (transport backpressure), so most messages stay
    on the queue instead of piling up in server memory."""
    c = conns.raw(server.port)
    body = b"z" * 16384
    n = 1200                                       # ~19 MiB
    for _ in range(n):
        c.send("SEND", {"destination": "/queue/SLOW.Q", "persistent": "false"}, body)
    c.call("BEGIN", {"transaction": "sync"})
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    slow.connect(("127.0.0.1", server.port))
    try:
        slow.sendall(b"CONNECT\naccept-version:1.2\nhost:x\n\n\0"
                     b"SUBSCRIBE\nid:1\ndestination:/queue/SLOW.Q\nack:auto\n\n\0")
        before, end = -1, time.monotonic() + 30
        while time.monotonic() < end:
            time.sleep(0.3)
            stable = depth(server, "SLOW.Q")
            if stable == before:
                break
            before = stable
        assert stable > n // 2, f"only {stable} of {n} left: the server buffers the rest"
        # reading drains everything
        slow.settimeout(20)
        total = b""
        while total.count(body) < n:
            chunk = slow.recv(1 << 20)
            assert chunk
            total += chunk
            if len(total) > 2 * n * len(body):
                break
        assert total.count(body) == n
    finally:
        slow.close()


def test_slow_consumer_with_heartbeats_is_not_dropped(server, conns):
    """Regression: with its socket full the server stopped reading from the client,
    did not see its heart-beats, and dropped it (losing the ack:auto messages
    already in the write buffer)."""
    c = conns.raw(server.port)
    body = b"h" * 16384
    n = 600
    for _ in range(n):
        c.send("SEND", {"destination": "/queue/SLOWHB.Q", "persistent": "false"}, body)
    c.call("BEGIN", {"transaction": "sync"})
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    slow.connect(("127.0.0.1", server.port))
    try:
        slow.sendall(b"CONNECT\naccept-version:1.2\nhost:x\nheart-beat:500,0\n\n\0"
                     b"SUBSCRIBE\nid:1\ndestination:/queue/SLOWHB.Q\nack:auto\n\n\0")
        end = time.monotonic() + 2.5          # busy elsewhere, but beating every 200 ms
        while time.monotonic() < end:
            slow.sendall(b"\n")
            time.sleep(0.2)
        slow.settimeout(20)
        data = b""
        while data.count(body) < n:
            chunk = slow.recv(1 << 20)
            assert chunk, f"closed after {data.count(body)} of {n} messages"
            data += chunk
            assert b"ERROR" not in data
        assert data.count(body) == n
    finally:
        slow.close()


def test_many_stomp_py_clients_in_parallel(server, conns):
    """8 stomp.py producers and consumers at once: every receipted message is
    delivered exactly once to the consumers (client-individual, acked)."""
    per = 60
    producers = [conns.stomp(server.port) for _ in range(4)]
    consumers = [conns.stomp(server.port) for _ in range(4)]
    seen: list[str] = []
    lock = threading.Lock()

    for i, c in enumerate(consumers):
        def on_message(frame, c=c):
            with lock:
                seen.append(frame.body)
            c.ack(frame.headers["ack"])
        c.col.on_message = on_message
        c.subscribe("/queue/PAR.Q", id=f"c{i}", ack="client-individual",
                    headers={"prefetch-count": "8"})

    def produce(k, p):
        for j in range(per):
            p.send("/queue/PAR.Q", f"p{k}-{j}", headers={"receipt": f"p{k}-{j}",
                                                         "persistent": "true"})
    threads = [threading.Thread(target=produce, args=(k, p)) for k, p in enumerate(producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for k, p in enumerate(producers):
        p.col.wait_receipt(f"p{k}-{per - 1}", 30)
        assert len(p.col.receipts) == per
    deadline_wait(lambda: len(seen) >= 4 * per, 30, what="all messages consumed")
    time.sleep(0.2)
    assert sorted(seen) == sorted(f"p{k}-{j}" for k in range(4) for j in range(per))
    deadline_wait(lambda: depth(server, "PAR.Q") == 0, 10, what="queue drained")


def test_pipelined_flood_split_at_random_points(server, conns):
    """Thousands of frames in one stream, cut into random pieces: every SEND is
    receipted in order and delivered once, bodies intact."""
    import random

    from support.stomp_helpers import build_frame
    rng = random.Random(11)
    n = 3000
    blob = b"".join(build_frame("SEND", {"destination": "/queue/FLOOD.Q", "receipt": f"f{i}",
                                         "i": str(i), "esc": "a:b\nc"},
                                f"body {i} \0 {'x' * rng.randrange(200)}".encode())
                    + rng.choice([b"", b"\n", b"\r\n"]) for i in range(n))
    c = conns.raw(server.port)
    pos = 0
    while pos < len(blob):
        step = rng.randrange(1, 4096)
        c.send_bytes(blob[pos:pos + step])
        pos += step
    got = [c.expect("RECEIPT")["receipt-id"] for _ in range(n)]
    assert got == [f"f{i}" for i in range(n)]
    subscribe(c, "FLOOD.Q", ack="client", **{"prefetch-count": "1024"})
    seen = []
    while len(seen) < n:
        batch = c.messages(min(1024, n - len(seen)))
        seen += batch
        c.call("ACK", {"id": batch[-1]["ack"]})
    assert [int(m["i"]) for m in seen] == list(range(n))
    assert all(m["esc"] == "a:b\nc" and m.body.startswith(f"body {m['i']} \0".encode())
               for m in seen)
