"""The Python API for researchers (the ``gpusub`` CLI as functions), as submitit is used:

    from slurmkit import launch

    job = launch.submit("train.py", nodes=4, time="2:00:00", args=...)   # or a callable: launch.submit(fn, x, nodes=2)
    job.state; job.wait(); job.result(); job.logs(); job.cancel()
    tasks = launch.map_array(fn, [p1, p2, p3], time="30")

(``slurmkit.jobs.submit`` is the module behind gpusub's submission, hence a name of its own here.) The whole
documentation is in slurmkit/jobs/api.py and docs/api.md.
"""

from slurmkit.jobs.api import Job, JobFailed, map_array, submit
from slurmkit.jobs.submit import PreflightError

__all__ = ["Job", "JobFailed", "PreflightError", "map_array", "submit"]
