"""What the web console reads straight from the core, paged: ``QueueList`` and
``browse_page``.

The console shows most figures through the MQSC DISPLAY commands the admin
socket runs (``console.py`` asks the MQSC runner, so authority and figures
are MQSC's). Two things MQSC cannot give a page at a time, and these are here:

* the **queue list**: names filtered and sorted on the server, one page of
  them returned, so 10,000 queues cost one sort of names and the figures of
  one page (the page's rows are then DISPLAY QSTATUS's);
* a **page of a queue's messages**, browsed from a cursor (the last key of
  the page before) with a seek in the queue's store, so page 10,000 of a
  1,000,000-message queue costs what page 1 costs and the queue is never
  loaded.

It also keeps the **rates** the queue list shows: depth change per second
between two looks at a queue (the core counts no puts and gets per queue;
``DepthRates``). Nothing here changes state, and nothing here knows HTTP.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Callable

from ..core.engine import QueueManagerCore

#: the most rows of one page (queues or messages)
MAX_PAGE = 500
#: the bytes of a message body a page shows
BODY_PREVIEW = 256
#: queues whose last depth ``DepthRates`` remembers
RATE_MEMORY = 20_000
SORTS = ("name", "depth")


def name_filter(text: str) -> Callable[[str], bool]:
    """The console's queue filter: ``PAY*`` is a prefix (MQ's generic name),
    anything else a part of the name; both ignore case. No pattern engine, so a
    filter cannot make the loop backtrack."""
    text = (text or "").strip().upper()
    if not text or text == "*":
        return lambda name: True
    if text.endswith("*") and "*" not in text[:-1]:
        prefix = text[:-1]
        return lambda name: name.upper().startswith(prefix)
    part = text.replace("*", "")
    return lambda name: part in name.upper()


class DepthRates:
    """The change of each queue's depth per second since the console last looked
    at it (a queue looked at once has none yet). Bounded: the queues looked at
    longest ago are forgotten first."""

    def __init__(self, memory: int = RATE_MEMORY, clock=time.monotonic):
        self.memory = memory
        self.clock = clock
        self._last: OrderedDict[str, tuple[float, int, float | None]] = OrderedDict()

    def rate(self, name: str, depth: int) -> float | None:
        now = self.clock()
        last = self._last.pop(name, None)
        rate = None
        if last is not None:
            when, was, rate = last
            if now - when >= 0.5:            # a look too soon keeps the last figure
                rate = round((depth - was) / (now - when), 2)
            else:
                now, depth = when, was
        self._last[name] = (now, depth, rate)
        while len(self._last) > self.memory:
            self._last.popitem(last=False)
        return rate


def queue_page(core: QueueManagerCore, *, may_display: Callable[[str], bool], offset: int = 0,
               limit: int = 50, filter_text: str = "", sort: str = "name") -> dict:
    """One page of the local queues the principal may display: ``{"total",
    "offset", "limit", "names"}`` (the page's names, in order)."""
    matches = name_filter(filter_text)
    names = [n for n in core.queues if matches(n)]
    if sort == "depth":
        queues = core.queues
        names.sort(key=lambda n: (-queues[n].curdepth, n))
    else:
        names.sort()
    limit = max(1, min(limit, MAX_PAGE))
    offset = max(0, offset)
    # the total counts only the names the principal may display: each matching
    # name is checked (a dict look-up for an administrator)
    visible = [n for n in names if may_display(n)]
    return {"total": len(visible), "offset": offset, "limit": limit,
            "names": visible[offset:offset + limit]}


def queue_figures(core: QueueManagerCore, name: str) -> dict:
    """What the queue list adds to DISPLAY QSTATUS: the queue's limits."""
    q = core.queues[name]
    attrs = q.attrs
    return {"maxdepth": attrs.get("MAXDEPTH"), "descr": attrs.get("DESCR", ""),
            "get": attrs.get("GET", "ENABLED"), "put": attrs.get("PUT", "ENABLED")}


def browse_page(core: QueueManagerCore, queue: str, *, after: str = "",
                limit: int = 50) -> dict:
    """Up to ``limit`` messages a get could take, in delivery order, after the
    key ``after`` (hex, from the page before; the head when empty), read with a
    seek in the store. ``next`` is the cursor of the page after, None at the
    end."""
    q = core.input_queue(queue)
    limit = max(1, min(limit, MAX_PAGE))
    start = bytes.fromhex(after) + b"\0" if after else None
    now = time.time_ns()
    rows, keys = [], []
    for key in q.iter_keys(start):
        if key in q.locked:
            continue
        msg = q.lookup(key)
        if msg is None or msg.expired(now):
            continue
        if len(rows) == limit:            # one more exists: there is a page after
            return {"queue": queue, "depth": q.curdepth, "messages": rows,
                    "next": keys[-1].hex()}
        rows.append(message_row(msg, now))
        keys.append(key)
    return {"queue": queue, "depth": q.curdepth, "messages": rows, "next": None}


def message_row(msg, now_ns: int) -> dict:
    body = msg.body[:BODY_PREVIEW]
    try:
        text, encoding = body.decode("utf-8"), "text"
    except UnicodeDecodeError:
        text, encoding = body.hex(), "hex"
    return {"msg_id": msg.msg_id.hex(), "correl_id": msg.correl_id.hex(),
            "priority": msg.priority, "persistent": msg.persistent,
            "put_time_ns": msg.put_time_ns,
            "age_s": round((now_ns - msg.put_time_ns) / 1e9, 3) if msg.put_time_ns else None,
            "size": len(msg.body), "backout_count": msg.backout_count,
            "format": msg.format, "reply_to": msg.reply_to,
            "properties": {str(k): str(v) for k, v in (msg.properties or {}).items()},
            "body": text, "body_encoding": encoding,
            "body_truncated": len(msg.body) > BODY_PREVIEW}
