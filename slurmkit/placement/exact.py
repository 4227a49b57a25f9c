"""The exact optimum span by exhaustive search: the oracle the greedy policy is checked against.

Exponential in the number of leaves (every subset is tried), so only for small trees: tests and
``bench/placement_optimal.py`` use it on up to a dozen leaves. It shares no logic with
:func:`slurmkit.placement.engine.plan` beyond the topology's ancestor lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

from slurmkit.errors import UsageError
from slurmkit.placement.topology import PlacementTopology

MAX_LEAVES = 16


def optimal_span(topo: PlacementTopology, counts: Sequence[int], n: int) -> tuple[int, int] | None:
    """Lexicographically smallest (highest level crossed, leaves spanned) over every leaf subset whose
    eligible nodes reach ``n``; ``None`` when no subset under one switch does."""
    nleaves = len(topo.leaf_names)
    if nleaves > MAX_LEAVES:
        raise UsageError(f"optimal_span: {nleaves} leaves is too many for exhaustive search (max {MAX_LEAVES})")
    ancestors = [topo.ancestors(i) for i in range(nleaves)]
    best: tuple[int, int] | None = None
    usable = [i for i in range(nleaves) if counts[i] > 0]
    for size in range(1, len(usable) + 1):
        for subset in combinations(usable, size):
            if sum(counts[i] for i in subset) < n:
                continue
            if size == 1:
                level = 0
            else:
                common = set(ancestors[subset[0]]).intersection(*(ancestors[i] for i in subset[1:]))
                if not common:
                    continue
                level = min(topo.switch_levels[j] for j in common)
            if best is None or (level, size) < best:
                best = (level, size)
    return best
