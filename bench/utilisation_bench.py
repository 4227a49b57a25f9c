"""`slurmkit report utilisation` over a year of a 1,000-node cluster: 1M synthetic sacct allocation lines (the
shape `sacct -a -X -n -P --noconvert` prints, tests/unit/test_report_utilisation.py), streamed through the same
code path the CLI takes (backend.run.stream of a child printing the lines, Lines -> Fold), against the admin's usual
alternative on the same file: an awk one-liner summing gres/gpu x (End - Start), which gives one number and no
window cut, no groups, no days. Prints a table: wall seconds, peak RSS, allocated GPU-hours (both must agree where
no job crosses the window).

    python bench/utilisation_bench.py [--jobs 1000000] [--nodes 1000]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slurmkit.accounts import utilisation as ut  # noqa: E402
from slurmkit.backend.run import stream  # noqa: E402


def synth(path: Path, jobs: int, nodes: int, w0: float, w1: float, seed: int = 1) -> None:
    rnd = random.Random(seed)
    users = [f"u{i:03d}" for i in range(300)]
    accts = [f"a{i:02d}" for i in range(40)]
    parts = ["gpu", "long", "debug", "h100", "a100"]
    span = w1 - w0
    with open(path, "w") as f:
        for j in range(jobs):
            s = w0 + rnd.random() * (span - 200000)
            dur = rnd.choice((60, 600, 3600, 4 * 3600, 86400)) * rnd.random()
            g = rnd.choice((1, 1, 2, 4, 8, 8, 16, 32, 64))
            n = max(1, g // 8)
            first = rnd.randrange(nodes - n)
            nl = f"gpu{first:04d}" if n == 1 else f"gpu[{first:04d}-{first + n - 1:04d}]"
            jid = f"{j}_{rnd.randrange(100)}" if j % 10 == 0 else f"{j}"
            f.write(f"{jid}|{rnd.choice(users)}|{rnd.choice(accts)}|{rnd.choice(parts)}|billing={g},cpu={g * 4},"
                    f"gres/gpu:h100={g},gres/gpu={g},mem={g * 64000}M,node={n}|"
                    f"{datetime.fromtimestamp(s):%Y-%m-%dT%H:%M:%S}|{datetime.fromtimestamp(s + dur):%Y-%m-%dT%H:%M:%S}"
                    f"|COMPLETED|{nl}\n")


def run_fold(path: Path, w0: float, w1: float, nodes: int) -> tuple[float, float, int]:
    t0 = time.perf_counter()
    fold = ut.Fold(w0, w1, "account", 0.92)
    for i in range(nodes):
        fold.node(ut.NodeGPUs(f"gpu{i:04d}", {"h100": 8}, ("gpu",)))
    lines = ut.Lines(w1)

    def on_line(line: str) -> None:
        a = lines.allocation(line)
        if a is not None:
            fold.allocation(a)

    rc, _ = stream(["cat", str(path)], 600, on_line)
    rep = fold.finish(lines.skipped)
    assert rc == 0 and rep.skipped == 0
    return time.perf_counter() - t0, rep.cluster.allocated_h, len(rep.groups)


def run_awk(path: Path) -> tuple[float, float]:
    awk = shutil.which("mawk") or shutil.which("awk") or "awk"
    prog = (r'BEGIN{FS="|"} {n=split($5,t,","); g=0; for(i=1;i<=n;i++){split(t[i],kv,"="); if(kv[1]=="gres/gpu") g=kv[2]}'
            r' gsub(/[-:T]/," ",$6); gsub(/[-:T]/," ",$7); s=mktime($6); e=mktime($7); h+=g*(e-s)/3600} END{printf "%.6f", h}')
    t0 = time.perf_counter()
    out = subprocess.run([awk, prog, str(path)], capture_output=True, text=True, check=True).stdout
    return time.perf_counter() - t0, float(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--nodes", type=int, default=1000)
    args = ap.parse_args()
    w1 = datetime(2026, 12, 1).timestamp()
    w0 = w1 - 365 * 86400
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "sacct.txt"
        synth(path, args.jobs, args.nodes, w0, w1)
        size = path.stat().st_size
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        fold_s, fold_h, groups = run_fold(path, w0, w1, args.nodes)
        rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        awk_s, awk_h = run_awk(path)
    print(f"{args.jobs:,} allocations, {args.nodes:,} nodes x 8 GPUs, one year; sacct text {size / 1e6:.0f} MB; "
          f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    print()
    print("| reader | wall s | peak RSS MB | allocated GPU-hours | groups, days, window cut |")
    print("|---|---:|---:|---:|---|")
    print(f"| slurmkit report utilisation (stream -> Fold) | {fold_s:.1f} | {rss1 / 1024:.0f} (+{(rss1 - rss0) / 1024:.0f}) "
          f"| {fold_h:,.0f} | {groups} accounts, 365 days, yes |")
    print(f"| awk one-liner on the same lines | {awk_s:.1f} | - | {awk_h:,.0f} | no |")
    print(f"\nslurmkit / awk wall: {fold_s / awk_s:.2f}x; GPU-hours differ by {abs(fold_h - awk_h) / awk_h:.2e}")


if __name__ == "__main__":
    main()
