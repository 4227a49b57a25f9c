"""slurmkit's recommendations for an adopted site, as advice (issue 19 item 3). Pure.

An inventory slurmkit wrote from scratch gets these settings in its generated files (slurmconf.py); an adopted one
(``adopted: true``, what `conf import` writes) never gets them silently: its files stay the site's. `conf
validate` lists each one that the site lacks, with the exact inventory edit that applies it and the rollout class
that edit would need -- found the way `conf diff` finds it: the files generated with and without the edit, compared
by ``rollout.semantic_diff`` (the per-release rollout table), so the class is the one the plan would show.

Not advised: ``Weight=1`` on every node (slurmkit writes it; it is Slurm's default, slurm.conf(5) Weight "The
default value is 1" in 22.05 and 24.11, so it changes nothing).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from slurmkit import hostlist
from slurmkit.model.cluster import Cluster

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class Advice:
    what: str  # the recommendation and why, with its source
    edits: tuple[tuple[Path, Any], ...]  # inventory key path -> the value that applies it
    action: str = ""  # the rollout class of applying it (push | reconfigure | restart | drain), "" if unknown

    def edit_text(self) -> str:
        return "; ".join(f"{path_text(p)}: {_yaml_value(v)}" for p, v in self.edits)

    def line(self) -> str:
        return f"{self.what} -- inventory edit: {self.edit_text()} (rollout: {self.action or 'unknown'})"


def path_text(path: Path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def _yaml_value(v: Any) -> str:
    import yaml

    return str(yaml.safe_dump(v, default_flow_style=True, width=1 << 20)).strip().removesuffix("...").strip()


def _set(inv: dict[str, Any], path: Path, value: Any) -> None:
    node: Any = inv
    for part in path[:-1]:
        if isinstance(part, str) and (node.get(part) is None):
            node[part] = {}
        node = node[part]
    node[path[-1]] = value


def _keys(pairs: tuple[tuple[str, str], ...]) -> dict[str, str]:
    return {k.lower(): v for k, v in pairs}


def recommendations(cluster: Cluster) -> list[Advice]:
    """What slurmkit writes for a site it generates from scratch that this adopted site lacks (no rollout class
    yet: ``advise`` adds it). Indices in the edits are those of the inventory (partitions[i], node_groups[i])."""
    from slurmkit.generate.slurmconf import (
        BF_WINDOW_DEFAULT,
        backfill_items,
        cpu_job_mem_default,
        longest_max_time_minutes,
        per_gpu_defaults,
    )

    if not cluster.adopted:
        return []
    out: list[Advice] = []
    glob = _keys(cluster.slurm_conf)
    mem_global = {"defmempercpu", "defmempernode", "defmempergpu"} & set(glob)
    for i, p in enumerate(cluster.partitions):
        groups = cluster.partition_groups(p)
        extra = _keys(p.extra)
        cpg, mpg = per_gpu_defaults(groups)
        if cpg and "defcpupergpu" not in extra and "defcpupergpu" not in glob:
            out.append(Advice(f"PartitionName={p.name}: DefCpuPerGPU={cpg}, each GPU's share of its nodes' usable CPUs "
                              "(a job that asks only for GPUs gets the CPUs to feed them; slurm.conf(5) DefCpuPerGPU)",
                              ((("partitions", i, "extra", "DefCpuPerGPU"), str(cpg)),)))
        if mpg and not mem_global and not {"defmempergpu", "defmempercpu", "defmempernode"} & set(extra):
            out.append(Advice(f"PartitionName={p.name}: DefMemPerGPU={mpg}, each GPU's share of its nodes' usable memory "
                              "(slurm.conf(5) DefMemPerGPU)", ((("partitions", i, "extra", "DefMemPerGPU"), str(mpg)),)))
        mpc = cpu_job_mem_default(groups)
        if mpc and not mem_global and not {"defmempercpu", "defmempernode"} & set(extra):
            out.append(Advice(f"PartitionName={p.name}: DefMemPerCPU={mpc}: a job without --mem* or GPUs otherwise takes "
                              "the whole node's memory (slurm.conf(5) DefMemPerCPU \"default value is 0 (unlimited)\") "
                              "and blocks its free GPUs", ((("partitions", i, "extra", "DefMemPerCPU"), str(mpc)),)))
        nodes = p.nodes or ""
        names = {n for n, _ in cluster.nodesets}
        if nodes and nodes.upper() != "ALL" and not any(x in names for x in hostlist.split_top(nodes)):
            ns = f"ns_{p.name}"
            if ns not in names:
                out.append(Advice(f"PartitionName={p.name}: its nodes as NodeSet={ns} (slurm.conf(5) NodeSet), as "
                                  "slurmkit writes partitions: node changes edit one NodeSet line",
                                  ((("nodesets", ns), {"Nodes": nodes}), (("partitions", i, "nodes"), ns))))
    # backfill: bf_window at least the longest MaxTime (slurm.conf(5) bf_window, 22.05 and 24.11: "A value at least
    # as long as the highest allowed time limit is generally advisable to prevent job starvation")
    sched = glob.get("schedulertype", "sched/backfill").lower()
    params = [x for x in glob.get("schedulerparameters", "").split(",") if x]
    window = next((x.split("=", 1)[1] for x in params if x.lower().startswith("bf_window=")), str(BF_WINDOW_DEFAULT))
    longest = longest_max_time_minutes(cluster)
    if sched.endswith("backfill") and longest and window.isdigit() and int(window) < longest:
        items = [x for x in backfill_items(cluster) if x.startswith(("bf_window=", "bf_resolution="))]
        if items:
            kept = [x for x in params if not x.lower().startswith(("bf_window=", "bf_resolution="))]
            out.append(Advice(f"bf_window={window} is shorter than the longest partition MaxTime ({longest} min): "
                              f"{','.join(items)} (slurm.conf(5) bf_window: \"at least as long as the highest allowed "
                              "time limit\")", ((("slurm_conf", "SchedulerParameters"), ",".join(kept + items)),)))
    # preemption: gpusub jobs checkpoint on their signal and are requeued; PreemptMode's default is OFF
    ptype = glob.get("preempttype", "preempt/none").lower()
    mode = glob.get("preemptmode", "OFF").upper()
    if ptype != "preempt/none" and "REQUEUE" not in mode.split(","):
        out.append(Advice(f"PreemptType={ptype} with PreemptMode={mode}: REQUEUE puts a preempted job back in the queue "
                          "(slurm.conf(5) PreemptMode REQUEUE), where gpusub's jobs resume from their checkpoint",
                          ((("slurm_conf", "PreemptMode"), "REQUEUE"),)))
    if "propagateresourcelimitsexcept" not in glob and "propagateresourcelimits" not in glob:
        out.append(Advice("PropagateResourceLimitsExcept=MEMLOCK: RDMA/NCCL jobs must not inherit the submit host's "
                          "locked-memory limit (Slurm FAQ \"locked memory\"; slurm.conf(5))",
                          ((("slurm_conf", "PropagateResourceLimitsExcept"), "MEMLOCK"),)))
    # cgroup confinement (cgroup.conf(5)): jobs see only their GPUs, cores, memory and swap
    cg = _keys(cluster.cgroup_conf)
    # GPUs on a node line, or in GresTypes (dynamic nodes bring their Gres= when they register)
    gpus = any(g.gpus or any(k.lower() == "gres" for k, _ in g.slurm) for g in cluster.node_groups) or \
        "gpu" in [t.strip() for t in glob.get("grestypes", "").split(",")]
    # Slurm's plugin loader adds the "task/" prefix itself (TaskPlugin=affinity,cgroup is task/affinity,task/cgroup)
    task = {t.strip().lower().removeprefix("task/") for t in glob.get("taskplugin", "").split(",") if t.strip()}
    if "cgroup" not in task:
        out.append(Advice("TaskPlugin without task/cgroup: cgroup.conf's Constrain* settings confine nothing "
                          "(cgroup.conf(5): enforced by the task/cgroup plugin)",
                          ((("slurm_conf", "TaskPlugin"), "task/cgroup,task/affinity"),)))
    for key, why in (("ConstrainCores", "a job's tasks stay on its cores"),
                     ("ConstrainRAMSpace", "a job stays within its memory"),
                     ("ConstrainSwapSpace", "a job cannot spill past its memory into swap"),
                     ("ConstrainDevices", "a job sees only the GPUs it was given")):
        if key == "ConstrainDevices" and not gpus:
            continue
        if cg.get(key.lower(), "no").lower() != "yes":
            out.append(Advice(f"cgroup.conf {key}=yes: {why} (cgroup.conf(5); default no)",
                              ((("cgroup_conf", key), "yes"),)))
    return out


def advise(inventory: dict[str, Any], version: str | None = None,
           load: Callable[[dict[str, Any]], Cluster] | None = None) -> list[Advice]:
    """The advice for an adopted inventory (the mapping `conf import` wrote), each with the rollout class its edit
    would need: the files generated with and without it, compared as `conf diff` compares them."""
    from slurmkit.generate.rollout import _RANK, semantic_diff
    from slurmkit.generate.slurmconf import generate
    from slurmkit.model.load import load_cluster_dict

    loader = load or load_cluster_dict
    cluster = loader(inventory)
    ver = version or cluster.slurm_version
    base = generate(cluster, version=ver)
    out = []
    for a in recommendations(cluster):
        inv = copy.deepcopy(inventory)
        for path, value in a.edits:
            _set(inv, path, value)
        changes = semantic_diff(base, generate(loader(inv), version=ver), ver)
        action = max((c.action for c in changes), key=lambda x: _RANK[x], default="")
        out.append(Advice(a.what, a.edits, action))
    return out
