"""JobSpec + ClusterFacts -> RenderedJob (the sbatch script and argv): pure, no Slurm call, no file written.

The result is the dry-run object: ``--dry-run`` prints ``request.script`` and ``request.command()``; a real
submit hands the same ``request`` to the backend.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from slurmkit.backend.base import SubmitRequest
from slurmkit.errors import UsageError
from slurmkit.jobs.env import EnvPlan, plan_env
from slurmkit.jobs.rundir import STOPPED_EXIT
from slurmkit.jobs.spec import ClusterFacts, JobSpec, parse_time_minutes, sbatch_value
from slurmkit.jobs.topology import TopologyPlan, plan_topology
from slurmkit.jobs.torchcompat import (
    AGENT,
    RDZV_BACKEND,
    STORE,
    TorchFeatures,
    features_for,
    forwarding_agent,
)

if TYPE_CHECKING:  # imported when the launcher is megatron: a DDP submit does not pay for it
    from slurmkit.jobs import megatron

TEMPLATES = {"torchrun": "torchrun.sh.j2", "srun": "srun.sh.j2", "megatron": "megatron.sh.j2"}


@dataclass(frozen=True)
class RenderedJob:
    spec: JobSpec
    facts: ClusterFacts
    request: SubmitRequest
    env: EnvPlan
    run_dir: str
    gpus_per_node: int
    topology: TopologyPlan
    findings: tuple[megatron.Finding, ...] = ()
    memory: megatron.MemoryEstimate | None = None
    script_args: tuple[str, ...] = ()  # what the program receives (Megatron parallel args appended)
    resources: Resources | None = None
    torch: TorchFeatures | None = None

    def plan_line(self) -> str:
        s = self.spec
        world = s.nodes * self.gpus_per_node
        part = self.facts.partition or "(default partition)"
        extra = f", TP={s.tp} PP={s.pp} CP={s.cp} EP={s.ep}" if s.launcher == "megatron" else ""
        res = f"; {self.resources.summary()}" if self.resources else ""
        return (f"plan: {s.nodes} node(s) x {self.gpus_per_node} GPU(s) = {world} process(es) on {part} via "
                f"{s.launcher}{extra}{res}; {self.topology.summary}")

    def log_path(self, job_id: str, restart: int = 0) -> str:
        return f"{self.run_dir}/logs/{job_id}.r{restart}.log"


@dataclass(frozen=True)
class Resources:
    """CPUs and memory per node, in proportion to the GPUs asked (the node's usable share per GPU)."""

    tasks_per_node: int
    cpus_per_task: int  # 0: not requested (unknown share, no GPUs)
    mem_per_node_mb: int  # 0: not requested
    cpus_per_gpu: int
    mem_per_gpu_mb: int
    source: str  # "--cpus-per-gpu", "inventory", "node records", ...

    def summary(self) -> str:
        if not self.cpus_per_task and not self.mem_per_node_mb:
            return "CPUs/memory: Slurm defaults (per-GPU share unknown)"
        cpus = self.cpus_per_task * self.tasks_per_node
        parts = []
        if self.cpus_per_task:
            parts.append(f"{cpus} CPU(s)")
        if self.mem_per_node_mb:
            parts.append(f"{_mb(self.mem_per_node_mb)} memory")
        per = []
        if self.cpus_per_gpu:
            per.append(f"{self.cpus_per_gpu} CPU(s)")
        if self.mem_per_gpu_mb:
            per.append(_mb(self.mem_per_gpu_mb))
        if not per:
            return f"{' + '.join(parts)} per node ({self.source})"
        return f"{' + '.join(parts)} per node ({' + '.join(per)} per GPU, {self.source})"


def _mb(mb: int) -> str:
    return f"{mb / 1024:.1f} GiB" if mb >= 1024 else f"{mb} MB"


def plan_resources(spec: JobSpec, facts: ClusterFacts, gpus: int) -> Resources:
    tasks = (spec.tasks_per_node or gpus or 1) if spec.launcher == "srun" else 1
    cpg = spec.cpus_per_gpu or facts.cpus_per_gpu
    mpg = spec.mem_per_gpu_mb or facts.mem_per_gpu_mb
    srcs = []
    if spec.cpus_per_gpu or spec.mem_per_gpu_mb:
        srcs += [f for f, v in (("--cpus-per-gpu", spec.cpus_per_gpu), ("--mem-per-gpu", spec.mem_per_gpu_mb)) if v]
    if (cpg and not spec.cpus_per_gpu) or (mpg and not spec.mem_per_gpu_mb):
        srcs.append(facts.resources_source or "site")
    if not gpus:
        # a per-GPU share of nothing: refused rather than dropped (or guessed into --cpus-per-task: whether N CPUs
        # per GPU meant per task, per node or nothing at all is the user's to say, and gpusub has no such flag)
        given = [f for f, v in (("--cpus-per-gpu", spec.cpus_per_gpu), ("--mem-per-gpu", spec.mem_per_gpu_mb)) if v]
        if given:
            why = "--gpus-per-node 0" if spec.gpus_per_node == 0 else "the partition's GPUs per node (0)"
            raise UsageError(f"{given[0]}: needs GPUs, but the job asks for none ({why}); a CPU-only job gets "
                             "Slurm's default CPUs and memory")
        asked = spec.cpus_per_task or spec.mem_mb
        return Resources(tasks, spec.cpus_per_task or 0, spec.mem_mb or 0, 0, 0, "asked" if asked else "no GPUs")
    # torchrun/megatron: one task per node runs every rank, so it gets every GPU's share; srun: each task its
    # GPUs' share (tasks_per_node below the GPUs: several each)
    per_task_gpus = max(1, gpus // tasks) if spec.launcher == "srun" else gpus
    cpt, mem = spec.cpus_per_task or cpg * per_task_gpus, spec.mem_mb or mpg * gpus
    if spec.cpus_per_task or spec.mem_mb:
        srcs.insert(0, "asked")
    return Resources(tasks, cpt, mem, cpg, mpg, ", ".join(dict.fromkeys(srcs)) or "unknown")


def shape_errors(job: RenderedJob) -> list[str]:
    """``--cpus-per-gpu`` / ``--mem-per-gpu`` that fewer nodes can give than the job asks for (per node: the value
    x the GPUs asked): Slurm would accept the job and leave it pending forever. Judged on the partition's node
    shapes (usable CPUs and memory after the reserve: the inventory, else the node records); nothing when unknown."""
    res, f, spec, gpus = job.resources, job.facts, job.spec, job.gpus_per_node
    if res is None or not gpus or not f.node_shapes:
        return []
    node_gpus = dict(f.node_gpus)
    cand = [(n, c, m) for n, c, m in f.node_shapes if node_gpus.get(n, gpus) >= gpus]
    asks = []
    if spec.cpus_per_gpu:
        asks.append(("--cpus-per-gpu", str(spec.cpus_per_gpu), res.cpus_per_task * res.tasks_per_node, 1, "CPUs"))
    if spec.mem_per_gpu_mb:
        asks.append(("--mem-per-gpu", f"{spec.mem_per_gpu_mb}M", res.mem_per_node_mb, 2, "MB"))
    out = []
    for flag, value, need, i, unit in asks:
        have: dict[str, int] = {n: (c if i == 1 else m) for n, c, m in cand}
        known = [n for n in have if have[n]]
        fit = sum(1 for n in known if have[n] >= need) + len(cand) - len(known)  # unknown shapes: assumed to fit
        if not known or fit >= spec.nodes:
            continue
        shape = {n: (c, m) for n, c, m in cand}
        name = max(known, key=lambda n: (have[n], shape[n]))
        big = (name, *shape[name])
        where = f"partition {f.partition}" if f.partition else "the default partition"
        how = (f"more than any node of {where} has" if not fit
               else f"only {fit} node(s) of {where} have that, the job asks for {spec.nodes}")
        out.append(f"{flag} {value}: {gpus} GPU(s) x {value.rstrip('M')} = {need} {unit} per node, {how} (largest: "
                   f"{big[0]}, {big[1]} CPUs and {big[2]} MB usable, {node_gpus.get(big[0], '?')} GPUs): the job "
                   "could never start")
    return out


def resolve_gpus(spec: JobSpec, facts: ClusterFacts) -> int:
    if spec.gpus_per_node is not None:
        return spec.gpus_per_node
    if facts.gpus_per_node:
        return facts.gpus_per_node
    raise UsageError("--gpus-per-node: the partition's GPUs per node are unknown (no inventory, no sinfo): give it")


def directives(spec: JobSpec, facts: ClusterFacts, run_dir: str, gpus: int, topo: TopologyPlan,
               res: Resources | None = None) -> list[str]:
    """``#SBATCH`` options in a fixed order. Every value is either ours or passed ``sbatch_value``."""
    res = res or plan_resources(spec, facts, gpus)
    out = [f"--job-name={spec.job_name}", f"--nodes={spec.nodes}", f"--ntasks-per-node={res.tasks_per_node}"]
    if gpus:
        out.append(f"--gres=gpu:{gpus}")
    if res.cpus_per_task:
        out.append(f"--cpus-per-task={res.cpus_per_task}")
    if res.mem_per_node_mb:
        out.append(f"--mem={res.mem_per_node_mb}M")  # per node (sbatch(1) --mem)
    if facts.partition:
        out.append(f"--partition={facts.partition}")
    if spec.time:
        out.append(f"--time={spec.time}")
    if spec.account:
        out.append(f"--account={spec.account}")
    if spec.qos:
        out.append(f"--qos={spec.qos}")
    if spec.dependency:
        out.append(f"--dependency={spec.dependency}")
    if spec.array:
        out.append(f"--array={spec.array}")
    if spec.exclusive:
        out.append("--exclusive")
    for flag, value in (("--exclude", spec.exclude), ("--nodelist", spec.nodelist), ("--constraint", spec.constraint),
                        ("--reservation", spec.reservation), ("--begin", spec.begin), ("--mail-type", spec.mail_type),
                        ("--mail-user", spec.mail_user)):
        if value:
            out.append(f"{flag}={value}")
    if spec.hold:
        out.append("--hold")
    if spec.comment:
        out.append(f'--comment="{spec.comment}"')  # sbatch reads a double-quoted #SBATCH argument as one
    out += spec.sbatch_args
    out += topo.directives
    if spec.signal_grace:
        out.append(f"--signal=B:USR2@{spec.signal_grace}")  # B: only the batch shell; it forwards to the step
    # plain --requeue, not 25.11's --requeue=expedite (sbatch(1) of slurm-25-11-0-1): that is refused unless the
    # site sets SlurmctldParameters=enable_expedited_requeue (job_mgr.c: ESLURM_NOT_SUPPORTED), and measured on a
    # 26.05.5 lab it does not help the preemption path (a preempted expedited job was requeued like any other and
    # a later plain --requeue job of the same priority started before it) while a job that exits non-zero is
    # requeued *held* with priority 0 ("job requeued in held state", job_mgr.c _set_job_requeue_exit_value) instead
    # of ending FAILED
    out += ["--requeue", "--open-mode=append"]
    pattern = "%A_%a" if spec.array else "%j"
    out.append(f"--output={run_dir}/logs/slurm-{pattern}.out")
    return out


def render(spec: JobSpec, facts: ClusterFacts, run_dir: str, workdir: str | None = None,
           environ: Mapping[str, str] | None = None) -> RenderedJob:
    """``environ``: the submitting environment, whose values of the variables gpusub manages are kept (env.py);
    None renders without it."""
    from slurmkit.templates import environment, header_line

    sbatch_value("--run-dir", run_dir)
    if "%" in run_dir:  # --output would expand it as a Slurm filename pattern
        raise UsageError(f"--run-dir: {run_dir!r} may not contain '%'")
    if not run_dir.startswith("/"):
        raise UsageError(f"--run-dir: {run_dir!r} must be an absolute path (the job may start elsewhere)")
    gpus = resolve_gpus(spec, facts)
    if spec.launcher != "srun" and gpus == 0:
        raise UsageError("--gpus-per-node 0: torchrun/megatron start one process per GPU; for a CPU-only job use "
                         "--launcher srun (one task per node)")
    if spec.time and facts.max_time:
        want, limit = parse_time_minutes(spec.time), parse_time_minutes(facts.max_time)
        if limit is not None and (want is None or want > limit):
            raise UsageError(f"--time {spec.time} exceeds the partition {facts.partition}'s MaxTime {facts.max_time}")
    topo = plan_topology(spec, facts, gpus)
    tf = features_for(facts.torch_version)
    res = plan_resources(spec, facts, gpus)
    envp = plan_env(spec, facts, run_dir, tf, cpus_per_rank=res.cpus_per_gpu, ranks_per_node=gpus, environ=environ)
    python = spec.python or "python3"
    findings: list[megatron.Finding] = []
    memory = None
    args = spec.args
    exit_sig = ""  # megatron: the signal its --exit-signal-handler waits for, delivered by the agent
    ctx_extra: dict[str, object] = {}
    if spec.launcher == "megatron":
        from slurmkit.jobs import megatron

        sizes = {"tp": spec.tp, "pp": spec.pp, "cp": spec.cp, "ep": spec.ep}
        args = spec.args + megatron.parallel_args(sizes, spec.args) + megatron.signal_args(spec.args)
        found, memory = megatron.check_layout(
            nodes=spec.nodes, gpus_per_node=gpus, tp=spec.tp, pp=spec.pp, cp=spec.cp, ep=spec.ep,
            args=args, gpu_memory_mb=facts.gpu_memory_mb,
        )
        findings += megatron.signal_findings(args) + found
        exit_sig = megatron.exit_signal(args)
        save = megatron.arg_value(args, "--save")
        if save and save.startswith("/"):  # a relative --save is the ranks' working directory's: not read here
            ctx_extra["megatron_tracker"] = save.rstrip("/") + "/" + megatron.TRACKER
        if exit_sig not in megatron.EXIT_SIGNALS:  # an error finding (signal_findings): forced, it gets the default
            exit_sig = "SIGTERM"
        world = spec.nodes * gpus
        mp = spec.tp * spec.pp * spec.cp
        ctx_extra.update({
            "tp": spec.tp, "pp": spec.pp, "cp": spec.cp, "ep": spec.ep,
            "dp": world // mp if world % mp == 0 else "n/a",
            "megatron_notes": [_comment(line) for line in (memory.lines() if memory else [])],
        })
    elif any(v != 1 for v in (spec.tp, spec.pp, spec.cp, spec.ep)):
        raise UsageError("--tp/--pp/--cp/--ep need --launcher megatron")
    mounts = container_mounts(spec, run_dir) if spec.container_image else ""
    # each rank on its GPU's cores (base.sh.j2 _gpusub_exec_bound): not inside a container image (it may lack
    # bash's taskset), not without GPUs, not when asked not to
    cpu_bind = bool(gpus) and spec.cpu_bind and not spec.container_image
    prog = program(spec, args)
    wrapper = rank_wrapper(spec.launcher, cpu_bind, exit_sig if spec.launcher == "megatron" else "")
    if wrapper:  # torchrun --no-python runs the wrapper, which runs the program
        prog = ([python, "-u"] if spec.is_python else []) + [spec.script, *args]
    ctx = {
        "header": header_line(facts.inventory_sha256),
        "directives": directives(spec, facts, run_dir, gpus, topo, res),
        "launcher": spec.launcher,
        "run_dir": run_dir,
        "signal_grace": spec.signal_grace,
        "max_restarts": spec.max_restarts,
        "stopped_exit": STOPPED_EXIT,
        "env_batch": envp.batch(),
        "env_task": envp.task(),
        "hca_static": ",".join(facts.ib_hca_exclude),
        "socket_ifname": envp.socket_ifname,
        "nodes": spec.nodes,
        "nproc_per_node": gpus,
        "tasks_per_node": res.tasks_per_node,
        "cpus_per_task": res.cpus_per_task,
        # srun --wait: how long the other tasks may run on after the first one ends; never shorter than the grace,
        # so a slower node's checkpoint is not cut when a faster node's agent has already exited
        "step_wait": max(60, spec.signal_grace + 30) if spec.signal_grace else 60,
        "container_image": spec.container_image,
        "container_mounts": mounts,
        "python": python,
        "agent": forwarding_agent(exit_sig) if exit_sig else AGENT,
        "rank_wrapper": wrapper,
        "exit_signal": exit_sig,
        "store": STORE,
        "rdzv_backend": RDZV_BACKEND,
        "store_in_batch": spec.nodes > 1 and not spec.container_image,  # env.py: PET_RDZV_CONF is_host=0
        "shutdown_timeout": spec.signal_grace if tf.shutdown_timeout_flag and spec.signal_grace else 0,
        "pinned": topo.pinned,
        "program": prog,
        "cpu_bind": cpu_bind,
        "label": spec.label,
        "gpu_cpus": ";".join(facts.gpu_cpus),
        "setup": spec.setup,
        "megatron_tracker": "",
        **ctx_extra,
    }
    script = environment("job_templates").get_template(TEMPLATES[spec.launcher]).render(**ctx)
    return RenderedJob(
        spec=spec, facts=facts, request=SubmitRequest(script=script, argv=(), workdir=workdir), env=envp,
        run_dir=run_dir, gpus_per_node=gpus, topology=topo, findings=tuple(findings), memory=memory,
        script_args=tuple(args), resources=res, torch=tf,
    )


def container_mounts(spec: JobSpec, run_dir: str) -> str:
    """pyxis ``--container-mounts``: the run dir (logs, checkpoints, flight-recorder dumps) and the script's
    directory at the same paths, then the user's. pyxis splits the list on ``,`` and each entry on ``:``
    (SRC:DST[:FLAGS]), so a path holding either cannot be mounted."""
    import os.path

    own = [run_dir, os.path.dirname(spec.script) or "/"]
    for flag, p in (("--run-dir", run_dir), ("SCRIPT", own[1])):
        if "," in p or ":" in p:
            raise UsageError(f"{flag}: {p!r} contains ',' or ':', which pyxis --container-mounts cannot express")
    entries = [f"{p}:{p}" for p in dict.fromkeys(own)]
    if spec.container_mounts:
        entries.append(spec.container_mounts)
    return ",".join(entries)


def rank_wrapper(launcher: str, cpu_bind: bool, exit_sig: str) -> str:
    """The bash text torchrun runs each rank under (``--no-python bash -c TEXT gpusub-rank PROGRAM...``), or "".

    cpu_bind: the rank runs on its GPU's cores (base.sh.j2 _gpusub_exec_bound). megatron: the rank starts with SIGUSR2
    ignored (an ignored signal stays ignored across exec, POSIX execve(2); bash's ``trap ''`` sets SIG_IGN), unless
    it is Megatron's exit signal: with proctrack/linuxproc Slurm's SIGUSR2 reaches every process of the step, and
    Megatron-LM, which does not handle it, would die of it with nothing saved. Megatron's own handler for its exit
    signal is installed over whatever the rank inherits, so --exit-signal SIGUSR2 keeps working."""
    ignore = 'trap "" USR2; ' if launcher == "megatron" and exit_sig != "SIGUSR2" else ""
    if launcher == "srun" or not (cpu_bind or ignore):
        return ""
    return ignore + ('_gpusub_exec_bound "$LOCAL_RANK" "$@"' if cpu_bind else 'exec "$@"')


def program(spec: JobSpec, args: tuple[str, ...]) -> list[str]:
    """The argv the step runs after the launcher; every element is shell-quoted by the template."""
    if spec.launcher == "srun":
        head = [spec.python or "python3", "-u"] if spec.is_python else []
    else:
        head = [] if spec.is_python else ["--no-python"]  # torchrun runs a non-.py program directly
    return [*head, spec.script, *args]


def cpu_binding_line(job: RenderedJob) -> str:
    """--explain: how each rank is bound to CPUs."""
    spec = job.spec
    if not job.gpus_per_node:
        return "cpu binding: none (no GPUs)"
    if spec.container_image:
        return "cpu binding: none inside a container image (Slurm's own task binding applies)"
    if not spec.cpu_bind:
        return "cpu binding: off (--no-cpu-bind)"
    where = "taskset per rank (srun task)" if spec.launcher == "srun" else "taskset per torchrun worker"
    fallback = (f"else the inventory's gres.conf Cores= ({'; '.join(f'gpu{i}: {c}' for i, c in enumerate(job.facts.gpu_cpus))})"
                if job.facts.gpu_cpus else "no inventory mapping as a fallback (no gres.conf Cores= known): such "
                "ranks stay unbound")
    return (f"cpu binding: each rank on the cores of its GPU's NUMA node (the GPU's PCI device per the NVIDIA driver, "
            f"{fallback}), within the CPUs Slurm gave the task; {where}; --no-cpu-bind to turn it off")


def label_line(job: RenderedJob) -> str:
    """--explain: how the step's output lines are labelled."""
    if not job.spec.label:
        return "log lines: as the program prints them (--no-label)"
    if job.spec.launcher == "srun":
        return "log lines: each starts with its task's rank, \"3: ...\" (srun --label); --no-label to turn it off"
    return ("log lines: each rank's start with its global rank, \"3: ...\" (torchrun --tee 3 and "
            "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE), and each rank's stdout/stderr are kept in "
            "<run dir>/logs/<job>.r<attempt>.ranks/<node>/; torchrun's own lines are unlabelled; --no-label to turn it off")


def _comment(line: str) -> str:
    return " ".join(line.split())


def explain(job: RenderedJob) -> list[str]:
    """``--explain``: every variable with its value and reason, then what is deliberately left unset."""
    out = [f"environment ({job.spec.launcher}; facts from {job.facts.source}):"]
    width = max((len(v.name) for v in job.env.vars), default=10)
    for v in job.env.vars:
        value = "(computed on each node)" if v.name == "NCCL_IB_HCA" and v.kind == "task" else v.value
        if v.origin == "env":
            out.append(f"  {v.name:<{width}} = {value}  (yours, kept: from the submitting environment; slurmkit's "
                       f"would be {v.instead})")
            continue
        who = {"gpusub": "slurmkit's default", "site": "the site's", "user": "yours, --env"}.get(v.origin, v.origin)
        when = ", computed per node at start" if v.kind == "task" else ""
        out.append(f"  {v.name:<{width}} = {value}  ({who}{when}: {v.reason})")
    for name, why in job.env.not_set:
        out.append(f"  {name:<{width}}   not set (slurmkit's default: {why}; a value you export is kept)")
    for w in job.env.warnings:
        out.append(f"  warning: {w}")
    out.append(f"  {'MASTER_ADDR':<{width}} = first node's address (site interface, else its Slurm NodeAddr), "
               "resolved on that node at start")
    out.append(f"  {'MASTER_PORT':<{width}} = 20000 + job id % 12000 (below Linux's ephemeral range 32768-60999), "
               "the next candidate if something on the first node already listens there")
    out.append(f"interpreter: {job.spec.python or 'python3'} ({job.torch.label if job.torch else 'torch unknown'}"
               + (", inside the container image" if job.spec.container_image else "") + ")")
    if job.resources:
        out.append(f"resources: {job.resources.summary()}; sbatch --cpus-per-task/--mem, srun --cpus-per-task "
                   "(22.05+ srun does not inherit it); override with --cpus-per-gpu / --mem-per-gpu")
    out.append(cpu_binding_line(job))
    out.append(label_line(job))
    if job.spec.launcher == "megatron":
        from slurmkit.jobs import megatron

        sig = megatron.exit_signal(job.script_args)
        added = "" if megatron.EXIT_HANDLER_FLAG in job.spec.args else " (added by gpusub)"
        out.append(f"preemption: SIGUSR2/SIGTERM to the batch shell or the agent -> {sig} once to each Megatron rank "
                   f"(--exit-signal-handler{added}): Megatron saves to --save after the current iteration and exits 0; "
                   "the ranks ignore SIGUSR2" + (" (their exit signal excepted)" if sig == "SIGUSR2" else ""))
    for f in job.facts.notes:
        out.append(f"  note: {f}")
    return out
