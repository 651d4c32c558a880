"""Object stores: one LMDB environment per object, as MQ keeps one file per queue.

A store holds *committed* state only; uncommitted effects live in the units of
work that made them. Each flush is one synced LMDB write transaction that also
records the store's **recovery LSN**: every committed effect whose LSN is
below it is in the store, none at or above it is. Restart redoes a record on a
store only if the record's LSN is at or above the store's recovery LSN (MQ's
page-set recovery RBA is the same "start recovery here" address).

Queue store databases:
    meta   b"recovery_lsn", b"object_id", b"index_type", b"next_seq" (ASCII),
           b"damaged" (why, when the queue's data was lost: media recovery clears it)
    msgs   key = message_key(priority, seq) -> sealed Message encoding
    np     keys of the non-persistent messages in msgs (dropped at restart)
    idx    (dupsort) msg_id or correl_id -> key, when the queue is indexed

Catalog store (``qmgr/``):
    meta   b"recovery_lsn"
    objects  name -> sealed JSON definition (type, object id, attributes)

Sealed values: CRC32C (u32, little-endian) of key + value, then the value.
LMDB keeps no checksums of its own; the seal is how a flipped byte in a
store is detected (``StoreDamaged``, HMQ7472E), every time a value is read
and, at restart, by ``verify`` (media recovery, ``harbormq.recovery.recreate``).
"""

from __future__ import annotations

import contextlib
import json
import struct
from pathlib import Path

import lmdb
from crc32c import crc32c

from ..crashpoints import crash_point
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


class Store:
    def __init__(self, path: Path, map_size: int = DEFAULT_MAP_SIZE, dbs=(), *,
                 sync: bool = True):
        """``sync=False`` only for a store nobody relies on yet (one being rebuilt
        by media recovery), which must then be made durable with ``sync()``."""
        self.path = Path(path)
        # the store's directory and the names of its files are durable before
        # anything is written into it: a synced store nobody can find is lost
        make_dirs(self.path)
        new = not (self.path / "data.mdb").exists()
        try:
            self.env = lmdb.open(str(self.path), map_size=map_size, max_dbs=8, sync=sync,
                                 metasync=sync, readahead=False, meminit=False, mode=FILE_MODE)
        except lmdb.Error as exc:
            raise StoreDamaged(f"store {self.path} cannot be opened: {exc}",
                               path=str(self.path)) from None
        try:
            self.meta = self.env.open_db(b"meta")
            self._dbs = {name: self.env.open_db(name.encode(), dupsort=(name == "idx"))
                         for name in dbs}
        except lmdb.Error as exc:
            self.env.close()
            raise StoreDamaged(f"store {self.path} is unreadable: {exc}",
                               path=str(self.path)) from None
        if new and sync:
            fsync_dir(self.path)

    def db(self, name: str):
        return self._dbs[name]

    def close(self) -> None:
        self.env.close()

    def sync(self) -> None:
        """Force the store, and the names of its files (a store opened with
        ``sync=False`` was never made durable)."""
        self.env.sync(True)
        fsync_dir(self.path)

    def get_meta(self, key: bytes, default: str | None = None) -> str | None:
        try:
            with self.env.begin(db=self.meta) as txn:
                v = txn.get(key)
        except lmdb.Error as exc:
            raise StoreDamaged(f"store {self.path} is unreadable: {exc}",
                               path=str(self.path)) from None
        return v.decode() if v is not None else default

    @property
    def recovery_lsn(self) -> int:
        text = self.get_meta(b"recovery_lsn", "0")
        if not text.isdigit():
            raise StoreDamaged(f"store {self.path} has an unreadable recovery LSN {text!r}",
                               path=str(self.path))
        return int(text)

    def _set_lsn(self, txn, lsn: int) -> None:
        txn.put(b"recovery_lsn", str(lsn).encode(), db=self.meta)

    @staticmethod
    def destroy(path: Path) -> None:
        remove_tree(path)


class QueueStore(Store):
    def __init__(self, path: Path, object_id: int | None = None,
                 map_size: int = DEFAULT_MAP_SIZE, *, sync: bool = True):
        super().__init__(path, map_size, dbs=("msgs", "np", "idx"), sync=sync)
        #: called with the reason when a read finds the store damaged (the engine
        #: marks the queue damaged and reports HMQ7472E)
        self.on_damage = None
        #: counts message-changing writes (see last_key)
        self.generation = 0
        self._last_key: tuple[int, bytes | None] | None = None
        self.msgs = self.db("msgs")
        self.np = self.db("np")
        self.idx = self.db("idx")
        if object_id is not None and self.get_meta(b"object_id") is None:
            with self.env.begin(write=True) as txn:
                txn.put(b"object_id", str(object_id).encode(), db=self.meta)

    @property
    def object_id(self) -> int | None:
        v = self.get_meta(b"object_id")
        return int(v) if v is not None else None

    @property
    def damaged(self) -> str | None:
        """Why the store is damaged (kept until media recovery rebuilds it)."""
        return self.get_meta(b"damaged")

    def mark_damaged(self, why: str) -> None:
        with self.env.begin(write=True) as txn:
            txn.put(b"damaged", why.encode(), db=self.meta)

    @property
    def index_type(self) -> str:
        return self.get_meta(b"index_type", "NONE")

    def count(self) -> int:
        try:
            with self.env.begin() as txn:
                return txn.stat(self.msgs)["entries"]
        except lmdb.Error as exc:
            raise self._damaged(exc) from None

    @property
    def next_seq(self) -> int:
        """Put sequences are never reused in a queue's life: the next one is kept."""
        return int(self.get_meta(b"next_seq", "1"))

    def get(self, key: bytes) -> Message | None:
        try:
            with self.env.begin(db=self.msgs, buffers=True) as txn:
                v = txn.get(key)
                return Message.decode(unseal(key, v, self.path)) if v is not None else None
        except (lmdb.Error, ValueError, StoreDamaged) as exc:
            raise self._damaged(exc) from None

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
            with self.env.begin(write=True) as txn:
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
            with self.env.begin(db=self.msgs) as txn:
                cur = txn.cursor()
                key = cur.key() if cur.last() else None
        except lmdb.Error as exc:
            raise self._damaged(exc) from None
        self._last_key = (generation, key)
        return key

    def iter_keys(self, start: bytes | None = None):
        """Message keys in delivery order, from ``start`` (inclusive)."""
        try:
            with self.env.begin(db=self.msgs) as txn:
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
            with self.env.begin(db=self.msgs, buffers=True) as txn:
                for key, value in txn.cursor():
                    unseal(key, value, self.path)
                    n += 1
        except lmdb.Error as exc:
            raise self._damaged(exc) from None
        return n

    def index_lookup(self, ident: bytes) -> list[bytes]:
        with self.env.begin(db=self.idx) as txn:
            cur = txn.cursor()
            if not cur.set_key(ident):
                return []
            return list(cur.iternext_dup())

    def apply(self, changes: dict, recovery_lsn: int, index_type: str = "NONE",
              next_seq: int = 0) -> None:
        """One synced transaction: ``changes`` maps key -> Message (put or update)
        or None (delete); then the new recovery LSN.

        New messages mostly have keys past the end of their priority's range, so
        puts go in key order with LMDB's append mode where the key is past the
        last one: pages fill up instead of splitting half-empty."""
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

    def purge_nonpersistent(self) -> int:
        """Restart discards non-persistent messages; returns how many."""
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
        with self.env.begin() as txn:
            return txn.stat(self.idx)["entries"]

    def rebuild_index(self, index_type: str) -> int:
        """Drop and rebuild the msg_id/correl_id index; returns entries made."""
        n = 0
        with self.env.begin(write=True) as txn:
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

    def __init__(self, path: Path, map_size: int = 1 << 30):
        super().__init__(path, map_size, dbs=("objects",))
        self.objects = self.db("objects")

    def load(self) -> dict[str, dict]:
        try:
            with self.env.begin(db=self.objects) as txn:
                return {k.decode(): json.loads(unseal(k, v, self.path)) for k, v in txn.cursor()}
        except (lmdb.Error, ValueError) as exc:
            raise StoreDamaged(f"catalog store {self.path} is unreadable: {exc}",
                               path=str(self.path)) from None

    def apply(self, changes: dict[str, dict | None], recovery_lsn: int) -> None:
        try:
            self._apply(changes, recovery_lsn)
        except (lmdb.CorruptedError, lmdb.PageNotFoundError, lmdb.InvalidError) as exc:
            raise StoreDamaged(f"catalog store {self.path} is damaged: {exc}",
                               path=str(self.path)) from None

    def _apply(self, changes: dict[str, dict | None], recovery_lsn: int) -> None:
        with self.env.begin(write=True) as txn:
            for name, definition in changes.items():
                if definition is None:
                    txn.delete(name.encode(), db=self.objects)
                else:
                    key = name.encode()
                    txn.put(key, seal(key, json.dumps(definition, sort_keys=True).encode()),
                            db=self.objects)
            self._set_lsn(txn, recovery_lsn)
