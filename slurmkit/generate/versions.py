"""Everything that differs between Slurm releases, in one place."""

from __future__ import annotations

from dataclasses import dataclass

from slurmkit.model.cluster import SUPPORTED_SLURM_VERSIONS


@dataclass(frozen=True)
class SlurmFeatures:
    version: str
    block_topology: bool  # topology/block (23.11+)
    topology_yaml: bool  # topology.yaml (25.05+)
    cgroup_v2: bool  # default to cgroup/v2 plugin (22.05 hosts are often hybrid: autodetect instead)
    json_filters: bool  # squeue/sinfo --json honour -j/-t/-n (not in 22.05)
    scontrol_json: bool  # scontrol --json (23.02+)
    removed_cgroup_keys: frozenset[str]


def _key(v: str) -> tuple[int, int]:
    a, b = v.split(".")[:2]
    return int(a), int(b)


def features_for(version: str) -> SlurmFeatures:
    v = _key(version)
    if f"{v[0]:02d}.{v[1]:02d}" not in SUPPORTED_SLURM_VERSIONS and v < (22, 5):
        raise ValueError(f"unsupported Slurm version {version}")
    removed = {"CgroupReleaseAgentDir"} if v >= (22, 5) else set()
    if v >= (23, 11):
        removed |= {"CgroupAutomount", "ConstrainKmemSpace", "MaxKmemPercent", "MinKmemSpace", "AllowedKmemSpace"}
    return SlurmFeatures(
        version=f"{v[0]:02d}.{v[1]:02d}",
        block_topology=v >= (23, 11),
        topology_yaml=v >= (25, 5),
        cgroup_v2=v >= (23, 2),
        json_filters=v >= (23, 2),
        scontrol_json=v >= (23, 2),
        removed_cgroup_keys=frozenset(removed),
    )
