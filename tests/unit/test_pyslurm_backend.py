"""The pyslurm adapter against a fake module shaped like pyslurm 25.11's object API."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest

from slurmkit.backend.base import SubmitRequest
from slurmkit.backend.cli import CLIBackend, JobNotFound
from slurmkit.backend.pyslurm import PyslurmBackend, PyslurmUnavailable, load_pyslurm, select_backend
from slurmkit.errors import SlurmCommandError, SlurmkitError


def make_fake(version: str = "25.11.2") -> types.ModuleType:
    mod = types.ModuleType("pyslurm")
    mod.__version__ = version  # type: ignore[attr-defined]
    calls: list[tuple] = []
    mod.calls = calls  # type: ignore[attr-defined]

    class RPCError(Exception):
        pass

    class Job:
        table: dict[int, dict] = {}

        def __init__(self, job_id: int):
            self.id = job_id
            for k, v in Job.table.get(job_id, {}).items():
                setattr(self, k, v)

        @staticmethod
        def load(job_id: int) -> Job:
            if job_id not in Job.table:
                raise RPCError("Invalid job id specified")
            return Job(job_id)

        def send_signal(self, signal, steps="children", hurry=False):  # noqa: ANN001
            calls.append(("send_signal", self.id, signal, steps))

        def cancel(self) -> None:
            calls.append(("cancel", self.id))

        def requeue(self, hold: bool = False) -> None:
            calls.append(("requeue", self.id, hold))

    class Jobs(dict):
        @staticmethod
        def load(preload_passwd_info=False, frozen=False):  # noqa: ANN001
            return Jobs({i: Job(i) for i in Job.table})

    class JobSubmitDescription:
        def __init__(self, **kw):  # noqa: ANN003
            self.kw = kw
            self.script = kw.get("script")

        def load_sbatch_options(self, overwrite: bool = False) -> None:
            calls.append(("load_sbatch_options", [x for x in self.script.splitlines() if x.startswith("#SBATCH")]))

        def submit(self) -> int:
            calls.append(("submit", self.kw))
            return 77

    base = dict(state="RUNNING", state_reason="None", allocated_nodes="node[1-2]", name="train", exit_code=0,
                exit_code_signal=0, requeue_count=1, standard_output="/r/logs/slurm-7.out", standard_error="",
                batch_host="node1", partition="gpu")
    Job.table = {7: base, 8: {**base, "state": "PENDING", "allocated_nodes": None, "requeue_count": 0}}
    mod.RPCError = RPCError  # type: ignore[attr-defined]
    mod.Job = Job  # type: ignore[attr-defined]
    mod.Jobs = Jobs  # type: ignore[attr-defined]
    mod.JobSubmitDescription = JobSubmitDescription  # type: ignore[attr-defined]
    return mod


class VersionedCLI(CLIBackend):
    def __init__(self, version: str):
        super().__init__()
        self._version = version


@pytest.fixture()
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    mod = make_fake()
    monkeypatch.setitem(sys.modules, "pyslurm", mod)
    yield mod


def test_cli_is_the_default_and_pyslurm_is_not_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "pyslurm", raising=False)
    b = select_backend({}, VersionedCLI("22.05.8"))
    assert isinstance(b, CLIBackend) and "pyslurm" not in sys.modules


def test_selected_only_when_versions_match(fake: types.ModuleType) -> None:
    b = select_backend({"SLURMKIT_BACKEND": "pyslurm"}, VersionedCLI("25.11.1"))
    assert isinstance(b, PyslurmBackend)
    with pytest.raises(PyslurmUnavailable, match="pyslurm 25.11.2 does not match Slurm 22.05.8"):
        select_backend({"SLURMKIT_BACKEND": "pyslurm"}, VersionedCLI("22.05.8"))
    with pytest.raises(SlurmkitError, match="expected 'cli' or 'pyslurm'"):
        select_backend({"SLURMKIT_BACKEND": "rest"}, VersionedCLI("25.11.1"))


def test_not_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyslurm", None)  # import raises ImportError
    with pytest.raises(PyslurmUnavailable, match="not importable"):
        load_pyslurm("25.11")


def test_job_verbs_map_to_pyslurm(fake: types.ModuleType) -> None:
    b = PyslurmBackend(fake, VersionedCLI("25.11.2"))
    jobs = b.jobs(["7"])
    assert len(jobs) == 1 and jobs[0].nodes == ("node1", "node2") and jobs[0].restarts == 1
    assert jobs[0].state == "RUNNING" and jobs[0].exit_code == "0:0" and jobs[0].stdout.endswith("slurm-7.out")
    assert [j.job_id for j in b.jobs()] == ["7", "8"] and b.job("8").nodes == ()
    with pytest.raises(JobNotFound):
        b.job("9")
    b.cancel("7", signal="USR2", batch=True)
    b.cancel("7")
    b.requeue("7")
    assert fake.calls == [("send_signal", 7, "SIGUSR2", "batch"), ("cancel", 7), ("requeue", 7, False)]


def test_submit_reads_sbatch_lines_and_returns_the_id(fake: types.ModuleType) -> None:
    b = PyslurmBackend(fake, VersionedCLI("25.11.2"))
    jid = b.submit(SubmitRequest(script="#!/bin/bash\n#SBATCH --nodes=2\nsrun true\n", workdir="/w"))
    assert jid == "77"
    assert fake.calls[0] == ("load_sbatch_options", ["#SBATCH --nodes=2"])
    assert fake.calls[1][1] == {"script": "#!/bin/bash\n#SBATCH --nodes=2\nsrun true\n", "working_directory": "/w"}


def test_rpc_errors_become_slurm_command_errors(fake: types.ModuleType) -> None:
    b = PyslurmBackend(fake, VersionedCLI("25.11.2"))

    def boom(*a, **k):  # noqa: ANN002, ANN003
        raise fake.RPCError("Unable to contact slurm controller")

    fake.Jobs.load = staticmethod(boom)
    with pytest.raises(SlurmCommandError, match="Unable to contact slurm controller"):
        b.jobs()
