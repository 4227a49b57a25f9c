"""The Python API beside ``gpusub``, for researchers moving from submitit:

    from slurmkit import launch

    job = launch.submit("train.py", "--lr", "3e-4", nodes=4, time="2:00:00")   # a script and its arguments
    job = launch.submit(train, cfg, nodes=2, gpus_per_node=8, time="1:00:00")          # a callable, on every rank
    job.state; job.wait(); job.result(); print(job.logs()); job.cancel()
    tasks = launch.map_array(evaluate, [{"lr": 1e-4}, {"lr": 3e-4}], time="30")       # one array job, one task each

One code path with the CLI: every submission goes through ``prepare`` (inventory/live facts, placement, preflight,
rendering) and ``submit_prepared`` (run dir, one sbatch) exactly as ``gpusub`` does, so the job, its NCCL
environment, its placement and its preemption contract are the same.

Callables: the function (and its arguments) are pickled with the standard library into the run dir, so the function
must be importable where the job runs (a module-level function or class of an importable module, as with
multiprocessing's spawn; the job runs under the interpreter this process runs under, or ``python=``). Every rank
calls it (torchrun sets RANK, WORLD_SIZE, LOCAL_RANK...); rank 0's return value is the job's result. An exception
is recorded with its traceback and re-raised by :meth:`Job.result` as :class:`JobFailed`.

Checkpointing (the same preemption path as the CLI's contract): a callable *object* with a ``checkpoint()`` method
is checkpointable. On SIGUSR2 (the time limit's warning, QOS preemption with a grace time, ``gpusub cancel --signal
USR2``) or SIGTERM, rank 0 calls ``obj.checkpoint()`` (save what the object must keep into its attributes or
under ``$GPUSUB_CHECKPOINT_DIR``), the object itself is pickled into the run dir, and the process exits so the batch
shell requeues the job; the next attempt calls the *saved* object, which resumes where it was (submitit's
Checkpointable model). A plain function is simply called again on a requeue.
"""

from __future__ import annotations

import os
import pickle
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from slurmkit.errors import SlurmkitError, UsageError

if TYPE_CHECKING:
    from slurmkit.backend.base import Backend
    from slurmkit.jobs.monitor import JobStatus
    from slurmkit.jobs.remote import Remote, RemoteJob

CALL_FILE = "call.pkl"  # (fn, args, kwargs) or (fn, [params...]) for an array
STATE_FILE = "checkpoints/callable.pkl"  # a checkpointed callable object, preferred over CALL_FILE on restart
RUNNER = "slurmkit_call.py"  # the script the job runs: a two-line launcher of slurmkit.jobs.runner


class JobFailed(SlurmkitError):
    """The job ended without a result: its state, and the remote traceback when the callable raised."""


@dataclass
class Job:
    """A handle on a submitted job (or one array task: ``job_id`` ``A_T``)."""

    job_id: str
    run_dir: str
    backend: Backend = field(repr=False)
    environ: Mapping[str, str] | None = field(default=None, repr=False)
    task: int | None = None  # an array task's index (results are per task)

    # --- state -------------------------------------------------------------------------------------------------
    def status(self) -> JobStatus:
        from slurmkit.jobs.monitor import JobStatus, statuses

        st = statuses([self.job_id], self.backend, self.environ)[0]
        if st.state == "UNKNOWN" and self.task is not None:
            # a task not started yet is inside its array's pending record (ArrayTaskId=0-2, 1,3, 0-9%2)
            base = self.job_id.split("_", 1)[0]
            for j in self.backend.jobs():
                if j.raw.get("ArrayJobId") == base and self.task in _task_ids(j.raw.get("ArrayTaskId", "")):
                    return JobStatus(self.job_id, j.state, "slurmctld", reason=j.reason, run_dir=self.run_dir)
        return st

    @property
    def state(self) -> str:
        return self.status().state

    def done(self) -> bool:
        from slurmkit.backend.parse import TERMINAL_STATES

        return self.state in TERMINAL_STATES

    def wait(self, timeout: float | None = None, poll_cap: float = 2.0) -> JobStatus:
        """Until the job ends (COMPLETED, FAILED, ... -- a requeue is not an end): its final status. One scontrol
        query per poll, with a backoff up to ``poll_cap`` seconds; TimeoutError after ``timeout`` seconds.

        A job requeued still pending on gpusub's own submit-time node pin, which no batch shell was left to clear
        (its batch node was lost), is unpinned here as ``gpusub --follow`` does; what was done is logged as a
        warning of the ``slurmkit.jobs`` logger (stderr unless the program configures logging)."""
        import logging

        from slurmkit.backend.parse import TERMINAL_STATES
        from slurmkit.jobs.monitor import Backoff, Unpinner

        backoff = Backoff(cap=poll_cap)
        end = None if timeout is None else time.monotonic() + timeout
        unpin = Unpinner()
        while True:
            st = self.status()
            if st.state in TERMINAL_STATES or st.state == "UNKNOWN":
                return st
            if st.kept_pin and unpin.wants(st.restarts):
                logging.getLogger("slurmkit.jobs").warning(
                    "%s", unpin.clear(self.job_id, st.kept_pin, st.restarts, self.backend))
            if end is not None and time.monotonic() > end:
                raise TimeoutError(f"job {self.job_id} still {st.state} after {timeout} s")
            time.sleep(backoff())

    def result(self, timeout: float | None = None) -> Any:
        """Rank 0's return value (waits for the end). JobFailed when the job did not complete or raised."""
        st = self.wait(timeout)
        path = Path(self.run_dir) / (f"result.{self.task}.pkl" if self.task is not None else "result.pkl")
        try:
            with open(path, "rb") as fh:
                kind, value = pickle.load(fh)  # noqa: S301 - written by this user's own job
        except FileNotFoundError:
            raise JobFailed(f"job {self.job_id} ended {st.state} (exit {st.exit_code or '?'}) without a result "
                            f"({path} missing; see job.logs())") from None
        if kind == "error":
            raise JobFailed(f"job {self.job_id} raised in the job:\n{value}")
        return value

    def logs(self) -> str:
        """Every attempt's log, in order (as ``gpusub logs``)."""
        import io

        from slurmkit.jobs.monitor import print_logs

        out = io.StringIO()
        print_logs(self.job_id, self.run_dir, out)
        return out.getvalue()

    def cancel(self, signal: str | None = None) -> None:
        """Cancel, or with ``signal="USR2"`` ask it to checkpoint and requeue (as ``gpusub cancel --signal``)."""
        from slurmkit.jobs.monitor import cancel

        cancel(self.job_id, self.backend, signal)


def _task_ids(spec: str) -> set[int]:
    out: set[int] = set()
    for part in spec.split("%", 1)[0].split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit() and (not hi or hi.isdigit()):
            out.update(range(int(lo), int(hi or lo) + 1))
    return out


def _backend(backend: Backend | None) -> Backend:
    if backend is not None:
        return backend
    from slurmkit.backend.pyslurm import select_backend

    return select_backend()


def _spec(script: str, args: Sequence[str], opts: dict[str, Any]):  # type: ignore[no-untyped-def]
    from dataclasses import fields

    from slurmkit.jobs.spec import JobSpec, parse_env_pair, parse_mem_mb

    known = {f.name for f in fields(JobSpec)} - {"script", "args"}
    bad = sorted(set(opts) - known - {"mem_per_gpu"})
    if bad:
        raise UsageError(f"jobs.submit: unknown option(s) {', '.join(bad)} (JobSpec fields: {', '.join(sorted(known))})")
    if "mem_per_gpu" in opts:
        opts["mem_per_gpu_mb"] = parse_mem_mb("mem_per_gpu", str(opts.pop("mem_per_gpu")))
    if isinstance(opts.get("env"), Mapping):
        opts["env"] = tuple((k, str(v)) for k, v in opts["env"].items())
    elif opts.get("env"):
        opts["env"] = tuple(parse_env_pair(p) if isinstance(p, str) else tuple(p) for p in opts["env"])
    for k in ("sbatch_args",):
        if k in opts:
            opts[k] = tuple(opts[k])
    return JobSpec(script=os.path.abspath(script), args=tuple(str(a) for a in args), **opts)


def _submit_spec(spec, backend: Backend | None, environ: Mapping[str, str] | None, force: bool,  # type: ignore[no-untyped-def]
                 argv_note: list[str]):
    from slurmkit.jobs.submit import prepare, submit_prepared

    b = _backend(backend)
    prepared = prepare(spec, b, environ=environ, force=force)
    result = submit_prepared(prepared, b, argv_note, environ=environ)
    return b, result


def _callable_run_dir(opts: dict[str, Any], environ: Mapping[str, str] | None, name: str) -> str:
    """The run dir is made before the submission here: the pickled call and its launcher live in it."""
    from slurmkit.jobs import facts as factsmod
    from slurmkit.jobs.rundir import default_run_root, new_run_dir

    if opts.get("run_dir"):
        return os.path.abspath(str(opts["run_dir"]))
    env = os.environ if environ is None else environ
    inv = factsmod.load_inventory_facts(opts.get("partition"), factsmod.inventory_path(env))
    return new_run_dir(default_run_root(inv.run_root if inv else None, env, os.getcwd()), name)


def _write_call(run_dir: str, payload: object) -> str:
    try:  # pickled in memory first: a call that cannot be pickled leaves nothing behind
        data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, AttributeError, TypeError) as exc:
        raise UsageError(f"jobs.submit: the callable or its arguments cannot be pickled ({exc}); the function must "
                         "be importable (defined at module level), as with multiprocessing") from exc
    root = Path(run_dir)
    try:
        (root / "checkpoints").mkdir(parents=True, exist_ok=True)
        (root / CALL_FILE).write_bytes(data)
        runner = root / RUNNER
        runner.write_text("from slurmkit.jobs.runner import main\n\nmain()\n")
    except OSError as exc:
        raise UsageError(f"run_dir {run_dir}: cannot write the call: {exc.strerror}") from exc
    return str(runner)


@overload
def submit(target: str | Callable[..., Any], *args: Any, backend: Backend | None = None,
           environ: Mapping[str, str] | None = None, force: bool = False, remote: None = None, **opts: Any) -> Job: ...


@overload
def submit(target: str, *args: Any, backend: Backend | None = None, environ: Mapping[str, str] | None = None,
           force: bool = False, remote: Remote | str, **opts: Any) -> RemoteJob: ...


def submit(target: str | Callable[..., Any], *args: Any, backend: Backend | None = None,
           environ: Mapping[str, str] | None = None, force: bool = False, remote: Remote | str | None = None,
           **opts: Any) -> Job | RemoteJob:
    """Submit a script (``target`` a path; ``args`` its command-line arguments) or a callable (``target(*args,
    **kwargs)`` on every rank; keyword arguments for the callable go in ``kwargs={...}``).

    ``opts`` are gpusub's options by their JobSpec names: nodes, gpus_per_node, partition, time, account, qos,
    name, launcher, env (a mapping), python, exclusive, exclude, constraint, reservation, dependency, signal_grace,
    max_restarts, topology, run_dir, cpus_per_gpu, mem_per_gpu ("16G"), sbatch_args, ... Preflight errors raise
    ``PreflightError`` (nothing is submitted) unless ``force``.

    ``remote``: a ``slurmkit.jobs.remote.Remote`` (or ``"[USER@]HOST[:PORT]"``): the script's tree is shipped over
    ssh and the cluster's gpusub submits it, as ``gpusub --remote``; -> a ``RemoteJob`` (status, state, wait, logs,
    cancel). ``opts["remote_token"]`` names the run (the same token twice never submits twice)."""
    if remote is not None:
        from slurmkit.jobs import remote as rmt

        if callable(target):
            raise UsageError("launch.submit(remote=...): a script only (a callable's pickle names modules of this "
                             "machine, which the cluster may not have)")
        r = rmt.Remote(rmt.Target.parse(remote)) if isinstance(remote, str) else remote
        token = opts.pop("remote_token", None)
        _spec(str(target), [str(a) for a in args], dict(opts))  # the same option names and checks as a local submit
        flags = rmt.gpusub_flags({**opts, **({"force": True} if force else {})})
        return rmt.submit_script(r, str(target), *(str(a) for a in args), options=flags, token=token)
    if callable(target):
        kwargs = opts.pop("kwargs", {}) or {}
        name = opts.setdefault("name", getattr(target, "__name__", type(target).__name__))
        run_dir = _callable_run_dir(opts, environ, str(name))
        opts["run_dir"] = run_dir
        script = _write_call(run_dir, ("call", target, args, kwargs))
        spec = _spec(script, (), opts)
    else:
        spec = _spec(str(target), [str(a) for a in args], opts)
    b, res = _submit_spec(spec, backend, environ, force, ["slurmkit.jobs.submit", repr(target)])
    return Job(res.job_id, res.run_dir, b, environ)


def map_array(fn: Callable[..., Any], params: Sequence[Any], *, backend: Backend | None = None,
              environ: Mapping[str, str] | None = None, force: bool = False, max_parallel: int | None = None,
              **opts: Any) -> list[Job]:
    """One array job, task i calling ``fn(params[i])`` (a dict is passed as keyword arguments, a tuple as
    positional ones). -> one handle per task (``A_i``), each with its own result. ``max_parallel``: sbatch's
    ``--array=0-N%M``."""
    if not params:
        raise UsageError("jobs.map_array: params is empty")
    name = opts.setdefault("name", getattr(fn, "__name__", "map"))
    run_dir = _callable_run_dir(opts, environ, str(name))
    opts["run_dir"] = run_dir
    opts["array"] = f"0-{len(params) - 1}" + (f"%{max_parallel}" if max_parallel else "")
    script = _write_call(run_dir, ("array", fn, list(params)))
    spec = _spec(script, (), opts)
    b, res = _submit_spec(spec, backend, environ, force, ["slurmkit.jobs.map_array", repr(fn)])
    return [Job(f"{res.job_id}_{i}", res.run_dir, b, environ, task=i) for i in range(len(params))]

