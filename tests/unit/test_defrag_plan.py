"""The defragmentation plan: exact on every instance of a brute-force property test (as placement's span is)."""

from __future__ import annotations

from itertools import combinations

from hypothesis import given, settings
from hypothesis import strategies as st

from slurmkit.defrag.plan import RunningJob, Target, _destinations, _serves, plan_defrag, plan_reservation
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


# ---------------------------------------------------------------------------------------------- planning with ends


def test_reservation_waits_for_the_unmovable_job_that_ends_first() -> None:
    # leaf1: a big job (not movable) ends at 900; leaf2: one ending at 300 plus a movable one running long
    t = topo([["n1", "n2"], ["n3", "n4"]])
    jobs = [RunningJob("10", {"n1": 8}, False, 0.0), RunningJob("11", {"n3": 8}, False, 0.0),
            RunningJob("12", {"n4": 8}, True, 40.0), RunningJob("13", {"n2": 8}, True, 10.0)]
    ends = {"10": 900.0, "11": 300.0, "12": 5000.0, "13": 5000.0}
    states = states_for(["n1", "n2", "n3", "n4"], jobs)
    assert plan_defrag(t, states, jobs, Target(2, 8)).plan is None  # moves alone free no leaf now
    h = plan_reservation(t, states, jobs, ends, Target(2, 8), now=100.0)
    assert h is not None and (h.leaf, h.nodes, h.start) == ("leaf2", ("n3", "n4"), 300.0)
    assert h.waits_for == ("11",) and h.moves == ("12",) and h.cost == 40.0
    # a job ending before the start needs no move; beyond the horizon nothing is reserved
    ends["12"] = 250.0
    h = plan_reservation(t, states, jobs, ends, Target(2, 8), now=100.0)
    assert h is not None and h.moves == () and h.cost == 0.0
    assert plan_reservation(t, states, jobs, ends, Target(2, 8), now=100.0, horizon_s=100.0) is None
    # an unmovable job without an end time (UNLIMITED) never clears its node; the move cap skips a leaf
    ends.pop("11")
    h = plan_reservation(t, states, jobs, ends, Target(2, 8), now=100.0)
    assert h is not None and (h.leaf, h.start, h.moves) == ("leaf1", 900.0, ("13",))
    assert plan_reservation(t, states, jobs, ends, Target(2, 8), now=100.0, max_moves=0) is None


def _brute_start(t: PlacementTopology, states: dict[str, NodeState], jobs: list[RunningJob],
                 ends: dict[str, float], target: Target, now: float, mf: dict[str, float]) -> float | None:
    """Every candidate time and every node subset of every leaf: the earliest time some leaf has ``target.nodes``
    nodes that serve once the movable jobs are gone and the others have ended or may move by then."""
    inf = float("inf")
    times = sorted({now} | {max(now, e) for e in [*ends.values(), *mf.values()]})
    for tm in times:
        for members in t.leaf_nodes:
            for chosen in combinations(members, target.nodes):
                ok = True
                for n in chosen:
                    left = [j for j in jobs if n in j.gpus and not j.movable and ends.get(j.job_id, inf) > tm
                            and mf.get(j.job_id, inf) > tm]
                    if not _serves(states[n], sum(j.gpus[n] for j in left), len(left), target):
                        ok = False
                        break
                if ok:
                    return tm
    return None


@settings(max_examples=400, deadline=None)
@given(instances(), st.lists(st.one_of(st.none(), st.integers(0, 50)), min_size=6, max_size=6),
       st.lists(st.one_of(st.none(), st.integers(0, 50)), min_size=6, max_size=6))
def test_the_reservation_start_is_exact_against_brute_force(inst, end_draws, mf_draws) -> None:  # type: ignore[no-untyped-def]
    t, states, jobs, target = inst
    now = 10.0
    ends = {j.job_id: float(e) for j, e in zip(jobs, end_draws, strict=False) if e is not None}  # None: no time limit
    # a job that may not move now may move from then on (a protected one); ignored for movable jobs
    mf = {j.job_id: float(m) for j, m in zip(jobs, mf_draws, strict=False) if m is not None and not j.movable}
    h = plan_reservation(t, states, jobs, ends, target, now, movable_from=mf)
    want = _brute_start(t, states, jobs, ends, target, now, mf)
    assert (h.start if h is not None else None) == want
    if h is not None:  # the nodes it holds serve at the start, and it moves only movable jobs still there then
        assert len(h.nodes) == target.nodes and len(set(h.nodes)) == target.nodes
        by_id = {j.job_id: j for j in jobs}
        inf = float("inf")
        assert all((by_id[m].movable or mf.get(m, inf) <= h.start) and ends.get(m, inf) > h.start for m in h.moves)
        for n in h.nodes:
            left = [j for j in jobs if n in j.gpus and j.job_id not in h.moves and ends.get(j.job_id, inf) > h.start
                    and not (j.movable or mf.get(j.job_id, inf) <= h.start)]
            assert _serves(states[n], sum(j.gpus[n] for j in left), len(left), target)


def test_defrag_plan_cli_offers_a_hold_only_when_no_move_set_exists() -> None:
    from slurmkit.cli.defrag import _hold
    from slurmkit.defrag.plan import Verdict

    t = topo([["n1", "n2"], ["n3", "n4"]])
    jobs = [RunningJob("10", {"n1": 8}, False, 0.0), RunningJob("11", {"n3": 8}, False, 0.0)]
    states = states_for(["n1", "n2", "n3", "n4"], jobs)
    details = ("JobId=10 JobState=RUNNING EndTime=2999-01-01T10:00:00\n"
               "JobId=11 JobState=RUNNING EndTime=2999-01-01T02:00:00\n")
    v = plan_defrag(t, states, jobs, Target(2, 8))
    h = _hold(v, t, states, jobs, Target(2, 8), details)
    assert h is not None and h.leaf == "leaf2" and h.waits_for == ("11",)
    assert _hold(Verdict(False, "not blocked"), t, states, jobs, Target(2, 8), details) is None
