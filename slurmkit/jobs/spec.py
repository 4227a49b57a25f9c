"""What a user asks gpusub for (JobSpec) and what gpusub knows about the cluster (ClusterFacts).

Both are plain frozen dataclasses so that rendering and planning stay pure functions of them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from slurmkit.errors import UsageError

# Slurm time strings live below every layer (slurmtime.py): jobs, accounts, generate and acceptance read them
from slurmkit.slurmtime import parse_time_minutes, parse_time_seconds  # noqa: F401  (re-exported)

if TYPE_CHECKING:
    from slurmkit.backend.parse import PendingJob, Reservation, SwitchRecord
    from slurmkit.model.cluster import Topology
    from slurmkit.placement.topology import PlacementTopology

LAUNCHERS = ("torchrun", "srun", "megatron")
TOPOLOGY_MODES = ("auto", "off", "strict")

# Values that end up on an ``#SBATCH`` line. sbatch tokenises those lines itself (not a shell), so rather than
# trusting its quoting we accept only characters that need none and refuse the rest with a clear message.
_SBATCH_SAFE = re.compile(r"^[A-Za-z0-9_@+=:,./%-]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# a --constraint expression also uses & | [ ] * ( ) (sbatch(1) --constraint, 22.05 and 24.11): no shell meaning on
# an #SBATCH line, which sbatch reads itself
_CONSTRAINT_SAFE = re.compile(r"^[A-Za-z0-9_@+=:,./%&|\[\]*()-]+$")
# --comment is free text: sbatch reads a double-quoted #SBATCH argument as one (src/sbatch/opt.c, 22.05 and 24.11;
# the lab test submits one with blanks); a quote, a backslash or a line break is refused
_COMMENT_SAFE = re.compile(r'^[^"\\\n\r\x00]+$')
_HOSTLIST_SAFE = re.compile(r"^[A-Za-z0-9_.,\[\]-]+$")
_PASS_OPT = re.compile(r"^--([a-z][a-z0-9-]*)(?:=(.*))?$")
# sbatch options gpusub sets or models itself: a pass-through of one would contradict the script (or placement)
OWN_OPTIONS = {
    "nodes": "--nodes", "ntasks": "--nodes/--launcher", "ntasks-per-node": "--launcher", "gres": "--gpus-per-node",
    "gpus": "--gpus-per-node", "gpus-per-node": "--gpus-per-node", "gpus-per-task": "--launcher srun",
    "cpus-per-task": "--cpus-per-gpu", "cpus-per-gpu": "--cpus-per-gpu", "mem": "--mem-per-gpu",
    "mem-per-cpu": "--mem-per-gpu", "mem-per-gpu": "--mem-per-gpu", "partition": "--partition", "time": "--time",
    "account": "--account", "qos": "--qos", "job-name": "--name", "dependency": "--dependency", "array": "--array",
    "exclusive": "--exclusive", "signal": "--signal-grace", "requeue": "(always set)", "no-requeue": "--max-restarts 0",
    "open-mode": "(always append)", "output": "--run-dir", "error": "--run-dir", "switches": "--topology",
    "nodelist": "--nodelist", "exclude": "--exclude", "constraint": "--constraint", "reservation": "--reservation",
    "begin": "--begin", "hold": "--hold", "mail-type": "--mail-type", "mail-user": "--mail-user",
    "comment": "--comment", "wrap": "SCRIPT", "chdir": "(the submit directory)", "parsable": "(always set)",
    "test-only": "--dry-run", "wait": "--follow", "contiguous": "--topology", "segment": "--topology",
}
# pass-through options that cannot change which nodes can run the job: placement may still pin nodes beside them
PLACEMENT_NEUTRAL = frozenset({
    "nice", "priority", "wckey", "profile", "acctg-freq", "kill-on-invalid-dep", "deadline", "export",
    "get-user-env", "propagate", "uid", "gid", "licenses", "mcs-label", "spread-job",
})


def sbatch_value(option: str, value: str) -> str:
    """Refuse a value that could not be written on an ``#SBATCH`` line without quoting."""
    if not value or not _SBATCH_SAFE.match(value):
        raise UsageError(
            f"{option}: {value!r} may contain only letters, digits and _@+=:,./%- (it goes on an #SBATCH line)"
        )
    return value


def check_pass_through(arg: str) -> str:
    """``--sbatch-arg`` values: ``--name`` or ``--name=value`` with an #SBATCH-safe value, and not an option gpusub
    sets or models itself (that one has its own flag, which placement and preflight read)."""
    m = _PASS_OPT.match(arg)
    if not m:
        raise UsageError(f"--sbatch-arg: {arg!r} is not a long sbatch option (--name or --name=value)")
    name, value = m.group(1), m.group(2)
    if name in OWN_OPTIONS:
        raise UsageError(f"--sbatch-arg {arg}: gpusub sets --{name} itself; use {OWN_OPTIONS[name]}")
    if value is not None:
        sbatch_value(f"--sbatch-arg --{name}", value)
    return arg


def parse_env_pair(pair: str) -> tuple[str, str]:
    """``--env K=V`` -> (K, V). The value is free text (it is shell-quoted later); the name is checked."""
    name, sep, value = pair.partition("=")
    if not sep or not _ENV_NAME.match(name):
        raise UsageError(f"--env: expected NAME=VALUE with NAME like [A-Za-z_][A-Za-z0-9_]*, got {pair!r}")
    return name, value


def earliest_signal_s(time: str, grace: int) -> int | None:
    """Seconds after the start at which Slurm may send ``--signal=...@grace`` at the earliest; None: no limit.

    Slurm's rule, the same in 22.05 and 24.11 (sbatch(1) of slurm-22-05-8-1 and slurm-24-11-5-1):
      * --time: "Time resolution is one minute and second values are rounded up to the next minute", so the
        limit the job gets is ``parse_time_minutes`` x 60 s, not the seconds typed;
      * --signal: "When a job is within sig_time seconds of its end time, send it the signal sig_num. Due to the
        resolution of event handling by Slurm, the signal may be sent up to 60 seconds earlier than specified."
    """
    minutes = parse_time_minutes(time)
    if minutes is None:
        return None
    return minutes * 60 - grace - 60


def _check_grace(time: str, grace: int) -> None:
    """The checkpoint signal must be able to come after the start: else it comes at (or before) each start and
    every restart is burnt on a checkpoint of nothing."""
    earliest = earliest_signal_s(time, grace)
    if earliest is not None and earliest <= 0:
        minutes = parse_time_minutes(time)
        least = (grace + 60) // 60 + 1  # whole minutes whose end - grace - 60 s is after the start
        raise UsageError(
            f"--time {time} (Slurm rounds it to {minutes} min) cannot hold --signal-grace {grace}: Slurm may send the "
            f"signal up to 60 s early (sbatch(1) --signal), so it could come at the start; give --time {least} "
            "(minutes) or more, or a smaller --signal-grace (0: no signal)")


_MEM = re.compile(r"^(\d+)([KMGT]?)$", re.IGNORECASE)


def parse_mem_mb(flag: str, value: str) -> int:
    """Slurm memory syntax (``16000``, ``16000M``, ``16G``, ``1T``; default unit MB) -> MB."""
    m = _MEM.match(value.strip())
    if not m:
        raise UsageError(f"{flag}: {value!r} is not a Slurm memory size (e.g. 16000, 16000M, 16G)")
    n, unit = int(m.group(1)), m.group(2).upper()
    mb = {"K": n // 1024, "": n, "M": n, "G": n * 1024, "T": n * 1024 * 1024}[unit]
    if mb < 1:
        raise UsageError(f"{flag}: {value!r} is less than 1 MB")
    return mb


@dataclass(frozen=True)
class JobSpec:
    """One gpusub request. ``script`` is an absolute path once the edge resolved it."""

    script: str
    args: tuple[str, ...] = ()
    nodes: int = 1
    gpus_per_node: int | None = None  # None: the partition's GPUs per node
    partition: str | None = None
    time: str | None = None
    account: str | None = None
    qos: str | None = None
    name: str | None = None
    launcher: str = "torchrun"
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    env: tuple[tuple[str, str], ...] = ()
    container_image: str | None = None
    container_mounts: str | None = None
    dependency: str | None = None
    array: str | None = None
    exclusive: bool = False
    signal_grace: int = 120
    max_restarts: int = 3
    topology: str = "auto"
    run_dir: str | None = None
    # The interpreter that runs the job (torchrun's agent and workers, a .py script under srun). None: the one
    # gpusub runs under (sys.executable, resolved by prepare()), or the image's python3 with --container-image.
    python: str | None = None
    cpus_per_gpu: int | None = None  # None: the node's usable CPUs / GPUs (inventory, else node records)
    mem_per_gpu_mb: int | None = None  # None: the node's usable memory / GPUs
    # sbatch's node selection, honoured by placement as Slurm would (jobs/liveplace.py)
    exclude: str | None = None  # --exclude hostlist
    nodelist: str | None = None  # -w/--nodelist: the user's own choice (never replaced by a placement pin)
    constraint: str | None = None
    reservation: str | None = None
    begin: str | None = None
    hold: bool = False
    mail_type: str | None = None
    mail_user: str | None = None
    comment: str | None = None
    sbatch_args: tuple[str, ...] = ()  # pass-through ("--nice=10"), checked by check_pass_through
    cpu_bind: bool = True  # each rank on its GPU's NUMA cores (render.cpu_binding_line)
    # every line of the step's output starts with its rank ("3: ..."): srun --label, torchrun --tee with a rank
    # prefix and a log dir per rank; False leaves the lines as the program prints them (render.label_line)
    label: bool = True
    # srun only: tasks (ranks) per node; None: one per GPU (one when the job has none). The Python API's
    # submitit-style ``tasks_per_node``.
    tasks_per_node: int | None = None
    # shell lines the batch shell runs before the step (module load, source an env): submitit's ``setup``.
    # The user's own lines in the user's own job; one line each (no line break: a line could end the script's
    # structure, e.g. an unclosed quote swallowing the exit record)
    setup: tuple[str, ...] = ()
    # CPUs per task and memory per node as asked (submitit's cpus_per_task, mem_gb): over the per-GPU shares
    cpus_per_task: int | None = None
    mem_mb: int | None = None

    def __post_init__(self) -> None:
        if self.launcher not in LAUNCHERS:
            raise UsageError(f"--launcher: {self.launcher!r} is not one of {', '.join(LAUNCHERS)}")
        if self.topology not in TOPOLOGY_MODES:
            raise UsageError(f"--topology: {self.topology!r} is not one of {', '.join(TOPOLOGY_MODES)}")
        if self.nodes < 1:
            raise UsageError(f"--nodes: must be >= 1, got {self.nodes}")
        if self.gpus_per_node is not None and self.gpus_per_node < 0:
            raise UsageError(f"--gpus-per-node: must be >= 0, got {self.gpus_per_node}")
        for flag, v in (("--tp", self.tp), ("--pp", self.pp), ("--cp", self.cp), ("--ep", self.ep)):
            if v < 1:
                raise UsageError(f"{flag}: must be >= 1, got {v}")
        if self.signal_grace < 0 or self.signal_grace > 65535:
            raise UsageError(f"--signal-grace: must be between 0 and 65535 seconds, got {self.signal_grace}")
        if self.max_restarts < 0:
            raise UsageError(f"--max-restarts: must be >= 0, got {self.max_restarts}")
        for n, _ in self.env:
            if not _ENV_NAME.match(n):
                raise UsageError(f"--env: bad variable name {n!r}")
        if self.time is not None and self.signal_grace:
            _check_grace(self.time, self.signal_grace)
        if self.container_mounts and not self.container_image:
            raise UsageError("--container-mounts: needs --container-image (without an image nothing is mounted)")
        if self.python is not None and not self.python.strip():
            raise UsageError("--python: empty")
        if self.cpus_per_gpu is not None and self.cpus_per_gpu < 1:
            raise UsageError(f"--cpus-per-gpu: must be >= 1, got {self.cpus_per_gpu}")
        if self.mem_per_gpu_mb is not None and self.mem_per_gpu_mb < 1:
            raise UsageError(f"--mem-per-gpu: must be >= 1 MB, got {self.mem_per_gpu_mb}")
        checked: tuple[tuple[str, str | None], ...] = (
            ("--partition", self.partition), ("--account", self.account), ("--qos", self.qos),
            ("--name", self.name), ("--dependency", self.dependency), ("--array", self.array), ("--time", self.time),
            ("--reservation", self.reservation),
            ("--begin", self.begin), ("--mail-type", self.mail_type), ("--mail-user", self.mail_user),
        )
        for flag, value in checked:
            if value is not None:
                sbatch_value(flag, value)
        for flag, hosts in (("--exclude", self.exclude), ("--nodelist", self.nodelist)):
            if hosts is not None and not _HOSTLIST_SAFE.match(hosts):
                raise UsageError(f"{flag}: {hosts!r} is not a Slurm hostlist (e.g. node[1-4],gpu07)")
        if self.constraint is not None and not _CONSTRAINT_SAFE.match(self.constraint):
            raise UsageError(f"--constraint: {self.constraint!r} may contain only feature names and &|[]*() "
                             "(it goes on an #SBATCH line)")
        if self.comment is not None and not _COMMENT_SAFE.match(self.comment):
            raise UsageError(f"--comment: {self.comment!r} may not be empty or contain a double quote, a backslash "
                             "or a line break (it goes on an #SBATCH line)")
        for a in self.sbatch_args:
            check_pass_through(a)
        for what, count in (("cpus_per_task", self.cpus_per_task), ("mem_mb", self.mem_mb)):
            if count is not None and count < 1:
                raise UsageError(f"{what}: must be >= 1, got {count}")
        if self.tasks_per_node is not None:
            if self.tasks_per_node < 1:
                raise UsageError(f"tasks_per_node: must be >= 1, got {self.tasks_per_node}")
            if self.launcher != "srun":
                raise UsageError(f"tasks_per_node: needs the srun launcher ({self.launcher} starts one process "
                                 "per GPU)")
        for line in self.setup:
            if not isinstance(line, str) or any(c in line for c in "\n\r\x00"):
                raise UsageError(f"setup: {line!r}: one shell line each (no line break)")

    @property
    def pass_through_neutral(self) -> bool:
        """Every pass-through option leaves node selection alone (placement may pin beside them)."""
        return all(_PASS_OPT.match(a).group(1) in PLACEMENT_NEUTRAL for a in self.sbatch_args)  # type: ignore[union-attr]

    @property
    def job_name(self) -> str:
        if self.name:
            return self.name
        base = self.script.rsplit("/", 1)[-1]
        stem = base[:-3] if base.endswith(".py") else base
        cleaned = re.sub(r"[^A-Za-z0-9_.+-]", "_", stem) or "job"
        return cleaned[:64]

    @property
    def is_python(self) -> bool:
        return self.script.endswith(".py")


@dataclass(frozen=True)
class ClusterFacts:
    """What the renderer and preflight need to know about the target partition.

    Filled from the site inventory when there is one, else from sinfo/scontrol (see ``facts.gather``).
    Unknown numbers are None (or 0 for memory) and the checks that need them are skipped with a note.
    """

    partition: str | None
    gpus_per_node: int | None = None
    gpu_type: str | None = None
    gpu_memory_mb: int = 0
    nodes_in_partition: int | None = None  # nodes whose GPU count is >= the request (filled per request)
    node_gpus: tuple[tuple[str, int], ...] = ()  # (node, GPUs) for every node in the partition
    max_time: str | None = None  # Slurm syntax, "UNLIMITED" or None (unknown)
    topo_model: Topology | None = None  # the inventory's topology
    # the same topology already in the placement engine's form (the facts cache stores this instead of the model:
    # a cache hit then imports neither the model nor re-expands its hostlists)
    topo_placement: PlacementTopology | None = None
    topo_records: tuple[SwitchRecord, ...] = ()  # `scontrol show topology` (without an inventory)
    # live (name, state, flags, free GPUs, total GPUs) from one `scontrol show node`; () when Slurm was not asked
    live_nodes: tuple[tuple[str, str, frozenset[str], int, int], ...] = ()
    # what else placement must respect, asked beside the node states (jobs/liveplace.py): the pending queue (each
    # job with the nodes it may take: its pin, else its partitions' nodes), reservations, node features, the
    # partition's DefaultTime, and when all this was read (epoch seconds)
    pending: tuple[tuple[PendingJob, frozenset[str]], ...] = ()
    reservations: tuple[Reservation, ...] = ()
    node_features: tuple[tuple[str, tuple[str, ...]], ...] = ()
    default_time: str | None = None
    live_at: float = 0.0
    # per GPU (gres index = its line in gres.conf), the OS CPUs of its cores from the inventory's gres.conf Cores=,
    # the same on every node of the partition; () when unknown or not uniform (then only a real GPU's NUMA node
    # is used at run time)
    gpu_cpus: tuple[str, ...] = ()
    # each GPU's share of a node's usable CPUs / memory (after the reserve); 0 = unknown. The smallest over the
    # partition's GPU node groups, so the request fits every node the job may get.
    cpus_per_gpu: int = 0
    mem_per_gpu_mb: int = 0
    # (node, usable CPUs, usable memory MB) for every node in the partition: CPUs and memory after the reserve
    # (CoreSpecCount / MemSpecLimit); 0 = unknown. From the inventory, else the node records.
    node_shapes: tuple[tuple[str, int, int], ...] = ()
    resources_source: str = ""  # where cpus/mem per GPU came from ("inventory", "node records")
    torch_version: str | None = None  # torch of the job's interpreter (None: unknown / not probed)
    socket_ifname: str | None = None
    ib_hca_exclude: tuple[str, ...] = ()
    site_env: tuple[tuple[str, str], ...] = ()
    run_root: str | None = None
    source: str = "flags"  # "inventory:<path>" or "slurm" or "flags"
    inventory_sha256: str = ""
    notes: tuple[str, ...] = field(default=())


# --- SBATCH_* input environment -------------------------------------------------------------------------------------
# sbatch(1) (INPUT ENVIRONMENT VARIABLES, slurm-22-05-8-1 and slurm-24-11-5-1): these variables override the
# script's #SBATCH lines, so left alone they would change what gpusub planned (another partition or time limit than
# preflight checked, no requeue, a signal the batch shell does not expect). gpusub reads the ones it models into its
# own options (a flag given on the command line wins, as with sbatch), writes them into the script, and removes every
# one of them from sbatch's environment; the ones that contradict what gpusub sets are removed with a warning.
SBATCH_ENV_FIELDS = {
    "SBATCH_ACCOUNT": "account", "SBATCH_QOS": "qos", "SBATCH_PARTITION": "partition", "SBATCH_TIMELIMIT": "time",
    "SBATCH_RESERVATION": "reservation", "SBATCH_CONSTRAINT": "constraint", "SBATCH_EXCLUSIVE": "exclusive",
    "SBATCH_JOB_NAME": "name", "SBATCH_ARRAY_INX": "array", "SBATCH_CPUS_PER_GPU": "cpus_per_gpu",
    "SBATCH_MEM_PER_GPU": "mem_per_gpu_mb", "SBATCH_GPUS_PER_NODE": "gpus_per_node",
}
SBATCH_ENV_CONFLICTS = {
    "SBATCH_GRES": "--gpus-per-node", "SBATCH_GPUS": "--gpus-per-node", "SBATCH_GPUS_PER_TASK": "--launcher srun",
    "SBATCH_MEM_PER_CPU": "--mem-per-gpu", "SBATCH_MEM_PER_NODE": "--mem-per-gpu",
    "SBATCH_TRES_PER_TASK": "--cpus-per-gpu", "SBATCH_NO_REQUEUE": "--max-restarts 0", "SBATCH_REQUEUE": "",
    "SBATCH_OPEN_MODE": "", "SBATCH_OUTPUT": "--run-dir", "SBATCH_ERROR": "--run-dir", "SBATCH_SIGNAL": "--signal-grace",
    "SBATCH_REQ_SWITCH": "--topology", "SBATCH_WAIT4SWITCH": "--topology", "SBATCH_WAIT": "--follow",
}


def apply_sbatch_env(spec: JobSpec, environ: Mapping[str, str]) -> tuple[JobSpec, tuple[str, ...], list[str]]:
    """-> (spec with the SBATCH_* values it had no flag for, names to remove from sbatch's environment, warnings).
    SBATCH_CLUSTERS is refused: the job would go to a cluster gpusub did not plan for."""
    from dataclasses import replace

    if environ.get("SBATCH_CLUSTERS"):
        raise UsageError(f"SBATCH_CLUSTERS={environ['SBATCH_CLUSTERS']}: gpusub plans for the local cluster only; "
                         "unset it (or run gpusub where that cluster's SLURM_CONF is)")
    changes: dict[str, object] = {}
    unset: list[str] = []
    warnings: list[str] = []
    for var, name in SBATCH_ENV_FIELDS.items():
        raw = environ.get(var)
        if raw is None:
            continue
        unset.append(var)
        if getattr(spec, name) not in (None, False):
            continue  # the flag wins (sbatch(1): command line options override environment variables)
        value: object = raw
        if name == "exclusive":
            value = True
        elif name in ("cpus_per_gpu", "gpus_per_node"):
            if not raw.strip().isdigit():
                raise UsageError(f"{var}={raw!r}: gpusub reads it as a count; give a whole number or unset it")
            value = int(raw)
        elif name == "mem_per_gpu_mb":
            value = parse_mem_mb(var, raw)
        changes[name] = value
    for var, flag in SBATCH_ENV_CONFLICTS.items():
        if var in environ:
            unset.append(var)
            if flag:
                warnings.append(f"{var}={environ[var]} ignored: gpusub sets that itself (use {flag})")
    if changes:
        try:
            spec = replace(spec, **changes)  # type: ignore[arg-type]  # __post_init__ checks the values as flags
        except UsageError as exc:
            used = ", ".join(f"{v}={environ[v]}" for v, n in SBATCH_ENV_FIELDS.items() if n in changes)
            raise UsageError(f"from the environment ({used}): {exc}") from exc
    return spec, tuple(unset), warnings
