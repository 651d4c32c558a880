"""Where a connection comes from: the loopback rule, and the OS user at the
other end of a loopback TCP connection (the ``/proc/net/tcp`` peer lookup).

An anonymous STOMP connection is allowed only on a loopback listener with
``connauth = "optional"`` (``check_listener`` refuses any other listener
without ``connauth = "required"``), and acts as the OS user at the other end,
as an MQ local bindings application does. On Linux the client's socket is
found in /proc/net/tcp or /proc/net/tcp6 (local address = our peer's, remote
address = ours), and its uid column is the uid of the process that created
it. When it cannot be found (not Linux, /proc unreadable, the socket gone)
``PeerUnknown`` says why, and authentication refuses the connection. What the
uid then stands for is the principal model of ``harbormq.security``.
"""

from __future__ import annotations

import ipaddress
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from ..errors import ConfigError

# -- the loopback rule ------------------------------------------------------------------

def is_loopback(host: str) -> bool:
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def check_listener(host: str, connauth: str) -> None:
    """A queue manager refuses a non-loopback listener unless authentication is
    required (anonymous connections are for loopback only)."""
    if connauth not in ("optional", "required"):
        raise ConfigError(f"connauth must be 'optional' or 'required', not {connauth!r}")
    if connauth != "required" and not is_loopback(host):
        raise ConfigError(f"listener on {host} is not a loopback address: set connauth = "
                          "\"required\" to serve it (anonymous connections are allowed on "
                          "loopback listeners only)")


# -- the OS user at the other end of a loopback TCP connection ------------------------
#
# TCP has no SO_PEERCRED, but on Linux the kernel lists every socket of the
# network namespace in /proc/net/tcp and /proc/net/tcp6, with the uid that
# created it. The client's socket is the one whose local address is our peer's
# address and whose remote address is ours. One line of those files:
#
#   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
#    3: 0100007F:C488 0100007F:EA60 01 00000000:00000000 00:00000000 00000000  1001   0 48213
#
# An address is hex, each 32-bit word in the kernel's (host) byte order: IPv4
# 127.0.0.1 is 0100007F on a little-endian machine; IPv6 is four such words.
# The port is plain big-endian hex. st is the TCP state, uid the socket's owner
# (the fsuid of the process that created it; only root can change it), inode 0
# means no process holds the socket any more (TIME_WAIT, an orphan): such an
# entry names no live process and reports uid 0, so it never identifies anyone.

#: TCP states (include/net/tcp_states.h) whose entries never identify a peer
_TCP_TIME_WAIT, _TCP_LISTEN = 0x06, 0x0A
PROC_NET = Path("/proc/net")


class PeerUnknown(Exception):
    """The OS user at the other end of a connection cannot be identified (the
    text says why). Authentication turns it into a refusal."""


@dataclass(frozen=True)
class ProcTcpEntry:
    """One socket of /proc/net/tcp or /proc/net/tcp6 (IPv4-mapped IPv6
    addresses given as IPv4)."""
    local: tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]
    remote: tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]
    state: int
    uid: int
    inode: int


def _plain_address(addr) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


def endpoint(host: str, port: int) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    """``(address, port)`` as the /proc parser gives it: a socket address from
    asyncio (an IPv6 scope such as ``%lo`` dropped, IPv4-mapped made IPv4)."""
    return _plain_address(ipaddress.ip_address(str(host).strip("[]").split("%")[0])), int(port)


def _proc_endpoint(text: str):
    host, port = text.split(":")
    if len(host) == 8:
        packed = struct.pack("=I", int(host, 16))
    elif len(host) == 32:
        packed = b"".join(struct.pack("=I", int(host[i:i + 8], 16)) for i in range(0, 32, 8))
    else:
        raise ValueError(f"address {host!r} is neither IPv4 nor IPv6")
    return _plain_address(ipaddress.ip_address(packed)), int(port, 16)


def parse_proc_net_tcp(line: str) -> ProcTcpEntry | None:
    """One line of /proc/net/tcp or /proc/net/tcp6; None for the header line or
    a line that does not parse."""
    fields = line.split()
    if len(fields) < 10 or not fields[0].endswith(":"):
        return None
    try:
        return ProcTcpEntry(_proc_endpoint(fields[1]), _proc_endpoint(fields[2]),
                            int(fields[3], 16), int(fields[7]), int(fields[9]))
    except ValueError:
        return None


def socket_owner_uid(lines: Iterable[str], local, remote) -> int | None:
    """The uid owning the live socket whose local address is ``local`` and whose
    remote address is ``remote`` (``endpoint`` pairs), among ``lines`` of
    /proc/net/tcp[6]; None when there is none. Sockets of several uids
    matching (impossible for one live connection) raise PeerUnknown."""
    needle = f":{local[1]:04X} "           # the local port: skip other lines unparsed
    uids = set()
    for line in lines:
        if needle not in line:
            continue
        e = parse_proc_net_tcp(line)
        if e is None or e.local != local or e.remote != remote:
            continue
        if e.inode == 0 or e.state in (_TCP_TIME_WAIT, _TCP_LISTEN):
            continue
        uids.add(e.uid)
    if len(uids) > 1:
        raise PeerUnknown(f"sockets of several users ({', '.join(map(str, sorted(uids)))}) "
                          f"have the address {_show(local)} towards {_show(remote)}")
    return uids.pop() if uids else None


def _show(ep) -> str:
    addr, port = ep
    return f"[{addr}]:{port}" if addr.version == 6 else f"{addr}:{port}"


def loopback_peer_uid(peer: tuple, local: tuple, *, proc_net: Path | None = None) -> int:
    """The uid of the process at the other end of a loopback TCP connection, from
    the addresses as our socket sees them (``peer``: getpeername, ``local``:
    getsockname, ``(host, port, ...)``). PeerUnknown when it cannot be told: not
    Linux, /proc unreadable, or the client's socket not found (it closed
    meanwhile, or lives in another network namespace)."""
    if proc_net is None:
        if not sys.platform.startswith("linux"):
            raise PeerUnknown(f"the peer of a TCP connection can be identified on Linux only, "
                              f"not on {sys.platform}")
        proc_net = PROC_NET
    try:
        them, us = endpoint(*peer[:2]), endpoint(*local[:2])
    except (TypeError, ValueError) as exc:
        raise PeerUnknown(f"not a TCP connection ({peer!r} to {local!r}): {exc}") from None
    # the client's socket is usually of the family we see it in; an IPv6 socket
    # connected to an IPv4 address (v4-mapped) is listed in tcp6
    files = ("tcp", "tcp6") if them[0].version == 4 else ("tcp6", "tcp")
    unreadable = []
    for name in files:
        try:
            with open(Path(proc_net) / name, encoding="ascii", errors="replace") as f:
                uid = socket_owner_uid(f, them, us)
        except FileNotFoundError:             # no IPv6 in this kernel
            continue
        except OSError as exc:
            unreadable.append(f"{Path(proc_net) / name}: {exc.strerror or exc}")
            continue
        if uid is not None:
            return uid
    if unreadable:
        raise PeerUnknown(f"cannot read {'; '.join(unreadable)}")
    raise PeerUnknown(f"no socket of this machine is connected from {_show(them)} to "
                      f"{_show(us)} (the client may have closed it)")
