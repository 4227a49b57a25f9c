"""The lab makes each node's mount namespace on the CPU whose namespace ids are lowest (slurmkit/lab/nsorder.py),
because Slurm keeps a job's private /tmp alive by bind-mounting the job namespace's file, which the kernel refuses
where the job namespace counts as older than the node's. On this machine's real kernel: from a node namespace made
on the CPU nsorder picks, the bind Slurm's job_container/tmpfs makes succeeds for a job namespace made on every CPU
(CI's 22.05 pass failed 'ns base mount failed: Invalid argument' before)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurmkit.lab import nsorder
from tests.conftest import needs

pytestmark = needs(os.geteuid() == 0, "making mount namespaces needs root")

# what job_container_tmpfs.c _create_ns does, in a node namespace (unshare --mount): fork a child that unshares a
# mount namespace (on the CPU given), bind its /proc/<pid>/ns/mnt onto HOLDER, print the outcome
_BIND = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
holder, cpu = sys.argv[1], int(sys.argv[2])
r, w = os.pipe(); r2, w2 = os.pipe()
pid = os.fork()
if pid == 0:
    os.sched_setaffinity(0, {cpu})
    ok = libc.unshare(0x00020000) == 0
    os.write(w, b"1" if ok else b"0"); os.read(r2, 1); os._exit(0)
made = os.read(r, 1) == b"1"
rc = libc.mount(f"/proc/{pid}/ns/mnt".encode(), holder.encode(), None, 4096, None)  # MS_BIND
err = ctypes.get_errno()
os.write(w2, b"x"); os.waitpid(pid, 0)
if rc == 0:
    libc.umount2(holder.encode(), 2)  # MNT_DETACH
print("bound" if made and rc == 0 else f"refused {os.strerror(err)}")
"""


def _bind_from_node_namespace(tmp_path: Path, node_cpu: int | None, job_cpu: int) -> str:
    d = tmp_path / f"base-{node_cpu}-{job_cpu}"
    d.mkdir()
    (d / "ns").touch()
    script = tmp_path / "bind.py"
    script.write_text(_BIND)
    inner = (f"mount --bind {d} {d} && mount --make-private {d} && "
             f"{sys.executable} {script} {d / 'ns'} {job_cpu}")
    argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", inner]
    if node_cpu is not None:
        argv = ["taskset", "-c", str(node_cpu), *argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip()


def test_the_probe_reads_one_id_per_cpu() -> None:
    ids = nsorder.probe()
    cpus = sorted(os.sched_getaffinity(0))
    if not ids:
        pytest.skip("this kernel has no NS_GET_MNTNS_ID (before 6.9): namespace ids are one sequence there")
    assert sorted(ids) == cpus
    assert all(v > 0 for v in ids.values())
    assert len(set(ids.values())) == len(ids)  # each probe made a namespace of its own


def test_a_node_namespace_made_where_nsorder_says_binds_every_job_namespace(tmp_path: Path) -> None:
    cpu = nsorder.oldest_cpu()
    for job_cpu in sorted(os.sched_getaffinity(0)):
        assert _bind_from_node_namespace(tmp_path, cpu, job_cpu) == "bound", (cpu, job_cpu, nsorder.probe())


def test_the_kernel_refuses_where_the_node_namespace_counts_as_newer(tmp_path: Path) -> None:
    """Why the lab pins at all: made on the CPU with the highest ids, the node namespace cannot bind a job
    namespace made on the lowest (where the ids are one sequence, as before 6.18, nothing to show)."""
    ids = nsorder.probe()
    if len(ids) < 2 or max(ids.values()) - min(ids.values()) < len(ids) * 4:
        pytest.skip(f"the namespace ids of this kernel's CPUs are one sequence ({ids}): nothing to pin against")
    hi, lo = max(ids, key=lambda c: ids[c]), min(ids, key=lambda c: ids[c])
    assert _bind_from_node_namespace(tmp_path, hi, lo).startswith("refused Invalid argument")
