"""Everything that differs between Slurm releases, in one place.

Sources (SchedMD/slurm release branches, see shared/reference/config-anchors.md §5): topology/block came in
23.11 with ``BlockLevels``, which 24.05 replaced by ``BlockSizes``; topology.yaml arrived in 25.05 (and makes
topology.conf ignored); ``AutoDetect=nvidia`` in 24.11; CgroupAutomount/Kmem* were removed in 23.11 and
CgroupReleaseAgentDir is fatal since 22.05; select/cons_res was removed in 23.11; ``scontrol reconfigure``
restarts the daemons (keeping the old config on failure) from 23.11; nodes can be added with a reconfigure
from 24.11.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurmkit.model.cluster import SUPPORTED_SLURM_VERSIONS


@dataclass(frozen=True)
class SlurmFeatures:
    version: str
    block_topology: bool  # topology/block (23.11+)
    block_sizes: bool  # BlockSizes= (24.05+); 23.11 spells the same idea BlockLevels=
    topology_yaml: bool  # topology.yaml (25.05+)
    cgroup_v2: bool  # default to cgroup/v2 plugin (22.05 hosts are often hybrid: autodetect instead)
    json_filters: bool  # squeue/sinfo --json honour -j/-t/-n (not in 22.05)
    scontrol_json: bool  # scontrol --json (23.02+)
    autodetect_nvidia: bool  # gres.conf AutoDetect=nvidia (24.11+)
    reconfigure_restarts: bool  # `scontrol reconfigure` restarts daemons, keeps old config on failure (23.11+)
    add_nodes_by_reconfigure: bool  # new NodeName lines + reconfigure is enough (24.11+)
    removed_cgroup_keys: frozenset[str]
    removed_slurm_values: frozenset[tuple[str, str]]  # (key, value) pairs the release no longer accepts


def version_key(v: str) -> tuple[int, int]:
    a, b = v.split(".")[:2]
    return int(a), int(b)


_key = version_key  # kept for callers of the original private name


def features_for(version: str) -> SlurmFeatures:
    v = version_key(version)
    name = f"{v[0]:02d}.{v[1]:02d}"
    # releases newer than the table (a running 26.05 cluster) get every feature we know of; older ones fail
    if v < version_key(SUPPORTED_SLURM_VERSIONS[0]):
        raise ValueError(f"unsupported Slurm version {version}; supported: {', '.join(SUPPORTED_SLURM_VERSIONS)}")
    removed = {"CgroupReleaseAgentDir"}
    removed_values: set[tuple[str, str]] = set()
    if v >= (23, 11):
        removed |= {"CgroupAutomount", "ConstrainKmemSpace", "MaxKmemPercent", "MinKmemSpace", "AllowedKmemSpace"}
        removed_values.add(("SelectType", "select/cons_res"))
    return SlurmFeatures(
        version=name,
        block_topology=v >= (23, 11),
        block_sizes=v >= (24, 5),
        topology_yaml=v >= (25, 5),
        cgroup_v2=v >= (23, 2),
        json_filters=v >= (23, 2),
        scontrol_json=v >= (23, 2),
        autodetect_nvidia=v >= (24, 11),
        reconfigure_restarts=v >= (23, 11),
        add_nodes_by_reconfigure=v >= (24, 11),
        removed_cgroup_keys=frozenset(removed),
        removed_slurm_values=frozenset(removed_values),
    )
