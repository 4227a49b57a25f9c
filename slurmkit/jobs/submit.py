"""prepare (facts + render + preflight) and submit: the library behind ``gpusub`` and the demo.

    from slurmkit.backend.cli import CLIBackend
    from slurmkit.jobs import JobSpec, submit_job, follow
    job_id, run_dir = submit_job(JobSpec(script="/abs/train.py", nodes=4), CLIBackend())
    follow(job_id, CLIBackend(), sys.stdout)
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from slurmkit.errors import SlurmkitError, UsageError
from slurmkit.jobs import facts as factsmod
from slurmkit.jobs.render import RenderedJob, render, shape_errors
from slurmkit.jobs.rundir import cluster_key, default_run_root, new_run_dir, record_job_id, write_run_dir
from slurmkit.jobs.spec import ClusterFacts, JobSpec, apply_sbatch_env

if TYPE_CHECKING:
    from slurmkit.backend.base import Backend


class PreflightError(UsageError):
    """The job would not run as asked (or would fail right away): refused before it waits in the queue.
    ``errors``: every error found, one line each (the edge prints them all, not the first one alone)."""

    def __init__(self, message: str, errors: tuple[str, ...] = ()):
        super().__init__(message)
        self.errors = errors or (self.one_line(),)


@dataclass(frozen=True)
class Prepared:
    job: RenderedJob
    warnings: tuple[str, ...] = ()
    start_estimate: str | None = None
    git: dict[str, object] | None = None  # the script's git state, found while the preflight ran
    tenant: tuple[str, ...] = ()  # --explain: the account and QOS the job gets and why, the GPU limits on its path
    # the tenant check's warnings (the job waits for a GPU quota, or the limits could not be read): sbatch --test-only
    # ignores association and QOS limits, so its estimate does not hold then
    quota_waits: tuple[str, ...] = ()


@dataclass(frozen=True)
class SubmitResult:
    job_id: str
    run_dir: str
    prepared: Prepared
    unpinned: str | None = None  # check_pin cleared the pin: what it said

    def __iter__(self) -> Iterator[str]:  # ``job_id, run_dir = submit_job(...)``
        return iter((self.job_id, self.run_dir))

    @property
    def log_path(self) -> str:
        jid = f"{self.job_id}_0" if self.prepared.job.spec.array else self.job_id
        return self.prepared.job.log_path(jid)


def gather_facts(spec: JobSpec, backend: Backend | None, environ: Mapping[str, str] | None = None) -> ClusterFacts:
    """Inventory facts (no Slurm call); with a backend also the live partition (MaxTime, members)."""
    env = os.environ if environ is None else environ
    inv = factsmod.load_inventory_facts(spec.partition, factsmod.inventory_path(env))
    if backend is None:
        if inv is None:
            return ClusterFacts(partition=spec.partition, notes=("no inventory and no Slurm query: flags only",))
        if spec.partition and inv.partition != spec.partition:
            return replace(inv, partition=spec.partition)
        return inv
    return factsmod.from_slurm(backend, spec.partition, inv)


def prepare(
    spec: JobSpec,
    backend: Backend | None = None,
    *,
    facts: ClusterFacts | None = None,
    environ: Mapping[str, str] | None = None,
    cwd: str | None = None,
    force: bool = False,
    test_only: bool = True,
) -> Prepared:
    """Facts, render, preflight. With ``backend`` None nothing talks to Slurm (a dry run without queries)."""
    env = os.environ if environ is None else environ
    cwd = cwd or os.getcwd()
    sp = Path(spec.script)
    if sp.is_dir():
        raise PreflightError(f"{spec.script}: is a directory; give the training script (e.g. {spec.script}/train.py)")
    if not sp.is_file():
        raise PreflightError(f"{spec.script}: no such file (checked before queueing, not hours later)")
    git_thread = None
    git: dict[str, object] = {}
    if backend is not None and test_only:  # a submit: the run dir records the script's git state
        import threading

        from slurmkit.jobs.rundir import git_state

        git_thread = threading.Thread(target=lambda: git.update(git_state(spec.script)), daemon=True)
        git_thread.start()  # two git calls, side by side with the Slurm queries below
    tenant_q = None
    if backend is not None:  # accounts and GPU quotas (issue 13): two queries beside the others
        from slurmkit.jobs.tenant import start as start_tenant

        tenant_q = start_tenant(environ)
    warm = None
    if backend is not None and facts is None:
        import threading

        # Jinja2's import and the template's load (~20 ms of CPU) while the Slurm queries below wait on slurmctld,
        # instead of after them; joined before render, which then finds both done
        warm = threading.Thread(target=_warm_template, args=(spec.launcher,), daemon=True)
        warm.start()
    spec, env_unset, env_warnings = apply_sbatch_env(spec, env)
    spec, torch_version, interp_errors = _pin_interpreter(spec)
    f = facts if facts is not None else gather_facts(spec, backend, env)
    if warm is not None:
        warm.join()
    if torch_version and not f.torch_version:
        f = replace(f, torch_version=torch_version)
    run_dir = spec.run_dir or new_run_dir(default_run_root(f.run_root, env, cwd), spec.job_name)
    job = render(spec, f, os.path.abspath(run_dir), workdir=cwd, environ=env)
    if env_unset:
        job = replace(job, request=replace(job.request, env_unset=env_unset))
    warnings: list[str] = list(env_warnings) + list(job.env.warnings)
    errors = interp_errors + [x.message for x in job.findings if x.level == "error"]
    warnings += [x.message for x in job.findings if x.level == "warning"]
    if f.node_gpus:
        fit = sum(1 for _, g in f.node_gpus if g >= job.gpus_per_node)
        if fit < spec.nodes:
            errors.append(f"partition {f.partition} has {fit} node(s) with >= {job.gpus_per_node} GPUs, "
                          f"the job asks for {spec.nodes}")
    errors += shape_errors(job)
    tenant: tuple[str, ...] = ()
    quota_waits: tuple[str, ...] = ()
    if tenant_q is not None:
        tc = tenant_q.result(spec.account, spec.qos, spec.nodes * job.gpus_per_node)
        errors += tc.errors
        warnings += tc.warnings
        tenant = tuple(tc.explain)
        quota_waits = tuple(tc.warnings)
    if errors and not force:
        # every error, one line each: the first alone hid the real cause behind "(+1 more)" (issue 24)
        lines = tuple(f"preflight: {' '.join(e.split())}" for e in errors)
        raise PreflightError("\n".join(lines), lines)
    warnings += [f"forced past: {e}" for e in errors]
    estimate = None
    later = _reservation_later(spec, f)
    if later is not None and backend is not None and test_only:
        # sbatch --test-only asks for a start now, and job_test_resv() answers ESLURM_INVALID_TIME_VALUE ("Invalid
        # time specified") for a reservation that has not started (src/slurmctld/reservation.c of slurm-22-05-8-1
        # and slurm-24-11-5-1; measured on labs of both), while plain sbatch queues the job: no test-only then
        estimate = later
    elif backend is not None and test_only:
        try:
            estimate = backend.test_only(job.request)
        except SlurmkitError as exc:
            if not force:
                raise PreflightError(f"preflight: sbatch --test-only refused the job: {exc.one_line()}") from exc
            warnings.append(f"forced past: sbatch --test-only: {exc.one_line()}")
    if git_thread is not None:
        git_thread.join()
    return Prepared(job=job, warnings=tuple(warnings), start_estimate=estimate,
                    git=git if git_thread is not None else None, tenant=tenant, quota_waits=quota_waits)


def _warm_template(launcher: str) -> None:
    """Import Jinja2 and load the job template into the cached environment render() uses; any problem is left
    for render() to report."""
    try:
        from slurmkit.jobs.render import TEMPLATES
        from slurmkit.templates import environment

        environment("job_templates").get_template(TEMPLATES.get(launcher, TEMPLATES["torchrun"]))
    except Exception:  # noqa: BLE001 - only a warm-up: render() loads the template again and reports
        pass


def _reservation_later(spec: JobSpec, f: ClusterFacts) -> str | None:
    """The start of the job's own reservation when it lies ahead (the job cannot start before it), else None."""
    if not spec.reservation or not f.live_at:
        return None
    r = next((r for r in f.reservations if r.name == spec.reservation), None)
    if r is None or r.start <= f.live_at:
        return None
    from datetime import datetime

    return f"{datetime.fromtimestamp(r.start):%Y-%m-%dT%H:%M:%S} (when reservation {r.name} starts)"


def _pin_interpreter(spec: JobSpec) -> tuple[JobSpec, str | None, list[str]]:
    """The interpreter the job runs under, pinned at submit (as submitit does): ``--python``, else the one gpusub
    runs under; with a container image the image's ``python3`` (nothing on this host to check).

    Returns the spec with ``python`` set, the torch version found (None when unknown) and preflight errors: an
    interpreter that does not exist here (compute nodes see the same shared paths as the login node in the
    clusters gpusub targets; ``--force`` submits anyway), or one without torch for torchrun/megatron."""
    needs = spec.launcher != "srun" or spec.is_python
    if spec.container_image:
        return (spec if spec.python else replace(spec, python="python3")), None, []
    python = spec.python or sys.executable
    if not python:
        return replace(spec, python="python3"), None, []
    if "/" not in python:
        # --python NAME: pin what this host's PATH gives (the binary probed below), not the name, which the job
        # would look up again in the compute node's PATH (maybe another interpreter, without torch)
        from shutil import which

        found = which(python)
        if found:
            python = os.path.abspath(found)
    if not needs:
        return replace(spec, python=python), None, []
    from slurmkit.jobs.interp import probe

    info = probe(python)
    what = f"--python {python}" if spec.python else f"interpreter {python} (the one gpusub runs under; see --python)"
    if not info.exists:
        return replace(spec, python=python), None, [
            f"{what}: {info.error} on the submit host; the job would fail with exit 127 when it starts"]
    errors = []
    if info.probed and info.torch_version is None and spec.launcher != "srun":
        errors.append(f"{what}: has no torch installed: torchrun would fail when the job starts")
    return replace(spec, python=python), info.torch_version, errors


def submit_prepared(prepared: Prepared, backend: Backend, gpusub_argv: list[str] | None = None,
                    environ: Mapping[str, str] | None = None) -> SubmitResult:
    """Write the run dir, then ONE sbatch: never retried, so a slow controller cannot produce a duplicate job."""
    env = os.environ if environ is None else environ
    write_run_dir(prepared.job, gpusub_argv or [], git=prepared.git)
    job_id = backend.submit(prepared.job.request)
    # the cluster the backend submitted to (a lab's backend carries its SLURM_CONF): the index key
    record_job_id(prepared.job.run_dir, job_id, env, cluster_key({**env, **(getattr(backend, "env", None) or {})}))
    unpinned = check_pin(prepared.job, job_id, backend) if prepared.job.topology.pinned else None
    return SubmitResult(job_id=job_id, run_dir=prepared.job.run_dir, prepared=prepared, unpinned=unpinned)


PIN_ROUNDS = 3  # moves of a pin after the submission before gpusub leaves the placement to Slurm


def check_pin(job: RenderedJob, job_id: str, backend: Backend) -> str | None:
    """A pinned job, once queued: are its nodes still its own? Two gpusub runs that read the queue at the same
    moment can pin the same idle nodes, and a job queued earlier without a pin may take them first
    (jobs/liveplace.py pin_conflicts). Then this job moves its pin to nodes that are free and pinned by no other
    pending job, earlier or later (the engine's placement on what the queue holds now), and checks again; where no
    such nodes exist, or a job queued earlier without a pin may take any node first, it clears its pin and asks for
    the same number of leaf switches instead (scontrol(1) 22.05 and 24.11: ReqNodeList= with a blank value clears
    it; ReqNodeList=<nodes> sets it on a pending job; Switches=count@wait).

    Moving rather than clearing: a job whose pin is cleared waits unpinned, and Slurm places it without regard to
    the pins of jobs queued after it that checked while it was still pinned -- the race of issue 34 item 5 (a
    -N 2 job pinned to the leaf the cleared -N 4 job then took waited with a whole leaf idle). A move is written
    before it is checked, and a job queued meanwhile checks after its own submission: of two such writes at least
    one is seen by the other's check, so two pins never stay on one node.

    -> what was done (a line for the user), or None when the pin stands (or the job already runs). The common case
    costs one squeue and one scontrol call, side by side; the queue is read whole only on a conflict. A failure
    to check leaves the pin as it is (the job is queued either way)."""
    from slurmkit import hostlist
    from slurmkit.jobs.facts import concurrently
    from slurmkit.jobs.liveplace import pin_conflicts

    pending_fn = getattr(backend, "pending", None)
    update = getattr(backend, "update_job", None)
    if pending_fn is None or update is None:
        return None
    pin = next(d.split("=", 1)[1] for d in job.topology.directives if d.startswith("--nodelist="))
    pinned = hostlist.expand(pin)
    try:
        queue, records = concurrently(pending_fn, lambda: backend.nodes(pinned))
    except SlurmkitError:
        return None
    if not any(j.job_id == job_id for j in queue):
        return None  # no longer pending: it started on its nodes (or ended): nothing to fix
    # the fast judgement: every pending job may take any node (a job of another partition only costs the full read)
    quick = replace(job.facts, pending=tuple((j, frozenset(j.req_nodes or pinned)) for j in queue),
                    live_nodes=tuple((n.name, n.state, n.flags, n.free_gpus, n.total_gpus) for n in records))
    if not pin_conflicts(job.spec, quick, job_id, frozenset(pinned), job.gpus_per_node):
        return None
    return _settle_pin(job, job_id, backend, pin)


def _settle_pin(job: RenderedJob, job_id: str, backend: Backend, pin: str) -> str | None:
    """check_pin's slow path: the whole live picture (jobs/facts.py from_slurm), the conflicts, a move or a clear."""
    from slurmkit import hostlist
    from slurmkit.jobs.liveplace import pin_conflicts
    from slurmkit.jobs.topology import SWITCH_WAIT, _topology, plan_topology

    done: list[str] = []
    first_conflict = ""
    moved = False
    for _ in range(PIN_ROUNDS + 1):
        try:
            facts = factsmod.from_slurm(backend, job.facts.partition, job.facts)
        except SlurmkitError as exc:
            return (f"the pinned nodes may have been taken meanwhile ({first_conflict}); checking failed: "
                    f"{exc.one_line()}") if first_conflict else None
        own = next((j for j, _ in facts.pending if j.job_id == job_id), None)
        if own is None:
            break  # it started (on the pin it has now) or ended
        pinned = frozenset(hostlist.expand(pin))
        taken = pin_conflicts(job.spec, facts, job_id, pinned, job.gpus_per_node, any_order=moved)
        if not taken:
            break
        first_conflict = first_conflict or ", ".join(taken)
        # the others as placement must see them: every other pinned job keeps its nodes, whenever it was queued;
        # a job queued after this one without a pin comes after it in Slurm's order and takes nothing from it
        others = tuple((j, may) for j, may in facts.pending
                       if j.job_id != job_id and (j.req_nodes or j.number < own.number))
        try:
            plan = plan_topology(job.spec, replace(facts, pending=others), job.gpus_per_node) \
                if len(done) < PIN_ROUNDS else None
        except UsageError:
            plan = None
        new = next((d.split("=", 1)[1] for d in plan.directives if d.startswith("--nodelist=")), None) \
            if plan is not None else None
        if new is not None and frozenset(hostlist.expand(new)) != pinned:
            try:
                backend.update_job(job_id, ReqNodeList=new)  # type: ignore[attr-defined]
            except SlurmkitError as exc:
                return f"the pinned nodes were taken meanwhile ({first_conflict}) and moving the pin failed: " \
                       f"{exc.one_line()}"
            done.append(new)
            pin, moved = new, True
            continue
        fields = {"ReqNodeList": ""}
        topo = _topology(job.facts)
        if topo is not None and topo.kind == "tree":
            leaves = len({topo.node_leaf[n] for n in pinned if n in topo.node_leaf})
            fields["Switches"] = f"{leaves}@{SWITCH_WAIT}"
        try:
            backend.update_job(job_id, **fields)  # type: ignore[attr-defined]
        except SlurmkitError as exc:
            return f"the pinned nodes were taken meanwhile ({first_conflict}) and clearing the pin failed: " \
                   f"{exc.one_line()}"
        _record_pin(job, "")
        how = f"--switches={fields['Switches']}" if "Switches" in fields else "no pin"
        return f"the pinned nodes were taken meanwhile ({first_conflict}): pin cleared, Slurm places the job ({how})"
    if not done:
        return None
    _record_pin(job, pin)
    return f"the pinned nodes were taken meanwhile ({first_conflict}): pinned to {pin} instead"


def _record_pin(job: RenderedJob, pin: str) -> None:
    """``<run dir>/pin``: gpusub's own pin once check_pin moved or cleared it (monitor.py _kept_pin compares the
    job's ReqNodeList with gpusub's pin, not a person's)."""
    try:
        (Path(job.run_dir) / "pin").write_text(pin + "\n")
    except OSError:
        pass


def submit_job(spec: JobSpec, backend: Backend, *, environ: Mapping[str, str] | None = None,
               force: bool = False) -> SubmitResult:
    """Preflight + submit; unpacks as ``job_id, run_dir``."""
    prepared = prepare(spec, backend, environ=environ, force=force)
    return submit_prepared(prepared, backend, environ=environ)
