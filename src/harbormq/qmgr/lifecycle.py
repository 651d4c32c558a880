"""Queue manager lifecycle: create, start (restart recovery), stop, delete.

One running instance per queue manager, in-process (the Python API) or as a
server process (``harbormq start``): the instance holds an exclusive ``flock``
on ``qmgrs/<QM>/qm.lock`` for its whole life, and writes its pid there.

Stop modes (MQ's endmqm):
* ``controlled``: new work is refused once no unit of work is active (waits
  for applications to finish their units of work), then a checkpoint.
* ``immediate``: new calls fail at once, calls in progress complete; units of
  work still in flight are left to be backed out at the next start; checkpoint.
* ``preemptive``: stop at once, no checkpoint; restart recovers.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from ..config import Listener, LogSettings, QMConfig, WebSettings, harbormq_home
from ..core.engine import QueueManagerCore
from ..core.objects import (
    DEAD_LETTER_QUEUE,
    DEFAULT_LOCAL_QUEUE,
    QLOCAL_DEFAULTS,
    QMGR_DEFAULTS,
    QMGR_OBJECT,
    check_name,
)
from ..core.operator_log import OperatorLog
from ..errors import ConfigError, QueueManagerExists, QueueManagerNotFound, QueueManagerRunning
from ..fsutil import fsync_dir, make_dirs, make_private, name_of_file, remove_tree
from ..log.manager import RecoveryLog
from ..log.records import RecordType, encode_json
from ..pubsub.service import PubSub
from ..recovery import need
from ..recovery.restart import Progress, Restart, RestartReport
from .client_defaults import ensure_client_defaults

STOP_MODES = ("controlled", "immediate", "preemptive")


class InstanceLock:
    """The exclusive lock a running queue manager holds."""

    def __init__(self, config: QMConfig):
        self.path = config.lock_path
        self.name = config.name
        self.fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise QueueManagerRunning(f"queue manager {self.name} is already running "
                                      f"(process {pid})",
                                      hint=f"stop it first with 'harbormq stop {self.name}'") \
                from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def running_pid(config: QMConfig) -> int | None:
    """The pid of the running instance, or None if the lock is free."""
    if not config.lock_path.exists():
        return None
    fd = os.open(config.lock_path, os.O_RDWR)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode(errors="replace").strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def is_instance(config: QMConfig, pid: int | None) -> bool:
    """Whether process ``pid`` is proven to be this queue manager's running
    instance: the lock is held and names it, and it is a harbormq process
    started for this queue manager. Only such a process may ever be signalled
    (a pid file that is not a number must never become kill(-1))."""
    if pid is None or pid <= 1 or running_pid(config) != pid:
        return False
    import psutil  # here, not at import: it adds 50 ms of CPU to every start
    try:
        cmdline = psutil.Process(pid).cmdline()
    except psutil.Error:
        return False
    # `harbormq start QM [--foreground]` or the server `start` spawns
    # (`python -m harbormq.server QM`): not another harbormq command that holds
    # the lock for a moment (`harbormq log delete QM ...`)
    return any(part == config.name and i > 0 and cmdline[i - 1] in ("start", "harbormq.server")
               for i, part in enumerate(cmdline)) and \
        any("harbormq" in part for part in cmdline)


def create(name: str, *, home: Path | None = None, log_type: str = "circular",
           log_file_pages: int = 4096, log_primary: int = 3, log_secondary: int = 2,
           log_path: Path | None = None, checkpoint_records: int = 10_000,
           log_management: str = "manual", log_archive_paths: list | tuple = (),
           log_dual_path: Path | None = None, port: int = 61613, ws_port: int | None = None,
           web_port: int | None = None, console=None, qsg: str | None = None,
           qsg_db: str | None = None) -> QMConfig:
    """crtmqm: directories, configuration, preallocated log, default objects; a
    STOMP listener on ``port``, one over WebSocket on ``ws_port`` if given, and
    the HTTP front end on ``web_port`` if given; with ``qsg``, a member of that
    queue sharing group in ``qsg_db`` (joined first, left again if the rest
    fails)."""
    check_name(name, "queue manager")
    home = Path(home) if home else harbormq_home()
    settings = LogSettings(log_type=log_type, pages=log_file_pages, primary=log_primary,
                           secondary=log_secondary, checkpoint_records=checkpoint_records)
    settings.validate()
    config = QMConfig(name=name, home=home, log=settings,
                      log_path=Path(log_path).resolve() if log_path else None,
                      log_management=log_management,
                      log_archive_paths=[Path(p).resolve() for p in log_archive_paths],
                      log_dual_path=Path(log_dual_path).resolve() if log_dual_path else None,
                      listeners=[Listener(port=port)] + (
                          [] if ws_port is None else
                          [Listener(name="WS", port=ws_port, transport="websocket")]),
                      web=WebSettings() if web_port is None else
                      WebSettings(enabled=True, port=web_port))
    if log_management not in ("manual", "automatic", "archive"):
        raise ConfigError(f"log management must be manual, automatic or archive, not "
                          f"{log_management!r}")
    config.check_log_management()
    config.check_dual_path()
    if config.config_path.exists():
        raise QueueManagerExists(f"queue manager {name} already exists in {home}")
    for d, what in ((config.log_dir, "log directory"),
                    (config.log_dual_dir, "dual log directory (--log-dual-path)")):
        if d is not None and d.exists() and (not d.is_dir() or any(d.iterdir())):
            raise QueueManagerExists(f"{what} {d} is not empty")
    if qsg is not None:
        from ..qsg import membership
        config.qsg = membership.join_group(qsg, qsg_db, name)
    try:
        _make_home_durable(home)
        make_dirs(config.queues_dir)
        RecoveryLog.create(config.log_dir, name, settings, config.log_dual_dir)
        asyncio.run(_first_start(config, console))
        config.save()   # last: a queue manager exists once its qm.toml does
    except BaseException:
        if config.qsg is not None:
            membership.leave_group(config.qsg, name)
        remove_tree(config.qm_dir)
        remove_tree(config.log_dir)
        if config.log_dual_dir is not None:
            remove_tree(config.log_dual_dir)
        raise
    return config


def _make_home_durable(home: Path) -> None:
    """The home directory may have been made a moment ago (``mkdir`` does not
    fsync): make its own name durable too, as far as we may."""
    make_dirs(home)
    try:
        fsync_dir(home.parent)
    except OSError:
        pass     # a parent we cannot open is not ours to make durable


async def _first_start(config: QMConfig, console) -> None:
    qm = await RunningQueueManager.start(config, console=console, quiet=True)
    core = qm.core
    oid = core.next_object_id
    core.next_object_id += 1
    qmgr = {"type": "QMGR", "name": QMGR_OBJECT, "object_id": oid, "attrs": dict(QMGR_DEFAULTS)}
    lsn = core.append_record(RecordType.OBJECT_CREATE, object_id=oid, name=QMGR_OBJECT,
                             payload=encode_json(qmgr))
    qmgr["create_lsn"] = lsn
    core.set_definition(QMGR_OBJECT, qmgr, lsn)
    await core.define_queue(DEFAULT_LOCAL_QUEUE, dict(QLOCAL_DEFAULTS))
    await core.define_queue(DEAD_LETTER_QUEUE, {"DESCR": "dead-letter queue",
                                                "DEFPSIST": "YES", "MAXDEPTH": 999_999_999})
    await core.settle_dynamic_queues()
    await ensure_client_defaults(core, created=True)
    core.oplog.emit("HMQ8001I", f"Queue manager {config.name} created "
                    f"({config.log.log_type} log, {config.log.pages} pages per extent)")
    await qm.stop("controlled")


def delete(name: str, *, home: Path | None = None) -> None:
    """dltmqm: refuses while the queue manager runs."""
    config = QMConfig.load(name, home)
    if running_pid(config) is not None:
        raise QueueManagerRunning(f"queue manager {name} is running; stop it before deleting")
    if config.qsg is not None:
        # out of its group first: refused while the group still needs it
        from ..qsg import membership
        membership.leave_group(config.qsg, name)
    # qm.toml first: a cut partway leaves no half queue manager that seems to exist
    config.config_path.unlink()
    fsync_dir(config.qm_dir)
    remove_tree(config.log_dir)
    if config.log_dual_dir is not None:
        remove_tree(config.log_dual_dir)
    remove_tree(config.qm_dir)


def recover_log_copy(config: QMConfig, *, dry_run: bool = False) -> list[str]:
    """``harbormq log recover-copy``: re-create the missing or damaged copies
    of a dual log from the good ones, the queue manager stopped (its lock
    held meanwhile, so that it cannot start). Returns what was done
    (``dry_run``: what would be)."""
    from ..log.dual import recover_copy
    if config.log_dual_dir is None:
        raise ConfigError(f"queue manager {config.name} has no dual log (log.dual_path is not "
                          "set): there is no second copy to re-create",
                          hint="set log.dual_path in qm.toml to a directory on another disk, "
                               "then run this again to make the second copy")
    lock = InstanceLock(config)
    lock.acquire()
    try:
        return recover_copy(config.log_dir, config.log_dual_dir, config.name, dry_run=dry_run)
    finally:
        lock.release()


def list_queue_managers(home: Path | None = None) -> list[str]:
    home = Path(home) if home else harbormq_home()
    qdir = home / "qmgrs"
    return sorted(name_of_file(p.name) for p in qdir.iterdir() if (p / "qm.toml").exists()) \
        if qdir.is_dir() else []


class RunningQueueManager:
    """A started queue manager on the current event loop."""

    def __init__(self, core: QueueManagerCore, lock: InstanceLock):
        self.core = core
        self.lock = lock
        self.report: RestartReport | None = None
        self._flusher: asyncio.Task | None = None
        self._stop_task: asyncio.Task | None = None

    @classmethod
    async def start(cls, config: QMConfig, *, console=None, progress: Progress | None = None,
                    quiet: bool = False,
                    before_restart: Callable[[QueueManagerCore], Awaitable[None]] | None = None
                    ) -> "RunningQueueManager":
        """Take the instance lock, run restart recovery, start the services.
        ``before_restart(core)`` runs once the lock is held and before restart
        recovery (the server opens its web listener there, which serves only
        the restart's status until restart ends); a failure there is a failed
        start."""
        if not config.config_path.exists() and not config.log_dir.exists():
            raise QueueManagerNotFound(f"queue manager {config.name} does not exist")
        lock = InstanceLock(config)
        lock.acquire()
        make_private(config.qm_dir, config.queues_dir, config.log_dir,
                     *filter(None, [config.log_dual_dir]))
        oplog = OperatorLog(config.errors_dir, console=None if quiet else console)
        core = QueueManagerCore(config, oplog)
        core.loop = asyncio.get_running_loop()
        core.log.on_switch = core.on_extent_switch
        core.log.on_failed = core.log_write_failed
        self = cls(core, lock)
        try:
            if before_restart is not None:
                await before_restart(core)
            if config.qsg is not None:
                # the group before restart: it asks what the group decided (docs/qsg.md)
                from ..qsg.service import QueueSharingGroup
                QueueSharingGroup.connect(core, config.qsg)
            self.report = await Restart(core, progress).run()
            need.record_replay_rate(core.log, self.report.bytes_replayed,
                                    sum(self.report.phases.values()))
            core.append_record(RecordType.QM_START, payload=encode_json(
                {"pid": os.getpid(), "restart": {k: v for k, v in self.report.as_dict().items()
                                                 if isinstance(v, (int, str))}}))
            await core.log.force()
            await core.settle_dynamic_queues()     # temporary ones gone, the model there
            if core.log.state.images_needed:     # a new log (reset-log): images first
                await _image_everything_after_reset(core)
            if QMGR_OBJECT in core.objects:       # (not at creation: _first_start does it)
                await ensure_client_defaults(core)
            # publish/subscribe's status queues read back before any listener opens
            await PubSub.start(core)
            if core.group is not None:
                await core.group.start()        # shared queues, peers, NOTIFYs
        except BaseException:
            if core.group is not None:
                core.group.stop("preemptive")
            core.log.close()
            core.close_stores()
            lock.release()
            raise
        self._flusher = core.spawn(self._flush_loop())
        if core.log_management.enabled:
            core.log_management.sweep()
            if core.config.log_management == "archive":
                core.log_management.start_archiving()   # what a stop left unarchived
            core.log_management.after_checkpoint()
        core.on_fatal = self._stop_preemptive
        if config.image.schedule == "auto" and config.log.log_type == "linear":
            from ..recovery.images import auto_image_loop
            core.spawn(auto_image_loop(core))
        if not quiet:
            oplog.emit("HMQ8003I", f"Queue manager {config.name} started")
        return self

    def _stop_preemptive(self, why: str) -> None:
        """Damage to the queue manager object (the server replaces this with its own
        stop request, which also closes the admin socket)."""
        self.core.loop.create_task(self.stop("preemptive"))

    async def stop(self, mode: str = "controlled", *, timeout: float | None = None) -> None:
        """Stop once; a second stop (the owner closing a queue manager that already
        stopped itself preemptively) waits for the first."""
        if self._stop_task is None:
            self._stop_task = asyncio.ensure_future(self._stop(mode, timeout=timeout))
        await asyncio.shield(self._stop_task)

    async def _flush_loop(self) -> None:
        """Flush the stores every ``flush_interval_ms``. A flush that fails (a full
        disk, EIO) loses nothing: its changes stay in memory and in the log, and
        the next flush takes them. It is retried, backing off to once a minute,
        and the operator log says when it fails and when it works again."""
        core = self.core
        interval = core.config.tuning.flush_interval_ms / 1000
        delay, failing = interval, None
        while True:
            await asyncio.sleep(delay)
            try:
                await core.flush_all()
            except Exception as exc:      # (a damaged catalog stops the queue manager itself)
                if failing is None:
                    core.oplog.emit("HMQ7530W", f"writing the stores of queue manager "
                                    f"{core.name} failed: {exc!r}; nothing is lost (the changes "
                                    "stay in memory and in the log) and the flush is retried "
                                    "until it works")
                failing = exc
                delay = min(max(2 * delay, interval), 60.0)
                continue
            if failing is not None:
                core.oplog.emit("HMQ7531I", f"the stores of queue manager {core.name} are "
                                "written again")
                failing = None
            delay = interval

    def _record_clean_stop(self, mode: str) -> None:
        """The stores hold the committed state as of the shutdown checkpoint:
        say so in the catalog (what 'harbormq reset-log' needs), unless the
        log failed, when nothing may be trusted past it."""
        core = self.core
        if core.log.failed is not None or core.catalog_store is None:
            return
        try:
            core.catalog_store.set_clean_stop({
                "lsn": core.log.end_lsn, "mode": mode, "stopped_ns": time.time_ns(),
                "next_uow_id": core.next_uow_id, "next_object_id": core.next_object_id,
                "in_doubt": sorted(u.id for u in core.uows.values() if u.state == "prepared"),
                "in_flight": sorted(u.id for u in core.uows.values() if u.first_lsn and
                                    u.state in ("active", "backing_out"))})
        except Exception as exc:     # the stop goes on: restart recovers as after a crash
            core.oplog.emit("HMQ7530W", f"the clean stop of queue manager {core.name} could "
                            f"not be recorded in its catalog ({exc!r}); restart recovers as "
                            "after a crash")

    async def _stop(self, mode: str = "controlled", *, timeout: float | None = None) -> None:
        core = self.core
        if mode not in STOP_MODES:
            raise ValueError(f"stop mode must be one of {STOP_MODES}")
        if mode == "controlled":
            deadline = None if timeout is None else time.monotonic() + timeout
            while any(u.state == "active" for u in core.uows.values()):
                if deadline is not None and time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.05)
        core.stopping = mode
        if self._flusher is not None:
            self._flusher.cancel()
        if mode == "controlled":
            from ..recovery.images import shutdown_images
            await shutdown_images(core)
        if mode != "preemptive":
            core.append_record(RecordType.QM_STOP, payload=encode_json({"mode": mode}))
            await core.checkpoint(f"shutdown ({mode})")
        core.cancel_background()
        await core.quiesce_store_io()
        if mode != "preemptive":
            self._record_clean_stop(mode)
        core.log.close()
        core.close_stores()
        if core.group is not None:
            core.group.stop(mode)
        self.lock.release()
        core.oplog.emit("HMQ8004I", f"Queue manager {core.name} ended ({mode})")


async def _image_everything_after_reset(core) -> None:
    """A log made by 'harbormq reset-log' holds no media image: until every
    object has one in it, none could be recreated. Taken at the first start."""
    if core.config.log.log_type == "linear":
        from ..recovery.images import image_objects
        done = await image_objects(core, "all", None)
        core.oplog.emit("HMQ7476I", f"media images of {len(done)} object(s) of queue manager "
                        f"{core.name} recorded in its new log")
    core.log.state.images_needed = False
    await core.log.update_control()
