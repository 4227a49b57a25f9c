#!/usr/bin/env python3
"""A/B of the fake 8-GPU prolog between two source trees, interleaved run by run so both see the same load.

    git worktree add /tmp/before <commit>
    .venv/bin/python bench/prolog_ab.py /tmp/before . [--runs 30]
    .venv/bin/python bench/prolog_ab.py --metrics . [--runs 100]   # one tree: metrics textfile off vs on
    .venv/bin/python bench/prolog_ab.py /tmp/before . --hook health   # the health check instead of the prolog
    .venv/bin/python bench/prolog_ab.py . . --hook health --checks-b '{"files": {...}}'  # one tree, a policy each

Each run is a fresh `python -m slurmkit.cli.main hook prolog` (as slurmd starts it) with the tree's own fixture
and code (cwd and PYTHONPATH point at the tree). Prints p50/p90 per arm and the median of the paired (same round) differences, which cancels
load that drifts between rounds; asserts nothing. ``--metrics`` times what writing the Prometheus textfile costs the
prolog (issue 22's "p50 grows by at most 5 ms"): the same tree without and with ``hooks.checks.textfile_dir``.
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
    ap.add_argument("trees", nargs="+", help="two source trees (e.g. a worktree of the old commit, then .); one "
                                              "with --metrics")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--metrics", action="store_true", help="one tree: without vs with the metrics textfile")
    ap.add_argument("--hook", default="prolog", choices=("prolog", "health"), help="the hook timed (default prolog; "
                    "health finds no slurmctld here and runs its checks all the same)")
    ap.add_argument("--checks-b", help="JSON merged into the second arm's hooks.checks (the same tree twice: what a "
                                       "policy costs)")
    args = ap.parse_args()
    if len(args.trees) != (1 if args.metrics else 2):
        ap.error("give two trees, or one with --metrics")
    tmp = Path(tempfile.mkdtemp(prefix="slurmkit-prolog-ab-"))
    arms: list[tuple[str, str, Path]] = []  # label, tree, inventory
    for n, t in enumerate([str(Path(t).resolve()) for t in args.trees] * (2 if args.metrics else 1)):
        inv = yaml.safe_load((Path(t) / "examples" / "lab.yaml").read_text())
        checks: dict = {"ib": False}
        label = t if n == 0 or args.metrics or not args.checks_b else f"{t} + --checks-b"
        if n == 1 and args.checks_b and not args.metrics:
            import json

            checks.update(json.loads(args.checks_b))
        if args.metrics:
            label = "metrics textfile " + ("on" if n else "off")
            if n:
                checks["textfile_dir"] = str(tmp / "metrics")
        inv["hooks"] = {"prolog": True, "checks": checks}
        (tmp / f"inv{n}.yaml").write_text(yaml.safe_dump(inv))
        arms.append((label, t, tmp / f"inv{n}.yaml"))
    times: dict[str, list[float]] = {a[0]: [] for a in arms}
    for i in range(args.runs + 1):
        for n, (label, root, inv_path) in enumerate(arms):
            env = {"PATH": "/usr/bin:/bin", "SLURMD_NODENAME": "node1", "SLURM_JOB_ID": "1",
                   "SLURM_JOB_GPUS": "0,1,2,3,4,5,6,7", "SLURMKIT_STATE_DIR": str(tmp / f"state{n}"),
                   "PYTHONPATH": root, "SLURMKIT_FAKE_NVML": f"{root}/tests/data/nvml/healthy-h100x8.json"}
            t = time.perf_counter()
            p = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "hook", args.hook, "--inventory",
                                str(inv_path)], env=env, cwd=root, capture_output=True, text=True)
            if i:  # the first round warms the page cache and the expectations cache
                times[label].append((time.perf_counter() - t) * 1000)
            if p.returncode != 0 and i == 1:
                print(f"{label}: exit {p.returncode}: {p.stderr.strip()[-200:]}")
    if args.metrics and not any((tmp / "metrics").glob("*.prom")):
        print("the 'on' arm wrote no textfile: the comparison is void")
    (_a, ta), (_b, tb) = times.items()
    diffs = sorted(y - x for x, y in zip(ta, tb, strict=True))
    for label, ts in times.items():
        ts = sorted(ts)
        print(f"{label:<40} runs {len(ts):>3}  p50 {statistics.median(ts):7.1f} ms  p90 {ts[int(0.9 * (len(ts) - 1))]:7.1f} ms")
    q = statistics.quantiles(diffs, n=4) if len(diffs) > 1 else [diffs[0]] * 3
    print(f"paired difference (second - first): median {statistics.median(diffs):+.1f} ms, "
          f"quartiles {q[0]:+.1f} / {q[2]:+.1f} ms")
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
