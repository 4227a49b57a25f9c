"""Which CPU makes the oldest mount namespace: the lab creates each node's namespace there, so that every job
namespace its slurmd makes later counts as newer than the node's.

Why (measured on this project's Linux 6.18 machines, 2 CPUs): Slurm's job_container/tmpfs (namespace/linux from
25.11) keeps a job's mount namespace alive by bind-mounting ``/proc/<pid>/ns/mnt`` of a child that called
unshare(CLONE_NEWNS) onto ``BasePath/<job>/.ns`` (22.05 job_container_tmpfs.c _create_ns: "ns base mount failed").
The kernel refuses such a bind with EINVAL unless the namespace bound is newer than the binder's own
(fs/namespace.c mnt_ns_loop compares the two namespaces' ids). From 6.18 those ids come from per-CPU batches of a
global counter (CPU 0 handed out 52, 53, 54 while CPU 1 handed out 4148, 4149, 4150), so "newer" no longer means
"made later": a node namespace made on CPU 1 is newer than every job namespace CPU 0 makes for the next ~4,000, and
the job fails in its extern step. slurmd in the initial namespace (a real node) always binds: the initial namespace
is the oldest. A lab's slurmd runs in a namespace of its own, so the lab makes it where the ids are lowest.

The probe forks one short child per CPU that unshares a mount namespace and asks its id (ioctl NS_GET_MNTNS_ID,
Linux 6.9+, the ioctl that listmount/statmount came with); where the ioctl is missing the ids are the old monotonic
sequence and no CPU is picked. It runs in a fresh interpreter: forking the (threaded) test process is not safe."""

from __future__ import annotations

import os
import subprocess
import sys

# the probe: one line of output, "cpu id" per CPU that answered, nothing where the kernel has no NS_GET_MNTNS_ID
_PROBE = r"""
import ctypes, fcntl, os, struct
libc = ctypes.CDLL(None, use_errno=True)
NS_GET_MNTNS_ID = 0x8008B705  # _IOR(0xb7, 0x5, __u64), include/uapi/linux/nsfs.h
out = []
for cpu in sorted(os.sched_getaffinity(0)):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.sched_setaffinity(0, {cpu})
            if libc.unshare(0x00020000) == 0:  # CLONE_NEWNS
                with open("/proc/self/ns/mnt") as f:
                    os.write(w, fcntl.ioctl(f.fileno(), NS_GET_MNTNS_ID, bytes(8)))
        finally:
            os._exit(0)
    os.close(w)
    got = os.read(r, 8)
    os.close(r)
    os.waitpid(pid, 0)
    if len(got) == 8:
        out.append(f"{cpu}:{struct.unpack('Q', got)[0]}")
print(" ".join(out))
"""


def probe() -> dict[int, int]:
    """CPU -> the id a mount namespace made there now gets; empty where the kernel cannot say (or we may not)."""
    try:
        res = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    ids: dict[int, int] = {}
    for item in res.stdout.split():
        cpu, _, nsid = item.partition(":")
        if cpu.isdigit() and nsid.isdigit():
            ids[int(cpu)] = int(nsid)
    return ids


def oldest_cpu() -> int | None:
    """The CPU whose next mount namespace is the oldest (lowest id), or None with one CPU or where the kernel
    cannot say (before 6.9 the ids are one sequence, so any CPU will do)."""
    ids = probe()
    if len(ids) < 2:
        return None
    return min(ids, key=lambda c: ids[c])


def cpu_list() -> str:
    """This process's allowed CPUs as taskset's list (what a pinned namespace's daemon is given back)."""
    return ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
