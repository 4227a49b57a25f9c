"""submitit's helpers, for ``slurmkit.launch`` (``launch.helpers``): what a submitit user's code names by
``submitit.helpers.X`` runs here under the same name (docs/api.md has the table of what maps where).

Light on purpose: the job's runner imports this module on every rank before it unpickles the call.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from slurmkit.jobs.api import Job


class DelayedSubmission:
    """``function(*args, **kwargs)``, to be called later: what ``checkpoint()`` returns to be resubmitted
    (submitit's ``helpers.DelayedSubmission``; its result is kept once computed, so a :class:`FunctionSequence`
    does not recompute what an earlier attempt finished)."""

    def __init__(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self.function = function
        self.args = args
        self.kwargs = kwargs
        self._result: Any = None
        self._done = False

    def result(self) -> Any:
        if not self._done:
            self._result = self.function(*self.args, **self.kwargs)
            self._done = True
        return self._result

    def done(self) -> bool:
        return self._done

    def __repr__(self) -> str:
        name = getattr(self.function, "__qualname__", type(self.function).__name__)
        return f"DelayedSubmission({name}, args={self.args!r}, kwargs={self.kwargs!r})"


class Checkpointable:
    """A callable class whose ``checkpoint`` resubmits itself, at its current state, with the call's arguments
    (submitit's ``helpers.Checkpointable``). Override ``checkpoint`` to save large state elsewhere first."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Checkpointable:  # noqa: ARG003 - the subclass's arguments
        inst = super().__new__(cls)
        if not callable(inst):
            raise TypeError(f"{cls.__name__} derives from Checkpointable but has no __call__ method")
        return inst

    def checkpoint(self, *args: Any, **kwargs: Any) -> DelayedSubmission:
        return DelayedSubmission(self, *args, **kwargs)  # type: ignore[arg-type]  # callable: checked in __new__


class FunctionSequence(Checkpointable):
    """Several calls in one job, in order, their results as a list; checkpointable for free (a preempted sequence
    resumes after the calls already done)."""

    def __init__(self, verbose: bool = False) -> None:
        self.verbose = verbose
        self.delayed_functions: list[DelayedSubmission] = []

    def add(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self.delayed_functions.append(DelayedSubmission(func, *args, **kwargs))

    def __len__(self) -> int:
        return len(self.delayed_functions)

    def __iter__(self) -> Iterator[DelayedSubmission]:
        return iter(self.delayed_functions)

    def __call__(self) -> list[Any]:
        if self.verbose:
            print(f"Starting from {sum(f.done() for f in self)}/{len(self)}", flush=True)
        return [f.result() for f in self.delayed_functions]


class CommandFunction:
    """A command (a list, no shell) as a function returning its stdout; a non-zero exit raises with its stderr.
    Arguments of the call are appended (``key=value`` keyword arguments as ``--key=value``)."""

    def __init__(self, command: list[str], verbose: bool = True, cwd: str | os.PathLike[str] | None = None,
                 env: dict[str, str] | None = None) -> None:
        if not isinstance(command, list):
            raise TypeError("CommandFunction: the command must be a list")
        self.command, self.verbose, self.env = command, verbose, env
        self.cwd = None if cwd is None else str(cwd)

    def __call__(self, *args: Any, **kwargs: Any) -> str:
        full = self.command + [str(a) for a in args] + [f"--{k}={v}" for k, v in kwargs.items()]
        if self.verbose:
            print(f"running: {' '.join(full)}", flush=True)
        proc = subprocess.run(full, capture_output=True, text=True, cwd=self.cwd, env=self.env, check=False)
        if self.verbose and proc.stdout:
            print(proc.stdout, end="", flush=True)
        if proc.returncode:
            if proc.stderr:
                print(proc.stderr, file=sys.stderr, end="", flush=True)
            raise RuntimeError(f"{full[0]} exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
        return proc.stdout.strip()


def as_completed(jobs: Sequence[Job], timeout: float | None = None, poll_frequency: float = 10) -> Iterator[Job]:
    """Each job as it ends (completed, failed or cancelled); TimeoutError after ``timeout`` seconds."""
    start = time.monotonic()
    left = list(jobs)
    while left:
        for job in [j for j in left if j.done()]:
            left.remove(job)
            yield job
        if not left:
            return
        if timeout is not None and time.monotonic() - start > timeout:
            raise TimeoutError(f"{len(left)} job(s) still running after {timeout} s")
        time.sleep(poll_frequency)


def monitor_jobs(jobs: Sequence[Job], poll_frequency: float = 30, test_mode: bool = False,
                 file: IO[str] | None = None) -> dict[str, str]:
    """Wait until every job has ended, printing one progress line per poll (how many pending, running, done,
    failed, and which failed). ``poll_frequency`` below 5 s needs ``test_mode`` (submitit's rule is 30 s; here a
    poll is one ``scontrol`` query for all the jobs, not one per job). -> every job id's final state."""
    from slurmkit.jobs.api import job_states

    if poll_frequency < 5 and not test_mode:
        raise ValueError(f"monitor_jobs: poll_frequency {poll_frequency} s is below 5 s (test_mode=True allows it)")
    out = sys.stdout if file is None else file
    if not jobs:
        print("There are no jobs to monitor", file=out, flush=True)
        return {}
    arrays = ", ".join(sorted({str(j.job_id).split("_", 1)[0] for j in jobs}))
    print(f"Monitoring {len(jobs)} jobs from job arrays {arrays}", file=out, flush=True)
    start = time.monotonic()
    while True:
        states = job_states(jobs)
        counts: dict[str, int] = {}
        for s in states.values():
            counts[s] = counts.get(s, 0) + 1
        from slurmkit.backend.parse import TERMINAL_STATES

        ended = [i for i, j in enumerate(jobs) if states[j.job_id] in TERMINAL_STATES or states[j.job_id] == "UNKNOWN"]
        failed = [i for i in ended if states[jobs[i].job_id] != "COMPLETED"]
        n = len(jobs)
        if len(ended) == n:
            print(f"All jobs finished, jobs with indices {failed} failed "
                  f"(took {int(time.monotonic() - start)} s)", file=out, flush=True)
            return states
        running = counts.get("RUNNING", 0)
        print(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {n - len(ended) - running}/{n} pending, {running}/{n} "
              f"running, {len(ended) - len(failed)}/{n} done, {len(failed)}/{n} failed"
              + (f" (indices {failed})" if failed else ""), file=out, flush=True)
        time.sleep(poll_frequency)
