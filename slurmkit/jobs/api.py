"""The Python API beside ``gpusub``, for researchers moving from submitit:

    from slurmkit import launch

    job = launch.submit("train.py", "--lr", "3e-4", nodes=4, time="2:00:00")   # a script and its arguments
    job = launch.submit(add, 1, 2)                     # a callable: one task, no GPU unless asked
    job = launch.submit(train, cfg, nodes=2, gpus_per_node=8, time="1:00:00")   # srun: one rank per GPU
    job.state; job.wait(); job.result(); job.results(); job.exception(); print(job.logs()); job.cancel()
    tasks = launch.map_array(evaluate, [{"lr": 1e-4}, {"lr": 3e-4}], time="30")       # one array job, one task each

    executor = launch.AutoExecutor(folder="logs")      # submitit's Executor API (slurmkit/jobs/executor.py)

One code path with the CLI: every submission goes through ``prepare`` (inventory/live facts, placement, preflight,
rendering) and ``submit_prepared`` (run dir, one sbatch) exactly as ``gpusub`` does, so the job, its NCCL
environment, its placement and its preemption contract are the same.

Callables: the call (function, arguments) is pickled with cloudpickle into the run dir, so a function or class
defined in the driver's ``__main__``, a lambda or a closure travels by value, as with submitit; a module beside the
driver is imported on the node from the driver's directory. The job runs under the interpreter this process runs
under (or ``python=``). Defaults for a callable: one node, one task, no GPU (``launcher="srun"``,
``gpus_per_node=0``); ``gpus_per_node=N`` gives N ranks per node (srun, one per GPU) unless ``tasks_per_node``
says otherwise. Every rank calls it and writes its own result: :meth:`Job.result` is rank 0's, :meth:`Job.results`
every rank's; an exception is recorded with its traceback and raised by :meth:`Job.result` as :class:`JobFailed`
(:meth:`Job.exception` returns it instead).

Checkpointing, as submitit documents it: on SIGUSR2 (the time limit's warning, QOS preemption with a grace time,
``job.cancel(signal="USR2")``) or SIGTERM, rank 0 calls ``fn.checkpoint(*args, **kwargs)`` (``fn`` a callable
object; ``__submitit_checkpoint__`` first when it has one) with the call's own arguments; the
:class:`~slurmkit.jobs.helpers.DelayedSubmission` it returns is what the next attempt calls (the batch shell
requeues the job, at most ``max_restarts`` times), ``None`` ends the job unrequeued. A plain function is simply
called again on a requeue.
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
    from slurmkit.jobs.helpers import DelayedSubmission
    from slurmkit.jobs.monitor import JobStatus
    from slurmkit.jobs.remote import Remote, RemoteJob

CALL_FILE = "call.pkl"  # {"calls": cloudpickled [DelayedSubmission, ...], "array": bool, "sys_path": [...]}
STATE_FILE = "checkpoints/callable.pkl"  # the call a checkpoint() returned, preferred over CALL_FILE on restart
RUNNER = "slurmkit_call.py"  # the script the job runs: a two-line launcher of slurmkit.jobs.runner


def dumps(obj: object) -> bytes:
    """Pickled as submitit does (cloudpickle): a function, class or lambda of ``__main__`` (or any module the node
    may lack) by value, the rest by reference. cloudpickle is a dependency; without it (an install that skipped
    it) the standard library pickles what is importable and refuses the rest."""
    import pickle

    try:
        import cloudpickle
    except ImportError:  # pragma: no cover - cloudpickle is in pyproject's dependencies
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)  # type: ignore[no-any-return]


def result_name(task: int | None, rank: int) -> str:
    """Rank 0 keeps the old name (result.pkl, result.T.pkl for array task T); rank R > 0 adds ``.rankR``."""
    base = "result" + (f".{task}" if task is not None else "")
    return f"{base}.pkl" if rank == 0 else f"{base}.rank{rank}.pkl"


class JobFailed(SlurmkitError):
    """The job ended without a result: its state, and the remote traceback when the callable raised
    (``traceback``: that text, None when the job died without one; ``job_id``; ``state``)."""

    def __init__(self, message: str, job_id: str = "", state: str = "", traceback: str | None = None) -> None:
        super().__init__(message)
        self.job_id, self.state, self.traceback = job_id, state, traceback


@dataclass
class Job:
    """A handle on a submitted job (or one array task: ``job_id`` ``A_T``), as submitit's Job: ``state``,
    ``done()``, ``wait()``, ``result()``, ``results()``, ``exception()``, ``task(i)``, ``stdout()``, ``cancel()``."""

    job_id: str
    run_dir: str
    backend: Backend = field(repr=False)
    environ: Mapping[str, str] | None = field(default=None, repr=False)
    array_task: int | None = None  # an array task's index (results are per task)
    ntasks: int = 1  # ranks (srun tasks) in the job: results() has one value each
    rank: int | None = None  # a view on one rank: task(i) of a multi-task job

    # --- state -------------------------------------------------------------------------------------------------
    def status(self) -> JobStatus:
        from slurmkit.jobs.monitor import JobStatus, statuses

        st = statuses([self.job_id], self.backend, self.environ)[0]
        if st.state == "UNKNOWN" and self.array_task is not None:
            # a task not started yet is inside its array's pending record (ArrayTaskId=0-2, 1,3, 0-9%2)
            base = self.job_id.split("_", 1)[0]
            for j in self.backend.jobs():
                if j.raw.get("ArrayJobId") == base and self.array_task in _task_ids(j.raw.get("ArrayTaskId", "")):
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

    def _outcome(self, rank: int, st: JobStatus) -> tuple[str, Any]:
        path = Path(self.run_dir) / result_name(self.array_task, rank)
        try:
            with open(path, "rb") as fh:
                return pickle.load(fh)  # type: ignore[no-any-return]  # noqa: S301 - this user's own job
        except FileNotFoundError:
            return "missing", (f"job {self.job_id} ended {st.state} (exit {st.exit_code or '?'}) without a result "
                               f"from rank {rank} ({path} missing; see job.logs())")

    def _ranks(self) -> list[int]:
        return [self.rank] if self.rank is not None else list(range(self.ntasks))

    def exception(self, timeout: float | None = None) -> JobFailed | None:
        """Waits for the end; the failure (JobFailed, with the remote traceback of the first rank that raised) or
        None when every rank returned. Not raised: returned, as submitit's ``exception()``."""
        st = self.wait(timeout)
        missing = None
        for r in self._ranks():
            kind, value = self._outcome(r, st)
            if kind == "error":
                where = f" (rank {r})" if self.ntasks > 1 else ""
                return JobFailed(f"job {self.job_id} raised in the job{where}:\n{value}", self.job_id, st.state, value)
            if kind == "missing" and missing is None:
                missing = JobFailed(value, self.job_id, st.state, None)
        return missing

    def results(self, timeout: float | None = None) -> list[Any]:
        """Every rank's return value, in rank order (waits for the end); JobFailed as :meth:`result`."""
        failed = self.exception(timeout)
        if failed is not None:
            raise failed
        st = self.status()  # not asked again: every rank's result is there (exception() found no gap)
        return [self._outcome(r, st)[1] for r in self._ranks()]

    def submission(self) -> DelayedSubmission:
        """The call this job runs next (the one a checkpoint saved, else the submitted one), unevaluated."""
        root = Path(self.run_dir)
        state = root / STATE_FILE.replace(".pkl", f".{self.array_task}.pkl" if self.array_task is not None
                                          else ".pkl")
        with open(state if state.is_file() else root / CALL_FILE, "rb") as fh:
            data = pickle.load(fh)  # noqa: S301 - this user's own submission
        if state.is_file():
            return data  # type: ignore[no-any-return]
        return pickle.loads(data["calls"])[self.array_task or 0]  # type: ignore[no-any-return]  # noqa: S301

    def awaitable(self, poll_interval: float = 1.0) -> _AsyncJob:
        """asyncio: ``await job.awaitable().result()`` (submitit's AsyncJobProxy; polls ``done()``)."""
        return _AsyncJob(self, poll_interval)

    def result(self, timeout: float | None = None) -> Any:
        """Rank 0's return value (this rank's for a ``task(i)`` view; waits for the end). JobFailed when the job did
        not complete or a rank raised."""
        return self.results(timeout)[0]

    @property
    def num_tasks(self) -> int:
        return 1 if self.rank is not None else self.ntasks

    def task(self, i: int) -> Job:
        """The view on rank ``i`` (submitit's ``job.task(i)``); the job itself when it has one task."""
        if not 0 <= i < self.num_tasks:
            raise ValueError(f"task {i}: must be between 0 and {self.num_tasks - 1}")
        if self.num_tasks == 1:
            return self
        from dataclasses import replace

        return replace(self, rank=i)

    def stdout(self) -> str:
        """The job's log (every rank, stdout and stderr in one stream, every attempt): :meth:`logs`."""
        return self.logs()

    stderr = stdout

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


class _AsyncJob:
    def __init__(self, job: Job, poll_interval: float) -> None:
        self.job, self.poll_interval = job, poll_interval

    async def wait(self, poll_interval: float | None = None) -> None:
        import asyncio

        while not self.job.done():
            await asyncio.sleep(self.poll_interval if poll_interval is None else poll_interval)

    async def result(self, poll_interval: float | None = None) -> Any:
        await self.wait(poll_interval)
        return self.job.result()

    async def results(self, poll_interval: float | None = None) -> list[Any]:
        await self.wait(poll_interval)
        return self.job.results()


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


def _write_call(run_dir: str, calls: Sequence[DelayedSubmission], array: bool) -> str:
    """The calls and the runner into the run dir. Pickled in memory first: a call that cannot be pickled leaves
    nothing behind."""
    try:
        blob = dumps(list(calls))
    except Exception as exc:  # noqa: BLE001 - cloudpickle raises what the object's own __reduce__ raises
        raise UsageError(f"jobs.submit: the callable or its arguments cannot be pickled ({type(exc).__name__}: "
                         f"{exc})") from exc
    import sys

    # the driver's directory (sys.path[0]: the script's, '' for -c and the REPL) and the working directory
    meta = {"calls": blob, "array": array, "sys_path": [os.path.abspath(sys.path[0] or "."), os.getcwd()]}
    root = Path(run_dir)
    try:
        (root / "checkpoints").mkdir(parents=True, exist_ok=True)
        (root / CALL_FILE).write_bytes(pickle.dumps(meta, protocol=pickle.HIGHEST_PROTOCOL))
        runner = root / RUNNER
        runner.write_text("from slurmkit.jobs.runner import main\n\nmain()\n")
    except OSError as exc:
        raise UsageError(f"run_dir {run_dir}: cannot write the call: {exc.strerror}") from exc
    return str(runner)


# a callable's defaults (issue 34): one task on one node, no GPU, unless asked. gpusub's own defaults (torchrun,
# every GPU of the node) are for training scripts; submitit's add(5, 7) must not book a whole 8-GPU node.
CALLABLE_DEFAULTS = {"launcher": "srun", "gpus_per_node": 0}  # gpus_per_node 0 only with srun (torchrun needs GPUs)


def submit_calls(calls: Sequence[DelayedSubmission], *, backend: Backend | None = None,
                 environ: Mapping[str, str] | None = None, force: bool = False, array: bool | None = None,
                 max_parallel: int | None = None, **opts: Any) -> list[Job]:
    """Submit calls as one job (one call, ``array`` not True) or as one array job, task i running ``calls[i]``
    (``max_parallel``: sbatch's ``--array=0-N%M``). The one path under submit(), map_array() and the executors."""
    if not calls:
        raise UsageError("jobs.submit: no call to submit")
    as_array = len(calls) > 1 if array is None else array
    if len(calls) > 1 and not as_array:
        raise UsageError("jobs.submit: several calls need an array job")
    opts = {k: v for k, v in opts.items() if v is not None}
    opts.setdefault("launcher", CALLABLE_DEFAULTS["launcher"])
    if opts["launcher"] == "srun":
        opts.setdefault("gpus_per_node", CALLABLE_DEFAULTS["gpus_per_node"])
    fn = calls[0].function
    name = opts.setdefault("name", _job_name(fn))
    run_dir = _callable_run_dir(opts, environ, str(name))
    opts["run_dir"] = run_dir
    if as_array:
        opts["array"] = f"0-{len(calls) - 1}" + (f"%{max_parallel}" if max_parallel else "")
    script = _write_call(run_dir, calls, as_array)
    spec = _spec(script, (), opts)
    b, res = _submit_spec(spec, backend, environ, force, ["slurmkit.jobs.submit", repr(fn)])
    r = res.prepared.job.resources
    ntasks = spec.nodes * (r.tasks_per_node if r else 1)
    if not as_array:
        return [Job(res.job_id, res.run_dir, b, environ, ntasks=ntasks)]
    return [Job(f"{res.job_id}_{i}", res.run_dir, b, environ, array_task=i, ntasks=ntasks) for i in range(len(calls))]


def _job_name(fn: object) -> str:
    import re

    raw = getattr(fn, "__name__", None) or type(fn).__name__
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", str(raw)).strip("_")[:64] or "call"  # "<lambda>" -> "lambda"


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

    ``opts`` are gpusub's options by their JobSpec names: nodes, gpus_per_node, tasks_per_node, partition, time,
    account, qos, name, launcher, env (a mapping), python, setup (shell lines run before the step), exclusive,
    exclude, constraint, reservation, dependency, signal_grace, max_restarts, topology, run_dir, cpus_per_gpu,
    mem_per_gpu ("16G"), sbatch_args, ... A callable gets one task and no GPU unless asked (``CALLABLE_DEFAULTS``),
    a script gpusub's defaults. Preflight errors raise ``PreflightError`` (nothing is submitted) unless ``force``.

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
        from slurmkit.jobs.helpers import DelayedSubmission

        kwargs = opts.pop("kwargs", {}) or {}
        return submit_calls([DelayedSubmission(target, *args, **kwargs)], backend=backend, environ=environ,
                            force=force, **opts)[0]
    spec = _spec(str(target), [str(a) for a in args], opts)
    b, res = _submit_spec(spec, backend, environ, force, ["slurmkit.jobs.submit", repr(target)])
    return Job(res.job_id, res.run_dir, b, environ)


def map_array(fn: Callable[..., Any], params: Sequence[Any], *, backend: Backend | None = None,
              environ: Mapping[str, str] | None = None, force: bool = False, max_parallel: int | None = None,
              **opts: Any) -> list[Job]:
    """One array job, task i calling ``fn(params[i])`` (a dict is passed as keyword arguments, a tuple as
    positional ones). -> one handle per task (``A_i``), each with its own result. ``max_parallel``: sbatch's
    ``--array=0-N%M``. (The executors' ``map_array(fn, *iterables)`` is submitit's, zipping the iterables.)"""
    from slurmkit.jobs.helpers import DelayedSubmission

    if not params:
        raise UsageError("jobs.map_array: params is empty")
    calls = [DelayedSubmission(fn, **p) if isinstance(p, dict) else
             DelayedSubmission(fn, *p) if isinstance(p, tuple) else DelayedSubmission(fn, p) for p in params]
    return submit_calls(calls, backend=backend, environ=environ, force=force, array=True,
                        max_parallel=max_parallel, **opts)


def job_states(jobs: Sequence[Any]) -> dict[str, str]:
    """Every job's state, with one Slurm query per backend for the Slurm jobs (monitor_jobs' poll)."""
    from slurmkit.jobs.monitor import statuses

    out: dict[str, str] = {}
    groups: dict[int, list[Job]] = {}
    for j in jobs:
        if type(j) is Job:  # a Slurm job (a LocalJob answers for itself)
            groups.setdefault(id(j.backend), []).append(j)
        else:
            out[j.job_id] = j.state
    for group in groups.values():
        ids = list(dict.fromkeys(j.job_id for j in group))
        got = {st.job_id: st.state for st in statuses(ids, group[0].backend, group[0].environ)}
        for j in group:
            state = got.get(j.job_id, "UNKNOWN")
            out[j.job_id] = j.state if state == "UNKNOWN" and j.array_task is not None else state  # a pending task
    return out
