"""CLIBackend.version() remembers ``sinfo --version`` per sinfo binary (issue 25: gpusub's node query waited on it,
every submit): asked again when the binary changes, never remembered for a wrapper script."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slurmkit.backend import cli
from slurmkit.backend.cli import CLIBackend
from slurmkit.backend.run import Result
from slurmkit.errors import SlurmCommandError


@pytest.fixture()
def asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    answers: list[str] = []

    def fake_run(self: CLIBackend, argv: list[str], timeout: float | None = None, **kw: object) -> Result:
        if not answers:
            raise SlurmCommandError(argv, 1, "not expected: the version should have come from the cache")
        return Result(tuple(argv), 0, answers.pop(0), "")

    monkeypatch.setattr(CLIBackend, "_run", fake_run)
    return answers


def _sinfo(bindir: Path, body: bytes) -> None:
    bindir.mkdir(exist_ok=True)
    f = bindir / "sinfo"
    if f.exists():
        f.unlink()  # a new file, as an upgrade installs one (new inode, new ctime)
    f.write_bytes(body)
    f.chmod(0o755)


def test_version_asked_once_per_binary(tmp_path: Path, asked: list[str]) -> None:
    bindir = tmp_path / "bin"
    _sinfo(bindir, b"\x7fELF" + b"\0" * 60)
    env = {"PATH": str(bindir)}
    asked.append("slurm 22.05.8\n")
    assert CLIBackend(env=env).version() == "22.05.8"
    assert not asked
    assert CLIBackend(env=env).version() == "22.05.8"  # from the cache: _run would raise
    _sinfo(bindir, b"\x7fELF" + b"\1" * 70)  # upgraded
    asked.append("slurm 24.11.5\n")
    assert CLIBackend(env=env).version() == "24.11.5"
    assert not asked
    assert CLIBackend(env=env).version() == "24.11.5"
    assert oct(os.stat(cli._version_cache_file()).st_mode & 0o777) == "0o600"


def test_wrapper_script_is_asked_every_time(tmp_path: Path, asked: list[str]) -> None:
    bindir = tmp_path / "bin"
    _sinfo(bindir, b"#!/bin/sh\nexec /opt/slurm/bin/sinfo \"$@\"\n")  # may run another sinfo without changing
    env = {"PATH": str(bindir)}
    asked += ["slurm 22.05.8\n", "slurm 24.11.5\n"]
    assert CLIBackend(env=env).version() == "22.05.8"
    assert CLIBackend(env=env).version() == "24.11.5"
    assert not asked


def test_update_job_runs_scontrol_without_the_callers_job_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """gpusub --follow, Job.wait() and a pinned submit run `scontrol update JobId=N ReqNodeList=` from wherever the
    user is, often inside an allocation (salloc, an interactive srun, a driver job). There scontrol, after a
    NodeList/ReqNodeList update, looks up job N's allocation because SLURM_JOBID is set and, once N runs, writes
    slurm_job_N_resize.sh/.csh into the cwd (update_job.c _update_job_size, 22.05 and 24.11). The batch shell drops
    SLURM_JOBID for the same call; so does the backend."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    seen = tmp_path / "seen"
    (bindir / "scontrol").write_text(f'#!/bin/sh\necho "${{SLURM_JOBID-unset}} $*" > {seen}\n')
    (bindir / "scontrol").chmod(0o755)
    monkeypatch.setenv("SLURM_JOBID", "99")
    CLIBackend(env={"PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}).update_job("4", ReqNodeList="")
    assert seen.read_text().split() == ["unset", "update", "JobId=4", "ReqNodeList="]
