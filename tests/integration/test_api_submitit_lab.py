"""Issue 34 item 2 on the real lab: the API a submitit user expects. A callable's defaults (one task, no GPU),
submitit's checkpoint protocol (the call's arguments in, what to resubmit out, None: no requeue), and submitit's
documented examples run as a driver script whose only changes are the import line (and the site's partition name):
functions and a lambda of the driver's __main__ and a module beside it, map_array and batch() as one array,
multi-task results(), errors with the remote traceback, setup lines, monitor_jobs.

Sources: submitit 1.5.4 README.md ("performing an addition"), docs/examples.md (explained example, job arrays,
batch context manager, concurrent jobs, asyncio, errors, multi-tasks jobs and JobEnvironment), docs/checkpointing.md (NetworkTraining),
submitit/slurm/test_slurm.py::test_slurm_through_auto_with_setup_and_teardown (setup lines)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmkit import launch
from slurmkit.backend.cli import CLIBackend
from slurmkit.lab import Lab
from tests.conftest import ROOT
from tests.integration import api_funcs
from tests.unit import api_calls

pytestmark = pytest.mark.lab


@pytest.fixture()
def env(lab: Lab, tmp_path: Path) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("SBATCH_")}
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**e, **lab.env, "SLURMKIT_INVENTORY": str(lab.etc / "slurmkit.yaml"),
            "SLURMKIT_STATE_DIR": str(tmp_path / "state"), "GPUSUB_RUN_ROOT": str(tmp_path / "runs"),
            "PYTHONPATH": path}


@pytest.fixture()
def opts(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    for k, v in env.items():  # sbatch exports the submitting environment to the job (PYTHONPATH included)
        monkeypatch.setenv(k, v)
    return {"backend": CLIBackend(env=env), "environ": env, "time": "5"}


def _wait_log(job: launch.Job, text: str, within: float = 90) -> None:
    deadline = time.monotonic() + within
    while text not in job.logs():
        assert time.monotonic() < deadline, job.logs()
        time.sleep(0.3)


def test_a_callable_gets_one_task_and_no_gpu_unless_asked(opts: dict[str, object]) -> None:
    """`launch.submit(add, 1, 2)` booked a whole node's GPUs and ran on every one (torchrun, the partition's
    GPUs per node): now one task, no GPU; asked for 2 GPUs, 2 ranks with one each."""
    got = launch.submit(api_funcs.where, **opts).result(timeout=90)
    assert got["SLURM_NTASKS"] == "1" and got["SLURM_JOB_GPUS"] == "", got
    two = launch.submit(api_funcs.where, gpus_per_node=2, **opts)
    ranks = two.results(timeout=90)
    assert len(ranks) == 2 and all(r["SLURM_NTASKS"] == "2" and len(r["SLURM_JOB_GPUS"].split(",")) == 2
                                   for r in ranks), ranks


def test_checkpoint_gets_the_calls_arguments_and_what_it_returns_is_requeued(opts: dict[str, object],
                                                                             tmp_path: Path) -> None:
    """docs/checkpointing.md's NetworkTraining: checkpoint(self, checkpointpath) saves the model and returns
    DelayedSubmission(NetworkTraining(), checkpointpath); the requeued attempt loads it and goes on. On main
    checkpoint() was called without arguments (TypeError): nothing saved, restart at step 0."""
    path = tmp_path / "model.json"
    job = launch.submit(api_calls.NetworkTraining(), str(path), kwargs={"steps": 300}, **opts)
    _wait_log(job, "step 5\n")
    job.cancel(signal="USR2")  # the preemption path: checkpoint, requeue, resume
    out = job.result(timeout=180)
    assert out["step"] == 300 and out["resumed_from"] >= 5, (out, job.logs())
    assert path.exists() and "resuming the call checkpointed" in job.logs()
    assert job.status().restarts == 1


def test_checkpoint_returning_none_ends_the_job_without_a_requeue(opts: dict[str, object]) -> None:
    job = launch.submit(api_calls.Quitter(), 2000, **opts)
    _wait_log(job, "step 3\n")
    job.cancel(signal="USR2")
    exc = job.exception(timeout=120)
    assert exc is not None and "not requeued: checkpoint() returned None" in str(exc), job.logs()
    assert job.state == "FAILED" and job.status().restarts == 0
    assert "the program asked not to be requeued" in job.logs()


DRIVER = '''
from slurmkit import launch as submitit  # the one changed line: was `import submitit`
import sys
from operator import truediv
from beside import mul  # a module beside the driver, not on PYTHONPATH: imported on the node from here

def add(a, b):
    return a + b

# README: performing an addition; docs/examples.md: the explained example
log_folder = "log_test/%j"
executor = submitit.AutoExecutor(folder=log_folder)
executor.update_parameters(timeout_min=4, slurm_partition="gpu")  # the site's partition (the docs say "dev")
print("cluster", executor.cluster)
job = executor.submit(add, 5, 7)
print(job.job_id)
output = job.result()
assert output == 12
print("add ok")

# docs/examples.md: job arrays (at most 2 at once)
a = [1, 2, 3, 4]
b = [10, 20, 30, 40]
executor = submitit.AutoExecutor(folder=log_folder)
executor.update_parameters(slurm_array_parallelism=2, timeout_min=4)
jobs = executor.map_array(add, a, b)
assert [j.result() for j in jobs] == [11, 22, 33, 44]
assert len({j.job_id.split("_")[0] for j in jobs}) == 1 and jobs[3].job_id.endswith("_3")
print("array ok", jobs[0].job_id)

# docs/examples.md: job arrays through a context manager
jobs = []
with executor.batch():
    for arg in [3, 4, 5]:
        job = executor.submit(mul, arg)
        jobs.append(job)
assert [j.result() for j in jobs] == [6, 8, 10]
assert len({j.job_id.split("_")[0] for j in jobs}) == 1
print("batch ok", jobs[0].job_id)

# (beyond the docs) a class of __main__, by value, and its instance as the callable
class Scale:
    def __init__(self, k):
        self.k = k
    def __call__(self, x):
        return self.k * x

assert executor.submit(Scale(3), 5).result() == 15

# a lambda, and submitit.helpers.monitor_jobs over the jobs
jobs = [executor.submit(lambda x: x * 2, 21)]
submitit.helpers.monitor_jobs(jobs, poll_frequency=1, test_mode=True)
assert jobs[0].result() == 42
print("lambda ok")

# docs/examples.md: errors
executor = submitit.AutoExecutor(folder="log_test")
executor.update_parameters(timeout_min=1, slurm_partition="gpu")
job = executor.submit(truediv, 1, 0)
try:
    job.result()
except Exception as e:
    assert "ZeroDivisionError" in str(e), e
else:
    raise AssertionError("no error")
full_stderr = job.stderr()
assert "ZeroDivisionError" in full_stderr
print("errors ok")

# docs/examples.md: multi-tasks jobs, JobEnvironment
from operator import add as op_add
executor = submitit.AutoExecutor(folder="log_test")
executor.update_parameters(tasks_per_node=3, nodes=2, timeout_min=1, slurm_partition="gpu")
job = executor.submit(op_add, 5, 7)
print(job.task(2).result())
print(job.task(2).stdout() is not None)
assert job.results() == [12, 12, 12, 12, 12, 12]

def my_func(inputs):
    job_env = submitit.JobEnvironment()
    print(f"There are {job_env.num_tasks} in this job")
    print(f"I'm the task #{job_env.local_rank} on the node {job_env.node}")
    print(f"I'm the task #{job_env.global_rank} in the job")
    n = -(-len(inputs) // job_env.num_tasks)
    return inputs[job_env.global_rank * n: (job_env.global_rank + 1) * n]

job = executor.submit(my_func, list(range(12)))
assert job.results() == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11]]
assert "There are 6 in this job" in job.stdout()
print("multi-task ok")

# docs/examples.md: concurrent jobs
import time
executor = submitit.AutoExecutor(folder="log_test")
executor.update_parameters(timeout_min=1, slurm_partition="gpu")
jobs = [executor.submit(time.sleep, k) for k in range(1, 11)]
time.sleep(5)
num_finished = sum(job.done() for job in jobs)
print(num_finished)
outputs = [job.result() for job in jobs]
assert outputs == [None] * 10 and all(job.done() for job in jobs)
print("concurrent ok")

# docs/examples.md: asyncio (its top-level awaits, inside asyncio.run in a script)
import asyncio
import random

def slow_multiplication(x, y):
    time.sleep(x*y)
    return x*y

async def main():
    job = executor.submit(slow_multiplication, 10, 2)
    assert await job.awaitable().result() == 20
    jobs = [executor.submit(slow_multiplication, k, random.randint(1, 4)) for k in range(1, 5)]
    for aws in asyncio.as_completed([j.awaitable().result() for j in jobs]):
        result = await aws
        print(result)

asyncio.run(main())
print("asyncio ok")

# test_slurm.py: setup lines before the step
executor.update_parameters(tasks_per_node=1, nodes=1, slurm_setup=["export FROM_SETUP=yes"])
import os
assert executor.submit(os.getenv, "FROM_SETUP").result() == "yes"
print("setup ok")
'''


def test_submitits_documented_examples_run_unchanged_but_the_import(env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "driver.py").write_text(DRIVER)
    (tmp_path / "beside.py").write_text("def mul(x):\n    return 2 * x\n")
    proc = subprocess.run([sys.executable, "driver.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=500, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    for step in ("add ok", "array ok", "batch ok", "lambda ok", "errors ok", "multi-task ok", "concurrent ok",
                 "asyncio ok", "setup ok"):
        assert step in out, out
    assert "cluster slurm" in out and "Monitoring 1 jobs" in out and "All jobs finished" in out, out
    assert list((tmp_path / "log_test").iterdir()), "the run dirs are under the executor's folder"
