"""submitit's own test suite, ported to slurmkit.launch's LocalExecutor, DebugExecutor and AutoExecutor (no
cluster; the Slurm side is tests/integration/test_api_submitit_lab.py). Each test names the submitit test it comes
from (facebookincubator/submitit 1.5.4, submitit/local/test_local.py, test_debug.py, core/test_core.py,
auto/test_auto.py, test_helpers.py, test_pickle.py). Functions defined inside the tests are closures of a test
module: they reach the job processes by value (cloudpickle), as in submitit's."""

from __future__ import annotations

import functools
import io
import os
import pickle
import sys
import time
from pathlib import Path

import pytest

from slurmkit import launch
from slurmkit.errors import UsageError
from slurmkit.jobs.executor import _convert


def _local(tmp_path: Path, **params: object) -> launch.LocalExecutor:
    ex = launch.LocalExecutor(tmp_path)
    if params:
        ex.update_parameters(**params)
    return ex


def test_local_job_results_task_and_batch_rules(tmp_path: Path) -> None:
    """test_local.py::test_local_job."""

    def func(p: int) -> int:
        return p * launch.JobEnvironment().local_rank

    ex = _local(tmp_path, tasks_per_node=3, nodes=1)
    job1 = ex.submit(func, 1)
    ex.update_parameters(tasks_per_node=1)
    with ex.batch():
        with pytest.raises(RuntimeError, match="with executor.batch"):
            ex.update_parameters(tasks_per_node=1)
        job2 = ex.submit(func, 2)
        with pytest.raises(RuntimeError, match="not allowed within"):
            job2.job_id  # noqa: B018 - the access itself is what is refused
    assert job1.results(timeout=60) == [0, 1, 2]
    assert job1.task(1).result() == 1 and job1.task(2).result() == 2
    assert job1.exception() is None and job1.done()
    with pytest.raises(ValueError, match="must be between 0 and 2"):
        job1.task(4)
    assert job2.results(timeout=60) == [0]
    assert job2.task(0).result() == 0 and job2.done()


def test_local_map_array_and_submit_array(tmp_path: Path) -> None:
    """test_local.py::test_local_map_array, test_local_submit_array."""

    def g(x: int, y: int) -> int:
        return x * 10 + y

    ex = _local(tmp_path)
    jobs = ex.map_array(g, [1, 2, 3], [4, 5, 6])
    assert [j.result(timeout=60) for j in jobs] == [14, 25, 36]
    fns = [functools.partial(g, x, y) for x, y in zip([7, 8], [1, 2], strict=True)]
    assert [j.result(timeout=60) for j in ex.submit_array(fns)] == [71, 82]
    with pytest.warns(UserWarning, match="empty job array"):
        assert ex.map_array(g, [], []) == []


def test_local_error_has_the_remote_traceback(tmp_path: Path) -> None:
    """test_local.py::test_local_error, test_get_first_task_error."""

    def failing_job() -> None:
        raise RuntimeError("Failed on purpose")

    exc = _local(tmp_path).submit(failing_job).exception(timeout=60)
    assert isinstance(exc, launch.JobFailed) and exc.traceback is not None
    assert "Traceback" in exc.traceback and "RuntimeError: Failed on purpose" in exc.traceback

    def flaky() -> None:
        rank = launch.JobEnvironment().local_rank
        if rank > 0:
            time.sleep(0.2 * rank)
            raise RuntimeError(f"Failed on purpose: {rank}")

    exc = _local(tmp_path, tasks_per_node=3).submit(flaky).exception(timeout=60)
    assert exc is not None and "Failed on purpose: 1" in str(exc)


def test_pickle_output_from_main(tmp_path: Path) -> None:
    """test_local.py::test_pickle_output_from_main: a class defined in a function travels by value, both ways."""

    class MyClass:
        pass

    assert type(_local(tmp_path).submit(MyClass).result(timeout=60)).__name__ == "MyClass"


def test_stdout_of_every_rank(tmp_path: Path) -> None:
    """test_local.py::test_stdout (one stream here: stdout and stderr are the same log)."""

    def hello() -> None:
        rank = launch.JobEnvironment().local_rank
        print("hello from", rank, flush=True)
        print("bye from", rank, file=sys.stderr, flush=True)

    job = _local(tmp_path, tasks_per_node=2).submit(hello)
    job.wait(60)
    for text in ("hello from 0\n", "hello from 1\n", "bye from 0\n", "bye from 1\n"):
        assert text in job.stdout() and text in job.stderr()


def test_cancel(tmp_path: Path) -> None:
    """test_local.py::test_cancel."""
    job = _local(tmp_path).submit(time.sleep, 30)
    assert job.state == "RUNNING"
    job.cancel()
    job.wait(30)
    assert job.state == "CANCELLED" and job.done()
    with pytest.raises(launch.JobFailed, match="without a result"):
        job.result()


def test_requeuing_a_function_sequence_after_the_time_limit(tmp_path: Path) -> None:
    """test_local.py::test_requeuing and test_helpers.py::test_function_sequence_checkpoint: the time limit's
    signal checkpoints the FunctionSequence, the next attempt resumes after the calls already done."""
    func = launch.helpers.FunctionSequence(verbose=True)
    for x in range(12):
        func.add(time.sleep, 0.25 + 0 * x)
    ex = launch.LocalExecutor(tmp_path, max_num_timeout=3)
    ex.update_parameters(timeout_min=2 / 60, signal_delay_s=1)  # a 1 s warning, then restart
    job = ex.submit(func)
    job.wait(90)
    out = job.stdout()
    assert "Starting from 0/12" in out and "resuming the call checkpointed" in out, out
    resumed = [int(line.split()[2].split("/")[0]) for line in out.splitlines() if line.startswith("Starting from")]
    assert resumed[1] > 0, out


def test_custom_checkpoint(tmp_path: Path) -> None:
    """test_local.py::test_custom_checkpoint: __submitit_checkpoint__ wins over checkpoint and gets the
    call's arguments; what it returns is the next attempt."""

    class Slacker(launch.helpers.Checkpointable):
        def __call__(self, slack: bool = True) -> str:
            if slack:
                print("Slacking", flush=True)
                time.sleep(30)
                raise RuntimeError("I really don't want to work")
            return "worked hard"

        def __submitit_checkpoint__(self, slack: bool = True) -> launch.DelayedSubmission:
            if slack:
                print("Interrupted while slacking. I won't slack next time.", flush=True)
            return launch.DelayedSubmission(self, slack=False)

    job = _local(tmp_path).submit(Slacker(True))
    deadline = time.monotonic() + 30
    while "Slacking" not in job.stdout():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    job.cancel(signal="USR2")  # the preemption path, as job._interrupt() in submitit
    assert job.result(timeout=60) == "worked hard"
    assert "I won't slack next time." in job.stdout()


def test_setup_lines(tmp_path: Path) -> None:
    """test_local.py::test_setup (local_setup through AutoExecutor)."""
    ex = launch.AutoExecutor(tmp_path, cluster="local")
    done = tmp_path / "setup_done"
    ex.update_parameters(local_setup=[f"touch {done}", "export FROM_SETUP=yes"], slurm_partition="ignored")
    job = ex.submit(os.getenv, "FROM_SETUP")
    assert job.result(timeout=60) == "yes" and done.exists()


def test_lambda_and_nested_pickling(tmp_path: Path) -> None:
    """test_pickle.py::test_nested_pickling: a lambda and a closure over a local function."""

    def make_adder(k: int):  # type: ignore[no-untyped-def]
        return lambda x: x + k

    ex = _local(tmp_path)
    assert ex.submit(lambda: 41 + 1).result(timeout=60) == 42
    assert ex.submit(make_adder(3), 4).result(timeout=60) == 7


# --- debug ------------------------------------------------------------------------------------------------------
def test_debug_job_runs_in_this_process(tmp_path: Path) -> None:
    """test_debug.py::test_debug_job, test_debug_map_array, test_debug_error, test_cancel, test_job_environment."""
    pids: list[int] = []

    def f(x: int, y: int) -> int:
        pids.append(os.getpid())
        env = launch.JobEnvironment()
        assert env.cluster == "debug" and env.job_id.startswith("DEBUG_")
        return x + y

    ex = launch.DebugExecutor(tmp_path)
    job = ex.submit(f, 2, 3)
    assert job.state == "QUEUED" and not pids  # nothing runs before the result is asked
    assert job.result() == 5 and job.results() == [5] and pids == [os.getpid()] and job.done()
    assert [j.result() for j in ex.map_array(f, [1, 2], [10, 20])] == [11, 22]
    with ex.batch():
        jobs = [ex.submit(f, k, 1) for k in range(3)]
    assert [j.result() for j in jobs] == [1, 2, 3]

    def boom() -> None:
        raise ValueError("boom")

    bad = ex.submit(boom)
    assert isinstance(bad.exception(), ValueError)  # the exception itself, not wrapped
    with pytest.raises(ValueError, match="boom"):
        bad.result()
    cancelled = ex.submit(f, 1, 1)
    cancelled.cancel()
    with pytest.raises(launch.JobFailed, match="cancelled"):
        cancelled.result()


# --- parameters -------------------------------------------------------------------------------------------------
def test_update_parameters_maps_submitit_names_and_refuses_unknown_ones(tmp_path: Path) -> None:
    """test_auto.py::test_executor_argument, test_executor_unknown_argument, test_overriden_arguments;
    test_slurm.py::test_update_parameters_error."""
    assert _convert({"timeout_min": 4, "slurm_partition": "dev", "gpus_per_node": 1, "cpus_per_task": 2,
                     "mem_gb": 2.5, "tasks_per_node": 3, "slurm_array_parallelism": 2, "name": "x",
                     "slurm_setup": ["module load a"], "additional_parameters": {"nice": 10},
                     "stderr_to_stdout": True}) == {
        "time": "4", "partition": "dev", "gpus_per_node": 1, "cpus_per_task": 2, "mem_mb": 2560,
        "tasks_per_node": 3, "max_parallel": 2, "name": "x", "setup": ("module load a",),
        "sbatch_args": ["--nice=10"], "_timeout_s": 240.0}
    assert _convert({"timeout_min": 0.5})["time"] == "1"  # Slurm's resolution is a minute
    assert _convert({"wckey": "proj", "additional_parameters": {"spread_job": True}})["sbatch_args"] == [
        "--wckey=proj", "--spread-job"]
    with pytest.raises(UsageError, match="unknown parameter 'blublu'; valid: .*timeout_min"):
        _convert({"blublu": 1})
    with pytest.raises(UsageError, match="srun_args is not supported"):
        _convert({"srun_args": ["-v"]})
    auto = launch.AutoExecutor(tmp_path, cluster="debug")
    auto.update_parameters(timeout_min=3, slurm_timeout_min=7, local_blublu=1)  # other clusters' are ignored
    assert auto.parameters["time"] == "3"
    with pytest.raises(UsageError, match="prefixed by an executor name"):
        launch.AutoExecutor(tmp_path, cluster="local", max_num_timeout=2)
    with pytest.raises(UsageError, match="unknown cluster"):
        launch.AutoExecutor(tmp_path, cluster="chronos")


def test_as_completed_and_monitor_jobs(tmp_path: Path) -> None:
    """test_helpers.py::test_as_completed, test_monitor_jobs."""
    ex = _local(tmp_path)
    jobs = [ex.submit(time.sleep, d) for d in (1.5, 0.1)]
    order = [j.job_id for j in launch.as_completed(jobs, timeout=60, poll_frequency=0.1)]
    assert order == [jobs[1].job_id, jobs[0].job_id]

    def fail() -> None:
        raise ValueError("x")

    more = [ex.submit(time.sleep, 1), ex.submit(fail)]
    out = io.StringIO()
    states = launch.monitor_jobs(more, poll_frequency=0.2, test_mode=True, file=out)
    assert states == {more[0].job_id: "COMPLETED", more[1].job_id: "FAILED"}
    text = out.getvalue()
    assert "Monitoring 2 jobs" in text and "All jobs finished, jobs with indices [1] failed" in text, text
    with pytest.raises(ValueError, match="test_mode"):
        launch.monitor_jobs(more, poll_frequency=1)


def test_import_stays_cheap() -> None:
    """The executors and cloudpickle are imported on first use, not by `import slurmkit.launch`."""
    import subprocess

    code = "import sys, slurmkit.launch; print(sorted(m for m in sys.modules if m in ('cloudpickle', " \
           "'slurmkit.jobs.executor', 'slurmkit.jobs.helpers')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}).stdout
    assert out.strip() == "[]"
    assert pickle.loads(pickle.dumps(launch.JobFailed("m", "1", "FAILED", "tb"))).args == ("m",)


def _f66(x: int, y: int = 0) -> int:
    return 66


def test_load_submission_and_awaitable(tmp_path: Path) -> None:
    """test_local.py::test_load_submission; core/test_async.py (job.awaitable().result())."""
    import asyncio

    job = _local(tmp_path).submit(_f66, 67, y=68)
    sub = job.submission()
    assert sub.function is _f66 and sub.args == (67,) and sub.kwargs == {"y": 68} and not sub.done()

    async def both() -> list[int]:
        return list(await asyncio.gather(job.awaitable(0.05).result(), _local(tmp_path).submit(_f66, 1)
                                         .awaitable(0.05).result()))

    assert asyncio.run(both()) == [66, 66]


def test_batch_drops_everything_on_an_error_refuses_nesting_and_warns_when_empty(tmp_path: Path) -> None:
    """core/test_core.py::test_fake_executor_batch."""
    ex = _local(tmp_path)
    with pytest.raises(ValueError, match="in the block"), ex.batch():
        ex.submit(_f66, 1)
        raise ValueError("in the block")
    assert not list(tmp_path.iterdir()), "nothing was submitted"
    with pytest.warns(RuntimeWarning), ex.batch(), pytest.raises(RuntimeError, match="nesting"), ex.batch():
        pass
    with pytest.warns(RuntimeWarning, match="no submission"), ex.batch():
        pass
    with ex.batch():
        jobs = [ex.submit(_f66, k) for k in range(2)]
    assert [j.result(timeout=60) for j in jobs] == [66, 66]


def test_command_function(tmp_path: Path) -> None:
    """docs/examples.md "Working with commands": CommandFunction returns stdout, raises with stderr."""
    ex = _local(tmp_path)
    assert ex.submit(launch.helpers.CommandFunction(["echo"], verbose=False), "hi", n=1).result(timeout=60) == "hi --n=1"
    bad = ex.submit(launch.helpers.CommandFunction(["ls", str(tmp_path / "missing")], verbose=False))
    exc = bad.exception(timeout=60)
    assert exc is not None and "No such file" in str(exc)
    with pytest.raises(TypeError, match="must be a list"):
        launch.helpers.CommandFunction("echo hi")  # type: ignore[arg-type]
