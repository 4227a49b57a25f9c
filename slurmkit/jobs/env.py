"""The NCCL / torch / Megatron environment of a job, each variable with the reason it is set.

Pure: a function of the JobSpec, the ClusterFacts and (for Megatron) the parsed model arguments.
Sources for every rule are in shared/reference/submit-anchors.md §9 (NCCL env docs, pytorch
"torch_nccl_environment_variables", Megatron-LM arguments.py, NeMo PerfEnvPlugin).

Where a value is computed:
  * ``batch``: a literal exported by the batch shell, inherited by every task through srun;
  * ``task``: evaluated by each task on its own node at start (per-node paths, detected HCAs, ranks), inside
    the exported ``_gpusub_task_env`` shell function. Such values are slurmkit's own shell text, never user input.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from slurmkit.errors import UsageError
from slurmkit.jobs.spec import ClusterFacts, JobSpec
from slurmkit.jobs.torchcompat import MIN_SUPPORTED, TorchFeatures, features_for, parse_version

# Deprecated since torch 2.2 (pytorch PR #114880); they only print warnings now. Never emitted, and refused from
# --env / the site profile with the replacement named.
DEPRECATED = {
    "NCCL_ASYNC_ERROR_HANDLING": "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "NCCL_BLOCKING_WAIT": "TORCH_NCCL_BLOCKING_WAIT",
    "NCCL_DESYNC_DEBUG": "TORCH_NCCL_DESYNC_DEBUG",
    "NCCL_ENABLE_TIMING": "TORCH_NCCL_ENABLE_TIMING",
}

# GPU families from Blackwell on (SM100+): Megatron drops the CUDA_DEVICE_MAX_CONNECTIONS=1 requirement there.
_BLACKWELL = re.compile(r"^(g?b\d{3}|rtx.?pro.?6000|gb\d+)", re.IGNORECASE)


@dataclass(frozen=True)
class EnvVar:
    name: str
    value: str  # for kind "batch": the literal value (shell-quoted when rendered); "task": shell text
    reason: str
    kind: str = "batch"  # batch | task
    origin: str = "gpusub"  # gpusub | site | user (--env) | env (the submitting environment's value, kept)
    optional: bool = False  # task values only: exported when non-empty, else left unset
    instead: str = ""  # origin env: what slurmkit would have set ("NAME=value: why" or "left unset: why")


@dataclass(frozen=True)
class EnvPlan:
    vars: tuple[EnvVar, ...]
    not_set: tuple[tuple[str, str], ...]  # (name, why it is deliberately left unset)
    socket_ifname: str = ""  # the NCCL_SOCKET_IFNAME the job runs with (--env, yours, else the site's): gloo's source
    warnings: tuple[str, ...] = ()  # values of yours, kept, that are known to break the job

    def batch(self) -> list[EnvVar]:
        return [v for v in self.vars if v.kind == "batch"]

    def task(self) -> list[EnvVar]:
        return [v for v in self.vars if v.kind == "task"]


def is_blackwell(gpu_type: str | None) -> bool:
    return bool(gpu_type) and bool(_BLACKWELL.match(gpu_type or ""))


def uses_fsdp(args: tuple[str, ...]) -> bool:
    return any(a in ("--use-megatron-fsdp", "--use-torch-fsdp2", "--use-custom-fsdp") for a in args)


# The submitting environment (issue 34 item 4). gpusub runs on the login node and the job inherits that environment
# (sbatch --export defaults to ALL, sbatch(1)); the script's own `export NAME=...` lines come later and win. So for
# every variable gpusub would set or deliberately leave unset, a value the user exported is written into the script
# as theirs (kept, whatever --export the site or --sbatch-arg chooses), --explain says what slurmkit would have
# set instead and why, and gpusub warns only where that value is known to break the job (known_to_break). --env
# still wins over it, and the site profile gives way to it. The job's wiring is gpusub's whatever the shell holds:
# a RANK or PET_RDZV_CONF exported in the shell (gpusub run from inside another job's task) would make every rank
# the same rank.
WIRING = frozenset({"PET_RDZV_CONF", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK"})


def plan_env(spec: JobSpec, facts: ClusterFacts, run_dir: str, torch: TorchFeatures | None = None, *,
             cpus_per_rank: int = 0, ranks_per_node: int = 0, environ: Mapping[str, str] | None = None) -> EnvPlan:
    """``cpus_per_rank``: the CPUs each rank gets (the per-GPU share); 0 when unknown.
    ``ranks_per_node``: processes per node (GPUs per node).
    ``environ``: the submitting environment (None: not known, as in a pure render; nothing of it is kept)."""
    submitted: Mapping[str, str] = environ or {}
    given = dict(spec.env)
    out: list[EnvVar] = []
    not_set: list[tuple[str, str]] = []
    tf = torch if torch is not None else features_for(facts.torch_version)
    v = parse_version(tf.version)
    if v is not None and v < MIN_SUPPORTED and spec.launcher != "srun":
        raise UsageError(f"{spec.python or 'the interpreter'} has torch {tf.version}: gpusub needs torch >= "
                         f"{MIN_SUPPORTED[0]}.{MIN_SUPPORTED[1]} (TORCH_NCCL_* names)")

    def add(name: str, value: str, reason: str, kind: str = "batch", origin: str = "gpusub",
            optional: bool = False) -> None:
        out.append(EnvVar(name, value, reason, kind, origin, optional))

    add("PYTHONUNBUFFERED", "1", "print() reaches the log as it happens, not at exit (TorchX/NeMo-Run templates)")
    add("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3",
        "a failed or timed-out collective tears the process down instead of hanging until the wall time "
        "(torch default 3; set explicitly because older site profiles set the deprecated NCCL_ASYNC_ERROR_HANDLING)")
    # torch 2.8 renamed the flight-recorder variables (TORCH_NCCL_TRACE_BUFFER_SIZE -> TORCH_FR_BUFFER_SIZE,
    # TORCH_NCCL_DEBUG_INFO_TEMP_FILE -> TORCH_FR_DUMP_TEMP_FILE; torchcompat.py has the evidence): newer releases
    # warn on every rank for the old names, older ones ignore the new names. Set the names this torch reads.
    buf, dump = (("TORCH_FR_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE") if tf.fr_names
                 else ("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"))
    add(buf, "2000",
        f"keep the last 2000 collectives per rank in the flight recorder, so a hang leaves evidence ({tf.label})")
    add("TORCH_NCCL_DUMP_ON_TIMEOUT", "1", "dump the flight recorder when a collective times out")
    add(dump, f"{run_dir}/nccl_trace/rank_",
        f"flight-recorder dumps go to the run dir (shared) instead of each node's /tmp ({tf.label})")
    add("NCCL_DEBUG", "WARN", "NCCL warnings in the log; INFO is for triage only (NCCL env docs: no debug vars in production)")

    # the interface NCCL will use: --env, else the submitting environment's, else the site's; gloo follows it
    ifname = given.get("NCCL_SOCKET_IFNAME") or submitted.get("NCCL_SOCKET_IFNAME") or facts.socket_ifname or ""
    if facts.socket_ifname:
        add("NCCL_SOCKET_IFNAME", facts.socket_ifname,
            "site profile names the interface that routes between nodes (NCCL's own choice would be wrong here)",
            origin="site")
    else:
        not_set.append(("NCCL_SOCKET_IFNAME",
                        "no site socket_ifname: NCCL picks ib* / the first non-docker, non-lo interface itself"))
    if ifname:
        # gloo takes exact interface names only (no ^ exclusion, no = , no prefixes: it fails at
        # init_process_group with "Unable to find address for: ^docker0"): resolved on each node at start
        add("GLOO_SOCKET_IFNAME", "$(_gpusub_gloo_ifname)",
            f"gloo (torch's CPU collectives and barriers) needs an exact name: the first up interface on the node "
            f"that NCCL's {ifname!r} selects, read from /sys/class/net at start; unset when none "
            "matches (gloo then uses the hostname's address)", kind="task",
            origin="site" if ifname == facts.socket_ifname else "gpusub", optional=True)
    else:
        not_set.append(("GLOO_SOCKET_IFNAME", "set only together with NCCL_SOCKET_IFNAME"))

    # Exclude-only HCA list: NCCL uses every HCA by default, which is right unless one is a storage HCA or its port
    # is down. Computed on each node at start (the down set is per node); the site's static excludes come first.
    add("NCCL_IB_HCA", "$(_gpusub_hca_exclude)",
        "exclude-only list (^=): the site's storage HCAs"
        + (f" ({','.join(facts.ib_hca_exclude)})" if facts.ib_hca_exclude else "")
        + " plus HCA ports found not ACTIVE on the node at job start; unset when nothing is excluded",
        kind="task", optional=True)
    not_set.append(("NCCL_IB_GID_INDEX", "left at -1 (auto): NCCL 2.21+ picks the RoCEv2 GID itself"))
    not_set.append(("NCCL_ASYNC_ERROR_HANDLING / NCCL_BLOCKING_WAIT", "deprecated since torch 2.2: warnings only"))

    if spec.launcher in ("torchrun", "megatron"):
        # torchrun reads PET_<FLAG> for each flag; gpusub's rendezvous (torchcompat.RDZV) reads is_host: the store is
        # hosted on node 0 (the batch host, whose address is the endpoint), by the batch shell or node 0's agent.
        # one node: its agent is the only client, nothing can outlive it; in a container the batch shell, outside
        # the image, has no torch to host the store with
        if spec.nodes == 1 or spec.container_image:
            add("PET_RDZV_CONF", "is_host=$([ \"${SLURM_NODEID:-0}\" = 0 ] && echo 1 || echo 0)",
                "torchrun --rdzv-conf: the first node's agent hosts the rendezvous' TCPStore (no hostname guessing)",
                kind="task")
        else:
            add("PET_RDZV_CONF", "is_host=0",
                "torchrun --rdzv-conf: every agent is a client of the TCPStore the batch shell hosts on the first "
                "node; an agent that hosted it and reached the exit barrier last (rank 0 finishing a checkpoint) "
                "took it down while the others still waited on it (\"Broken pipe\" tracebacks after a clean end)")
        if spec.label:
            # torchrun's own per-rank output (torch/distributed/run.py --tee, --log-dir; launcher/api.py
            # log_line_prefix_template from TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, substituted per worker with
            # ${rank} = its global rank: local_elastic_agent.py _start_workers, torch 2.13.0): each worker writes
            # into <log dir>/<rdzv id>_<random>/attempt_0/<local rank>/stdout.log and stderr.log, which the agent tails
            # into the job's log, every line behind the prefix. "N: " as srun --label writes it for the srun
            # launcher, so one parser reads both; a release without the variable prints its default "[default0]:"
            add("PET_TEE", "3", "torchrun --tee 3: each rank's stdout and stderr go to its own file and, each line "
                "behind its rank, into the job's log (--no-label: not)")
            add("PET_LOG_DIR", "$GPUSUB_RANK_LOGS/$SLURMD_NODENAME",
                "torchrun --log-dir: one directory per node in the run dir (<job>.r<attempt>.ranks/<node>/...), "
                "not torch's tempfile.mkdtemp on each node's /tmp", kind="task")
            add("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "${rank}: ",
                "torchrun's prefix for each rank's lines: the global rank, as srun --label prints it (torch's own "
                "default is the local rank, \"[default0]:\")")
        else:
            not_set.append(("PET_TEE", "--no-label: each rank prints straight into the job's log, unprefixed"))
        if spec.launcher == "megatron":
            not_set.append(("TORCHELASTIC_SIGNALS_TO_HANDLE",
                            "torch's handlers stay out of the agent: its own pass SIGUSR2/SIGTERM to each Megatron "
                            "rank once as the --exit-signal-handler signal, and it never kills ranks mid-checkpoint"))
        else:
            not_set.append(("TORCHELASTIC_SIGNALS_TO_HANDLE",
                            "SIGUSR2 stays out of torchrun's agent (a no-op handler in the agent): Slurm delivers it "
                            "once to every worker, and the agent neither forwards it again nor kills workers "
                            "mid-checkpoint"))
        if tf.shutdown_timeout_flag:
            not_set.append(("TORCH_ELASTIC_SHUTDOWN_TIMEOUT",
                            f"passed as torchrun --shutdown-timeout={spec.signal_grace} ({tf.label})"))
        elif not tf.known:
            add("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", str(max(30, spec.signal_grace)),
                "torchrun's wait between forwarding SIGTERM (preemption, scancel) and SIGKILL: the grace, not 30 s; "
                "read by torch 2.12+, ignored by older releases (version unknown, so no --shutdown-timeout flag)")
        else:
            not_set.append(("TORCH_ELASTIC_SHUTDOWN_TIMEOUT",
                            f"{tf.label} has no torchrun shutdown timeout: on SIGTERM its agent kills workers after "
                            "a fixed 30 s (the SIGUSR2 checkpoint path does not go through the agent)"))

    _omp_env(spec, cpus_per_rank, ranks_per_node, add, not_set)

    if spec.launcher == "srun":
        add("RANK", "$SLURM_PROCID", "one srun task per GPU: global rank from Slurm", kind="task")
        add("WORLD_SIZE", "$SLURM_NTASKS", "one srun task per GPU: world size from Slurm", kind="task")
        add("LOCAL_RANK", "$SLURM_LOCALID", "rank on this node (select cuda:LOCAL_RANK)", kind="task")
        add("LOCAL_WORLD_SIZE", "${SLURM_NTASKS_PER_NODE%%(*}", "tasks on this node", kind="task")
        add("NODE_RANK", "$SLURM_NODEID", "index of this node in the job", kind="task")

    if spec.launcher == "megatron":
        _megatron_env(spec, facts, add, not_set)

    for name, value in facts.site_env:
        add(name, value, "site profile (inventory site.env)", origin="site")
    # the submitting environment's value of every name slurmkit sets or leaves unset on purpose: kept
    planned: dict[str, EnvVar] = {}
    for var in out:
        planned[var.name] = var
    unset_why = {n: why for names, why in not_set for n in names.split(" / ")}
    for name in [*planned, *unset_why]:
        if name not in submitted or name in WIRING or name in given:
            continue
        was = planned.get(name)
        instead = (f"{name}={'(computed on each node)' if was.kind == 'task' else was.value}: {was.reason}" if was
                   else f"left unset: {unset_why[name]}")
        origin = "slurmkit's default" if was is None or was.origin == "gpusub" else "the site's value"
        out.append(EnvVar(name, submitted[name], f"your value from the submitting environment, kept ({origin} "
                                                 f"would be {instead})", origin="env", instead=instead))
    for name, value in spec.env:
        add(name, value, "--env on the command line", origin="user")

    bad = deprecated_in(facts.site_env) + deprecated_in(spec.env)
    if bad:
        raise UsageError(f"deprecated NCCL variable(s) {', '.join(bad)}: torch 2.2+ only warns about them")

    # later entries win (--env over yours over site over gpusub); a dict keeps each name's first position: a stable
    # script
    merged: dict[str, EnvVar] = {}
    for var in out:
        merged[var.name] = var
    # a name set by the site or the user is not also "not set"
    unset = tuple((n, why) for n, why in not_set if not any(x in merged for x in n.split(" / ")))
    kept = {v.name: v.value for v in merged.values() if v.origin == "env"}
    return EnvPlan(tuple(merged.values()), unset, ifname, tuple(known_to_break(kept, spec, submitted)))


def known_to_break(kept: Mapping[str, str], spec: JobSpec, environ: Mapping[str, str]) -> list[str]:
    """Warnings for values of the user's that are known to break the job; nothing for a value that is merely not
    slurmkit's choice (NCCL_DEBUG=INFO is verbose, TORCH_NCCL_ASYNC_ERROR_HANDLING=0 hangs on a failed collective
    instead of failing: choices the user may make, and --explain says what they cost)."""
    out = []
    ifn = kept.get("NCCL_SOCKET_IFNAME")
    if ifn and spec.nodes > 1 and not ifn.startswith("^"):
        items = [i for i in ifn.lstrip("=").split(",") if i]
        # NCCL env docs (docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html, NCCL_SOCKET_IFNAME): a prefix
        # list, "=" exact names, "^" exclusions; lo is used only when nothing else matches. A list of nothing but
        # the loopback interface gives each rank a 127.x address no other node can reach
        if items and all(i.startswith("lo") for i in items):
            out.append(f"NCCL_SOCKET_IFNAME={ifn} (from your environment, kept): NCCL's sockets would use the "
                       f"loopback interface, which the other {spec.nodes - 1} node(s) cannot reach (NCCL env docs, "
                       "NCCL_SOCKET_IFNAME); unset it or name the interface that routes between nodes")
    dbg = environ.get("NCCL_DEBUG_FILE")
    if dbg and "~" in dbg:
        # NCCL env docs, NCCL_DEBUG_FILE: the path "does not accept the ~ character"; the job inherits it
        out.append(f"NCCL_DEBUG_FILE={dbg} (from your environment, inherited by the job): NCCL does not expand '~' "
                   "(NCCL env docs, NCCL_DEBUG_FILE): give an absolute path")
    if kept.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1" and spec.launcher == "megatron" and uses_fsdp(spec.args):
        # Megatron-LM arguments.py (d98e8a64dd, Torch-FSDP2 and Megatron-FSDP): assert ... != "1"
        out.append("CUDA_DEVICE_MAX_CONNECTIONS=1 (from your environment, kept) with FSDP in the arguments: "
                   "Megatron-LM refuses to start (arguments.py: FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset)")
    return out


def deprecated_in(pairs: tuple[tuple[str, str], ...]) -> list[str]:
    return [f"{n} (use {DEPRECATED[n]})" for n, _ in pairs if n in DEPRECATED]


def _megatron_env(spec: JobSpec, facts: ClusterFacts, add, not_set: list[tuple[str, str]]) -> None:  # type: ignore[no-untyped-def]
    fsdp = uses_fsdp(spec.args)
    bw = is_blackwell(facts.gpu_type)
    if (spec.tp > 1 or spec.cp > 1) and not fsdp:
        if bw:
            add("CUDA_DEVICE_MAX_CONNECTIONS", "32",
                f"TP={spec.tp} CP={spec.cp} on {facts.gpu_type} (SM100+): NeMo PerfEnvPlugin uses 32 on Blackwell")
        else:
            gpu = facts.gpu_type or "unknown GPU (assumed pre-Blackwell)"
            add("CUDA_DEVICE_MAX_CONNECTIONS", "1",
                f"TP={spec.tp} CP={spec.cp} > 1 on {gpu} without FSDP: Megatron asserts it "
                "(arguments.py) so TP/CP communication overlaps compute in order")
    elif fsdp:
        not_set.append(("CUDA_DEVICE_MAX_CONNECTIONS", "FSDP in the arguments: Megatron asserts it is unset or > 1"))
    else:
        not_set.append(("CUDA_DEVICE_MAX_CONNECTIONS", "TP = CP = 1: no tensor/context-parallel overlap to order"))
    if spec.pp > 1:
        add("NCCL_P2P_NET_CHUNKSIZE", "2097152",
            f"PP={spec.pp}: larger P2P chunks for pipeline send/recv over the network (Megatron/NeMo examples)")
    add("TORCH_NCCL_AVOID_RECORD_STREAMS", "1",
        "free NCCL buffers without recordStream: lower peak memory (NeMo Launcher, Megatron examples)")
    add("TRITON_CACHE_DIR", "/tmp/triton_cache_${SLURM_JOB_ID}_${SLURM_NODEID}",
        "per-node Triton cache on local disk: nodes must not share one cache on the shared filesystem",
        kind="task")


def _omp_env(spec: JobSpec, cpus: int, ranks: int, add, not_set: list[tuple[str, str]]) -> None:  # type: ignore[no-untyped-def]
    """OMP_NUM_THREADS = the CPUs each rank gets, unless the submitting environment (or --env, or the site) sets it.

    torchrun's rule (torch/distributed/run.py config_from_args, 2.2.0 to 2.13.0): ``if "OMP_NUM_THREADS" not in
    os.environ and nproc_per_node > 1: os.environ["OMP_NUM_THREADS"] = "1"``, inherited by every worker: a job
    given 8 CPUs per GPU would run each rank's CPU ops (data-loader transforms, torch CPU kernels) on one thread.
    Under srun nothing sets it and OpenMP sizes its pool to the CPUs the task can see."""
    if not ranks:
        return
    if not cpus:
        if spec.launcher != "srun" and ranks > 1:
            not_set.append(("OMP_NUM_THREADS", "the CPUs per GPU are unknown (no inventory share, no node records): "
                                               "torchrun sets 1 per worker (torch/distributed/run.py); give "
                                               "--cpus-per-gpu or --env OMP_NUM_THREADS=N"))
        return
    if spec.launcher == "srun":
        why = "one srun task per GPU with --cpus-per-task"
    else:
        why = (f"--cpus-per-task={cpus * ranks} shared by {ranks} rank(s); torchrun would set 1 per worker when "
               "it is unset and nproc_per_node > 1 (torch/distributed/run.py config_from_args)")
    add("OMP_NUM_THREADS", f"${{OMP_NUM_THREADS:-{cpus}}}",
        f"each rank's CPU threads (torch CPU ops, OpenMP) = the {cpus} CPU(s) it gets ({why}); a value in the "
        "submitting environment or --env wins", kind="task")
