"""How fragmented the free capacity is: the numbers behind ``slurmkit report fragmentation``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from slurmkit.placement.engine import NodeState
from slurmkit.placement.topology import PlacementTopology


@dataclass(frozen=True)
class LeafUsage:
    """One leaf (or block): its size and what is free on it now."""

    name: str
    nodes: int
    free_nodes: int  # whole free nodes (idle, healthy, every GPU free)
    free_gpus: int  # on usable nodes (idle or mixed, healthy)
    total_gpus: int

    @property
    def whole(self) -> bool:
        return self.free_nodes == self.nodes

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "nodes": self.nodes,
            "free_nodes": self.free_nodes,
            "free_gpus": self.free_gpus,
            "total_gpus": self.total_gpus,
        }


@dataclass(frozen=True)
class Fragmentation:
    """Free capacity and how usable it is for multi-node jobs. See :func:`fragmentation` for the index."""

    unit: str
    nodes: int
    gpus: int
    free_gpus: int
    free_nodes: int
    leaves: int
    free_leaves: int
    largest_job_one_leaf: int  # nodes (exclusive) that could start now inside one leaf
    largest_job_anywhere: int  # nodes (exclusive) that could start now under one switch
    largest_single_node_gpus: int  # most GPUs a one-node shared job could get now
    stranded_gpus: int  # free GPUs on nodes that are partly busy (no exclusive job can use them)
    index: float
    per_leaf: tuple[LeafUsage, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "unit": self.unit,
            "nodes": self.nodes,
            "gpus": self.gpus,
            "free_gpus": self.free_gpus,
            "free_nodes": self.free_nodes,
            "leaves": self.leaves,
            "free_leaves": self.free_leaves,
            "largest_job_one_leaf_nodes": self.largest_job_one_leaf,
            "largest_job_anywhere_nodes": self.largest_job_anywhere,
            "largest_single_node_gpus": self.largest_single_node_gpus,
            "stranded_gpus": self.stranded_gpus,
            "fragmentation_index": round(self.index, 4),
            "per_leaf": [leaf.to_json() for leaf in self.per_leaf],
        }


def fragmentation(
    topo: PlacementTopology,
    states: Mapping[str, NodeState] | Iterable[NodeState],
    partition_nodes: Iterable[str] | None = None,
) -> Fragmentation:
    """Summarise free capacity over ``topo`` (restricted to ``partition_nodes`` when given).

    A *free node* is idle, healthy and has every GPU free (an exclusive job can take it). A *free leaf*
    has only free nodes. Free GPUs count idle and mixed healthy nodes; those on partly busy nodes are
    *stranded* for exclusive jobs. Nodes the topology lists but ``states`` lacks count as busy.

    **Fragmentation index** ``F = 1 - sum_l(f_l * f_l / S_l) / sum_l(f_l)`` where ``f_l`` is the free
    nodes and ``S_l`` the size of leaf ``l``. ``f_l / S_l`` is how free a free node's leaf is, so
    ``1 - F`` is that share averaged over free nodes: ``F = 0`` when all free nodes sit in whole free
    leaves (a leaf-sized job starts without crossing a switch), and ``F`` approaches ``1 - 1/S`` when
    free nodes are scattered one per leaf. ``F = 0`` when nothing is free. It measures placement, not
    load: an almost full cluster can score 0 if what is free is packed. A drained node keeps its leaf
    from ever being whole, which is correct for big jobs.
    """
    if partition_nodes is not None:
        topo = topo.restrict(partition_nodes)
    by_name = states if isinstance(states, Mapping) else {s.name: s for s in states}
    per_leaf: list[LeafUsage] = []
    largest_node_gpus = 0
    stranded = 0
    for name, members in zip(topo.leaf_names, topo.leaf_nodes, strict=True):
        free_nodes = free_gpus = total_gpus = 0
        for host in members:
            s = by_name.get(host)
            if s is None:
                continue
            total_gpus += s.total_gpus
            if not s.usable:
                continue
            free_gpus += s.free_gpus
            largest_node_gpus = max(largest_node_gpus, s.free_gpus)
            if s.whole_free:
                free_nodes += 1
            else:
                stranded += s.free_gpus
        per_leaf.append(LeafUsage(name, len(members), free_nodes, free_gpus, total_gpus))

    free_total = sum(leaf.free_nodes for leaf in per_leaf)
    by_root: dict[str, int] = {}
    for root, leaf in zip(topo.leaf_root, per_leaf, strict=True):
        by_root[root] = by_root.get(root, 0) + leaf.free_nodes
    weighted = sum(leaf.free_nodes * leaf.free_nodes / leaf.nodes for leaf in per_leaf)
    return Fragmentation(
        unit=topo.unit,
        nodes=sum(leaf.nodes for leaf in per_leaf),
        gpus=sum(leaf.total_gpus for leaf in per_leaf),
        free_gpus=sum(leaf.free_gpus for leaf in per_leaf),
        free_nodes=free_total,
        leaves=len(per_leaf),
        free_leaves=sum(1 for leaf in per_leaf if leaf.whole),
        largest_job_one_leaf=max((leaf.free_nodes for leaf in per_leaf), default=0),
        largest_job_anywhere=max(by_root.values(), default=0),
        largest_single_node_gpus=largest_node_gpus,
        stranded_gpus=stranded,
        index=(1.0 - weighted / free_total) if free_total else 0.0,
        per_leaf=tuple(per_leaf),
    )
