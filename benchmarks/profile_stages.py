"""Where a harbormq server's time goes, per message and by stage (issue 14 §3).

Three readings of one server process during one run, taken by
``bench_peers.py --profile`` (or by hand on any server pid):

* CPU per thread from ``/proc/<pid>/task/*/stat`` (user and kernel time,
  exact): the event loop's thread, the log writer, the store's executor
  threads;
* ``py-spy record --native --threads`` (wall-clock samples of every thread,
  C frames included, so a syscall shows as its libc function): each sample is
  put in one stage by the rules below, first match wins; a thread's CPU per
  message is split over its stages in proportion to its samples that are
  not waiting (epoll, futex: an idle loop or a GIL wait);
* ``strace -c -f`` (a separate run: it slows the server) for syscall counts
  per message: fdatasync (forces), epoll_pwait (loop wake-ups), futex
  (thread hand-offs and GIL), socket reads and writes.

Run by hand on a raw py-spy file::

    python benchmarks/profile_stages.py RAW [--messages N]
"""

from __future__ import annotations

import collections
import os
import re
import signal
import subprocess
import sys

CLK_TCK = os.sysconf("SC_CLK_TCK")

IDLE = "idle: waiting in epoll (nothing to do)"
WAIT = "waiting: futex (the GIL, a lock, a condition)"

# (stage, test on (leaf frame, whole stack)); first match wins
MAIN_RULES = [
    (IDLE, lambda leaf, s: leaf.startswith(("epoll_pwait", "epoll_wait"))),
    (WAIT, lambda leaf, s: leaf.startswith("0x") or "futex" in leaf or
     leaf.startswith(("pthread_cond_wait", "pthread_cond_timedwait", "take_gil"))),
    ("socket writes (send syscalls)",
     lambda leaf, s: leaf.split(" ")[0] in ("write", "writev", "send", "sendmsg", "sendto")),
    ("socket reads (recv syscalls)",
     lambda leaf, s: leaf.split(" ")[0] in ("read", "readv", "recv", "recvmsg", "recvfrom")),
    ("waking the log writer (Condition, locks)",
     lambda leaf, s: "Condition.notify" in s or "Condition.__enter__" in s or
     "Condition.__exit__" in s or leaf.startswith(("pthread_cond_signal", "sem_post"))),
    ("checksums (CRC32C)", lambda leaf, s: "crc32c" in s),
    ("log record encoding", lambda leaf, s: "harbormq/log/records.py" in s),
    ("frame parsing", lambda leaf, s: "FrameParser" in s),
    ("frame encoding and output buffering",
     lambda leaf, s: "harbormq/stomp/frames.py" in s or "FrameTransport._flush" in s),
    ("log append and force bookkeeping (loop side)",
     lambda leaf, s: "harbormq/log/manager.py" in s or "harbormq/log/writer.py" in s),
    ("queue manager core (queues, units of work, message objects)",
     lambda leaf, s: "harbormq/core/" in s),
    ("STOMP command handling (connection, delivery)",
     lambda leaf, s: "harbormq/stomp/" in s),
    ("event loop machinery (uvloop/asyncio, callbacks)", lambda leaf, s: True),
]
WRITER_RULES = [
    ("fdatasync (wall: mostly the disk)", lambda leaf, s: "fdatasync" in leaf or
     leaf.startswith("fsync")),
    ("pwrite of log pages", lambda leaf, s: "pwrite" in leaf),
    ("idle: waiting for work", lambda leaf, s: leaf.startswith("0x") or "futex" in leaf or
     "Condition.wait" in s.rsplit(";", 2)[-1] or leaf.startswith("pthread_cond")),
    ("control file (checkpoint, extent switch)", lambda leaf, s: "control.py" in s),
    ("waking the loop (call_soon_threadsafe)", lambda leaf, s: "call_soon_threadsafe" in s),
    ("writer bookkeeping", lambda leaf, s: True),
]
EXECUTOR_RULES = [
    ("store flush (LMDB transactions)",
     lambda leaf, s: "harbormq/store/" in s or "lmdb" in s.lower()),
    ("idle: waiting for work", lambda leaf, s: True),
]
GROUP_RULES = {"event loop (main thread)": MAIN_RULES, "log writer thread": WRITER_RULES,
               "executor threads (store, auth)": EXECUTOR_RULES}
NOT_BUSY = (IDLE, WAIT, "idle: waiting for work")


def group_of(tid: int, pid: int, name: str) -> str:
    if tid == pid:
        return "event loop (main thread)"
    if name.startswith("harbormq-log"):
        return "log writer thread"
    return "executor threads (store, auth)"


def thread_names(py_spy: str, pid: int) -> dict[int, str]:
    """Python's names of a process's threads, by tid (``py-spy dump``: Python 3.11
    does not give its threads' names to the OS, /proc's comm says "python")."""
    try:
        r = subprocess.run([py_spy, "dump", "--pid", str(pid)], capture_output=True,
                           text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return {}
    return {int(m.group(1)): m.group(2)
            for m in re.finditer(r'^Thread (\d+) \(\w+\): "(.*)"', r.stdout, re.M)}


def thread_cpu(pid: int, names: dict[int, str]) -> dict[str, dict[str, float]]:
    """CPU seconds (user, system) per thread group of a process; ``names`` from
    thread_names (a thread it does not know, a libuv worker say, is counted
    with the executors)."""
    out: dict[str, dict[str, float]] = collections.defaultdict(lambda: {"user": 0.0,
                                                                       "system": 0.0})
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return {}
    for tid in tids:
        name = names.get(int(tid), "")
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        g = out[group_of(int(tid), pid, name)]
        g["user"] += int(fields[11]) / CLK_TCK
        g["system"] += int(fields[12]) / CLK_TCK
    return dict(out)


def cpu_delta(a: dict, b: dict) -> dict:
    return {g: {k: b[g][k] - a.get(g, {}).get(k, 0.0) for k in ("user", "system")} for g in b}


def pyspy_samples(raw_path: str):
    """(stack, frames, count) per line of py-spy's raw (collapsed) output:
    'thread (tid): name;f1 (file:line);f2 ... count'."""
    with open(raw_path) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            try:
                n = int(count)
            except ValueError:
                continue
            yield stack, stack.split(";"), n


def classify(raw_path: str, pid: int) -> dict[str, collections.Counter]:
    """Samples per stage per thread group, from py-spy's raw output."""
    out: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for stack, frames, n in pyspy_samples(raw_path):
        m = re.match(r"thread \((\d+)\): ?(.*)", frames[0])
        tid, name = (int(m.group(1)), m.group(2)) if m else (0, frames[0])
        group = group_of(tid, pid, name)
        leaf = frames[-1] if len(frames) > 1 else ""
        for stage, test in GROUP_RULES[group]:
            if test(leaf, stack):
                out[group][stage] += n
                break
    return dict(out)


def stages(samples: dict, cpu: dict | None, messages: int) -> dict:
    """Per thread group: CPU us/msg (user, kernel), and each stage's share of the
    group's samples and, for stages that are not waiting, its share of the
    group's busy samples times the group's CPU per message."""
    out = {}
    for group in sorted(set(samples) | set(cpu or {})):
        counts = samples.get(group, collections.Counter())
        total = sum(counts.values())
        busy = sum(v for k, v in counts.items() if k not in NOT_BUSY)
        g_cpu = (cpu or {}).get(group)
        entry: dict = {"samples": total}
        us = None
        if g_cpu and messages:
            us = (g_cpu["user"] + g_cpu["system"]) / messages * 1e6
            entry["cpu_us_per_msg"] = round(us, 1)
            entry["user_us_per_msg"] = round(g_cpu["user"] / messages * 1e6, 1)
            entry["kernel_us_per_msg"] = round(g_cpu["system"] / messages * 1e6, 1)
        rows = []
        for stage, n in counts.most_common():
            row = {"stage": stage, "pct_of_samples": round(100 * n / total, 1) if total else 0}
            if stage not in NOT_BUSY and busy:
                row["pct_of_busy"] = round(100 * n / busy, 1)
                if us is not None:
                    row["us_per_msg"] = round(us * n / busy, 1)
            rows.append(row)
        entry["stages"] = rows
        out[group] = entry
    return out


class PySpy:
    """py-spy record attached to a running pid; stop() makes it write its file."""

    def __init__(self, exe: str, pid: int, out_path: str, rate: int = 200):
        self.out_path = out_path
        self.proc = subprocess.Popen(
            [exe, "record", "--pid", str(pid), "--threads", "--native", "-r", str(rate),
             "-f", "raw", "-o", out_path], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        _out, err = self.proc.communicate(timeout=120)
        if not os.path.exists(self.out_path):
            raise RuntimeError(f"py-spy wrote no profile: {err.decode(errors='replace')[-800:]}")


class Strace:
    """strace -c -f on every thread of a running pid: syscall counts and time."""

    def __init__(self, pid: int, out_path: str):
        self.out_path = out_path
        self.proc = subprocess.Popen(["strace", "-c", "-f", "-p", str(pid), "-o", out_path],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> dict[str, dict]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=120)
        calls = {}
        with open(self.out_path) as f:
            for line in f:
                parts = line.split()
                # % time, seconds, usecs/call, calls, [errors], syscall
                if len(parts) >= 5 and parts[-1].isidentifier() and parts[3].isdigit():
                    calls[parts[-1]] = {"calls": int(parts[3]), "seconds": float(parts[1])}
        return calls


def per_message(calls: dict, messages: int) -> dict:
    keys = ("fdatasync", "fsync", "pwrite64", "epoll_pwait", "epoll_wait", "futex", "write",
            "writev", "sendmsg", "sendto", "read", "recvfrom", "recvmsg", "getpid")
    out = {k: round(calls[k]["calls"] / messages, 3) for k in keys if k in calls}
    out["all_syscalls"] = round(sum(c["calls"] for c in calls.values()) / messages, 2)
    return out


def main() -> None:
    import argparse
    import json
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("raw", help="py-spy raw output (record --native --threads -f raw)")
    ap.add_argument("--pid", type=int, default=0, help="the server's pid (its main thread)")
    ap.add_argument("--messages", type=int, default=0)
    args = ap.parse_args()
    pid = args.pid
    if not pid:   # the main thread's tid is the pid: the first thread py-spy names MainThread
        with open(args.raw) as f:
            for line in f:
                m = re.match(r"thread \((\d+)\): MainThread", line)
                if m:
                    pid = int(m.group(1))
                    break
    json.dump(stages(classify(args.raw, pid), None, args.messages), sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
