"""The lab's cgroup mode (``lab up --cgroups``): proctrack/cgroup + task/cgroup on cgroup v1, one tree per node.

Slurm's cgroup/v1 plugin names its tree ``slurm_<nodename>`` under each controller's mount (one per slurmd with
MULTIPLE_SLURMD), so two labs with the same node names would share, and clean up, each other's trees. Each lab
node therefore gets its own cgroup namespace: its slurmd is started inside ``<controller mount>/<the starting
process's cgroup>/slurmkit-lab-<lab id>/<node>`` for every controller Slurm uses, then ``unshare --cgroup`` makes
that group the node's root, and the node's mount namespace gets fresh cgroup v1 mounts of just those controllers
(rooted there by the kernel). Inside, Slurm sees ``/slurm_node1/uid_0/job_N/step_M`` as on a real node; on the
host it all lives under the lab's own group, which ``lab down`` removes (the path is kept in DIR/cgroups.json, so a
``down`` from another process or after a crash finds it).

Controllers: freezer (proctrack/cgroup), cpuset, memory, devices (task/cgroup ConstrainCores, ConstrainRAMSpace,
ConstrainDevices), cpuacct (Slurm's cgroup/v1 sets up accounting there too). cgroup v2 is not used: Slurm's
cgroup/v2 is fatal on a hybrid host ("Hybrid mode is not supported"), and on a pure v2 host this mode would need
delegation the lab does not do; `lab up --cgroups` says what is missing instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import time
from pathlib import Path

from slurmkit.errors import LabError

CONTROLLERS = ("freezer", "cpuset", "memory", "devices", "cpuacct")
STATE_FILE = "cgroups.json"


def v1_mounts(mounts: str | None = None) -> dict[str, Path]:
    """controller -> its cgroup v1 mount under /sys/fs/cgroup (from /proc/self/mounts)."""
    text = mounts if mounts is not None else Path("/proc/self/mounts").read_text()
    out: dict[str, Path] = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 4 and f[2] == "cgroup" and f[1].startswith("/sys/fs/cgroup"):
            for opt in f[3].split(","):
                if opt in CONTROLLERS:
                    out.setdefault(opt, Path(f[1]))
    return out


def problems(mounts: str | None = None, has_cgroupns: bool | None = None) -> list[str]:
    """What this host lacks for the cgroup mode, each said exactly (empty: it can run)."""
    found = v1_mounts(mounts)
    out = []
    missing = [c for c in CONTROLLERS if c not in found]
    if missing:
        out.append(f"cgroup v1 controller(s) {', '.join(missing)} not mounted under /sys/fs/cgroup (Slurm's cgroup/v1 "
                   "needs freezer for proctrack/cgroup, cpuset+memory+devices for task/cgroup's ConstrainCores, "
                   "ConstrainRAMSpace, ConstrainDevices, and cpuacct)")
    if has_cgroupns is None:
        has_cgroupns = Path("/proc/self/ns/cgroup").exists()
    if not has_cgroupns:
        out.append("no cgroup namespaces (/proc/self/ns/cgroup): each lab node needs its own cgroup root")
    return out


def lab_id(lab_dir: Path) -> str:
    return hashlib.sha256(str(Path(lab_dir).resolve()).encode()).hexdigest()[:12]


def _own_path(controller: str) -> str:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _n, ctrls, path = line.split(":", 2)
        if controller in ctrls.split(","):
            return path
    return "/"


def lab_roots(lab_dir: Path) -> dict[str, Path]:
    """controller -> the lab's group, beside the cgroup of the process that starts the lab."""
    mounts = v1_mounts()
    return {c: mounts[c] / _own_path(c).lstrip("/") / f"slurmkit-lab-{lab_id(lab_dir)}" for c in CONTROLLERS}


def create(lab_dir: Path, nodes: list[str]) -> dict[str, dict[str, Path]]:
    """Make the lab's group (unless DIR/cgroups.json records it) and one child per node in every controller; record
    the roots in DIR/cgroups.json.
    Returns node -> controller -> the node's group (where its slurmd is put before ``unshare --cgroup``)."""
    if problems():
        raise LabError("--cgroups: " + "; ".join(problems()))
    # the lab's roots once made: a node added later (`nodes add`, from another process in another cgroup) joins them
    roots = recorded(lab_dir) or lab_roots(lab_dir)
    (Path(lab_dir) / STATE_FILE).write_text(json.dumps({c: str(p) for c, p in roots.items()}, indent=1))
    out: dict[str, dict[str, Path]] = {n: {} for n in nodes}
    try:
        for c, root in roots.items():
            root.mkdir(exist_ok=True)
            if c == "cpuset":
                _inherit_cpuset(root)
            for n in nodes:
                d = root / n
                d.mkdir(exist_ok=True)
                if c == "cpuset":
                    _inherit_cpuset(d)
                out[n][c] = d
    except OSError as exc:
        raise LabError(f"--cgroups: cannot create the lab's cgroups: {exc}") from exc
    return out


def _inherit_cpuset(d: Path) -> None:
    """A new cpuset v1 group starts empty and takes no task until it has CPUs and memory nodes: the parent's."""
    for f in ("cpuset.cpus", "cpuset.mems"):
        (d / f).write_text((d.parent / f).read_text().strip() + "\n")


def mount_script(target: str) -> list[str]:
    """Shell steps (inside the node's new mount + cgroup namespaces) that mount the controllers at ``target``
    (the node's /sys/fs/cgroup), each rooted at the node's group."""
    q = shlex.quote
    steps = [f"mount -t tmpfs -o mode=755 slurmkit-cgroup {q(target)}"]
    for c in CONTROLLERS:
        steps += [f"mkdir -p {q(target + '/' + c)}", f"mount -t cgroup -o {c} cgroup {q(target + '/' + c)}"]
    return steps


def recorded(lab_dir: Path) -> dict[str, Path]:
    p = Path(lab_dir) / STATE_FILE
    try:
        return {c: Path(v) for c, v in json.loads(p.read_text()).items()}
    except (OSError, ValueError):
        return {}


def remove(lab_dir: Path, timeout: float = 10.0) -> list[str]:
    """Remove the lab's cgroup trees, deepest first (v1 removes a group only when it has no tasks and no
    children); retried until ``timeout`` while killed tasks leave. Returns what is still there (empty: clean)."""
    roots = recorded(lab_dir)
    deadline = time.monotonic() + timeout
    while True:
        left = []
        for root in roots.values():
            if not root.is_dir():
                continue
            dirs = [Path(dp) for dp, _dn, _fn in os.walk(root)]
            for d in sorted(dirs, key=lambda p: len(p.parts), reverse=True):
                try:
                    d.rmdir()
                except OSError:
                    left.append(str(d))
        if not left:
            (Path(lab_dir) / STATE_FILE).unlink(missing_ok=True)
            return []
        if time.monotonic() > deadline:
            return left
        time.sleep(0.1)
