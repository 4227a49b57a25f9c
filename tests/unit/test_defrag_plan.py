"""The defragmentation plan: exact on every instance of a brute-force property test (as placement's span is)."""

from __future__ import annotations

from itertools import combinations

from hypothesis import given, settings
from hypothesis import strategies as st

from slurmkit.defrag.plan import RunningJob, Target, _destinations, _serves, plan_defrag
from slurmkit.placement.engine import NodeState
from slurmkit.placement.topology import PlacementTopology


def topo(leaves: list[list[str]]) -> PlacementTopology:
    return PlacementTopology(kind="tree", leaf_names=tuple(f"leaf{i + 1}" for i in range(len(leaves))),
                             leaf_nodes=tuple(tuple(x) for x in leaves))


def states_for(nodes: list[str], jobs: list[RunningJob], total: int = 8) -> dict[str, NodeState]:
    used = {n: sum(j.gpus.get(n, 0) for j in jobs) for n in nodes}
    return {n: NodeState(n, "idle" if used[n] == 0 and not any(n in j.gpus for j in jobs) else "mixed",
                         total - used[n], total) for n in nodes}


def test_two_small_jobs_on_two_leaves_one_moves() -> None:
    t = topo([["n1", "n2"], ["n3", "n4"]])
    a = RunningJob("10", {"n1": 8}, movable=True, cost=100.0)
    b = RunningJob("11", {"n3": 8}, movable=True, cost=50.0)
    nodes = ["n1", "n2", "n3", "n4"]
    v = plan_defrag(t, states_for(nodes, [a, b]), [a, b], Target(2, 8))
    assert v.blocked and "2 node(s) free in all" in v.reason
    assert v.plan is not None and v.plan.job_ids == ("11",) and v.plan.leaf == "leaf2"
    assert v.plan.nodes == ("n3", "n4") and v.plan.moves[0].goes_to in (("n1",), ("n2",))
    assert v.plan.moves[0].goes_to == ("n2",)  # n1 is still busy with job 10


def test_not_blocked_and_unmovable() -> None:
    t = topo([["n1", "n2"], ["n3", "n4"]])
    a = RunningJob("10", {"n1": 8}, movable=False, cost=0.0, why_not="no checkpoint")
    assert not plan_defrag(t, states_for(["n1", "n2", "n3", "n4"], [a]), [a], Target(2, 8)).blocked
    b = RunningJob("11", {"n3": 8}, movable=False, cost=0.0)
    v = plan_defrag(t, states_for(["n1", "n2", "n3", "n4"], [a, b]), [a, b], Target(2, 8))
    assert v.blocked and v.plan is None and "not movable: 10, 11" in v.reason


def test_a_move_needs_somewhere_to_go() -> None:
    t = topo([["n1", "n2"], ["n3", "n4"]])
    jobs = [RunningJob("10", {"n1": 8}, True, 10.0), RunningJob("11", {"n3": 8}, True, 5.0),
            RunningJob("12", {"n4": 8}, False, 0.0)]
    v = plan_defrag(t, states_for(["n1", "n2", "n3", "n4"], jobs), jobs, Target(2, 8))
    # leaf2 cannot free both nodes (12 stays); moving 10 frees leaf1 but 10 has nowhere to go (n2 is the target's)
    assert v.blocked and v.plan is None


def _brute(t: PlacementTopology, states: dict[str, NodeState], jobs: list[RunningJob], target: Target):  # type: ignore[no-untyped-def]
    jobs_on: dict[str, list[RunningJob]] = {}
    for j in jobs:
        for n in j.gpus:
            jobs_on.setdefault(n, []).append(j)
    best = None
    for members in t.leaf_nodes:
        # the model: the jobs moved run on the target's leaf (never elsewhere, to make room for the moved ones)
        movable = [j for j in jobs if j.movable and set(j.gpus) & set(members)]
        for r in range(len(movable) + 1):
            for combo in combinations(movable, r):
                ids = frozenset(j.job_id for j in combo)
                serving = [n for n in members if _serves(
                    states[n], sum(j.gpus.get(n, 0) for j in jobs_on.get(n, []) if j.job_id not in ids),
                    len([j for j in jobs_on.get(n, []) if j.job_id not in ids]), target)]
                if len(serving) < target.nodes:
                    continue
                serving.sort(key=lambda n: (not any(j.job_id in ids for j in jobs_on.get(n, [])),
                                            members.index(n)))
                chosen = set(serving[:target.nodes])
                if _destinations(combo, states, chosen, jobs_on, ids) is None:
                    continue
                key = (sum(j.cost for j in combo), len(ids))
                if best is None or key < best:
                    best = key
    return best


@st.composite
def instances(draw):  # type: ignore[no-untyped-def]
    nleaves = draw(st.integers(1, 3))
    leaves = [[f"n{i}{k}" for k in range(draw(st.integers(1, 3)))] for i in range(nleaves)]
    leaves.append([f"spare{k}" for k in range(draw(st.integers(0, 2)))] or ["spare0"])
    nodes = [n for leaf in leaves for n in leaf]
    jobs = []
    for i in range(draw(st.integers(0, 6))):
        on = draw(st.lists(st.sampled_from(nodes), min_size=1, max_size=2, unique=True))
        gp = {n: draw(st.integers(1, 4)) for n in on}
        jobs.append(RunningJob(str(100 + i), gp, draw(st.booleans()), float(draw(st.integers(1, 50)))))
    # a node holds at most 8 GPUs: drop jobs that would overfill
    used: dict[str, int] = {}
    kept = []
    for j in jobs:
        if all(used.get(n, 0) + g <= 8 for n, g in j.gpus.items()):
            for n, g in j.gpus.items():
                used[n] = used.get(n, 0) + g
            kept.append(j)
    target = Target(draw(st.integers(1, 3)), draw(st.sampled_from([4, 8])), exclusive=draw(st.booleans()))
    return topo(leaves), states_for(nodes, kept), kept, target


@settings(max_examples=400, deadline=None)
@given(instances())
def test_the_plan_is_exact_against_brute_force(inst) -> None:  # type: ignore[no-untyped-def]
    t, states, jobs, target = inst
    v = plan_defrag(t, states, jobs, target)
    if not v.blocked:
        return
    best = _brute(t, states, jobs, target)
    if v.plan is None:
        assert best is None, (best, v.reason)
    else:
        assert best is not None
        assert (v.plan.cost, len(v.plan.moves)) == best
