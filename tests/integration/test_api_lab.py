"""The Python API (issue 25 item 10) on the real lab, both releases: a callable on every rank with rank 0's
result, a remote exception, an array mapping parameters to tasks, and a checkpointable object that a USR2
(the preemption path) saves and the requeued attempt resumes."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from slurmkit import launch as jobs
from slurmkit.backend.cli import CLIBackend
from slurmkit.lab import Lab
from tests.conftest import ROOT
from tests.integration import api_funcs

pytestmark = pytest.mark.lab


@pytest.fixture()
def env(lab: Lab, tmp_path: Path) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("SBATCH_")}
    return {**e, **lab.env, "SLURMKIT_INVENTORY": str(lab.etc / "slurmkit.yaml"),
            "SLURMKIT_STATE_DIR": str(tmp_path / "state"), "GPUSUB_RUN_ROOT": str(tmp_path / "runs"),
            "PYTHONPATH": str(ROOT)}


@pytest.fixture()
def opts(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    for k, v in env.items():  # sbatch exports the submitting environment to the job (PYTHONPATH included)
        monkeypatch.setenv(k, v)
    return {"backend": CLIBackend(env=env), "environ": env, "launcher": "srun", "time": "5", "gpus_per_node": 1}


def test_a_callable_runs_on_every_rank_and_rank_0_returns(opts: dict[str, object]) -> None:
    job = jobs.submit(api_funcs.add, 2, 3, nodes=2, **opts)
    value, ntasks, node = job.result(timeout=90)
    assert (value, ntasks) == (5, 2) and node.startswith("node")
    assert job.state == "COMPLETED"


def test_an_exception_in_the_job_is_raised_with_its_traceback(opts: dict[str, object]) -> None:
    job = jobs.submit(api_funcs.boom, **opts)
    with pytest.raises(jobs.JobFailed, match="ValueError: boom from the job"):
        job.result(timeout=90)
    assert job.state == "FAILED"


def test_map_array_maps_parameters_to_tasks(opts: dict[str, object]) -> None:
    tasks = jobs.map_array(api_funcs.square, [1, 2, 3], **opts)
    assert [t.job_id.split("_")[1] for t in tasks] == ["0", "1", "2"]
    assert [t.result(timeout=120) for t in tasks] == [1, 4, 9]


def test_a_checkpointable_callable_resumes_after_usr2(opts: dict[str, object], tmp_path: Path) -> None:
    flag = tmp_path / "seen"
    job = jobs.submit(api_funcs.Counter(40, str(flag)), **opts)
    deadline = time.monotonic() + 90
    while "step 6" not in job.logs():
        assert time.monotonic() < deadline, job.logs()
        time.sleep(0.3)
    job.cancel(signal="USR2")  # the preemption path: checkpoint, requeue, resume
    flag.touch()
    out = job.result(timeout=180)
    assert out["restart"] == 1 and out["checkpoints"] == 1, job.logs()
    assert out["started_at"][0] == 0 and out["started_at"][1] >= 6 and out["step"] == 40
    assert "resuming the call checkpointed" in job.logs()
