"""Choose nodes for a job: lowest switch level, then fewest leaves, then best fit.

The policy, in order of precedence:

1. **Lowest switch level crossed.** A job inside one leaf (level 0) beats one under a spine (level 1),
   which beats one crossing the core. This is what Slurm's topology/tree documents ("identify the lowest
   level switch that can satisfy a job's request").
2. **Fewest leaves** under that switch: the minimum number of leaves whose free nodes add up to the job.
3. **Best fit**, so that whole leaves stay free for big jobs: a job that fits in one leaf goes to the
   leaf with the *fewest* eligible nodes that still holds it (a partly used leaf before an empty one),
   ties to the leaf under the fullest switch; a job that needs several leaves takes the largest ones
   whole and puts the remainder in the tightest leaf that holds it (see :func:`_fill` for why). Among
   switches of one level, the one needing the fewest leaves and then holding the fewest free nodes wins
   (a half-used spine before an empty one).
4. **Never** a node that is draining, drained, down or flagged unhealthy.

Every tie is broken by input order (leaf/switch index, then node order inside a leaf), so the same
input always gives the same answer.

Speed: :func:`plan` works on one eligible-node count per leaf, never on nodes, so a decision on a
16,384-node tree with 512 leaves touches a few thousand integers. :func:`place` adds one pass over the
node states to build those counts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from slurmkit import hostlist
from slurmkit.errors import UsageError
from slurmkit.placement.topology import PlacementTopology

STATES = ("idle", "mixed", "allocated", "draining", "drained", "down")
# sinfo's short forms (%t) of the same six states, accepted for convenience
_ALIASES = {"mix": "mixed", "alloc": "allocated", "drng": "draining", "drain": "drained"}
_NO_NEW_WORK = frozenset({"draining", "drained", "down", "allocated"})


@dataclass(frozen=True)
class NodeState:
    """One node as the scheduler sees it now.

    ``state`` is one of :data:`STATES` (or sinfo's short form: mix, alloc, drng, drain). ``healthy`` is
    slurmkit's own health verdict; an unhealthy node is never chosen whatever Slurm says.
    """

    name: str
    state: str
    free_gpus: int
    total_gpus: int
    healthy: bool = True

    def __post_init__(self) -> None:
        state = _ALIASES.get(self.state, self.state)
        if state not in STATES:
            raise UsageError(f"node {self.name}: unknown state {self.state!r} (expected one of {', '.join(STATES)})")
        object.__setattr__(self, "state", state)
        if self.total_gpus < 0 or not 0 <= self.free_gpus <= self.total_gpus:
            raise UsageError(
                f"node {self.name}: free_gpus={self.free_gpus} must be between 0 and total_gpus={self.total_gpus}"
            )

    @property
    def whole_free(self) -> bool:
        """Usable by an exclusive job: idle, healthy, every GPU free."""
        return self.state == "idle" and self.healthy and self.free_gpus == self.total_gpus

    @property
    def usable(self) -> bool:
        """Could take more work: idle or mixed, healthy, not draining."""
        return self.healthy and self.state not in _NO_NEW_WORK


@dataclass(frozen=True)
class Request:
    """``nodes`` nodes with ``gpus_per_node`` GPUs each; ``exclusive`` wants whole idle nodes."""

    nodes: int
    gpus_per_node: int = 0
    exclusive: bool = True

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise UsageError(f"request: nodes must be at least 1, got {self.nodes}")
        if self.gpus_per_node < 0:
            raise UsageError(f"request: gpus_per_node must not be negative, got {self.gpus_per_node}")

    def accepts(self, node: NodeState) -> bool:
        if self.exclusive:
            return node.whole_free and node.total_gpus >= self.gpus_per_node
        return node.usable and node.free_gpus >= self.gpus_per_node


@dataclass(frozen=True)
class Plan:
    """A decision in index form: which switch anchors the job and how many nodes come from which leaf.

    ``takes`` is ``((leaf_index, node_count), ...)`` in leaf order; ``anchor`` is the switch at the highest
    level crossed (a leaf name when ``level`` is 0); ``leftover`` is the eligible nodes left unused in the
    leaves the job touches (lower is a tighter fit).
    """

    level: int
    anchor: str
    takes: tuple[tuple[int, int], ...]
    leftover: int

    @property
    def leaves(self) -> int:
        return len(self.takes)

    @property
    def score(self) -> tuple[int, int, int]:
        """Sort key, lower is better: (highest level crossed, leaves spanned, leftover in touched leaves)."""
        return (self.level, len(self.takes), self.leftover)


@dataclass(frozen=True)
class Placement:
    """Where a job goes. ``nodes`` in topology order; ``leaves`` the leaves (or blocks) it spans."""

    nodes: tuple[str, ...]
    leaves: tuple[str, ...]
    switch: str
    level: int
    score: tuple[int, int, int]
    whole_leaves_left: int
    unit: str = "leaf"

    @property
    def nodelist(self) -> str:
        """The nodes as one hostlist expression, for ``--nodelist``."""
        return hostlist.fold(self.nodes)

    def summary(self) -> str:
        """One line, e.g. ``4 nodes on leaf2 (1 leaf); 3 leaves stay whole``."""
        n = len(self.nodes)
        k = len(self.leaves)
        head = f"{n} node{'' if n == 1 else 's'} on {hostlist.fold(self.leaves)}"
        units = f"{k} {self.unit if k == 1 else _plural(self.unit)}"
        span = f"({units})" if self.level == 0 else f"under {self.switch} ({units}, crosses level {self.level})"
        w = self.whole_leaves_left
        tail = f"{w} {self.unit} stays whole" if w == 1 else f"{w} {_plural(self.unit)} stay whole"
        return f"{head} {span}; {tail}"

    def to_json(self) -> dict[str, object]:
        return {
            "nodes": list(self.nodes),
            "nodelist": self.nodelist,
            "leaves": list(self.leaves),
            "switch": self.switch,
            "level": self.level,
            "score": list(self.score),
            "whole_leaves_left": self.whole_leaves_left,
            "summary": self.summary(),
        }


def _plural(unit: str) -> str:
    return "leaves" if unit == "leaf" else unit + "s"


# ---------------------------------------------------------------------- the decision on counts


def _min_leaves(counts: list[int], n: int) -> int:
    """Fewest of ``counts`` (sorted descending) that add up to ``n``; ``len+1`` when they cannot."""
    total = 0
    for k, c in enumerate(counts, start=1):
        total += c
        if total >= n:
            return k
    return len(counts) + 1


def _fill(leaves: Sequence[int], counts: Sequence[int], n: int) -> list[tuple[int, int]]:
    """Split ``n`` nodes over the fewest of ``leaves``: largest leaves whole, the rest best fit.

    While no leaf holds what is left, take all of the leaf with the most eligible nodes; then put the
    remainder in the tightest leaf that holds it. Largest-first needs the fewest leaves by construction.

    Why not the other way round (fill the small fragments first to keep big leaves whole)? It looks
    better per decision ({8, 8, 5, 5} free, 10 nodes: 5 + 5 keeps both 8s whole) but it is worse over a
    trace: fragments are what one-node jobs, most of all jobs, fill without breaking a whole leaf, and a
    job that spans leaves anyway gains nothing from keeping a whole leaf for itself. On the
    bench/placement_sim.py trace smallest-feasible-first gave 5.6% more cross-leaf jobs than this rule.
    """
    avail = {leaf: counts[leaf] for leaf in leaves if counts[leaf] > 0}
    takes: list[tuple[int, int]] = []
    need = n
    while need > 0:
        fits = [(c, leaf) for leaf, c in avail.items() if c >= need]
        leaf = min(fits)[1] if fits else max(avail, key=lambda x: (avail[x], -x))
        take = min(need, avail.pop(leaf))
        takes.append((leaf, take))
        need -= take
    return sorted(takes)


def plan(topo: PlacementTopology, counts: Sequence[int], n: int) -> Plan | None:
    """Decide on per-leaf eligible counts alone; ``None`` when no switch holds ``n`` eligible nodes now.

    ``counts[i]`` is how many nodes of leaf ``i`` the job may use. This is the whole policy (see the module
    docstring); :func:`place` wraps it with node states and names.
    """
    if n < 1:
        raise UsageError(f"request: nodes must be at least 1, got {n}")
    nsw = len(topo.switch_names)
    sw_total = [0] * nsw
    for j, leaves in enumerate(topo.switch_leaves):
        sw_total[j] = sum(map(counts.__getitem__, leaves))

    def parent_total(j: int) -> int:
        return sw_total[j] if j >= 0 else 0

    # level 0: the tightest single leaf, ties to the leaf under the fullest (least free) parent
    best: tuple[int, int, int] | None = None
    for i, c in enumerate(counts):
        if c >= n:
            key = (c, parent_total(topo.leaf_parent[i]), i)
            if best is None or key < best:
                best = key
    if best is not None:
        c, _, i = best
        return Plan(0, topo.leaf_names[i], ((i, n),), c - n)

    for level in topo.levels:
        chosen: tuple[int, int, int, int] | None = None
        for j in topo.switches_by_level[level]:
            if sw_total[j] < n:
                continue
            desc = sorted((counts[leaf] for leaf in topo.switch_leaves[j]), reverse=True)
            cand = (_min_leaves(desc, n), sw_total[j], parent_total(topo.switch_parent[j]), j)
            if chosen is None or cand < chosen:
                chosen = cand
        if chosen is not None:
            _, _, _, j = chosen
            takes = _fill(topo.switch_leaves[j], counts, n)
            leftover = sum(counts[leaf] for leaf, _ in takes) - n
            return Plan(level, topo.switch_names[j], tuple(takes), leftover)
    return None


def ideal_span(topo: PlacementTopology, n: int) -> tuple[int, int] | None:
    """(level, leaves) the job would get on an empty cluster; ``None`` when it is larger than any fabric.

    gpusub's strict mode compares a placement against this to decide whether to wait.
    """
    p = plan(topo, topo.leaf_sizes, n)
    return (p.level, p.leaves) if p is not None else None


# ---------------------------------------------------------------------- the decision on node states


def eligible_by_leaf(
    topo: PlacementTopology, states: Mapping[str, NodeState] | Iterable[NodeState], request: Request
) -> list[list[str]]:
    """Per leaf, the node names ``request`` may use, in preference order.

    Exclusive jobs take nodes in topology order. Shared jobs pack: nodes with the fewest free GPUs that
    still suffice come first, so whole nodes stay whole. Nodes the topology does not list are ignored;
    nodes the topology lists but ``states`` lacks are treated as unavailable.
    """
    by_name = states if isinstance(states, Mapping) else {s.name: s for s in states}
    get = by_name.get
    out: list[list[str]] = []
    if request.exclusive:
        g = request.gpus_per_node
        for members in topo.leaf_nodes:
            out.append([
                name for name in members
                if (s := get(name)) is not None and s.state == "idle" and s.healthy
                and s.free_gpus == s.total_gpus >= g
            ])
        return out
    g = request.gpus_per_node
    for members in topo.leaf_nodes:
        cand = [
            (s.free_gpus, pos, name) for pos, name in enumerate(members)
            if (s := get(name)) is not None and s.healthy and s.state not in _NO_NEW_WORK and s.free_gpus >= g
        ]
        cand.sort()
        out.append([name for _, _, name in cand])
    return out


def place(
    topo: PlacementTopology,
    states: Mapping[str, NodeState] | Iterable[NodeState],
    request: Request,
) -> Placement | None:
    """The best placement for ``request`` now, or ``None`` if it cannot start now.

    Raises :class:`UsageError` when the request can never fit: more nodes than the topology has, or more
    than any single fabric (switches without a common parent) holds.
    """
    by_name = states if isinstance(states, Mapping) else {s.name: s for s in states}
    if request.nodes > len(topo.nodes):
        raise UsageError(f"request: {request.nodes} nodes, but the topology has only {len(topo.nodes)}")
    eligible = eligible_by_leaf(topo, by_name, request)
    p = plan(topo, [len(e) for e in eligible], request.nodes)
    if p is None:
        if ideal_span(topo, request.nodes) is None:
            raise UsageError(
                f"request: {request.nodes} nodes do not fit under any one switch (the fabrics are not connected)"
            )
        return None
    chosen: list[str] = []
    for leaf, take in p.takes:
        chosen.extend(eligible[leaf][:take])
    chosen.sort(key=topo.node_index.__getitem__)
    touched = {leaf for leaf, _ in p.takes}
    # a busy leaf fails all() on its first busy node, so this costs about one check per leaf
    whole = sum(
        1
        for i, members in enumerate(topo.leaf_nodes)
        if i not in touched and all((s := by_name.get(name)) is not None and s.whole_free for name in members)
    )
    return Placement(
        nodes=tuple(chosen),
        leaves=tuple(topo.leaf_names[leaf] for leaf, _ in p.takes),
        switch=p.anchor,
        level=p.level,
        score=p.score,
        whole_leaves_left=whole,
        unit=topo.unit,
    )
