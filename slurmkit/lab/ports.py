"""The lab's TCP ports: whether one is free, who holds it, the host's ephemeral range (``check_ports`` refuses
before anything starts), and slurm.conf's per-node ``Port`` hostlist."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

from slurmkit.errors import LabError


def port_list(ports: list[int]) -> str:
    """[29001, 29002, 29003, 29005] -> "[29001-29003,29005]" (one port: "29001")."""
    if len(ports) == 1:
        return str(ports[0])
    runs: list[list[int]] = []
    for p in ports:
        if runs and p == runs[-1][1] + 1:
            runs[-1][1] = p
        else:
            runs.append([p, p])
    return "[" + ",".join(f"{a}-{b}" if b > a else str(a) for a, b in runs) + "]"


# /proc/net/tcp "st" column (include/net/tcp_states.h): 06 TCP_TIME_WAIT, 0A TCP_LISTEN
TCP_TIME_WAIT = "06"
# Linux holds a TIME-WAIT socket for TCP_TIMEWAIT_LEN, 60 s (include/net/tcp.h)
TIME_WAIT_S = 60.0


def tcp_sockets(port: int, proc: Path = Path("/proc/net")) -> list[tuple[str, str]]:
    """(state, inode) of every TCP socket (IPv4 and IPv6) whose local port is ``port``, from /proc/net/tcp{,6}."""
    out = []
    for name in ("tcp", "tcp6"):
        try:
            lines = (proc / name).read_text().splitlines()[1:]
        except OSError:
            continue
        for ln in lines:
            f = ln.split()
            if len(f) > 9 and int(f[1].rsplit(":", 1)[1], 16) == port:
                out.append((f[3], f[9]))
    return out


def holders(inodes: set[str]) -> list[str]:
    """``name (pid N)`` of the processes holding sockets ``inodes`` (their /proc/PID/fd links)."""
    want = {f"socket:[{i}]" for i in inodes if i != "0"}
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or not want:
            continue
        try:
            fds = os.listdir(f"/proc/{d}/fd")
            if any(os.readlink(f"/proc/{d}/fd/{fd}") in want for fd in fds):
                out.append(f"{Path(f'/proc/{d}/comm').read_text().strip()} (pid {d})")
        except OSError:
            continue
    return out


def ephemeral_range(proc: Path = Path("/proc/sys/net/ipv4")) -> tuple[int, int, set[int]]:
    """(first, last, reserved ports) of the host's ephemeral range: ip_local_port_range, ip_local_reserved_ports
    (ip-sysctl.rst: the ports the kernel picks for an outgoing connection's local end; reserved ones it never picks)."""
    try:
        lo, hi = (int(x) for x in (proc / "ip_local_port_range").read_text().split()[:2])
    except (OSError, ValueError):
        return 0, -1, set()
    reserved: set[int] = set()
    try:
        for part in (proc / "ip_local_reserved_ports").read_text().strip().split(","):
            if part:
                a, _sep, b = part.partition("-")
                reserved.update(range(int(a), int(b or a) + 1))
    except (OSError, ValueError):
        pass
    return lo, hi, reserved


def check_ports(ports: dict[int, str], progress: Callable[[str], None] = lambda m: None,
                time_wait: float = TIME_WAIT_S) -> None:
    """Refuse a port inside the host's ephemeral range (any outgoing connection may hold it at any moment, and the
    lab's daemon then fails to bind), and a port something holds, naming its role and holder. A port held only by
    TIME-WAIT sockets is not in use: it is waited for (the kernel frees it within 60 s; until then a bind with
    SO_REUSEADDR, as Slurm's daemons do, fails where the closed socket had not set it)."""
    lo, hi, reserved = ephemeral_range()
    eph = sorted(p for p in ports if lo <= p <= hi and p not in reserved)
    if eph:
        span = f"{eph[0]}-{eph[-1]}" if len(eph) > 1 else str(eph[0])
        raise LabError(f"ports {span} ({ports[eph[0]]}) lie in this host's ephemeral range {lo}-{hi} "
                       "(net.ipv4.ip_local_port_range), where any outgoing connection may take them; pass a "
                       f"--port-base that keeps every lab port below {lo} (base+1001 with --accounting), or reserve "
                       "them (net.ipv4.ip_local_reserved_ports)")
    busy: dict[int, list[str]] = {}
    waiting: list[int] = []
    for p in sorted(ports):
        if port_free(p):
            continue
        socks = tcp_sockets(p)
        if socks and all(st == TCP_TIME_WAIT for st, _i in socks):
            waiting.append(p)
        else:
            busy[p] = holders({i for st, i in socks if st != TCP_TIME_WAIT})
    if busy:
        raise LabError("ports in use: " + "; ".join(
            f"{p} ({ports[p]}){' by ' + ', '.join(h) if h else ''}" for p, h in busy.items())
            + "; stop what uses them or pass another --port-base")
    if waiting:
        progress(f"port(s) {', '.join(map(str, waiting))} held only by TIME-WAIT sockets of closed connections; "
                 f"waiting up to {time_wait:g}s for the kernel to free them")
        deadline = time.monotonic() + time_wait
        while not all(port_free(p) for p in waiting):
            if time.monotonic() > deadline:
                left = [p for p in waiting if not port_free(p)]
                raise LabError(f"ports {', '.join(map(str, left))} still held after {time_wait:g}s of TIME-WAIT; "
                               "pass another --port-base")
            time.sleep(0.5)


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sk:
        sk.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sk.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
