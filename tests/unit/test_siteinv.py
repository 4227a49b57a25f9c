"""The site inventory lookup shared by gpusub, `slurmkit report` and the hooks (issue 9 item 17):
$SLURMKIT_INVENTORY, then slurmkit.yaml beside $SLURM_CONF, then /etc/slurm/slurmkit.yaml."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from slurmkit.errors import UsageError
from slurmkit.siteinv import DEFAULT_INVENTORY, candidates, find_inventory

ROOT = Path(__file__).resolve().parents[2]
LAB_INV = ROOT / "examples" / "lab.yaml"


@pytest.fixture
def site(tmp_path: Path) -> Path:
    etc = tmp_path / "site-etc"
    etc.mkdir()
    (etc / "slurm.conf").write_text("ClusterName=x\n")
    shutil.copy(LAB_INV, etc / "slurmkit.yaml")
    return etc


def test_order(site: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.yaml"
    other.write_text("x: 1\n")
    conf = str(site / "slurm.conf")
    assert find_inventory({"SLURMKIT_INVENTORY": str(other), "SLURM_CONF": conf}) == str(other)
    assert find_inventory({"SLURM_CONF": conf}) == str(site / "slurmkit.yaml")
    assert candidates({"SLURM_CONF": conf}) == [str(site / "slurmkit.yaml"), DEFAULT_INVENTORY]
    # a slurm.conf without the copy beside it falls through to the default place
    assert candidates({"SLURM_CONF": str(tmp_path / "slurm.conf")})[-1] == DEFAULT_INVENTORY
    expect_default = DEFAULT_INVENTORY if os.path.isfile(DEFAULT_INVENTORY) else None
    assert find_inventory({"SLURM_CONF": str(tmp_path / "slurm.conf")}) == expect_default
    with pytest.raises(UsageError, match=r"\$SLURMKIT_INVENTORY=/nope.yaml: no such file"):
        find_inventory({"SLURMKIT_INVENTORY": "/nope.yaml", "SLURM_CONF": conf})


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SLURMKIT_INVENTORY", "SLURM_CONF")}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


def test_gpusub_finds_the_inventory_beside_slurm_conf(site: Path, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    argv = [sys.executable, "-m", "slurmkit.cli.gpusub", "--dry-run", "--no-query", "-N2", "--run-dir", str(tmp_path / "run"), str(script)]
    state = {"SLURMKIT_STATE_DIR": str(tmp_path / "state")}
    beside = subprocess.run(argv, env=_clean_env(SLURM_CONF=str(site / "slurm.conf"), **state), capture_output=True,
                            text=True, timeout=60, cwd=tmp_path)
    explicit = subprocess.run(argv, env=_clean_env(SLURMKIT_INVENTORY=str(LAB_INV), **state), capture_output=True,
                              text=True, timeout=60, cwd=tmp_path)
    assert beside.returncode == 0, beside.stderr
    # the same facts as with $SLURMKIT_INVENTORY, without asking Slurm (there is none here to ask)
    assert "#SBATCH --partition=gpu" in beside.stdout and "#SBATCH --mem=31000M" in beside.stdout
    strip = [ln for ln in beside.stdout.splitlines() if "gpusub-runs" not in ln and "/run" not in ln]
    assert strip == [ln for ln in explicit.stdout.splitlines() if "gpusub-runs" not in ln and "/run" not in ln]

