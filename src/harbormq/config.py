"""Where a queue manager lives and how it is configured.

``HARBORMQ_HOME`` (default ``~/.harbormq``)::

    qmgrs/<QM>/qm.toml          configuration (below)
    qmgrs/<QM>/errors/          HMQERR01.LOG .. HMQERR03.LOG
    qmgrs/<QM>/qmgr/            catalog store (object definitions)
    qmgrs/<QM>/queues/<QUEUE>/  one store per local queue
    qmgrs/<QM>/qm.lock          held (flock) by the one running instance
    qmgrs/<QM>/admin.sock       admin socket of a running queue manager (0600)
    log/<QM>/                   extents S0000000.LOG.. and control.1, control.2
                                (a dual log: extents and both copies in log.dual_path too)

``qm.toml``::

    name = "QM1"
    [log]
    type = "circular"           # or "linear"
    file_pages = 4096           # extent size in 4 KiB pages (32..65535)
    primary = 3
    secondary = 2
    path = "/disk2/log/QM1"     # optional: the log on another disk
    dual_path = "/disk3/log/QM1"  # optional: a second copy of every extent and of the
                                #   control file (dual logging); an absolute directory
                                #   of its own
    checkpoint_records = 10000
    management = "manual"       # linear logs: "manual" (extents stay until 'harbormq log
                                #   delete'), "automatic" (deleted once unneeded) or
                                #   "archive" (archived, then deleted once unneeded)
    archive_path = ["/backup/arch1", "/backup/arch2"]   # one or two (a string for one)
    max_archives = 500          # deleted extents the control file lists (MAXARCH; 0 = all)
    [tuning]
    flush_interval_ms = 1000    # lazy store flush
    flush_max_entries = 20000   # flush a queue early when this many changes wait
    store_map_size_mb = 16384   # LMDB address space per store (files grow as needed)
    qindxbld = "wait"           # or "nowait": index rebuild at restart
    verify_store_mb = 128       # restart checks every message seal of stores up to this size
    long_uow_checkpoints = 3    # name a unit of work in the log through this many checkpoints
    shunt_checkpoints = 3       # circular logs: copy a unit of work's records forward (log
                                #   shunting) once it has lived through this many
                                #   checkpoints, and again each time as many more pass;
                                #   0 = never (a long unit is backed out when the log fills)
    log_space_wait_ms = 120000  # circular logs: a producer held because the log has no spare
                                #   extent waits this long for a checkpoint to free one,
                                #   then fails with HMQ7463E (0 = at once)
    [image]                     # media images (linear logs; MQ's IMGSCHED/IMGINTVL/IMGLOGLN)
    schedule = "manual"         # or "auto"
    interval_minutes = 60       # auto: image an object this long after its last image
    log_length_mb = 0           # auto: ... or after this much log since it (0 = off)
    [[listeners]]               # STOMP listeners (default: one on 127.0.0.1:61613)
    name = "STOMP"
    host = "127.0.0.1"
    port = 61613                # 0 = any free port (written to listeners.json at start)
    tls_cert = ""               # PEM certificate and key: TLS on this listener
    tls_key = ""
    transport = "tcp"           # or "websocket": STOMP over WebSocket, path /ws
    client_auth = "none"        # TLS: "optional" asks for a client certificate, "required"
                                #   refuses a client without one (mutual TLS)
    tls_ca = ""                 # PEM file of the CAs trusted to sign client certificates
    channel = "SYSTEM.DEF.SVRCONN"  # its server-connection channel (CHLTYPE(SVRCONN))
    [security]                  # client certificates to users (mutual TLS listeners)
    certificate_users = [{subject = "CN=alice,O=Example", user = "alice"}]
                                #   subject patterns as SSLPEER writes them, '*' at a
                                #   value's start or end; the most specific match wins
    [stomp]
    max_frame_bytes = 4194304   # a frame's headers and body
    max_headers = 64
    max_header_bytes = 16384
    max_connections = 1000
    max_subscriptions = 100     # per connection
    default_prefetch = 16       # unacknowledged deliveries per subscription
    max_prefetch = 1024
    heartbeat_ms = 10000        # what the server offers and asks for
    auto_define_queues = true   # SEND/SUBSCRIBE to an undefined queue defines it
    full_queue_wait_ms = 10000  # a SEND to a full queue holds its producer this long,
                                #   then fails with MQRC 2053 (0 = at once, as MQPUT)
    connauth = "optional"       # or "required": every connection logs in
    max_unauthenticated = 100   # sockets that have not completed CONNECT (apart from
                                #   max_connections); a new one pushes out the oldest idle
    connect_timeout_ms = 5000   # a socket without a whole CONNECT frame by then is dropped
    frame_timeout_ms = 30000    # a frame started and not finished by then is cut
    auth_threads = 2            # threads checking passwords (scrypt), apart from the rest
    login_failure_limit = 10    # failed logins from one address within the window, then
    login_failure_window_ms = 60000  # refused at once until the window has passed (0 = off);
                                #   also the period of the refusals' summary in the log
    [startup]                   # MQSC run at every start, before the listeners open
    scripts = []                # files (relative to qmgrs/<QM>/); none: startup/*.mqsc
    on_error = "continue"       # or "stop": a failing command fails the start
    [web]                       # the HTTP front end (http/; docs/http.md): on when present
    enabled = true
    host = "127.0.0.1"          # another address needs tls and connauth = "required"
    port = 9443                 # 0 = any free port (written to listeners.json at start)
    tls = false                 # TLS with the key repository's cert.pem and key.pem
    tls_cert = ""               #   (SSLKEYR), or these PEM files when given
    tls_key = ""
    connauth = "optional"       # or "required": every request logs in (HTTP basic)
    max_body_bytes = 4194304    # a request body longer than this is refused (413)
    request_timeout_ms = 30000  # a request (headers and body) not whole by then is cut
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path

import tomli_w

from .errors import ConfigError, QueueManagerNotFound
from .fsutil import atomic_write, file_name, make_dirs
from .security.certmap import SubjectPatternError, parse_subject_pattern
from .security.svrconn import DEFAULT_SVRCONN


def harbormq_home() -> Path:
    return Path(os.environ.get("HARBORMQ_HOME") or Path.home() / ".harbormq")


def queue_dir_name(queue: str) -> str:
    """A queue's store directory name (names may hold '/' and '%'): the one
    mapping of names to file names, ``fsutil.file_name``."""
    return file_name(queue)


def qm_dir(home: Path, name: str) -> Path:
    """``qmgrs/<QM>`` under ``home``, the name mapped by ``fsutil.file_name``."""
    return Path(home) / "qmgrs" / file_name(name)


def _opt(default, *, lo=None, hi=None, choices=None):
    """A setting's default and what values it allows (checked by ``_section``)."""
    return field(default=default, metadata={"lo": lo, "hi": hi, "choices": choices})


#: an extent's size in 4 KiB pages, the least and the most
MIN_PAGES, MAX_PAGES = 32, 65535


@dataclass
class LogSettings:
    """The log's shape, fixed when the queue manager is created (``[log]``)."""
    log_type: str = "circular"
    pages: int = 4096
    primary: int = 3
    secondary: int = 2
    checkpoint_records: int = 10_000

    def validate(self) -> None:
        if self.log_type not in ("circular", "linear"):
            raise ConfigError(f"log type must be 'circular' or 'linear', not {self.log_type!r}")
        if not MIN_PAGES <= self.pages <= MAX_PAGES:
            raise ConfigError(f"--log-file-pages {self.pages} is out of range: it must be "
                              f"between {MIN_PAGES} and {MAX_PAGES} (4 KiB pages)")
        if self.primary < 2 or self.primary > 254:
            raise ConfigError(f"--log-primary {self.primary} is out of range (2..254)")
        if self.secondary < 1 or self.primary + self.secondary > 255:
            raise ConfigError(f"--log-secondary {self.secondary} is out of range "
                              "(1.., primary + secondary <= 255)")
        if self.checkpoint_records < 100:
            raise ConfigError("log.checkpoint_records must be at least 100")


@dataclass
class Tuning:
    flush_interval_ms: int = _opt(1000, lo=1, hi=10**12)       # 10**9: in effect never
    flush_max_entries: int = _opt(20_000, lo=1, hi=10**12)
    store_map_size_mb: int = _opt(16_384, lo=1, hi=1 << 30)
    qindxbld: str = _opt("wait", choices=("wait", "nowait"))
    verify_store_mb: int = _opt(128, lo=0)
    #: name a unit of work in the log through every this many checkpoints
    #: (HMQ7465W; MQ's URCHKTH); 0 = never
    long_uow_checkpoints: int = _opt(3, lo=0, hi=1_000_000)
    #: circular logs: shunt a unit of work through every this many checkpoints
    #: (MQ shunts every third); 0 = never, and a long unit of work is backed out
    #: when the log is full (HMQ7469W)
    shunt_checkpoints: int = _opt(3, lo=0, hi=1_000_000)
    #: circular logs: a producer of persistent messages held while the log has no
    #: spare extent (log-space flow control) waits this long for a checkpoint to
    #: free one, then fails with HMQ7463E naming what pins the log; 0 = at once
    log_space_wait_ms: int = _opt(120_000, lo=0, hi=86_400_000)


@dataclass
class ImageSettings:
    schedule: str = _opt("manual", choices=("manual", "auto"))
    interval_minutes: float = _opt(60, lo=1e-3)
    log_length_mb: float = _opt(0, lo=0)





@dataclass
class Listener:
    name: str = "STOMP"
    host: str = "127.0.0.1"
    port: int = _opt(61613, lo=0, hi=65535)
    tls_cert: str = ""
    tls_key: str = ""
    #: "tcp": STOMP over TCP; "websocket": STOMP over WebSocket at /ws (stomp/websocket.py)
    transport: str = _opt("tcp", choices=("tcp", "websocket"))
    #: mutual TLS: "optional" asks for a client certificate, "required" refuses a
    #: client without one; either way one not signed by a CA of tls_ca is refused
    client_auth: str = _opt("none", choices=("none", "optional", "required"))
    tls_ca: str = ""
    #: its SVRCONN channel (MCAUSER, MAXINST, MAXINSTC, MAXMSGL; docs/security.md)
    channel: str = DEFAULT_SVRCONN

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert)

    def check_tls(self) -> None:
        """TLS needs a certificate and its key; client certificates need TLS and the
        CAs that sign them."""
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ConfigError(f"listener {self.name} needs both tls_cert and tls_key")
        if self.client_auth != "none" and not (self.tls and self.tls_ca):
            raise ConfigError(f"listener {self.name}: client_auth = {self.client_auth!r} "
                              "needs TLS (tls_cert, tls_key) and tls_ca, the CAs trusted to "
                              "sign client certificates")


@dataclass(frozen=True)
class CertificateUser:
    """A client certificate subject pattern and the user it maps to
    (``security/certmap.py``; MQ's CHLAUTH SSLPEERMAP rule)."""
    subject: str
    user: str


@dataclass
class SecuritySettings:
    """qm.toml's ``[security]``: client certificates to users."""
    certificate_users: list[CertificateUser] = field(default_factory=list)

    @classmethod
    def from_table(cls, table, where: str) -> "SecuritySettings":
        table = _table(table, "security", where)
        for key in set(table) - {"certificate_users"}:
            raise ConfigError(f"{where}: unknown key security.{key}; known: "
                              "certificate_users", path=where)
        rules = table.get("certificate_users", [])
        if not isinstance(rules, list):
            raise ConfigError(f"{where}: security.certificate_users must be an array of "
                              "tables {subject = \"CN=...\", user = \"...\"}", path=where)
        out = []
        for i, rule in enumerate(rules):
            name = f"security.certificate_users[{i}]"
            rule = _table(rule, name, where)
            if set(rule) != {"subject", "user"}:
                raise ConfigError(f"{where}: {name} must have exactly the keys subject and "
                                  f"user, not {', '.join(sorted(rule)) or 'none'}", path=where)
            for key in ("subject", "user"):
                _check_value(f"{name}.{key}", rule[key], "str", None, where)
            if not rule["user"]:
                raise ConfigError(f"{where}: {name}.user is empty", path=where)
            try:
                parse_subject_pattern(rule["subject"])
            except SubjectPatternError as exc:
                raise ConfigError(f"{where}: {name}: {exc}", path=where) from None
            out.append(CertificateUser(rule["subject"], rule["user"]))
        return cls(out)


@dataclass
class StompSettings:
    max_frame_bytes: int = _opt(4 * 1024 * 1024, lo=1024, hi=1 << 30)
    max_headers: int = _opt(64, lo=1, hi=100_000)
    max_header_bytes: int = _opt(16 * 1024, lo=256, hi=1 << 24)
    max_connections: int = _opt(1000, lo=1, hi=1_000_000)
    max_subscriptions: int = _opt(100, lo=1, hi=1_000_000)
    default_prefetch: int = _opt(16, lo=1, hi=1_000_000)
    max_prefetch: int = _opt(1024, lo=1, hi=1_000_000)
    heartbeat_ms: int = _opt(10_000, lo=0, hi=86_400_000)
    auto_define_queues: bool = True
    #: producer flow control: how long a SEND that finds its queue full holds its
    #: connection (nothing more is read from it) waiting for room before it fails
    #: with MQRC 2053; 0 fails at once, as MQ's MQPUT does
    full_queue_wait_ms: int = _opt(10_000, lo=0, hi=86_400_000)
    connauth: str = _opt("optional", choices=("optional", "required"))
    #: hostile clients (docs/stomp.md#hostile-clients): sockets that have not
    #: completed CONNECT have a budget of their own, a deadline for their CONNECT
    #: and, once connected, for finishing any frame they start
    max_unauthenticated: int = _opt(100, lo=1, hi=1_000_000)
    connect_timeout_ms: int = _opt(5000, lo=100, hi=86_400_000)
    frame_timeout_ms: int = _opt(30_000, lo=100, hi=86_400_000)
    #: password checks (scrypt) run on this many threads of their own
    auth_threads: int = _opt(2, lo=1, hi=64)
    #: failed logins from one address within the window before it is refused at
    #: once (0 = no limit); the window is also the period of the summary line
    login_failure_limit: int = _opt(10, lo=0, hi=1_000_000)
    login_failure_window_ms: int = _opt(60_000, lo=100, hi=86_400_000)


@dataclass
class StartupSettings:
    """MQSC scripts run at every start, after restart recovery and before the
    listeners open (MQ for z/OS's CSQINP2, MQ's AutoConfig)."""
    #: the scripts in order (relative to the queue manager's directory); empty:
    #: every ``startup/*.mqsc`` in name order
    scripts: list = field(default_factory=list)
    #: a failing command: "continue" (reported in the operator log) or "stop" (the
    #: start fails)
    on_error: str = _opt("continue", choices=("continue", "stop"))


@dataclass
class WebSettings:
    """qm.toml's ``[web]``: the HTTP front end (``http/``, docs/http.md). Off
    unless the table is there (or ``harbormq create --web-port``)."""
    enabled: bool = False
    host: str = "127.0.0.1"
    #: 9443, mqweb's HTTPS port; 0 = any free port (written to listeners.json)
    port: int = _opt(9443, lo=0, hi=65535)
    #: TLS with the queue manager's key material (the key repository, SSLKEYR),
    #: or with tls_cert and tls_key when they are given
    tls: bool = False
    tls_cert: str = ""
    tls_key: str = ""
    #: "required": every request authenticates (HTTP basic); "optional": a
    #: loopback request without credentials acts as the OS user at the other end
    connauth: str = _opt("optional", choices=("optional", "required"))
    max_body_bytes: int = _opt(4 * 1024 * 1024, lo=1024, hi=1 << 30)
    #: a request whose headers and body have not all come by then is cut off
    request_timeout_ms: int = _opt(30_000, lo=100, hi=86_400_000)

    def check(self) -> None:
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ConfigError("web needs both tls_cert and tls_key, or neither")
        if (self.tls_cert or self.tls_key) and not self.tls:
            raise ConfigError("web.tls_cert and tls_key are given but web.tls is false")

    @classmethod
    def from_table(cls, table, where: str) -> "WebSettings":
        """The table present turns the front end on unless it says otherwise."""
        table = {"enabled": True, **_table(table, "web", where)}
        return _section(cls, table, "web", where)


@dataclass
class QsgSettings:
    """The queue sharing group this queue manager is a member of ([qsg],
    written by ``create --qsg``; docs/qsg.md): the group's name, the libpq
    conninfo of its PostgreSQL database, the heartbeat and the silence after
    which peers end a member's connection."""
    name: str = ""
    db: str = ""
    heartbeat_interval: float = _opt(1.0, lo=0.1, hi=60.0)
    heartbeat_timeout: float = _opt(10.0, lo=1.0, hi=600.0)

    def check(self) -> None:
        # a peer whose timeout is within a few of a member's beats would end
        # that live member's connection and back its work out
        if self.heartbeat_timeout < 3 * self.heartbeat_interval:
            raise ConfigError(f"qsg.heartbeat_timeout ({self.heartbeat_timeout} s) must be at "
                              f"least three heartbeat intervals "
                              f"({3 * self.heartbeat_interval} s)")


@dataclass
class QMConfig:
    name: str
    home: Path
    log: LogSettings = field(default_factory=LogSettings)
    log_path: Path | None = None
    #: dual logging: the directory of the log's second copy
    log_dual_path: Path | None = None
    log_management: str = "manual"
    log_archive_paths: list[Path] = field(default_factory=list)
    max_archives: int = 500
    tuning: Tuning = field(default_factory=Tuning)
    listeners: list[Listener] = field(default_factory=lambda: [Listener()])
    stomp: StompSettings = field(default_factory=StompSettings)
    image: ImageSettings = field(default_factory=ImageSettings)
    security: SecuritySettings = field(default_factory=SecuritySettings)
    startup: StartupSettings = field(default_factory=StartupSettings)
    web: WebSettings = field(default_factory=WebSettings)
    #: the queue sharing group, when this queue manager is a member of one
    qsg: QsgSettings | None = None
    #: a trial restore's queue manager in scratch space (set by the code that
    #: made it, never read from qm.toml): its stores are never forced, as
    #: nothing relies on them, and removed unflushed they cost the disk nothing
    scratch: bool = False

    def check_log_management(self) -> None:
        if self.log_management == "archive" and not self.log_archive_paths:
            raise ConfigError("log.management = \"archive\" needs log.archive_path (one or "
                              "two directories)")
        if self.log_archive_paths and self.log.log_type != "linear":
            raise ConfigError("log archiving needs a linear log (a circular log reuses its "
                              "extents and is never archived)")
        if len(self.log_archive_paths) > 2:
            raise ConfigError("at most two archive paths (log.archive_path)")

    def check_dual_path(self) -> None:
        """log.dual_path: an absolute directory that is neither the log
        directory, nor inside it or around it, nor an archive directory."""
        dual = self.log_dual_path
        if dual is None:
            return
        if not dual.is_absolute():
            raise ConfigError(f"log.dual_path {str(dual)!r} must be an absolute directory")
        d, log = dual.resolve(), self.log_dir.resolve()
        if d == log or log in d.parents or d in log.parents:
            raise ConfigError(f"log.dual_path {dual} must be a directory of its own, apart "
                              f"from the log directory {self.log_dir}: the second copy of "
                              "the log is only worth having on another disk")
        for a in self.log_archive_paths:
            a = Path(a).resolve()
            if d in (a, a / file_name(self.name)):
                raise ConfigError(f"log.dual_path {dual} is an archive directory "
                                  "(log.archive_path)")

    # -- paths --------------------------------------------------------------------
    @property
    def qm_dir(self) -> Path:
        return qm_dir(self.home, self.name)

    @property
    def log_dir(self) -> Path:
        return self.log_path or (self.home / "log" / file_name(self.name))

    @property
    def log_dual_dir(self) -> Path | None:
        """Where a dual log keeps its second copy (None: a single log)."""
        return self.log_dual_path

    @property
    def errors_dir(self) -> Path:
        return self.qm_dir / "errors"

    @property
    def catalog_dir(self) -> Path:
        return self.qm_dir / "qmgr"

    @property
    def queues_dir(self) -> Path:
        return self.qm_dir / "queues"

    def queue_dir(self, queue: str) -> Path:
        return self.queues_dir / queue_dir_name(queue)

    @property
    def lock_path(self) -> Path:
        return self.qm_dir / "qm.lock"

    @property
    def admin_socket(self) -> Path:
        return self.qm_dir / "admin.sock"

    @property
    def listeners_path(self) -> Path:
        """Where a running queue manager writes the addresses it listens on."""
        return self.qm_dir / "listeners.json"

    @property
    def web_sslkeyr_path(self) -> Path:
        """SSLKEYR when the queue manager last ran: the key repository of the web
        listener opened before restart recovery (docs/http.md)."""
        return self.qm_dir / "web-sslkeyr.json"

    @property
    def users_path(self) -> Path:
        return self.qm_dir / "users.json"

    @property
    def authrecs_path(self) -> Path:
        return self.qm_dir / "authrecs.json"

    @property
    def config_path(self) -> Path:
        return self.qm_dir / "qm.toml"

    # -- persistence ----------------------------------------------------------------
    def to_toml(self) -> dict:
        log = {"type": self.log.log_type, "file_pages": self.log.pages,
               "primary": self.log.primary, "secondary": self.log.secondary,
               "checkpoint_records": self.log.checkpoint_records,
               "management": self.log_management}
        if self.log_path:
            log["path"] = str(self.log_path)
        if self.log_dual_path:
            log["dual_path"] = str(self.log_dual_path)
        if self.log_archive_paths:
            log["archive_path"] = [str(p) for p in self.log_archive_paths]
        log["max_archives"] = self.max_archives
        t = self.tuning
        return {"name": self.name, "log": log,
                "tuning": {"flush_interval_ms": t.flush_interval_ms,
                           "flush_max_entries": t.flush_max_entries,
                           "store_map_size_mb": t.store_map_size_mb, "qindxbld": t.qindxbld,
                           "verify_store_mb": t.verify_store_mb,
                           "long_uow_checkpoints": t.long_uow_checkpoints,
                           "shunt_checkpoints": t.shunt_checkpoints},
                "image": {"schedule": self.image.schedule,
                          "interval_minutes": self.image.interval_minutes,
                          "log_length_mb": self.image.log_length_mb},
                "listeners": [dict(vars(li)) for li in self.listeners],
                "stomp": dict(vars(self.stomp)),
                "security": {"certificate_users": [dict(vars(r)) for r in
                                                   self.security.certificate_users]},
                "startup": {"scripts": list(self.startup.scripts),
                            "on_error": self.startup.on_error},
                **({"web": dict(vars(self.web))} if self.web.enabled else {}),
                **({"qsg": dict(vars(self.qsg))} if self.qsg is not None else {})}

    def save(self) -> None:
        make_dirs(self.qm_dir)
        atomic_write(self.config_path, tomli_w.dumps(self.to_toml()).encode())

    @classmethod
    def load(cls, name: str, home: Path | None = None) -> "QMConfig":
        """Read and check qm.toml: every key is known, of its type and in its
        range, or ConfigError names the key and the file."""
        home = Path(home) if home else harbormq_home()
        path = qm_dir(home, name) / "qm.toml"
        if not path.exists():
            raise QueueManagerNotFound(f"queue manager {name} does not exist under {home}",
                                       hint="create it with 'harbormq create " + name + "'")
        try:
            data = tomllib.loads(path.read_text())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path} is not valid TOML: {exc}", path=str(path)) from None
        where = str(path)
        unknown = set(data) - {"name", "log", "tuning", "image", "listeners", "stomp",
                               "security", "startup", "web", "qsg"}
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; known: "
                              "name, [log], [tuning], [image], [[listeners]], [stomp], "
                              "[security], [startup], [web], [qsg]", path=where)
        if data.get("name") != name:
            raise ConfigError(f"{where}: name = {data.get('name')!r} does not match the queue "
                              f"manager's directory ({name!r})", path=where,
                              hint=f"set name = \"{name}\" in the file")
        log = _table(data.get("log", {}), "log", where)
        for key in set(log) - set(LOG_KEYS):
            raise ConfigError(f"{where}: unknown key log.{key}; known: "
                              f"{', '.join(sorted(LOG_KEYS))}", path=where)
        archive_paths = log.pop("archive_path", [])
        if isinstance(archive_paths, str):
            archive_paths = [archive_paths]
        if not isinstance(archive_paths, list) or len(archive_paths) > 2 or not all(
                isinstance(p, str) and p for p in archive_paths):
            raise ConfigError(f"{where}: log.archive_path must be one or two directory "
                              f"names, not {archive_paths!r}", path=where)
        max_archives = log.pop("max_archives", 500)
        _check_value("log.max_archives", max_archives, "int", None, where, 0, 1_000_000)
        for key, value in log.items():
            _check_value(f"log.{key}", value, *LOG_KEYS[key], where)
        listeners = data.get("listeners", [{}])
        if not isinstance(listeners, list) or not listeners:
            raise ConfigError(f"{where}: listeners must be a non-empty array of tables "
                              "([[listeners]])", path=where)
        cfg = cls(
            name=name, home=home,
            log=LogSettings(log_type=log.get("type", "circular"),
                            pages=log.get("file_pages", 4096),
                            primary=log.get("primary", 3),
                            secondary=log.get("secondary", 2),
                            checkpoint_records=log.get("checkpoint_records", 10_000)),
            log_path=Path(log["path"]) if log.get("path") else None,
            log_dual_path=Path(log["dual_path"]) if "dual_path" in log else None,
            log_management=log.get("management", "manual"),
            log_archive_paths=[Path(p) for p in archive_paths],
            max_archives=max_archives,
            tuning=_section(Tuning, data.get("tuning", {}), "tuning", where),
            image=_section(ImageSettings, data.get("image", {}), "image", where),
            listeners=[_section(Listener, li, f"listeners[{i}]", where)
                       for i, li in enumerate(listeners)],
            stomp=_section(StompSettings, data.get("stomp", {}), "stomp", where),
            security=SecuritySettings.from_table(data.get("security", {}), where),
            startup=_section(StartupSettings, data.get("startup", {}), "startup", where),
            web=(WebSettings.from_table(data["web"], where) if "web" in data
                 else WebSettings()),
            qsg=_section(QsgSettings, data["qsg"], "qsg", where) if "qsg" in data else None)
        try:
            cfg.web.check()
            if cfg.qsg is not None:
                cfg.qsg.check()
            cfg.log.validate()
            cfg.check_log_management()
            cfg.check_dual_path()
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc.message}", path=where) from None
        for li in cfg.listeners:
            try:
                li.check_tls()
            except ConfigError as exc:
                raise ConfigError(f"{where}: {exc.message}", path=where) from None
        names = [li.name for li in cfg.listeners]
        for li in cfg.listeners:
            if li.client_auth != "none" and names.count(li.name) > 1:
                # a connection finds its listener's client_auth by the listener's name
                raise ConfigError(f"{where}: two listeners are named {li.name!r} and one has "
                                  "client_auth: give each its own name", path=where)
        return cfg


#: the keys of qm.toml's [log] table: (type, allowed values)
LOG_KEYS = {
    "type": ("str", ("circular", "linear")), "file_pages": ("int", None),
    "primary": ("int", None), "secondary": ("int", None),
    "checkpoint_records": ("int", None), "path": ("str", None), "dual_path": ("str", None),
    "management": ("str", ("manual", "automatic", "archive")),
    "archive_path": ("list", None), "max_archives": ("int", None),
}


def _table(value, section: str, where: str) -> dict:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: {section} must be a table ([{section}]), not "
                          f"{type(value).__name__}", path=where)
    return value


def _check_value(key: str, value, kind: str, choices, where: str, lo=None, hi=None) -> None:
    """One setting: its TOML type, then its allowed values or range."""
    ok = {"int": isinstance(value, int) and not isinstance(value, bool),
          "float": isinstance(value, (int, float)) and not isinstance(value, bool),
          "bool": isinstance(value, bool), "str": isinstance(value, str),
          "list": isinstance(value, list) and all(isinstance(v, str) for v in value)}[kind]
    if not ok:
        raise ConfigError(f"{where}: {key} = {value!r} is not {_KIND_TEXT[kind]}", path=where)
    if choices is not None and value not in choices:
        raise ConfigError(f"{where}: {key} = {value!r} is not one of "
                          f"{', '.join(map(repr, choices))}", path=where)
    if lo is not None and value < lo or hi is not None and value > hi:
        bounds = f"{lo} to {hi}" if hi is not None else f"at least {lo}"
        raise ConfigError(f"{where}: {key} = {value!r} is out of range ({bounds})", path=where)


_KIND_TEXT = {"int": "a whole number", "float": "a number", "bool": "true or false",
              "str": "a string", "list": "a list of strings"}


def _section(cls, table, section: str, where: str):
    """A settings dataclass from a qm.toml table, every key checked against the
    dataclass: known, of the field's type, within its ``_opt`` bounds."""
    table = _table(table, section, where)
    known = {f.name: f for f in fields(cls)}
    for key, value in table.items():
        f = known.get(key)
        if f is None:
            raise ConfigError(f"{where}: unknown key {section}.{key}; known: "
                              f"{', '.join(sorted(known))}", path=where)
        meta = f.metadata
        _check_value(f"{section}.{key}", value, f.type, meta.get("choices"), where,
                     meta.get("lo"), meta.get("hi"))
    return cls(**table)
