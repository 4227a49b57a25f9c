#!/usr/bin/env python3
"""A/B of the fake 8-GPU prolog between two source trees, interleaved run by run so both see the same load.

    git worktree add /tmp/before <commit>
    .venv/bin/python bench/prolog_ab.py /tmp/before . [--runs 30]

Each run is a fresh `python -m slurmkit.cli.main hook prolog` (as slurmd starts it) with the tree's own fixture
and code (cwd and PYTHONPATH point at the tree). Prints p50/p90 per tree; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trees", nargs=2, help="two source trees (e.g. a worktree of the old commit, then .)")
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()
    trees = [str(Path(t).resolve()) for t in args.trees]
    tmp = Path(tempfile.mkdtemp(prefix="slurmkit-prolog-ab-"))
    inv = yaml.safe_load((Path(trees[1]) / "examples" / "lab.yaml").read_text())
    inv["hooks"] = {"prolog": True, "checks": {"ib": False}}
    (tmp / "inv.yaml").write_text(yaml.safe_dump(inv))
    times: dict[str, list[float]] = {t: [] for t in trees}
    for i in range(args.runs + 1):
        for n, root in enumerate(trees):
            env = {"PATH": "/usr/bin:/bin", "SLURMD_NODENAME": "node1", "SLURM_JOB_ID": "1",
                   "SLURM_JOB_GPUS": "0,1,2,3,4,5,6,7", "SLURMKIT_STATE_DIR": str(tmp / f"state{n}"),
                   "PYTHONPATH": root, "SLURMKIT_FAKE_NVML": f"{root}/tests/data/nvml/healthy-h100x8.json"}
            t = time.perf_counter()
            p = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "hook", "prolog", "--inventory",
                                str(tmp / "inv.yaml")], env=env, cwd=root, capture_output=True, text=True)
            if i:  # the first round warms the page cache and the expectations cache
                times[root].append((time.perf_counter() - t) * 1000)
            if p.returncode != 0:
                print(f"{root}: exit {p.returncode}: {p.stderr.strip()[-200:]}")
    for root, ts in times.items():
        ts.sort()
        print(f"{root:<40} runs {len(ts):>3}  p50 {statistics.median(ts):7.1f} ms  p90 {ts[int(0.9 * (len(ts) - 1))]:7.1f} ms")
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
