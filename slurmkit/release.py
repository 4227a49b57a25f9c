"""Facts about Slurm releases that every layer may need (no imports from the rest of slurmkit): the model, the
generator, the backend, the lab and the edges all read them here, none has to climb to another layer for them.

How to spell a release; which releases slurmkit targets; what each release's config accepts and does
(``features_for``; ``generate/versions.py`` is a view of it for the generator); where a lab gets a release the
host does not have (the Debian suite that packages it); which slurmctld can judge which target (the real parse).

Everything that differs between Slurm releases, in one place.

Sources (SchedMD/slurm release branches, see shared/reference/config-anchors.md §5): topology/block came in
23.11 with ``BlockLevels``, which 24.05 replaced by ``BlockSizes``; topology.yaml arrived in 25.05 (and makes
topology.conf ignored); ``AutoDetect=nvidia`` in 24.11; CgroupAutomount/Kmem* were removed in 23.11 and
CgroupReleaseAgentDir is fatal since 22.05; select/cons_res was removed in 23.11; ``scontrol reconfigure``
restarts the daemons (keeping the old config on failure) from 23.11; nodes can be added with a reconfigure
from 24.11.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# what slurmkit renders configs for (inventory `slurm_version`, `--slurm-version`)
SUPPORTED_SLURM_VERSIONS = ("22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "25.11", "26.05")

# Debian suites that ship a Slurm release as `slurmctld`/`slurmd`/`slurm-client`/`slurmdbd` packages:
# bookworm (Debian 12) ships 22.05.8, trixie (Debian 13) ships 24.11.5, unstable (sid) ships 26.05.5
# (packages.debian.org, source `slurm-wlm`; unstable's Packages: "Package: slurmctld ... Version: 26.05.5-1").
DEBIAN_SUITES: dict[str, str] = {"22.05": "bookworm", "24.11": "trixie", "26.05": "unstable"}
# suites whose Release file carries a Valid-Until date (Debian's unstable and testing; stable suites have none):
# a snapshot mirror serves it past that date, so apt must be told not to check it (apt.conf(5),
# Acquire::Check-Valid-Until)
ROLLING_SUITES = frozenset({"unstable", "sid", "testing"})

_RELEASE = re.compile(r"(\d{2})\.(\d{2})")


def release_of(version: str) -> str:
    """``"slurm-wlm 24.11.5"`` / ``"24.11.5"`` / ``"24.11"`` -> ``"24.11"``; ValueError for anything else."""
    m = _RELEASE.search(version)
    if not m:
        raise ValueError(f"not a Slurm version: {version!r}")
    return f"{m.group(1)}.{m.group(2)}"


def release_key(release: str) -> tuple[int, int]:
    a, b = release_of(release).split(".")
    return int(a), int(b)


def scontrol_json(release: str) -> bool:
    """``scontrol --json show node|job|partition`` exists from 23.02 (scontrol.1 of slurm-23-02-7-1: "Formats
    information from the show command as JSON ... implicitly sets the --details option"; absent in 22.05's)."""
    return release_key(release) >= (23, 2)


# slurmctld reads gres.conf through 23.02: read_config.c's _gres_reconfig() parses it (gres_parse_config_dummy()
# where it does not load it), so an unknown key is an error line there. slurm-23-11-0-1 removed that call
# (SchedMD commit b9831861a1 "Remove usage of now unneeded gres_parse_config_dummy()"): from 23.11 only slurmd
# reads gres.conf, and only `slurmd -G` (slurmd.c _print_gres() after gres_init()) judges it without a node.
def slurmctld_reads_gres_conf(release: str) -> bool:
    return release_key(release) < (23, 11)


# A partition's AllowQOS/DenyQOS naming a QOS slurmctld does not know (none yet in slurmdbd, or no slurmdbd) is
# fatal from 25.11: src/slurmctld/read_config.c _build_single_partitionline_info() at slurm-25-11-0-1 and
# slurm-26-05-3-1 `fatal("Partition %s has an invalid AllowQOS (%s), please check your configuration")` when
# qos_list_build() fails; at slurm-24-11-5-1 (and through 25.05) the result of qos_list_build() is ignored (an
# error line, "We have no QOS on the system"). So from 25.11 the QOS must exist in slurmdbd before slurmctld
# (re)starts with a config that names them.
def allow_qos_fatal(release: str) -> bool:
    return release_key(release) >= (25, 11)


def judge_floor(release: str) -> str:
    """The oldest target release whose config a slurmctld of ``release`` can judge without false findings:
    23.11 removed what older configs may hold and newer daemons refuse (select/cons_res, cgroup.conf's
    CgroupAutomount and Kmem keys: slurm-23-11-0-1 RELEASE_NOTES), so a 23.11+ slurmctld judges 23.11+ only.
    25.05 removed FrontendName (read_config.c slurm_conf_options[] at slurm-25-05-0-1) and topology/3d_torus
    (src/plugins/topology/), 25.11 removed AccountingStorageLoc and the job_container plugins (NamespaceType's
    namespace/tmpfs replaces them: src/plugins/ at slurm-25-11-0-1), so a 25.11+ slurmctld judges 25.11+ only:
    a 26.05 slurmctld judges 25.11 configs (26.05 removed no slurm.conf key and no plugin a slurm.conf names:
    slurm_conf_options[] and src/plugins/ at slurm-26-05-3-1; the keys it added are refused for a 25.11 target
    by the static check, generate/slurmkeys.py), not 25.05 ones."""
    k = release_key(release)
    return "25.11" if k >= (25, 11) else "23.11" if k >= (23, 11) else "22.05"


def judges(judge: str, target: str) -> bool:
    """A slurmctld of release ``judge`` can real-parse a config for ``target``: not newer than itself (it would
    reject keys and plugins it does not know) and not older than its floor (``judge_floor``)."""
    return release_key(judge_floor(judge)) <= release_key(target) <= release_key(judge)


@dataclass(frozen=True)
class SlurmFeatures:
    version: str
    block_topology: bool  # topology/block (23.11+)
    block_sizes: bool  # BlockSizes= (24.05+); 23.11 spells the same idea BlockLevels=
    topology_yaml: bool  # topology.yaml (25.05+)
    # topology/ring and topology/torus3d (26.05: src/plugins/topology/{ring,torus3d} at slurm-26-05-3-1; 25.11 has
    # block, flat and tree only), written only to topology.yaml (topology.yaml(5) 26.05 "Ring definitions", "Torus3d")
    ring_torus: bool
    cgroup_v2: bool  # hosts are usually pure cgroup v2 (23.02+); informational: cgroup.conf gets autodetect
    json_filters: bool  # squeue/sinfo --json honour -j/-t/-n (not in 22.05)
    scontrol_json: bool  # scontrol --json (23.02+)
    autodetect_nvidia: bool  # gres.conf AutoDetect=nvidia (24.11+)
    reconfigure_restarts: bool  # `scontrol reconfigure` restarts daemons, keeps old config on failure (23.11+)
    add_nodes_by_reconfigure: bool  # new NodeName lines + reconfigure is enough (24.11+)
    removed_cgroup_keys: frozenset[str]
    removed_slurm_values: frozenset[tuple[str, str]]  # (key, value) pairs the release no longer accepts
    # slurm.conf keys read from several lines (S_P_ARRAY in read_config.c's slurm_conf_options): SlurmctldHost
    # always; Prolog, Epilog, PrologSlurmctld, EpilogSlurmctld from slurm-24-05-0-1
    repeatable_keys: frozenset[str] = frozenset({"SlurmctldHost"})
    # topology/block base-block rule (src/plugins/topology/block): 23.11 topology_block.c: every block must have
    # exactly the first block's node count ("children count no equal bblock_node_cnt"); 24.05-24.11
    # block_record.c: at least the base size, BlockSizes[0] or else the first block's count ("children count lower
    # than bblock_node_cnt"); 25.05 block_record.c dropped the check (smaller blocks load).
    block_size_rule: str = "none"  # "equal" | "at_least_base" | "none"
    # switch/nvidia_imex (IMEX channels for multi-node NVLink, GB200): src/plugins/switch/nvidia_imex is in
    # slurm-24-05-0-1 (slurm.conf(5) documents SwitchType=switch/nvidia_imex from 24.05.1)
    switch_nvidia_imex: bool = False
    # slurmctld read_config.c _build_all_partitionline_info(): "No PartitionName information available!" is
    # fatal through slurm-23-02-5-1 (removed in slurm-23-02-6-1); the release key cannot tell 23.02.5 from
    # 23.02.6, so a config without partitions is allowed from 23.11
    no_partitions_ok: bool = True
    # topology/tree switch_record.c _parse_switches() (slurm-24-11-0-1 on; not in 24.05.8): "SwitchName (%s) must be
    # shorter than %d chars" (HOST_NAME_MAX, 64 on Linux) fails the topology.conf parse, which is fatal
    # ("something wrong with opening/reading"); topology.conf(5)/topology.yaml(5) 24.11+: "cannot be longer than
    # 64 characters". 0 = no limit.
    max_switch_name: int = 0
    # job_submit/lua's job_modify() passes slurm.user_msg text back to the client (err_msg) from slurm-23-02-0-1;
    # at slurm-22-05-8-1 it discards it ("Use of log.user() in job_modify is not supported"), and the client sees
    # only the return code's text (src/plugins/job_submit/lua/job_submit_lua.c, job_modify)
    lua_modify_user_msg: bool = True
    # How slurmctld is told to send a job's --signal at preemption, also at the start of a QOS GraceTime (preempt.c
    # _job_check_grace_internal: "send job warn signal", else SIGCONT + SIGTERM to every task): 22.05 reads
    # SlurmctldParameters=preempt_send_user_signal (slurm.conf(5) of slurm-22-05-8-1); from 23.02 slurm.conf(5)
    # documents PreemptParameters=send_user_signal (slurm-23-02-0-1 .. slurm-25-11-0-1; node_scheduler.c
    # _preempt_jobs still also reads the old spelling)
    preempt_user_signal: tuple[str, str] = ("PreemptParameters", "send_user_signal")
    # slurm.conf(5) TreeWidth: "the default value is 50" through slurm-23-02-7-1 (with "Optimal system performance can
    # typically be achieved if TreeWidth is set to the square root of the number of nodes in the cluster for systems
    # having no more than 2500 nodes or the cube root for larger systems"); "the default value is 16" from
    # slurm-23-11-0-1 (24.11's big_sys.shtml: "set to the cube root of the number of nodes")
    tree_width_default: int = 16
    # HealthCheckTimeout (default 60 s, DEFAULT_HEALTH_CHECK_TIMEOUT in src/common/read_config.h) from
    # slurm-26-05-3-1; read_config.c logs "HealthCheckTimeout (%u) must be less than HealthCheckInterval (%u)" when
    # the interval is not above it. Through 25.11 slurmd gives the program a fixed 60 s (slurmd.c
    # run_script_health_check(): .max_wait = 60 * 1000) and the key is unknown (fatal).
    healthcheck_timeout: bool = False
    # cgroup.conf CgroupJobIdPaths (26.05, src/interfaces/cgroup.c options[] at slurm-26-05-3-1): without it, cgroup/v2
    # names a job's directory by its SLUID ("s" + 13 base32 characters), not "job_<id>" (src/plugins/cgroup/v2/
    # cgroup_v2.c: `if (slurm_cgroup_conf.cgroup_job_id_paths) "/job_%u" else print_sluid()`)
    cgroup_job_id_paths: bool = False
    # PartitionName Exclusive=NO|NODE|USER|TOPO from slurm-26-05-0-0rc1 (not in any 25.11 tag): read_config.c
    # _parse_partitionname() at slurm-26-05-3-1 reads it after OverSubscribe and lets it win (NODE and TOPO set
    # max_share 0 as OverSubscribe=EXCLUSIVE does, USER sets exclusive_user); slurm.conf(5) there: "This replaces the
    # deprecated options OverSubscribe=EXCLUSIVE, ExclusiveUser, and ExclusiveTopo", which it still reads. Before
    # 26.05 the key is not in the partition options table (unrecognized key).
    partition_exclusive: bool = False
    # PartitionName ExclusiveTopo=YES from slurm-24-05-0-1 (slurm.conf(5); absent at slurm-23-11-0-1)
    exclusive_topo: bool = False
    # HealthCheckNodeState=START_ONLY from slurm-25-11-0-1 (read_config.c _health_node_state(); 25.05 logs "Invalid
    # HealthCheckNodeState value START_ONLY ignored" and runs on ANY); REBOOT_ONLY from slurm-26-05-0-0rc1, where
    # each of them combined with any other token is fatal ("HealthCheckNodeState=START_ONLY cannot be combined with
    # other options."; 25.11 accepts the combination)
    healthcheck_start_only: bool = False
    healthcheck_only_alone: bool = False
    # gres.conf AutoDetect=full and Flags=env_uuid from slurm-26-05-0-0rc1 (gres.conf(5)). Before: gres.c
    # _handle_autodetect_flags() logs "unknown autodetect flag 'full'" and detects nothing; gres_flags_parse() matches
    # known words only, so env_uuid is silently no flag. With it, gres_common.c common_gres_set_env() at
    # slurm-26-05-3-1 writes CUDA_VISIBLE_DEVICES as the devices' UUIDs (the "local list"), while SLURM_JOB_GPUS and
    # SLURM_STEP_GPUS (the "global list", and the prolog's SLURM_JOB_GPUS in gres_common_prep_set_env()) stay
    # numeric gres indices (`"%s%s%d"`)
    gres_autodetect_full: bool = False
    gres_env_uuid: bool = False
    # NodeName SuspendTime= from slurm-26-05-0-0rc1 (read_config.c slurm_nodename_options[] at slurm-26-05-3-1;
    # slurm.conf(5): "This value takes precedence over the partition-level and global SuspendTime settings")
    node_suspend_time: bool = False
    # job_container.conf Dirs= (which directories get a private per-job mount): in read_jcconf.c's options from
    # slurm-23-02-0-1; at slurm-22-05-8-1 job_container_tmpfs.c mounts /tmp and /dev/shm, fixed, and Dirs is unknown
    job_tmpfs_dirs: bool = True
    # NamespaceType=namespace/tmpfs replaces JobContainerType=job_container/tmpfs from slurm-25-11-0-1: src/plugins/
    # job_container/ is gone there (src/plugins/namespace/tmpfs reads the same job_container.conf, read_jcconf.c
    # tmpfs_conf_file), and read_config.c still takes JobContainerType as NamespaceType's value with "JobContainerType
    # has been replaced with NamespaceType and will be removed in a future release" (slurm-25-11-0-1, slurm-26-05-3-1)
    namespace_type: bool = False
    # slurmctld's OpenMetrics endpoint, MetricsType=metrics/openmetrics, from slurm-25-11-0-1 (read_config.c
    # {"MetricsType", S_P_STRING}; src/plugins/metrics/openmetrics; doc/html/metrics.shtml: HTTP GET /metrics/jobs,
    # /metrics/nodes, /metrics/partitions, /metrics/scheduler on slurmctld's listening port); 25.05 does not know the
    # key. Per-node GPU totals and allocation (slurm_node_gpus, slurm_node_gpus_alloc) from slurm-26-05-0-0rc1
    # (openmetrics.c metrics_p_parse_nodes_metrics at slurm-26-05-3-1:398-399; not at slurm-25-11-7-1)
    openmetrics: bool = False
    openmetrics_node_gpus: bool = False


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
        ring_torus=v >= (26, 5),
        cgroup_v2=v >= (23, 2),
        json_filters=v >= (23, 2),
        scontrol_json=v >= (23, 2),
        autodetect_nvidia=v >= (24, 11),
        reconfigure_restarts=v >= (23, 11),
        add_nodes_by_reconfigure=v >= (24, 11),
        removed_cgroup_keys=frozenset(removed),
        removed_slurm_values=frozenset(removed_values),
        repeatable_keys=frozenset({"SlurmctldHost"} | (
            {"Prolog", "Epilog", "PrologSlurmctld", "EpilogSlurmctld"} if v >= (24, 5) else set())),
        block_size_rule="equal" if v < (24, 5) else "at_least_base" if v < (25, 5) else "none",
        switch_nvidia_imex=v >= (24, 5),
        no_partitions_ok=v >= (23, 11),
        max_switch_name=64 if v >= (24, 11) else 0,
        lua_modify_user_msg=v >= (23, 2),
        tree_width_default=16 if v >= (23, 11) else 50,
        preempt_user_signal=(("PreemptParameters", "send_user_signal") if v >= (23, 2)
                             else ("SlurmctldParameters", "preempt_send_user_signal")),
        healthcheck_timeout=v >= (26, 5),
        cgroup_job_id_paths=v >= (26, 5),
        partition_exclusive=v >= (26, 5),
        exclusive_topo=v >= (24, 5),
        healthcheck_start_only=v >= (25, 11),
        healthcheck_only_alone=v >= (26, 5),
        gres_autodetect_full=v >= (26, 5),
        gres_env_uuid=v >= (26, 5),
        node_suspend_time=v >= (26, 5),
        job_tmpfs_dirs=v >= (23, 2),
        namespace_type=v >= (25, 11),
        openmetrics=v >= (25, 11),
        openmetrics_node_gpus=v >= (26, 5),
    )


# --- where a release lists its jobs in a form no job's user can forge (issue 32 item 2) ---------------------------
# `scontrol -o show job` and `squeue -o/-O` print a job's name, comment, paths and account as they were given,
# between other fields' "Key=" or "|" and with their newlines: a name "x UserId=bin(2)" or an account "a\n999|..."
# reads as another user's field or a whole other job (recorded: tests/data/slurm/jobs_hostile_*). JSON quotes every
# string, so slurmkit reads jobs from the JSON each release has:
# - 22.05: `squeue --json` (src/squeue/opts.c of slurm-22-05-8-1: --json dumps through openapi/v0.0.38's
#   jobs.c _dump_job_info, one object per job with name, user_id, priority, eligible_time, gres_detail per node,
#   job_resources); scontrol has no --json there (scontrol.1 of slurm-22-05-8-1). 22.05's squeue --json ignores
#   every other option (src/squeue/data.c dump_data() calls the openapi handler, which loads every job with
#   SHOW_ALL|SHOW_DETAIL: jobs.c _op_handler_jobs): the listing is every job, hidden partitions' too, filtered in
#   Python.
# - 23.02+: `scontrol --json show job [ID]` (scontrol.1 of slurm-23-02-7-1: "implicitly sets the --details
#   option"; data_parser v0.0.39+ job_info with gres_detail and job_resources), which takes a job id.
#   --all: jobs of hidden partitions too (scontrol(1) -a).
# - 26.05: the same, but its data_parser v0.0.45 no longer dumps a job's sharing: JOB_INFO's "shared" is
#   add_removed ("Replaced by 'oversubscribe' and 'exclusive'", src/plugins/data_parser/v0.0.45/parsers.c at
#   slurm-26-05-3-1), neither replacement is in JOB_INFO, and the recorded 26.05.5 listing has "shared": [] for an
#   --exclusive job. squeue -O's "Exclusive" type prints job_exclusive_display_string() (src/squeue/opts.c and
#   print.c at slurm-26-05-3-1: NO|NODE|USER|MCS|TOPO, what scontrol's Exclusive= says), beside JobID: no free text.
# - 22.05's openapi writes cpus_per_task as null whenever cpu_freq_min is unset (jobs.c _dump_job_info at
#   slurm-22-05-8-1 tests the wrong field), so CPUs/Task comes from squeue -O "cpus-per-task" there (print.c
#   _print_job_cpus_per_task: a number or N/A).
# ``extra``: (squeue -O type, scontrol key) pairs read beside the JSON, one `squeue -h -t all -O JobID:|,T:|...` call.
@dataclass(frozen=True)
class JobListing:
    since: tuple[int, int]  # first release this entry describes
    argv: tuple[str, ...]  # every job slurmctld holds, JSON
    by_id: bool  # argv + (job id,) lists that one job (else: filter argv's answer)
    source: str
    extra: tuple[tuple[str, str], ...] = ()

    @property
    def extra_argv(self) -> tuple[str, ...] | None:
        if not self.extra:
            return None
        return ("squeue", "--all", "-h", "-t", "all", "-O", ",".join(f"{t}:|" for t in ("JobID", *(t for t, _ in self.extra))))


JOB_LISTINGS: tuple[JobListing, ...] = (
    JobListing((22, 5), ("squeue", "--json"), False,
               "slurm-22-05-8-1 src/plugins/openapi/v0.0.38/jobs.c _dump_job_info",
               extra=(("cpus-per-task", "CPUs/Task"),)),
    JobListing((23, 2), ("scontrol", "--all", "--json", "show", "job"), True,
               "slurm-23-02-7-1 doc/man/man1/scontrol.1 --json; src/plugins/data_parser/v0.0.39 job_info"),
    JobListing((26, 5), ("scontrol", "--all", "--json", "show", "job"), True,
               "slurm-26-05-3-1 src/plugins/data_parser/v0.0.45/parsers.c JOB_INFO; src/squeue/opts.c Exclusive",
               extra=(("Exclusive", "Exclusive"),)),
)


def job_listing(release: str) -> JobListing:
    """The newest ``JOB_LISTINGS`` entry at or before ``release`` (a release newer than the table gets the last)."""
    key = release_key(release)
    found = [e for e in JOB_LISTINGS if e.since <= key]
    if not found:
        raise ValueError(f"unsupported Slurm version {release}; supported: {', '.join(SUPPORTED_SLURM_VERSIONS)}")
    return found[-1]
