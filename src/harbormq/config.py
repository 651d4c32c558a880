"""Where a queue manager lives and how it is configured.

``HARBORMQ_HOME`` (default ``~/.harbormq``)::

    qmgrs/<QM>/qm.toml          configuration (below)
    qmgrs/<QM>/errors/          HMQERR01.LOG .. HMQERR03.LOG
    qmgrs/<QM>/qmgr/            catalog store (object definitions)
    qmgrs/<QM>/queues/<QUEUE>/  one store per local queue
    qmgrs/<QM>/qm.lock          held (flock) by the one running instance
    qmgrs/<QM>/admin.sock       admin socket of a running queue manager (0600)
    log/<QM>/                   extents S0000000.LOG.. and control.1, control.2

``qm.toml``::

    name = "QM1"
    [log]
    type = "circular"           # or "linear"
    file_pages = 4096           # extent size in 4 KiB pages (32..65535)
    primary = 3
    secondary = 2
    path = "/disk2/log/QM1"     # optional: the log on another disk
    checkpoint_records = 10000
    management = "manual"       # linear logs: extents are kept
    [tuning]
    flush_interval_ms = 1000    # lazy store flush
    flush_max_entries = 20000   # flush a queue early when this many changes wait
    store_map_size_mb = 16384   # LMDB address space per store (files grow as needed)
    qindxbld = "wait"           # or "nowait": index rebuild at restart
    verify_store_mb = 128       # restart checks every message seal of stores up to this size
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
    connauth = "optional"       # or "required": every connection logs in
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import tomli_w

from .errors import ConfigError, QueueManagerNotFound
from .fsutil import atomic_write, file_name, make_dirs
from .log.manager import LogSettings


def harbormq_home() -> Path:
    return Path(os.environ.get("HARBORMQ_HOME") or Path.home() / ".harbormq")


def queue_dir_name(queue: str) -> str:
    """A queue's store directory name (names may hold '/' and '%'): the one
    mapping of names to file names, ``fsutil.file_name``."""
    return file_name(queue)


def qm_dir(home: Path, name: str) -> Path:
    """``qmgrs/<QM>`` under ``home``, the name mapped by ``fsutil.file_name``."""
    return Path(home) / "qmgrs" / file_name(name)


@dataclass
class Tuning:
    flush_interval_ms: int = 1000
    flush_max_entries: int = 20_000
    store_map_size_mb: int = 16_384
    qindxbld: str = "wait"
    verify_store_mb: int = 128


@dataclass
class ImageSettings:
    schedule: str = "manual"
    interval_minutes: float = 60
    log_length_mb: float = 0

    def validate(self, where: str) -> None:
        if self.schedule not in ("manual", "auto"):
            raise ConfigError(f"{where}: image.schedule must be 'manual' or 'auto', "
                              f"not {self.schedule!r}")
        if self.interval_minutes <= 0 or self.log_length_mb < 0:
            raise ConfigError(f"{where}: image.interval_minutes must be > 0 and "
                              "image.log_length_mb >= 0")


@dataclass
class Listener:
    name: str = "STOMP"
    host: str = "127.0.0.1"
    port: int = 61613
    tls_cert: str = ""
    tls_key: str = ""

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert)


@dataclass
class StompSettings:
    max_frame_bytes: int = 4 * 1024 * 1024
    max_headers: int = 64
    max_header_bytes: int = 16 * 1024
    max_connections: int = 1000
    max_subscriptions: int = 100
    default_prefetch: int = 16
    max_prefetch: int = 1024
    heartbeat_ms: int = 10_000
    auto_define_queues: bool = True
    connauth: str = "optional"


@dataclass
class QMConfig:
    name: str
    home: Path
    log: LogSettings = field(default_factory=LogSettings)
    log_path: Path | None = None
    log_management: str = "manual"
    tuning: Tuning = field(default_factory=Tuning)
    listeners: list[Listener] = field(default_factory=lambda: [Listener()])
    stomp: StompSettings = field(default_factory=StompSettings)
    image: ImageSettings = field(default_factory=ImageSettings)

    # -- paths --------------------------------------------------------------------
    @property
    def qm_dir(self) -> Path:
        return qm_dir(self.home, self.name)

    @property
    def log_dir(self) -> Path:
        return self.log_path or (self.home / "log" / file_name(self.name))

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
        t = self.tuning
        return {"name": self.name, "log": log,
                "tuning": {"flush_interval_ms": t.flush_interval_ms,
                           "flush_max_entries": t.flush_max_entries,
                           "store_map_size_mb": t.store_map_size_mb, "qindxbld": t.qindxbld,
                           "verify_store_mb": t.verify_store_mb},
                "image": {"schedule": self.image.schedule,
                          "interval_minutes": self.image.interval_minutes,
                          "log_length_mb": self.image.log_length_mb},
                "listeners": [dict(vars(li)) for li in self.listeners],
                "stomp": dict(vars(self.stomp))}

    def save(self) -> None:
        make_dirs(self.qm_dir)
        atomic_write(self.config_path, tomli_w.dumps(self.to_toml()).encode())

    @classmethod
    def load(cls, name: str, home: Path | None = None) -> "QMConfig":
        home = Path(home) if home else harbormq_home()
        path = qm_dir(home, name) / "qm.toml"
        if not path.exists():
            raise QueueManagerNotFound(f"queue manager {name} does not exist under {home}",
                                       hint="create it with 'harbormq create " + name + "'")
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path} is not valid TOML: {exc}", path=str(path)) from None
        log = data.get("log", {})
        tuning = data.get("tuning", {})
        try:
            cfg = cls(
                name=data.get("name", name), home=home,
                log=LogSettings(log_type=log.get("type", "circular"),
                                pages=int(log.get("file_pages", 4096)),
                                primary=int(log.get("primary", 3)),
                                secondary=int(log.get("secondary", 2)),
                                checkpoint_records=int(log.get("checkpoint_records", 10_000))),
                log_path=Path(log["path"]) if log.get("path") else None,
                log_management=log.get("management", "manual"),
                tuning=Tuning(**tuning),
                image=ImageSettings(**data.get("image", {})),
                listeners=[Listener(**li) for li in data.get("listeners", [{}])],
                stomp=StompSettings(**data.get("stomp", {})))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{path}: {exc}", path=str(path)) from None
        cfg.log.validate()
        cfg.image.validate(str(path))
        if cfg.tuning.qindxbld not in ("wait", "nowait"):
            raise ConfigError(f"{path}: tuning.qindxbld must be 'wait' or 'nowait'")
        if cfg.stomp.connauth not in ("optional", "required"):
            raise ConfigError(f"{path}: stomp.connauth must be 'optional' or 'required'")
        for li in cfg.listeners:
            if li.tls_cert and not li.tls_key or li.tls_key and not li.tls_cert:
                raise ConfigError(f"{path}: listener {li.name} needs both tls_cert and tls_key")
        return cfg
