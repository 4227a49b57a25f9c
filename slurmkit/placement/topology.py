"""The network topology as the placement engine sees it: leaves (leaf switches or blocks) under a tree.

A :class:`PlacementTopology` is built once (from the inventory model, from ``scontrol show topology``
records, or flat) and then answers placement questions many times, so it stores everything the engine
needs as index tuples: leaves in input order, each leaf's nodes in hostlist order, every upper switch with
its level and the leaves below it. Level 0 is always a leaf; an upper switch's level is the one Slurm
reports (or, for the model, one more than its highest child). Leaves and switches that share no ancestor
are separate fabrics: like Slurm's topology/tree, the engine never places one job across them.

Blocks (Slurm's topology/block, NVL72-class domains) map onto the same shape: each block is a leaf, each
``BlockSizes`` entry above the base aggregates 2, 4, ... adjacent blocks into an upper level, and one
``fabric`` switch joins all blocks (the inter-block network), so a job that must leave a block still prefers
the smallest aggregate.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from slurmkit import hostlist
from slurmkit.errors import UsageError

if TYPE_CHECKING:  # duck-typed at run time: gpusub plans from live switch records without the model
    from slurmkit.model.cluster import Topology


class BlockRecordLike(Protocol):
    """What ``slurmkit.backend.parse.parse_blocks`` returns per topology/block line."""

    @property
    def name(self) -> str: ...
    @property
    def index(self) -> int: ...
    @property
    def nodes(self) -> Sequence[str]: ...
    @property
    def size(self) -> int: ...
    @property
    def aggregated(self) -> bool: ...


class SwitchRecordLike(Protocol):
    """What ``slurmkit.backend.parse.parse_topology`` returns per ``scontrol show topology`` line."""

    @property
    def name(self) -> str: ...
    @property
    def level(self) -> int: ...
    @property
    def nodes(self) -> Sequence[str]: ...
    @property
    def switches(self) -> Sequence[str]: ...


@dataclass(frozen=True)
class PlacementTopology:
    """Leaves, their nodes and the switch tree above them, stored as indices.

    ``switch_*`` tuples describe upper switches only (level >= 1). ``leaf_parent[i]`` and
    ``switch_parent[j]`` are indices into the upper switches, or -1 for a root. ``kind`` is ``tree``,
    ``block`` or ``flat`` (no topology: every node in one pseudo-leaf). Build it with :meth:`from_model`,
    :meth:`from_records` or :meth:`flat` rather than by hand; those validate.
    """

    kind: str
    leaf_names: tuple[str, ...]
    leaf_nodes: tuple[tuple[str, ...], ...]
    switch_names: tuple[str, ...] = ()
    switch_levels: tuple[int, ...] = ()
    switch_leaves: tuple[tuple[int, ...], ...] = ()
    leaf_parent: tuple[int, ...] = ()
    switch_parent: tuple[int, ...] = ()
    # derived in __post_init__
    nodes: tuple[str, ...] = field(init=False)
    node_leaf: dict[str, int] = field(init=False, repr=False, compare=False)
    node_index: dict[str, int] = field(init=False, repr=False, compare=False)
    levels: tuple[int, ...] = field(init=False)
    switches_by_level: dict[int, tuple[int, ...]] = field(init=False, repr=False, compare=False)
    leaf_root: tuple[str, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        nodes = tuple(n for leaf in self.leaf_nodes for n in leaf)
        node_leaf = {n: i for i, leaf in enumerate(self.leaf_nodes) for n in leaf}
        by_level: dict[int, list[int]] = {}
        for j, lvl in enumerate(self.switch_levels):
            by_level.setdefault(lvl, []).append(j)
        roots = []
        for i in range(len(self.leaf_names)):
            j = self.leaf_parent[i] if self.leaf_parent else -1
            name = self.leaf_names[i]
            while j >= 0:
                name = self.switch_names[j]
                j = self.switch_parent[j]
            roots.append(name)
        object.__setattr__(self, "nodes", nodes)
        object.__setattr__(self, "node_leaf", node_leaf)
        object.__setattr__(self, "node_index", {n: k for k, n in enumerate(nodes)})
        object.__setattr__(self, "levels", tuple(sorted(by_level)))
        object.__setattr__(self, "switches_by_level", {k: tuple(v) for k, v in by_level.items()})
        object.__setattr__(self, "leaf_root", tuple(roots))
        if not self.leaf_parent:
            object.__setattr__(self, "leaf_parent", tuple(-1 for _ in self.leaf_names))

    # ------------------------------------------------------------------ queries

    @property
    def unit(self) -> str:
        """What a leaf is called in messages: ``block`` for block topologies, else ``leaf``."""
        return "block" if self.kind == "block" else "leaf"

    @property
    def leaf_sizes(self) -> tuple[int, ...]:
        return tuple(len(leaf) for leaf in self.leaf_nodes)

    def ancestors(self, leaf: int) -> tuple[int, ...]:
        """Upper-switch indices above ``leaf``, nearest first."""
        out = []
        j = self.leaf_parent[leaf]
        while j >= 0:
            out.append(j)
            j = self.switch_parent[j]
        return tuple(out)

    def restrict(self, nodes: Iterable[str]) -> PlacementTopology:
        """The same tree limited to ``nodes`` (e.g. one partition); empty leaves and switches disappear.

        Names not in the topology are ignored here: a partition may hold nodes no switch lists.
        """
        keep = set(nodes)
        leaf_map: dict[int, int] = {}
        leaf_names: list[str] = []
        leaf_nodes: list[tuple[str, ...]] = []
        for i, members in enumerate(self.leaf_nodes):
            kept = tuple(n for n in members if n in keep)
            if kept:
                leaf_map[i] = len(leaf_names)
                leaf_names.append(self.leaf_names[i])
                leaf_nodes.append(kept)
        sw_map: dict[int, int] = {}
        for j, leaves in enumerate(self.switch_leaves):
            if any(leaf in leaf_map for leaf in leaves):
                sw_map[j] = len(sw_map)
        return PlacementTopology(
            kind=self.kind,
            leaf_names=tuple(leaf_names),
            leaf_nodes=tuple(leaf_nodes),
            switch_names=tuple(self.switch_names[j] for j in sw_map),
            switch_levels=tuple(self.switch_levels[j] for j in sw_map),
            switch_leaves=tuple(
                tuple(leaf_map[leaf] for leaf in self.switch_leaves[j] if leaf in leaf_map) for j in sw_map
            ),
            leaf_parent=tuple(sw_map.get(self.leaf_parent[i], -1) for i in leaf_map),
            switch_parent=tuple(sw_map.get(self.switch_parent[j], -1) for j in sw_map),
        )

    # ------------------------------------------------------------------ builders

    @classmethod
    def flat(cls, nodes: Iterable[str], name: str = "cluster") -> PlacementTopology:
        """No topology plugin: all nodes in one pseudo-leaf, so every placement spans "1 leaf"."""
        members = tuple(hostlist.expand(hostlist.fold(nodes)))
        if not members:
            raise UsageError("topology: no nodes")
        return cls(kind="flat", leaf_names=(name,), leaf_nodes=(members,))

    @classmethod
    def from_model(cls, topology: Topology, known_nodes: Iterable[str] | None = None) -> PlacementTopology:
        """From the inventory model's ``Topology`` (switches, or blocks with ``block_sizes``)."""
        if topology.blocks:
            return _from_blocks(
                [(b.name, hostlist.expand(b.nodes, f"topology block {b.name}")) for b in topology.blocks],
                topology.block_sizes,
                known_nodes,
            )
        if not topology.switches:
            raise UsageError("topology: the inventory defines no switches or blocks (use PlacementTopology.flat)")
        leaves = [
            (s.name, hostlist.expand(s.nodes, f"topology switch {s.name}"))
            for s in topology.switches
            if s.nodes
        ]
        uppers = [
            (s.name, None, hostlist.expand(s.switches, f"topology switch {s.name}"))
            for s in topology.switches
            if not s.nodes
        ]
        return _from_tree(leaves, uppers, known_nodes)

    @classmethod
    def from_block_records(
        cls, records: Iterable[BlockRecordLike], known_nodes: Iterable[str] | None = None
    ) -> PlacementTopology:
        """From topology/block's ``scontrol show topology`` records: base blocks in ``BlockIndex`` order, block
        sizes from the base block size and the aggregated levels' sizes."""
        recs = list(records)
        base = sorted((r for r in recs if not r.aggregated), key=lambda r: r.index)
        if not base:
            raise UsageError("topology: no blocks (is TopologyPlugin=topology/block?)")
        base_size = min(r.size for r in base)
        sizes = [base_size, *sorted({r.size for r in recs if r.aggregated and r.size > base_size})]
        return _from_blocks([(r.name, list(r.nodes)) for r in base], sizes, known_nodes)

    @classmethod
    def from_records(
        cls, records: Iterable[SwitchRecordLike], known_nodes: Iterable[str] | None = None
    ) -> PlacementTopology:
        """From parsed ``scontrol show topology`` records (anything with name, level, nodes, switches).

        A record with child switches is an upper switch; Slurm prints its ``Nodes=`` as the union of its
        subtree, which this builder ignores because the children are authoritative. Levels are taken
        from the records and must rise towards the root.
        """
        leaves: list[tuple[str, list[str]]] = []
        uppers: list[tuple[str, int | None, list[str]]] = []
        for rec in records:
            if rec.switches:
                uppers.append((rec.name, int(rec.level), list(rec.switches)))
            else:
                if int(rec.level) != 0:
                    raise UsageError(f"topology: switch {rec.name!r} has no child switches but Level={rec.level}")
                leaves.append((rec.name, list(rec.nodes)))
        if not leaves:
            raise UsageError("topology: no leaf switches (is TopologyPlugin=topology/none?)")
        return _from_tree(leaves, uppers, known_nodes)


# ---------------------------------------------------------------------- validation and assembly


def _check_leaves(
    leaves: Sequence[tuple[str, Sequence[str]]], known_nodes: Iterable[str] | None, unit: str
) -> None:
    names: set[str] = set()
    owner: dict[str, str] = {}
    for name, members in leaves:
        if name in names:
            raise UsageError(f"topology: duplicate {unit} name {name!r}")
        names.add(name)
        if not members:
            raise UsageError(f"topology: {unit} {name!r} has no nodes")
        for n in members:
            if n in owner:
                raise UsageError(f"topology: node {n!r} is in both {unit} {owner[n]!r} and {name!r}")
            owner[n] = name
    if known_nodes is not None:
        known = set(known_nodes)
        for name, members in leaves:
            unknown = [n for n in members if n not in known]
            if unknown:
                raise UsageError(
                    f"topology: {unit} {name!r} names unknown node(s) {hostlist.fold(unknown)}"
                )


def _from_tree(
    leaves: Sequence[tuple[str, Sequence[str]]],
    uppers: Sequence[tuple[str, int | None, Sequence[str]]],
    known_nodes: Iterable[str] | None,
) -> PlacementTopology:
    _check_leaves(leaves, known_nodes, "leaf switch")
    leaf_idx = {name: i for i, (name, _) in enumerate(leaves)}
    up_idx: dict[str, int] = {}
    for j, (name, _, _) in enumerate(uppers):
        if name in leaf_idx or name in up_idx:
            raise UsageError(f"topology: duplicate switch name {name!r}")
        up_idx[name] = j
    leaf_parent = [-1] * len(leaves)
    switch_parent = [-1] * len(uppers)
    for j, (name, _, children) in enumerate(uppers):
        for child in children:
            if child == name:
                raise UsageError(f"topology: switch {name!r} lists itself as a child")
            if child in leaf_idx:
                slot, k = leaf_parent, leaf_idx[child]
            elif child in up_idx:
                slot, k = switch_parent, up_idx[child]
            else:
                raise UsageError(f"topology: switch {name!r} names unknown switch {child!r}")
            if slot[k] >= 0 and slot[k] != j:
                raise UsageError(
                    f"topology: switch {child!r} has two parents, {uppers[slot[k]][0]!r} and {name!r}"
                )
            slot[k] = j

    # levels: computed bottom-up (model) or checked against the records (scontrol)
    computed: dict[int, int] = {}

    def level_of(j: int, trail: tuple[int, ...] = ()) -> int:
        if j in computed:
            return computed[j]
        if j in trail:
            raise UsageError(f"topology: switch {uppers[j][0]!r} is part of a cycle")
        best = 0
        for child in uppers[j][2]:
            if child in up_idx:
                best = max(best, level_of(up_idx[child], (*trail, j)))
        lvl = best + 1
        given = uppers[j][1]
        if given is not None:
            if given < lvl:
                raise UsageError(f"topology: switch {uppers[j][0]!r} has Level={given} but a child at level {lvl - 1}")
            lvl = given
        computed[j] = lvl
        return lvl

    levels = [level_of(j) for j in range(len(uppers))]
    under: list[set[int]] = [set() for _ in uppers]
    for i in range(len(leaves)):
        j = leaf_parent[i]
        while j >= 0:
            under[j].add(i)
            j = switch_parent[j]
    return PlacementTopology(
        kind="tree",
        leaf_names=tuple(name for name, _ in leaves),
        leaf_nodes=tuple(tuple(hostlist.expand(hostlist.fold(members))) for _, members in leaves),
        switch_names=tuple(name for name, _, _ in uppers),
        switch_levels=tuple(levels),
        switch_leaves=tuple(tuple(sorted(s)) for s in under),
        leaf_parent=tuple(leaf_parent),
        switch_parent=tuple(switch_parent),
    )


def _from_blocks(
    blocks: Sequence[tuple[str, Sequence[str]]],
    block_sizes: Sequence[int],
    known_nodes: Iterable[str] | None,
) -> PlacementTopology:
    _check_leaves(blocks, known_nodes, "block")
    sizes = list(block_sizes)
    if any(s < 1 for s in sizes):
        raise UsageError(f"topology: block_sizes must be positive, got {sizes}")
    factors: list[int] = []
    for s in sizes[1:]:
        f, rem = divmod(s, sizes[0])
        if rem or f < 2 or f & (f - 1) or (factors and f <= factors[-1]):
            raise UsageError(
                f"topology: block_sizes {sizes} must rise in power-of-two multiples of the base {sizes[0]}"
            )
        factors.append(f)
    # Aggregates nest because every factor is a power-of-two multiple of the one below it: the group of
    # blocks [s, s+f) at one level lies inside exactly one group of the next level.
    n = len(blocks)
    names: list[str] = []
    levels: list[int] = []
    members: list[tuple[int, ...]] = []
    switch_parent: list[int] = []
    leaf_parent = [-1] * n
    below: list[int] | None = None  # switch indices of the level under construction's children
    for level, f in enumerate(factors, start=1):
        current: list[int] = []
        for start in range(0, n, f):
            group = tuple(range(start, min(start + f, n)))
            j = len(names)
            names.append(hostlist.fold(blocks[i][0] for i in group))
            levels.append(level)
            members.append(group)
            switch_parent.append(-1)
            current.append(j)
            if below is None:
                for i in group:
                    leaf_parent[i] = j
            else:
                for child in below:
                    if members[child][0] in group:
                        switch_parent[child] = j
        below = current
    if n > 1 and (below is None or len(below) > 1):
        j = len(names)
        names.append("fabric")
        levels.append(len(factors) + 1)
        members.append(tuple(range(n)))
        switch_parent.append(-1)
        if below is None:
            leaf_parent = [j] * n
        else:
            for child in below:
                switch_parent[child] = j
    return PlacementTopology(
        kind="block",
        leaf_names=tuple(name for name, _ in blocks),
        leaf_nodes=tuple(tuple(hostlist.expand(hostlist.fold(m))) for _, m in blocks),
        switch_names=tuple(names),
        switch_levels=tuple(levels),
        switch_leaves=tuple(members),
        leaf_parent=tuple(leaf_parent),
        switch_parent=tuple(switch_parent),
    )
