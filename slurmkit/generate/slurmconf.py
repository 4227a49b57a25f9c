"""Inventory model -> Slurm config files. Pure: returns ``{filename: text}``; writing is a separate step.

Version-specific behaviour lives in ``slurmkit.generate.versions`` only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from slurmkit import hostlist
from slurmkit.errors import InventoryError
from slurmkit.generate.versions import features_for
from slurmkit.model.cluster import Cluster, NodeGroup
from slurmkit.templates import environment, header_line


@dataclass(frozen=True)
class Overrides:
    """Site or lab additions applied on top of what the inventory implies.

    ``slurm_conf``/``cgroup_conf`` replace or add keys (last wins, order kept); ``node_params`` adds
    per-group NodeName parameters (e.g. the lab's NodeAddr/Port); ``gres_file_prefix`` rewrites
    ``/dev/`` in device paths (the lab's fake devices live under its own dir).
    """

    slurm_conf: tuple[tuple[str, str], ...] = ()
    cgroup_conf: tuple[tuple[str, str], ...] = ()
    node_params: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    gres_file_prefix: str | None = None


def _merge(base: list[tuple[str, str]], extra: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    out = dict(base)
    order = [k for k, _ in base]
    for k, v in extra:
        if k not in out:
            order.append(k)
        out[k] = v
    return [(k, out[k]) for k in order if out[k] != ""]


def _gres_types(cluster: Cluster) -> list[str]:
    types: list[str] = []
    for g in cluster.node_groups:
        if g.gpus:
            types.append("gpu")
            if g.gpus.shards:
                types.append("shard")
    return sorted(set(types))


def _node_gres(g: NodeGroup) -> str:
    if not g.gpus:
        return ""
    parts = [f"gpu:{g.gpus.type}:{g.gpus.count}"]
    if g.gpus.shards:
        parts.append(f"shard:{g.gpus.shards}")
    return ",".join(parts)


def slurm_conf_settings(cluster: Cluster, version: str, conf_dir: str) -> list[tuple[str, str]]:
    feats = features_for(version)
    s: list[tuple[str, str]] = [("ClusterName", cluster.name)]
    for h in cluster.controller.hosts:
        s.append(("SlurmctldHost", h))
    s += [
        ("SlurmctldPort", str(cluster.controller.port)),
        ("SlurmdPort", "6818"),
        ("AuthType", "auth/munge"),
        ("CredType", "cred/munge"),
        ("SlurmUser", "slurm"),
        ("StateSaveLocation", cluster.controller.state_dir),
        ("SlurmdSpoolDir", "/var/spool/slurmd"),
        ("SlurmctldPidFile", "/run/slurmctld.pid"),
        ("SlurmdPidFile", "/run/slurmd.pid"),
        ("SlurmctldLogFile", "/var/log/slurm/slurmctld.log"),
        ("SlurmdLogFile", "/var/log/slurm/slurmd.log"),
        ("MpiDefault", "none"),
        ("ReturnToService", "2"),
        ("SchedulerType", "sched/backfill"),
        ("SelectType", "select/cons_tres"),
        ("SelectTypeParameters", "CR_Core_Memory"),
        ("ProctrackType", "proctrack/cgroup"),
        ("TaskPlugin", "task/cgroup,task/affinity"),
        ("JobAcctGatherType", "jobacct_gather/cgroup"),
        ("PrologFlags", "Alloc,Contain"),
        ("MailProg", "/bin/true"),
    ]
    gt = _gres_types(cluster)
    if gt:
        s.append(("GresTypes", ",".join(gt)))
    if cluster.accounting:
        s += [
            ("AccountingStorageType", "accounting_storage/slurmdbd"),
            ("AccountingStorageHost", cluster.accounting.host),
            ("AccountingStoragePort", str(cluster.accounting.port)),
        ]
        if gt:
            s.append(("AccountingStorageTRES", ",".join(f"gres/{t}" for t in gt)))
    else:
        s.append(("AccountingStorageType", "accounting_storage/none"))
    topo = cluster.topology.kind
    if topo == "tree":
        s.append(("TopologyPlugin", "topology/tree"))
    elif topo == "block":
        if not feats.block_topology:
            raise InventoryError("topology.blocks", f"block topology needs Slurm >= 23.11, target is {version}")
        s.append(("TopologyPlugin", "topology/block"))
    if cluster.policy.fairshare or cluster.policy.preemption != "none":
        s.append(("PriorityType", "priority/multifactor"))
        if cluster.policy.fairshare:
            s += [("PriorityWeightFairshare", "10000"), ("PriorityWeightAge", "1000"), ("PriorityDecayHalfLife", "7-0")]
    if cluster.policy.preemption == "qos":
        s += [("PreemptType", "preempt/qos"), ("PreemptMode", "REQUEUE")]
    elif cluster.policy.preemption == "partition":
        s += [("PreemptType", "preempt/partition_prio"), ("PreemptMode", "REQUEUE")]
    hooks = cluster.hooks
    if hooks.prolog:
        s.append(("Prolog", f"{conf_dir}/slurmkit-prolog"))
    if hooks.epilog:
        s.append(("Epilog", f"{conf_dir}/slurmkit-epilog"))
    if hooks.prolog or hooks.epilog:
        s.append(("PrologEpilogTimeout", str(hooks.prolog_epilog_timeout)))
    if hooks.healthcheck_interval:
        s += [
            ("HealthCheckProgram", f"{conf_dir}/slurmkit-health"),
            ("HealthCheckInterval", str(hooks.healthcheck_interval)),
            ("HealthCheckNodeState", "ANY,CYCLE"),
        ]
    return _merge(s, cluster.slurm_conf)


def node_lines(cluster: Cluster, overrides: Overrides) -> list[str]:
    lines = []
    for g in cluster.node_groups:
        params: list[tuple[str, str]] = [
            ("NodeName", g.hosts),
            ("CPUs", str(g.cpu.cpus)),
            ("Sockets", str(g.cpu.sockets)),
            ("CoresPerSocket", str(g.cpu.cores_per_socket)),
            ("ThreadsPerCore", str(g.cpu.threads_per_core)),
            ("RealMemory", str(g.real_memory_mb)),
        ]
        if g.reserve.memory_mb:
            params.append(("MemSpecLimit", str(g.reserve.memory_mb)))
        if g.reserve.cores:
            params.append(("CoreSpecCount", str(g.reserve.cores)))
        gres = _node_gres(g)
        if gres:
            params.append(("Gres", gres))
        if g.features:
            params.append(("Feature", ",".join(g.features)))
        params.append(("Weight", str(g.weight)))
        params = _merge(params, overrides.node_params.get(g.name, ()))
        params.append(("State", "UNKNOWN"))
        lines.append(" ".join(f"{k}={v}" for k, v in params))
    return lines


def partition_lines(cluster: Cluster) -> tuple[list[str], list[str]]:
    nodesets, parts = [], []
    for p in cluster.partitions:
        hosts = hostlist.fold(h for gname in p.groups for h in cluster.group(gname).hostnames)
        ns = f"ns_{p.name}"
        nodesets.append(f"NodeSet={ns} Nodes={hosts}")
        kv = [("PartitionName", p.name), ("Nodes", ns), ("Default", "YES" if p.default else "NO"), ("MaxTime", p.max_time)]
        if p.default_time:
            kv.append(("DefaultTime", p.default_time))
        if p.priority_tier is not None:
            kv.append(("PriorityTier", str(p.priority_tier)))
        if p.qos:
            kv.append(("QOS", p.qos))
        kv.append(("State", "UP"))
        kv = _merge(kv, p.extra)
        parts.append(" ".join(f"{k}={v}" for k, v in kv))
    return nodesets, parts


def gres_lines(cluster: Cluster, overrides: Overrides) -> list[str]:
    lines = []
    for g in cluster.node_groups:
        if not g.gpus:
            continue
        files = g.gpus.file_list
        if overrides.gres_file_prefix:
            files = [overrides.gres_file_prefix.rstrip("/") + "/" + f.removeprefix("/dev/") for f in files]
        links = _links(g)
        # one line per distinct (cores, links) run of GPUs keeps gres.conf small but exact
        for i, f in enumerate(files):
            kv = [("NodeName", g.hosts), ("Name", "gpu"), ("Type", g.gpus.type), ("File", f)]
            if g.gpus.cores:
                kv.append(("Cores", g.gpus.cores[i]))
            if links:
                kv.append(("Links", links[i]))
            lines.append(" ".join(f"{k}={v}" for k, v in kv))
        if g.gpus.shards:
            lines.append(f"NodeName={g.hosts} Name=shard Count={g.gpus.shards}")
    return lines


def _links(g: NodeGroup) -> list[str] | None:
    """Slurm's Links=: per GPU, a comma list with -1 for itself and link counts to the others."""
    assert g.gpus is not None
    n = g.gpus.count
    if g.gpus.links == "none":
        return None
    if g.gpus.links == "nvlink":
        matrix = [[-1 if i == j else 1 for j in range(n)] for i in range(n)]
    else:
        matrix = [list(r) for r in g.gpus.links]  # type: ignore[union-attr]
    return [",".join(str(v) for v in row) for row in matrix]


def cgroup_settings(cluster: Cluster, version: str, overrides: Overrides) -> list[tuple[str, str]]:
    feats = features_for(version)
    s = [
        ("CgroupPlugin", "cgroup/v2" if feats.cgroup_v2 else "autodetect"),
        ("ConstrainCores", "yes"),
        ("ConstrainDevices", "yes"),
        ("ConstrainRAMSpace", "yes"),
        ("ConstrainSwapSpace", "yes"),
    ]
    s = _merge(s, cluster.cgroup_conf)
    return _merge(s, overrides.cgroup_conf)


def topology_lines(cluster: Cluster) -> list[str]:
    t = cluster.topology
    if t.kind == "tree":
        lines = []
        for sw in t.switches:
            if sw.nodes:
                lines.append(f"SwitchName={sw.name} Nodes={sw.nodes}")
            else:
                lines.append(f"SwitchName={sw.name} Switches={sw.switches}")
        return lines
    if t.kind == "block":
        lines = [f"BlockName={b.name} Nodes={b.nodes}" for b in t.blocks]
        if t.block_sizes:
            lines.append("BlockSizes=" + ",".join(str(s) for s in t.block_sizes))
        return lines
    return []


def generate(
    cluster: Cluster,
    *,
    version: str | None = None,
    conf_dir: str = "/etc/slurm",
    overrides: Overrides | None = None,
    templates: str | None = None,
) -> dict[str, str]:
    """Render every file for ``cluster``. Keys are file names relative to the config directory."""
    ov = overrides or Overrides()
    ver = version or cluster.slurm_version
    env = environment("conf_templates", templates)
    header = header_line(cluster.source_sha256)
    settings = _merge(slurm_conf_settings(cluster, ver, conf_dir), ov.slurm_conf)
    nodesets, parts = partition_lines(cluster)
    ctx = {
        "header": header,
        "slurm_version": ver,
        "settings": settings,
        "nodes": node_lines(cluster, ov),
        "nodesets": nodesets,
        "partitions": parts,
        "gres": gres_lines(cluster, ov),
        "cgroup": cgroup_settings(cluster, ver, ov),
        "topology": topology_lines(cluster),
    }
    files = {
        "slurm.conf": env.get_template("slurm.conf.j2").render(ctx),
        "gres.conf": env.get_template("gres.conf.j2").render(ctx),
        "cgroup.conf": env.get_template("cgroup.conf.j2").render(ctx),
    }
    if cluster.topology.kind != "none":
        files["topology.conf"] = env.get_template("topology.conf.j2").render(ctx)
    if cluster.hooks.prolog or cluster.hooks.epilog or cluster.hooks.healthcheck_interval:
        for kind in ("prolog", "epilog", "health"):
            files[f"slurmkit-{kind}"] = env.get_template("hook-wrapper.sh.j2").render(
                header=header, command=cluster.hooks.command, kind=kind, inventory=f"{conf_dir}/slurmkit.yaml"
            )
    return files


EXECUTABLE_FILES = frozenset({"slurmkit-prolog", "slurmkit-epilog", "slurmkit-health"})
