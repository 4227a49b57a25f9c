"""What a node should look like, from the inventory: GPU count/type/links/MIG, gres index -> minor, NICs.

Kept as a small plain dataclass so hooks can cache it next to their state (see ``load_expectations``) and skip the
YAML parser on the hot path.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class NicExpect:
    name: str
    kind: str
    rate_gbps: int


@dataclass(frozen=True)
class Expectations:
    node: str = ""
    gpu_count: int | None = None
    gpu_type: str | None = None
    nvlink: bool | None = None  # True: all-to-all NVLink expected; False: none; None: unknown
    mig: tuple[bool, ...] | None = None  # per GPU (NVML index order): MIG enabled expected
    minors: tuple[int, ...] = ()  # Slurm gres index i -> /dev/nvidia<minor> (gres.conf File= order)
    nics: tuple[NicExpect, ...] = field(default_factory=tuple)
    cpus: int | None = None  # the group's sockets x cores x threads (slurm.conf CPUs=)
    memory_mb: int | None = None  # the group's memory_mb (RealMemory=)
    checks: dict[str, Any] = field(default_factory=dict)  # the raw hooks.checks policy mapping
    source: str = ""
    group: str | None = None  # the node's group in the inventory (the checks' by_group expectations)
    interfaces: tuple[str, ...] = ()  # the group's kind: eth NICs, by interface name (the interfaces check)
    # where the prolog/epilog write dcgm-exporter's job mapping files: monitoring.dcgm_job_mapping_dir for a GPU node
    # monitoring.dcgm_exporter names, else "" (none written: no dcgm-exporter reads them there)
    dcgm_job_map_dir: str = ""
    gpu_shared: bool = False  # the group's GPUs are shared between jobs (gres/shard): a GPU's file lists several jobs

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Expectations:
        return cls(
            node=d["node"], gpu_count=d["gpu_count"], gpu_type=d["gpu_type"], nvlink=d["nvlink"],
            mig=tuple(d["mig"]) if d["mig"] is not None else None, minors=tuple(d["minors"]),
            nics=tuple(NicExpect(**n) for n in d["nics"]), checks=dict(d["checks"]), source=d["source"],
            cpus=d.get("cpus"), memory_mb=d.get("memory_mb"), group=d.get("group"),
            interfaces=tuple(d.get("interfaces") or ()), dcgm_job_map_dir=str(d.get("dcgm_job_map_dir") or ""),
            gpu_shared=bool(d.get("gpu_shared")),
        )

    def job_minors(self, gres_indices: list[int]) -> frozenset[int]:
        """SLURM_JOB_GPUS (node-level gres indices) -> device minor numbers."""
        if not self.minors:
            return frozenset(gres_indices)  # no inventory: gres.conf File=/dev/nvidia[0-N] in order is the norm
        return frozenset(self.minors[i] if i < len(self.minors) else i for i in gres_indices)


# Bumped when Expectations gains a field: an older cache is rebuilt from the inventory (2: cpus, memory_mb; 3: group,
# interfaces; 4: dcgm_job_map_dir, gpu_shared).
_CACHE_VERSION = 4
_MINOR_RE = re.compile(r"nvidia(\d+)$")


def expectations_from_cluster(cluster: Any, node: str) -> Expectations:
    checks = dict(cluster.hooks.checks or {})
    group = cluster.group_of(node)
    if group is None:
        return Expectations(node=node, checks=checks, source=f"{node} not in inventory")
    gpus = group.gpus
    nics = tuple(NicExpect(n.name, n.kind, n.rate_gbps) for n in group.nics if n.kind in ("ib", "roce"))
    hw = {"cpus": group.cpu.cpus, "memory_mb": group.memory_mb, "group": group.name,
          "interfaces": tuple(n.name for n in group.nics if n.kind == "eth")}
    if gpus is None:
        return Expectations(node=node, gpu_count=0, nics=nics, checks=checks, source=f"group {group.name}", **hw)
    minors = []
    for i, f in enumerate(gpus.file_list):
        m = _MINOR_RE.search(f)
        minors.append(int(m.group(1)) if m else i)
    layout = getattr(gpus, "mig_layout", ()) or ()
    mig: tuple[bool, ...] | None
    if layout:
        mig = tuple(bool(x) for x in layout)
    elif gpus.mig:
        mig = tuple(True for _ in range(gpus.count))
    else:
        mig = tuple(False for _ in range(gpus.count))
    links = gpus.links
    nvlink = True if links == "nvlink" or isinstance(links, tuple) else False if links == "none" else None
    mon = cluster.monitoring
    jobmap = mon.dcgm_job_mapping_dir if mon.dcgm_hosts([node]) else ""
    return Expectations(
        node=node, gpu_count=gpus.count, gpu_type=gpus.type, nvlink=nvlink, mig=mig, minors=tuple(minors),
        nics=nics, checks=checks, source=f"group {group.name}", dcgm_job_map_dir=jobmap,
        gpu_shared=bool(gpus.shards), **hw,
    )


def load_expectations(inventory: str | None, node: str, cache_dir: str | None,
                      write_cache: bool = True) -> Expectations:
    """Expectations for ``node``; cached as JSON keyed by the inventory's sha256 so the prolog skips YAML parsing.

    The cache is a pure optimisation: any problem reading it falls back to the inventory itself. ``write_cache``
    False (read-only `slurmkit check`): the cache is read, never written.
    """
    if not inventory:
        return Expectations(node=node, source="no inventory")
    with open(inventory, "rb") as f:
        raw = f.read()
    sha = hashlib.sha256(raw).hexdigest()
    cache = os.path.join(cache_dir, "expectations.json") if cache_dir else None
    if cache:
        try:
            with open(cache) as f:
                d = json.load(f)
            if d.get("sha256") == sha and d.get("node") == node and d.get("v") == _CACHE_VERSION:
                return Expectations.from_json(d["expect"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
    from slurmkit.model.load import load_cluster_text

    cluster = load_cluster_text(raw.decode(), source=inventory)
    exp = expectations_from_cluster(cluster, node)
    if cache and write_cache:
        from slurmkit.health.state import atomic_write

        try:
            atomic_write(cache, json.dumps({"sha256": sha, "node": node, "v": _CACHE_VERSION, "expect": exp.to_json()}))
        except OSError:
            pass  # a read-only state dir costs speed, not correctness
    return exp
