"""The lab's processes on this host: pid files, liveness (a reused pid is never taken for a daemon), signals, the
UTS namespaces the nodes run in, and waiting for a condition with a one-line timeout error."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from slurmkit.errors import LabError


def host_bin(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin") / name)


def read_pid(p: Path) -> int | None:
    try:
        return int(p.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def alive(pid: int) -> bool:
    """Alive and not a zombie (daemons are re-parented to an init that reaps lazily)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            st = f.read().rsplit(")", 1)[1].split()[0]
        return st not in ("Z", "X")
    except (OSError, IndexError):
        return False


# pid file stem (before "-") -> the program: Debian's node_exporter binary; the lab's `slurmkit exporter`
_PROGRAMS = {"node_exporter": "prometheus-node-exporter", "alertmanager": "prometheus-alertmanager",
             "slurmkit_exporter": "slurmkit"}


def is_program(pid: int, name: str) -> bool:
    """The process is ``name`` (slurmctld, slurmd, munged, mariadbd, slurmdbd): its ``comm`` (the program name,
    15 characters at most) or its executable (Debian's alternatives run ``/usr/sbin/slurmctld-wlm``)."""
    name = _PROGRAMS.get(name, name)
    try:
        if name == "slurmkit":  # `python -m slurmkit.cli.main exporter`: the interpreter's comm, our module's argv
            return b"slurmkit.cli.main" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if Path(f"/proc/{pid}/comm").read_text().strip() == name[:15]:
            return True
        return os.path.basename(os.readlink(f"/proc/{pid}/exe")).startswith(name)
    except OSError:
        return False


def kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def uts_ns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/uts")
    except OSError:
        return None


def pids_with_arg(arg: str) -> list[int]:
    """Processes with ``arg`` as one of their command-line arguments (``slurmd -f <lab>/etc/slurm.conf``)."""
    want = arg.encode()
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        if want in argv:
            out.append(int(d))
    return out


def pids_in_ns(namespaces: set[str | None]) -> list[int]:
    if not namespaces:
        return []
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit() and uts_ns(int(d)) in namespaces:
            out.append(int(d))
    return out


def wait_for(pred: Callable[[], bool], timeout: float, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            hint = f"; see {log}" if log else ""
            raise LabError(f"timed out after {timeout:g}s waiting for {what}{hint}")
        time.sleep(0.01)
