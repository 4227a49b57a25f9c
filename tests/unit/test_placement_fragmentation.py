"""fragmentation(): the numbers of `slurmkit report fragmentation` on small hand-built clusters."""

from __future__ import annotations

import pytest

from slurmkit.model.cluster import Switch, Topology
from slurmkit.placement import NodeState, PlacementTopology, fragmentation
from tests.unit.test_placement import lab as two_by_four  # leaf1 node[1-4], leaf2 node[5-8], spine


def idle(name: str) -> NodeState:
    return NodeState(name, "idle", 8, 8)


def test_empty_cluster_is_not_fragmented():
    t = two_by_four()
    f = fragmentation(t, [idle(n) for n in t.nodes])
    assert (f.free_gpus, f.free_nodes, f.free_leaves) == (64, 8, 2)
    assert (f.largest_job_one_leaf, f.largest_job_anywhere, f.largest_single_node_gpus) == (4, 8, 8)
    assert f.stranded_gpus == 0 and f.index == 0.0


def test_scattered_free_nodes():
    """One free node per leaf: F = 1 - (1*1/4 + 1*1/4) / 2 = 0.75."""
    t = two_by_four()
    st = [idle("node1"), idle("node5")] + [
        NodeState(n, "allocated", 0, 8) for n in t.nodes if n not in ("node1", "node5")
    ]
    f = fragmentation(t, st)
    assert (f.free_nodes, f.free_leaves, f.largest_job_one_leaf, f.largest_job_anywhere) == (2, 0, 1, 2)
    assert f.index == pytest.approx(0.75)


def test_mixed_drained_and_unhealthy_nodes():
    t = two_by_four()
    st = [
        NodeState("node1", "mixed", 3, 8),  # 3 stranded GPUs
        NodeState("node2", "drained", 8, 8),  # counts for nothing free
        NodeState("node3", "idle", 8, 8, healthy=False),
        idle("node4"),
    ] + [idle(f"node{i}") for i in range(5, 9)]
    f = fragmentation(t, st)
    assert f.free_gpus == 3 + 8 + 32
    assert f.stranded_gpus == 3
    assert (f.free_nodes, f.free_leaves, f.largest_job_one_leaf, f.largest_job_anywhere) == (5, 1, 4, 5)
    # F = 1 - (1*1/4 + 4*4/4) / 5 = 1 - 4.25/5
    assert f.index == pytest.approx(0.15)
    assert [leaf.free_nodes for leaf in f.per_leaf] == [1, 4]


def test_partition_restricts_leaves_and_sizes():
    t = two_by_four()
    st = [idle(n) for n in t.nodes]
    f = fragmentation(t, st, partition_nodes=["node1", "node2", "node5"])
    assert (f.nodes, f.leaves, f.free_leaves, f.largest_job_one_leaf, f.largest_job_anywhere) == (3, 2, 2, 2, 3)
    assert f.index == 0.0


def test_disconnected_fabrics_limit_the_largest_job():
    t = PlacementTopology.from_model(
        Topology(switches=(Switch("a", nodes="x[1-2]"), Switch("b", nodes="y[1-3]")))
    )
    f = fragmentation(t, [idle(n) for n in t.nodes])
    assert f.largest_job_anywhere == 3


def test_nothing_free_and_json():
    t = two_by_four()
    f = fragmentation(t, [NodeState(n, "allocated", 0, 8) for n in t.nodes])
    j = f.to_json()
    assert j["free_gpus"] == 0 and j["fragmentation_index"] == 0.0 and j["largest_job_anywhere_nodes"] == 0
    assert j["per_leaf"][0] == {"name": "leaf1", "nodes": 4, "free_nodes": 0, "free_gpus": 0, "total_gpus": 32}
    assert j["unit"] == "leaf" and j["gpus"] == 64


def test_missing_states_count_as_busy():
    t = two_by_four()
    f = fragmentation(t, [idle("node1")])
    assert (f.free_nodes, f.gpus, f.free_leaves) == (1, 8, 0)
