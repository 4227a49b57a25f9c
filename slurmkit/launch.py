"""The Python API for researchers (the ``gpusub`` CLI as functions), as submitit is used:

    from slurmkit import launch

    job = launch.submit("train.py", nodes=4, time="2:00:00", args=...)   # or a callable: launch.submit(fn, x)
    job.state; job.wait(); job.result(); job.results(); job.exception(); job.logs(); job.cancel()
    tasks = launch.map_array(fn, [p1, p2, p3], time="30")

    executor = launch.AutoExecutor(folder="logs")   # submitit's API: submit, map_array, batch(), update_parameters
    executor.update_parameters(timeout_min=10, gpus_per_node=1)
    job = executor.submit(add, 5, 7); job.result()
    launch.helpers.DelayedSubmission, launch.helpers.Checkpointable, launch.helpers.monitor_jobs, ...

(``slurmkit.jobs.submit`` is the module behind gpusub's submission, hence a name of its own here.) The whole
documentation is in slurmkit/jobs/api.py, slurmkit/jobs/executor.py and docs/api.md. The executors and helpers
are imported on first use: ``import slurmkit.launch`` stays as cheap as before.
"""

from __future__ import annotations

from typing import Any

from slurmkit.jobs.api import Job, JobFailed, map_array, submit, submit_calls
from slurmkit.jobs.submit import PreflightError

_LAZY = {
    "AutoExecutor": "slurmkit.jobs.executor", "SlurmExecutor": "slurmkit.jobs.executor",
    "LocalExecutor": "slurmkit.jobs.executor", "DebugExecutor": "slurmkit.jobs.executor",
    "Executor": "slurmkit.jobs.executor", "JobEnvironment": "slurmkit.jobs.executor",
    "LocalJob": "slurmkit.jobs.executor", "DebugJob": "slurmkit.jobs.executor",
    "DelayedSubmission": "slurmkit.jobs.helpers", "Checkpointable": "slurmkit.jobs.helpers",
    "monitor_jobs": "slurmkit.jobs.helpers", "as_completed": "slurmkit.jobs.helpers",
}

__all__ = ["Job", "JobFailed", "PreflightError", "map_array", "submit", "submit_calls", *_LAZY]  # and helpers


def __getattr__(name: str) -> Any:
    import importlib

    if name == "helpers":
        return importlib.import_module("slurmkit.jobs.helpers")
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'slurmkit.launch' has no attribute {name!r}")
