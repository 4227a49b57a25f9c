"""The cluster model: frozen dataclasses. Everything else takes these; only ``load.py`` parses YAML."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from slurmkit import hostlist
from slurmkit.model.tenants import Tenants
from slurmkit.release import SUPPORTED_SLURM_VERSIONS  # noqa: F401 - re-exported by slurmkit.model

# slurm.conf keys Slurm reads from several lines, in order: the S_P_ARRAY entries of slurm_conf_options in
# src/common/read_config.c. SlurmctldHost in every release (the first line is the primary); Prolog, Epilog,
# PrologSlurmctld, EpilogSlurmctld from 24.05 (which release takes which: slurmkit/release.py).
REPEATABLE_SLURM_KEYS = frozenset({"SlurmctldHost", "Prolog", "Epilog", "PrologSlurmctld", "EpilogSlurmctld"})


@dataclass(frozen=True)
class CPU:
    sockets: int
    cores_per_socket: int
    threads_per_core: int = 1

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket

    @property
    def cpus(self) -> int:
        return self.cores * self.threads_per_core


@dataclass(frozen=True)
class Reserve:
    memory_mb: int = 0
    cores: int = 0


@dataclass(frozen=True)
class MigInstance:
    """One MIG device: a GPU instance (``gi``) with one compute instance (``ci``) of ``profile``.

    The ids pick the /dev/nvidia-caps minors Slurm needs in ``MultipleFiles=``; ``slurmkit discover``
    prints them (``nvidia-smi mig -lgi`` shows them too).
    """

    profile: str  # e.g. "3g.40gb"
    gi: int
    ci: int = 0


GPU_AUTODETECT_MODES = ("off", "nvml", "nvidia", "full")


@dataclass(frozen=True)
class GPUs:
    type: str
    count: int
    files: str  # hostlist-style device files, e.g. /dev/nvidia[0-7]
    memory_mb: int = 0
    cores: tuple[str, ...] = ()  # per GPU, Slurm logical core indices ("0-55"); empty = unknown
    links: str | tuple[tuple[int, ...], ...] = "none"  # "nvlink" (all-to-all), "none", or a matrix
    mig: tuple[str, ...] | None = None  # every MIG profile in use, flattened in GPU order, or None
    shards: int = 0
    # per GPU: its MIG devices (empty tuple = that GPU is not partitioned); () = no MIG at all
    mig_layout: tuple[tuple[MigInstance, ...], ...] = ()
    autodetect: str = "off"  # gres.conf AutoDetect for these nodes: off | nvml | nvidia (24.11+) | full (26.05+)
    # gres.conf Flags=env_uuid (26.05+): CUDA_VISIBLE_DEVICES carries the GPUs' UUIDs, not indexes (needs autodetect)
    env_uuid: bool = False

    @property
    def file_list(self) -> list[str]:
        return hostlist.expand(self.files)

    def gres_types(self) -> list[tuple[str, int]]:
        """(Slurm GRES type, count) per node, in first-seen order: whole GPUs by ``type``, MIG devices by profile
        (``mig_gres_type``). What gres.conf's Type= says and so what a ``gres/gpu:<type>`` TRES counts."""
        counts: dict[str, int] = {}
        for i in range(self.count):
            layout = self.mig_layout[i] if self.mig_layout else ()
            if not layout:
                counts[self.type] = counts.get(self.type, 0) + 1
            for inst in layout:
                t = mig_gres_type(self.type, inst)
                counts[t] = counts.get(t, 0) + 1
        return list(counts.items())


def mig_gres_type(gpu_type: str, inst: MigInstance) -> str:
    """``h100`` + ``3g.40gb`` -> ``h100_3g.40gb``: a substring of NVML's ``nvidia_h100_80gb_hbm3_3g.40gb``-style
    names, so the same Type works with AutoDetect=nvml acting as a sanity check."""
    return f"{gpu_type}_{inst.profile}"


@dataclass(frozen=True)
class NIC:
    name: str
    kind: str = "ib"  # ib | roce | eth
    rate_gbps: int = 0
    role: str = "compute"  # compute | storage | mgmt


POWER_PROVIDERS = ("lab", "command", "redfish", "ipmi")


@dataclass(frozen=True)
class Power:
    """A node group's on-demand power: slurmctld's SuspendProgram/ResumeProgram (slurmkit's ``power`` entry points)
    switch its nodes off after ``suspend_time`` idle seconds and on again when a job needs them, through
    ``provider``: ``lab`` (the lab's slurmd), ``command`` (a site script: ``COMMAND on|off HOST``), ``redfish``
    (the node's BMC: ``bmc`` URL with ``{host}``, system ``system``, ``credentials`` file "user:password"), ``ipmi``
    (ipmitool over IPMI v2.0 LAN to ``bmc`` host[:port] with ``{host}``, the same ``credentials``)."""

    provider: str
    suspend_time: int = 600
    resume_timeout: int = 600
    suspend_timeout: int = 60
    cloud: bool = False  # State=CLOUD: the nodes start powered off and are hidden until resumed
    command: str = ""
    bmc: str = ""
    system: str = "{host}"
    credentials: str = ""
    verify_tls: bool = True
    timeout: int = 60  # seconds one provider action may take
    # ipmi: the RMCP+ cipher suite (ipmitool -C: 17 HMAC-SHA256/AES, 3 HMAC-SHA1/AES); 0: ipmitool picks the best the
    # BMC lists in Get Channel Cipher Suites (a BMC without that command, as ipmi_sim, costs a 10 s retry per call)
    cipher_suite: int = 0


@dataclass(frozen=True)
class NodeGroup:
    name: str
    hosts: str
    cpu: CPU
    memory_mb: int
    reserve: Reserve = Reserve()
    gpus: GPUs | None = None
    nics: tuple[NIC, ...] = ()
    features: tuple[str, ...] = ()
    weight: int = 1
    power: Power | None = None  # on-demand power (Slurm power saving) for this group's nodes
    # an adopted site's own NodeName keys, written as given after the modelled ones (a key here replaces the
    # modelled one; an empty value drops it): NodeAddr, Port, State=CLOUD, Boards, TmpDisk, an untyped Gres ...
    slurm: tuple[tuple[str, str], ...] = ()
    # this group's gres.conf records that the ``gpus`` model does not hold (several types, Count without File,
    # other GRES), each a record's Key=Value pairs without NodeName; written with NodeName=<hosts>
    gres_conf: tuple[tuple[tuple[str, str], ...], ...] = ()

    @property
    def hostnames(self) -> list[str]:
        return hostlist.expand(self.hosts)

    @property
    def real_memory_mb(self) -> int:
        return self.memory_mb

    @property
    def gpu_count(self) -> int:
        return self.gpus.count if self.gpus else 0

    @property
    def usable_cpus(self) -> int:
        """CPUs (Slurm's count: hardware threads) left to jobs after ``reserve.cores`` (CoreSpecCount)."""
        return (self.cpu.cores - self.reserve.cores) * self.cpu.threads_per_core

    @property
    def usable_memory_mb(self) -> int:
        """Memory left to jobs after ``reserve.memory_mb`` (MemSpecLimit)."""
        return self.memory_mb - self.reserve.memory_mb

    @property
    def cpus_per_gpu(self) -> int:
        """Each GPU's fair share of the usable CPUs in whole cores (0 for a CPU-only group). One rule for
        DefCpuPerGPU and gpusub (``cpus_per_device``)."""
        return cpus_per_device(self.usable_cpus, self.cpu.threads_per_core, self.gpu_count)

    @property
    def mem_per_gpu_mb(self) -> int:
        """Each GPU's fair share of the usable memory in MB (0 for a CPU-only group)."""
        return self.usable_memory_mb // self.gpu_count if self.gpu_count else 0


@dataclass(frozen=True)
class Partition:
    name: str
    groups: tuple[str, ...]
    default: bool = False
    max_time: str = "UNLIMITED"
    default_time: str | None = None
    priority_tier: int | None = None
    qos: str | None = None
    extra: tuple[tuple[str, str], ...] = ()  # raw Key=Value pairs for PartitionName
    nodes: str = ""  # Nodes= as the site wrote it (any hostlist, NodeSet names, ALL); "" = the groups' hosts
    # partition-level exclusivity: None | "node" | "user" | "topo", written per release (Exclusive= from 26.05,
    # OverSubscribe=EXCLUSIVE / ExclusiveUser / ExclusiveTopo before: generate/slurmconf.py _partition_limits)
    exclusive: str | None = None


@dataclass(frozen=True)
class Switch:
    name: str
    nodes: str = ""  # hostlist of nodes (leaf switch)
    switches: str = ""  # hostlist of child switches (upper level)
    link_speed: int | None = None  # topology.conf LinkSpeed= (arbitrary units, "currently not used" by Slurm)


@dataclass(frozen=True)
class Block:
    name: str
    nodes: str


@dataclass(frozen=True)
class RailUnit:
    """One scalable unit (SU) of a rail-optimized fabric: each node's compute HCA *i* is cabled to rail leaf *i* of
    the SU, so every node of the SU is on every one of its ``rails`` leaves (NVIDIA DGX SuperPOD reference
    architecture, H100 "Network Fabrics": "Each group of 32 nodes is rail-aligned. Traffic per rail of the DGX H100
    systems is always one hop away from the other 31 nodes in a SU. Traffic between nodes, or between rails,
    traverses the spine layer"). Slurm sees the SU as one leaf switch (topology/tree) or one block
    (topology/block): a node can be in one leaf only, and within an SU every pair of nodes is one rail hop apart."""

    name: str
    nodes: str
    rails: int = 0  # rail leaves of this SU (0: not stated)


@dataclass(frozen=True)
class Ring:
    """A topology/ring ring (26.05 topology.yaml ``ring``): nodes in ring order, at most 16."""

    name: str
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class Torus:
    """A topology/torus3d torus (26.05 topology.yaml ``torus3d``): x*y*z nodes mapped x-major, and the placement
    shapes jobs may take (a job matching no placement size gets no allocation)."""

    name: str
    dims: tuple[int, int, int]
    nodes: str
    placements: tuple[tuple[int, int, int], ...]


@dataclass(frozen=True)
class Topology:
    switches: tuple[Switch, ...] = ()
    blocks: tuple[Block, ...] = ()
    block_sizes: tuple[int, ...] = ()
    rail_units: tuple[RailUnit, ...] = ()  # rail-optimized SUs; switches or blocks above are derived from them
    rings: tuple[Ring, ...] = ()
    toruses: tuple[Torus, ...] = ()
    # the file the topology goes in: "" = the release's own (topology.yaml from 25.05, topology.conf before);
    # "topology.conf" keeps an adopted site's topology.conf on 25.05+, which still reads it when no topology.yaml
    # exists (src/interfaces/topology.c topology_g_init at slurm-26-05-3-1: "ENOENT: topology.yaml absent, fall
    # through to plugrack", then get_extra_conf_path("topology.conf"))
    file: str = ""

    @property
    def kind(self) -> str:
        if self.blocks:
            return "block"
        if self.switches:
            return "tree"
        if self.rings:
            return "ring"
        if self.toruses:
            return "torus3d"
        return "none"


@dataclass(frozen=True)
class Controller:
    hosts: tuple[str, ...]
    port: int = 6817
    state_dir: str = "/var/spool/slurmctld"
    port_count: int = 1  # SlurmctldPort=LOW-HIGH: slurmctld listens on port .. port + port_count - 1

    @property
    def ports(self) -> str:
        """SlurmctldPort as slurm.conf spells it: ``6817`` or a range ``6820-6829``."""
        return str(self.port) if self.port_count == 1 else f"{self.port}-{self.port + self.port_count - 1}"


@dataclass(frozen=True)
class Accounting:
    """``accounting:``: slurmdbd (``host``, ``backup_host``: DbdHost/DbdBackupHost, and slurm.conf's
    AccountingStorageHost/AccountingStorageBackupHost) and the MariaDB/MySQL it stores in (``storage_*``). The
    database password never comes from the inventory: the site overlay's ``slurmdbd_conf: {StoragePass: ...}``.
    ``purge``: slurmdbd.conf Purge<Kind>After, e.g. (("Job", "12month"),)."""

    host: str
    port: int = 6819
    backup_host: str = ""
    storage_host: str = "localhost"
    storage_port: int = 3306
    storage_user: str = "slurm"
    storage_loc: str = "slurm_acct_db"
    purge: tuple[tuple[str, str], ...] = ()
    storage: bool = False  # the inventory has accounting.storage: slurmkit writes slurmdbd.conf


@dataclass(frozen=True)
class Runtime:
    """``runtime:``: what slurmd and srun add around a job. ``pyxis``: path of spank_pyxis.so (plugstack.conf);
    ``tmpfs_base``: job_container/tmpfs (namespace/tmpfs from 25.11) BasePath, with ``tmpfs_dirs`` private per job;
    ``energy``: none | ipmi (acct_gather.conf); ``reboot_program``: RebootProgram; ``mpi_default``: MpiDefault;
    ``interactive_step``: LaunchParameters=use_interactive_step."""

    pyxis: str = ""
    pyxis_args: tuple[str, ...] = ()
    tmpfs_base: str = ""
    tmpfs_dirs: tuple[str, ...] = ("/tmp", "/dev/shm")
    energy: str = "none"
    reboot_program: str = ""
    mpi_default: str = "none"
    interactive_step: bool = True


@dataclass(frozen=True)
class Rollout:
    """``rollout:``: how `slurmkit conf apply --execute` drives this site's daemons, each an argv run on the host
    where apply runs (the controller). ``restart_slurmd`` gets ``{nodes}`` replaced by the hostlist of the nodes
    to restart (e.g. ``pdsh -w {nodes} systemctl restart slurmd``); empty: apply refuses a plan that restarts
    slurmd. ``keep_backups``: how many ``.slurmkit-backup/`` directories a write keeps (oldest pruned)."""

    stop_slurmctld: tuple[str, ...] = ("systemctl", "stop", "slurmctld")
    start_slurmctld: tuple[str, ...] = ("systemctl", "start", "slurmctld")
    restart_slurmd: tuple[str, ...] = ()
    restart_slurmdbd: tuple[str, ...] = ("systemctl", "restart", "slurmdbd")  # run where apply runs (ssh for another host)
    keep_backups: int = 20


@dataclass(frozen=True)
class Policy:
    fairshare: bool = False
    preemption: str = "none"  # none | qos | partition


@dataclass(frozen=True)
class Hooks:
    prolog: bool = False
    epilog: bool = False
    healthcheck_interval: int = 0  # seconds; 0 = no periodic HealthCheckProgram
    # run the health check once, when slurmd starts, and never again: HealthCheckNodeState=START_ONLY (25.11+)
    healthcheck_start_only: bool = False
    command: str = "/usr/bin/slurmkit"  # how slurmd reaches slurmkit on the nodes
    prolog_epilog_timeout: int = 60
    checks: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)  # health policy, raw


SUBMIT_CHOICES = ("refuse", "allow")


@dataclass(frozen=True)
class SubmitPolicy:
    """``submit_policy:``: what the generated job_submit.lua enforces on every job (sbatch, srun, salloc, gpusub).

    ``cpus_per_gpu``/``mem_per_gpu``: None = off, 0 = auto (the partition's node shapes, the rule DefCpuPerGPU and
    DefMemPerGPU use), N = that value. ``one_leaf_max_wait_s``: how long a multi-node GPU job that fits one leaf
    switch waits for one (``--switches=1@TIME``) before Slurm places it across leaves."""

    require_time_for_gpus: bool = True
    cpus_per_gpu: int | None = 0
    mem_per_gpu: int | None = 0
    one_leaf_if_fits: bool = False
    one_leaf_max_wait_s: int = 300
    gpu_jobs_in_cpu_partitions: str = "refuse"
    cpu_jobs_in_gpu_partitions: str = "refuse"


@dataclass(frozen=True)
class Site:
    """Defaults for gpusub on this cluster (the admin's site profile)."""

    default_partition: str | None = None
    socket_ifname: str | None = None
    nccl_ib_hca_exclude: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    run_root: str | None = None


@dataclass(frozen=True)
class Capacity:
    """``capacity:``: what the site plans its GPUs for (`slurmkit report utilisation` judges against it)."""

    utilisation_target_pct: float = 92.0  # allocated / available GPU-hours the site aims for
    reserve_pct: float = 15.0  # healthy idle or powered-down capacity kept for peaks and maintenance


@dataclass(frozen=True)
class Logs:
    """``monitoring.logs:``: where `slurmkit monitor generate` ships Slurm's and slurmkit's logs (docs/logs.md)."""

    loki: str = ""  # Loki's push URL (http[s]://host:port/loki/api/v1/push): Alloy, promtail and Fluent Bit configs
    syslog: str = ""  # host:port of a central syslog collector (RFC 5424 over TCP): an rsyslog drop-in
    retention_days: int = 14  # how long the nodes keep slurmkit's and Slurm's own log files (logrotate)


@dataclass(frozen=True)
class Monitoring:
    """``monitoring:``: what `slurmkit monitor generate` scrapes and the thresholds its alert rules use."""

    node_exporter_port: int = 9100
    dcgm_exporter: str = ""  # hostlist of nodes running NVIDIA's dcgm-exporter ("" none, "all" every node)
    dcgm_exporter_port: int = 9400
    # where the prolog/epilog of the nodes dcgm_exporter names write dcgm-exporter's HPC job mapping files (the
    # directory dcgm-exporter's --hpc-job-mapping-dir names; "%n" the node's name); "" writes none
    # (slurmkit/health/dcgmmap.py: the format and the default)
    dcgm_job_mapping_dir: str = "/var/lib/dcgm-exporter/job-mapping"
    exporter: tuple[str, ...] = ()  # host:port of each `slurmkit exporter` (the controller or a login node)
    scrape_interval_s: int = 30
    gpu_temp_max_c: int = 85
    hook_slow_s: float = 10.0  # a health hook run longer than this is "slow"
    quota_pending_for_s: int = 1800  # a tenant at quota with GPU jobs pending this long
    # the exporter's user= labels (slurmkit_jobs, slurmkit_job_gpus): None (auto) publishes them unless the running
    # slurmctld's PrivateData hides other users' jobs or users (slurm.conf(5) PrivateData jobs/users); True or
    # False is the site's own decision
    per_user_labels: bool | None = None
    logs: Logs = Logs()
    # host:port of each Alertmanager prometheus.yml sends alerts to (Alertmanager listens on :9093 by default,
    # its --web.listen-address)
    alertmanager: tuple[str, ...] = ("localhost:9093",)
    # severity (critical, warning, info) -> the webhook URL alertmanager.yml's receiver for it posts to; a severity
    # without one has a receiver that notifies nobody (the alerts still show in Alertmanager's UI)
    alert_webhooks: tuple[tuple[str, str], ...] = ()
    # where the site serves docs/runbooks.md: each alert's runbook_url annotation is this + "#<alert in lower case>"
    runbook_base_url: str = "docs/runbooks.md"
    # slurmctld's own OpenMetrics endpoint (25.11+): `conf generate` sets MetricsType=metrics/openmetrics and
    # prometheus.yml scrapes it. Off by default: each scrape takes slurmctld's locks (the Metrics Guide,
    # doc/html/metrics.shtml "Performance Impact": lock contention, 60-120 s scrape intervals), and without
    # PrivateData the endpoint answers anyone who reaches slurmctld's port ("Security Considerations")
    slurm_metrics: bool = False

    def dcgm_hosts(self, hosts: list[str]) -> list[str]:
        """The nodes of ``hosts`` dcgm-exporter runs on (monitoring.dcgm_exporter), in their order."""
        if not self.dcgm_exporter:
            return []
        if self.dcgm_exporter == "all":
            return list(hosts)
        from slurmkit.hostlist import expand

        covered = set(expand(self.dcgm_exporter))
        return [h for h in hosts if h in covered]


@dataclass(frozen=True)
class Cluster:
    name: str
    slurm_version: str
    controller: Controller
    node_groups: tuple[NodeGroup, ...]
    partitions: tuple[Partition, ...] = ()
    accounting: Accounting | None = None
    topology: Topology = Topology()
    policy: Policy = Policy()
    hooks: Hooks = Hooks()
    site: Site = Site()
    submit_policy: SubmitPolicy | None = None
    slurm_conf: tuple[tuple[str, str], ...] = ()  # extra/override slurm.conf Key=Value, in order
    cgroup_conf: tuple[tuple[str, str], ...] = ()
    source_sha256: str = ""  # sha256 of the inventory text this came from
    monitoring: Monitoring = Monitoring()
    capacity: Capacity = Capacity()
    tenants: Tenants | None = None  # accounts, users, QOS (slurmdbd records; `slurmkit accounts`)
    rollout: Rollout = Rollout()
    # ``adopted: true`` (what `slurmkit conf import` writes): the site's files as they are -- no slurmkit
    # recommendation is added (per-GPU defaults, NodeSets, Constrain*, ...); `conf validate` lists them as advice
    adopted: bool = False
    nodesets: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()  # NodeSet=name and its keys, as given
    gres_conf: tuple[tuple[tuple[str, str], ...], ...] = ()  # gres.conf records for every node (no NodeName)
    # ``dynamic_nodes.max_node_count``: slurm.conf MaxNodeCount, room for nodes that register themselves
    # (``slurmd -Z``, dynamic_nodes.shtml 22.05+); such a site may have no node group at all
    max_node_count: int | None = None
    runtime: Runtime = Runtime()
    # what a site's side files hold beyond the model (`conf import` of a site whose files slurmkit wrote, or edited
    # since), merged over the generated lines as ``cgroup_conf`` is (an empty value drops a generated key):
    # slurmdbd.conf keys (never StoragePass: the site overlay's), job_container.conf and acct_gather.conf keys,
    # and plugstack.conf lines (spank(8): "required|optional plugin args" or "include GLOB") after the pyxis line
    slurmdbd_conf: tuple[tuple[str, str], ...] = ()
    job_container_conf: tuple[tuple[str, str], ...] = ()
    acct_gather_conf: tuple[tuple[str, str], ...] = ()
    plugstack_conf: tuple[str, ...] = ()

    def group(self, name: str) -> NodeGroup:
        for g in self.node_groups:
            if g.name == name:
                return g
        raise KeyError(name)

    def group_of(self, host: str) -> NodeGroup | None:
        for g in self.node_groups:
            if host in g.hostnames:
                return g
        return None

    @property
    def all_hosts(self) -> list[str]:
        out: list[str] = []
        for g in self.node_groups:
            out.extend(g.hostnames)
        return out

    def partition(self, name: str) -> Partition:
        for p in self.partitions:
            if p.name == name:
                return p
        raise KeyError(name)

    def partition_groups(self, p: Partition) -> list[NodeGroup]:
        """The node groups with nodes in partition ``p``: its groups, or those its ``nodes`` reach (slurm.conf(5)
        PartitionName Nodes: host names, NodeSet names -- a NodeSet by Nodes= or by Feature= -- or ALL)."""
        if p.groups or not p.nodes:
            return [self.group(g) for g in p.groups]
        if p.nodes.upper() == "ALL":
            return list(self.node_groups)
        sets = {name: {k.lower(): v for k, v in pairs} for name, pairs in self.nodesets}
        hosts: set[str] = set()
        features: set[str] = set()
        for name in hostlist.expand(p.nodes):
            if name in sets:
                if "nodes" in sets[name]:
                    hosts.update(hostlist.expand(sets[name]["nodes"]))
                if "feature" in sets[name]:
                    features.add(sets[name]["feature"])
            else:
                hosts.add(name)
        out = []
        for g in self.node_groups:
            feats = set(g.features) | {f for k, v in g.slurm if k.lower() in ("feature", "features") for f in v.split(",")}
            if feats & features or not hosts.isdisjoint(g.hostnames):
                out.append(g)
        return out

    @property
    def default_partition(self) -> Partition | None:
        # the last Default=YES wins, as in slurmctld (read_config.c _build_single_partitionline_info "changing
        # default partition from %s to %s", 22.05 and 24.11); only an adopted inventory can have more than one
        for p in reversed(self.partitions):
            if p.default:
                return p
        return self.partitions[0] if self.partitions else None


def cpus_per_device(usable_cpus: int, threads_per_core: int, devices: int) -> int:
    """CPUs per GPU (or MIG device): the usable cores shared out whole, times the threads of a core.

    select/cons_tres with CR_Core* (what slurmkit writes) allocates whole cores, so a per-GPU count that is not a
    multiple of ThreadsPerCore is rounded up to the next core for each GPU and the node's GPUs together need
    more cores than it has: on a 2-thread node with 7 usable cores and 2 GPUs, DefCpuPerGPU=7 (14 CPUs / 2) made
    `srun -n1 --gpus=2` fail with "Requested node configuration is not available" (lab, Slurm 22.05), and
    --cpus-per-gpu=6 runs. Fewer cores than devices: the thread share (at least one CPU each is the caller's)."""
    if devices <= 0:
        return 0
    t = max(1, threads_per_core)
    return usable_cpus // t // devices * t or usable_cpus // devices
