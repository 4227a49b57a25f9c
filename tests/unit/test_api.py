"""The Python API's edges without Slurm: bad options, unpicklable calls, array task ids, a callable's default
resources (issue 34: one task, no GPU), the checkpoint protocol of the runner (real processes, real signals) and
the rendered script's setup lines and no-requeue file."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from slurmkit import launch
from slurmkit.errors import UsageError
from slurmkit.jobs.api import CALLABLE_DEFAULTS, _task_ids, _write_call, result_name
from slurmkit.jobs.helpers import DelayedSubmission
from slurmkit.jobs.render import plan_resources, render
from slurmkit.jobs.spec import ClusterFacts, JobSpec
from tests.conftest import ROOT
from tests.unit import api_calls


def test_unknown_options_are_named_with_the_known_ones(tmp_path: Path) -> None:
    script = tmp_path / "t.py"
    script.write_text("print(1)\n")
    with pytest.raises(UsageError, match=r"unknown option\(s\) gpus \(JobSpec fields: .*gpus_per_node"):
        launch.submit(str(script), gpus=8, backend=object())  # type: ignore[arg-type]


def test_an_unpicklable_argument_is_refused_before_anything_is_submitted(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot be pickled"):
        launch.submit(print, threading.Lock(), run_dir=str(tmp_path / "run"), backend=object())  # type: ignore[arg-type]
    assert not (tmp_path / "run" / "call.pkl").exists()


def test_array_task_ids() -> None:
    assert _task_ids("0-2") == {0, 1, 2}
    assert _task_ids("1,3,5-6%2") == {1, 3, 5, 6}
    assert _task_ids("") == set()


def test_empty_array_is_refused() -> None:
    with pytest.raises(UsageError, match="params is empty"):
        launch.map_array(print, [])


def _facts() -> ClusterFacts:
    return ClusterFacts(partition="gpu", gpus_per_node=8, cpus_per_gpu=12, mem_per_gpu_mb=100_000)


class _Captured(Exception):
    pass


def _submitted_spec(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *args: object, **opts: object) -> JobSpec:
    """The JobSpec `launch.submit` hands to gpusub's path (stopped there: no Slurm)."""
    from slurmkit.jobs import api

    got: list[JobSpec] = []

    def capture(spec: JobSpec, *_a: object) -> None:
        got.append(spec)
        raise _Captured

    monkeypatch.setattr(api, "_submit_spec", capture)
    with pytest.raises(_Captured):
        launch.submit(*args, run_dir=str(tmp_path / "run"), backend=object(), **opts)  # type: ignore[arg-type]
    return got[0]


def test_a_callable_gets_one_task_and_no_gpu_unless_asked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Issue 34: `launch.submit(add, 1, 2)` booked a whole 8-GPU node and ran add on 8 ranks (torchrun, the
    partition's GPUs). The callable's defaults render one srun task and no --gres."""
    spec = _submitted_spec(monkeypatch, tmp_path, api_calls.rank_times, 1)
    assert (spec.launcher, spec.gpus_per_node, spec.nodes) == ("srun", 0, 1)
    assert (spec.launcher, spec.gpus_per_node) == (CALLABLE_DEFAULTS["launcher"], CALLABLE_DEFAULTS["gpus_per_node"])
    assert _submitted_spec(monkeypatch, tmp_path, api_calls.rank_times, 1, launcher="torchrun").gpus_per_node is None
    job = render(spec, _facts(), "/r")
    lines = [ln for ln in job.request.script.splitlines() if ln.startswith("#SBATCH")]
    assert "#SBATCH --ntasks-per-node=1" in lines and not any("--gres" in ln for ln in lines), lines
    assert job.gpus_per_node == 0 and job.resources is not None and job.resources.tasks_per_node == 1
    # asked: 2 GPUs -> 2 ranks (one per GPU); tasks_per_node overrides; cpus_per_task/mem_mb as asked
    two = render(JobSpec(script="/r/x.py", launcher="srun", gpus_per_node=2), _facts(), "/r")
    assert two.resources is not None and two.resources.tasks_per_node == 2
    res = plan_resources(JobSpec(script="/r/x.py", launcher="srun", gpus_per_node=0, tasks_per_node=3,
                                 cpus_per_task=2, mem_mb=4096), _facts(), 0)
    assert (res.tasks_per_node, res.cpus_per_task, res.mem_per_node_mb) == (3, 2, 4096)
    with pytest.raises(UsageError, match="tasks_per_node: needs the srun launcher"):
        JobSpec(script="/r/x.py", tasks_per_node=2)


def test_setup_lines_run_before_the_step_and_the_final_file_stops_the_requeue() -> None:
    spec = JobSpec(script="/r/x.py", launcher="srun", gpus_per_node=0, setup=("module load cuda/12", "echo hi"))
    text = render(spec, _facts(), "/r").request.script
    assert text.index("module load cuda/12\necho hi\n") < text.index("srun --kill-on-bad-exit")
    assert 'export GPUSUB_FINAL_FILE="$GPUSUB_RUN_DIR/attempts/${_gpusub_id}.r${GPUSUB_RESTART_COUNT}.final"' in text
    assert text.index("[ -e \"$GPUSUB_FINAL_FILE\" ]") < text.index("if scontrol requeue")
    with pytest.raises(UsageError, match="one shell line each"):
        JobSpec(script="/r/x.py", setup=("a\nb",))


# --- the runner, in real processes ----------------------------------------------------------------------------
def _start_runner(run_dir: Path, calls: list[DelayedSubmission], rank: int = 0,
                  restart: int = 0) -> subprocess.Popen[str]:
    if not (run_dir / "call.pkl").exists():
        _write_call(str(run_dir), calls, array=False)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "GPUSUB_RUN_DIR": str(run_dir), "RANK": str(rank), "PYTHONPATH": path,
           "GPUSUB_FINAL_FILE": str(run_dir / f"final.r{restart}"), "GPUSUB_RESTART_COUNT": str(restart)}
    return subprocess.Popen([sys.executable, "-u", str(run_dir / "slurmkit_call.py")], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _signal_when(proc: subprocess.Popen[str], marker: str) -> str:
    assert proc.stdout is not None
    seen = ""
    while marker not in seen:
        line = proc.stdout.readline()
        assert line, seen
        seen += line
    proc.send_signal(signal.SIGUSR2)
    return seen + proc.communicate(timeout=60)[0]


def _outcome(run_dir: Path, rank: int = 0) -> tuple[str, object]:
    with open(run_dir / result_name(None, rank), "rb") as fh:
        return pickle.load(fh)  # type: ignore[no-any-return]


def test_checkpoint_gets_the_calls_arguments_and_its_delayed_submission_is_the_next_attempt(tmp_path: Path) -> None:
    """submitit's checkpointing.md NetworkTraining: checkpoint(self, checkpointpath) gets the call's argument and
    returns DelayedSubmission(NetworkTraining(), checkpointpath); main called checkpoint() without arguments
    (TypeError), ignored its return and resumed the object instead."""
    ckpt = tmp_path / "net.json"
    first = _start_runner(tmp_path, [DelayedSubmission(api_calls.NetworkTraining(), str(ckpt), steps=30)])
    out = _signal_when(first, "step 3\n")
    assert first.returncode == 0, out
    assert "checkpointed DelayedSubmission(NetworkTraining" in out and ckpt.exists(), out
    saved = pickle.loads((tmp_path / "checkpoints" / "callable.pkl").read_bytes())
    assert saved.args == (str(ckpt),) and saved.kwargs == {"steps": 30} and saved.function.model is None
    second = _start_runner(tmp_path, [], restart=1)
    out2 = second.communicate(timeout=60)[0]
    assert second.returncode == 0, out2
    kind, value = _outcome(tmp_path)
    assert kind == "ok" and value["resumed_from"] >= 3 and value["step"] == 30, (value, out2)  # type: ignore[index]


def test_checkpoint_returning_none_ends_the_job_unrequeued(tmp_path: Path) -> None:
    proc = _start_runner(tmp_path, [DelayedSubmission(api_calls.Quitter(), 50)])
    out = _signal_when(proc, "step 2\n")
    assert proc.returncode == 1, out
    assert (tmp_path / "final.r0").read_text().startswith("checkpoint() returned None")
    assert _outcome(tmp_path) == ("error", "not requeued: checkpoint() returned None")


def test_a_plain_function_exits_for_the_requeue_and_other_ranks_do_not_checkpoint(tmp_path: Path) -> None:
    rank1 = _start_runner(tmp_path, [DelayedSubmission(api_calls.NetworkTraining(), str(tmp_path / "c"), steps=99)],
                          rank=1)
    out = _signal_when(rank1, "step 2\n")
    assert rank1.returncode == 0 and "rank 1 exits (rank 0 checkpoints)" in out, out
    assert not (tmp_path / "checkpoints" / "callable.pkl").exists() and not (tmp_path / "c").exists()


def test_every_rank_writes_its_result_and_results_reads_them(tmp_path: Path) -> None:
    from slurmkit.jobs.api import Job
    from slurmkit.jobs.monitor import JobStatus

    class Done(Job):
        def status(self) -> JobStatus:
            return JobStatus(self.job_id, "COMPLETED", "test")

    for r in range(3):
        p = _start_runner(tmp_path, [DelayedSubmission(api_calls.rank_times, 10)], rank=r)
        assert p.wait(60) == 0
    job = Done("7", str(tmp_path), None, ntasks=3)  # type: ignore[arg-type]
    assert job.results() == [0, 10, 20] and job.result() == 0 and job.task(2).result() == 20
    assert job.exception() is None
    with pytest.raises(ValueError, match="between 0 and 2"):
        job.task(3)
    (tmp_path / result_name(None, 1)).write_bytes(pickle.dumps(("error", "Traceback ...\nValueError: rank 1")))
    exc = job.exception()
    assert isinstance(exc, launch.JobFailed) and exc.traceback and "ValueError: rank 1" in exc.traceback
    assert "(rank 1)" in str(exc)
    with pytest.raises(launch.JobFailed, match="rank 1"):
        job.results()
