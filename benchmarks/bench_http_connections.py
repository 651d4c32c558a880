#!/usr/bin/env python3
"""What making each HTTP request a connection of the queue manager costs
(``http/connections.py``): the loop's CPU per request of the middleware that
registers it in the core's connection registry, against a request passed
straight to its handler.

No server and no socket, so the figure is the middleware's own and does not
depend on the machine's load: a stand-in for an aiohttp request of the
messaging API (its path, transport and mapping) goes through
``connection_middleware`` to a handler that learns the user (as ``auth.py``
tells the hook) and returns; ``bare`` calls the same handler directly. CPU
is ``time.thread_time``; median of ``--rounds`` rounds of ``--requests``
requests. One JSON object to stdout.

    .venv/bin/python benchmarks/bench_http_connections.py
    .venv/bin/python benchmarks/bench_http_connections.py --requests 200000 --rounds 7
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from types import SimpleNamespace

from aiohttp import web

from harbormq.core.connections import ConnectionRegistry
from harbormq.http.auth import ON_PRINCIPAL_KEY
from harbormq.http.connections import connection_middleware

PATH = "/ibmmq/rest/v2/messaging/qmgr/QM/queue/Q/message"


async def handler(request: web.Request) -> web.Response:
    told = request.get(ON_PRINCIPAL_KEY)
    if told is not None:
        told(PRINCIPAL)
    return RESPONSE


PRINCIPAL = SimpleNamespace(user="app")
RESPONSE = web.Response(status=201)


class Transport:
    @staticmethod
    def get_extra_info(name: str):
        return ("127.0.0.1", 54321) if name == "peername" else None


class Request(dict):
    """What the middleware reads of an aiohttp request: its path, its transport
    and its mapping (aiohttp's own mocked request takes milliseconds to make)."""
    path = PATH
    transport = Transport()


async def round_us(requests: int, middleware) -> float:
    """CPU microseconds a request, ``middleware`` None for the bare handler."""
    # each request made and dropped in turn, as a server's are
    start = time.thread_time()
    if middleware is None:
        for _ in range(requests):
            await handler(Request())
    else:
        for _ in range(requests):
            await middleware(Request(), handler)
    return (time.thread_time() - start) / requests * 1e6


async def main_async(args) -> dict:
    core = SimpleNamespace(connections=ConnectionRegistry(), uows={})
    middleware = connection_middleware(core)
    bare, registered = [], []
    for _ in range(args.rounds):
        bare.append(await round_us(args.requests, None))
        registered.append(await round_us(args.requests, middleware))
    assert len(core.connections) == 0 and core.connections.opened_total == \
        args.requests * args.rounds
    b, r = statistics.median(bare), statistics.median(registered)
    return {"requests": args.requests, "rounds": args.rounds,
            "bare_handler_us": round(b, 2), "with_connection_us": round(r, 2),
            "added_us_per_request": round(r - b, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=50_000)
    ap.add_argument("--rounds", type=int, default=5)
    print(json.dumps(asyncio.run(main_async(ap.parse_args())), indent=1))


if __name__ == "__main__":
    main()
