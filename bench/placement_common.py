"""Shared by the placement benchmarks: a synthetic fat tree, built the way gpusub builds the real one.

Fat tree: 32 nodes per leaf, 16 leaves per spine (a 512-node pod), one core above the spines when there
is more than one pod. Node ``n00000`` .. ``n16383`` are numbered leaf-major, so index order matches rack
order (the friendliest case for placement that ignores topology).
"""

from __future__ import annotations

from dataclasses import dataclass

from slurmkit.placement import PlacementTopology

NODES_PER_LEAF = 32
LEAVES_PER_SPINE = 16
GPUS_PER_NODE = 8


@dataclass(frozen=True)
class Record:
    """Same shape as slurmkit.backend.parse.SwitchRecord (what `scontrol show topology` parses to)."""

    name: str
    level: int
    nodes: list[str]
    switches: list[str]


def node_name(i: int) -> str:
    return f"n{i:05d}"


def fat_tree_records(nodes: int) -> list[Record]:
    if nodes % NODES_PER_LEAF:
        raise SystemExit(f"cluster size {nodes} is not a multiple of {NODES_PER_LEAF}")
    leaves = nodes // NODES_PER_LEAF
    recs = [
        Record(f"leaf{i}", 0, [node_name(i * NODES_PER_LEAF + k) for k in range(NODES_PER_LEAF)], [])
        for i in range(leaves)
    ]
    spines = []
    for s in range(0, leaves, LEAVES_PER_SPINE):
        name = f"spine{s // LEAVES_PER_SPINE}"
        recs.append(Record(name, 1, [], [f"leaf{i}" for i in range(s, min(s + LEAVES_PER_SPINE, leaves))]))
        spines.append(name)
    if len(spines) > 1:
        recs.append(Record("core", 2, [], spines))
    return recs


def fat_tree(nodes: int) -> PlacementTopology:
    return PlacementTopology.from_records(fat_tree_records(nodes))
