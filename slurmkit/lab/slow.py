"""Make one lab node really slower: a cgroup v1 CPU quota on its slurmd and everything it starts.

The lab's nodes share one host, so a "slow node" has to be made: each node's slurmd (and the processes in its UTS
namespace: slurmstepd, the job's tasks) is moved into ``<cpu mount>/slurmkit-lab/<lab id>/<node>`` with
``cpu.cfs_quota_us`` = ``cpus`` x ``cpu.cfs_period_us``. Children inherit the cgroup at fork (the lab runs
proctrack/linuxproc + task/none, so no Slurm plugin moves job processes elsewhere), so every job step the node
starts afterwards runs under the same cap. ``restore`` moves them back and removes the group.

Only cgroup v1's ``cpu`` controller is supported (the lab host is hybrid v1; on a pure v2 host the controller is
elsewhere and delegated differently): anything else is a LabError naming what was found.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from slurmkit.errors import LabError

# a short period: the cap bites within every 10 ms, so even a short burst of work on the node runs at the capped rate
PERIOD_US = 10_000
GROUP = "slurmkit-lab"
# cpu.shares of the top group (the default is 1024, one ordinary process's weight): on a busy host the capped nodes
# get a quarter of an ordinary process's share of the contended CPUs (all of the node's processes together), not
# a full one: the node stays slower than its peers however busy the host is
SHARES = 256


def cpu_mount(mounts: str | None = None) -> Path:
    """The cgroup v1 hierarchy that has the ``cpu`` controller (from /proc/self/mounts)."""
    text = mounts if mounts is not None else Path("/proc/self/mounts").read_text()
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 4 and f[2] == "cgroup" and "cpu" in f[3].split(",") and f[1].startswith("/sys/fs/cgroup"):
            return Path(f[1])
    raise LabError("--slow-node needs the cgroup v1 cpu controller (a 'cgroup ... cpu' mount under /sys/fs/cgroup); "
                   "this host has none (cgroup v2 only?)")


def lab_group(lab_dir: Path, mount: Path | None = None) -> Path:
    ident = hashlib.sha256(str(Path(lab_dir).resolve()).encode()).hexdigest()[:12]
    return (mount or cpu_mount()) / GROUP / ident


def _node_pids(lab, node: str) -> list[int]:  # type: ignore[no-untyped-def]
    """slurmd of ``node`` and every process in its UTS namespace (running job steps)."""
    from slurmkit.lab.procs import pids_in_ns, uts_ns

    pid = lab.running_pids().get(f"slurmd-{node}")
    if not pid:
        raise LabError(f"--slow-node {node}: no running slurmd for it in {lab.dir} (nodes: "
                       f"{', '.join(lab.spec.node_names)})")
    ns = uts_ns(pid)
    pids = [pid] + [p for p in pids_in_ns({ns}) if p != pid] if ns and ns != uts_ns(os.getpid()) else [pid]
    return pids


def _move(pids: list[int], group: Path) -> None:
    for p in pids:
        try:
            (group / "cgroup.procs").write_text(f"{p}\n")
        except ProcessLookupError:
            continue  # ended meanwhile
        except OSError as exc:
            if exc.errno == 3:  # ESRCH
                continue
            raise LabError(f"cannot move pid {p} into {group}: {exc.strerror}") from exc


def slow(lab, node: str, cpus: float = 0.1) -> Path:  # type: ignore[no-untyped-def]
    """Cap ``node`` (its slurmd and all it runs) at ``cpus`` CPUs. Returns the cgroup dir."""
    if not 0.01 <= cpus <= 64:
        raise LabError(f"--slow-cpus: {cpus} is not between 0.01 and 64 CPUs")
    pids = _node_pids(lab, node)
    group = lab_group(lab.dir) / node
    try:
        group.mkdir(parents=True, exist_ok=True)
        (group.parent.parent / "cpu.shares").write_text(f"{SHARES}\n")
        (group / "cpu.cfs_period_us").write_text(f"{PERIOD_US}\n")
        (group / "cpu.cfs_quota_us").write_text(f"{int(cpus * PERIOD_US)}\n")
    except OSError as exc:
        raise LabError(f"cannot set a CPU quota in {group}: {exc.strerror}") from exc
    _move(pids, group)
    return group


def restore(lab, node: str | None = None) -> list[str]:  # type: ignore[no-untyped-def]
    """Lift the cap of ``node`` (all nodes when None): processes go back to the root group, the groups are
    removed. Returns the nodes restored. Safe when nothing is slowed or the lab is down."""
    base = lab_group(lab.dir)
    if not base.is_dir():
        return []
    root = base.parent.parent
    done = []
    for d in sorted(p for p in base.iterdir() if p.is_dir()):
        if node is not None and d.name != node:
            continue
        try:
            pids = [int(x) for x in (d / "cgroup.procs").read_text().split()]
        except OSError:
            pids = []
        _move(pids, root)
        try:
            d.rmdir()
        except OSError as exc:
            raise LabError(f"cannot remove {d}: {exc.strerror}") from exc
        done.append(d.name)
    if not any(p.is_dir() for p in base.iterdir()):
        base.rmdir()
        top = base.parent
        if not any(p.is_dir() for p in top.iterdir()):
            top.rmdir()
    return done


def slowed(lab) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """node -> CPUs it is capped at."""
    try:
        base = lab_group(lab.dir)
    except LabError:
        return {}
    out = {}
    if base.is_dir():
        for d in sorted(p for p in base.iterdir() if p.is_dir()):
            try:
                q = int((d / "cpu.cfs_quota_us").read_text())
                per = int((d / "cpu.cfs_period_us").read_text())
            except (OSError, ValueError):
                continue
            if q > 0:
                out[d.name] = q / per
    return out
