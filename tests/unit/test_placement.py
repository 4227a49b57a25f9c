"""The placement engine: topology building, policy order, exclusions, determinism, bad input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmkit.backend.parse import SwitchRecord as Rec  # what `scontrol show topology` parses into
from slurmkit.errors import UsageError
from slurmkit.model.cluster import Block, Switch, Topology
from slurmkit.placement import (
    NodeState,
    PlacementTopology,
    Request,
    eligible_by_leaf,
    ideal_span,
    optimal_span,
    place,
    plan,
)


def lab() -> PlacementTopology:
    """The lab: leaf1 node[1-4], leaf2 node[5-8], one spine."""
    return PlacementTopology.from_model(
        Topology(
            switches=(
                Switch("leaf1", nodes="node[1-4]"),
                Switch("leaf2", nodes="node[5-8]"),
                Switch("spine", switches="leaf[1-2]"),
            )
        )
    )


def three_level(leaves_per_spine: int = 2, spines: int = 2, per_leaf: int = 4) -> PlacementTopology:
    """leaf0.. under spine0.. under core, nodes n0.. numbered leaf-major."""
    recs = []
    leaf = 0
    for s in range(spines):
        names = []
        for _ in range(leaves_per_spine):
            nodes = [f"n{leaf * per_leaf + k}" for k in range(per_leaf)]
            recs.append(Rec(f"leaf{leaf}", 0, nodes, []))
            names.append(f"leaf{leaf}")
            leaf += 1
        recs.append(Rec(f"spine{s}", 1, [], names))
    recs.append(Rec("core", 2, [], [f"spine{s}" for s in range(spines)]))
    return PlacementTopology.from_records(recs)


def states(topo: PlacementTopology, busy=(), gpus: int = 8, **overrides: str) -> list[NodeState]:
    out = []
    for name in topo.nodes:
        if name in overrides:
            out.append(NodeState(name, overrides[name], 0 if overrides[name] != "idle" else gpus, gpus))
        elif name in busy:
            out.append(NodeState(name, "allocated", 0, gpus))
        else:
            out.append(NodeState(name, "idle", gpus, gpus))
    return out


# ---------------------------------------------------------------------- topology


def test_records_and_model_build_the_same_tree():
    recs = [
        Rec("leaf1", 0, ["node1", "node2", "node3", "node4"], []),
        Rec("leaf2", 0, ["node5", "node6", "node7", "node8"], []),
        Rec("spine", 1, [f"node{i}" for i in range(1, 9)], ["leaf1", "leaf2"]),
    ]
    assert PlacementTopology.from_records(recs) == lab()


def test_records_from_the_real_parser():
    from slurmkit.backend.parse import parse_topology

    text = (
        "SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=node[1-4]\n"
        "SwitchName=leaf2 Level=0 LinkSpeed=1 Nodes=node[5-8]\n"
        "SwitchName=spine Level=1 LinkSpeed=1 Nodes=node[1-8] Switches=leaf[1-2]\n"
    )
    assert PlacementTopology.from_records(parse_topology(text)) == lab()


def test_multi_level_levels_and_ancestors():
    t = three_level()
    assert t.levels == (1, 2)
    assert t.ancestors(3) == (t.switch_names.index("spine1"), t.switch_names.index("core"))
    assert set(t.leaf_root) == {"core"}


def test_model_levels_are_computed_bottom_up():
    t = PlacementTopology.from_model(
        Topology(
            switches=(
                Switch("l1", nodes="a[1-2]"),
                Switch("l2", nodes="a[3-4]"),
                Switch("l3", nodes="a[5-6]"),
                Switch("s1", switches="l[1-2]"),
                Switch("top", switches="s1,l3"),
            )
        )
    )
    assert dict(zip(t.switch_names, t.switch_levels, strict=True)) == {"s1": 1, "top": 2}


def test_unknown_node_is_named():
    recs = [Rec("leaf1", 0, ["node1", "ghost1", "ghost2"], [])]
    with pytest.raises(UsageError, match=r"leaf1.*unknown node\(s\) ghost\[1-2\]"):
        PlacementTopology.from_records(recs, known_nodes=["node1"])


def test_node_in_two_leaves_is_an_error():
    recs = [Rec("leaf1", 0, ["node1", "node2"], []), Rec("leaf2", 0, ["node2", "node3"], [])]
    with pytest.raises(UsageError, match="'node2' is in both leaf switch 'leaf1' and 'leaf2'"):
        PlacementTopology.from_records(recs)


@pytest.mark.parametrize(
    ("recs", "message"),
    [
        ([Rec("l1", 0, ["a"], []), Rec("s", 1, [], ["l1", "nope"])], "unknown switch 'nope'"),
        ([Rec("l1", 0, ["a"], []), Rec("s", 1, [], ["l1"]), Rec("t", 1, [], ["l1"])], "two parents"),
        ([Rec("l1", 0, ["a"], []), Rec("l1", 0, ["b"], [])], "duplicate leaf switch name"),
        ([Rec("l1", 0, ["a"], []), Rec("s", 1, [], ["l1"]), Rec("t", 1, [], ["s"])], "Level=1 but a child"),
        ([Rec("l1", 2, ["a"], [])], "no child switches but Level=2"),
        ([Rec("s", 1, [], ["t"]), Rec("t", 1, [], ["s"]), Rec("l", 0, ["a"], [])], "cycle"),
        ([], "no leaf switches"),
    ],
)
def test_bad_topologies(recs, message):
    with pytest.raises(UsageError, match=message):
        PlacementTopology.from_records(recs)


def test_blocks_aggregate_by_block_sizes():
    blocks = tuple(Block(f"b{i}", f"n[{i * 4}-{i * 4 + 3}]") for i in range(6))
    t = PlacementTopology.from_model(Topology(blocks=blocks, block_sizes=(4, 8, 16)))
    assert t.kind == "block" and t.unit == "block"
    assert list(zip(t.switch_names, t.switch_levels, strict=True)) == [
        ("b[0-1]", 1), ("b[2-3]", 1), ("b[4-5]", 1), ("b[0-3]", 2), ("b[4-5]", 2), ("fabric", 3)
    ]
    # a 6-node job crosses one pair of blocks (level 1), not the fabric; of three equal pairs it takes
    # the one whose parent aggregate is smallest (b[4-5] holds 8 nodes, b[0-3] 16): best fit upward
    p = place(t, states(t), Request(6, 8))
    assert (p.level, p.leaves, p.switch) == (1, ("b4", "b5"), "b[4-5]")
    # 12 nodes need the 16-node aggregate b[0-3]
    p = place(t, states(t), Request(12, 8))
    assert (p.level, len(p.leaves)) == (2, 3)
    assert p.summary() == "12 nodes on b[0-2] under b[0-3] (3 blocks, crosses level 2); 3 blocks stay whole"


def test_block_sizes_must_be_power_of_two_multiples():
    blocks = (Block("b0", "n[0-3]"), Block("b1", "n[4-7]"))
    with pytest.raises(UsageError, match="power-of-two multiples"):
        PlacementTopology.from_model(Topology(blocks=blocks, block_sizes=(4, 12)))


def test_restrict_to_a_partition():
    t = three_level().restrict(["n0", "n1", "n9"])
    assert t.leaf_names == ("leaf0", "leaf2")
    assert t.switch_names == ("spine0", "spine1", "core")
    assert place(t, states(t), Request(3, 8)).level == 2


def test_flat_topology_is_one_pseudo_leaf():
    t = PlacementTopology.flat(["gpu2", "gpu1", "gpu10"])
    assert t.nodes == ("gpu1", "gpu2", "gpu10")
    assert place(t, states(t), Request(2, 8)).nodes == ("gpu1", "gpu2")


# ---------------------------------------------------------------------- policy


def test_lab_case_from_slurm_lab_md_stays_in_one_leaf():
    """node2 and node7 busy, -N3 --exclusive: Slurm without topology spans node[3-5]; we stay in a leaf."""
    t = lab()
    p = place(t, states(t, busy={"node2", "node7"}), Request(3, 8))
    assert p.nodes == ("node1", "node3", "node4")
    assert p.summary() == "3 nodes on leaf1 (1 leaf); 0 leaves stay whole"


def test_lab_four_node_job_goes_to_the_free_leaf():
    t = lab()
    p = place(t, states(t, busy={"node3"}), Request(4, 8))
    assert p.nodelist == "node[5-8]" and p.level == 0


def test_best_fit_prefers_a_partly_used_leaf():
    t = three_level()  # leaf0..3, 4 nodes each
    st_ = states(t, busy={"n4"})  # leaf1 has 3 free, others 4
    p = place(t, st_, Request(2, 8))
    assert p.leaves == ("leaf1",)
    assert p.summary() == "2 nodes on leaf1 (1 leaf); 3 leaves stay whole"


def test_lowest_level_beats_fewest_leaves():
    # spine0: leaf0 has 3 free, leaf1 has 3 free -> 6 under one spine with 2 leaves... make spine0 need 3 leaves
    t = three_level(leaves_per_spine=3, spines=2, per_leaf=4)
    busy = {"n0", "n1", "n4", "n5", "n8", "n9"}  # spine0 leaves have 2 free each -> 6 free, needs 3 leaves
    busy |= {f"n{k}" for k in range(12, 24)} - {"n12", "n13", "n14", "n16", "n17", "n18"}  # spine1: 3+3+0
    p = place(t, states(t, busy=busy), Request(6, 8))
    # spine1 can do it in 2 leaves and spine0 in 3, both at level 1: fewest leaves wins at the same level
    assert (p.level, len(p.leaves), p.switch) == (1, 2, "spine1")
    # with spine1 fully busy, 6 nodes must take 3 leaves under spine0 rather than 2 leaves across the core
    busy2 = busy | {f"n{k}" for k in range(12, 24)}
    busy2 -= {"n20", "n21", "n22", "n23"}  # one whole leaf under spine1 (4 free)
    p = place(t, states(t, busy=busy2), Request(6, 8))
    assert (p.level, len(p.leaves), p.switch) == (1, 3, "spine0")


def test_fewest_leaves_then_largest_whole_and_remainder_best_fit():
    # one spine with leaves of 8: free 8, 8, 5, 5 -> a 10-node job takes one 8 whole and 2 of a 5
    recs = [Rec(f"l{i}", 0, [f"n{i * 8 + k}" for k in range(8)], []) for i in range(4)]
    recs.append(Rec("s", 1, [], [f"l{i}" for i in range(4)]))
    t = PlacementTopology.from_records(recs)
    busy = {"n16", "n17", "n18", "n24", "n25", "n26"}
    p = place(t, states(t, busy=busy), Request(10, 8))
    assert p.leaves == ("l0", "l2") and p.whole_leaves_left == 1
    assert p.nodelist == "n[0-7,19-20]"
    assert p.score == (1, 2, 3)


def test_multi_leaf_fill_takes_the_remainder_from_the_tightest_fragment():
    recs = [Rec(f"l{i}", 0, [f"n{i * 8 + k}" for k in range(8)], []) for i in range(3)]
    recs.append(Rec("s", 1, [], ["l0", "l1", "l2"]))
    t = PlacementTopology.from_records(recs)
    p = plan(t, [8, 3, 8], 10)
    assert p is not None and p.takes == ((0, 8), (1, 2))
    p = plan(t, [6, 7, 7], 20)
    assert p is not None and p.takes == ((0, 6), (1, 7), (2, 7))


def test_unusable_nodes_are_never_chosen():
    t = lab()
    st_ = states(t, node1="draining", node2="drained", node3="down")
    st_[3] = NodeState("node4", "idle", 8, 8, healthy=False)
    p = place(t, st_, Request(4, 8))
    assert p.nodelist == "node[5-8]"
    assert place(t, st_, Request(5, 8)) is None


def test_shared_request_packs_partly_used_nodes():
    t = lab()
    st_ = [
        NodeState("node1", "mixed", 2, 8),
        NodeState("node2", "mixed", 6, 8),
        NodeState("node3", "idle", 8, 8),
        NodeState("node4", "mixed", 1, 8),
    ] + [NodeState(f"node{i}", "allocated", 0, 8) for i in range(5, 9)]
    req = Request(2, gpus_per_node=2, exclusive=False)
    assert eligible_by_leaf(t, st_, req)[0] == ["node1", "node2", "node3"]
    assert place(t, st_, req).nodes == ("node1", "node2")
    assert place(t, st_, Request(1, 8, exclusive=True)).nodes == ("node3",)


def test_deterministic_for_any_state_order():
    t = three_level(leaves_per_spine=3, spines=3, per_leaf=4)
    base = states(t, busy={"n1", "n6", "n7", "n13", "n30"})
    first = place(t, base, Request(7, 8))
    for seed in range(5):
        shuffled = list(base)
        __import__("random").Random(seed).shuffle(shuffled)
        assert place(t, shuffled, Request(7, 8)) == first
        assert place(t, {s.name: s for s in shuffled}, Request(7, 8)) == first


def test_disconnected_fabrics_never_span():
    recs = [Rec("a", 0, ["x1", "x2"], []), Rec("b", 0, ["y1", "y2"], [])]
    t = PlacementTopology.from_records(recs)
    assert place(t, states(t), Request(2, 8)).leaves == ("a",)
    with pytest.raises(UsageError, match="do not fit under any one switch"):
        place(t, states(t), Request(3, 8))


def test_request_larger_than_topology():
    with pytest.raises(UsageError, match="9 nodes, but the topology has only 8"):
        place(lab(), states(lab()), Request(9, 8))


def test_not_now_is_none():
    t = lab()
    assert place(t, states(t, busy={"node1"}), Request(8, 8)) is None


def test_nodes_missing_from_states_are_unavailable():
    t = lab()
    some = [s for s in states(t) if s.name != "node5"]
    assert place(t, some, Request(4, 8)).leaves == ("leaf1",)
    assert place(t, some, Request(8, 8)) is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"nodes": 0}, "nodes must be at least 1"),
        ({"nodes": 1, "gpus_per_node": -1}, "gpus_per_node must not be negative"),
    ],
)
def test_bad_requests(kwargs, message):
    with pytest.raises(UsageError, match=message):
        Request(**kwargs)


def test_bad_node_states():
    with pytest.raises(UsageError, match="unknown state 'sleeping'"):
        NodeState("n1", "sleeping", 0, 8)
    with pytest.raises(UsageError, match="free_gpus=9"):
        NodeState("n1", "idle", 9, 8)
    assert NodeState("n1", "drng", 0, 8).state == "draining"


def test_ideal_span():
    t = three_level()
    assert ideal_span(t, 4) == (0, 1)
    assert ideal_span(t, 5) == (1, 2)
    assert ideal_span(t, 9) == (2, 3)
    assert ideal_span(t, 17) is None


def test_summary_and_json_for_a_spanning_job():
    t = three_level()
    # spine0 (7 free) is the tighter fit, so spine1 keeps both of its leaves whole
    p = place(t, states(t, busy={"n0"}), Request(6, 8))
    assert p.summary() == "6 nodes on leaf[0-1] under spine0 (2 leaves, crosses level 1); 2 leaves stay whole"
    j = p.to_json()
    assert j["nodelist"] == "n[1-2,4-7]" and j["level"] == 1 and j["score"] == [1, 2, 1]
    assert j["summary"] == p.summary()


# ---------------------------------------------------------------------- optimality (hypothesis)


@st.composite
def instances(draw):
    """A random tree of up to 10 leaves (1-3 levels, leaves of 1-5 nodes), eligible counts and a size."""
    nleaves = draw(st.integers(1, 10))
    sizes = draw(st.lists(st.integers(1, 5), min_size=nleaves, max_size=nleaves))
    recs = [Rec(f"l{i}", 0, [f"l{i}n{k}" for k in range(s)], []) for i, s in enumerate(sizes)]
    groups = draw(st.integers(1, nleaves))
    spine_of = [min(i * groups // nleaves, groups - 1) for i in range(nleaves)]
    spines = []
    for g in range(groups):
        kids = [f"l{i}" for i in range(nleaves) if spine_of[i] == g]
        spines.append(Rec(f"s{g}", 1, [], kids))
    recs += spines
    if draw(st.booleans()) and groups > 1:
        recs.append(Rec("core", 2, [], [s.name for s in spines]))
    t = PlacementTopology.from_records(recs)
    counts = [draw(st.integers(0, s)) for s in sizes]
    n = draw(st.integers(1, max(1, sum(sizes))))
    return t, counts, n


@settings(max_examples=400, deadline=None)
@given(instances())
def test_span_equals_exhaustive_optimum(inst):
    t, counts, n = inst
    got = plan(t, counts, n)
    best = optimal_span(t, counts, n)
    assert (None if got is None else (got.level, got.leaves)) == best
    if got is not None:
        assert sum(k for _, k in got.takes) == n
        assert all(0 < k <= counts[leaf] for leaf, k in got.takes)
