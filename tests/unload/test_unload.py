"""``harbormq unload`` (dmpmqmsg) and ``harbormq load``: a round trip keeps
descriptors, properties, priorities and order; --move takes exactly what it
wrote; the selections; a bad request changes nothing."""

from __future__ import annotations

import json

from support.stomp_helpers import QMServer, stomp_client


def browse_all(port: int, queue: str, n: int) -> list[dict]:
    """The first ``n`` messages, left on the queue (never acknowledged)."""
    conn = stomp_client(port)
    try:
        conn.subscribe(f"/queue/{queue}", id="b", ack="client-individual")
        msgs = conn.col.wait_messages(n, 20)
        return [dict(m.headers, body=m.body) for m in msgs]
    finally:
        conn.disconnect()


def test_unload_move_and_load_round_trip(tmp_path):
    srv = QMServer(tmp_path / "h", "QU").create()
    srv.start()
    try:
        srv.sc("DEFINE QLOCAL(SRC) DEFPSIST(YES)\nDEFINE QLOCAL(DST) DEFPSIST(YES)")
        conn = stomp_client(srv.port)
        for i in range(12):
            conn.send("/queue/SRC", f"m{i}", headers={
                "receipt": f"r{i}", "priority": str(i % 3 * 4), "correlation-id": f"c{i % 2}",
                "app-prop": f"v{i}", "persistent": "true"})
            conn.col.wait_receipt(f"r{i}")
        conn.disconnect()
        copy = tmp_path / "copy.hmqload"
        out = srv.cli("unload", "QU", "SRC", "--to", str(copy)).stdout
        assert "12 message(s) of SRC copied" in out, out
        assert "CURDEPTH(12)" in srv.sc("DISPLAY QLOCAL(SRC) CURDEPTH"), "a copy takes nothing"
        lines = [json.loads(x) for x in copy.read_text().splitlines()]
        assert lines[0]["queue"] == "SRC" and lines[-1] == {"end": True, "messages": 12}
        bodies = [json.loads(x)["properties"].get("app-prop") for x in
                  copy.read_text().splitlines()[1:-1]]
        assert len(bodies) == 12 and None not in bodies
        one = tmp_path / "one.hmqload"
        cid = b"c1".hex()
        out = srv.cli("unload", "QU", "SRC", "--to", str(one), "--correlid", cid).stdout
        assert "6 message(s)" in out, out
        moved = tmp_path / "moved.hmqload"
        out = srv.cli("unload", "QU", "SRC", "--to", str(moved), "--move").stdout
        assert "12 message(s) of SRC moved" in out
        assert "CURDEPTH(0)" in srv.sc("DISPLAY QLOCAL(SRC) CURDEPTH")
        assert moved.read_text().splitlines()[1:] == copy.read_text().splitlines()[1:]
        out = srv.cli("load", "QU", "DST", "--from", str(moved)).stdout
        assert "12 message(s) loaded onto DST" in out, out
        got = browse_all(srv.port, "DST", 12)
        src = [json.loads(x) for x in moved.read_text().splitlines()[1:-1]]
        assert [g["body"] for g in got] == [f"m{i}" for i in
                                            sorted(range(12), key=lambda i: (-(i % 3 * 4), i))]
        assert [g["message-id"] for g in got] == [m["msg_id"] for m in src]
        assert all(g["app-prop"] == f"v{g['body'][1:]}" for g in got)
        # refusals: an unknown queue, a file that cannot be written; nothing taken
        r = srv.cli("unload", "QU", "NOPE", "--to", str(tmp_path / "x"), check=False)
        assert r.returncode == 1 and "NOPE" in r.stderr
        r = srv.cli("unload", "QU", "DST", "--to", str(tmp_path / "no" / "dir" / "f"),
                    "--move", check=False)
        assert r.returncode == 1 and "cannot write" in " ".join(r.stderr.split()), r.stderr
        assert "CURDEPTH(12)" in srv.sc("DISPLAY QLOCAL(DST) CURDEPTH"), "a failed move " \
            "takes nothing"
    finally:
        srv.stop()
