"""Making names and files durable. A power cut keeps file data only where it
was fsynced, and keeps a directory entry (a name created, renamed or removed)
only once that directory was fsynced. Every path harbormq creates, moves or
removes goes through these helpers, so nothing depends on a name the disk may
not have:

* ``make_dirs``: ``mkdir -p`` that fsyncs the parent of every directory it made;
* ``atomic_write``: litestream's publish: write ``*.tmp``, fsync, rename,
  fsync the directory (stale ``*.tmp`` files are swept at start);
* ``rename_durably``, ``remove_tree``: the move or removal, then the fsync of
  the directories whose entries changed;
* ``copy_durably`` (through the page cache) and ``copy_in_chunks`` (around
  it, for copies made while a queue manager serves: docs/backup.md).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import mmap
import os
import shutil
import string
import urllib.parse
from pathlib import Path
from typing import Callable

#: everything under a queue manager's directories is private to its owner
DIR_MODE = 0o700
FILE_MODE = 0o600


#: characters a name keeps in its file name; every other one is percent-encoded
_FILE_SAFE = frozenset(string.ascii_letters + string.digits + "_-")


def file_name(name: str) -> str:
    """The one mapping from a user-given name (a queue, a queue manager) to the
    name of its file or directory, which can never leave its parent directory
    (MQ mangles such names too). Characters other than letters, digits, '_',
    '-' and a '.' that is not the first are percent-encoded (UTF-8), so the
    result is never empty, '.', '..' or hidden, never holds '/' or NUL, and two
    names never share a file name (``name_of_file`` decodes it). ValueError when
    the result would be longer than a file name may be."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a name must be a non-empty string, not {name!r}")
    out = []
    for i, ch in enumerate(name):
        if ch in _FILE_SAFE or (ch == "." and i > 0):
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))
    mapped = "".join(out)
    if len(mapped) > 255:
        raise ValueError(f"name {name[:60]!r}... is too long for a file name")
    return mapped


def name_of_file(mapped: str) -> str:
    """The name ``file_name`` mapped to ``mapped``."""
    return urllib.parse.unquote(mapped, errors="surrogatepass")


def private(path, flags: int) -> int:
    """``open(..., opener=private)``: a file created 0600, whatever the umask."""
    return os.open(path, flags, FILE_MODE)


def make_private(*paths: Path) -> None:
    """Owner-only permissions on directories made before they were the rule."""
    for p in paths:
        if p.is_dir() and p.stat().st_mode & 0o077:
            os.chmod(p, DIR_MODE)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(path: Path, mode: int = DIR_MODE) -> list[Path]:
    """Create ``path`` and any missing parents, each made durable in its parent
    before the next is created beneath it. Returns the directories created."""
    path = Path(path)
    missing = []
    p = path
    while not p.is_dir():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    created = []
    for d in reversed(missing):
        try:
            d.mkdir(mode=mode)
        except FileExistsError:
            if not d.is_dir():
                raise
            continue
        fsync_dir(d.parent)
        created.append(d)
    return created


def rename_durably(src: Path, dst: Path) -> None:
    """``src.rename(dst)``, durable in both directories once this returns."""
    os.rename(src, dst)
    fsync_dir(Path(dst).parent)
    if Path(src).parent != Path(dst).parent:
        fsync_dir(Path(src).parent)


def remove_tree(path: Path) -> None:
    """Remove a directory tree (if there) and make its removal durable; a tree
    that cannot be removed whole raises (OSError) rather than half-disappear
    silently. Gone already, its parent is still synced: the removal that made
    it go may not have been durable yet."""
    path = Path(path)
    if path.exists():
        shutil.rmtree(path)
    if path.parent.is_dir():
        fsync_dir(path.parent)


def _write_all(fd: int, data) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def atomic_write(path: Path, data: bytes, mode: int = FILE_MODE) -> None:
    """Replace ``path`` with ``data`` so that a crash or a power cut leaves the
    old or the new file, never a mixture, and the new one once this returns."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def copy_durably(src: Path, dst: Path, *, expect: tuple[int, str] | None = None,
                 durable: bool = True) -> tuple[int, str]:
    """Replace ``dst`` with a copy of ``src`` as ``atomic_write`` would (a
    temporary file, fsync, rename, directory fsync), without holding it whole
    in memory. Returns (size, SHA-256) of the copy as written: the kernel
    copies (copy_file_range, no pass through this process's buffers), then the
    copy is hashed through a map of it, so the hash is of the bytes that landed
    in ``dst``, not of what was read from ``src`` (half the CPU of read, hash,
    write on a 256 MiB extent; docs/backup.md). With ``expect`` (size,
    SHA-256), a copy that differs is removed before it ever has ``dst``'s name
    (the caller sees the difference in what is returned). ``durable=False``
    (scratch space that is removed afterwards) skips the fsyncs."""
    dst = Path(dst)
    tmp = dst.with_name(dst.name + ".tmp")
    fin = os.open(src, os.O_RDONLY)
    try:
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        try:
            _copy_fd(fin, fd)
            size, sha = fd_sha256(fd)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
    finally:
        os.close(fin)
    return _publish_copy(tmp, dst, size, sha, expect, durable)


def _publish_copy(tmp: Path, dst: Path, size: int, sha: str,
                  expect: tuple[int, str] | None, durable: bool) -> tuple[int, str]:
    """The copy in ``tmp`` takes ``dst``'s name, unless it is not what was
    expected (then it is removed and ``dst`` never had it)."""
    if expect is not None and (size, sha) != expect:
        tmp.unlink()
        return size, sha
    os.replace(tmp, dst)
    if durable:
        fsync_dir(dst.parent)
    return size, sha


#: copy_file_range is not offered here (another file system, an old kernel):
#: copy through a buffer instead
_NO_RANGE_COPY = (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL)
COPY_CHUNK = 4 << 20


def _copy_fd(fin: int, fout: int) -> None:
    pos = 0
    try:
        while n := os.copy_file_range(fin, fout, 1 << 30, pos, pos):
            pos += n
        return
    except OSError as exc:
        if exc.errno not in _NO_RANGE_COPY:
            raise
    # (copy_file_range with offsets moved neither file's position: writes
    # go from the start)
    os.ftruncate(fout, 0)
    pos = 0
    while data := os.pread(fin, COPY_CHUNK, pos):
        _write_all(fout, data)
        pos += len(data)


#: the unit of a chunked copy: large enough for the device to stream, small
#: enough that a log force waits behind at most one of them
DIRECT_CHUNK = 1 << 20
#: O_DIRECT wants the buffer, the offsets and the lengths aligned to the
#: device's logical block; 4 KiB is a multiple of every device's
DIRECT_ALIGN = 4096


def copy_in_chunks(src_fd: int, dst: Path, *, stream: bool = False,
                   direct_read: bool = False, direct_write: bool = True,
                   durable: bool = True, expect: tuple[int, str] | None = None,
                   pace: Callable[[int], None] | None = None) -> tuple[int, str]:
    """``copy_durably`` for copies made beside a queue manager that is serving
    and forcing its log: the bytes of ``src_fd`` (a file read from offset 0,
    or with ``stream`` a pipe read to its end) go through one page-aligned
    buffer, DIRECT_CHUNK at a time, and around the page cache where asked:

    * ``direct_write`` (a backup's copies): written with O_DIRECT, so they never
      sit in the page cache as dirty pages. Written through the cache, a copy of
      a gigabyte is flushed by the kernel (writeback, or the copy's fsync) as a
      flood of writes queued on the device ahead of every log force: the queue
      manager's receipted rate halved while one was flushed (docs/backup.md).
      Written directly, the device has at most one chunk of the copy queued.
    * ``direct_read`` (a trial restore reading a backup): read with O_DIRECT,
      so a file read once fills no page cache; the kernel work of filling it
      (and of the copy_file_range that would read through it) took the CPU
      the serving queue manager needed.

    The SHA-256 is of the bytes copied, hashed from the buffer (no second pass
    over the copy). A file system without O_DIRECT (tmpfs) gets the same
    chunks through the page cache. ``durable=False``: no fsyncs (scratch
    space). ``pace`` is told the size of each chunk once it is written (it
    may sleep: ``backup --max-rate``). Returns (size, SHA-256) as ``copy_durably``, with ``expect``
    handled the same way."""
    dst = Path(dst)
    tmp = dst.with_name(dst.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    buf = mmap.mmap(-1, DIRECT_CHUNK)        # anonymous: page-aligned, as O_DIRECT needs
    try:
        view = memoryview(buf)
        direct = direct_write and _set_direct(fd, True)
        src_was_direct = _is_direct(src_fd)
        direct_in = direct_read and not stream and _set_direct(src_fd, True)
        digest, size, padded = hashlib.sha256(), 0, False
        while True:
            try:
                n = _fill(src_fd, view, None if stream else size, direct_in)
            except OSError as exc:
                if not direct_in or exc.errno != errno.EINVAL:
                    raise
                direct_in = _set_direct(src_fd, False)    # not for this file system
                n = _fill(src_fd, view, size, False)
            if not n:
                break
            digest.update(view[:n])
            chunk = view[:n]
            if direct and n % DIRECT_ALIGN:          # the tail: cut back after
                pad = -n % DIRECT_ALIGN
                view[n:n + pad] = bytes(pad)
                chunk, padded = view[:n + pad], True
            try:
                pwrite_all(fd, chunk, size)
            except OSError as exc:
                if not direct or exc.errno != errno.EINVAL:
                    raise
                # O_DIRECT accepted at open but not for this write (a file
                # system's own alignment): the rest through the page cache
                direct = _set_direct(fd, False)
                pwrite_all(fd, view[:n], size)
            size += n
            if pace is not None:
                pace(n)
        if padded:          # (also when a later chunk fell back to the page cache)
            os.ftruncate(fd, size)
        if durable:
            # written directly, the data is on the device, but neither its
            # cache nor the file's size and extents are: fsync as for any copy
            os.fsync(fd)
    finally:
        if direct_read and not stream and not src_was_direct:
            _set_direct(src_fd, False)      # the caller's descriptor as it was
        os.close(fd)      # (the buffer is unmapped with the last view of it)
    return _publish_copy(tmp, dst, size, digest.hexdigest(), expect, durable)


def _is_direct(fd: int) -> bool:
    flag = getattr(os, "O_DIRECT", 0)
    return bool(flag and fcntl.fcntl(fd, fcntl.F_GETFL) & flag)


def _set_direct(fd: int, on: bool) -> bool:
    """Turn O_DIRECT on or off for ``fd``; whether it is on."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return False
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, flags | flag if on else flags & ~flag)
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
        return False
    return on


def _fill(fd: int, view: memoryview, offset: int | None, direct: bool) -> int:
    """Read into ``view`` until it is full or the source ends; ``offset`` None:
    a pipe, which returns what its writer has written so far. A direct read
    short of the chunk is the file's end (a second read there would be
    unaligned)."""
    if direct:
        return os.preadv(fd, [view], offset)
    got = 0
    while got < len(view):
        part = view[got:]
        n = os.readv(fd, [part]) if offset is None else os.preadv(fd, [part], offset + got)
        if n == 0:
            break
        got += n
    return got


def pwrite_all(fd: int, data, offset: int) -> None:
    """pwrite may write less than asked (a signal, a full disk): finish or raise."""
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        if n == 0:
            raise OSError(f"pwrite wrote nothing at offset {offset}")
        view, offset = view[n:], offset + n


def fd_sha256(fd: int) -> tuple[int, str]:
    """(size, SHA-256) of the whole file open on ``fd``. Hashed through a
    read-only map of it: the bytes go from the page cache to the hash with no
    copy into a buffer (a third of the CPU of reading it; bench_backup.py).
    A file that cannot be mapped (an odd file system) is read instead."""
    size = os.fstat(fd).st_size
    digest = hashlib.sha256()
    if size == 0:
        return 0, digest.hexdigest()
    try:
        with mmap.mmap(fd, size, prot=mmap.PROT_READ) as m:
            m.madvise(mmap.MADV_SEQUENTIAL)
            digest.update(m)
        return size, digest.hexdigest()
    except (OSError, ValueError):
        digest, pos = hashlib.sha256(), 0
        while chunk := os.pread(fd, COPY_CHUNK, pos):
            digest.update(chunk)
            pos += len(chunk)
        return pos, digest.hexdigest()


def file_sha256(path: Path) -> tuple[int, str]:
    """(size, SHA-256) of the file at ``path``."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return fd_sha256(fd)
    finally:
        os.close(fd)


def sweep_tmp(directory: Path) -> list[Path]:
    """Remove ``*.tmp`` leftovers of interrupted atomic writes."""
    swept = []
    if directory.is_dir():
        for p in directory.glob("*.tmp"):
            p.unlink()
            swept.append(p)
    return swept
