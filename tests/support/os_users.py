"""A second OS user for the tests, and running code as that user.

``ensure_os_user`` creates a system account (no home, no login shell) when it
is missing and reuses it otherwise; it is left in place, so concurrent runs
never pull it from under each other. ``run_as`` forks the test process and
runs a function in the child after it has become that user (supplementary
groups dropped, gid then uid set), so every socket the function opens belongs
to that user, as a separate program run by them would. The child does not exec:
the test interpreter lives where the other user may not read (``/root``), so
whatever the function needs must already be imported by the parent.

Needs root; a caller that is not root gets an error saying so (the tests that
use it prove what a second OS user can do, and skipping would prove nothing).
"""

from __future__ import annotations

import json
import os
import pwd
import select
import signal
import subprocess
import time
import traceback

#: the account the tests use as "another local user"
PEER_USER = "hmqpeer"


def require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise AssertionError(f"{what} needs root (to create an OS user and run a client "
                             "as that user); run the tests as root")


def ensure_os_user(name: str = PEER_USER) -> pwd.struct_passwd:
    """The OS user ``name``, created as a system account if it does not exist."""
    require_root(f"OS user {name}")
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    r = subprocess.run(["useradd", "--system", "--no-create-home", "--user-group",
                        "--shell", "/usr/sbin/nologin", name],
                       capture_output=True, text=True, timeout=60)
    if r.returncode not in (0, 9):          # 9: created meanwhile by another run
        raise AssertionError(f"useradd {name} failed ({r.returncode}): {r.stderr}")
    return pwd.getpwnam(name)


def nameless_user() -> pwd.struct_passwd:
    """A uid (and gid) with no entry in the user database: a process can run as
    it, but nobody can name it."""
    require_root("a uid without a name")
    known = {e.pw_uid for e in pwd.getpwall()}
    uid = next(u for u in range(61000, 65000) if u not in known)
    return pwd.struct_passwd((f"(uid {uid})", "x", uid, uid, "", "/", "/usr/sbin/nologin"))


def run_as(user: pwd.struct_passwd, fn, *args, timeout: float = 60.0):
    """``fn(*args)`` in a forked child running as ``user``; its return value (JSON
    data) is returned. An exception in the child is raised here as an
    AssertionError with the child's traceback."""
    require_root(f"running as {user.pw_name}")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                                 # the child: never returns
        status = 1
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
            try:
                out = {"ok": fn(*args)}
            except BaseException:
                out = {"error": traceback.format_exc()}
            os.write(w, json.dumps(out).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(w)
    data = b""
    end = time.monotonic() + timeout
    try:
        while True:
            left = end - time.monotonic()
            if left <= 0:
                os.kill(pid, signal.SIGKILL)     # our own child, by its pid
                raise AssertionError(f"the child running as {user.pw_name} did not finish "
                                     f"in {timeout} s")
            ready, _, _ = select.select([r], [], [], left)
            if ready:
                chunk = os.read(r, 1 << 16)
                if not chunk:
                    break
                data += chunk
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    if not data:
        raise AssertionError(f"the child running as {user.pw_name} died without a result")
    out = json.loads(data)
    if "error" in out:
        raise AssertionError(f"in the child running as {user.pw_name}:\n{out['error']}")
    return out["ok"]
