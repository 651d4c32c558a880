"""/metrics on a real server (the ``web`` fixture): the figures equal what
the queue manager says of itself (DISPLAY QSTATUS, DISPLAY QMSTATUS,
DISPLAY UOW) after puts and gets of a real stomp.py client, scraped while
that client works; the text parses by prometheus_client's parser; gzip and
``?queue=``; who may scrape (+dsp on the queue manager)."""

from __future__ import annotations

import gzip
import json
import re
import threading

from prometheus_client.parser import text_string_to_metric_families
from support.stomp_helpers import deadline_wait, stomp_client
from support.web_helpers import WebClient, web_client

QM = "QW"


def parse(body: bytes) -> dict:
    """{(sample name, labels without qmgr): value}; every family's type checked."""
    out = {}
    for fam in text_string_to_metric_families(body.decode()):
        assert fam.type in ("gauge", "counter", "histogram"), fam.name
        for s in fam.samples:
            assert s.labels.pop("qmgr") == QM
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def scrape(client: WebClient, query: str = "") -> dict:
    status, headers, body = client.call("GET", "/metrics" + query)
    assert status == 200, body
    assert headers["content-type"].startswith("text/plain; version=0.0.4")
    return parse(body)


def attr(text: str, name: str) -> int:
    m = re.search(rf"\b{name}\((\d+)\)", text)
    assert m, text
    return int(m.group(1))


def q(name: str) -> tuple:
    return (("queue", name),)


def test_metrics_equal_the_queue_managers_figures_under_load(web, admin):
    queue = "MET.LOAD"
    producer = stomp_client(web.port)
    consumer = stomp_client(web.port)
    scrapes, stop = [], threading.Event()

    def scrape_while_loaded():
        while not stop.is_set():
            scrapes.append(scrape(admin, "?queue=MET.*"))

    def another_scrape():
        """Let at least one more scrape run amid the traffic."""
        seen = len(scrapes)
        deadline_wait(lambda: len(scrapes) > seen, what="a scrape")

    scraper = threading.Thread(target=scrape_while_loaded)
    scraper.start()
    try:
        for i in range(300):
            producer.send(f"/queue/{queue}", f"m{i}", headers={"persistent": "true"},
                          receipt=f"r{i}" if i % 50 == 49 else None)
            if i % 100 == 0:
                another_scrape()
        producer.col.wait(lambda: len(producer.col.receipts) == 6, what="the producer's receipts")
        consumer.subscribe(f"/queue/{queue}", id="s1", ack="client-individual",
                           headers={"activemq.prefetchSize": "1000"})
        got = consumer.col.wait(lambda: len(consumer.col.messages) >= 120,
                                what="messages")
        for i, frame in enumerate(consumer.col.messages[:120]):
            consumer.ack(frame.headers["ack"])
            if i % 60 == 0:
                another_scrape()
        consumer.unsubscribe("s1")
        consumer.disconnect()       # the deliveries not acknowledged go back
        # a transaction with a persistent send open: one unit of work in the log
        producer.begin("tx1")
        producer.send(f"/queue/{queue}", "in tx", headers={"persistent": "true"},
                      transaction="tx1")
        producer.send("/queue/MET.OTHER", "x", receipt="sync")
        producer.col.wait(lambda: "sync" in producer.col.receipts, what="the sync receipt")
    finally:
        stop.set()
        scraper.join()
    assert got and len(scrapes) >= 5          # scraped while the client worked
    assert all(s[("harbormq_queue_depth", q(queue))] <= 301 for s in scrapes
               if ("harbormq_queue_depth", q(queue)) in s)
    qmstatus = web.sc("DISPLAY QMSTATUS ALL")
    m = scrape(admin)
    qstatus = web.sc(f"DISPLAY QSTATUS({queue}) CURDEPTH UNCOM")
    assert m[("harbormq_queue_depth", q(queue))] == attr(qstatus, "CURDEPTH") == 300 - 120 + 1
    assert m[("harbormq_queue_uncommitted_messages", q(queue))] == attr(qstatus, "UNCOM") == 1
    assert m[("harbormq_queue_puts_total", q(queue))] == 300
    assert m[("harbormq_queue_gets_total", q(queue))] == 120
    # the deliveries not acknowledged were backed out when the consumer left
    assert m[("harbormq_queue_backouts_total", q(queue))] == len(consumer.col.messages) - 120
    uows = web.sc("DISPLAY UOW(*)")
    assert m[("harbormq_units_of_work", (("state", "active"),))] == \
        uows.count("STATE(ACTIVE)") == 1
    currlsn = attr(qmstatus, "CURRLSN")
    after = attr(web.sc("DISPLAY QMSTATUS ALL"), "CURRLSN")
    assert currlsn <= m[("harbormq_log_written_bytes_total", ())] <= after
    assert m[("harbormq_log_restart_bytes", ())] >= 0
    assert m[("harbormq_log_forces_total", ())] >= 6
    assert m[("harbormq_connections", ())] == attr(qmstatus, "CONNS") >= 1
    assert m[("harbormq_connections_closed_total", ())] >= 1
    producer.abort("tx1")
    producer.disconnect()


def test_gzip_and_queue_patterns(web, admin):
    web.sc("DEFINE QLOCAL(MET.PAT.A)")
    status, headers, body = admin.call("GET", "/metrics?queue=MET.PAT.*",
                                       headers={"Accept-Encoding": "gzip"})
    assert status == 200 and headers.get("content-encoding") == "gzip"
    m = parse(gzip.decompress(body))
    queues = {dict(labels)["queue"] for name, labels in m if name == "harbormq_queue_depth"}
    assert queues == {"MET.PAT.A"}
    assert m[("harbormq_queues", ())] > 1        # totals count every queue
    status, _, body = admin.call("GET", "/metrics?queue=MET*PAT")
    assert status == 400 and b"HMQ8950E" in body and b"MQWB0002E" in body


def test_the_openapi_description_has_it(web):
    status, _, body = web_client(web).call("GET", "/ibmmq/rest/v2/openapi.json")
    assert status == 200
    path = json.loads(body)["paths"]["/metrics"]["get"]
    assert path["parameters"][0]["name"] == "queue" and "403" in path["responses"]


def test_who_may_scrape(web):
    # +dsp on the queue manager: alice has no authority record
    status, _, body = web_client(web, "alice", "alicepw").call("GET", "/metrics")
    assert status == 403 and b"2035" in body
    status, headers, _ = web_client(web, "alice", "wrong").call("GET", "/metrics")
    assert status == 401 and headers["www-authenticate"].startswith("Basic")
    web.sc("SET AUTHREC OBJTYPE(QMGR) PRINCIPAL('bob') AUTHADD(DSP)")
    try:
        status, _, body = web_client(web, "bob", "bobpw").call("GET", "/metrics")
        assert status == 200 and b"harbormq_queue_depth{" in body
    finally:
        web.sc("SET AUTHREC OBJTYPE(QMGR) PRINCIPAL('bob') AUTHRMV(DSP)")
