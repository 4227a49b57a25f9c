"""examples/train_ddp.py (the demo's job) runs with torch alone, as the README installs it (issue 25 item 11):
`dist.all_gather_object` needed numpy, and with `pip install slurmkit torch` the job died "Numpy is not available"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_demo_job_runs_without_numpy(tmp_path: Path) -> None:
    pytest.importorskip("torch.distributed")
    hide = tmp_path / "no-numpy"
    hide.mkdir()
    # an interpreter where `import numpy` fails, as in a venv with torch and no numpy
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['numpy'] = None\n")
    out = tmp_path / "results"
    out.mkdir()
    res = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(ROOT / "examples" / "train_ddp.py"), "--lr", "3e-4"],
        env={**os.environ, "PYTHONPATH": str(hide), "DDP_RESULT_DIR": str(out)},
        capture_output=True, text=True, timeout=180, cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Numpy is not available" not in res.stderr
    assert "all_reduce over 2 ranks on 1 nodes" in res.stdout and "OK" in res.stdout
    ranks = sorted((json.loads(p.read_text()) for p in out.glob("rank*.json")), key=lambda r: r["rank"])
    assert [(r["rank"], r["sum"], r["args"]) for r in ranks] == [(0, 3.0, ["--lr", "3e-4"]), (1, 3.0, ["--lr", "3e-4"])]
    probe = subprocess.run([sys.executable, "-c", "import numpy"], env={**os.environ, "PYTHONPATH": str(hide)},
                           capture_output=True, text=True)
    assert probe.returncode != 0  # the test really ran without numpy
