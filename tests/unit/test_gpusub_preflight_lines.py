"""issue 24 item 5: preflight prints every error (a line each), not the first plus "(+1 more)", which hid the real
cause; on a cluster with association limits the sbatch --test-only start time is not printed as if it held for a job
the tenant check says will pend (test-only ignores association and QOS limits)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmkit.accounts.quota import TenantCheck
from slurmkit.cli import gpusub_cmds as gpusub  # the click commands (gpusub.py is the entry point)
from slurmkit.jobs.spec import JobSpec
from slurmkit.jobs.submit import PreflightError, prepare
from tests.unit.test_gpusub_cli import LAB_INV, FakeBackend, unit_slurm_conf


@pytest.fixture()
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    e = {"SLURMKIT_INVENTORY": str(LAB_INV), "SLURMKIT_STATE_DIR": str(tmp_path / "state"),
         "GPUSUB_RUN_ROOT": str(tmp_path / "runs"), "SLURM_CONF": unit_slurm_conf(tmp_path)}
    for k, v in e.items():
        monkeypatch.setenv(k, v)
    return e


@pytest.fixture()
def script(tmp_path: Path) -> Path:
    p = tmp_path / "train.py"
    p.write_text("print('hi')\n")
    return p


# TP=3 on 8 GPUs per node, 2 x 8 GPUs for TP x PP = 12, 30 layers on PP=4: three independent errors
ARGS = ["-N", "2", "--launcher", "megatron", "--tp", "3", "--pp", "4", "--", "--num-layers", "30"]


def test_every_preflight_error_is_printed_a_line_each(env: dict[str, str], script: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpusub, "_backend", FakeBackend)
    res = CliRunner().invoke(gpusub.submit_cmd, [str(script), *ARGS])
    assert res.exit_code == 2
    lines = res.output.splitlines()
    assert len(lines) >= 3 and all(ln.startswith("gpusub: error: preflight: ") for ln in lines), res.output
    assert "more)" not in res.output
    text = "\n".join(lines)
    assert "TP=3 does not divide 8 GPUs per node" in text
    assert "is not divisible by TP x PP x CP" in text
    assert "--num-layers 30 is not divisible by PP=4" in text


def test_preflight_error_carries_every_error(script: Path, env: dict[str, str]) -> None:
    with pytest.raises(PreflightError) as ei:
        prepare(JobSpec(script=str(script), nodes=2, launcher="megatron", tp=3, pp=4, args=("--num-layers", "30")),
                FakeBackend())
    assert len(ei.value.errors) >= 3 and all(e.startswith("preflight: ") and "\n" not in e for e in ei.value.errors)
    assert str(ei.value).splitlines() == list(ei.value.errors)


class _Tenant:
    def __init__(self, check: TenantCheck):
        self.check = check

    def result(self, account: str | None, qos: str | None, gpus: int) -> TenantCheck:
        return self.check


@pytest.mark.parametrize("warning", [
    "your association with account team-a allows 8 GPUs; running jobs hold 8; this job asks 16: it will pend with "
    "AssocGrpGRES until 16 are free",
    "tenant limits not checked: sacctmgr failed (rc=1): connection refused",
])
def test_no_test_only_start_time_for_a_job_held_by_limits_test_only_ignores(
        env: dict[str, str], script: Path, monkeypatch: pytest.MonkeyPatch, warning: str) -> None:
    monkeypatch.setattr(gpusub, "_backend", FakeBackend)
    monkeypatch.setattr("slurmkit.jobs.tenant.start", lambda environ=None: _Tenant(TenantCheck(warnings=[warning])))
    res = CliRunner().invoke(gpusub.submit_cmd, [str(script), "-N", "2"])
    assert res.exit_code == 0, res.output
    assert f"gpusub: warning: {warning}" in res.output
    assert "2026-11-30T01:02:03" not in res.output  # FakeBackend's --test-only answer
    assert ("estimated start: left out: sbatch --test-only ignores association and QOS limits (see the warning above)"
            in res.output.splitlines())


def test_the_estimate_is_printed_when_no_limit_holds_the_job(env: dict[str, str], script: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpusub, "_backend", FakeBackend)
    monkeypatch.setattr("slurmkit.jobs.tenant.start", lambda environ=None: _Tenant(TenantCheck()))
    res = CliRunner().invoke(gpusub.submit_cmd, [str(script), "-N", "2"])
    assert res.exit_code == 0 and "estimated start: 2026-11-30T01:02:03 (sbatch --test-only)" in res.output
