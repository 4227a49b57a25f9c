"""What a lab user gets (issue 9 items 17, 18): `slurmkit lab env` is all a shell needs (gpusub finds the lab's
inventory beside SLURM_CONF), and `lab up --hooks` without --fake-nvml gives nodes a healthy synthesized GPU
state that matches --gpus-per-node and --gpu-type, so the hooks keep every node in service."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, lab_run

pytestmark = pytest.mark.lab


def _wait(pred, timeout: float, what: str):  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


def _gpu_checks_pass(rec: dict) -> None:
    """Every GPU check (NVML and XID) is OK or SKIP; host checks may warn (a dev box is no tuned node)."""
    from slurmkit.health.checks import CHECKS

    gpu = [c for c in rec["checks"] if CHECKS[c["check"]].source.startswith(("nvml", "xid"))]
    assert gpu and all(c["status"] in ("OK", "SKIP") for c in gpu), [c for c in gpu if c["status"] not in ("OK", "SKIP")]
    assert rec["action"] in ("none", "warn"), rec


def test_hooks_without_fake_nvml_keep_a_2_gpu_lab_healthy(make_lab, tmp_path: Path) -> None:
    lab = make_lab(nodes=2, gpus_per_node=2, nodes_per_leaf=2, gpu_type="a100", hooks=True, healthcheck_interval=5)
    for node in lab.spec.node_names:
        state = json.loads((Path(lab.dir) / "fake-nvml" / f"{node}.json").read_text())
        assert state["count"] == 2 and state["devices"][1]["name"] == "NVIDIA A100-SXM4-80GB"
        rec = Path(lab.dir) / "hookstate" / node / "last-health.json"
        _wait(rec.exists, 30, f"a health record from {node}")
        _gpu_checks_pass(json.loads(rec.read_text()))
    # a 2-node GPU job runs through the prolog and epilog on both nodes and leaves them in service
    out = lab_run(lab, ["srun", "-N2", "--gres=gpu:2", "-t", "1", "hostname"], timeout=60)
    assert sorted(out.stdout.split()) == ["node1", "node2"]
    for node in lab.spec.node_names:
        _gpu_checks_pass(json.loads((Path(lab.dir) / "hookstate" / node / "last-prolog.json").read_text()))
    states = lab_run(lab, ["sinfo", "-h", "-N", "-o", "%N %t"]).stdout.split("\n")
    assert all(s.split()[1] in ("idle", "mix", "alloc", "comp") for s in states if s.strip()), states
    # `lab env` is what a shell needs: with it (and no SLURMKIT_INVENTORY) gpusub takes the lab's inventory
    env_lines = subprocess.run([sys.executable, "-m", "slurmkit", "lab", "env", "--dir", str(lab.dir)],
                               capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert f"export SLURM_CONF={lab.conf}\n" in env_lines and f"export SLURMKIT_LAB_DIR={lab.dir}\n" in env_lines
    assert f"export SLURMKIT_FAKE_NVML={Path(lab.dir) / 'fake-nvml'}\n" in env_lines
    script = tmp_path / "t.py"
    script.write_text("print(1)\n")
    sh = (f'unset SLURMKIT_INVENTORY SLURM_CONF; eval "$({sys.executable} -m slurmkit lab env --dir {lab.dir})"; '
          f'{sys.executable} -m slurmkit.cli.gpusub --dry-run -N2 --run-dir {tmp_path / "run"} {script}')
    res = subprocess.run(["bash", "-c", sh], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "SLURMKIT_STATE_DIR": str(tmp_path / "st")})
    assert res.returncode == 0, res.stderr
    inv_sha = __import__("hashlib").sha256((Path(lab.etc) / "slurmkit.yaml").read_bytes()).hexdigest()[:16]
    assert f"from inventory sha256:{inv_sha}" in res.stdout and "#SBATCH --gres=gpu:2" in res.stdout
