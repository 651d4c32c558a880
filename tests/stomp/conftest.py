"""Fixtures of the STOMP end-to-end tests: ``server``, a real ``harbormq start
--foreground`` process in the default configuration on a free loopback port,
and ``conns``, the raw and stomp.py connections a test makes, closed at its end.

Every test on ``server`` uses queues of its own, so tests sharing it do not see
each other's messages. A configuration of its own gets a server of its own,
beside the tests that need it (``strict`` in test_stomp_errors.py, ``required``
in test_stomp_security.py, ``tls_server`` in test_stomp_listeners.py, the
servers of test_stomp_flow_control.py and test_stomp_frames.py).

Not here: the helpers the tests call (``depth``, ``send_all``, ``subscribe``,
``expect_error`` ...: tests/support/stomp_helpers.py).
"""

from __future__ import annotations

import time

import pytest
from support.stomp_helpers import QMServer, RawStomp, raw_connected, stomp_client


# One server for all the files here that use it, as when they were one file: a
# start with its users takes seconds. tests/stomp/ has no __init__.py, so there
# is no package scope to bind it to; the conftest keeps it out of other folders.
@pytest.fixture(scope="session")
def server(tmp_path_factory):
    srv = QMServer(tmp_path_factory.mktemp("stomp") / "hmq", "QS")
    srv.create(heartbeat_ms=500)
    srv.start()
    # a client that connects and never sends CONNECT (checked by
    # test_stomp_connect.py's test_client_that_never_connects_is_dropped)
    srv.idle = RawStomp(srv.port, timeout=30)
    srv.idle_since = time.monotonic()
    srv.user_add("alice", "alice:pass\\word")          # no authority records
    srv.user_add("bob", "bobpw")                        # granted during a test
    srv.user_add("root", "rootpw", "mqm")              # an administrator by group
    yield srv
    srv.idle.close()
    srv.stop()


@pytest.fixture
def conns():
    """Raw and stomp.py connections made by a test, closed at its end."""
    made = []

    class Maker:
        def raw(self, port, **kw) -> RawStomp:
            c = raw_connected(port, **kw)
            made.append(c)
            return c

        def unconnected(self, port) -> RawStomp:
            c = RawStomp(port)
            made.append(c)
            return c

        def stomp(self, port, version="1.2", **kw):
            c = stomp_client(port, version, **kw)
            made.append(c)
            return c
    yield Maker()
    for c in made:
        try:
            if isinstance(c, RawStomp):
                c.close()
            elif c.is_connected():
                c.disconnect()
        except Exception:
            pass
