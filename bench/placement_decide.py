"""Decision time of the placement engine on a 16,384-node fat tree (512 leaves of 32 nodes).

Each decision gets a fresh random cluster state (a busy fraction drawn per leaf, so some leaves are
full, some empty, most partly used; 1% of nodes drained, 0.5% unhealthy) and a job size from
1..256 nodes. Two timings per decision:

- ``place()``: the whole public call as gpusub makes it, from a list of NodeState (one pass over the
  16,384 states to build per-leaf eligible lists, the decision, node names and the summary counts);
- ``plan()``: the decision alone on per-leaf eligible counts (what a scheduler loop with incremental
  state, like bench/placement_sim.py, pays).

Usage: python bench/placement_decide.py [--nodes 16384] [--decisions 300] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from placement_common import GPUS_PER_NODE, NODES_PER_LEAF, fat_tree  # noqa: E402

from slurmkit.placement import NodeState, Request, eligible_by_leaf, place, plan  # noqa: E402

SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def random_states(topo, rng: random.Random) -> list[NodeState]:
    out = []
    for members in topo.leaf_nodes:
        busy = rng.choice((0.0, 0.3, 0.6, 0.9, 1.0, rng.random()))
        for name in members:
            r = rng.random()
            if r < 0.01:
                out.append(NodeState(name, "drained", 0, GPUS_PER_NODE))
            elif rng.random() < busy:
                out.append(NodeState(name, "allocated", 0, GPUS_PER_NODE))
            else:
                out.append(NodeState(name, "idle", GPUS_PER_NODE, GPUS_PER_NODE, healthy=r > 0.015))
    rng.shuffle(out)  # sinfo order is not topology order
    return out


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=16384)
    ap.add_argument("--decisions", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    t0 = time.perf_counter()
    topo = fat_tree(args.nodes)
    build_ms = (time.perf_counter() - t0) * 1000
    rng = random.Random(args.seed)
    full: dict[int, list[float]] = {n: [] for n in SIZES}
    core: dict[int, list[float]] = {n: [] for n in SIZES}
    placed = 0
    for i in range(args.decisions):
        n = SIZES[i % len(SIZES)]
        states = random_states(topo, rng)
        req = Request(n, GPUS_PER_NODE)
        t0 = time.perf_counter()
        p = place(topo, states, req)
        full[n].append((time.perf_counter() - t0) * 1000)
        placed += p is not None
        counts = [len(e) for e in eligible_by_leaf(topo, states, req)]
        t0 = time.perf_counter()
        plan(topo, counts, n)
        core[n].append((time.perf_counter() - t0) * 1000)

    leaves = args.nodes // NODES_PER_LEAF
    print(f"{args.nodes} nodes, {leaves} leaves, {len(topo.switch_names)} upper switches; "
          f"topology build {build_ms:.0f} ms; {args.decisions} decisions, {placed} placed; "
          f"Python {sys.version.split()[0]}")
    print()
    print("| job nodes | place() median ms | place() p95 ms | plan() median ms | plan() p95 ms |")
    print("|---:|---:|---:|---:|---:|")
    for n in SIZES:
        f, c = full[n], core[n]
        print(f"| {n} | {statistics.median(f):.2f} | {pct(f, 0.95):.2f} | {statistics.median(c):.3f} | {pct(c, 0.95):.3f} |")
    allf = [x for v in full.values() for x in v]
    allc = [x for v in core.values() for x in v]
    print(f"| all | {statistics.median(allf):.2f} | {pct(allf, 0.95):.2f} | "
          f"{statistics.median(allc):.3f} | {pct(allc, 0.95):.3f} |")


if __name__ == "__main__":
    main()
