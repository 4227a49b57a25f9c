"""Defrag plan time on a 16,384-node tree (issue 26: < 100 ms), a cluster scattered by small checkpointing jobs.

    python bench/defrag_bench.py [--nodes 16384] [--leaf 32] [--runs 20] [--seed 1]

Each run: every leaf has one node held by a 1-node job (movable, random cost), most other nodes hold a 4-GPU
job (a quarter unmovable), and the target is a whole leaf: blocked by fragmentation everywhere, so the planner
works every leaf. Prints a table: median / max plan time, moves, the plan's cost.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slurmkit.defrag.plan import RunningJob, Target, plan_defrag  # noqa: E402
from slurmkit.placement.engine import NodeState  # noqa: E402
from slurmkit.placement.topology import PlacementTopology  # noqa: E402


def scene(nodes: int, leaf: int, rng: random.Random):  # type: ignore[no-untyped-def]
    leaves = [[f"n{i:05d}" for i in range(s, min(nodes, s + leaf))] for s in range(0, nodes, leaf)]
    topo = PlacementTopology(kind="tree", leaf_names=tuple(f"leaf{k}" for k in range(len(leaves))),
                             leaf_nodes=tuple(tuple(x) for x in leaves))
    jobs, used = [], {}
    jid = 1
    for members in leaves:
        for i, n in enumerate(members):
            if i == 0 or rng.random() < 0.3:
                g = 8 if i == 0 else 4
                jobs.append(RunningJob(str(jid), {n: g}, movable=i == 0 or rng.random() > 0.25,
                                       cost=float(rng.randint(100, 10000))))
                used[n] = g
                jid += 1
    states = {n: NodeState(n, "mixed" if used.get(n) else "idle", 8 - used.get(n, 0), 8)
              for members in leaves for n in members}
    return topo, states, jobs


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=16384)
    ap.add_argument("--leaf", type=int, default=32)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    times, moves, costs = [], [], []
    for _ in range(a.runs):
        topo, states, jobs = scene(a.nodes, a.leaf, rng)
        target = Target(a.leaf, 8, exclusive=True)
        t0 = time.perf_counter()
        v = plan_defrag(topo, states, jobs, target)
        times.append((time.perf_counter() - t0) * 1000)
        assert v.blocked and v.plan is not None, v.reason
        moves.append(len(v.plan.moves))
        costs.append(v.plan.cost)
    print(f"{a.nodes} nodes, leaves of {a.leaf}, {len(jobs)} running jobs, target {a.leaf} whole nodes on one leaf; "
          f"Python {sys.version.split()[0]}")
    print("| runs | median ms | max ms | moves (median) | cost GPU-s (median) |")
    print("|---:|---:|---:|---:|---:|")
    print(f"| {a.runs} | {statistics.median(times):.1f} | {max(times):.1f} | {statistics.median(moves):.0f} | "
          f"{statistics.median(costs):.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
