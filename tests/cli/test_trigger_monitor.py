"""``harbormq trigger-monitor`` (runmqtrm) against a running queue manager:
a put over STOMP to a queue with TRIGGER starts the process's APPLICID with
the MQTMC2 and ENVRDATA as its arguments, and the operator log says so."""

from __future__ import annotations

import subprocess

from support.oplog import operator_log
from support.procs import PYTHON
from support.stomp_helpers import QMServer, deadline_wait, depth, raw_connected


def test_trigger_monitor_starts_the_process_with_mqtmc2(tmp_path):
    out = tmp_path / "launched.txt"
    app = tmp_path / "app.sh"
    app.write_text(f'#!/bin/sh\nprintf "%s|%s" "$1" "$2" > {out}.tmp && mv {out}.tmp {out}\n')
    app.chmod(0o755)
    srv = QMServer(tmp_path / "hmq", "QTRIG").create()
    srv.start()
    monitor = None
    try:
        srv.sc(f"DEFINE QLOCAL(INIT.Q)\n"
               f"DEFINE PROCESS(ORDERS.PROC) APPLICID('{app}') ENVRDATA('env-data') "
               f"USERDATA('user data')\n"
               "DEFINE QLOCAL(ORDERS) TRIGGER TRIGTYPE(FIRST) INITQ(INIT.Q) "
               "PROCESS(ORDERS.PROC) TRIGDATA('go')")
        monitor = subprocess.Popen([PYTHON, "-m", "harbormq", "trigger-monitor", "QTRIG",
                                    "--initq", "INIT.Q", "--max-launches", "1"],
                                   env=srv.env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
        deadline_wait(lambda: "IPPROCS(1)" in srv.sc("DISPLAY QLOCAL(INIT.Q) IPPROCS"),
                      timeout=60, what="the monitor's subscription")
        c = raw_connected(srv.port)
        c.call("SEND", {"destination": "/queue/ORDERS"}, b"order 1")
        c.close()
        assert monitor.wait(timeout=60) == 0, monitor.stdout.read()
        deadline_wait(out.exists, what="the launched application's output")
        tmc2, env = out.read_text().split("|")
        assert env == "env-data"
        assert len(tmc2) == 732 and tmc2.startswith("TMC    2ORDERS")
        assert tmc2[56:104].rstrip() == "ORDERS.PROC" and tmc2[104:168].rstrip() == "go"
        assert tmc2[-48:].rstrip() == "QTRIG"
        assert depth(srv, "INIT.Q") == 0 and depth(srv, "ORDERS") == 1
        said = [t for m, t in operator_log(srv.home, "QTRIG") if m == "HMQ7737I"]
        assert len(said) == 1 and "ORDERS.PROC for queue ORDERS" in said[0]
    finally:
        if monitor is not None and monitor.poll() is None:
            monitor.kill()
            monitor.wait()
        srv.stop()


def test_trigger_monitor_connects_to_a_stomp_tcp_listener_only(tmp_path):
    """listeners.json lists the web listener and WebSocket listeners too, and while
    the queue manager restarts holds only the web entry: the trigger monitor takes
    a plain STOMP-over-TCP listener, or says none runs yet."""
    import json

    import pytest

    from harbormq.cli.trigger import _listener
    from harbormq.config import QMConfig
    from harbormq.errors import HarbormqError

    config = QMConfig(name="QM1", home=tmp_path)
    config.qm_dir.mkdir(parents=True)
    web = {"name": "WEB", "host": "127.0.0.1", "port": 9443, "tls": False, "transport": "http"}
    ws = {"name": "WS", "host": "127.0.0.1", "port": 9444, "tls": False,
          "transport": "websocket", "path": "/ws"}
    stomp = {"name": "PLAIN", "host": "0.0.0.0", "port": 61613, "tls": False}
    config.listeners_path.write_text(json.dumps([web]))
    with pytest.raises(HarbormqError, match="no STOMP listener running yet"):
        _listener(config)
    config.listeners_path.write_text(json.dumps([web, ws, stomp]))
    assert _listener(config) == ("127.0.0.1", 61613)
