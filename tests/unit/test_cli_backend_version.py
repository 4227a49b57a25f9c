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
