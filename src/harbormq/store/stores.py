"""Object stores: one LMDB environment per object, as MQ keeps one file per queue.

A store holds *committed* state only; uncommitted effects live in the units of
work that made them. Each flush is one synced LMDB write transaction that also
records the store's **recovery LSN**: every committed effect whose LSN is
below it is in the store, none at or above it is. Restart redoes a record on a
store only if the record's LSN is at or above the store's recovery LSN (MQ's
page-set recovery RBA is the same "start recovery here" address).

Queue store databases:
    meta   b"recovery_lsn", b"object_id", b"index_type", b"next_seq" (ASCII),
           b"damaged" (why, when the queue's data was lost: media recovery clears it),
           b"qm_name" (the queue manager that owns it: checked at restart)
    msgs   key = message_key(priority, seq) -> sealed Message encoding
    np     keys of the non-persistent messages in msgs (dropped at restart)
    idx    (dupsort) msg_id or correl_id -> key, when the queue is indexed

Catalog store (``qmgr/``):
    meta   b"recovery_lsn", b"qm_name",
           b"clean_stop" (JSON: the queue manager stopped cleanly; removed at start)
    objects  name -> sealed JSON definition (type, object id, attributes)

Sealed values: CRC32C (u32, little-endian) of key + value, then the value.
LMDB keeps no checksums of its own; the seal is how a flipped byte in a
store is detected (``StoreDamaged``, HMQ7472E), every time a value is read
and, at restart, by ``verify`` (media recovery, ``harbormq.recovery.recreate``).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import resource
import struct
import threading
from collections import OrderedDict
from pathlib import Path

import lmdb
from crc32c import crc32c

from ..crashpoints import crash_point, delay_point
from ..errors import StoreDamaged
from ..fsutil import FILE_MODE, fsync_dir, make_dirs, remove_tree
from ..log.records import Message

SEAL = struct.Struct("<I")


def seal(key: bytes, value: bytes) -> bytes:
    return SEAL.pack(crc32c(value, crc32c(key))) + value


def unseal(key: bytes, sealed, where: Path) -> bytes:
    """The value inside a sealed store value; StoreDamaged when its CRC fails."""
    if len(sealed) < SEAL.size or \
            SEAL.unpack_from(sealed, 0)[0] != crc32c(sealed[SEAL.size:], crc32c(key)):
        raise StoreDamaged(f"store {where} fails its checksum at key {bytes(key).hex()}",
                           path=str(where))
    return bytes(sealed[SEAL.size:])

DEFAULT_MAP_SIZE = 16 << 30  # address space only: LMDB files grow as they fill
#: a store whose map fills doubles it, up to this (a full disk fails first)
MAX_MAP_SIZE = 1 << 40


def grows_map(write):
    """A write that finds LMDB's map full doubles the map and runs again: the
    map is address space, not disk (``store_map_size_mb`` is only where it
    starts). When another thread is reading the store, the map cannot be
    resized this moment and the error goes up (a flush is retried)."""
    @functools.wraps(write)
    def growing(self, *args, **kwargs):
        while True:
            try:
                return write(self, *args, **kwargs)
            except lmdb.MapFullError:
                if not self._grow_map():
                    raise
    return growing


#: the address space the open environments' maps may take together: a quarter
#: of x86-64's 128 TiB for a process (with 6,325 maps of 16 GiB open, 99 TiB, a
#: queue manager of 10,000 queues failed its restart with MemoryError)
MAP_BUDGET = 32 << 40


class OpenEnvironments:
    """The LMDB environments kept open: at most ``limit``, and maps of at most
    ``map_budget`` bytes together, the least recently used closed first, never
    one in use. Each costs three file descriptors and its map's address space,
    and a queue manager may hold more queues than the process may open files
    (MQ does not keep every queue file open either)."""

    def __init__(self, limit: int | None = None, map_budget: int = MAP_BUDGET):
        self.lock = threading.Lock()
        self.lru: OrderedDict[Store, None] = OrderedDict()
        self.limit = limit if limit is not None else default_open_limit()
        self.map_budget = map_budget
        #: the bytes of address space the open environments map
        self.mapped = 0

    def _full(self, map_size: int) -> bool:
        # one environment is always let in, whatever its map
        return len(self.lru) >= self.limit or \
            (bool(self.lru) and self.mapped + map_size > self.map_budget)

    def make_room(self, map_size: int = 0) -> None:
        """Close idle environments until one more, mapping ``map_size`` bytes,
        fits (called under ``lock``)."""
        if not self._full(map_size):
            return
        for store in list(self.lru):
            if store._pins == 0:
                store._close_env()
                if not self._full(map_size):
                    return


def default_open_limit() -> int:
    """Environments to keep open: the file descriptors this process may use
    (raised to the hard limit, as servers do), less a reserve for the log,
    sockets and clients, three per environment."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(16, (soft - 1024) // 3)


OPEN_ENVIRONMENTS = OpenEnvironments()

#: glibc's ``mallopt`` parameter for the size from which malloc maps memory
M_MMAP_THRESHOLD = -3
#: allocations from this size are their own mappings: LMDB's 2 MB dirty-page list
#: of each open environment is one, untouched pages cost nothing and closing the
#: environment gives it back
ENVIRONMENT_BUFFERS_MAPPED_FROM = 1 << 20


def keep_environment_buffers_mapped() -> bool:
    """Fix glibc's mmap threshold (True when set; False off glibc).

    Each open LMDB environment callocs a 2 MB dirty-page list, of which a
    small write touches a few pages. glibc raises its mmap threshold each
    time a large mapped block is freed (the first environment closed, a log
    read's buffer), after which these lists come from the heap, and calloc
    clears a reused heap block whole: with environments closed and opened
    (more queues than ``OpenEnvironments`` keeps open) every open one came to
    hold 2-3 MB resident, 14 GB at 10,000 queues. A fixed threshold keeps
    them mapped, so they cost the pages LMDB writes."""
    try:
        libc = ctypes.CDLL(None)
        return bool(libc.mallopt(M_MMAP_THRESHOLD, ENVIRONMENT_BUFFERS_MAPPED_FROM))
    except (OSError, AttributeError):
        return False


keep_environment_buffers_mapped()


class Store:
    def __init__(self, path: Path, map_size: int = DEFAULT_MAP_SIZE, dbs=(), *,
                 sync: bool = True, owner: str | None = None):
        """``sync=False`` only for a store nobody relies on yet (one being rebuilt
        by media recovery), which must then be made durable with ``sync()``,
        or ever (a trial restore's, in scratch space).
        ``owner``: the queue manager's name, recorded in a store that has none
        (restart checks it: a store of another queue manager is damaged)."""
        self.path = Path(path)
        self._map_size, self._sync, self._db_names = map_size, sync, tuple(dbs)
        self._env: lmdb.Environment | None = None
        self._pins = 0
        self._closed = False
        self._known_lsn: int | None = None
        # the store's directory and the names of its files are durable before
        # anything is written into it: a synced store nobody can find is lost
        make_dirs(self.path)
        new = not (self.path / "data.mdb").exists()
        with self._pinned(create=True):
            pass
        if new and sync:
            fsync_dir(self.path)
        if owner is not None and self.get_meta(b"qm_name") is None:
            with self._begin(write=True) as txn:
                txn.put(b"qm_name", owner.encode(), db=self.meta)

    def set_owner(self, owner: str) -> None:
        """Record another owner: a store restored under another name."""
        with self._begin(write=True) as txn:
            txn.put(b"qm_name", owner.encode(), db=self.meta)

    @property
    def owner(self) -> str | None:
        """The queue manager that wrote this store (None: written before
        stores recorded it)."""
        return self.get_meta(b"qm_name")

    def _open_env(self, create: bool) -> None:
        """Open the environment and its databases (under the registry's lock).
        Only the first open may create files: a store whose files vanished
        while it was closed is missing, not empty."""
        try:
            env = lmdb.open(str(self.path), map_size=self._map_size, max_dbs=8,
                            sync=self._sync, metasync=self._sync, readahead=False,
                            meminit=False, mode=FILE_MODE, create=create)
        except lmdb.Error as exc:
            raise StoreDamaged(f"store {self.path} cannot be opened: {exc}",
                               path=str(self.path)) from None
        try:
            self.meta = env.open_db(b"meta")
            self._dbs = {name: env.open_db(name.encode(), dupsort=(name == "idx"))
                         for name in self._db_names}
        except lmdb.Error as exc:
            env.close()
            raise StoreDamaged(f"store {self.path} is unreadable: {exc}",
                               path=str(self.path)) from None
        self._env = env
        OPEN_ENVIRONMENTS.lru[self] = None
        OPEN_ENVIRONMENTS.mapped += self._map_size

    def _close_env(self) -> None:
        """(under the registry's lock)"""
        OPEN_ENVIRONMENTS.lru.pop(self, None)
        if self._env is not None:
            OPEN_ENVIRONMENTS.mapped -= self._map_size
            self._env.close()
            self._env = None

    @contextlib.contextmanager
    def _pinned(self, create: bool = False):
        """The environment, open and kept open until the block ends."""
        registry = OPEN_ENVIRONMENTS
        with registry.lock:
            if self._closed:
                raise lmdb.Error(f"store {self.path} is closed")
            if self._env is None:
                registry.make_room(self._map_size)
                self._open_env(create)
            else:
                registry.lru.move_to_end(self)
            self._pins += 1
            env = self._env
        try:
            yield env
        finally:
            with registry.lock:
                self._pins -= 1

    @contextlib.contextmanager
    def _begin(self, db: str | None = None, **kwargs):
        """A transaction on the (pinned) environment, on the database named
        ``db``: committed at the end of the block, aborted when it raises.
        (Handles are looked up once the environment is open: they change when
        it is opened again.)"""
        with self._pinned() as env:
            if db is not None:
                kwargs["db"] = self.meta if db == "meta" else self._dbs[db]
            with env.begin(**kwargs) as txn:
                yield txn

    def pinned(self):
        """``with store.pinned() as env:`` for a caller that holds a transaction
        across awaits (a media image's snapshot)."""
        return self._pinned()

    @property
    def env(self) -> lmdb.Environment:
        """The open environment, for a caller on one thread that needs it
        briefly (tests); everything else goes through ``_begin``."""
        with self._pinned() as env:
            return env

    def db(self, name: str):
        return self._dbs[name]

    def _grow_map(self) -> bool:
        # LMDB resizes only with no transaction open on the environment
        with OPEN_ENVIRONMENTS.lock:
            if self._env is None or self._pins or self._map_size >= MAX_MAP_SIZE:
                return False
            grown = min(2 * self._env.info()["map_size"], MAX_MAP_SIZE)
            self._env.set_mapsize(grown)
            OPEN_ENVIRONMENTS.mapped += grown - self._map_size
            self._map_size = grown
            return True

    def close(self) -> None:
        with OPEN_ENVIRONMENTS.lock:
            self._closed = True
            self._close_env()

    def sync(self) -> None:
        """Force the store, and the names of its files (a store opened with
        ``sync=False`` was never made durable)."""
        with self._pinned() as env:
            env.sync(True)
        fsync_dir(self.path)

    def get_meta(self, key: bytes, default: str | None = None) -> str | None:
        try:
            with self._begin(db="meta") as txn:
                v = txn.get(key)
        except lmdb.Error as exc:
            raise StoreDamaged(f"store {self.path} is unreadable: {exc}",
                               path=str(self.path)) from None
        return v.decode() if v is not None else default

    @property
    def recovery_lsn(self) -> int:
        """Read once, then known from this object's own writes (a checkpoint asks
        every store: it must not open every environment to answer)."""
        if self._known_lsn is None:
            text = self.get_meta(b"recovery_lsn", "0")
            if not text.isdigit():
                raise StoreDamaged(f"store {self.path} has an unreadable recovery LSN "
                                   f"{text!r}", path=str(self.path))
            self._known_lsn = int(text)
        return self._known_lsn

    def _set_lsn(self, txn, lsn: int) -> None:
        txn.put(b"recovery_lsn", str(lsn).encode(), db=self.meta)

    def _lsn_committed(self, lsn: int) -> None:
        """Called by each write method once its transaction has committed: a
        store's writes are one at a time (the flush lock), while reads on other
        threads never touch this."""
        self._known_lsn = lsn

    @staticmethod
    def destroy(path: Path) -> None:
        remove_tree(path)


class QueueStore(Store):
    def __init__(self, path: Path, object_id: int | None = None,
                 map_size: int = DEFAULT_MAP_SIZE, *, sync: bool = True,
                 owner: str | None = None):
        super().__init__(path, map_size, dbs=("msgs", "np", "idx"), sync=sync, owner=owner)
        #: called with the reason when a read finds the store damaged (the engine
        #: marks the queue damaged and reports HMQ7472E)
        self.on_damage = None
        #: counts message-changing writes (see last_key)
        self.generation = 0
        self._last_key: tuple[int, bytes | None] | None = None
        if object_id is not None and self.get_meta(b"object_id") is None:
            with self._begin(write=True) as txn:
                txn.put(b"object_id", str(object_id).encode(), db=self.meta)

    # the databases' handles change when the environment is opened again
    msgs = property(lambda self: self._dbs["msgs"])
    np = property(lambda self: self._dbs["np"])
    idx = property(lambda self: self._dbs["idx"])

    @property
    def object_id(self) -> int | None:
        v = self.get_meta(b"object_id")
        return int(v) if v is not None else None

    @property
    def damaged(self) -> str | None:
        """Why the store is damaged (kept until media recovery rebuilds it)."""
        return self.get_meta(b"damaged")

    def mark_damaged(self, why: str) -> None:
        with self._begin(write=True) as txn:
            txn.put(b"damaged", why.encode(), db=self.meta)

    @property
    def index_type(self) -> str:
        return self.get_meta(b"index_type", "NONE")

    def count(self) -> int:
        try:
            with self._begin() as txn:
                return txn.stat(self.msgs)["entries"]
        except lmdb.Error as exc:
            raise self._damaged(exc) from None

    @property
    def next_seq(self) -> int:
        """Put sequences are never reused in a queue's life: the next one is kept."""
        return int(self.get_meta(b"next_seq", "1"))

    def get(self, key: bytes) -> Message | None:
        try:
            with self._begin(db="msgs", buffers=True) as txn:
                v = txn.get(key)
                return Message.decode(unseal(key, v, self.path)) if v is not None else None
        except (lmdb.Error, ValueError, StoreDamaged) as exc:
            raise self._damaged(exc) from None

    def get_many(self, keys: list[bytes]) -> dict[bytes, Message]:
        """The messages of ``keys`` that are here, read in one transaction (a
        sender channel's batch: one transaction instead of one per message)."""
        out = {}
        try:
            with self._begin(db="msgs", buffers=True) as txn:
                for key in keys:
                    v = txn.get(key)
                    if v is not None:
                        out[key] = Message.decode(unseal(key, v, self.path))
        except (lmdb.Error, ValueError, StoreDamaged) as exc:
            raise self._damaged(exc) from None
        return out

    def _damaged(self, exc: Exception) -> StoreDamaged:
        """The error to raise for a failed read, told first to ``on_damage``."""
        if not isinstance(exc, StoreDamaged):
            exc = StoreDamaged(f"store {self.path} is unreadable: {exc}", path=str(self.path))
        if self.on_damage is not None:
            self.on_damage(exc.message)
        return exc

    @contextlib.contextmanager
    def _changing_messages(self):
        """A write transaction that changes messages; once it has ended, the
        cached last key is stale (``generation`` moves on)."""
        try:
            with self._begin(write=True) as txn:
                yield txn
        finally:
            self.generation += 1

    def last_key(self) -> bytes | None:
        """The greatest message key, None when there is none. Cached between
        writes: a queue's gets ask on every call, and a busy queue's messages are
        mostly still in memory, past the store's last key. The generation is read
        before the store, so a write that ends meanwhile makes the cache stale
        rather than wrong."""
        generation = self.generation
        cached = self._last_key
        if cached is not None and cached[0] == generation:
            return cached[1]
        try:
            with self._begin(db="msgs") as txn:
                cur = txn.cursor()
                key = cur.key() if cur.last() else None
        except lmdb.Error as exc:
            raise self._damaged(exc) from None
        self._last_key = (generation, key)
        return key

    def iter_keys(self, start: bytes | None = None):
        """Message keys in delivery order, from ``start`` (inclusive)."""
        try:
            with self._begin(db="msgs") as txn:
                cur = txn.cursor()
                ok = cur.set_range(start) if start else cur.first()
                while ok:
                    yield cur.key()
                    ok = cur.next()
        except (lmdb.Error, StoreDamaged) as exc:
            raise self._damaged(exc) from None

    def verify(self) -> int:
        """Check every message's seal (restart); returns how many were checked.
        Raises StoreDamaged naming the first bad one."""
        n = 0
        try:
            with self._begin(db="msgs", buffers=True) as txn:
                for key, value in txn.cursor():
                    unseal(key, value, self.path)
                    n += 1
        except lmdb.Error as exc:
            raise self._damaged(exc) from None
        return n

    def index_lookup(self, ident: bytes) -> list[bytes]:
        with self._begin(db="idx") as txn:
            cur = txn.cursor()
            if not cur.set_key(ident):
                return []
            return list(cur.iternext_dup())

    @grows_map
    def apply(self, changes: dict, recovery_lsn: int, index_type: str = "NONE",
              next_seq: int = 0) -> None:
        """One synced transaction: ``changes`` maps key -> Message (put or update)
        or None (delete); then the new recovery LSN.

        New messages mostly have keys past the end of their priority's range, so
        puts go in key order with LMDB's append mode where the key is past the
        last one: pages fill up instead of splitting half-empty."""
        delay_point("store.flush")
        indexed = index_type != "NONE"
        with self._changing_messages() as txn:
            for key, msg in changes.items():
                if msg is not None:
                    continue
                old = txn.get(key, db=self.msgs) if indexed else None
                if txn.delete(key, db=self.msgs):
                    txn.delete(key, db=self.np)
                    if old is not None:
                        old = unseal(key, old, self.path)
                        ident = _index_ident(Message.decode(old, with_body=False), index_type)
                        txn.delete(ident, key, db=self.idx)
                crash_point("store.mid_flush")
            cur = txn.cursor(db=self.msgs)
            last = cur.key() if cur.last() else None
            for key in sorted(k for k, m in changes.items() if m is not None):
                msg = changes[key]
                value = seal(key, msg.encode())
                if last is None or key > last:
                    cur.put(key, value, append=True)
                    last = fresh = key
                else:
                    fresh = txn.put(key, value, db=self.msgs, overwrite=True)
                if not msg.persistent:
                    txn.put(key, b"", db=self.np)
                if indexed and fresh:
                    txn.put(_index_ident(msg, index_type), key, db=self.idx)
                crash_point("store.mid_flush")
            if next_seq:
                txn.put(b"next_seq", str(next_seq).encode(), db=self.meta)
            self._set_lsn(txn, recovery_lsn)
        self._lsn_committed(recovery_lsn)

    @grows_map
    def load_encoded(self, entries: list[tuple[bytes, bytes]]) -> None:
        """Media recovery: store persistent messages given as (key, Message
        encoding), in one transaction; appended where the keys allow."""
        with self._changing_messages() as txn:
            cur = txn.cursor(db=self.msgs)
            last = cur.key() if cur.last() else None
            for key, raw in sorted(entries):
                if last is None or key > last:
                    cur.put(key, seal(key, raw), append=True)
                    last = key
                else:
                    txn.put(key, seal(key, raw), db=self.msgs)

    def clear(self, recovery_lsn: int) -> None:
        """CLEAR QLOCAL: empty the store in one transaction."""
        with self._changing_messages() as txn:
            for db in (self.msgs, self.np, self.idx):
                txn.drop(db, delete=False)
            self._set_lsn(txn, recovery_lsn)
        self._lsn_committed(recovery_lsn)

    def purge_nonpersistent(self) -> int:
        """Restart discards non-persistent messages; returns how many."""
        with self._begin(db="np") as txn:
            if txn.stat(self.np)["entries"] == 0:
                return 0       # no write, no sync: a restart opens every store
        n = 0
        with self._changing_messages() as txn:
            cur = txn.cursor(db=self.np)
            keys = list(cur.iternext(keys=True, values=False))
            for key in keys:
                txn.delete(key, db=self.msgs)
                n += 1
            txn.drop(self.np, delete=False)
        return n

    def index_entries(self) -> int:
        with self._begin() as txn:
            return txn.stat(self.idx)["entries"]

    @grows_map
    def rebuild_index(self, index_type: str) -> int:
        """Drop and rebuild the msg_id/correl_id index; returns entries made."""
        n = 0
        with self._begin(write=True) as txn:
            txn.drop(self.idx, delete=False)
            if index_type != "NONE":
                cur = txn.cursor(db=self.msgs)
                for key, val in cur:
                    msg = Message.decode(unseal(key, val, self.path), with_body=False)
                    txn.put(_index_ident(msg, index_type), key, db=self.idx)
                    n += 1
            txn.put(b"index_type", index_type.encode(), db=self.meta)
        return n


def _index_ident(msg: Message, index_type: str) -> bytes:
    return (msg.msg_id if index_type == "MSGID" else msg.correl_id) or b"\0"


class CatalogStore(Store):
    """The queue manager's object definitions (``qmgr/``)."""

    def __init__(self, path: Path, map_size: int = 1 << 30, *, sync: bool = True,
                 owner: str | None = None):
        super().__init__(path, map_size, dbs=("objects",), sync=sync, owner=owner)

    objects = property(lambda self: self._dbs["objects"])

    def load(self) -> dict[str, dict]:
        try:
            with self._begin(db="objects") as txn:
                return {k.decode(): json.loads(unseal(k, v, self.path)) for k, v in txn.cursor()}
        except (lmdb.Error, ValueError) as exc:
            raise StoreDamaged(f"catalog store {self.path} is unreadable: {exc}",
                               path=str(self.path)) from None

    def clean_stop(self) -> dict | None:
        """What a clean stop recorded (``set_clean_stop``), None after a crash
        or once the queue manager started again."""
        text = self.get_meta(b"clean_stop")
        return json.loads(text) if text else None

    def set_clean_stop(self, info: dict | None) -> None:
        """Record (None: remove) that the queue manager stopped cleanly: every
        store then holds the committed state as of ``info["lsn"]`` and nothing
        else, which is what ``harbormq reset-log`` starts a new log from."""
        with self._begin(write=True) as txn:
            if info is None:
                txn.delete(b"clean_stop", db=self.meta)
            else:
                txn.put(b"clean_stop", json.dumps(info, sort_keys=True).encode(), db=self.meta)

    def apply(self, changes: dict[str, dict | None], recovery_lsn: int) -> None:
        try:
            self._apply(changes, recovery_lsn)
        except (lmdb.CorruptedError, lmdb.PageNotFoundError, lmdb.InvalidError) as exc:
            raise StoreDamaged(f"catalog store {self.path} is damaged: {exc}",
                               path=str(self.path)) from None

    @grows_map
    def _apply(self, changes: dict[str, dict | None], recovery_lsn: int) -> None:
        with self._begin(write=True) as txn:
            for name, definition in changes.items():
                if definition is None:
                    txn.delete(name.encode(), db=self.objects)
                else:
                    key = name.encode()
                    txn.put(key, seal(key, json.dumps(definition, sort_keys=True).encode()),
                            db=self.objects)
            self._set_lsn(txn, recovery_lsn)
        self._lsn_committed(recovery_lsn)
