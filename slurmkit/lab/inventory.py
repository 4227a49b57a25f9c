"""The lab's inventory, parametrised. ``examples/lab.yaml`` is this function's default output (a test checks)."""

from __future__ import annotations

import copy
import re
from typing import Any


def _span(lo: int, hi: int) -> str:
    return str(lo) if hi <= lo else f"{lo}-{hi}"


_GPU_TYPE = re.compile(r"^[A-Za-z0-9_.-]+$")  # a gres Type= name (gres.conf(5)): no blank, '=', ':' or ','
_COUNT = re.compile(r"^[0-9]+$")  # ASCII digits only (str.isdigit also takes '²' and other scripts' digits)


def parse_gpu_type_counts(spec: str) -> list[tuple[str, int | None]]:
    """``--gpu-type`` as written: ``TYPE`` -> [(TYPE, None)], ``TYPE:NODES,...`` -> [(TYPE, NODES), ...]. ValueError
    naming the option for a bad type name, a count that is no whole number >= 1, or a type given twice (in any
    case: src/interfaces/gres.c compares type names with xstrcasecmp, e.g. l.1907 and l.8608 at slurm-24-11-5-1)."""
    items = [x.strip() for x in spec.split(",")]
    if len(items) == 1 and ":" not in items[0]:
        if not _GPU_TYPE.match(items[0]):
            raise ValueError(f"--gpu-type: {items[0]!r} is not a GPU type name (letters, digits, _ . -)")
        return [(items[0], None)]
    out: list[tuple[str, int | None]] = []
    for it in items:
        t, sep, n = it.partition(":")
        if not sep or not _COUNT.match(n) or int(n) < 1:
            raise ValueError(f"--gpu-type: {it!r} is not TYPE:NODES with NODES >= 1 (e.g. a100:2,h100:2)")
        if not _GPU_TYPE.match(t):
            raise ValueError(f"--gpu-type: {t!r} is not a GPU type name (letters, digits, _ . -)")
        if any(t.lower() == x.lower() for x, _n in out):
            raise ValueError(f"--gpu-type: type {t!r} given twice")
        if t.lower() == "gpu":  # each type gets a partition of its name beside the lab's partition `gpu`
            raise ValueError("--gpu-type: type 'gpu' would name a second partition 'gpu' (each type gets its own)")
        out.append((t, int(n)))
    return out


def gpu_types(spec: str, nodes: int) -> list[tuple[str, int]]:
    """``--gpu-type``: ``TYPE`` (every node) or ``TYPE:NODES,TYPE:NODES,...`` (that many nodes of each type, in
    order: ``a100:2,h100:2`` is node[1-2] a100, node[3-4] h100, one node group per type) -> [(type, nodes)].
    ValueError (naming the option) for what parse_gpu_type_counts refuses and when the counts do not add up to
    ``nodes``."""
    parsed = parse_gpu_type_counts(spec)
    if parsed[0][1] is None:
        return [(parsed[0][0], nodes)]
    out = [(t, n or 0) for t, n in parsed]
    if sum(n for _t, n in out) != nodes:
        raise ValueError(f"--gpu-type: {spec!r} names {sum(n for _t, n in out)} nodes, the lab has {nodes} (--nodes)")
    return out


def lab_inventory(
    nodes: int = 8,
    gpus_per_node: int = 8,
    gpu_type: str = "h100",
    nodes_per_leaf: int = 4,
    *,
    accounting: bool = False,
    hooks_command: str | None = None,
    healthcheck_interval: int = 0,
    slurm_version: str = "22.05",
    topology: str = "tree",
    submit_policy: bool = False,
    cores: int | None = None,
    power_nodes: int = 0,
    power_command: str | None = None,
    suspend_time: int = 10,
    tenants: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A small GPU cluster: ``node[1-N]``, 2 sockets x 4 cores, fake GPUs, leaves of ``nodes_per_leaf`` + a spine.

    ``topology="block"``: the same groups of ``nodes_per_leaf`` nodes as topology/block blocks ``b1``, ``b2``, ...
    (NVL72-style domains), ``block_sizes`` the base size and its doublings up to the whole cluster.

    ``cores``: that many cores instead of 2 sockets x 4 (the cgroup mode: task/cgroup writes the job's cores into a
    real cpuset, so a node may not claim CPUs the host lacks), as two sockets when even; the first half of the GPUs
    are bound (gres.conf Cores=) to the first socket, the rest to the second.
    ``submit_policy``: the generated job_submit.lua (time limit for GPU jobs, per-GPU defaults, one leaf).
    ``gpu_type`` ``a100:2,h100:2`` (see ``gpu_types``): one node group per type, each also a partition of its own
    beside ``gpu`` (all of them), so that typed quotas, untyped requests and mixed ones meet a real slurmctld."""
    types = gpu_types(gpu_type, nodes)
    gpu_type = types[0][0]
    half = max(1, gpus_per_node // 2)
    if cores:
        # gres.conf Cores= must cover whole sockets from 24.11 (src/interfaces/gres.c
        # _check_core_range_matches_sock, slurm-24-11-5-1: the node is INVAL "GRES core specification ... doesn't
        # match socket boundaries"): two sockets of half the cores each, one per GPU half (one socket if odd)
        sockets = 2 if cores >= 2 and cores % 2 == 0 else 1
        per = cores // sockets
        spans = [_span(k * per, (k + 1) * per - 1) for k in range(sockets)]
        gpu_cores = [spans[0] if i < half or sockets == 1 else spans[1] for i in range(gpus_per_node)]
        cpu = {"sockets": sockets, "cores_per_socket": per, "threads_per_core": 1}
    else:
        gpu_cores = [("0-3" if i < half else "4-7") for i in range(gpus_per_node)]
        cpu = {"sockets": 2, "cores_per_socket": 4, "threads_per_core": 1}
    leaves = []
    for i, start in enumerate(range(1, nodes + 1, nodes_per_leaf)):
        end = min(nodes, start + nodes_per_leaf - 1)
        leaves.append({"name": f"leaf{i + 1}", "nodes": f"node[{start}-{end}]" if end > start else f"node{start}"})
    inv: dict[str, Any] = {
        "cluster": "lab",
        "slurm_version": slurm_version,
        "controller": {"hosts": ["localhost"]},
        "node_groups": [
            {
                "name": gpu_type,
                "hosts": f"node[1-{nodes}]" if nodes > 1 else "node1",
                "cpu": cpu,
                "memory_mb": 32000,
                "reserve": {"memory_mb": 1000, "cores": 0},
                "gpus": {
                    "type": gpu_type,
                    "count": gpus_per_node,
                    "memory_mb": 81559,
                    "files": f"/dev/nvidia[0-{gpus_per_node - 1}]" if gpus_per_node > 1 else "/dev/nvidia0",
                    "cores": gpu_cores,
                    "links": "nvlink",
                },
                # no `nics`: the lab host has no InfiniBand, and the health hooks check the real sysfs
                "features": [gpu_type, "nvlink"],
                "weight": 10,
            }
        ],
        "partitions": [{"name": "gpu", "groups": [gpu_type], "default": True, "max_time": "1-00:00:00"}],
        "topology": {
            "switches": leaves + ([{"name": "spine", "switches": f"leaf[1-{len(leaves)}]"}] if len(leaves) > 1 else [])
        },
    }
    if len(types) > 1:
        if power_nodes:
            raise ValueError("--power takes a lab of one GPU type")
        base = inv["node_groups"][0]
        groups, first = [], 1
        for t, n in types:
            last = first + n - 1
            g = copy.deepcopy(base)
            g.update(name=t, hosts=f"node[{first}-{last}]" if last > first else f"node{first}", features=[t, "nvlink"])
            g["gpus"]["type"] = t
            groups.append(g)
            first = last + 1
        inv["node_groups"] = groups
        inv["partitions"][0]["groups"] = [t for t, _n in types]
        inv["partitions"] += [{"name": t, "groups": [t], "max_time": "1-00:00:00"} for t, _n in types]
    if len(leaves) == 1:
        inv["topology"]["switches"][0]["name"] = "leaf1"
    if topology == "block":
        blocks = [{"name": f"b{i + 1}", "nodes": leaf["nodes"]} for i, leaf in enumerate(leaves)]
        # topology.conf.5 of slurm-24-11-5-1, BlockSizes: "the planning base block size, alongside any higher-level
        # block sizes"; "Successive BlockSizes must be a power of two larger than the prior values". The lab uses
        # every doubling that fits in the cluster
        sizes = [nodes_per_leaf]
        while sizes[-1] * 2 <= nodes_per_leaf * len(blocks):
            sizes.append(sizes[-1] * 2)
        inv["topology"] = {"blocks": blocks, "block_sizes": sizes}
    elif topology != "tree":
        raise ValueError(f"lab topology must be tree or block, not {topology!r}")
    if submit_policy:
        inv["submit_policy"] = {
            "require_time_for_gpus": True,
            "cpus_per_gpu": "auto",
            "mem_per_gpu": "auto",
            "one_leaf_if_fits": topology == "tree" and len(leaves) > 1,
            "one_leaf_max_wait_s": 120,
            # the lab has GPU nodes only: its CPU-only jobs (srun hostname, the suite's probes) run there too
            "cpu_jobs_in_gpu_partitions": "allow",
        }
    if power_nodes:
        # the last power_nodes nodes are a group of their own, powered on demand by the lab provider (their slurmd)
        if not 0 < power_nodes <= nodes:
            raise ValueError(f"power_nodes must be 1..{nodes}")
        first = nodes - power_nodes + 1
        base = inv["node_groups"][0]
        burst = {**base, "name": f"{gpu_type}-burst",
                 "hosts": f"node[{first}-{nodes}]" if power_nodes > 1 else f"node{nodes}",
                 "power": {"provider": "lab", "suspend_time": suspend_time, "suspend_timeout": 5,
                           "resume_timeout": 30, "timeout": 20}}
        if power_nodes == nodes:
            inv["node_groups"] = [burst]
            inv["partitions"][0]["groups"] = [burst["name"]]
        else:
            base["hosts"] = f"node[1-{first - 1}]" if first > 2 else "node1"
            inv["node_groups"].append(burst)
            inv["partitions"][0]["groups"].append(burst["name"])
    if submit_policy:
        # the same nodes with a DefaultTime: where every partition of a GPU job has one, the job needs no --time
        inv["partitions"].append({"name": "gpu-short", "groups": list(inv["partitions"][0]["groups"]),
                                  "max_time": "1-00:00:00", "default_time": "00:30:00"})
    if accounting:
        # storage: slurmkit writes the lab's slurmdbd.conf (Lab.write_config adds its ports and paths by the overlay),
        # so every --accounting lab's slurmdbd start judges the generated file; the lab's MariaDB user is root
        inv["accounting"] = {"host": "localhost", "storage": {"host": "127.0.0.1", "user": "root"}}
        inv["tenants"] = tenants if tenants is not None else lab_tenants(nodes * gpus_per_node)
    if power_command and not hooks_command:
        inv["hooks"] = {"command": power_command}  # how slurmctld's power programs reach slurmkit
    if hooks_command:
        inv["hooks"] = {
            "prolog": True,
            "epilog": True,
            "healthcheck_interval": healthcheck_interval,
            "command": hooks_command,
            "prolog_epilog_timeout": 30,
        }
    return inv


# The lab's tenants map to Unix users every Debian host has (useradd would change the host for every lab beside
# this one): jobs run as the submitting user, so a test submits as them with `runuser -u USER -- sbatch ...`.
# Not "nobody": from 25.11 Slurm maps that name to a placeholder uid (src/common/uid.c _uid_from_string() at
# slurm-25-11-0-0rc1 and slurm-26-05-3-1: `if (!xstrcmp(name, SLURM_AUTH_NOBODY_NAME)) return SLURM_AUTH_NOBODY;`),
# so its association is created as nobody(4294967294) and its jobs are refused. games (uid 5) is in Debian's
# base-passwd on Debian 12 and 13 alike.
LAB_USERS = {"team-a": ["daemon", "bin"], "team-b": ["games"]}


def lab_tenants(total_gpus: int) -> dict[str, Any]:
    """Two teams under one organisation, each with half the lab's GPUs as its quota; QOS high preempts scavenger.
    PreemptExemptTime 0 (a site would keep minutes) so that preemption is seen at once; the fair-share half-life
    stays a site's week."""
    half = max(1, total_gpus // 2)
    return {
        "preempt_exempt_time": "0",
        "qos": [
            {"name": "high", "priority": 1000, "preempt": ["scavenger"]},
            {"name": "normal", "priority": 100},
            {"name": "scavenger", "priority": 0, "usage_factor": 0.1, "preempt_mode": "requeue"},
        ],
        "accounts": [
            {"name": "research", "children": [
                {"name": "team-a", "fairshare": 60, "gpus": half, "qos": ["normal", "high"], "default_qos": "normal",
                 "users": LAB_USERS["team-a"]},
                {"name": "team-b", "fairshare": 40, "gpus": half, "qos": ["normal", "scavenger"],
                 "default_qos": "normal", "users": LAB_USERS["team-b"]},
            ]},
        ],
        "partitions": {"gpu": {"allow_qos": ["normal", "high", "scavenger"]}},
    }


def preset_shape(preset: dict[str, Any], where: str = "preset") -> tuple[str, int, str, str]:
    """(node group name, GPUs per node, GPU type, topology kind "tree"|"block") of a site inventory (already
    loaded by ``model.load``, so its keys are known good); ValueError naming the key for what a lab cannot take."""
    groups = [g for g in preset.get("node_groups") or [] if (g.get("gpus") or {}).get("count")]
    if len(groups) != 1:
        raise ValueError(f"{where}: node_groups: a lab from a preset takes exactly one GPU node group, "
                         f"this one has {len(groups)}")
    g = groups[0]
    topo = preset.get("topology") or {}
    block = topo.get("blocks") or (topo.get("rail_optimized") or {}).get("plugin") == "block"
    return g["name"], int(g["gpus"]["count"]), str(g["gpus"].get("type") or g["name"]), "block" if block else "tree"


def lab_from_preset(preset: dict[str, Any], nodes: int, nodes_per_leaf: int, **lab: Any) -> dict[str, Any]:
    """The lab's inventory shaped after a site inventory (``examples/gb200-nvl72.yaml``), scaled to the lab: its
    GPU node group as it is (CPU geometry, memory, reserve, GPUs with files/cores/links, features, weight; the
    lab's ``SlurmdParameters=config_overrides`` lets one host run nodes bigger than itself), its partitions, its
    cluster name, and its topology kind with its first blocks (or leaves) cut to ``nodes_per_leaf`` nodes each.
    Node names are the lab's ``node1..N`` (the lab starts one slurmd per ``nodeI`` on its own port); block names
    are the preset's. NICs and the site's hooks are left out (the lab host has no InfiniBand; ``lab`` kwargs
    decide accounting and hooks as for ``lab_inventory``)."""
    gname, _gpus, _gtype, kind = preset_shape(preset)
    base = lab_inventory(nodes, nodes_per_leaf=nodes_per_leaf, topology=kind, **lab)
    group = dict(next(g for g in preset["node_groups"] if g["name"] == gname))
    group.pop("nics", None)
    group["hosts"] = base["node_groups"][0]["hosts"]
    base["cluster"] = preset.get("cluster", base["cluster"])
    base["node_groups"] = [group]
    parts = [dict(p, groups=[gname]) for p in preset.get("partitions") or [] if gname in (p.get("groups") or [gname])]
    if parts:
        base["partitions"] = parts
    if kind == "block":
        topo = preset["topology"]
        names = [b["name"] for b in topo.get("blocks") or topo["rail_optimized"]["units"]]
        for i, b in enumerate(base["topology"]["blocks"]):
            if i < len(names):
                b["name"] = names[i]
    return base
