"""Every benchmark that needs no lab runs here at a small size (issue 20 item 8: bench/conf_bench.py had stopped
running -- its two-controller inventory lacked controller.state_dir -- and nothing noticed). The numbers are not
judged; that each script still runs to its table is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("argv", [
    ["conf_bench.py", "--sizes", "64,1000", "--repeat", "1"],
    ["placement_sim.py", "--sizes", "64", "--jobs", "200"],
    # defrag on/off and planning with end times, each pass cross-checked against slurmkit's planners (--check)
    ["placement_sim.py", "--sizes", "128", "--jobs", "600", "--defrag", "--policies", "ours", "--check", "20"],
    ["placement_decide.py", "--nodes", "256", "--decisions", "10"],
    ["placement_optimal.py", "--instances", "5"],
    ["acceptance_sim.py"],
], ids=lambda a: a[0])
def test_bench_runs_at_a_small_size(argv: list[str]) -> None:
    res = subprocess.run([sys.executable, str(ROOT / "bench" / argv[0]), *argv[1:]], capture_output=True, text=True,
                         timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr[-2000:]
    assert "|---" in res.stdout, res.stdout[-2000:]  # its markdown table
