"""A FUSE file system that forgets what was never made durable: a power cut
you can run in a test (Jepsen's LazyFS idea, in Python with fusepy).

Every file and directory has two states: the *volatile* one that running
programs see (the page cache) and the *durable* one that a disk would keep.
Only these make the volatile state durable, and only for the inode named:

* ``fsync``/``fdatasync`` of a file, or any write through a descriptor opened
  with ``O_SYNC``/``O_DSYNC``: the file's data and size;
* ``fsync`` of a directory: the directory's entries (names created, renamed
  or removed in it). A new file whose directory was not fsynced is gone after
  a cut, however often the file itself was fsynced; a rename is undone.

This is what POSIX promises and no more. A **cut** throws the volatile state
away: each file keeps its durable data, plus, when ``torn`` is chosen, a
random subset of the 512-byte sectors written since its last sync (in any
order, as a disk reorders writes) and a length that is either the synced one
or the written one; directories keep exactly their synced entries. Then the
file system is unmounted and mounted again with what remains, so the kernel's
caches go too.

Run as its own process (the queue manager must not share its GIL)::

    python tests/support/lazyfs.py MOUNTPOINT CONTROL_SOCKET --state FILE

and drive it through ``LazyFS`` below (it starts, cuts and stops the process).
The control socket takes one line per request and answers one JSON line:
``cut SEED TORN`` (TORN is 0 or 1), ``lie fsync|fsyncdir GLOB``,
``fail OP GLOB ERRNO`` (a disk fault: OP on matching paths fails with ERRNO,
``fail OP -`` clears it), ``stats``, ``quit``. ``lie`` makes the file system
lie from then on, as a disk with a volatile write cache does: an fsync of a
file (or a directory) whose path from the mount point matches the glob
(``fnmatch``; ``-`` for none) does nothing.
A test proves with it that the harness notices lost data.

Not modelled: a rename from one directory to another (refused with EXDEV;
harbormq renames within a directory), and unsynced directory changes that a
real file system may keep in part: here every unsynced name change is lost.
"""

from __future__ import annotations

import errno
import faulthandler
import fnmatch
import json
import os
import pickle
import random
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

SECTOR = 512
#: operations a disk fault can be injected into (``fail``)
FAULT_OPS = ("write", "fsync", "create", "mkdir", "rename", "unlink", "fsyncdir", "truncate")
DSYNC_FLAGS = os.O_SYNC | os.O_DSYNC


# ----------------------------------------------------------------------------- the model


class Node:
    """One inode: volatile and durable state side by side."""

    __slots__ = ("ino", "mode", "data", "durable", "dirty", "entries", "durable_entries",
                 "mtime", "ctime")

    def __init__(self, ino: int, mode: int):
        self.ino = ino
        self.mode = mode
        self.mtime = self.ctime = time.time()
        if stat.S_ISDIR(mode):
            self.entries: dict[str, Node] | None = {}
            self.durable_entries: dict[str, Node] | None = {}
        else:
            self.entries = self.durable_entries = None
        self.data = bytearray()       # what readers see
        self.durable = bytearray()    # what a disk holds
        self.dirty: set[int] = set()  # sectors written since the last sync

    @property
    def is_dir(self) -> bool:
        return self.entries is not None

    def write(self, offset: int, buf: bytes) -> None:
        end = offset + len(buf)
        if end > len(self.data):
            self.mark(len(self.data), end)
            self.data.extend(bytes(end - len(self.data)))
        self.data[offset:end] = buf
        self.mark(offset, end)
        self.mtime = time.time()

    def truncate(self, length: int) -> None:
        old = len(self.data)
        if length < old:
            del self.data[length:]
        else:
            self.data.extend(bytes(length - old))
        self.mark(min(old, length), max(old, length))
        self.mtime = time.time()

    def mark(self, start: int, end: int) -> None:
        if end > start:
            self.dirty.update(range(start // SECTOR, (end - 1) // SECTOR + 1))

    def sync_data(self) -> None:
        """fsync: the durable copy becomes the volatile one (dirty sectors only)."""
        if len(self.durable) != len(self.data):
            if len(self.durable) > len(self.data):
                del self.durable[len(self.data):]
            else:
                self.durable.extend(bytes(len(self.data) - len(self.durable)))
        for run_start, run_end in _runs(self.dirty):
            a, b = run_start * SECTOR, min(run_end * SECTOR, len(self.data))
            if a < b:
                self.durable[a:b] = self.data[a:b]
        self.dirty.clear()

    def sync_entries(self) -> None:
        self.durable_entries = dict(self.entries)

    def survive(self, rng: random.Random | None) -> int:
        """The power cut, for this inode: keep the durable state, and with ``rng``
        some unsynced sectors and possibly the unsynced length. Returns how many
        unsynced sectors were lost."""
        if self.is_dir:
            self.entries = dict(self.durable_entries)
            return 0
        lost = len(self.dirty)
        kept = bytearray(self.durable)
        if rng is not None and (self.dirty or len(self.data) != len(kept)):
            length = rng.choice((len(self.durable), len(self.data)))
            if length < len(kept):
                del kept[length:]
            else:
                kept.extend(bytes(length - len(kept)))
            p = rng.random()
            for s in self.dirty:
                a, b = s * SECTOR, min((s + 1) * SECTOR, length, len(self.data))
                if a < b and rng.random() < p:
                    kept[a:b] = self.data[a:b]
                    lost -= 1
        self.data = kept
        self.durable = bytearray(kept)
        self.dirty.clear()
        return lost


def _runs(sectors: set[int]):
    """Contiguous [start, end) runs of a set of sector numbers."""
    start = prev = None
    for s in sorted(sectors):
        if start is None:
            start = prev = s
        elif s == prev + 1:
            prev = s
        else:
            yield start, prev + 1
            start = prev = s
    if start is not None:
        yield start, prev + 1


class Model:
    """The whole tree, and the power cut over it."""

    def __init__(self):
        self.next_ino = 2
        self.root = Node(1, stat.S_IFDIR | 0o755)
        self.fsyncs = self.fsyncdirs = self.cuts = 0
        self.lost_sectors = self.lost_entries = 0    # over all cuts
        self.forced_aborts: list[list[str]] = []     # who held the mount at a cut
        self.respawns = 0        # daemons that took over from one whose loop stuck
        self.faults_raised = 0
        self.unexpected_unmounts = 0

    def new_node(self, mode: int) -> Node:
        node = Node(self.next_ino, mode)
        self.next_ino += 1
        return node

    def cut(self, rng: random.Random | None) -> dict:
        """Every inode reachable through durable entries survives as the power cut
        leaves it; nothing else does."""
        seen: set[int] = set()
        stack = [self.root]
        files = lost_entries = lost_sectors = 0
        while stack:
            node = stack.pop()
            if node.ino in seen:
                continue
            seen.add(node.ino)
            if node.is_dir:
                lost_entries += len(set(node.entries.items()) ^ set(node.durable_entries.items()))
                stack.extend(node.durable_entries.values())
            else:
                files += 1
            lost_sectors += node.survive(rng)
        self.cuts += 1
        self.lost_sectors += lost_sectors
        self.lost_entries += lost_entries
        return {"inodes": len(seen), "files": files, "lost_entries": lost_entries,
                "lost_sectors": lost_sectors}


# ----------------------------------------------------------------------------- FUSE side


def _fuse_operations():
    from fuse import FuseOSError, Operations

    class LazyOperations(Operations):
        use_ns = True

        def __init__(self, model: Model):
            self.model = model
            self.mutex = threading.Lock()   # (not "lock": fusepy would take it for the lock op)
            self.handles: dict[int, tuple[Node, int, str]] = {}   # fh -> node, flags, path
            self.next_fh = 1
            self.ignore_fsync: str | None = None       # see "lie"
            self.ignore_fsyncdir: str | None = None
            #: injected disk faults: operation -> (path glob, errno); see "fail"
            self.faults: dict[str, tuple[str, int]] = {}

        # every call runs under one lock: the model is plain Python objects
        def __call__(self, op, *args):
            with self.mutex:
                return super().__call__(op, *args)

        def _lookup(self, path: str) -> Node:
            node = self.model.root
            for part in path.split("/"):
                if not part:
                    continue
                if not node.is_dir:
                    raise FuseOSError(errno.ENOTDIR)
                node = node.entries.get(part)
                if node is None:
                    raise FuseOSError(errno.ENOENT)
            return node

        def _parent(self, path: str) -> tuple[Node, str]:
            head, _, name = path.rstrip("/").rpartition("/")
            parent = self._lookup(head or "/")
            if not parent.is_dir:
                raise FuseOSError(errno.ENOTDIR)
            if len(name.encode()) > 255:
                raise FuseOSError(errno.ENAMETOOLONG)
            return parent, name

        def _handle(self, fi) -> tuple[Node, int, str]:
            return self.handles[fi.fh]

        def _new_handle(self, node: Node, flags: int, path: str) -> int:
            fh = self.next_fh
            self.next_fh += 1
            self.handles[fh] = (node, flags, path)
            return fh

        def _lies(self, glob: str | None, path: str) -> bool:
            return glob is not None and fnmatch.fnmatchcase(path, glob)

        def _fault(self, op: str, path: str) -> None:
            fault = self.faults.get(op)
            if fault is not None and fnmatch.fnmatchcase(path, fault[0]):
                self.model.faults_raised += 1
                raise FuseOSError(fault[1])

        # -- metadata
        def getattr(self, path, fh=None):
            node = self._lookup(path)
            size = len(node.data)
            ns = lambda t: int(t * 1e9)  # noqa: E731
            return {"st_mode": node.mode, "st_ino": node.ino,
                    "st_nlink": 2 if node.is_dir else 1, "st_size": size,
                    "st_blocks": (size + 511) // 512, "st_uid": os.getuid(),
                    "st_gid": os.getgid(), "st_atime": ns(node.mtime),
                    "st_mtime": ns(node.mtime), "st_ctime": ns(node.ctime)}

        def chmod(self, path, mode):
            node = self._lookup(path)
            node.mode = (node.mode & ~0o7777) | (mode & 0o7777)
            return 0

        def chown(self, path, uid, gid):
            return 0

        def utimens(self, path, times=None):
            node = self._lookup(path)
            node.mtime = times[1] / 1e9 if times else time.time()
            return 0

        def statfs(self, path):
            return {"f_bsize": 4096, "f_frsize": 4096, "f_blocks": 1 << 24,
                    "f_bfree": 1 << 23, "f_bavail": 1 << 23, "f_files": 1 << 20,
                    "f_ffree": 1 << 19, "f_namemax": 255}

        # -- directories
        def readdir(self, path, fh):
            node = self._lookup(path)
            return [".", "..", *node.entries]

        def mkdir(self, path, mode):
            self._fault("mkdir", path)
            parent, name = self._parent(path)
            if name in parent.entries:
                raise FuseOSError(errno.EEXIST)
            parent.entries[name] = self.model.new_node(stat.S_IFDIR | (mode & 0o7777))
            return 0

        def rmdir(self, path):
            parent, name = self._parent(path)
            node = parent.entries.get(name)
            if node is None:
                raise FuseOSError(errno.ENOENT)
            if not node.is_dir:
                raise FuseOSError(errno.ENOTDIR)
            if node.entries:
                raise FuseOSError(errno.ENOTEMPTY)
            del parent.entries[name]
            return 0

        def fsyncdir(self, path, datasync, fh):
            self._fault("fsyncdir", path)
            self.model.fsyncdirs += 1
            if not self._lies(self.ignore_fsyncdir, path):
                self._lookup(path).sync_entries()
            return 0

        # -- names
        def mknod(self, path, mode, dev):
            parent, name = self._parent(path)
            if name in parent.entries:
                raise FuseOSError(errno.EEXIST)
            parent.entries[name] = self.model.new_node(mode)
            return 0

        def unlink(self, path):
            self._fault("unlink", path)
            parent, name = self._parent(path)
            node = parent.entries.get(name)
            if node is None:
                raise FuseOSError(errno.ENOENT)
            if node.is_dir:
                raise FuseOSError(errno.EISDIR)
            del parent.entries[name]
            return 0

        def rename(self, old, new):
            self._fault("rename", old)
            src_dir, src_name = self._parent(old)
            dst_dir, dst_name = self._parent(new)
            if src_dir is not dst_dir:      # not modelled (see the module's docstring)
                raise FuseOSError(errno.EXDEV)
            node = src_dir.entries.get(src_name)
            if node is None:
                raise FuseOSError(errno.ENOENT)
            target = dst_dir.entries.get(dst_name)
            if target is not None and target is not node:
                if target.is_dir and not node.is_dir:
                    raise FuseOSError(errno.EISDIR)
                if node.is_dir and not target.is_dir:
                    raise FuseOSError(errno.ENOTDIR)
                if target.is_dir and target.entries:
                    raise FuseOSError(errno.ENOTEMPTY)
            del src_dir.entries[src_name]
            dst_dir.entries[dst_name] = node
            return 0

        def symlink(self, target, source):
            raise FuseOSError(errno.EPERM)

        def link(self, target, source):
            raise FuseOSError(errno.EPERM)

        # -- files
        def create(self, path, mode, fi=None):
            self._fault("create", path)
            parent, name = self._parent(path)
            node = parent.entries.get(name)
            if node is None:
                node = self.model.new_node(stat.S_IFREG | (mode & 0o7777))
                parent.entries[name] = node
            fi.fh = self._new_handle(node, fi.flags, path)
            return 0

        def open(self, path, fi):
            node = self._lookup(path)
            fi.fh = self._new_handle(node, fi.flags, path)
            return 0

        def read(self, path, size, offset, fi):
            node = self._handle(fi)[0]
            return bytes(node.data[offset:offset + size])

        def write(self, path, data, offset, fi):
            node, flags, opened_as = self._handle(fi)
            self._fault("write", opened_as)
            node.write(offset, data)
            if flags & DSYNC_FLAGS and not self._lies(self.ignore_fsync, opened_as):
                node.sync_data()
            return len(data)

        def truncate(self, path, length, fh=None):
            self._fault("truncate", path)
            node = self.handles[fh.fh][0] if fh is not None else self._lookup(path)
            node.truncate(length)
            return 0

        def flush(self, path, fi):
            return 0

        def release(self, path, fi):
            self.handles.pop(fi.fh, None)
            return 0

        def fsync(self, path, datasync, fi):
            self.model.fsyncs += 1
            node, _, opened_as = self._handle(fi)
            self._fault("fsync", opened_as)
            if not self._lies(self.ignore_fsync, opened_as):
                node.sync_data()
            return 0

    return LazyOperations


# ----------------------------------------------------------------------------- the daemon


def serve(mountpoint: str, control: str, state_file: str) -> None:
    """Mount, answer control requests, remount after each cut, until ``quit``."""
    from fuse import FUSE

    model = Model()
    ops = _fuse_operations()(model)
    if os.path.exists(state_file):        # a daemon taking over from a stuck one
        with open(state_file, "rb") as f:
            model, ops.ignore_fsync, ops.ignore_fsyncdir, ops.faults = pickle.load(f)
        ops.model = model
    state = {"quit": False, "cutting": False}
    unmounted = threading.Event()     # the FUSE loop has returned
    may_mount = threading.Event()     # the cut is applied: mount what it left

    def unmount() -> None:
        _unmount(mountpoint)

    def wait_mounted() -> None:
        end = time.monotonic() + 30
        while not os.path.ismount(mountpoint):
            if time.monotonic() > end:
                raise RuntimeError(f"{mountpoint} did not mount")
            time.sleep(0.005)
        state["dev"] = os.stat(mountpoint).st_dev

    def control_loop() -> None:
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if os.path.exists(control):
            os.unlink(control)
        srv.bind(control)
        srv.listen(4)
        while True:
            conn, _ = srv.accept()
            with conn, conn.makefile("rw") as f:
                for line in f:
                    words = line.split() or ["?"]
                    try:
                        reply = handle(words)
                    except Exception as exc:  # the harness sees it, the mount lives on
                        reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                    f.write(json.dumps(reply) + "\n")
                    f.flush()
                    if words[0] == "quit":
                        return
                    if reply.get("respawn"):
                        os._exit(0)     # the stuck FUSE loop goes with the process

    def handle(words: list[str]) -> dict:
        if words[0] == "stats":
            with ops.mutex:
                return {"ok": True, "fsyncs": model.fsyncs, "fsyncdirs": model.fsyncdirs,
                        "cuts": model.cuts, "lost_sectors": model.lost_sectors,
                        "lost_entries": model.lost_entries, "open_handles": len(ops.handles),
                        "forced_aborts": model.forced_aborts,
                        "unexpected_unmounts": model.unexpected_unmounts,
                        "faults_raised": model.faults_raised, "respawns": model.respawns}
        if words[0] == "cut":
            seed, torn = int(words[1]), words[2] == "1"
            # "respawn" (tests of this tool): act as if the FUSE loop were stuck
            pretend_stuck = words[3:] == ["respawn"]
            unmounted.clear()
            state["cutting"] = True
            unmount()
            holders = []
            if pretend_stuck or not unmounted.wait(10):
                # someone still holds a file of the detached mount: name them, then
                # abort the connection (the cut is the same: the model is ours)
                holders = _holders(state["dev"])
                faulthandler.dump_traceback(all_threads=True)     # into lazyfs.log
                _abort_connection(state["dev"])
                model.forced_aborts.append(holders)
                if pretend_stuck or not unmounted.wait(10):
                    # libfuse's loop is stuck now and then: cut all the same, save
                    # the state, and let a new daemon mount it (LazyFS.cut does)
                    with ops.mutex:
                        facts = model.cut(random.Random(seed) if torn else None)
                        ops.handles.clear()
                        model.respawns += 1
                        with open(state_file, "wb") as f:
                            pickle.dump((model, ops.ignore_fsync, ops.ignore_fsyncdir,
                                         ops.faults), f)
                    return {"ok": True, **facts, "held_by": holders, "respawn": True}
            with ops.mutex:
                facts = model.cut(random.Random(seed) if torn else None)
                ops.handles.clear()
            state["cutting"] = False
            may_mount.set()
            wait_mounted()
            return {"ok": True, **facts, "held_by": holders}
        if words[0] == "fail" and len(words) in (3, 4) and words[1] in FAULT_OPS:
            with ops.mutex:
                if words[2] == "-":
                    ops.faults.pop(words[1], None)
                else:
                    ops.faults[words[1]] = (words[2], getattr(errno, words[3]))
            return {"ok": True}
        if words[0] == "lie" and len(words) == 3 and words[1] in ("fsync", "fsyncdir"):
            with ops.mutex:
                setattr(ops, f"ignore_{words[1]}", None if words[2] == "-" else words[2])
            return {"ok": True}
        if words[0] == "quit":
            state["quit"] = True
            unmount()
            may_mount.set()
            return {"ok": True}
        return {"ok": False, "error": f"unknown request {words[0]!r}"}

    threading.Thread(target=control_loop, daemon=True).start()
    threading.Thread(target=wait_mounted, daemon=True).start()
    while not state["quit"]:
        may_mount.clear()
        try:
            FUSE(ops, mountpoint, foreground=True, nothreads=False, raw_fi=True,
                 use_ino=True, big_writes=True, max_write=131072, attr_timeout=0,
                 entry_timeout=0, negative_timeout=0, hard_remove=True)
        except RuntimeError:
            pass    # libfuse reports the unmount that ended its loop as an error now and then
        unmounted.set()
        if not state["cutting"] and not state["quit"]:
            # nobody asked: say so (the harness fails on it) and serve again at once
            model.unexpected_unmounts += 1
            print(f"lazyfs: {mountpoint} was unmounted unexpectedly", flush=True)
            continue
        # a cut unmounted us: mount again once it has been applied
        may_mount.wait()


def _holders(dev: int) -> list[str]:
    """Processes with a cwd, root, open file or mapping on device ``dev``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        base = f"/proc/{pid}"
        try:
            links = [f"{base}/cwd", f"{base}/root"] + \
                [f"{base}/fd/{n}" for n in os.listdir(f"{base}/fd")]
            hit = [p for p in links if _dev_of(p) == dev]
            with open(f"{base}/maps") as maps:
                want = f" {os.major(dev):02x}:{os.minor(dev):02x} "
                hit += [line.split()[-1] for line in maps if want in line]
            if hit:
                cmd = open(f"{base}/cmdline", "rb").read().replace(b"\0", b" ").decode()
                found.append(f"{pid} {cmd[:120]!r}: {hit[:3]}")
        except OSError:
            continue
    return found


def _abort_connection(dev: int) -> None:
    """Abort the FUSE connection of device ``dev`` (fusectl, mounted if need be)."""
    ctl = Path("/sys/fs/fuse/connections")
    if not os.path.ismount(ctl):
        subprocess.run(["mount", "-t", "fusectl", "none", str(ctl)], check=False,
                       capture_output=True)
    abort = ctl / str(os.minor(dev)) / "abort"
    if abort.exists():
        abort.write_text("1")
    else:
        print(f"lazyfs: no FUSE connection {abort.parent.name} to abort", flush=True)


def _dev_of(path: str) -> int | None:
    try:
        return os.stat(path).st_dev
    except OSError:
        return None


# ----------------------------------------------------------------------------- the harness side


def _unmount(mountpoint: str) -> None:
    """Lazy unmount: fusermount where installed, else umount (we are root)."""
    cmd = ["fusermount", "-u", "-z"] if shutil.which("fusermount") else ["umount", "-l"]
    subprocess.run([*cmd, str(mountpoint)], check=False, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def ensure_fuse() -> None:
    """fusepy needs libfuse2 (Debian's libfuse2): install it once if missing, so
    a fresh machine runs the power-cut tests. Mounting needs root."""
    # no skip: a run that cannot cut the power must say so, not pass quietly
    if os.geteuid() != 0:
        raise RuntimeError("the power-cut tests mount a FUSE file system: they need root")
    if not os.path.exists("/dev/fuse"):
        raise RuntimeError("the power-cut tests need /dev/fuse (FUSE), which this machine "
                           "lacks")
    probe = [sys.executable, "-c", "import fuse"]     # loads libfuse.so.2 at import
    if subprocess.run(probe, capture_output=True).returncode == 0:
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "-q", "libfuse2"]
    if subprocess.run(install, env=env, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True)
        r = subprocess.run(install, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"apt-get install libfuse2 failed:\n{r.stdout}{r.stderr}")
    r = subprocess.run(probe, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"fusepy cannot load libfuse2: {r.stderr}")


class LazyFS:
    """The daemon seen from a test: ``with LazyFS(root) as fs: fs.mount ...``.

    ``fs.cut(seed, torn)`` is the power cut: every process using the mount must
    be dead first (a cut while a writer runs would be a cut mid-syscall, which
    the kernel does not allow either)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.mount = self.root / "mnt"
        self.control = self.root / "control.sock"
        self.log = self.root / "lazyfs.log"
        self.state = self.root / "state.pickle"
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "LazyFS":
        ensure_fuse()
        self.mount.mkdir(parents=True, exist_ok=True)
        self.state.unlink(missing_ok=True)
        self._spawn()
        return self

    def _spawn(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, __file__, str(self.mount),
                                          str(self.control), "--state", str(self.state)],
                                         stdout=out, stderr=subprocess.STDOUT)
        end = time.monotonic() + 30
        while not (os.path.ismount(self.mount) and self.control.exists()):
            if self.proc.poll() is not None or time.monotonic() > end:
                raise RuntimeError(f"lazyfs did not mount:\n{self.log.read_text()}")
            time.sleep(0.01)

    def request(self, line: str, timeout: float = 120) -> dict:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(self.control))
            s.sendall(line.encode() + b"\n")
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
        reply = json.loads(buf)
        if not reply.get("ok"):
            raise RuntimeError(f"lazyfs {line!r}: {reply.get('error')}")
        return reply

    def cut(self, seed: int, torn: bool, *, respawn: bool = False) -> dict:
        """The power cut. ``respawn`` (a test of this tool) takes the path of a
        stuck FUSE loop: the state saved, a new daemon mounting it."""
        facts = self.request(f"cut {seed} {int(torn)}" + (" respawn" if respawn else ""))
        if facts.get("respawn"):
            # the daemon's FUSE loop stuck; it saved the cut state and exited: a
            # new daemon mounts that state
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            _unmount(str(self.mount))
            self.control.unlink(missing_ok=True)
            self._spawn()
            return facts
        end = time.monotonic() + 30
        while not os.path.ismount(self.mount):
            assert time.monotonic() < end, "lazyfs did not mount again after a cut"
            time.sleep(0.005)
        return facts

    def stats(self) -> dict:
        return self.request("stats")

    def fail(self, op: str, glob: str | None, error: str = "EIO") -> None:
        """From now on ``op`` (one of FAULT_OPS) on a path matching ``glob`` fails
        with ``error`` (an errno name: EIO, ENOSPC); None: the fault clears."""
        self.request(f"fail {op} -" if glob is None else f"fail {op} {glob} {error}")

    def lie(self, kind: str, glob: str | None) -> None:
        """From now on an fsync (``kind`` "fsync") or directory fsync ("fsyncdir")
        of a path matching ``glob`` does nothing; None: no more lies."""
        self.request(f"lie {kind} {glob or '-'}")

    def __exit__(self, *exc) -> None:
        if self.proc is None:
            return
        try:
            if self.proc.poll() is None:
                self.request("quit", timeout=30)
                self.proc.wait(timeout=30)
        except Exception:
            _unmount(str(self.mount))
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mountpoint")
    ap.add_argument("control")
    ap.add_argument("--state", required=True,
                    help="where a cut's state is saved for a new daemon, and read at start")
    a = ap.parse_args()
    serve(a.mountpoint, a.control, a.state)
