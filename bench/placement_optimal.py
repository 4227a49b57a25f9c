"""Is the engine's span optimal? Check it against exhaustive search on many small random instances.

Each instance: a random tree of 1-12 leaves with 1-8 nodes each, grouped under 1-4 spines, with a core
above the spines half of the time (otherwise the spines are separate fabrics and some jobs cannot be
placed at all); node states drawn at random (idle, mixed, allocated, draining, drained, down, unhealthy);
a random exclusive request of 1..(free nodes) nodes, or in 15% of instances 1..(all nodes). The engine's ``place()`` answer (highest level
crossed, leaves spanned) is compared with ``optimal_span``, which tries every subset of leaves; "no
placement" must match "no subset fits". The engine also has to return exactly the requested number of
nodes, all of them idle and healthy.

Usage: python bench/placement_optimal.py [--instances 10000] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from slurmkit.backend.parse import SwitchRecord as Rec  # what `scontrol show topology` parses into
from slurmkit.errors import UsageError  # noqa: E402
from slurmkit.placement import (  # noqa: E402
    NodeState,
    PlacementTopology,
    Request,
    eligible_by_leaf,
    optimal_span,
    place,
)

STATES = ("idle", "idle", "idle", "mixed", "allocated", "allocated", "draining", "drained", "down")


def instance(rng: random.Random) -> tuple[PlacementTopology, list[NodeState], Request]:
    nleaves = rng.randint(1, 12)
    recs = [Rec(f"l{i}", 0, [f"l{i}n{k}" for k in range(rng.randint(1, 8))], []) for i in range(nleaves)]
    nspines = rng.randint(1, min(4, nleaves))
    cuts = sorted(rng.sample(range(1, nleaves), nspines - 1)) if nspines > 1 else []
    bounds = [0, *cuts, nleaves]
    spines = [Rec(f"s{g}", 1, [], [f"l{i}" for i in range(bounds[g], bounds[g + 1])]) for g in range(nspines)]
    recs += spines
    if nspines > 1 and rng.random() < 0.5:
        recs.append(Rec("core", 2, [], [s.name for s in spines]))
    topo = PlacementTopology.from_records(recs)
    states = []
    for name in topo.nodes:
        st = rng.choice(STATES)
        free = 8 if st == "idle" else rng.randint(1, 7) if st == "mixed" else 0
        states.append(NodeState(name, st, free, 8, healthy=rng.random() > 0.05))
    # mostly sizes that can be placed now, so most instances test the choice rather than "no"
    free = sum(1 for s in states if s.whole_free)
    top = max(1, free) if rng.random() < 0.85 else len(topo.nodes)
    return topo, states, Request(rng.randint(1, top), 8)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--instances", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    t0 = time.perf_counter()
    optimal = placed = spanning = unplaceable = never = 0
    worse: list[str] = []
    for k in range(args.instances):
        topo, states, req = instance(rng)
        counts = [len(e) for e in eligible_by_leaf(topo, states, req)]
        best = optimal_span(topo, counts, req.nodes)
        try:
            p = place(topo, states, req)
        except UsageError:
            never += 1  # larger than any fabric: an error, and no subset can fit either
            p = None
        got = None if p is None else (p.level, len(p.leaves))
        ok = got == best
        if p is not None:
            placed += 1
            spanning += len(p.leaves) > 1
            by = {s.name: s for s in states}
            ok = ok and len(set(p.nodes)) == req.nodes and all(by[n].whole_free for n in p.nodes)
        else:
            unplaceable += 1
        optimal += ok
        if not ok and len(worse) < 5:
            worse.append(f"instance {k}: engine {got}, optimum {best}")
    secs = time.perf_counter() - t0
    print("| instances | placed | of which span leaves | no placement now | of which never fits | span optimal | share optimal | seconds |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| {args.instances} | {placed} | {spanning} | {unplaceable} | {never} | {optimal} | "
          f"{optimal / args.instances:.2%} | {secs:.1f} |")
    for line in worse:
        print(line)
    sys.exit(0 if optimal == args.instances else 1)


if __name__ == "__main__":
    main()
