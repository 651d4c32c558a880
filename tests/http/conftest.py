"""Fixtures of the HTTP front end's tests: ``web``, a real ``harbormq start
--foreground`` process with ``[web]`` on a free loopback port, https with
the key repository's certificate (``web.ca`` is the file a client trusts)
and short limits, its users (alice: no authority records, bob: granted by tests,
root: of the group mqm), and ``admin``, root's ``WebClient``. Tests on
``web`` use queues of their own. The helpers are tests/support/web_helpers.py.
"""

from __future__ import annotations

import pytest
from support.browser import apt_install
from support.stomp_helpers import QMServer
from support.web_helpers import WebClient, make_key_repository, start_web, web_client

from harbormq.security import UserStore


@pytest.fixture(scope="session")
def web(tmp_path_factory):
    srv = QMServer(tmp_path_factory.mktemp("web") / "hmq", "QW")
    srv.create(max_frame_bytes=16 << 20)       # (a message bigger than socket buffers)
    # the test certificate is made with the openssl command: installed if missing
    apt_install("openssl", ["openssl"])
    make_key_repository(srv)
    # short limits, so that the tests of slow and long requests are quick
    users = UserStore(srv.qm_dir / "users.json")      # (in this process: quicker)
    users.add("alice", "alicepw")                      # no authority records
    users.add("bob", "bobpw")                          # granted during a test
    users.add("root", "rootpw", ["mqm"])               # an administrator by group
    start_web(srv, tls=True, request_timeout_ms=2000, max_body_bytes=1 << 20)
    yield srv
    srv.stop()


@pytest.fixture
def admin(web) -> WebClient:
    return web_client(web, "root", "rootpw")
