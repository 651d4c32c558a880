"""The console's group page's uncommitted counts (http/console_group.py,
``GroupPage.group``) on a store of a private PostgreSQL, without a browser:
right for each shared queue (puts and gets a unit of work holds), counted off
the event loop (the loop runs on while the store's lock is held by another thread),
and with PostgreSQL stopped the page still answers, ``uncom`` null ("–")."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from types import SimpleNamespace

import psycopg
import pytest
from aiohttp.test_utils import make_mocked_request

from harbormq.http.console_group import GroupPage
from harbormq.log.records import Message
from harbormq.qsg import group as qgroup
from harbormq.qsg.queue import SharedQueue
from harbormq.qsg.structure import StructureStore

QUEUES = ("SQ1", "SQ2", "SQ3")


class Displays:
    """The console's DISPLAY reader, canned: the shared queues as MQSC shows them."""

    def __init__(self, context):
        self.context = context

    async def display(self, who, text: str, none_when_refused: bool = False):
        if text.startswith("DISPLAY QLOCAL"):
            return [{"queue": name, "curdepth": 0} for name in (*QUEUES, "GONE")]
        return []


def page_of(store: StructureStore) -> GroupPage:
    shared = {name: SharedQueue(name, {"CFSTRUCT": "APP1"}, store) for name in QUEUES}

    async def principal(request):
        return "root"

    context = SimpleNamespace(core=SimpleNamespace(group=object(), shared_queues=shared),
                              qmgr_name="QM1",
                              authenticator=SimpleNamespace(principal=principal))
    return GroupPage(Displays(context))


async def uncom(page: GroupPage) -> dict:
    response = await page.group(make_mocked_request("GET", "/console/api/group"))
    assert response.status == 200
    return {q["queue"]: q["uncom"] for q in json.loads(response.body)["queues"]}


@pytest.fixture
def store(private_postgres):
    db = private_postgres.create_database("uncom")
    qgroup.join(db, "QSG1", "QM1")
    with psycopg.connect(db, autocommit=True) as conn:
        qgroup.define_structure(conn, "APP1", {})
    s = StructureStore(db, "QM1")
    yield s
    s.close()


def test_uncommitted_counts_off_the_loop_and_null_without_postgresql(store, private_postgres):
    def put(queue: str, body: bytes, uow: int | None) -> None:
        store.put("APP1", queue, Message(body=body, persistent=True), uow)

    put("SQ1", b"a", 1)
    put("SQ1", b"b", 1)
    put("SQ1", b"c", None)                   # committed: not counted
    put("SQ2", b"d", 2)
    put("SQ2", b"e", None)
    assert store.get("SQ2", 3).msg.body == b"e"      # a get a unit of work holds counts too
    put("SQ3", b"f", None)
    page = page_of(store)

    async def while_locked() -> tuple[dict, float]:
        """The page asked while another thread holds the store for 1 s: the
        longest the loop went without ticking meanwhile."""
        held = threading.Event()

        def hold() -> None:
            with store._lock:
                held.set()
                time.sleep(1.0)

        holder = threading.Thread(target=hold)
        holder.start()
        held.wait(5)
        gaps: list[float] = []
        done = False

        async def tick() -> None:
            last = time.monotonic()
            while not done:
                await asyncio.sleep(0.01)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        ticker = asyncio.create_task(tick())
        await asyncio.sleep(0.02)
        try:
            got = await uncom(page)
        finally:
            done = True
            await ticker
            holder.join()
        return got, max(gaps)

    got, gap = asyncio.run(while_locked())
    assert got == {"SQ1": 2, "SQ2": 2, "SQ3": 0, "GONE": None}
    assert gap < 0.5, f"the loop stood {gap:.2f} s: it waited for the store's lock"

    private_postgres.stop("immediate")
    assert asyncio.run(uncom(page)) == dict.fromkeys((*QUEUES, "GONE"))
