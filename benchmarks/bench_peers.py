#!/usr/bin/env python3
"""harbormq side by side with RabbitMQ and ActiveMQ: the same STOMP workloads, one run.

Issue 14 §1. Each broker runs as a real server process on loopback, on free
ports, with its persistent storage in a scratch directory (never the system
services' configuration or data); one raw-frame load generator
(``stomp_load.py``, one client process) drives all three. The three run
side by side and each workload's measured runs are interleaved (round 1:
harbormq, RabbitMQ, ActiveMQ; round 2: ...): on a shared machine the load of
other jobs then falls on all three alike. Idle, a broker costs next to no CPU.
Persistent 1 KiB messages, consumers ACK each MESSAGE (``client-individual``).

* harbormq: ``python -m harbormq start QM --foreground`` under a temporary
  HARBORMQ_HOME (the checkout's src/), circular log with ``harbormq create``'s
  defaults, a local queue with MAXDEPTH big enough for the run.
* RabbitMQ (Debian's rabbitmq-server, 3.10): its own epmd on a free port,
  node ``hmqbench@localhost``, mnesia/logs/config/cookie in the scratch
  directory, ``rabbitmq-plugins enable --offline rabbitmq_stomp``; /queue/
  destinations are durable classic queues; a SEND receipt is a publisher
  confirm (the message is on disk). Subscribes with ``prefetch-count``.
* ActiveMQ (Debian's activemq, 5.17): ``java -jar activemq.jar start
  xbean:file:...`` with a STOMP connector only and KahaDB in the scratch
  directory (its defaults: a journal write is synced before the receipt).
  Subscribes with ``activemq.prefetchSize``.

Packages missing are installed from Debian (``apt-get update`` once, then
``apt-get install -y``); an install on a machine where services start would
start the system's own instances too, on their default ports: this script
never touches them.

Workloads (prefetch 64; 100 for the transactional one):

* ``a`` 1 producer + 1 consumer, each SEND waits for its RECEIPT (throughput,
  receipt p50/p99);
* ``b`` 8 + 8, each producer keeps up to 64 SENDs awaiting receipts;
* ``c`` 4 + 4, producers BEGIN / 50 SENDs / COMMIT with receipt; consumers
  ACK 50 MESSAGEs in a transaction, COMMIT with receipt;
* ``d`` 64 producers, each SEND waiting for its RECEIPT; 8 consumers
  (many small clients: where group commit should win; the headline is the
  receipted send rate);
* ``e`` ``--restart-messages`` N (default 100,000; the issue's figure is
  1,000,000) messages queued and receipted, then kill -9 of the broker's
  processes, restart: seconds from the restart to a STOMP CONNECTED
  (``accept_s``) and to the first MESSAGE of a subscriber that connected as
  soon as it could (``first_message_s``); then the queue is drained (with
  ACKs) and counted (``recovered``: nothing receipted may be missing;
  ``--no-drain`` skips it). ``--settle S`` waits S seconds between the kill
  and the restart, for the load of the queueing to die down.
* ``f`` publish/subscribe fan-out: 1 publisher, each persistent 1 KiB SEND to
  a topic waits for its RECEIPT; 10 durable subscribers, ``client-individual``
  ACK per MESSAGE. Durable subscriptions each broker's way: harbormq and
  RabbitMQ ``durable:true`` named by the subscription ``id`` (RabbitMQ's
  ``/topic/`` durable queues, with ``auto-delete:false``), ActiveMQ's durable
  topic subscribers (``client-id`` on CONNECT, ``activemq.subscriptionName``
  on SUBSCRIBE). Fresh subscriptions and topic per run, deleted at its end
  (UNSUBSCRIBE with the same headers). The headline is deliveries/s (first
  SEND to the last MESSAGE of any subscriber; ``--fanout-publications`` per
  run, 10 deliveries each).

For a–d: ``--runs`` (3) measured runs after one warm-up run, each on fresh
connections; the median of each figure. The headline is end-to-end msgs/s
(first SEND to last MESSAGE received) for a–c and the receipted send rate
for d. ``summary`` gives, per workload, each broker's median and
``harbormq_vs_best_peer``: harbormq's rate over the best peer's (over 1 is
ahead), and for e the best peer's seconds over harbormq's (over 1 is faster).
Server CPU is the broker's whole process tree (utime+stime from /proc).

    .venv/bin/python benchmarks/bench_peers.py                       # all, quick sizes
    .venv/bin/python benchmarks/bench_peers.py --only harbormq --workloads a,b
    .venv/bin/python benchmarks/bench_peers.py --scale 5 --restart-messages 1000000
    .venv/bin/python benchmarks/bench_peers.py --workloads f          # pub/sub fan-out

Not part of CI (minutes, installs packages, needs root for apt-get). The
machine's load average is recorded before and after every run; on a shared
machine re-run a workload whose figures look disturbed (``--workloads``).
Progress to stderr, one JSON object to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# the queue manager is created here and run by the server process from this
# checkout's src/: never an installed harbormq of another tree (formats differ)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import profile_stages  # noqa: E402
import stomp_load  # noqa: E402
from _common import make_progress  # noqa: E402
from bench_stomp import (  # noqa: E402
    SRC,
    code_version,
    host_cpu,
    host_cpu_share,
    loadavg,
    open_conn,
    pct,
    split,
    watch,
)
from stomp_load import Consumer, Producer, Run, StompError  # noqa: E402

progress = make_progress("bench_peers")
CLK_TCK = os.sysconf("SC_CLK_TCK")
BROKERS = ("harbormq", "rabbitmq", "activemq")
PEERS = ("rabbitmq", "activemq")

# name: (what, producers, consumers, window, txn size, quick messages, headline)
WORKLOADS = {
    "a": ("1 producer + 1 consumer, RECEIPT per SEND", 1, 1, 1, 0, 5_000, "recv_msgs_per_s"),
    "b": ("8 + 8 pipelined, window 64", 8, 8, 64, 0, 40_000, "recv_msgs_per_s"),
    "c": ("4 + 4, transactions of 50, COMMIT receipted", 4, 4, 1, 50, 40_000,
          "recv_msgs_per_s"),
    "d": ("64 producers each with a RECEIPT per SEND, 8 consumers", 64, 8, 1, 0, 20_000,
          "send_msgs_per_s"),
}
RESTART = "e"
#: publish/subscribe fan-out: (what, subscribers, quick publications, headline)
FANOUT = "f"
FANOUT_WORKLOAD = ("1 publisher, RECEIPT per persistent SEND to a topic, 10 durable "
                   "subscribers, ACK per MESSAGE", 10, 2_000, "deliveries_per_s")
PREFETCH = 64


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree_pids(root: int) -> list[int]:
    """root and all its descendants (from /proc/*/stat's ppid)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, ()))
    return out


def tree_cpu(root: int) -> dict:
    """CPU seconds (user, system) of a process tree."""
    user = system = 0
    for pid in tree_pids(root):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            user += int(fields[11])
            system += int(fields[12])
        except (OSError, ValueError, IndexError):
            pass
    return {"user": user / CLK_TCK, "system": system / CLK_TCK,
            "total": (user + system) / CLK_TCK}


def tree_rss_mb(root: int) -> float:
    kb = 0
    for pid in tree_pids(root):
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        kb += int(line.split()[1])
        except OSError:
            pass
    return round(kb / 1024, 1)


def deb_version(pkg: str) -> str | None:
    r = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", pkg],
                       capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else None


def ensure_packages(brokers: list[str]) -> None:
    """apt-get install what is missing (update once, only when something is)."""
    need = [pkg for b, pkg in (("rabbitmq", "rabbitmq-server"), ("activemq", "activemq"))
            if b in brokers and deb_version(pkg) is None]
    if not need:
        return
    progress(f"installing {need} from Debian's packages")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", *need]):
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr[-2000:]}")


# ---------------------------------------------------------------------- brokers

class Broker:
    """One broker's server process(es), started in a session of their own so the
    whole tree (the RabbitMQ wrapper script and its beam, say) is ours to
    signal by process group; nothing else is ever signalled."""

    name = "?"
    host = "localhost"
    connect_extra = b""
    subscribe_extra = b""

    def durable_headers(self, name: bytes) -> bytes:
        """SUBSCRIBE (and deleting UNSUBSCRIBE) headers of the durable topic
        subscription ``name`` (its ``id`` too): RabbitMQ's convention, which
        harbormq follows."""
        return b"durable:true\n"

    def delete_frames(self, name: bytes) -> bytes:
        """The frames that delete the durable subscription ``name``, the last
        with ``receipt:unsub``: one UNSUBSCRIBE carrying the durable headers."""
        return (b"UNSUBSCRIBE\nid:" + name + b"\n" + self.durable_headers(name) +
                b"receipt:unsub\n\n\0")

    def __init__(self, scratch: Path):
        self.dir = scratch / self.name
        self.dir.mkdir(parents=True)
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.out = None
        self.version = "?"

    # -- process control
    def command(self) -> tuple[list[str], dict]:
        raise NotImplementedError

    def spawn(self) -> None:
        cmd, env = self.command()
        self.out = open(self.dir / "server.out", "ab")
        self.proc = subprocess.Popen(cmd, env=env, cwd=str(self.dir), stdin=subprocess.DEVNULL,
                                     stdout=self.out, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    async def start(self) -> float:
        """Spawn and wait for a STOMP CONNECTED; seconds it took."""
        t0 = time.perf_counter()
        self.spawn()
        await self.wait_stomp(t0 + 180)
        await self.ready()
        return time.perf_counter() - t0

    async def ready(self) -> None:
        pass

    async def wait_stomp(self, deadline: float) -> None:
        last = None
        while time.perf_counter() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited ({self.proc.returncode}): "
                                   f"{self.tail()}")
            try:
                r, w = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError as exc:
                last = exc
                await asyncio.sleep(0.01)
                continue
            try:
                w.write(b"CONNECT\naccept-version:1.2\nhost:" + self.host.encode() +
                        b"\nheart-beat:0,0\n" + self.connect_extra + b"\n\0")
                head = await asyncio.wait_for(r.readuntil(b"\0"), 10)
                if head.lstrip(b"\r\n").startswith(b"CONNECTED"):
                    w.write(b"DISCONNECT\n\n\0")
                    return
                last = head[:300]
            except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError) as exc:
                last = exc
            finally:
                w.close()
            await asyncio.sleep(0.01)
        raise RuntimeError(f"{self.name}: no STOMP CONNECTED on port {self.port} ({last!r}): "
                           f"{self.tail()}")

    def tail(self) -> str:
        try:
            return (self.dir / "server.out").read_text(errors="replace")[-1500:]
        except OSError:
            return ""

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)      # our own session: pgid == our child's pid
        except ProcessLookupError:
            pass

    def kill9(self) -> None:
        self._signal(signal.SIGKILL)
        self.proc.wait()
        self._wait_group_gone()

    def _wait_group_gone(self, timeout: float = 30) -> None:
        """Children (beam under RabbitMQ's script) die with the group, reaped by init."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.02)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                progress(f"{self.name} did not stop in 60 s: SIGKILL")
                self._signal(signal.SIGKILL)
                self.proc.wait()
        self._signal(signal.SIGKILL)          # anything of ours left in the group
        self._wait_group_gone()
        if self.out:
            self.out.close()
            self.out = None

    def cleanup(self) -> None:
        pass

    # -- queues
    async def prepare(self, queue: str) -> None:
        """Whatever must exist before SENDs to /queue/<queue> are kept."""

    def cpu(self) -> dict:
        return tree_cpu(self.proc.pid)


class HarborMQ(Broker):
    name = "harbormq"
    QM = "PEERS"
    py_spy = "py-spy"                   # names the server's threads (py-spy dump)

    def __init__(self, scratch: Path):
        super().__init__(scratch)
        self.version = code_version()

    def create(self) -> None:
        from harbormq.config import QMConfig
        from harbormq.qmgr import lifecycle as qmgr
        qmgr.create(self.QM, home=self.dir, port=self.port)
        cfg = QMConfig.load(self.QM, home=self.dir)
        cfg.stomp.max_prefetch = max(cfg.stomp.max_prefetch, 2 * PREFETCH)
        cfg.stomp.heartbeat_ms = 0
        cfg.save()

    def command(self):
        env = dict(os.environ, HARBORMQ_HOME=str(self.dir),
                   PYTHONPATH=os.pathsep.join(filter(None, [str(SRC),
                                                            os.environ.get("PYTHONPATH")])))
        return [sys.executable, "-m", "harbormq", "start", self.QM, "--foreground"], env

    async def ready(self) -> None:
        from harbormq.errors import QueueManagerNotRunning
        deadline = time.monotonic() + 60
        while True:                     # the admin socket comes up with the listener
            try:
                self.mqsc("DISPLAY QMGR")
                return
            except (OSError, RuntimeError, ValueError, QueueManagerNotRunning):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)

    def mqsc(self, text: str) -> str:
        from harbormq.admin.client import call
        from harbormq.config import QMConfig
        reply = call(QMConfig.load(self.QM, self.dir), {"cmd": "mqsc", "text": text},
                     timeout=60)
        if not reply.get("ok"):
            raise RuntimeError(f"MQSC {text!r} failed: {reply}")
        return reply["output"]

    async def prepare(self, queue: str) -> None:
        self.mqsc(f"DEFINE QLOCAL({queue}) MAXDEPTH(999999999) DEFPSIST(YES) REPLACE")


class RabbitMQ(Broker):
    name = "rabbitmq"
    host = "/"                          # RabbitMQ reads CONNECT's host as the vhost
    connect_extra = b"login:guest\npasscode:guest\n"
    subscribe_extra = b""               # prefetch-count is RabbitMQ's own header

    def durable_headers(self, name: bytes) -> bytes:
        # a durable queue per subscription, named from the id, kept across reconnects
        return b"durable:true\nauto-delete:false\n"
    LIB = Path("/usr/lib/rabbitmq")

    def __init__(self, scratch: Path):
        super().__init__(scratch)
        self.version = deb_version("rabbitmq-server")
        self.epmd_port = free_port()
        self.amqp_port = free_port()
        self.dist_port = free_port()
        self.epmd: subprocess.Popen | None = None
        (self.dir / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = 127.0.0.1:{self.amqp_port}\n"
            f"stomp.listeners.tcp.1 = 127.0.0.1:{self.port}\n"
            "loopback_users = none\nlog.console = false\nlog.file.level = warning\n")
        (self.dir / "rabbitmq-env.conf").write_text("")

    def env(self) -> dict:
        home = next(self.LIB.glob("lib/rabbitmq_server-*"))
        d = self.dir
        return dict(os.environ, HOME=str(d), RABBITMQ_HOME=str(home),
                    RABBITMQ_NODENAME="hmqbench@localhost",
                    RABBITMQ_CONFIG_FILE=str(d / "rabbitmq.conf"),
                    RABBITMQ_ADVANCED_CONFIG_FILE=str(d / "advanced.config"),
                    RABBITMQ_CONF_ENV_FILE=str(d / "rabbitmq-env.conf"),
                    RABBITMQ_MNESIA_BASE=str(d / "mnesia"), RABBITMQ_LOG_BASE=str(d / "log"),
                    RABBITMQ_ENABLED_PLUGINS_FILE=str(d / "enabled_plugins"),
                    RABBITMQ_PLUGINS_EXPAND_DIR=str(d / "plugins-expand"),
                    RABBITMQ_PID_FILE=str(d / "rabbit.pid"),
                    RABBITMQ_DIST_PORT=str(self.dist_port),
                    RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface "
                                                         "{127,0,0,1}",
                    ERL_EPMD_ADDRESS="127.0.0.1", ERL_EPMD_PORT=str(self.epmd_port))

    def command(self):
        return [str(self.LIB / "bin" / "rabbitmq-server")], self.env()

    async def start(self) -> float:
        if self.epmd is None:           # our own epmd (Erlang would start a daemon otherwise)
            self.epmd = subprocess.Popen(
                ["epmd", "-port", str(self.epmd_port), "-address", "127.0.0.1"],
                env=self.env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True)
            r = subprocess.run([str(self.LIB / "bin" / "rabbitmq-plugins"), "enable",
                                "--offline", "rabbitmq_stomp"], env=self.env(),
                               capture_output=True, text=True, cwd=str(self.dir))
            if r.returncode:
                raise RuntimeError(f"rabbitmq-plugins enable rabbitmq_stomp failed: "
                                   f"{r.stdout[-800:]} {r.stderr[-800:]}")
        return await super().start()

    def cleanup(self) -> None:
        if self.epmd is not None and self.epmd.poll() is None:
            self.epmd.kill()            # the epmd we started, by its Popen
            self.epmd.wait()


class ActiveMQ(Broker):
    name = "activemq"
    HOME = Path("/usr/share/activemq")

    def __init__(self, scratch: Path):
        super().__init__(scratch)
        self.version = deb_version("activemq")
        conf = self.dir / "conf"
        conf.mkdir()
        data = self.dir / "data"
        (conf / "activemq.xml").write_text(f"""<beans
  xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans
    http://www.springframework.org/schema/beans/spring-beans-2.0.xsd
    http://activemq.apache.org/schema/core
    http://activemq.apache.org/schema/core/activemq-core.xsd">
  <broker xmlns="http://activemq.apache.org/schema/core" useJmx="false"
          brokerName="hmqbench" persistent="true" dataDirectory="{data}">
    <persistenceAdapter><kahaDB directory="{data}/kahadb"/></persistenceAdapter>
    <transportConnectors>
      <transportConnector name="stomp" uri="stomp://127.0.0.1:{self.port}"/>
    </transportConnectors>
  </broker>
</beans>
""")
        self.subscribe_extra = b"activemq.prefetchSize:%d\n" % PREFETCH

    def durable_headers(self, name: bytes) -> bytes:
        # a durable topic subscriber: CONNECT's client-id (the consumer's name) and this
        return b"activemq.subscriptionName:" + name + b"\n"

    def delete_frames(self, name: bytes) -> bytes:
        # ActiveMQ refuses to delete an active durable subscriber ("Durable
        # consumer is in use"): first end the consumer, then remove it by name
        return (b"UNSUBSCRIBE\nid:" + name + b"\n\n\0" + b"UNSUBSCRIBE\nid:" + name + b"\n" +
                self.durable_headers(name) + b"receipt:unsub\n\n\0")

    def command(self):
        d = self.dir
        # what /usr/bin/activemq runs, with the Debian package's heap, in the foreground
        cmd = ["java", "-Xms512M", "-Xmx512M", "-Dorg.apache.activemq.UseDedicatedTaskRunner=true",
               "--add-reads=java.xml=java.logging",
               "--add-opens", "java.base/java.lang=ALL-UNNAMED",
               "--add-opens", "java.base/java.util=ALL-UNNAMED",
               "--add-opens", "java.base/java.util.concurrent=ALL-UNNAMED",
               f"-Dactivemq.classpath={d / 'conf'}", f"-Dactivemq.home={self.HOME}",
               f"-Dactivemq.base={d}", f"-Dactivemq.conf={d / 'conf'}",
               f"-Dactivemq.data={d / 'data'}",
               "-jar", str(self.HOME / "bin" / "activemq.jar"),
               "start", f"xbean:file:{d / 'conf' / 'activemq.xml'}"]
        return cmd, dict(os.environ)


# ---------------------------------------------------------------------- one run

def new_run(loop, broker: Broker, total: int) -> Run:
    return Run(loop, total, host=broker.host, connect_extra=broker.connect_extra,
               subscribe_extra=broker.subscribe_extra)


async def run_workload(broker: Broker, wl: str, messages: int, tag: str,
                       probe=None) -> dict:
    """One measured run on fresh connections; ``probe`` (profile_stages.PySpy or
    Strace, built from the server's pid) watches the server from the first SEND
    to the last MESSAGE."""
    _what, n_prod, n_cons, window, txn, _quick, _head = WORKLOADS[wl]
    queue = f"PEERS.{wl.upper()}"
    dest = "/queue/" + queue
    loop = asyncio.get_running_loop()
    run = new_run(loop, broker, messages)
    prefetch = max(PREFETCH, 2 * txn)
    for i in range(n_cons):
        c = Consumer(run, f"{tag}c{i}", dest, ack="client-individual", prefetch=prefetch,
                     txn_size=txn)
        c.port = broker.port
        run.consumers.append(c)
    for i, share in enumerate(split(messages, n_prod)):
        p = Producer(run, f"{tag}p{i}", dest, share, 1024, window=window, txn_size=txn)
        p.port = broker.port
        run.producers.append(p)
    conns = run.consumers + run.producers
    await asyncio.gather(*(open_conn(loop, c) for c in conns))
    await asyncio.wait_for(asyncio.gather(*(c.subscribe() for c in run.consumers)), 30)

    la0 = loadavg()
    pid = broker.proc.pid
    watching = probe(pid) if probe else None
    by_thread = isinstance(broker, HarborMQ)      # one process: its threads mean something
    names = profile_stages.thread_names(broker.py_spy, pid) if by_thread else {}
    threads0 = profile_stages.thread_cpu(pid, names) if by_thread else {}
    srv0 = broker.cpu()
    host0 = host_cpu()
    t0 = time.perf_counter()
    run.t0 = stomp_load._now()
    for p in run.producers:
        p.start()
    await watch(run, 60.0)
    t1 = time.perf_counter()
    srv1 = broker.cpu()
    host1 = host_cpu()
    threads = profile_stages.cpu_delta(threads0, profile_stages.thread_cpu(pid, names)) \
        if by_thread else {}
    probed = watching.stop() if watching else None
    for c in run.consumers:
        c.flush_acks()
    await asyncio.wait_for(asyncio.gather(*(x.disconnect() for x in conns)), 60)
    for x in conns:
        x.transport.close()
    if run.error:
        raise run.error
    t_rcpt, t_msg, figures = run_figures(broker, run, t1 - t0, (srv0, srv1), (host0, host1),
                                         la0)
    return {
        "messages": messages, "seconds": round(t1 - t0, 3),
        "send_msgs_per_s": round(messages / t_rcpt, 1),
        "recv_msgs_per_s": round(messages / t_msg, 1),
        **figures,
        "server_cpu_us_per_msg": round(figures["server_cpu_s"]["total"] / messages * 1e6, 1),
        "server_threads_cpu_s": {g: {k: round(v, 2) for k, v in c.items()}
                                 for g, c in threads.items()},
        "probe": probed,
    }


def run_figures(broker: Broker, run: Run, seconds: float, cpu: tuple, host: tuple,
                la0) -> tuple[float, float, dict]:
    """What every measured run reports: seconds to the last receipt and to the
    last MESSAGE, and the latencies, server CPU and RSS, load and host CPU."""
    srv0, srv1 = cpu
    used = {k: round(srv1[k] - srv0[k], 2) for k in srv0}
    return ((run.t_last_receipt - run.t0) / 1e9, (run.t_last_message - run.t0) / 1e9, {
        "receipt_latency_ms": pct(run.send_lat), "e2e_latency_ms": pct(run.e2e_lat),
        "server_cpu_s": used, "server_cpu_util": round(used["total"] / seconds, 2),
        "server_rss_mb": tree_rss_mb(broker.proc.pid),
        "loadavg_before": la0, "loadavg_after": loadavg(),
        "host_cpu": host_cpu_share(*host),
    })


def median_of(runs: list[dict], rates=("send_msgs_per_s", "recv_msgs_per_s"),
              cpu_per="server_cpu_us_per_msg") -> dict:
    """The median of each figure over the runs; ``rates`` and ``cpu_per`` name
    the workload's own figures (the fan-out counts deliveries)."""
    def med(get):
        vals = [v for v in (get(r) for r in runs) if v is not None]
        return round(statistics.median(vals), 3) if vals else None
    return {
        **{key: med(lambda r, key=key: r[key]) for key in rates},
        "receipt_p50_ms": med(lambda r: r["receipt_latency_ms"].get("p50")),
        "receipt_p99_ms": med(lambda r: r["receipt_latency_ms"].get("p99")),
        "e2e_p50_ms": med(lambda r: r["e2e_latency_ms"].get("p50")),
        "e2e_p99_ms": med(lambda r: r["e2e_latency_ms"].get("p99")),
        "server_cpu_util": med(lambda r: r["server_cpu_util"]),
        cpu_per: med(lambda r: r[cpu_per]),
        "host_busy_pct": med(lambda r: r["host_cpu"]["busy_pct"]),
        "loadavg_1m_before": med(lambda r: r["loadavg_before"][0]),
    }


# ---------------------------------------------------------------------- pub/sub fan-out

class FanOutRun(Run):
    """A run whose every publication is delivered once to each of ``fanout``
    subscribers: ``total`` counts deliveries, ``publications`` the SENDs."""

    def __init__(self, loop, broker: Broker, publications: int, fanout: int):
        super().__init__(loop, publications * fanout, host=broker.host,
                         connect_extra=broker.connect_extra,
                         subscribe_extra=broker.subscribe_extra)
        self.publications = publications

    def on_receipted(self, n: int) -> None:
        self.receipted += n
        self.t_last_receipt = stomp_load._now()
        if self.receipted >= self.publications and not self.all_receipted.done():
            self.all_receipted.set_result(None)


class TopicSubscriber(Consumer):
    """A durable topic subscriber: SUBSCRIBE with the broker's durable headers,
    the subscription named by the connection's name (also its ``id`` and, on
    CONNECT, its ``client-id``); ``delete()`` ends it for good."""

    def __init__(self, run: Run, name: str, dest: str, broker: Broker, **kw):
        super().__init__(run, name, dest, **kw)
        self.broker = broker
        self.durable = broker.durable_headers(name.encode())
        self.deleted = run.loop.create_future()

    def subscribe(self) -> asyncio.Future:
        self.transport.write(b"SUBSCRIBE\nid:" + self.name.encode() + b"\ndestination:" +
                             self.dest.encode() + b"\nack:" + self.ack.encode() +
                             b"\nreceipt:sub\nprefetch-count:%d\n" % self.prefetch +
                             self.durable + self.run.subscribe_extra + b"\n\0")
        self.t_start = stomp_load._now()
        return self.subscribed

    def delete(self) -> asyncio.Future:
        self.transport.write(self.broker.delete_frames(self.name.encode()))
        return self.deleted

    def other_receipt(self, rid) -> None:
        if rid == b"unsub":
            if not self.deleted.done():
                self.deleted.set_result(None)
            return
        super().other_receipt(rid)


async def run_fanout(broker: Broker, publications: int, tag: str) -> dict:
    """One measured fan-out run on fresh connections, subscriptions and topic."""
    _what, n_subs, _quick, _head = FANOUT_WORKLOAD
    dest = f"/topic/PEERS.F.{tag}"
    loop = asyncio.get_running_loop()
    run = FanOutRun(loop, broker, publications, n_subs)
    for i in range(n_subs):
        name = f"{tag}s{i}"
        c = TopicSubscriber(run, name, dest, broker, ack="client-individual",
                            prefetch=PREFETCH)
        c.port = broker.port
        run.consumers.append(c)
    p = Producer(run, f"{tag}p", dest, publications, 1024, window=1)
    p.port = broker.port
    run.producers.append(p)
    conns = run.consumers + run.producers
    await asyncio.gather(*(open_conn(loop, c) for c in conns))
    # every subscription exists before the first publication
    await asyncio.wait_for(asyncio.gather(*(c.subscribe() for c in run.consumers)), 60)

    la0 = loadavg()
    srv0 = broker.cpu()
    host0 = host_cpu()
    t0 = time.perf_counter()
    run.t0 = stomp_load._now()
    p.start()
    await watch(run, 60.0)
    t1 = time.perf_counter()
    srv1 = broker.cpu()
    host1 = host_cpu()
    for c in run.consumers:
        c.flush_acks()
    # the subscriptions go with the run: the next run starts from an empty broker
    await asyncio.wait_for(asyncio.gather(*(c.delete() for c in run.consumers)), 60)
    await asyncio.wait_for(asyncio.gather(*(x.disconnect() for x in conns)), 60)
    for x in conns:
        x.transport.close()
    if run.error:
        raise run.error
    t_rcpt, t_msg, figures = run_figures(broker, run, t1 - t0, (srv0, srv1), (host0, host1),
                                         la0)
    return {
        "publications": publications, "subscribers": n_subs, "deliveries": run.received,
        "seconds": round(t1 - t0, 3),
        "deliveries_per_s": round(run.received / t_msg, 1),
        "publications_per_s": round(publications / t_rcpt, 1),
        **figures,
        "server_cpu_us_per_delivery": round(figures["server_cpu_s"]["total"] / run.received
                                            * 1e6, 1),
    }


async def restart_test(broker: Broker, n: int, drain: bool, settle: float = 0) -> dict:
    """Queue n receipted messages, kill -9, restart; time to CONNECTED and to the
    first MESSAGE; then drain and count. ``settle``: seconds between the kill
    and the restart, for the load of the queueing to die down (each broker
    restarts on an equally quiet machine)."""
    queue = "PEERS.E"
    dest = "/queue/" + queue
    loop = asyncio.get_running_loop()
    await broker.prepare(queue)
    run = new_run(loop, broker, n)
    for i, share in enumerate(split(n, 8)):
        p = Producer(run, f"ep{i}", dest, share, 1024, window=64)
        p.port = broker.port
        run.producers.append(p)
    await asyncio.gather(*(open_conn(loop, p) for p in run.producers))
    t0 = time.perf_counter()
    run.t0 = stomp_load._now()
    for p in run.producers:
        p.start()
    last, last_t = -1, time.perf_counter()
    while not run.all_receipted.done():     # no consumer: wait for receipts only
        await asyncio.wait([run.all_receipted], timeout=10)
        if run.receipted != last:
            last, last_t = run.receipted, time.perf_counter()
            progress(f"  {broker.name}: {run.receipted}/{n} queued")
        elif time.perf_counter() - last_t > 120:
            raise RuntimeError(f"{broker.name}: queueing stalled at {run.receipted}/{n}")
    if run.error:
        raise run.error
    load_s = time.perf_counter() - t0
    store = sum(p.stat().st_size for p in broker.dir.rglob("*") if p.is_file())
    await asyncio.wait_for(asyncio.gather(*(p.disconnect() for p in run.producers)), 60)
    for p in run.producers:
        p.transport.close()
    progress(f"  {broker.name}: {n} queued in {load_s:.1f} s; kill -9")
    broker.kill9()
    if settle:
        progress(f"  {broker.name}: {settle:.0f} s for the load to settle")
        await asyncio.sleep(settle)

    la = loadavg()
    t0 = time.perf_counter()
    t0_ns = stomp_load._now()           # the same clock (CLOCK_MONOTONIC)
    broker.spawn()
    await broker.wait_stomp(t0 + 1800)
    t_accept = time.perf_counter() - t0
    # the subscriber goes in the moment the listener answers
    run2 = new_run(loop, broker, n)
    c = Consumer(run2, "ec0", dest, ack="client-individual", prefetch=PREFETCH)
    c.port = broker.port
    await open_conn(loop, c)
    await asyncio.wait_for(c.subscribe(), 600)
    while not run2.received:
        if run2.error:
            raise run2.error
        if time.perf_counter() - t0 > 1800:
            raise RuntimeError(f"{broker.name}: no message 30 min after the restart")
        await asyncio.sleep(0.001)
    t_first = (run2.t_first_message - t0_ns) / 1e9
    await broker.ready()
    res = {"messages": n, "queue_s": round(load_s, 1), "queue_msgs_per_s": round(n / load_s),
           "disk_mb_before_kill": round(store / 1e6, 1), "loadavg_before_restart": la,
           "accept_s": round(t_accept, 3), "first_message_s": round(t_first, 3)}
    if drain:
        t1 = time.perf_counter()
        done = run2.all_received
        while not done.done():
            before = run2.received
            await asyncio.wait([done], timeout=30)
            if run2.received == before and not done.done():
                break                        # nothing more: messages are missing
        res["drain_s"] = round(time.perf_counter() - t1, 1)
        res["recovered"] = run2.received
        res["lost"] = max(0, n - run2.received)
    c.flush_acks()
    try:
        await asyncio.wait_for(c.disconnect(), 60)
    except (StompError, asyncio.TimeoutError):
        pass
    c.transport.close()
    return res


# ---------------------------------------------------------------------- main

async def bench_all(brokers: list[Broker], args, workloads: list[str], results: dict,
                    errors: dict) -> None:
    """All brokers up at once; each workload's runs interleaved (round i runs
    every broker in turn), so that load from other jobs on a shared machine
    falls on all of them alike. The restart test (e) last, one broker at a
    time. A broker that fails is reported and left out of what follows."""
    live = []
    for b in brokers:
        try:
            start_s = round(await b.start(), 2)
        except Exception as exc:  # noqa: BLE001 - the other brokers still run
            errors[b.name] = repr(exc)
            progress(f"{b.name} failed to start: {exc!r}")
            continue
        results[b.name] = {"version": b.version, "port": b.port, "start_s": start_s,
                           "workloads": {}}
        progress(f"{b.name} {b.version} listening on {b.port} (pid {b.proc.pid}), "
                 f"started in {start_s} s")
        live.append(b)

    async def attempt(b: Broker, coro) -> dict | None:
        try:
            return await coro
        except Exception as exc:  # noqa: BLE001
            errors[b.name] = repr(exc)
            progress(f"{b.name} failed: {exc!r}")
            live.remove(b)
            return None

    for wl in workloads:
        if wl == RESTART:
            continue
        if wl == FANOUT:
            await fanout_rounds(live, args, results, attempt)
            continue
        what, *_rest, quick, _head = WORKLOADS[wl]
        n = int(quick * args.scale)
        warm = max(200, n // 5)
        progress(f"({wl}) {what}: warm-up {warm}, then {args.runs} rounds of {n}")
        runs: dict[str, list] = {b.name: [] for b in live}
        for b in list(live):
            await b.prepare(f"PEERS.{wl.upper()}")
            await attempt(b, run_workload(b, wl, warm, "w"))
        for i in range(args.runs):
            for b in list(live):
                r = await attempt(b, run_workload(b, wl, n, f"r{i}"))
                if r is None:
                    continue
                progress(f"  {b.name} run {i + 1}: recv {r['recv_msgs_per_s']}/s send "
                         f"{r['send_msgs_per_s']}/s receipt p50/p99 "
                         f"{r['receipt_latency_ms'].get('p50')}/"
                         f"{r['receipt_latency_ms'].get('p99')} ms, server CPU "
                         f"{r['server_cpu_util']}, host busy {r['host_cpu']['busy_pct']}%, "
                         f"load {r['loadavg_after'][0]}")
                runs[b.name].append(r)
        for b in live:
            res = {"median": median_of(runs[b.name]), "runs": runs[b.name]}
            if args.profile and isinstance(b, HarborMQ):
                res["profile"] = await profile(b, wl, n, runs[b.name], args)
            results[b.name]["workloads"][wl] = res
    if RESTART in workloads:
        for b in list(live):
            progress(f"{b.name} (e) restart after kill -9 with {args.restart_messages} queued")
            r = await attempt(b, restart_test(b, args.restart_messages, not args.no_drain,
                                              args.settle))
            if r is not None:
                progress(f"  accept {r['accept_s']} s, first message {r['first_message_s']} s, "
                         f"recovered {r.get('recovered')}")
                results[b.name]["workloads"][RESTART] = r


async def fanout_rounds(live: list[Broker], args, results: dict, attempt) -> None:
    """The fan-out workload (f): a warm-up run, then ``--runs`` rounds, each
    broker in turn in every round."""
    n = int(args.fanout_publications * args.scale)
    warm = max(100, n // 5)
    progress(f"({FANOUT}) {FANOUT_WORKLOAD[0]}: warm-up {warm}, then {args.runs} rounds of "
             f"{n} publications")
    runs: dict[str, list] = {b.name: [] for b in live}
    for b in list(live):
        await attempt(b, run_fanout(b, warm, "w"))
    for i in range(args.runs):
        for b in list(live):
            r = await attempt(b, run_fanout(b, n, f"r{i}"))
            if r is None:
                continue
            progress(f"  {b.name} run {i + 1}: {r['deliveries_per_s']} deliveries/s, "
                     f"{r['publications_per_s']} publications/s, receipt p50/p99 "
                     f"{r['receipt_latency_ms'].get('p50')}/"
                     f"{r['receipt_latency_ms'].get('p99')} ms, server CPU "
                     f"{r['server_cpu_util']}, host busy {r['host_cpu']['busy_pct']}%")
            runs[b.name].append(r)
    for b in live:
        median = median_of(runs[b.name], ("deliveries_per_s", "publications_per_s"),
                           "server_cpu_us_per_delivery")
        results[b.name]["workloads"][FANOUT] = {"median": median, "runs": runs[b.name]}


async def profile(broker: Broker, wl: str, n: int, runs: list[dict], args) -> dict:
    """Two more runs, not counted: one under py-spy (stages), one under strace
    (syscalls per message). CPU per thread: the median of the measured runs."""
    raw = str(broker.dir / f"pyspy-{wl}.raw")
    progress(f"  profiling ({wl}) under py-spy --native")
    r = await run_workload(broker, wl, n, "py", probe=lambda pid: profile_stages.PySpy(
        args.py_spy, pid, raw))
    cpu = {}
    for g in runs[0]["server_threads_cpu_s"]:
        cpu[g] = {k: statistics.median(x["server_threads_cpu_s"].get(g, {}).get(k, 0.0)
                                       for x in runs) for k in ("user", "system")}
    out = {"threads": profile_stages.stages(profile_stages.classify(raw, broker.proc.pid),
                                            cpu, n),
           "profiled_run_recv_msgs_per_s": r["recv_msgs_per_s"]}
    if shutil.which("strace"):
        progress(f"  profiling ({wl}) under strace -c -f")
        r = await run_workload(broker, wl, n, "st", probe=lambda pid: profile_stages.Strace(
            pid, str(broker.dir / f"strace-{wl}.txt")))
        out["syscalls_per_msg"] = profile_stages.per_message(r["probe"], n)
    shutil.copy(raw, Path(args.profile) / f"pyspy-{wl}.raw")
    return out


def summarize(results: dict, workloads: list[str]) -> dict:
    summary = {}
    for wl in workloads:
        row: dict = {}
        if wl == RESTART:
            for key in ("accept_s", "first_message_s"):
                vals = {b: r["workloads"][wl][key] for b, r in results.items()
                        if wl in r.get("workloads", {})}
                peers = [v for b, v in vals.items() if b in PEERS]
                entry = dict(vals)
                if "harbormq" in vals and peers and vals["harbormq"] > 0:
                    entry["harbormq_vs_best_peer"] = round(min(peers) / vals["harbormq"], 2)
                row[key] = entry
            summary[wl] = row
            continue
        what, head = (FANOUT_WORKLOAD[0], FANOUT_WORKLOAD[3]) if wl == FANOUT else \
            (WORKLOADS[wl][0], WORKLOADS[wl][6])
        for key in (head, "receipt_p50_ms", "receipt_p99_ms", "server_cpu_util"):
            vals = {b: r["workloads"][wl]["median"][key] for b, r in results.items()
                    if wl in r.get("workloads", {})}
            entry = dict(vals)
            peers = [v for b, v in vals.items() if b in PEERS and v]
            if key == head and vals.get("harbormq") and peers:
                entry["harbormq_vs_best_peer"] = round(vals["harbormq"] / max(peers), 2)
            row[key] = entry
        summary[wl] = {"workload": what, "headline": head, **row}
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=",".join(BROKERS),
                    help="comma list of harbormq, rabbitmq, activemq (default: all three)")
    ap.add_argument("--workloads", default="a,b,c,d,e,f",
                    help="comma list of a, b, c, d, e, f")
    ap.add_argument("--runs", type=int, default=3, help="measured runs per workload (median)")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiplies the messages per run (a 5,000, b and c 40,000, d 20,000)")
    ap.add_argument("--restart-messages", type=int, default=100_000,
                    help="(e): messages queued before the kill -9 (the issue: 1,000,000)")
    ap.add_argument("--fanout-publications", type=int, default=FANOUT_WORKLOAD[2],
                    help="(f): publications per measured run, times --scale (each is "
                         "delivered to the 10 subscribers)")
    ap.add_argument("--no-drain", action="store_true",
                    help="(e): do not drain and count the queue after the restart")
    ap.add_argument("--settle", type=float, default=0,
                    help="(e): seconds between the kill -9 and the restart, for the load of "
                         "the queueing to die down (default 0)")
    ap.add_argument("--no-install", action="store_true", help="never run apt-get")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--profile", metavar="DIR", default=None,
                    help="harbormq: after each workload's runs, one run under py-spy --native "
                         "(stages per message) and one under strace -c (syscalls per "
                         "message); raw profiles kept in DIR")
    ap.add_argument("--py-spy", default=shutil.which("py-spy") or
                    str(Path(sys.executable).with_name("py-spy")))
    args = ap.parse_args()
    brokers = [b.strip() for b in args.only.split(",") if b.strip()]
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    for b in brokers:
        if b not in BROKERS:
            ap.error(f"unknown broker {b!r} (one of {', '.join(BROKERS)})")
    for w in workloads:
        if w not in WORKLOADS and w not in (RESTART, FANOUT):
            ap.error(f"unknown workload {w!r} (a, b, c, d, e, f)")
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
    if not args.no_install:
        ensure_packages(brokers)

    scratch = Path(tempfile.mkdtemp(prefix="hmq-bench-peers-"))
    progress(f"scratch directory {scratch}")
    results: dict = {}
    errors: dict = {}
    la_start = loadavg()
    t_start = datetime.datetime.now().astimezone()
    started: list[Broker] = []
    try:
        for name in brokers:
            b = {"harbormq": HarborMQ, "rabbitmq": RabbitMQ, "activemq": ActiveMQ}[name](scratch)
            b.py_spy = args.py_spy
            started.append(b)
            if isinstance(b, HarborMQ):
                b.create()               # runs a loop of its own: outside ours
        asyncio.run(bench_all(started, args, workloads, results, errors))
    finally:
        for b in started:                # every process we started, even on error
            b.stop()
            b.cleanup()
        if args.keep:
            progress(f"kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    out = {
        "benchmark": "peers",
        "date": t_start.isoformat(timespec="seconds"),
        "body_size": 1024, "persistent": True, "consumer_ack": "client-individual",
        "runs": args.runs, "scale": args.scale, "restart_messages": args.restart_messages,
        "settle_s": args.settle,
        "summary": summarize(results, workloads),
        "brokers": results,
        "errors": errors or None,
        "loadavg_at_start": la_start, "loadavg_at_end": loadavg(),
        "host": {"cpus": os.cpu_count(), "python": platform.python_version(),
                 "kernel": platform.release(), "cpu_model": cpu_model(),
                 "note": "brokers side by side, runs interleaved; the load generator "
                         "on the same host"},
    }
    print(json.dumps(out, indent=2))
    if errors:
        sys.exit(1)


def cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


if __name__ == "__main__":
    main()
