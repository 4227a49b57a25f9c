"""Topology-aware, fragmentation-aware node selection (pure: no Slurm calls, no printing).

Typical use (gpusub)::

    topo = PlacementTopology.from_records(parse_topology(text), known_nodes=names)
    p = place(topo, node_states, Request(nodes=4, gpus_per_node=8, exclusive=True))
    if p is not None:
        print(p.summary())          # "4 nodes on leaf2 (1 leaf); 3 leaves stay whole"
"""

from slurmkit.placement.engine import (
    STATES,
    NodeState,
    Placement,
    Plan,
    Request,
    eligible_by_leaf,
    ideal_span,
    place,
    plan,
)
from slurmkit.placement.exact import optimal_span
from slurmkit.placement.fragmentation import Fragmentation, LeafUsage, fragmentation
from slurmkit.placement.state import NodeRecordLike, engine_state, node_state, node_states, partition_nodes
from slurmkit.placement.topology import PlacementTopology, SwitchRecordLike

__all__ = [
    "STATES",
    "Fragmentation",
    "LeafUsage",
    "NodeRecordLike",
    "NodeState",
    "Placement",
    "PlacementTopology",
    "Plan",
    "Request",
    "SwitchRecordLike",
    "eligible_by_leaf",
    "engine_state",
    "fragmentation",
    "ideal_span",
    "node_state",
    "node_states",
    "optimal_span",
    "partition_nodes",
    "place",
    "plan",
]
