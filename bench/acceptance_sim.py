"""Jobs and wall time to find one slow node: bisection vs all pairs vs one run per leaf.

Two parts:

* ``--lab``: 8 nodes for real. Starts a lab (``--port-base``, ``--dir``), caps node3 with ``slurmkit lab slow``,
  runs ``slurmkit acceptance run --json`` three ways and reads the jobs and the wall time from each report:
  ``--levels leaf`` (one run per leaf, then bisection inside the slow leaf), ``--levels node,pair,leaf,all`` (the
  default, every level), ``--levels pair --all-pairs`` (every pair).
* the model (always): 8, 64, 512 and 4,096 nodes in leaves of 32 (4 for 8 nodes), one node at a tenth of the
  healthy 50 GB/s, through the same plan (slurmkit.acceptance.plan) on slurmkit.acceptance.simulate's bandwidth
  model (a group runs at its slowest member; a job costs 2 s of scheduling, 1 s + 10 ms per node of bootstrap and
  the GPU sweep's bytes at that bandwidth; jobs on disjoint nodes overlap, the rest queue). Strategies:
  ``bisect``: one all-node run against the inventory's expected value, then halves (O(log n) jobs);
  ``per-leaf``: one run per leaf, then halves inside the slow leaf; ``all-pairs``: every pair, in n-1 rounds of
  n/2 concurrent jobs (computed, not simulated, above 64 nodes: 8.4 million jobs for 4,096 nodes).

    python3 bench/acceptance_sim.py                    # the model only (a second)
    python3 bench/acceptance_sim.py --lab --port-base 22500 --dir /tmp/acc-bench   # plus the real lab (minutes)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slurmkit.acceptance.busbw import Rule  # noqa: E402
from slurmkit.acceptance.plan import Topo, plan  # noqa: E402
from slurmkit.acceptance.runner import Store, drive  # noqa: E402
from slurmkit.acceptance.simulate import Model, ModelExecutor, cluster  # noqa: E402

HEALTHY = 50.0


def simulate(n: int, leaf: int, strategy: str) -> dict[str, object]:
    nodes, leaf_of, bw = cluster(n, leaf, HEALTHY)
    culprit = nodes[min(n - 1, 2 if n <= 8 else n // 3 + 5)]
    bw[culprit] = HEALTHY / 10
    model = Model(bw, leaf_of)
    if strategy == "all-pairs" and n > 64:
        # n-1 rounds of n/2 disjoint pairs (a round-robin tournament); every round has one pair with the slow node,
        # and a round lasts as long as its slowest job
        slow_pair_s = model.seconds((nodes[0], nodes[1]), HEALTHY / 10)
        return {"jobs": n * (n - 1) // 2, "waves": n - 1, "wall_s": (n - 1) * slow_pair_s, "named": culprit,
                "how": "computed"}
    levels, expected, all_pairs = {"bisect": (("all",), HEALTHY, False), "per-leaf": (("leaf",), None, False),
                                   "all-pairs": (("pair",), None, True)}[strategy]
    ex = ModelExecutor(model)
    store = Store("/nonexistent")
    store.doc = {"measurements": {}, "pending": {}}
    findings = drive(plan(Topo(tuple(nodes), leaf_of), levels, Rule(), {"all": expected}, all_pairs=all_pairs), ex,
                     store, lambda m: None)
    named = [",".join(f.nodes) for f in findings if f.confirmed]
    assert named == [culprit], (strategy, n, named, culprit)
    return {"jobs": ex.jobs_submitted, "waves": ex.waves, "wall_s": ex.wall_s, "named": named[0], "how": "simulated"}


def lab_part(port_base: int, directory: str, slurmkit: str) -> list[dict[str, object]]:
    rows = []
    subprocess.run([slurmkit, "lab", "up", "--port-base", str(port_base), "--dir", directory, "--slow-node", "node3"],
                   check=True, capture_output=True)
    env = {**os.environ, "SLURM_CONF": f"{directory}/etc/slurm.conf"}
    try:
        for name, args in (("per-leaf", ["--levels", "leaf"]), ("every level (default)", []),
                           ("all-pairs", ["--levels", "pair", "--all-pairs"])):
            t0 = time.monotonic()
            out = subprocess.run([slurmkit, "acceptance", "run", "--json", "--fresh", "--out", f"{directory}-acc", *args],
                                 env=env, capture_output=True, text=True, check=True)
            doc = json.loads(out.stdout)
            rows.append({"strategy": name, "jobs": doc["jobs"], "wall_s": time.monotonic() - t0,
                         "outliers": sorted({n for o in doc["outliers"] for n in o["nodes"]}),
                         "suspects": sorted({n for o in doc["suspects"] for n in o["nodes"]})})
            print(f"lab {name}: {rows[-1]}", file=sys.stderr)
    finally:
        subprocess.run([slurmkit, "lab", "down", "--dir", directory], capture_output=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--lab", action="store_true", help="also measure the 8-node lab for real (root, minutes)")
    ap.add_argument("--port-base", type=int, default=22500)
    ap.add_argument("--dir", default="/tmp/slurmkit-acceptance-bench")
    a = ap.parse_args()
    if a.lab:
        rows = lab_part(a.port_base, a.dir, str(Path(sys.executable).with_name("slurmkit")))
        print("| lab, 8 nodes, node3 capped at 0.1 CPU | jobs | wall time | outliers | not confirmed |")
        print("|---|---:|---:|---|---|")
        for r in rows:
            print(f"| {r['strategy']} | {r['jobs']} | {r['wall_s']:.0f} s | {', '.join(r['outliers']) or '-'} | "  # type: ignore[arg-type]
                  f"{', '.join(r['suspects']) or '-'} |")  # type: ignore[arg-type]
        print()
    print("| nodes (leaf size) | strategy | jobs | waves | wall time (model) | named |")
    print("|---:|---|---:|---:|---:|---|")
    for n, leaf in ((8, 4), (64, 32), (512, 32), (4096, 32)):
        for strategy in ("bisect", "per-leaf", "all-pairs"):
            r = simulate(n, leaf, strategy)
            wall = float(r["wall_s"])  # type: ignore[arg-type]
            w = f"{wall:.0f} s" if wall < 7200 else f"{wall / 3600:.1f} h"
            print(f"| {n} ({leaf}) | {strategy} | {r['jobs']:,} | {r['waves']:,} | {w} | {r['named']}"
                  + (" (computed)" if r["how"] == "computed" else "") + " |")


if __name__ == "__main__":
    main()
