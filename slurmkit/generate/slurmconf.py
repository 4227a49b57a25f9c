"""Inventory model -> Slurm config files. Pure: returns ``{filename: text}``; writing is a separate step.

Version-specific behaviour is looked up in ``slurmkit.generate.versions`` only. What each file gets and why
is in shared/reference/config-anchors.md §5 (recommended GPU settings per release).
"""

from __future__ import annotations

import difflib
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import yaml

from slurmkit import hostlist
from slurmkit.errors import InventoryError, UsageError
from slurmkit.generate import confparse as cp
from slurmkit.generate.versions import SlurmFeatures, features_for
from slurmkit.model import yamlio
from slurmkit.model.cluster import (
    REPEATABLE_SLURM_KEYS,
    Accounting,
    Cluster,
    MigInstance,
    NodeGroup,
    Partition,
    Runtime,
    cpus_per_device,
    mig_gres_type,
)
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
    source: str | None = None  # the overlay file, named in errors
    # slurmdbd.conf keys (StoragePass above all: the password stays out of the shared inventory; the lab's paths)
    slurmdbd_conf: tuple[tuple[str, str], ...] = ()
    # acct_gather.conf keys that are secrets (EnergyIPMIPassword, ProfileInfluxDBPass): the site's, never the inventory's
    acct_gather_conf: tuple[tuple[str, str], ...] = ()


def check_overrides(cluster: Cluster, ov: Overrides, version: str) -> None:
    """What an overlay names must exist: a ``node_params`` group the inventory lacks would be dropped silently
    (the NodeAddr or Port it carries never written), and a ``slurm_conf`` key the release lacks is refused like
    the inventory's own (with a did-you-mean), against the overlay's key path rather than a generated line."""
    names = [g.name for g in cluster.node_groups]
    for g in ov.node_params:
        if g not in names:
            close = difflib.get_close_matches(g, names, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else f"; node groups: {', '.join(names)}"
            raise InventoryError(f"node_params.{g}", f"no node group {g!r} in the inventory{hint}", ov.source)
    for k, _v in ov.slurm_conf:
        try:
            _check_known_key(k, version)
        except InventoryError as exc:
            raise InventoryError(exc.path, exc.message, ov.source) from None


# Keys whose value is a comma list of independent options: a site's value is merged into ours item by item (an
# item `name=value` replaces ours of the same name; `-name` drops one of ours), so that setting, say, bf_* tuning
# in SchedulerParameters cannot silently drop nohold_on_prolog_fail, nor a PrologFlags=X drop Alloc.
LIST_KEYS = frozenset({
    "SchedulerParameters", "SlurmctldParameters", "SlurmdParameters", "PrologFlags", "LaunchParameters",
    "CommunicationParameters", "DebugFlags", "PriorityFlags", "AccountingStorageTRES", "JobSubmitPlugins",
    "AccountingStorageEnforce", "PreemptParameters",
})

REPEATABLE_KEYS = REPEATABLE_SLURM_KEYS  # several lines each, order kept (model/cluster.py)
_REPEATABLE_LOWER = frozenset(k.lower() for k in REPEATABLE_KEYS)
_LIST_LOWER = frozenset(k.lower() for k in LIST_KEYS)


def _merge_list(ours: str, theirs: str) -> str:
    items: dict[str, str] = {}
    for item in (x.strip() for x in ours.split(",")):
        if item:
            items[item.split("=", 1)[0].lower()] = item
    for item in (x.strip() for x in theirs.split(",")):
        if not item:
            continue
        if item.startswith("-"):
            items.pop(item[1:].split("=", 1)[0].lower(), None)
        else:
            items[item.split("=", 1)[0].lower()] = item
    return ",".join(items.values())


def _merge(base: list[tuple[str, str]], extra: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Keys of ``extra`` replace those of ``base`` in place (new ones go last); an empty value deletes.
    Keys match case-insensitively, as Slurm reads them. ``LIST_KEYS`` merge item by item (see above).

    A key Slurm accepts on several lines (``REPEATABLE_KEYS``: SlurmctldHost, Prolog, ...) keeps every line in
    order: ``extra``'s lines for it replace all of ``base``'s, at the first one's place, so two controllers stay
    two ``SlurmctldHost=`` lines (the first is the primary) through every merge.
    """
    slots: list[list] = []  # [key as written, [values]] in output order
    index: dict[str, list] = {}
    for k, v in base:
        lk = k.lower()
        if lk in index and lk in _REPEATABLE_LOWER:
            index[lk][1].append(v)
        elif lk in index:
            index[lk][1] = [v]
        else:
            index[lk] = [k, [v]]
            slots.append(index[lk])
    grouped: dict[str, tuple[str, list[str]]] = {}
    for k, v in extra:
        lk = k.lower()
        if lk in grouped and lk in _REPEATABLE_LOWER:
            grouped[lk][1].append(v)
        else:
            grouped[lk] = (k, [v])
    for lk, (k, vals) in grouped.items():
        vals = [v for v in vals if v != ""] if len(vals) > 1 else vals
        if lk not in index:
            index[lk] = [k, [_merge_list("", v) if lk in _LIST_LOWER else v for v in vals]]
            slots.append(index[lk])
        elif lk in _LIST_LOWER and vals != [""]:
            index[lk][1] = [_merge_list(index[lk][1][-1], vals[-1])]
        else:
            index[lk][1] = vals
    return [(k, v) for k, vals in slots for v in vals if v != ""]


def _group_path(cluster: Cluster, g: NodeGroup) -> str:
    return f"node_groups[{cluster.node_groups.index(g)}]"


def _gpu_types(g: NodeGroup) -> list[tuple[str, int]]:
    """(Slurm GRES type, count) per node, in first-seen order: whole GPUs and MIG devices by profile."""
    assert g.gpus is not None
    return g.gpus.gres_types()


def mig_type(gpu_type: str, inst: MigInstance) -> str:
    return mig_gres_type(gpu_type, inst)


def _gres_types(cluster: Cluster) -> list[str]:
    types: set[str] = set()
    for g in cluster.node_groups:
        if g.gpus:
            types.add("gpu")
            if g.gpus.shards:
                types.add("shard")
    return sorted(types)


def _tres(cluster: Cluster) -> list[str]:
    """AccountingStorageTRES: gres/gpu plus each type, so sacct/sreport can tell H100 from L40S hours."""
    out = [f"gres/{t}" for t in _gres_types(cluster)]
    typed: list[str] = []
    for g in cluster.node_groups:
        if g.gpus:
            typed += [f"gres/gpu:{t}" for t, _ in _gpu_types(g)]
    return out + sorted(set(typed))


def _node_gres(g: NodeGroup) -> str:
    if not g.gpus:
        return ""
    parts = [f"gpu:{t}:{n}" for t, n in _gpu_types(g)]
    if g.gpus.shards:
        parts.append(f"shard:{g.gpus.shards}")
    return ",".join(parts)


def check_supported(cluster: Cluster, feats: SlurmFeatures) -> None:
    """Refuse what the target release lacks, naming the inventory key (block topology on 22.05, ...)."""
    v = feats.version
    if cluster.topology.kind == "block" and not feats.block_topology:
        key = "topology.rail_optimized.plugin" if cluster.topology.rail_units else "topology.blocks"
        raise InventoryError(key, f"block topology needs Slurm >= 23.11, target is {v}")
    if cluster.topology.kind in ("ring", "torus3d") and not feats.ring_torus:
        key = "topology.rings" if cluster.topology.kind == "ring" else "topology.toruses"
        raise InventoryError(key, f"topology/{cluster.topology.kind} needs Slurm >= 26.05 (topology.yaml), target is {v}")
    for g in cluster.node_groups:
        if g.gpus and g.gpus.autodetect == "nvidia" and not feats.autodetect_nvidia:
            raise InventoryError(
                f"{_group_path(cluster, g)}.gpus.autodetect", f"AutoDetect=nvidia needs Slurm >= 24.11, target is {v}"
            )
        # release.SlurmFeatures.gres_autodetect_full / gres_env_uuid (gres.conf(5) of slurm-26-05-0-0rc1)
        if g.gpus and g.gpus.autodetect == "full" and not feats.gres_autodetect_full:
            raise InventoryError(f"{_group_path(cluster, g)}.gpus.autodetect", f"AutoDetect=full needs Slurm >= 26.05, "
                                 f"target is {v} (slurmd logs 'unknown autodetect flag' and detects nothing)")
        if g.gpus and g.gpus.env_uuid:
            where = f"{_group_path(cluster, g)}.gpus.env_uuid"
            if not feats.gres_env_uuid:
                raise InventoryError(where, f"Flags=env_uuid needs Slurm >= 26.05, target is {v} (older slurmd "
                                            "ignores the word: CUDA_VISIBLE_DEVICES stays indexes)")
            if g.gpus.autodetect == "off":
                # gres.conf(5) 26.05 env_uuid: "Requires the use of AutoDetect so that UUIDs are available"
                raise InventoryError(where, "Flags=env_uuid needs an autodetect mode (nvml, nvidia or full): without "
                                            "one slurmd knows no UUIDs and falls back to indexes (gres.conf(5))")
    for k, _ in cluster.cgroup_conf:
        if k in feats.removed_cgroup_keys and not _adopted_defunct(cluster, k, v):
            raise InventoryError(f"cgroup_conf.{k}", f"{k} was removed before Slurm {v}; slurmd would refuse to start")
    for k, val in cluster.slurm_conf:
        if (k, val) in feats.removed_slurm_values:
            raise InventoryError(f"slurm_conf.{k}", f"{k}={val} is not available in Slurm {v}")
    for k, _val in cluster.slurm_conf:
        _check_known_key(k, v)
    seen: set[str] = set()
    for k, _val in cluster.slurm_conf:
        lk = k.lower()
        if lk in seen and lk not in {r.lower() for r in feats.repeatable_keys}:
            raise InventoryError(f"slurm_conf.{k}", f"Slurm {v} reads {k} from one line only (several from 24.05)")
        seen.add(lk)
    if not cluster.partitions and not feats.no_partitions_ok:
        raise InventoryError("partitions", f"at least one partition is needed: slurmctld {v} exits with 'No "
                             "PartitionName information available!' (fatal until 23.02.6)")
    for g in cluster.node_groups:
        if g.gpus:
            _check_autodetect(cluster, g, v)
    for i, p in enumerate(cluster.partitions):
        if p.exclusive == "topo" and not feats.exclusive_topo:
            raise InventoryError(f"partitions[{i}].exclusive", f"topo needs Slurm >= 24.05 (PartitionName "
                                                               f"ExclusiveTopo, slurm.conf(5)), target is {v}")
    _check_blocks(cluster, feats)
    for i, sw in enumerate(cluster.topology.switches):
        if feats.max_switch_name and len(sw.name) > feats.max_switch_name:
            raise InventoryError(f"topology.switches[{i}].name", f"{len(sw.name)} characters; Slurm {v} refuses a switch "
                                 f"name longer than {feats.max_switch_name} (fatal to the topology/tree parse)")


def _adopted_defunct(cluster: Cluster, key: str, version: str) -> bool:
    """An adopted site may keep a cgroup.conf key its release reads as defunct (23.11+ CgroupAutomount: cgroup.c
    _defunct_option logs an error line and ignores it, src/interfaces/cgroup.c at slurm-24-11-5-1): slurmd starts,
    so its files are carried as they are and `conf validate` warns. A new inventory is refused it (no effect)."""
    from slurmkit.generate.validate import cgroup_keys

    return cluster.adopted and key.lower() in cgroup_keys(version)[1]


def _check_known_key(key: str, v: str) -> None:
    """Refuse a slurm_conf key release ``v`` does not parse (fatal "Parsing error at unrecognized key"), with a
    did-you-mean from that release's key list (``slurmkeys``) and, for a key of another release, which."""
    from slurmkit.generate import slurmkeys
    from slurmkit.model.cluster import SUPPORTED_SLURM_VERSIONS

    if key.lower() in slurmkeys.slurm_conf_keys(v):
        return
    known = slurmkeys.all_spellings(v)
    close = difflib.get_close_matches(key.lower(), [k.lower() for k in known], n=1, cutoff=0.75)
    hint = f"; did you mean '{slurmkeys.spelled(close[0])}'?" if close else ""
    elsewhere = [r for r in SUPPORTED_SLURM_VERSIONS if key.lower() in slurmkeys.slurm_conf_keys(r)]
    if elsewhere:
        hint += f" ({slurmkeys.spelled(key)} is a key of Slurm {elsewhere[0]}-{elsewhere[-1]} only)"
    raise InventoryError(f"slurm_conf.{key}", f"Slurm {v} has no slurm.conf key {key!r} (its parser would stop with "
                                              f"'unrecognized key'){hint}")


def _check_autodetect(cluster: Cluster, g: NodeGroup, v: str) -> None:
    """AutoDetect combinations Slurm cannot honour (gres.shtml of each release), refused with the key path.

    - nvml + MIG: "The sanity-check AutoDetect mode is not supported for MIGs" (gres.shtml, 22.05-25.11), and
      slurmkit always writes explicit lines: refused.
    - nvidia (24.11+): "doesn't detect MIGs or NVlinks" (gres.shtml 24.11-25.11): MIG refused; Links= refused
      too (the detected GPU has none, so slurmd drops it as mismatching).
    - nvml + ``links: nvlink`` (an NVSwitch system): NVML counts a link only when its remote PCI device is another
      GPU (gpu_nvml.c _nvml_get_nvlink_info, 22.05-25.11), and behind NVSwitch it never is, so it reports no
      links: adapted, not refused -- those lines get no Links= (``gres_lines``). A links matrix (direct NVLink
      bridges, which NVML does see) is kept.
    """
    assert g.gpus is not None
    gp = g.gpus
    where = f"{_group_path(cluster, g)}.gpus.autodetect"
    # full tries NVML first, then the others (gres.conf(5) of slurm-26-05-3-1): judged as nvml
    if gp.autodetect in ("nvml", "full") and gp.mig_layout:
        raise InventoryError(where, f"refused: AutoDetect={gp.autodetect} cannot sanity-check MIG devices (gres.shtml, Slurm {v}); "
                                    "use autodetect: off (slurmkit writes the MIG lines)")
    if gp.autodetect == "nvidia" and gp.mig_layout:
        raise InventoryError(where, f"refused: AutoDetect=nvidia does not detect MIG devices (gres.shtml, Slurm {v}); "
                                    "use autodetect: off")
    if gp.autodetect == "nvidia" and gp.links != "none":
        raise InventoryError(where, f"refused: AutoDetect=nvidia does not detect NVLinks (gres.shtml, Slurm {v}), so "
                                    "slurmd would drop GPUs whose Links= mismatch; use autodetect: nvml or off, or links: none")


def _check_blocks(cluster: Cluster, feats: SlurmFeatures) -> None:
    """Block sizes each release's topology/block plugin enforces (see ``SlurmFeatures.block_size_rule``)."""
    t = cluster.topology
    if t.kind != "block":
        return
    names: dict[str, int] = {}
    for i, b in enumerate(t.blocks):
        # "Block (%s) has already been defined" is fatal (topology_block.c 23.11, block_record.c 24.05-25.11)
        if b.name in names:
            raise InventoryError(f"topology.blocks[{i}].name", f"block {b.name!r} is already defined at "
                                                               f"topology.blocks[{names[b.name]}]")
        names[b.name] = i
    rule = feats.block_size_rule
    if rule == "none" or not t.blocks:
        return
    counts = [hostlist.count(b.nodes) for b in t.blocks]
    if rule == "equal":
        base = counts[0]
        for i, n in enumerate(counts):
            if n != base:
                raise InventoryError(f"topology.blocks[{i}].nodes", f"has {n} nodes but blocks[0] has {base}; Slurm "
                                     f"{feats.version} needs every block the same size (equal sizes until 24.05)")
        if t.block_sizes and t.block_sizes[0] != base:
            raise InventoryError("topology.block_sizes", f"Slurm {feats.version} has no BlockSizes: its base block is "
                                 f"the {base}-node block, so block_sizes must start at {base}")
        return
    base = t.block_sizes[0] if t.block_sizes else counts[0]
    for i, n in enumerate(counts):
        if n < base:
            raise InventoryError(f"topology.blocks[{i}].nodes", f"has {n} nodes, fewer than the base block size {base};"
                                 f" fatal to slurmctld {feats.version} (allowed from 25.05)")


NOHOLD = "nohold_on_prolog_fail"
HEALTHCHECK_TIMEOUT = 60  # slurm-26-05-3-1 src/common/read_config.h DEFAULT_HEALTH_CHECK_TIMEOUT


def adopted_settings(cluster: Cluster, version: str) -> list[tuple[str, str]]:
    """An adopted site's global keys: its name, controllers, port and state directory from the model, then its own
    keys in its order (``slurm_conf``, which may replace those) -- and nothing of slurmkit's own."""
    check_supported(cluster, features_for(version))
    s = [("ClusterName", cluster.name), *(("SlurmctldHost", h) for h in cluster.controller.hosts),
         ("SlurmctldPort", cluster.controller.ports), ("StateSaveLocation", cluster.controller.state_dir)]
    s += dynamic_settings(cluster)
    s += adopted_accounting(cluster)
    return _merge(s, cluster.slurm_conf)


def adopted_accounting(cluster: Cluster) -> list[tuple[str, str]]:
    """Where slurmctld finds slurmdbd, from ``accounting`` (the slurmdbd.conf import's DbdHost/DbdPort/DbdBackupHost):
    slurm.conf(5) AccountingStorageHost/AccountingStoragePort/AccountingStorageBackupHost (22.05, 24.11, 26.05) name
    the slurmdbd slurmctld talks to, so one accounting.port change moves both files. An import leaves the keys out
    of ``slurm_conf`` only where they say what ``accounting`` says (adopt/sidefiles.py); else they replace these."""
    a = cluster.accounting
    if a is None:
        return []
    return [("AccountingStorageHost", a.host), ("AccountingStoragePort", str(a.port)),
            *((("AccountingStorageBackupHost", a.backup_host),) if a.backup_host else ())]


def dynamic_settings(cluster: Cluster) -> list[tuple[str, str]]:
    """MaxNodeCount for a site whose nodes register themselves (``dynamic_nodes``): slurm.conf(5) MaxNodeCount
    (22.05, 24.11) "Increase MaxNodeCount to accommodate dynamically created nodes with dynamic node registrations"."""
    return [("MaxNodeCount", str(cluster.max_node_count))] if cluster.max_node_count is not None else []


def q(value: str) -> str:
    """A value as Slurm reads it back: quoted when it holds whitespace, '#' and backslashes escaped
    (parse_config.c; confparse.quote)."""
    return cp.quote(value)


def slurm_conf_settings(cluster: Cluster, version: str, conf_dir: str) -> list[tuple[str, str]]:
    if cluster.adopted:
        return adopted_settings(cluster, version)
    feats = features_for(version)
    check_supported(cluster, feats)
    s: list[tuple[str, str]] = [("ClusterName", cluster.name)]
    for h in cluster.controller.hosts:
        s.append(("SlurmctldHost", h))
    s += [
        ("SlurmctldPort", cluster.controller.ports),
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
        # MpiDefault=pmix only where the site says PMIx is there (runtime.mpi_default): slurmd and srun load the
        # plugin named, and Debian ships mpi_pmix in slurm-wlm-basic-plugins for 22.05 (bookworm) and 24.11 (trixie)
        # but not for 26.05 (unstable: no mpi_pmix*.so in the package; `srun --mpi=list` there shows none, pmi2,
        # cray_shasta), measured on the lab roots
        ("MpiDefault", cluster.runtime.mpi_default),
        ("ReturnToService", "2"),
        ("SchedulerType", "sched/backfill"),
        ("SelectType", "select/cons_tres"),
        ("SelectTypeParameters", "CR_Core_Memory"),
        ("ProctrackType", "proctrack/cgroup"),
        ("TaskPlugin", "task/cgroup,task/affinity"),
        ("JobAcctGatherType", "jobacct_gather/cgroup"),
        ("PrologFlags", "Alloc,Contain"),
        # RDMA/NCCL jobs pin memory: a job must not inherit the submit host's (login node's) small memlock limit
        # (Slurm FAQ "Why are my MPI/RDMA jobs failing ... locked memory"; slurm.conf(5), every release)
        ("PropagateResourceLimitsExcept", "MEMLOCK"),
        ("MailProg", "/bin/true"),
    ]
    if feats.switch_nvidia_imex and any(g.gpus and _is_mnnvl(g.gpus.type) for g in cluster.node_groups):
        # GB200/GB300 trays share GPU memory across an NVLink domain through IMEX channels; switch/nvidia_imex
        # hands each job its own channel (slurm.conf(5) SwitchType, 24.05+). Before 24.05 there is no plugin.
        s.append(("SwitchType", "switch/nvidia_imex"))
    gt = _gres_types(cluster)
    if gt:
        s.append(("GresTypes", ",".join(gt)))
    if cluster.accounting:
        s += [
            ("AccountingStorageType", "accounting_storage/slurmdbd"),
            ("AccountingStorageHost", cluster.accounting.host),
            ("AccountingStoragePort", str(cluster.accounting.port)),
        ]
        if cluster.accounting.backup_host:
            # slurm.conf(5) AccountingStorageBackupHost (22.05, 24.11, 26.05): "The name of the backup machine hosting
            # the accounting storage database" -- slurmctld fails over to slurmdbd there (DbdBackupHost)
            s.append(("AccountingStorageBackupHost", cluster.accounting.backup_host))
        if gt:
            s.append(("AccountingStorageTRES", ",".join(_tres(cluster))))
    else:
        s.append(("AccountingStorageType", "accounting_storage/none"))
    topo = cluster.topology.kind
    if topo == "tree":
        s.append(("TopologyPlugin", "topology/tree"))
    elif topo == "block":
        s.append(("TopologyPlugin", "topology/block"))
    elif topo in ("ring", "torus3d"):
        s.append(("TopologyPlugin", f"topology/{topo}"))
    if cluster.tenants is not None:
        s += tenant_settings(cluster)
    else:
        if cluster.policy.fairshare or cluster.policy.preemption != "none":
            s.append(("PriorityType", "priority/multifactor"))
            if cluster.policy.fairshare:
                s += [("PriorityWeightFairshare", "10000"), ("PriorityWeightAge", "1000"),
                      ("PriorityDecayHalfLife", "7-0")]
        if cluster.policy.preemption == "qos":
            s += [("PreemptType", "preempt/qos"), ("PreemptMode", "REQUEUE")]
        elif cluster.policy.preemption == "partition":
            s += [("PreemptType", "preempt/partition_prio"), ("PreemptMode", "REQUEUE")]
    if any(k == "PreemptType" for k, _v in s):
        # A preempted job gets its own --signal (gpusub: B:USR2, its checkpoint request) at preemption, and at the
        # start of a QOS's grace_time (GraceTime) rather than a bare SIGTERM (slurm.conf(5) preempt_send_user_signal
        # / PreemptParameters=send_user_signal: "In the case of a gracetime preemption the user signal will be sent
        # if the user signal has been specified and not sent, otherwise a SIGTERM will be sent to the tasks"); the
        # spelling is per release (release.py preempt_user_signal)
        s.append(feats.preempt_user_signal)
    if cluster.submit_policy is not None:
        # slurm.conf(5) JobSubmitPlugins (22.05 and 24.11): "lua" runs job_submit.lua from the directory of
        # slurm.conf (job_submit_lua.c: get_extra_conf_path("job_submit.lua")); a comma list, merged item by item
        s.append(("JobSubmitPlugins", "lua"))
    hooks = cluster.hooks
    sched = backfill_items(cluster)
    if hooks.prolog:
        s.append(("Prolog", f"{conf_dir}/slurmkit-prolog"))
        # our prolog drains a bad node and exits non-zero: Slurm then requeues the batch job, and without this it
        # requeues it *held* (Priority=0), so one bad GPU would park the job until a human releases it
        sched.insert(0, NOHOLD)
        s.append(("SchedulerParameters", ",".join(sched)))
    if hooks.epilog:
        s.append(("Epilog", f"{conf_dir}/slurmkit-epilog"))
    if hooks.prolog or hooks.epilog:
        s.append(("PrologEpilogTimeout", str(hooks.prolog_epilog_timeout)))
    if cluster.monitoring.slurm_metrics:
        # slurmctld's OpenMetrics endpoint (release.SlurmFeatures.openmetrics, 25.11+; slurm.conf(5) MetricsType:
        # "metrics/openmetrics ... the OpenMetrics based plugin"); served on SlurmctldPort, /metrics/<category>
        if not feats.openmetrics:
            raise InventoryError("monitoring.slurm_metrics", f"MetricsType=metrics/openmetrics needs Slurm >= 25.11, "
                                 f"target is {feats.version}")
        s.append(("MetricsType", "metrics/openmetrics"))
    if hooks.healthcheck_start_only:
        # HealthCheckNodeState=START_ONLY (release.SlurmFeatures.healthcheck_start_only, 25.11+): slurmd runs the
        # program when it starts, with HealthCheckInterval 0 too (slurmd.c run_script_health_check() at
        # slurm-25-11-0-1 and slurm-26-05-3-1); alone, as 26.05 refuses it combined with any other token (CYCLE too)
        if not feats.healthcheck_start_only:
            raise InventoryError("hooks.healthcheck_start_only", f"HealthCheckNodeState=START_ONLY needs Slurm >= "
                                 f"25.11, target is {feats.version} (it would read it as ANY: a check on every node)")
        s += [("HealthCheckProgram", f"{conf_dir}/slurmkit-health"), ("HealthCheckNodeState", "START_ONLY")]
    if hooks.healthcheck_interval:
        s += [
            ("HealthCheckProgram", f"{conf_dir}/slurmkit-health"),
            ("HealthCheckInterval", str(hooks.healthcheck_interval)),
            ("HealthCheckNodeState", "ANY,CYCLE"),
        ]
        if feats.healthcheck_timeout and hooks.healthcheck_interval <= HEALTHCHECK_TIMEOUT:
            # 26.05: the default timeout (60 s) must stay below the interval (release.SlurmFeatures
            # .healthcheck_timeout); a shorter interval gets the timeout just under it
            if hooks.healthcheck_interval < 2:
                raise InventoryError("hooks.healthcheck_interval", f"is {hooks.healthcheck_interval}; Slurm "
                                     f"{feats.version} needs HealthCheckTimeout (at least 1) below it: use 2 or more")
            s.append(("HealthCheckTimeout", str(hooks.healthcheck_interval - 1)))
    if sched and not hooks.prolog:
        s.append(("SchedulerParameters", ",".join(sched)))
    s += scale_settings(cluster, feats)
    s += power_settings(cluster, conf_dir, feats)
    s += dynamic_settings(cluster)
    s += runtime_settings(cluster, feats)
    return _merge(s, cluster.slurm_conf)


# acct_gather.conf(5) EnergyIPMIFrequency (22.05, 24.11, 26.05): "number of seconds between BMC access samples";
# slurm.conf(5) AcctGatherNodeFreq: "The AcctGather plugins sampling interval for node accounting ... The default
# value is 0, which disables ... node accounting" (energy of a node needs it above 0)
ENERGY_FREQUENCY = 30


def runtime_settings(cluster: Cluster, feats: SlurmFeatures) -> list[tuple[str, str]]:
    """slurm.conf lines of ``runtime:`` (each sentence from slurm.conf(5) at slurm-22-05-8-1, slurm-24-11-5-1 and
    slurm-26-05-3-1 unless a release is named)."""
    rt = cluster.runtime
    s: list[tuple[str, str]] = []
    if rt.interactive_step:
        # LaunchParameters use_interactive_step: "launching salloc will automatically start an srun process with
        # InteractiveStepOptions to launch a terminal on a node in the job allocation" -- the user's shell is on
        # the GPU node, not on the login node, and uses no resources of the job
        s.append(("LaunchParameters", "use_interactive_step"))
    if rt.reboot_program:
        # RebootProgram: "Program to be executed on each compute node to reboot it. Invoked on each node once it
        # becomes idle after the command "scontrol reboot" is executed"
        s.append(("RebootProgram", rt.reboot_program))
    if rt.tmpfs_base:
        # job_container.conf(5): "To make use of this plugin, 'PrologFlags=Contain' must also be present" (the
        # generated PrologFlags has it); the plugin's key per release: release.SlurmFeatures.namespace_type
        s.append(("NamespaceType", "namespace/tmpfs") if feats.namespace_type
                 else ("JobContainerType", "job_container/tmpfs"))
    if rt.energy == "ipmi":
        s += [("AcctGatherEnergyType", "acct_gather_energy/ipmi"), ("AcctGatherNodeFreq", str(ENERGY_FREQUENCY))]
    return s


# slurmdbd.conf(5) SlurmUser (22.05, 24.11, 26.05): "The name of the user that the slurmdbd daemon executes as ...
# This must be the same as the SlurmUser on the host running slurmctld"; slurmdbd's read_config.c refuses a file
# not owned by it ("slurmdbd.conf not owned by SlurmUser") and one whose mode is not 600 (22.05, 24.11: "should be
# 600 is %o accessible for group or others"; 26.05 also takes 640). rollout.PRIVATE_FILES writes it so.
def slurmdbd_base(acct: Accounting) -> list[tuple[str, str]]:
    """slurmdbd.conf's Key=Value pairs from ``accounting:`` alone (`conf import` reads a site's file against them)."""
    settings: list[tuple[str, str]] = [
        ("AuthType", "auth/munge"),
        ("DbdHost", acct.host),
    ]
    if acct.backup_host:
        # DbdBackupHost: "The short, or long, name of the machine where the backup Slurm Database Daemon is executed
        # ... This host must have access to the same underlying database specified by the 'Storage' options"
        settings.append(("DbdBackupHost", acct.backup_host))
    settings += [
        ("DbdPort", str(acct.port)),
        ("SlurmUser", "slurm"),
        ("PidFile", "/run/slurmdbd.pid"),
        ("LogFile", "/var/log/slurm/slurmdbd.log"),
        ("StorageType", "accounting_storage/mysql"),
        ("StorageHost", acct.storage_host),
        ("StoragePort", str(acct.storage_port)),
        ("StorageUser", acct.storage_user),
        ("StorageLoc", acct.storage_loc),
        *((f"Purge{kind}After", v) for kind, v in acct.purge),
    ]
    return settings


def slurmdbd_lines(cluster: Cluster, overrides: Overrides, version: str | None = None) -> tuple[list[str], list[str]]:
    """(comment lines, Key=Value lines) of slurmdbd.conf; empty when the inventory names no accounting.storage.
    The inventory's ``slurmdbd_conf`` (what `conf import` found beyond the model) and then the overlay's merge over
    the model's lines."""
    acct = cluster.accounting
    assert acct is not None
    settings = _merge(_merge(slurmdbd_base(acct), cluster.slurmdbd_conf), overrides.slurmdbd_conf)
    for k, _v in settings:
        _check_side_key("slurmdbd.conf", "slurmdbd_conf", k, version or cluster.slurm_version)
    notes = ["mode 600, owner SlurmUser: slurmdbd refuses anything else (src/slurmdbd/read_config.c)"]
    if not any(k.lower() == "storagepass" for k, _v in settings):
        notes.append("StoragePass: none given; set it with 'slurmdbd_conf: {StoragePass: ...}' in the site overlay "
                     "(--overrides), never in the inventory")
    return notes, [f"{k}={q(v)}" for k, v in settings]


def _check_side_key(file: str, path: str, key: str, version: str) -> None:
    """A key the release's reader of ``file`` does not know is fatal there (generate/sidekeys.py)."""
    from slurmkit.generate import sidekeys

    known = sidekeys.keys(file, version)
    if key.lower() not in known:
        close = difflib.get_close_matches(key.lower(), list(known), n=1)
        hint = f"; did you mean '{known[close[0]]}'?" if close else ""
        raise InventoryError(f"{path}.{key}", f"Slurm {version}'s {file} has no key {key!r} (its reader refuses the "
                             f"file: generate/sidekeys.py){hint}")


def plugstack_lines(cluster: Cluster) -> list[str]:
    """plugstack.conf: spank(8) (22.05, 24.11, 26.05) "required|optional plugin arguments": a required plugin that
    fails to load fails the job step (srun and slurmstepd both read it, at every step). The pyxis line, then the
    inventory's ``plugstack_conf`` lines in order ("The plugins will simply be called in order")."""
    rt = cluster.runtime
    return ([" ".join(["required", rt.pyxis, *rt.pyxis_args])] if rt.pyxis else []) + list(cluster.plugstack_conf)


def job_container_base(rt: Runtime, feats: SlurmFeatures) -> list[tuple[str, str]]:
    """job_container.conf's pairs from ``runtime.tmpfs`` alone (`conf import` reads a site's file against them)."""
    # AutoBasePath: "Set it to 'true' if directory is not pre-created before slurm startup" (job_container.conf(5),
    # 22.05, 24.11, 26.05); BasePath: "The plugin constructs a directory for each job inside this path"
    lines = [("AutoBasePath", "true"), ("BasePath", rt.tmpfs_base)]
    if feats.job_tmpfs_dirs:
        lines.append(("Dirs", ",".join(rt.tmpfs_dirs)))
    return lines


def job_container_lines(cluster: Cluster, feats: SlurmFeatures) -> list[str]:
    """job_container.conf (namespace/tmpfs reads the same file from 25.11: read_jcconf.c tmpfs_conf_file)."""
    rt = cluster.runtime
    base = rt.tmpfs_base
    if feats.job_tmpfs_dirs:
        # slurmd's read_jcconf.c (slurm-24-11-5-1, slurm-26-05-3-1): a Dirs entry that begins with BasePath (a string
        # prefix: xstrstr(token, basepath) == token) is fatal, "BasePath(%s) cannot also be in Dirs."
        clash = next((i for i, x in enumerate(rt.tmpfs_dirs) if x.startswith(base)), None)
        if clash is not None:
            raise InventoryError("runtime.tmpfs.base_path", f"{base!r} begins runtime.tmpfs.dirs[{clash}] "
                                 f"({rt.tmpfs_dirs[clash]}): slurmd refuses it (\"BasePath cannot also be in Dirs\", "
                                 "read_jcconf.c)")
    elif base in ("/tmp", "/dev/shm") or base.startswith(("/tmp/", "/dev/shm/")):
        # slurm-22-05-8-1 read_jcconf.c: BasePath /tmp, /tmp/..., /dev/shm or /dev/shm/... is fatal in slurmd, "Cannot
        # use /tmp or /dev/shm as BasePath" (seen on the lab: slurmd exits at start)
        raise InventoryError("runtime.tmpfs.base_path", f"{base!r}: Slurm {feats.version}'s slurmd refuses a BasePath "
                             "in /tmp or /dev/shm (\"Cannot use /tmp or /dev/shm as BasePath\", read_jcconf.c)")
    if not feats.job_tmpfs_dirs and set(rt.tmpfs_dirs) != {"/tmp", "/dev/shm"}:
        raise InventoryError("runtime.tmpfs.dirs", f"Slurm {feats.version} makes /tmp and /dev/shm private, fixed "
                             "(job_container.conf has no Dirs before 23.02: read_jcconf.c)")
    for k, v in cluster.job_container_conf:
        if k.lower() == "dirs" and v == "" and rt.tmpfs_dirs == ("/tmp", "/dev/shm"):
            continue  # the site's file without Dirs: Slurm's default, job_container.conf(5) 23.02+ "/tmp,/dev/shm"
        if k.lower() in ("basepath", "dirs", "nodename"):
            raise InventoryError(f"job_container_conf.{k}", "not here: runtime.tmpfs says BasePath and Dirs, and "
                                 "per-node NodeName= lines are not modelled")
    pairs = _merge(job_container_base(rt, feats), cluster.job_container_conf)
    for k, _v in pairs:
        _check_side_key("job_container.conf", "job_container_conf", k, feats.version)
    return [f"{k}={q(v)}" for k, v in pairs]


def acct_gather_base(rt: Runtime) -> list[tuple[str, str]]:
    # acct_gather.conf(5): EnergyIPMIFrequency; EnergyIPMICalcAdjustment "If set to "yes", the consumption between
    # the last BMC access sample and a step consumption update is approximated" (22.05, 24.11, 26.05)
    if rt.energy != "ipmi":
        return []
    return [("EnergyIPMIFrequency", str(ENERGY_FREQUENCY)), ("EnergyIPMICalcAdjustment", "yes")]


def acct_gather_lines(cluster: Cluster, version: str | None = None, overrides: Overrides | None = None) -> list[str]:
    """acct_gather.conf: the energy plugin's keys (``runtime.energy: ipmi``), then the inventory's
    ``acct_gather_conf`` (profile, interconnect, filesystem keys a site set) and the overlay's merged over them."""
    overrides = overrides or Overrides()
    pairs = _merge(_merge(acct_gather_base(cluster.runtime), cluster.acct_gather_conf), overrides.acct_gather_conf)
    for k, _v in pairs:
        _check_side_key("acct_gather.conf", "acct_gather_conf", k, version or cluster.slurm_version)
    return [f"{k}={q(v)}" for k, v in pairs]


# slurm.conf(5) SchedulerParameters (slurm-22-05-8-1 and slurm-24-11-5-1 alike): bf_window "Default: 1440 (1 day), Min:
# 1, Max: 43200 (30 days)"; bf_resolution "Default: 60, Min: 1, Max: 3600 (1 hour)"
BF_WINDOW_DEFAULT, BF_WINDOW_MAX = 1440, 43200
BF_RESOLUTION_DEFAULT, BF_RESOLUTION_MAX = 60, 3600
# big_sys.shtml (slurm-24-11-5-1): "Slurm administrator information specifically for clusters containing 1,024 nodes
# or more"
BIG_SYSTEM_NODES = 1024


_BRACKET = re.compile(r"\[([^\]]*)\]")


def _folded_count(hosts: str) -> int:
    """Hosts in a hostlist the loader folded (no duplicates): the product of each bracket's range sizes, summed
    over the comma items, without expanding (ClusterShell builds every name: 0.1 s for 100,000 nodes)."""
    total = 0
    for item in hostlist.split_top(hosts):
        n = 1
        for body in _BRACKET.findall(item):
            size = 0
            for r in body.split(","):
                a, _, b = r.partition("-")
                size += int(b) - int(a) + 1 if b else 1
            n *= size
        total += n if item else 0
    return total


def node_count(cluster: Cluster) -> int:
    try:
        return sum(_folded_count(g.hosts) for g in cluster.node_groups)
    except ValueError:  # a bracket that is not plain numbers: let the hostlist library count
        return sum(hostlist.count(g.hosts) for g in cluster.node_groups)


def longest_max_time_minutes(cluster: Cluster) -> int | None:
    """The largest finite partition MaxTime in minutes (None: no partition has one). An UNLIMITED partition has no
    end for the backfill planner to reach, so it does not count."""
    from slurmkit.slurmtime import parse_time_minutes

    limits = [m for p in cluster.partitions if (m := parse_time_minutes(p.max_time)) is not None]
    return max(limits) if limits else None


def backfill_items(cluster: Cluster) -> list[str]:
    """SchedulerParameters items for the backfill window (issue 20 item 5). slurm.conf(5) bf_window (22.05, 24.11):
    "A value at least as long as the highest allowed time limit is generally advisable to prevent job starvation. In
    order to limit the amount of data managed by the backfill scheduler, if the value of bf_window is increased, then
    it is generally advisable to also increase bf_resolution." So a partition MaxTime past the default day gets
    bf_window = that MaxTime (at most Slurm's 30 days), and bf_resolution grows with it so the planner keeps the
    default's 1440 time slots (7 days: 420 s; 14 days: 840 s; at most 3600). Clusters of 1,024 nodes or more also
    get bf_continue: high_throughput.shtml's starting set for busy clusters has it, and slurm.conf(5) says the
    backfill scheduler "periodically releases locks ... for what could be an extended period of time" -- without
    bf_continue each release restarts its pass from the top of the queue."""
    items: list[str] = []
    longest = longest_max_time_minutes(cluster)
    if longest is not None and longest > BF_WINDOW_DEFAULT:
        window = min(longest, BF_WINDOW_MAX)
        slots = BF_WINDOW_DEFAULT * 60 // BF_RESOLUTION_DEFAULT
        resolution = -(-window * 60 // slots)
        resolution = min(BF_RESOLUTION_MAX, -(-resolution // 60) * 60)  # whole minutes
        items += [f"bf_window={window}", f"bf_resolution={resolution}"]
    if node_count(cluster) >= BIG_SYSTEM_NODES:
        items.append("bf_continue")
    return items


def tree_width(nodes: int, feats: SlurmFeatures) -> int | None:
    """TreeWidth for a cluster of ``nodes`` on the target release, None where its default is the advised value or
    the cluster is under 1,024 nodes ("The default value will work well for most clusters", slurm.conf(5)).
    Through 23.02 slurm.conf(5) advises the square root up to 2,500 nodes and the cube root above (default 50);
    from 23.11 the default is 16 and big_sys.shtml advises the cube root (TreeWidth may not exceed 65533)."""
    if nodes < BIG_SYSTEM_NODES:
        return None
    root = 2 if feats.tree_width_default == 50 and nodes <= 2500 else 3
    width = round(nodes ** (1 / root))
    width += 1 if width ** root < nodes else 0
    width = min(width, 65533)
    return None if width == feats.tree_width_default else width


def scale_settings(cluster: Cluster, feats: SlurmFeatures) -> list[tuple[str, str]]:
    """What a cluster of 1,024 nodes or more gets from Slurm's big_sys.shtml and high_throughput.shtml (24.11's):

    - TreeWidth (``tree_width``): the slurmd message fan-out.
    - MessageTimeout=30: high_throughput.shtml "MessageTimeout: ... The default value is 10 seconds. While the
      slurmctld daemon is highly threaded, its responsiveness is load dependent. This value might need to be
      increased somewhat." 30 is slurmkit's choice of "somewhat" (a 4,096-node job's launch and epilog traffic);
      slurm.conf(5) has no upper advice.
    - JobAcctGatherFrequency=task=300: big_sys.shtml "If job accounting is required, configure the sampling interval
      to a relatively large size (e.g. JobAcctGatherFrequency=task=300)" (its sampling is noise to large jobs).
    Not taken: big_sys's select/linear (GPUs need select/cons_tres's GRES scheduling) and jobacct_gather/none (the
    per-job accounting GPU sites bill by). A site value in ``slurm_conf`` replaces any of these."""
    n = node_count(cluster)
    if n < BIG_SYSTEM_NODES:
        return []
    s: list[tuple[str, str]] = []
    width = tree_width(n, feats)
    if width is not None:
        s.append(("TreeWidth", str(width)))
    s += [("MessageTimeout", "30"), ("JobAcctGatherFrequency", "task=300")]
    return s


POWER_PROGRAMS = {"suspend": "SuspendProgram", "resume": "ResumeProgram", "resume-fail": "ResumeFailProgram"}


def node_suspend_times(cluster: Cluster, feats: SlurmFeatures) -> dict[str, int]:
    """Group name -> its own NodeName SuspendTime, for the power groups whose ``suspend_time`` differs from the
    first power group's (the global SuspendTime): only where the release has the node key (26.05,
    release.SlurmFeatures.node_suspend_time); before it ``power_settings`` refuses groups that differ."""
    groups = [g for g in cluster.node_groups if g.power is not None]
    if not groups or not feats.node_suspend_time:
        return {}
    first = groups[0].power.suspend_time  # type: ignore[union-attr]
    return {g.name: g.power.suspend_time for g in groups[1:] if g.power.suspend_time != first}  # type: ignore[union-attr]


def power_settings(cluster: Cluster, conf_dir: str, feats: SlurmFeatures | None = None) -> list[tuple[str, str]]:
    """Slurm power saving for the groups with ``power:`` (22.05 and 24.11 slurm.conf(5): "Setting SuspendTime to
    anything but INFINITE (or -1) will enable power save mode"; SuspendProgram/ResumeProgram get the nodes as one
    hostlist argument; "ResumeFailProgram ... when nodes fail to resume by ResumeTimeout"). SuspendTime,
    ResumeTimeout and SuspendTimeout are written once for the cluster, so the groups must agree on them; the nodes of
    groups without ``power:`` are kept on with SuspendExcNodes ("Specifies the nodes which are to not be placed in
    power save mode")."""
    groups = [(i, g) for i, g in enumerate(cluster.node_groups) if g.power is not None]
    if not groups:
        return []
    i0, g0 = groups[0]
    assert g0.power is not None
    for i, g in groups[1:]:
        assert g.power is not None
        for key in ("suspend_time", "resume_timeout", "suspend_timeout"):
            if key == "suspend_time" and feats is not None and feats.node_suspend_time:
                continue  # a NodeName SuspendTime per group from 26.05 (node_suspend_times)
            mine, first = getattr(g.power, key), getattr(g0.power, key)
            if mine != first:
                since = " (per node from Slurm 26.05)" if key == "suspend_time" else ""
                raise InventoryError(f"node_groups[{i}].power.{key}",
                                     f"{mine} differs from node_groups[{i0}].power.{key} ({first}): slurmkit writes it "
                                     f"once for the cluster (slurm.conf(5) SuspendTime/ResumeTimeout/SuspendTimeout)"
                                     f"{since}")
    s = [(key, f"{conf_dir}/slurmkit-{kind}") for kind, key in POWER_PROGRAMS.items()]
    s += [("SuspendTime", str(g0.power.suspend_time)), ("ResumeTimeout", str(g0.power.resume_timeout)),
          ("SuspendTimeout", str(g0.power.suspend_timeout))]
    always_on = [g for g in cluster.node_groups if g.power is None]
    if always_on:
        s.append(("SuspendExcNodes", _hosts_of(always_on)))
    return s


# Priority weights with tenants (slurm.conf(5) PriorityWeight*, 22.05 and 24.11: each factor is 0.0-1.0 times its
# weight, summed). QOS dominates (a tenant's tier: a 'high' job outranks any 'normal' one whatever its fair-share),
# fair-share orders the tenants inside a tier, age (capped by PriorityMaxAge) keeps an old job from starving and
# job size only breaks ties. Each weight is ten times the sum of those below it, so no lower factor can outweigh a
# higher one's smallest step of 0.1.
TENANT_WEIGHTS = (("PriorityWeightQOS", "100000"), ("PriorityWeightFairshare", "10000"), ("PriorityWeightAge", "1000"),
                  ("PriorityWeightJobSize", "100"))
# slurm.conf(5) AccountingStorageEnforce (22.05 and 24.11): associations (no job without an association), limits
# (GrpTRES and the other association/QOS limits; implies associations), qos (a valid QOS is required), safe (start
# a job only if its TRES-minutes limits let it finish). Without 'limits' a GPU quota is only a number in slurmdbd.
TENANT_ENFORCE = "associations,limits,qos,safe"


def tenant_settings(cluster: Cluster) -> list[tuple[str, str]]:
    """What slurm.conf needs for the tenants' accounts, quotas, QOS priorities and preemption to be enforced."""
    t = cluster.tenants
    assert t is not None
    s = [("AccountingStorageEnforce", TENANT_ENFORCE), ("PriorityType", "priority/multifactor"), *TENANT_WEIGHTS,
         # slurm.conf(5) PriorityDecayHalfLife: "half of the original value cleared at age" (7-0 = a week of history),
         # PriorityMaxAge: age at which the age factor reaches 1.0 (22.05 and 24.11)
         ("PriorityDecayHalfLife", t.decay_half_life), ("PriorityMaxAge", "7-0")]
    # Preemption with tenants, made explicit: a QOS preempt list, or policy.preemption: qos, renders preempt/qos (the
    # latter with no list anywhere too: what the inventory asks for is written, and `conf validate` warns that nothing
    # can be preempted, generate/tenantcheck.py); policy.preemption: partition renders preempt/partition_prio (the
    # loader refuses it beside preempt lists); neither: no Preempt* line, i.e. Slurm's default PreemptType=preempt/none.
    # slurm.conf(5) PreemptType=preempt/qos: "Job preemption rules are specified by Quality Of Service (QOS)"; with
    # PreemptMode=REQUEUE the preempted batch job is requeued (and restarts later); PreemptExemptTime: "minimum run
    # time for all jobs before they can be considered for preemption ... only honored for PreemptMode=REQUEUE and
    # PreemptMode=CANCEL" (22.05 and 24.11)
    if t.preempts or cluster.policy.preemption == "qos":
        s += [("PreemptType", "preempt/qos"), ("PreemptMode", "REQUEUE"),
              ("PreemptExemptTime", t.preempt_exempt_time)]
    elif cluster.policy.preemption == "partition":
        s += [("PreemptType", "preempt/partition_prio"), ("PreemptMode", "REQUEUE")]
    return s


def _is_mnnvl(gpu_type: str) -> bool:
    """Grace-Blackwell trays (gb200, gb300): multi-node NVLink domains that need IMEX channels."""
    return re.match(r"^gb\d", gpu_type.lower()) is not None


def node_lines(cluster: Cluster, overrides: Overrides, version: str | None = None) -> list[str]:
    """One NodeName line per distinct node shape: groups whose parameters are identical share a line,
    so slurm.conf grows with the number of shapes, not nodes."""
    shapes: dict[tuple[tuple[str, str], ...], list[NodeGroup]] = {}
    own_suspend = node_suspend_times(cluster, features_for(version or cluster.slurm_version))
    for g in cluster.node_groups:
        if cluster.adopted:
            shapes.setdefault(tuple(_adopted_node_params(g, overrides)), []).append(g)
            continue
        params: list[tuple[str, str]] = [
            ("CPUs", str(g.cpu.cpus)),
            ("Sockets", str(g.cpu.sockets)),
            ("CoresPerSocket", str(g.cpu.cores_per_socket)),
            ("ThreadsPerCore", str(g.cpu.threads_per_core)),
            ("RealMemory", str(g.real_memory_mb)),
        ]
        # the OS reserve is MemSpecLimit/CoreSpecCount, never a blanket RealMemory factor (anchors §4.8)
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
        # slurm.conf(5) State=CLOUD (22.05, 24.11): "the node exists in a cloud ... it will be powered down and
        # hidden until resumed"; power-managed static nodes start UNKNOWN like any other
        params.append(("State", "CLOUD" if g.power is not None and g.power.cloud else "UNKNOWN"))
        if g.name in own_suspend:
            # slurm.conf(5) of slurm-26-05-3-1 NodeName SuspendTime: "takes precedence over the partition-level and
            # global SuspendTime settings for the specified nodes"
            params.append(("SuspendTime", str(own_suspend[g.name])))
        shapes.setdefault(tuple(params), []).append(g)
    return [
        " ".join([f"NodeName={_hosts_of(groups)}"] + [f"{k}={q(v)}" for k, v in params])
        for params, groups in shapes.items()
    ]


def _adopted_node_params(g: NodeGroup, overrides: Overrides) -> list[tuple[str, str]]:
    """An adopted group's NodeName keys: the modelled ones only where the site has them (Weight 1 and no features
    are Slurm's defaults, slurm.conf(5) 22.05 and 24.11), then the site's own keys (``slurm``), which replace them."""
    params: list[tuple[str, str]] = [
        ("CPUs", str(g.cpu.cpus)), ("Sockets", str(g.cpu.sockets)), ("CoresPerSocket", str(g.cpu.cores_per_socket)),
        ("ThreadsPerCore", str(g.cpu.threads_per_core)), ("RealMemory", str(g.real_memory_mb)),
    ]
    if g.reserve.memory_mb:
        params.append(("MemSpecLimit", str(g.reserve.memory_mb)))
    if g.reserve.cores:
        params.append(("CoreSpecCount", str(g.reserve.cores)))
    if g.gpus:
        params.append(("Gres", _node_gres(g)))
    if g.features:
        params.append(("Feature", ",".join(g.features)))
    if g.weight != 1:
        params.append(("Weight", str(g.weight)))
    params = _merge(params, g.slurm)
    return _merge(params, overrides.node_params.get(g.name, ()))


def _hosts_of(groups: list[NodeGroup]) -> str:
    """One group's hostlist is already folded (the loader folds it); only merged groups need a refold,
    which keeps 100k-node inventories from being expanded and refolded for nothing."""
    if len(groups) == 1:
        return groups[0].hosts
    return hostlist.fold(h for g in groups for h in g.hostnames)


_MEM_DEFAULTS = ("defmempercpu", "defmempernode", "defmempergpu")


def per_gpu_defaults(groups: Iterable[NodeGroup]) -> tuple[int, int]:
    """(DefCpuPerGPU, DefMemPerGPU) for a partition over ``groups``: each shape's share of its usable CPUs and
    memory per GPU (``NodeGroup.cpus_per_gpu``/``mem_per_gpu_mb``, the rule gpusub requests by), the smallest
    over the shapes, so a default-sized job fits on any node of the partition. A MIG group divides by its Slurm
    GPU devices (every MIG slice is one ``gpu``). (0, 0) when no group has GPUs.

    A shape with fewer usable CPUs than GPUs has no whole per-GPU share (0): then no CPU default at all (0), never
    1, since N GPUs x 1 CPU is more CPUs than such a node has and a whole-node GPU job (``--gres=gpu:N``) would
    never fit it (select/cons_tres counts cpus_per_gres x GPUs against the node's CPUs). The same for memory."""
    cpus, mems = [], []
    for g in groups:
        if not g.gpus:
            continue
        devices = sum(n for _t, n in _gpu_types(g))
        if devices == g.gpu_count:
            cpus.append(g.cpus_per_gpu)
            mems.append(g.mem_per_gpu_mb)
        else:
            cpus.append(cpus_per_device(g.usable_cpus, g.cpu.threads_per_core, devices))
            mems.append(g.usable_memory_mb // devices)
    if not cpus:
        return 0, 0
    return min(cpus), min(mems)


def cpu_job_mem_default(groups: Iterable[NodeGroup]) -> int:
    """DefMemPerCPU for a GPU partition over ``groups``: the usable memory per usable CPU of its leanest shape, so a
    job that names no memory and no GPU takes memory in proportion to its CPUs and leaves the GPUs their share
    (without it Slurm's default is "0 (unlimited)": a 1-CPU job takes the whole node's memory and blocks every
    free GPU there). 0 when no group has GPUs (a CPU partition keeps Slurm's default).

    It sits beside DefMemPerGPU on the same line although slurm.conf(5) calls the Def* memory options "mutually
    exclusive": both releases store both (src/common/read_config.c _parse_partitionname: DefMemPerGPU
    into job_defaults_list, DefMemPerCPU into def_mem_per_cpu; only DefMemPerNode beside DefMemPerCPU is refused,
    "DefMemPerCPU ignored"), and a job with GPUs and no --mem* drops the per-CPU default for the per-GPU one
    (src/plugins/select/cons_common/job_test.c _verify_node_state in slurm-22-05-8-1,
    src/plugins/select/cons_tres/job_test.c in slurm-24-11-5-1: "Clear default partition or system per-node memory
    limit. Rely exclusively upon the per-GRES memory limit."). The lab proves it on both releases
    (tests/integration/test_conf_lab.py)."""
    groups = list(groups)
    if not any(g.gpus for g in groups):
        return 0
    return min((g.usable_memory_mb // g.usable_cpus for g in groups if g.usable_cpus), default=0)


def partition_lines(cluster: Cluster, settings: Iterable[tuple[str, str]] = (),
                    version: str | None = None) -> tuple[list[str], list[str]]:
    """NodeSet and PartitionName lines. Each GPU partition gets DefCpuPerGPU/DefMemPerGPU from its node shapes
    (slurm.conf(5) accepts both on PartitionName lines in 22.05-25.11), and DefMemPerCPU for its CPU-only jobs
    (``cpu_job_mem_default``), unless the global ``settings`` already set a per-GPU CPU default or any memory
    default (a partition value would override the site's global one); a partition's ``extra`` overrides."""
    global_keys = {k.lower() for k, _ in settings}
    feats = features_for(version or cluster.slurm_version)
    nodesets = [" ".join([f"NodeSet={name}"] + [f"{k}={q(v)}" for k, v in pairs]) for name, pairs in cluster.nodesets]
    parts: list[str] = []
    if cluster.adopted:
        return nodesets, [_adopted_partition(cluster, p, feats) for p in cluster.partitions]
    for p in cluster.partitions:
        groups = cluster.partition_groups(p)
        ns = f"ns_{p.name}"
        if p.groups:
            nodesets.append(f"NodeSet={ns} Nodes={_hosts_of(groups)}")
        else:
            # ``nodes:`` as written (a hostlist, NodeSet names or ALL: the way dynamic nodes join partitions,
            # dynamic_nodes.shtml 22.05 and 24.11); wrapping it in a NodeSet of group hosts left "Nodes=" empty
            ns = p.nodes or ""
        kv = [("PartitionName", p.name), ("Nodes", ns), ("Default", "YES" if p.default else "NO"), ("MaxTime", p.max_time)]
        kv += _partition_limits(p, feats)
        allow = cluster.tenants.allow_qos(p.name) if cluster.tenants else ()
        if allow:
            # slurm.conf(5) AllowQos (22.05 and 24.11): "Comma-separated list of Qos which may execute jobs in the
            # partition" (root's jobs are exempt)
            kv.append(("AllowQos", ",".join(allow)))
        cpg, mpg = per_gpu_defaults(groups)
        extra_keys = {k.lower() for k, _ in p.extra}
        if cpg and "defcpupergpu" not in global_keys:
            kv.append(("DefCpuPerGPU", str(cpg)))
        if mpg and not global_keys & set(_MEM_DEFAULTS) and not extra_keys & {"defmempercpu", "defmempernode"}:
            kv.append(("DefMemPerGPU", str(mpg)))
        mpc = cpu_job_mem_default(groups)
        if mpc and not global_keys & set(_MEM_DEFAULTS) and not extra_keys & {"defmempernode"}:
            # DefMemPerNode beside it would win and log "DefMemPerCPU ignored" (read_config.c, 22.05 and 24.11)
            kv.append(("DefMemPerCPU", str(mpc)))
        kv.append(("State", "UP"))
        kv = _merge(kv, p.extra)
        parts.append(" ".join(f"{k}={q(v)}" for k, v in kv))
    return nodesets, parts


def _adopted_partition(cluster: Cluster, p: Partition, feats: SlurmFeatures) -> str:
    """An adopted site's PartitionName line: its nodes as written, the modelled keys where they differ from Slurm's
    defaults (Default=NO, MaxTime=UNLIMITED: slurm.conf(5) 22.05 and 24.11), then its own keys."""
    nodes = p.nodes or _hosts_of([cluster.group(g) for g in p.groups])
    kv = [("PartitionName", p.name), ("Nodes", nodes)]
    if p.default:
        kv.append(("Default", "YES"))
    if p.max_time != "UNLIMITED":
        kv.append(("MaxTime", p.max_time))
    kv += _partition_limits(p, feats)
    return " ".join(f"{k}={q(v)}" for k, v in _merge(kv, p.extra))


# A partition's ``exclusive`` in each release's spelling: Exclusive= from 26.05 (release.SlurmFeatures
# .partition_exclusive); before it OverSubscribe=EXCLUSIVE (whole nodes), ExclusiveUser=YES, and for topo
# OverSubscribe=EXCLUSIVE plus ExclusiveTopo=YES (24.05+): 26.05's Exclusive=TOPO sets both (read_config.c
# _parse_partitionname() at slurm-26-05-3-1: "TOPO implies NODE", max_share = 0), so the older lines mean the same.
_EXCLUSIVE_OLD = {"node": [("OverSubscribe", "EXCLUSIVE")], "user": [("ExclusiveUser", "YES")],
                  "topo": [("OverSubscribe", "EXCLUSIVE"), ("ExclusiveTopo", "YES")]}


def _partition_limits(p: Partition, feats: SlurmFeatures) -> list[tuple[str, str]]:
    """DefaultTime, PriorityTier, QOS and exclusivity where the inventory gives them (generated and adopted lines
    alike)."""
    kv = []
    if p.default_time:
        kv.append(("DefaultTime", p.default_time))
    if p.priority_tier is not None:
        kv.append(("PriorityTier", str(p.priority_tier)))
    if p.qos:
        kv.append(("QOS", p.qos))
    if p.exclusive:
        if feats.partition_exclusive:
            kv.append(("Exclusive", p.exclusive.upper()))
        else:
            kv += _EXCLUSIVE_OLD[p.exclusive]
    return kv


def _dev(path: str, prefix: str | None) -> str:
    if prefix and path.startswith("/dev/"):
        return prefix.rstrip("/") + "/" + path.removeprefix("/dev/")
    return path


def mig_cap_minors(gpu_minor: int, inst: MigInstance) -> tuple[int, int]:
    """/dev/nvidia-caps minors of a MIG device's GPU-instance and compute-instance access files.

    The driver's /proc/driver/nvidia-caps/mig-minors numbers them as: config 1, monitor 2, then per GPU
    15 GPU instances x (1 gi access + 8 ci access) = 135 minors, so gpu0/gi1/access is 12 and
    gpu0/gi1/ci0/access is 13 (matches gres.conf(5)'s MIG example).
    """
    gi_minor = 3 + gpu_minor * 135 + inst.gi * 9
    return gi_minor, gi_minor + 1 + inst.ci


def _minor(path: str) -> int:
    m = re.search(r"(\d+)$", path)
    if not m:
        raise ValueError(path)
    return int(m.group(1))


def gres_lines(cluster: Cluster, overrides: Overrides) -> list[str]:
    """Typed GPU lines with File= (Slurm drops a file-less GPU), Cores=, Links=; MIG via MultipleFiles=;
    shards spread over the GPUs with their own File= so ConstrainDevices can confine them."""
    prefix = overrides.gres_file_prefix
    lines = [" ".join(f"{k}={q(_dev(v, prefix) if k.lower() == 'file' else v)}" for k, v in rec) for rec in cluster.gres_conf]
    for g in cluster.node_groups:
        for rec in g.gres_conf:
            lines.append(" ".join([f"NodeName={g.hosts}"] + [f"{k}={q(_dev(v, prefix) if k.lower() == 'file' else v)}"
                                                            for k, v in rec]))
    for gi_, g in enumerate(cluster.node_groups):
        if not g.gpus:
            continue
        gp = g.gpus
        files = gp.file_list
        links = _links(g)
        if gp.autodetect in ("nvml", "full") and gp.links == "nvlink":
            links = None  # NVSwitch: NVML reports no GPU-to-GPU links, so Links= would mismatch (_check_autodetect)
            lines.append(f"# {g.name}: AutoDetect=nvml behind NVSwitch (links: nvlink): no Links=, NVML reports none there")
        auto = [("AutoDetect", gp.autodetect)] if gp.autodetect != "off" else []
        # a modifier flag: the default GPU environment variables stay (gres.c _parse_gres_config() at
        # slurm-26-05-3-1: "Pure modifier flags like env_uuid (GRES_CONF_UUID) let defaults ... provide vendor flags")
        uuid = [("Flags", "env_uuid")] if gp.env_uuid else []
        for i, f in enumerate(files):
            layout = gp.mig_layout[i] if gp.mig_layout else ()
            cores = [("Cores", gp.cores[i])] if gp.cores else []
            if not layout:
                kv = [("NodeName", g.hosts), *auto, ("Name", "gpu"), ("Type", gp.type), ("File", _dev(f, prefix)), *cores,
                      *uuid]
                # Links index GPUs in PCI bus order; MIG devices have no NVLink of their own
                if links and not gp.mig_layout:
                    kv.append(("Links", links[i]))
                lines.append(" ".join(f"{k}={v}" for k, v in kv))
                continue
            try:
                minor = _minor(f)
            except ValueError as exc:
                raise InventoryError(
                    f"node_groups[{gi_}].gpus.files", f"MIG needs /dev/nvidiaN device files, got {f!r}"
                ) from exc
            for inst in layout:
                gim, cim = mig_cap_minors(minor, inst)
                caps = [_dev(f"/dev/nvidia-caps/nvidia-cap{gim}", prefix), _dev(f"/dev/nvidia-caps/nvidia-cap{cim}", prefix)]
                kv = [
                    ("NodeName", g.hosts), *auto, ("Name", "gpu"), ("Type", mig_type(gp.type, inst)),
                    ("MultipleFiles", ",".join([_dev(f, prefix), *caps])), *cores, *uuid,
                ]
                lines.append(" ".join(f"{k}={v}" for k, v in kv))
        if gp.shards:
            base, extra = divmod(gp.shards, gp.count)
            for i, f in enumerate(files):
                lines.append(f"NodeName={g.hosts} Name=shard Count={base + (1 if i < extra else 0)} File={_dev(f, prefix)}")
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
        assert not isinstance(g.gpus.links, str)
        matrix = [list(r) for r in g.gpus.links]
        for i in range(n):
            matrix[i][i] = -1  # Slurm marks the device itself with -1 whatever the inventory wrote there
    return [",".join(str(v) for v in row) for row in matrix]


def cgroup_settings(cluster: Cluster, version: str, overrides: Overrides) -> list[tuple[str, str]]:
    feats = features_for(version)
    s = [
        # Slurm's own default in every release (cgroup.conf(5)): slurmd picks v1 or v2 from the host. Forcing
        # cgroup/v2 is fatal on hybrid-cgroup hosts; a site that wants it says so in cgroup_conf.
        ("CgroupPlugin", "autodetect"),
        ("ConstrainCores", "yes"),
        ("ConstrainDevices", "yes"),
        ("ConstrainRAMSpace", "yes"),
        ("ConstrainSwapSpace", "yes"),
    ]
    if feats.cgroup_job_id_paths:
        # job_<id> cgroup directories, as before 26.05: the hooks find the job of a GPU process by its cgroup
        # path (health/host.py job_of_pid); a SLUID path would leave only its environment to tell
        s.append(("CgroupJobIdPaths", "yes"))
    if cluster.adopted:
        s = []  # an adopted site's cgroup.conf is its own (Slurm's defaults where it has none)
    s = _merge(s, cluster.cgroup_conf)
    s = _merge(s, overrides.cgroup_conf)
    for k, _ in s:
        if k in feats.removed_cgroup_keys and not _adopted_defunct(cluster, k, feats.version):
            raise InventoryError(f"cgroup_conf.{k}", f"{k} was removed before Slurm {feats.version}; slurmd would refuse to start")
    return s


def topology_lines(cluster: Cluster, version: str | None = None) -> list[str]:
    """topology.conf lines. Blocks: ``BlockSizes`` from 24.05, ``BlockLevels`` (its 23.11 spelling) before."""
    t = cluster.topology
    if t.kind == "tree":
        lines = []
        for sw in t.switches:
            speed = "" if sw.link_speed is None else f" LinkSpeed={sw.link_speed}"
            if sw.nodes:
                lines.append(f"SwitchName={sw.name} Nodes={sw.nodes}{speed}")
            else:
                lines.append(f"SwitchName={sw.name} Switches={sw.switches}{speed}")
        return lines
    if t.kind == "block":
        feats = features_for(version or cluster.slurm_version)
        lines = [f"BlockName={b.name} Nodes={b.nodes}" for b in t.blocks]
        if t.block_sizes:
            if feats.block_sizes:
                lines.append("BlockSizes=" + ",".join(str(s) for s in t.block_sizes))
            else:
                lines.append("BlockLevels=" + ",".join(str(lv) for lv in block_levels(t.block_sizes)))
        return lines
    return []


def block_levels(sizes: Iterable[int]) -> list[int]:
    """23.11's BlockLevels: level L aggregates 2**L base blocks, so sizes 18,36,72 are levels 0,1,2."""
    sizes = list(sizes)
    base = sizes[0]
    out = []
    for s in sizes:
        q, r = divmod(s, base)
        if r or q & (q - 1):
            raise InventoryError("topology.block_sizes", f"{s} is not a power-of-two multiple of the base block size {base}")
        out.append(q.bit_length() - 1)
    return out


def topology_yaml(cluster: Cluster) -> str:
    """topology.yaml (25.05+): one cluster-default topology with the inventory's tree or blocks."""
    t = cluster.topology
    entry: dict[str, object] = {"topology": "default", "cluster_default": True}
    if t.kind == "tree":
        switches: list[dict[str, str]] = []
        for sw in t.switches:
            switches.append({"switch": sw.name, "nodes": sw.nodes} if sw.nodes else {"switch": sw.name, "children": sw.switches})
        entry["tree"] = {"switches": switches}
    elif t.kind == "ring":
        # topology.yaml(5) 26.05 "Ring definitions": rings: [{ring: NAME, nodes: ordered list}]
        # nodes: a hostlist string walked in the order written (ring_record.c hostlist_shift), so names are joined
        # in ring order, never folded (folding sorts)
        entry["ring"] = {"rings": [{"ring": r.name, "nodes": ",".join(r.nodes)} for r in t.rings]}
    elif t.kind == "torus3d":
        # topology.yaml(5) 26.05 "Torus3d definitions": toruses: [{name, dims: {x,y,z}, nodes, placements: [{dims}]}]
        def xyz(d: tuple[int, int, int]) -> dict[str, int]:
            return {"x": d[0], "y": d[1], "z": d[2]}

        entry["torus3d"] = {"toruses": [{"name": tr.name, "dims": xyz(tr.dims), "nodes": tr.nodes,
                                         "placements": [{"dims": xyz(p)} for p in tr.placements]} for tr in t.toruses]}
    else:
        block: dict[str, object] = {"blocks": [{"block": b.name, "nodes": b.nodes} for b in t.blocks]}
        if t.block_sizes:
            block = {"block_sizes": list(t.block_sizes), **block}
        entry["block"] = block
    return yaml.safe_dump([entry], sort_keys=False, default_flow_style=False, width=1 << 20)


def topology_notes(cluster: Cluster) -> list[str]:
    """Comment lines for the topology file: what a rail-optimized fabric became in Slurm's terms, and why."""
    t = cluster.topology
    if not t.rail_units:
        return []
    what = "block" if t.kind == "block" else "leaf switch"
    out = [f"rail-optimized fabric: each scalable unit (SU) is one {what} here. Compute HCA i of every node is cabled",
           "to rail leaf i of its SU, so every node is on every rail leaf and any two nodes of an SU are one hop apart",
           "(NVIDIA DGX SuperPOD reference architecture, Network Fabrics); Slurm puts a node in one leaf only."]
    for u in t.rail_units:
        rails = f" on {u.rails} rail leaves" if u.rails else ""
        out.append(f"SU {u.name}: {u.nodes}{rails}")
    return out


def generate(
    cluster: Cluster,
    *,
    version: str | None = None,
    conf_dir: str = "/etc/slurm",
    overrides: Overrides | None = None,
    templates: str | None = None,
) -> dict[str, str]:
    """Render every file for ``cluster``. Keys are file names relative to the config directory.

    Raises InventoryError (naming the key) for what the target release cannot express.
    """
    ov = overrides or Overrides()
    hooks = cluster.hooks.prolog or cluster.hooks.epilog or cluster.hooks.healthcheck_interval
    hooks = hooks or any(g.power is not None for g in cluster.node_groups)
    if hooks and not re.fullmatch(r"/[A-Za-z0-9_./+@%:,-]*", conf_dir):
        # Prolog=, Epilog=, HealthCheckProgram= point into conf_dir and Slurm reads them unquoted
        raise UsageError(f"config directory {conf_dir!r}: the hook paths in slurm.conf need an absolute path without "
                         "whitespace, '#', quotes or non-ASCII (--conf-dir)")
    ver = features_for(version or cluster.slurm_version).version
    feats = features_for(ver)
    if cluster.topology.block_sizes:
        block_levels(cluster.topology.block_sizes)  # the power-of-two rule holds for every release
    env = environment("conf_templates", templates)
    header = header_line(cluster.source_sha256)
    check_overrides(cluster, ov, ver)
    settings = _merge(slurm_conf_settings(cluster, ver, conf_dir), ov.slurm_conf)
    nodesets, parts = partition_lines(cluster, settings, ver)
    ctx = {
        "header": header,
        "slurm_version": ver,
        "adopted": cluster.adopted,
        "settings": [(k, q(v)) for k, v in settings],
        "nodes": node_lines(cluster, ov, ver),
        "nodesets": nodesets,
        "partitions": parts,
        "gres": gres_lines(cluster, ov),
        "cgroup": [(k, q(v)) for k, v in cgroup_settings(cluster, ver, ov)],
        "topology": topology_lines(cluster, ver),
        "topology_notes": topology_notes(cluster),
    }
    files = {
        "slurm.conf": env.get_template("slurm.conf.j2").render(ctx),
        "gres.conf": env.get_template("gres.conf.j2").render(ctx),
        "cgroup.conf": env.get_template("cgroup.conf.j2").render(ctx),
    }
    if cluster.topology.kind != "none":
        if cluster.topology.file == "topology.yaml" and not feats.topology_yaml:
            raise InventoryError("topology.file", f"topology.yaml needs Slurm >= 25.05, target is {ver}")
        if feats.topology_yaml and cluster.topology.file != "topology.conf":
            # topology.conf is ignored once topology.yaml exists (25.05+): emit only the file Slurm reads
            files["topology.yaml"] = env.get_template("topology.yaml.j2").render(ctx, body=topology_yaml(cluster).rstrip("\n"))
        else:
            files["topology.conf"] = env.get_template("topology.conf.j2").render(ctx)
    kv = env.get_template("keyvalue.conf.j2")
    # an adopted site gets these files only where its inventory carries them (`conf import` of a site that has them,
    # generate/slurmconf's own lines merged with what it found beyond them): otherwise they stay the site's
    if cluster.accounting is not None and cluster.accounting.storage:
        notes, lines = slurmdbd_lines(cluster, ov, ver)
        files["slurmdbd.conf"] = kv.render(ctx, notes=notes, lines=lines)
    rt = cluster.runtime
    if rt.pyxis or cluster.plugstack_conf:
        files["plugstack.conf"] = kv.render(ctx, notes=["pyxis (enroot containers): srun --container-image"]
                                            if rt.pyxis else [], lines=plugstack_lines(cluster))
    if rt.tmpfs_base:
        key = "NamespaceType=namespace/tmpfs" if feats.namespace_type else "JobContainerType=job_container/tmpfs"
        files["job_container.conf"] = kv.render(ctx, notes=[f"read by {key}: a private {', '.join(rt.tmpfs_dirs)} per job"],
                                                lines=job_container_lines(cluster, feats))
    if rt.energy == "ipmi" or cluster.acct_gather_conf or ov.acct_gather_conf:
        from slurmkit.generate import sidekeys

        loaded = sidekeys.acct_gather_loaded({k.lower(): v for k, v in settings})
        for k, v in (*cluster.acct_gather_conf, *ov.acct_gather_conf):
            owner = sidekeys.acct_gather_unloaded(k, loaded)
            if owner:
                raise InventoryError(f"acct_gather_conf.{k}", f"read by {owner}, which slurm.conf does not load: "
                                     "every daemon would refuse acct_gather.conf (\"Could not open/read/parse "
                                     "acct_gather.conf\", src/interfaces/acct_gather.c)", ov.source if
                                     (k, v) in ov.acct_gather_conf else None)
        files["acct_gather.conf"] = kv.render(ctx, notes=["node energy from the BMC (AcctGatherEnergyType=acct_gather_energy/ipmi)"]
                                              if rt.energy == "ipmi" else [], lines=acct_gather_lines(cluster, ver, ov))
    if cluster.submit_policy is not None:
        from slurmkit.generate.jobsubmit import job_submit_lua

        files["job_submit.lua"] = job_submit_lua(cluster, ver)
    if (cluster.hooks.prolog or cluster.hooks.epilog or cluster.hooks.healthcheck_interval
            or cluster.hooks.healthcheck_start_only):
        for kind in ("prolog", "epilog", "health"):
            files[f"slurmkit-{kind}"] = env.get_template("hook-wrapper.sh.j2").render(
                header=header, command=shlex.split(cluster.hooks.command), kind=kind,
                inventory=f"{conf_dir}/slurmkit.yaml"
            )
    if any(g.power is not None for g in cluster.node_groups):
        for kind, key in POWER_PROGRAMS.items():
            files[f"slurmkit-{kind}"] = env.get_template("power-wrapper.sh.j2").render(
                header=header, command=shlex.split(cluster.hooks.command), kind=kind, key=key,
                inventory=f"{conf_dir}/slurmkit.yaml"
            )
    return files


EXECUTABLE_FILES = frozenset({"slurmkit-prolog", "slurmkit-epilog", "slurmkit-health",
                              "slurmkit-suspend", "slurmkit-resume", "slurmkit-resume-fail"})


def load_overrides(path: str) -> Overrides:
    """A site overlay file for ``conf generate/diff/apply --overrides``: what a host needs beyond the
    inventory (paths, ports, NodeAddr), kept out of the shared inventory. Keys: ``slurm_conf`` and
    ``cgroup_conf`` and ``slurmdbd_conf`` (Key: Value; StoragePass goes here) and ``acct_gather_conf`` (its BMC or
    InfluxDB password), ``node_params`` (group: {Key: Value}), ``gres_file_prefix``."""
    from slurmkit.errors import UsageError

    try:
        with open(path) as fh:
            data = yamlio.load(fh) or {}
    except (OSError, yamlio.YAMLError) as exc:
        raise UsageError(f"{path}: cannot read overrides: {exc}") from exc
    allowed = {"slurm_conf", "cgroup_conf", "node_params", "gres_file_prefix", "slurmdbd_conf", "acct_gather_conf"}
    if not isinstance(data, dict):
        raise InventoryError("(top level)", "expected a mapping", path)
    for k in data:
        if k not in allowed:
            import difflib

            close = difflib.get_close_matches(str(k), sorted(allowed), n=1)
            raise InventoryError(str(k), "unknown key" + (f"; did you mean '{close[0]}'?" if close else ""), path)

    from slurmkit.model.load import site_pairs, site_path

    node_params = data.get("node_params") or {}
    if not isinstance(node_params, dict):
        raise InventoryError("node_params", "expected a mapping of group: {Key: Value}", path)
    return Overrides(
        slurm_conf=site_pairs(data.get("slurm_conf"), "slurm_conf", path, slurm_conf=True),
        cgroup_conf=site_pairs(data.get("cgroup_conf"), "cgroup_conf", path),
        slurmdbd_conf=site_pairs(data.get("slurmdbd_conf"), "slurmdbd_conf", path),
        acct_gather_conf=site_pairs(data.get("acct_gather_conf"), "acct_gather_conf", path),
        node_params={str(g): site_pairs(v, f"node_params.{g}", path) for g, v in node_params.items()},
        gres_file_prefix=(site_path(data["gres_file_prefix"], "gres_file_prefix", path)
                          if data.get("gres_file_prefix") else None),
        source=path,
    )
