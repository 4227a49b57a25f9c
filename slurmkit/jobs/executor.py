"""submitit's Executor API over slurmkit's submission (``launch.AutoExecutor``, ``SlurmExecutor``,
``LocalExecutor``, ``DebugExecutor``, ``JobEnvironment``): a submitit user's code runs with its import line and
its executor's name changed (docs/api.md).

* ``SlurmExecutor``: every submission goes through ``api.submit_calls`` -- gpusub's prepare/preflight/render and
  one sbatch -- so the job has gpusub's placement, NCCL environment and preemption contract.
* ``LocalExecutor``: the same run dir, pickled call and runner (slurmkit/jobs/runner.py), started on this machine
  by a small controller (slurmkit/jobs/localrun.py) that plays the batch shell: ranks, the time limit's signal,
  checkpoint and restart. No cluster: for tests.
* ``DebugExecutor``: the call runs in this process when its result is asked for, so breakpoints and pdb work; an
  exception is raised as itself (not wrapped), as submitit's debug executor does.

``update_parameters`` takes submitit's names (``timeout_min``, ``gpus_per_node``, ``tasks_per_node``, ``nodes``,
``cpus_per_task``, ``mem_gb``, ``slurm_partition``, ``slurm_array_parallelism``, ``slurm_setup``, ...; the
``slurm_`` prefix is optional on SlurmExecutor) and gpusub's own JobSpec names (``launcher``, ``env``,
``topology``, ...). An unknown name is a UsageError listing the valid ones.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurmkit.errors import UsageError
from slurmkit.jobs.api import Job, JobFailed, submit_calls
from slurmkit.jobs.helpers import DelayedSubmission

if TYPE_CHECKING:
    from slurmkit.backend.base import Backend
    from slurmkit.jobs.monitor import JobStatus

# submitit's name -> JobSpec's (value converted by _convert)
_RENAMED = {
    "timeout_min": "time", "job_name": "name", "name": "name", "ntasks_per_node": "tasks_per_node",
    "tasks_per_node": "tasks_per_node", "signal_delay_s": "signal_grace", "array_parallelism": "max_parallel",
    "mem_gb": "mem_mb", "mem": "mem_mb", "num_gpus": "gpus_per_node", "max_num_timeout": "max_restarts",
}
_SAME = ("nodes", "gpus_per_node", "cpus_per_task", "cpus_per_gpu", "mem_per_gpu", "partition", "account", "qos",
         "constraint", "exclude", "nodelist", "comment", "dependency", "exclusive", "mail_type", "mail_user",
         "reservation", "setup", "python", "launcher", "env", "topology", "max_restarts", "begin", "hold",
         "signal_grace", "sbatch_args", "max_parallel", "container_image", "container_mounts", "cpu_bind",
         "label")
# accepted and without effect, with why (docs/api.md)
_NO_EFFECT = {"stderr_to_stdout": "stdout and stderr are one log here"}
_REFUSED = {"gres": "use gpus_per_node", "gpus_per_task": "use gpus_per_node (srun: one rank per GPU)",
            "srun_args": "the step's srun line is gpusub's (its preemption contract); use sbatch_args or setup",
            "use_srun": "the step always runs under srun", "teardown": "not supported; put it in the callable",
            "mem_per_cpu": "use mem_gb or mem_per_gpu"}
VALID = sorted(set(_RENAMED) | set(_SAME) | set(_NO_EFFECT) | {"additional_parameters", "wckey"})


def _convert(params: Mapping[str, Any]) -> dict[str, Any]:
    """submitit's parameters -> submit_calls' options. A bad name or value: UsageError naming it."""
    out: dict[str, Any] = {}
    for raw, value in params.items():
        key = raw[len("slurm_"):] if raw.startswith("slurm_") and raw != "slurm_" else raw
        if value is None:
            continue
        if key in _REFUSED:
            raise UsageError(f"update_parameters: {raw} is not supported: {_REFUSED[key]}")
        if key in _NO_EFFECT:
            continue
        if key == "wckey":  # an sbatch option placement ignores (spec.PLACEMENT_NEUTRAL)
            value = {"wckey": value}
            key = "additional_parameters"
        if key == "additional_parameters":
            if not isinstance(value, Mapping):
                raise UsageError(f"update_parameters: additional_parameters must be a dict, got {value!r}")
            out.setdefault("sbatch_args", [])
            out["sbatch_args"] = [*out["sbatch_args"], *(f"--{k.replace('_', '-')}" if v is True else
                                                         f"--{k.replace('_', '-')}={v}" for k, v in value.items())]
            continue
        if key not in _RENAMED and key not in _SAME:
            raise UsageError(f"update_parameters: unknown parameter {raw!r}; valid: {', '.join(VALID)}")
        name = _RENAMED.get(key, key)
        if name == "time":
            out["_timeout_s"] = float(value) * 60 if isinstance(value, (int, float)) else None  # the local limit
            value = _minutes(raw, value)
        elif name == "mem_mb":
            value = int(float(value) * 1024) if key == "mem_gb" else _mem_mb(raw, value)
        elif name == "setup":
            if isinstance(value, str) or not isinstance(value, Iterable):
                raise UsageError(f"update_parameters: {raw} must be a list of shell lines, got {value!r}")
            value = tuple(value)
        out[name] = value
    return out


def _minutes(raw: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise UsageError(f"update_parameters: {raw} must be a number of minutes > 0, got {value!r}")
    whole = int(value) if float(value).is_integer() else int(value) + 1  # Slurm's resolution is a minute
    return str(whole)


def _mem_mb(raw: str, value: Any) -> int:
    from slurmkit.jobs.spec import parse_mem_mb

    return parse_mem_mb(raw, str(value).upper().replace("GB", "G").replace("MB", "M"))


def _run_root(folder: str | os.PathLike[str]) -> Path:
    """The folder up to its first %j/%A/%a/%t part (submitit's id-independent folder): each job gets its own run
    dir under it."""
    parts = Path(folder).expanduser().absolute().parts
    keep = []
    for p in parts:
        if any(tag in p for tag in ("%j", "%A", "%a", "%t")):
            break
        keep.append(p)
    return Path(*keep)


class _Batched:
    """A job submitted inside ``with executor.batch()``: nothing to ask before the context ends."""

    def __init__(self) -> None:
        self._job: Any = None

    def __getattr__(self, name: str) -> Any:
        job = self.__dict__.get("_job")
        if job is None:
            raise RuntimeError(f"job.{name}: interactions with jobs are not allowed within \"with executor.batch()\""
                               " (the array is submitted when the context ends)")
        return getattr(job, name)

    def __repr__(self) -> str:
        return repr(self._job) if self._job is not None else "<job pending in executor.batch()>"


class Executor:
    """submitit's Executor: ``submit``, ``map_array``, ``submit_array``, ``batch()``, ``update_parameters``."""

    def __init__(self, folder: str | os.PathLike[str], max_num_timeout: int = 3, python: str | None = None,
                 **_ignored: Any) -> None:
        self.folder = _run_root(folder)
        self.parameters: dict[str, Any] = {"max_restarts": max_num_timeout}
        if python is not None:
            self.parameters["python"] = python
        self._batch: list[tuple[_Batched, DelayedSubmission]] | None = None

    @classmethod
    def name(cls) -> str:
        return cls.__name__.removesuffix("Executor").lower()

    def update_parameters(self, **kwargs: Any) -> None:
        if self._batch is not None:
            raise RuntimeError('update_parameters: changing parameters within "with executor.batch()" is not '
                               "allowed (every job of the array has the same)")
        self.parameters.update(_convert(kwargs))

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        ds = DelayedSubmission(fn, *args, **kwargs)
        if self._batch is not None:
            shell = _Batched()
            self._batch.append((shell, ds))
            return shell
        return self._process([ds])[0]

    def map_array(self, fn: Callable[..., Any], *iterables: Iterable[Any]) -> list[Any]:
        """``fn(a, b)`` for each ``(a, b)`` of ``zip(*iterables)``, as one array job."""
        calls = [DelayedSubmission(fn, *args) for args in zip(*iterables)]  # noqa: B905 - map()'s rule, as submitit
        if not calls:
            warnings.warn("map_array: received an empty job array", stacklevel=2)
            return []
        return self._process(calls)

    def submit_array(self, fns: Sequence[Callable[[], Any]]) -> list[Any]:
        calls = [DelayedSubmission(f) for f in fns]
        if not calls:
            warnings.warn("submit_array: received an empty job array", stacklevel=2)
            return []
        return self._process(calls)

    @contextlib.contextmanager
    def batch(self, allow_implicit_submissions: bool = False) -> Iterator[None]:
        """Every submit() inside is one task of one array job, submitted as the context ends (nothing is submitted
        when the block raises)."""
        del allow_implicit_submissions  # jobs are always filled in at the end of the context here
        if self._batch is not None:
            raise RuntimeError('nesting "with executor.batch()" contexts is not allowed')
        self._batch = []
        try:
            yield None
            pending, self._batch = self._batch, None
            if not pending:
                warnings.warn('no submission happened during "with executor.batch()"', RuntimeWarning, stacklevel=3)
                return
            jobs = self._process([ds for _, ds in pending])
            for (shell, _), job in zip(pending, jobs, strict=True):
                shell._job = job
        finally:
            self._batch = None

    def _process(self, calls: list[DelayedSubmission]) -> list[Any]:
        raise NotImplementedError


class SlurmExecutor(Executor):
    """Submits through gpusub's path (``api.submit_calls``): several calls at once are one array job.
    ``backend=``/``environ=`` choose the Slurm backend and environment (tests, several clusters)."""

    def __init__(self, folder: str | os.PathLike[str], max_num_timeout: int = 3, python: str | None = None,
                 backend: Backend | None = None, environ: Mapping[str, str] | None = None, force: bool = False,
                 **_ignored: Any) -> None:
        super().__init__(folder, max_num_timeout, python)
        self.backend, self.environ, self.force = backend, environ, force

    def _process(self, calls: list[DelayedSubmission]) -> list[Any]:
        from slurmkit.jobs.rundir import new_run_dir

        opts = {k: v for k, v in self.parameters.items() if not k.startswith("_")}
        if "signal_grace" not in opts and opts.get("time"):
            # gpusub's 120 s checkpoint warning when the limit holds it (spec._check_grace: Slurm may signal up to
            # 60 s early), less for a short job, none for a 1-minute one (submitit's timeout_min=1 examples)
            opts["signal_grace"] = max(0, min(120, int(opts["time"]) * 60 - 61))
        name = str(opts.get("name") or getattr(calls[0].function, "__name__", None) or "submitit")
        opts.setdefault("run_dir", new_run_dir(str(self.folder), name))
        return submit_calls(calls, backend=self.backend, environ=self.environ, force=self.force, **opts)


# --- local ------------------------------------------------------------------------------------------------------
@dataclass
class LocalJob(Job):
    """A job run on this machine by slurmkit.jobs.localrun (the same runner as on Slurm)."""

    process: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)

    def status(self) -> JobStatus:
        from slurmkit.jobs.monitor import JobStatus

        rc = self.process.poll() if self.process is not None else _local_exit(self.run_dir)
        if rc is None:
            return JobStatus(self.job_id, "RUNNING", "local", run_dir=self.run_dir)
        state = "COMPLETED" if rc == 0 else ("CANCELLED" if rc in (-signal.SIGTERM, 128 + signal.SIGTERM)
                                             else "INTERRUPTED" if rc < 0 else "FAILED")
        return JobStatus(self.job_id, state, "local", exit_code=str(rc), run_dir=self.run_dir)

    def wait(self, timeout: float | None = None, poll_cap: float = 2.0) -> JobStatus:
        if self.process is not None:
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                raise TimeoutError(f"local job {self.job_id} still running after {timeout} s") from None
            return self.status()
        return super().wait(timeout, poll_cap)

    def logs(self) -> str:
        logs = sorted((Path(self.run_dir) / "logs").glob("local.r*.log"), key=lambda p: int(p.name[7:-4]))
        return "".join(p.read_text(errors="replace") for p in logs)

    def cancel(self, signal: str | None = None) -> None:  # noqa: A002 - Job.cancel's own name
        import signal as sig

        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig.SIGUSR2 if signal == "USR2" else sig.SIGTERM)


def _local_exit(run_dir: str) -> int | None:
    p = Path(run_dir) / "attempts" / "local.exit"
    try:
        return int(p.read_text().strip())
    except (OSError, ValueError):
        return None


class LocalExecutor(Executor):
    """Runs each call on this machine, ``tasks_per_node`` ranks, with the time limit's checkpoint signal
    (``timeout_min`` - ``signal_delay_s``) and restarts as on Slurm. ``nodes`` > 1 is refused."""

    def _process(self, calls: list[DelayedSubmission]) -> list[Any]:
        import json

        from slurmkit.jobs.api import _write_call
        from slurmkit.jobs.rundir import new_run_dir

        p = self.parameters
        if int(p.get("nodes", 1)) != 1:
            raise UsageError(f"LocalExecutor: nodes={p['nodes']}: a local job runs on this one machine")
        ntasks = int(p.get("tasks_per_node") or 1)
        jobs = []
        for ds in calls:  # one local process tree per call (submitit's local executor has no arrays either)
            name = str(p.get("name") or getattr(ds.function, "__name__", None) or "local")
            run_dir = new_run_dir(str(self.folder), name.strip("<>") or "local")
            runner = _write_call(run_dir, [ds], array=False)
            cfg = {"ntasks": ntasks, "setup": list(p.get("setup", ())), "python": p.get("python") or sys.executable,
                   "runner": runner, "max_restarts": int(p.get("max_restarts", 3)),
                   "timeout_s": p.get("_timeout_s") or (int(p["time"]) * 60 if p.get("time") else None),
                   "signal_delay_s": p.get("signal_grace"), "env": dict(p.get("env") or {})}
            (Path(run_dir) / "local.json").write_text(json.dumps(cfg))
            for d in ("logs", "attempts"):
                (Path(run_dir) / d).mkdir(exist_ok=True)
            proc = subprocess.Popen([sys.executable, "-m", "slurmkit.jobs.localrun", run_dir],
                                    start_new_session=True, env={**os.environ, "PYTHONPATH": _pythonpath()})
            jobs.append(LocalJob(str(proc.pid), run_dir, None, ntasks=ntasks, process=proc))  # type: ignore[arg-type]
        return jobs


def _pythonpath() -> str:
    """slurmkit itself importable by the controller and the ranks (a source checkout not installed)."""
    here = str(Path(__file__).resolve().parents[2])
    rest = os.environ.get("PYTHONPATH", "")
    return os.pathsep.join(p for p in (here, rest) if p)


# --- debug ------------------------------------------------------------------------------------------------------
class DebugJob:
    """The call, run in this process on the first result()/results()/exception()/wait()/done()."""

    def __init__(self, folder: Path, ds: DelayedSubmission, ntasks: int) -> None:
        self.job_id = f"DEBUG_{id(ds)}"
        self.folder, self._ds, self._ntasks = folder, ds, ntasks
        self._error: BaseException | None = None
        self._ran = self.cancelled = False
        self.environ = dict(os.environ)
        self.num_tasks = 1
        self.task_id = 0

    def submission(self) -> DelayedSubmission:
        return self._ds

    def _run(self) -> None:
        if self.cancelled:
            raise JobFailed(f"job {self.job_id} was cancelled", self.job_id, "CANCELLED")
        if self._ran:
            return
        self._ran = True
        backup = dict(os.environ)
        os.environ.clear()
        os.environ.update({**self.environ, "SLURMKIT_DEBUG_JOB_ID": self.job_id})
        try:
            self._ds.result()
        except Exception as exc:  # noqa: BLE001 - kept, re-raised by result(); pdb first when interactive
            self._error = exc
            if sys.stdin is not None and sys.stdin.isatty():
                import pdb

                pdb.post_mortem(exc.__traceback__)
        finally:
            os.environ.clear()
            os.environ.update(backup)

    def results(self) -> list[Any]:
        self._run()
        if self._error is not None:
            raise self._error
        return [self._ds._result]

    def result(self) -> Any:
        return self.results()[0]

    def exception(self) -> BaseException | None:
        self._run()
        return self._error

    def wait(self, timeout: float | None = None) -> None:  # noqa: ARG002 - runs now
        self._run()

    def done(self, force_check: bool = False) -> bool:  # noqa: ARG002
        with contextlib.suppress(Exception):
            self._run()
        return True

    def task(self, i: int) -> DebugJob:
        if i != 0:
            raise ValueError(f"task {i}: must be between 0 and 0")
        return self

    def cancel(self, signal: str | None = None) -> None:  # noqa: ARG002
        self.cancelled = True

    @property
    def state(self) -> str:
        if self.cancelled:
            return "CANCELLED"
        if not self._ran:
            return "QUEUED"
        return "FAILED" if self._error is not None else "COMPLETED"

    def stdout(self) -> str:
        return ""

    stderr = logs = stdout


class DebugExecutor(Executor):
    """The same calls, run in this process (``breakpoint()`` and pdb work; see DebugJob)."""

    def _process(self, calls: list[DelayedSubmission]) -> list[Any]:
        return [DebugJob(self.folder, ds, 1) for ds in calls]


# --- auto -------------------------------------------------------------------------------------------------------
_EXECUTORS: dict[str, type[Executor]] = {"slurm": SlurmExecutor, "local": LocalExecutor, "debug": DebugExecutor}


class AutoExecutor(Executor):
    """``cluster``: "slurm" (the default where sbatch is on PATH), "local" or "debug". Generic parameters as
    submitit's; ``slurm_X`` / ``local_X`` / ``debug_X`` apply to that cluster only (the others' are ignored)."""

    def __init__(self, folder: str | os.PathLike[str], cluster: str | None = None, **kwargs: Any) -> None:
        import shutil

        self.cluster = cluster or ("slurm" if shutil.which("sbatch") else "local")
        if self.cluster not in _EXECUTORS:
            raise UsageError(f"AutoExecutor: unknown cluster {self.cluster!r} (known: {', '.join(_EXECUTORS)})")
        prefix = self.cluster + "_"
        own = {k[len(prefix):]: v for k, v in kwargs.items() if k.startswith(prefix)}
        for k in kwargs:
            if k.split("_", 1)[0] not in _EXECUTORS:
                raise UsageError(f"AutoExecutor: argument {k!r} must be prefixed by an executor name "
                                 f"({', '.join(_EXECUTORS)})")
        self._executor = _EXECUTORS[self.cluster](folder, **own)
        super().__init__(folder)
        self.parameters = self._executor.parameters

    def update_parameters(self, **kwargs: Any) -> None:
        mine: dict[str, Any] = {}
        for k, v in kwargs.items():
            head, _, rest = k.partition("_")
            if head in _EXECUTORS and rest:
                if head == self.cluster:
                    mine[rest] = v
                continue  # another cluster's parameter
            mine.setdefault(k, v)
        if self._batch is not None:
            raise RuntimeError('update_parameters: changing parameters within "with executor.batch()" is not '
                               "allowed (every job of the array has the same)")
        self._executor.update_parameters(**mine)

    def _process(self, calls: list[DelayedSubmission]) -> list[Any]:
        return self._executor._process(calls)


# --- inside a job -----------------------------------------------------------------------------------------------
class JobEnvironment:
    """Where the calling code runs: ``job_id``, ``num_tasks``, ``num_nodes``, ``node``, ``global_rank``,
    ``local_rank``, ``hostname``, ``hostnames`` (Slurm's variables, else the local controller's)."""

    def __init__(self) -> None:
        e = os.environ
        if "SLURMKIT_DEBUG_JOB_ID" in e:
            self.cluster = "debug"
        elif "SLURMKIT_LOCAL_JOB_ID" in e:
            self.cluster = "local"
        else:
            self.cluster = "slurm"

    @staticmethod
    def _int(*names: str, default: int) -> int:
        for n in names:
            v = os.environ.get(n)
            if v and v.isdigit():
                return int(v)
        return default

    @property
    def job_id(self) -> str:
        e = os.environ
        if e.get("SLURM_ARRAY_JOB_ID"):
            return f"{e['SLURM_ARRAY_JOB_ID']}_{e.get('SLURM_ARRAY_TASK_ID', '0')}"
        return (e.get("SLURM_JOB_ID") or e.get("SLURMKIT_LOCAL_JOB_ID") or e.get("SLURMKIT_DEBUG_JOB_ID")
                or "")

    @property
    def global_rank(self) -> int:
        return self._int("SLURM_PROCID", "RANK", default=0)

    @property
    def local_rank(self) -> int:
        return self._int("SLURM_LOCALID", "LOCAL_RANK", default=0)

    @property
    def num_tasks(self) -> int:
        return self._int("SLURM_NTASKS", "WORLD_SIZE", default=1)

    @property
    def num_nodes(self) -> int:
        return self._int("SLURM_JOB_NUM_NODES", "SLURM_NNODES", default=1)

    @property
    def node(self) -> int:
        return self._int("SLURM_NODEID", default=0)

    @property
    def hostname(self) -> str:
        import socket

        return socket.gethostname()

    @property
    def hostnames(self) -> list[str]:
        nodes = os.environ.get("SLURM_JOB_NODELIST", "")
        if not nodes:
            return [self.hostname]
        from slurmkit.hostlist import expand

        return expand(nodes, "SLURM_JOB_NODELIST")

    def __repr__(self) -> str:
        return (f"JobEnvironment(job_id={self.job_id}, hostname={self.hostname}, local_rank={self.local_rank}, "
                f"node={self.node}({self.num_nodes}), global_rank={self.global_rank}({self.num_tasks}))")


def wait_all(jobs: Sequence[Any], timeout: float | None = None) -> None:
    """Until every job has ended (TimeoutError after ``timeout`` seconds in all)."""
    end = None if timeout is None else time.monotonic() + timeout
    for j in jobs:
        j.wait(None if end is None else max(0.0, end - time.monotonic()))
