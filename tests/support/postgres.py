"""A private PostgreSQL 15 cluster for the queue sharing group's tests and
benchmarks: ``initdb`` and ``pg_ctl`` from the Debian package, a free port on
127.0.0.1, trust authentication on loopback, its files in a temporary
directory of its own.

The cluster can be stopped, killed (SIGKILL of the postmaster and every
backend, as a crash of the machine's PostgreSQL) and started again on the same
data directory, which then runs PostgreSQL's own crash recovery.

PostgreSQL refuses to run as root: when the tests run as root, the cluster's
directory is given to the ``postgres`` user and its programs run as that user.
Imported by benchmarks and child programs too, so it imports nothing from
pytest."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

#: where Debian's postgresql-15 package puts its programs
PG_BIN = Path(os.environ.get("HARBORMQ_PG_BIN", "/usr/lib/postgresql/15/bin"))
#: the superuser initdb makes; trust authentication on 127.0.0.1 only
SUPERUSER = "postgres"


class PostgresUnavailable(RuntimeError):
    """PostgreSQL's programs are not installed where PG_BIN says."""


def free_port() -> int:
    """A TCP port nobody listens on at this moment, on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_as() -> dict:
    """subprocess arguments that run a PostgreSQL program as a user it accepts."""
    if os.geteuid() != 0:
        return {}
    return {"user": "postgres", "group": "postgres", "extra_groups": []}


class PostgresCluster:
    """One private cluster: ``PostgresCluster.create()`` makes and starts it,
    ``destroy()`` stops it and removes its files."""

    def __init__(self, root: Path, port: int):
        self.root = root
        self.data = root / "data"
        self.logfile = root / "postgres.log"
        self.port = port

    # -- making and removing -------------------------------------------------

    @classmethod
    def create(cls, start: bool = True, settings: dict | None = None) -> "PostgresCluster":
        """initdb in a new temporary directory (owned by ``postgres`` when
        running as root), then start it unless ``start`` is false."""
        if not (PG_BIN / "initdb").exists() and "HARBORMQ_PG_BIN" not in os.environ:
            # a fresh machine without it: Debian's package, installed once
            from support.browser import apt_install
            apt_install("pg_ctlcluster", ["postgresql-15"])
        if not (PG_BIN / "initdb").exists():
            raise PostgresUnavailable(
                f"PostgreSQL 15 is not installed: {PG_BIN / 'initdb'} is missing "
                f"(apt-get install postgresql-15, or set HARBORMQ_PG_BIN)")
        root = Path(tempfile.mkdtemp(prefix="harbormq-pg-"))
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(root, pw.pw_uid, pw.pw_gid)
        cluster = cls(root, free_port())
        subprocess.run([str(PG_BIN / "initdb"), "-D", str(cluster.data), "-U", SUPERUSER,
                        "--auth=trust", "--encoding=UTF8", "--locale=C.UTF-8",
                        "--no-instructions"],
                       check=True, capture_output=True, text=True, **_run_as())
        conf = {
            "listen_addresses": "'127.0.0.1'",
            # no Unix socket: nothing else on the machine reaches it by accident
            "unix_socket_directories": "''",
            "shared_buffers": "'32MB'",
            "max_connections": "100",
            "max_prepared_transactions": "50",
            "log_min_messages": "warning",
            "logging_collector": "off",
        }
        conf.update(settings or {})
        with open(cluster.data / "postgresql.conf", "a") as f:
            f.write("\n# harbormq tests\n")
            for key, value in conf.items():
                f.write(f"{key} = {value}\n")
        if start:
            cluster.start()
        return cluster

    def destroy(self) -> None:
        """Stop the cluster (immediate) and remove its directory."""
        if self.running():
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    # -- the server ------------------------------------------------------------

    @property
    def conninfo(self) -> str:
        """The libpq connection string of the cluster's ``postgres`` database."""
        return self.conninfo_for("postgres")

    def conninfo_for(self, dbname: str) -> str:
        return (f"host=127.0.0.1 port={self.port} user={SUPERUSER} dbname={dbname} "
                f"connect_timeout=5")

    def _pg_ctl(self, *args: str, check: bool = True, timeout: float = 60):
        return subprocess.run([str(PG_BIN / "pg_ctl"), "-D", str(self.data), *args],
                              check=check, capture_output=True, text=True, timeout=timeout,
                              **_run_as())

    def start(self) -> None:
        """Start the postmaster and wait until it takes connections (crash
        recovery first, after a kill). A port someone took meanwhile gets
        another free one."""
        for _attempt in range(3):
            r = self._pg_ctl("start", "-w", "-t", "60", "-l", str(self.logfile),
                             "-o", f"-p {self.port}", check=False)
            if r.returncode == 0:
                return
            log = self.logfile.read_text(errors="replace") if self.logfile.exists() else ""
            if "could not bind" in log or "Address already in use" in log:
                self.port = free_port()
                continue
            raise RuntimeError(f"pg_ctl start failed ({r.returncode}):\n{r.stdout}{r.stderr}\n"
                               f"{log[-3000:]}")
        raise RuntimeError("pg_ctl start: no free port after 3 attempts")

    def stop(self, mode: str = "fast") -> None:
        """pg_ctl stop in PostgreSQL's mode: smart, fast or immediate."""
        self._pg_ctl("stop", "-w", "-m", mode)

    def restart(self) -> None:
        self.stop("fast")
        self.start()

    def postmaster_pid(self) -> int | None:
        pidfile = self.data / "postmaster.pid"
        try:
            pid = int(pidfile.read_text().split("\n", 1)[0])
        except (FileNotFoundError, ValueError):
            return None
        return pid if psutil.pid_exists(pid) else None

    def running(self) -> bool:
        return self.postmaster_pid() is not None

    def kill(self) -> None:
        """SIGKILL the postmaster and every process it started, at once, as a
        crash would; the data directory stays as the crash left it."""
        pid = self.postmaster_pid()
        if pid is None:
            return
        try:
            proc = psutil.Process(pid)
            victims = [proc, *proc.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        for p in victims:
            try:
                p.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(victims, timeout=10)

    # -- databases ---------------------------------------------------------------

    def create_database(self, name: str) -> str:
        """CREATE DATABASE name; returns its conninfo."""
        import psycopg
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.conninfo_for(name)

    def drop_database(self, name: str) -> None:
        import psycopg
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def wait_ready(self, timeout: float = 30) -> None:
        """Wait until a connection succeeds (after start, restart or crash recovery)."""
        import psycopg
        deadline = time.monotonic() + timeout
        while True:
            try:
                psycopg.connect(self.conninfo).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
