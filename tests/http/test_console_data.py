"""What the console reads from the core itself (``http/console_data.py``),
without a browser or a server: the queue list's filter, sort, paging and
authority; browsing from a cursor in delivery order past messages a unit of
work holds and expired ones; the depth rates."""

from __future__ import annotations

import time

import pytest

from harbormq.http.console_data import DepthRates, browse_page, name_filter, queue_page
from harbormq.security.authority import AuthorityStore, InvalidAuthority


def test_the_filter_is_a_part_of_the_name_or_a_prefix():
    assert name_filter("pay")("APP.PAY.IN") and not name_filter("pay")("APP.ORDERS")
    assert name_filter("APP.P*")("APP.PAY") and not name_filter("APP.P*")("X.APP.PAY")
    assert name_filter("")("ANY") and name_filter("*")("ANY")
    assert name_filter("A*B")("XAB")          # a star inside is not a pattern: part "AB"


def test_depth_rates_need_two_looks_and_half_a_second():
    now = [100.0]
    rates = DepthRates(memory=2, clock=lambda: now[0])
    assert rates.rate("Q", 10) is None
    now[0] += 2
    assert rates.rate("Q", 30) == 10.0
    now[0] += 0.1                               # too soon: the last figure stays
    assert rates.rate("Q", 1000) == 10.0
    rates.rate("R", 1), rates.rate("S", 1)      # Q is forgotten (memory 2)
    assert rates.rate("Q", 0) is None


def test_queue_page_filters_sorts_pages_and_hides(make_qm, open_qm):
    make_qm("QM1")
    qm = open_qm("QM1")
    for i in range(12):
        qm.define_queue(f"APP.Q{i:02d}")
    for _ in range(3):
        qm.put("APP.Q07", b"x")
    qm.put("APP.Q03", b"x")
    def page(**kw):
        kw.setdefault("may_display", lambda name: True)
        return qm._call_sync(queue_page, qm.core, **kw)
    first = page(filter_text="APP.Q*", limit=5)
    assert first["total"] == 12 and first["names"] == [f"APP.Q{i:02d}" for i in range(5)]
    assert page(filter_text="APP.Q*", limit=5, offset=10)["names"] == ["APP.Q10", "APP.Q11"]
    assert page(filter_text="app.q", sort="depth", limit=2)["names"] == ["APP.Q07", "APP.Q03"]
    hidden = page(filter_text="APP.Q*", may_display=lambda name: name.endswith("7"))
    assert hidden == {"total": 1, "offset": 0, "limit": 50, "names": ["APP.Q07"]}


def test_browse_pages_from_a_cursor(make_qm, open_qm):
    make_qm("QM1")
    qm = open_qm("QM1")
    qm.define_queue("Q", DEFPSIST="YES")
    for i in range(7):
        qm.put("Q", f"m{i}".encode())
    qm.put("Q", b"urgent", priority=9)              # first in delivery order
    qm.put("Q", b"gone", expiry=0.05)
    u = qm.begin()
    held = u.get("Q")                               # a unit of work holds it: not shown
    assert held.body == b"urgent"
    time.sleep(0.1)
    def browse(after=""):
        return qm._call_sync(browse_page, qm.core, "Q", after=after, limit=3)
    pages, after = [], ""
    while True:
        page = browse(after)
        pages.append([m["body"] for m in page["messages"]])
        after = page["next"]
        if after is None:
            break
    assert pages == [["m0", "m1", "m2"], ["m3", "m4", "m5"], ["m6"]]
    assert qm._call_sync(lambda: qm.core.queues["Q"].curdepth) >= 8   # nothing taken
    u.backout()
    assert browse()["messages"][0]["body"] == "urgent" and \
        browse()["messages"][0]["priority"] == 9


def test_the_queues_a_user_may_display_are_decided_at_once_as_one_by_one(tmp_path):
    """The queue list asks ``visible`` for every queue at once: it must let
    through exactly the names ``check`` lets through, for an administrator,
    the owner, a user with generic and specific records, and one with none."""
    store = AuthorityStore(tmp_path / "authrecs.json", owner="root")
    store.set("PAY.**", "QUEUE", group="payments", add=["DSP"])
    store.set("PAY.SECRET", "QUEUE", group="payments", add=["INQ"])   # no DSP: more specific
    store.set("APP.Q1", "QUEUE", principal="ann", add=["ALLADM"])
    names = ["PAY.IN", "PAY.SECRET", "APP.Q1", "APP.Q2", "OTHER"]
    for user, groups in (("admin", ("mqm",)), ("root", ()), ("bob", ("payments",)),
                         ("ann", ()), ("eve", ("nobody",))):
        one_by_one = [n for n in names if store.check(user, groups, "QUEUE", n, "DSP")]
        assert store.visible(user, groups, "QUEUE", names, "DSP") == one_by_one, user
    assert store.visible("bob", ("payments",), "QUEUE", names, "DSP") == ["PAY.IN"]
    assert store.visible("admin", ("mqm",), "QUEUE", names, "DSP") == names
    with pytest.raises(InvalidAuthority):
        store.visible("admin", ("mqm",), "QUEUE", names, "NOSUCH")
