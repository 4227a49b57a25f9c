"""Which running jobs to move so that a job blocked by fragmentation can start on one leaf (pure).

The model (issue 26): a *target* asks for ``nodes`` nodes on one leaf (or block) with ``gpus_per_node`` GPUs each,
whole nodes when ``exclusive``. A running job may be *moved* (requeued through the checkpoint-keeping path, where it
resumes from its last checkpoint) only when it is ``movable``: it checkpoints and its QOS/partition allows requeue.
Moving it costs ``cost`` (GPU-seconds since its last checkpoint, which are lost, plus its restart time times its
GPUs) and frees every GPU it holds. A node serves the target once the jobs left on it leave enough GPUs (all of
them, and no job at all, for a whole-node target).

The plan is the leaf and the set of moved jobs of least total cost, ties to fewer moved jobs, then to the leaf
order. Exact for the model: within a leaf, the nodes fall into *components* (nodes linked by a job that runs on
both); for each component every subset of its movable jobs is tried (``MAX_COMPONENT_JOBS`` at most, else the
component's subsets are taken greedily, by cost per freed node, and the plan says so), which gives what each choice
frees at what cost; a knapsack over the components then finds the cheapest way to free ``nodes`` nodes. Each moved
job must be able to restart elsewhere now (first fit on what stays free outside the target's nodes), else that
choice is dropped and the next cheapest is taken: a move never leaves a job waiting for room that is not there.

Speed: one pass over the jobs to build components, then per leaf a knapsack of (components x nodes): a 16k-node
tree of 512 leaves is planned in tens of milliseconds (bench/defrag_bench.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations

from slurmkit.errors import UsageError
from slurmkit.placement.engine import NodeState
from slurmkit.placement.topology import PlacementTopology

MAX_COMPONENT_JOBS = 12  # 4,096 subsets per component: exact below, greedy above
WIDE_KEEP = 64  # move sets kept per count of freed nodes when the cheapest have a job with nowhere to go

Options = dict[int, list[tuple[float, int, frozenset[str]]]]  # freed nodes -> [(cost, moves, job ids)], cheapest first


@dataclass(frozen=True)
class RunningJob:
    job_id: str
    gpus: Mapping[str, int]  # node -> GPUs it holds there (0 for a CPU-only share: it still blocks exclusivity)
    movable: bool
    cost: float  # GPU-seconds lost by moving it (since its last checkpoint, plus restart)
    why_not: str = ""  # why it is not movable (for the report)
    checkpoint_age_s: float | None = None

    @property
    def total_gpus(self) -> int:
        return sum(self.gpus.values())


@dataclass(frozen=True)
class Target:
    nodes: int
    gpus_per_node: int
    exclusive: bool = True

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise UsageError(f"defrag: the target needs at least one node, got {self.nodes}")


@dataclass(frozen=True)
class Move:
    job_id: str
    cost: float
    frees: tuple[str, ...]  # the target's nodes it frees (in the chosen leaf)
    goes_to: tuple[str, ...]  # where it is expected to restart


@dataclass(frozen=True)
class DefragPlan:
    leaf: str
    nodes: tuple[str, ...]  # the target's nodes
    moves: tuple[Move, ...]
    cost: float
    exact: bool = True

    @property
    def job_ids(self) -> tuple[str, ...]:
        return tuple(m.job_id for m in self.moves)


@dataclass(frozen=True)
class Verdict:
    """Whether the target is blocked by fragmentation, and the plan that unblocks it (None: nothing to do / no
    plan)."""

    blocked: bool
    reason: str
    plan: DefragPlan | None = None
    notes: tuple[str, ...] = field(default=())


def _serves(node: NodeState, left_gpus: int, left_jobs: int, target: Target) -> bool:
    if not node.healthy or node.state in ("down", "drained", "draining"):
        return False
    if target.exclusive:
        return left_jobs == 0 and node.total_gpus >= target.gpus_per_node
    return node.total_gpus - left_gpus >= target.gpus_per_node


def _components(nodes: Sequence[str], jobs_on: Mapping[str, list[RunningJob]]) -> list[tuple[list[str], list[RunningJob]]]:
    """Nodes of one leaf grouped by the jobs that link them (union-find over shared jobs)."""
    parent = {n: n for n in nodes}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    job_nodes: dict[str, list[str]] = {}
    for n in nodes:
        for j in jobs_on.get(n, []):
            job_nodes.setdefault(j.job_id, []).append(n)
    for ns in job_nodes.values():
        for other in ns[1:]:
            a, b = find(ns[0]), find(other)
            if a != b:
                parent[b] = a
    groups: dict[str, list[str]] = {}
    for n in nodes:
        groups.setdefault(find(n), []).append(n)
    out = []
    for members in groups.values():
        seen: dict[str, RunningJob] = {}
        for n in members:
            for j in jobs_on.get(n, []):
                seen.setdefault(j.job_id, j)
        out.append((members, list(seen.values())))
    return out


def _options(members: list[str], jobs: list[RunningJob], states: Mapping[str, NodeState], target: Target,
             jobs_on: Mapping[str, list[RunningJob]]) -> tuple[Options, Options, bool]:
    """The ways to free nodes of one component: the cheapest way to free *at least* k nodes per k (a one-element
    list each), every way tried per number of nodes it frees (cheapest first: the runners-up when a cheaper move set
    has a job with nowhere to go), and whether it was exhaustive."""
    movable = [j for j in jobs if j.movable]
    exact = len(movable) <= MAX_COMPONENT_JOBS

    def freed(moved: frozenset[str]) -> int:
        k = 0
        for n in members:
            st = states.get(n)
            if st is None:
                continue
            left = [j for j in jobs_on.get(n, []) if j.job_id not in moved]
            if _serves(st, sum(j.gpus.get(n, 0) for j in left), len(left), target):
                k += 1
        return k

    every: Options = {}

    def offer(moved: frozenset[str], cost: float) -> None:
        k = freed(moved)
        if k or moved:  # a move that frees no node of the target can still make room for another's restart
            every.setdefault(k, []).append((cost, len(moved), moved))

    offer(frozenset(), 0.0)
    if exact:
        for r in range(1, len(movable) + 1):
            for combo in combinations(movable, r):
                offer(frozenset(j.job_id for j in combo), sum(j.cost for j in combo))
    else:  # greedy: add the job whose move frees the most per unit of cost, one at a time
        moved: set[str] = set()
        cost = 0.0
        left = list(movable)
        while left:
            base = freed(frozenset(moved))
            pick = min(left, key=lambda j: (j.cost / max(1, freed(frozenset(moved | {j.job_id})) - base + 1), j.job_id))
            left.remove(pick)
            moved.add(pick.job_id)
            cost += pick.cost
            offer(frozenset(moved), cost)
    for k in every:
        every[k].sort(key=lambda t: (t[0], t[1], sorted(t[2])))
    # the cheapest way to free *at least* k nodes
    out: Options = {}
    running: tuple[float, int, frozenset[str]] | None = None
    for k in sorted((k for k in every if k), reverse=True):
        if running is None or every[k][0][:2] < running[:2]:
            running = every[k][0]
        out[k] = [running]
    return out, every, exact


def _knapsack(options: list[Options], need: int, keep: int = 1) -> list[tuple[float, int, frozenset[str]]]:
    """The cheapest combinations (one option per component, "free nothing" always allowed) that free >= ``need``
    nodes, cheapest first. keep=1: the least (cost, moves), exact (a dynamic programme over freed-node counts with
    back-pointers); keep>1: up to ``keep`` per count, for when the cheapest has a moved job with nowhere to go."""
    if keep == 1:
        inf = (float("inf"), 0)
        best: list[tuple[float, int]] = [(0.0, 0)] + [inf] * need
        back: list[list[tuple[int, int] | None]] = []
        for opts in options:
            nxt = list(best)
            step: list[tuple[int, int] | None] = [None] * (need + 1)
            for k in range(need + 1):
                c0, m0 = best[k]
                if c0 == float("inf"):
                    continue
                for freed, alts in opts.items():
                    c, m, _ids = alts[0]
                    kk = min(need, k + freed)
                    cand = (c0 + c, m0 + m)
                    if cand < nxt[kk]:
                        nxt[kk] = cand
                        step[kk] = (k, freed)
            best = nxt
            back.append(step)
        if best[need][0] == float("inf"):
            return []
        ids: set[str] = set()
        k = need
        for ci in range(len(options) - 1, -1, -1):
            st = back[ci][k]
            if st is not None:
                k, freed = st
                ids |= options[ci][freed][0][2]
        return [(best[need][0], best[need][1], frozenset(ids))]
    Entry = tuple[float, int, frozenset[str]]
    dp: dict[int, list[Entry]] = {0: [(0.0, 0, frozenset())]}
    for opts in options:
        wide: dict[int, list[Entry]] = {k: list(v) for k, v in dp.items()}
        for k, cands in dp.items():
            for freed, alts in opts.items():
                kk = min(need, k + freed)
                bucket = wide.setdefault(kk, [])
                for (c, m, ids1) in alts:
                    for (c0, m0, ids0) in cands:
                        bucket.append((c0 + c, m0 + m, ids0 | ids1))
        dp = {k: sorted(set(v), key=lambda t: (t[0], t[1], sorted(t[2])))[:keep] for k, v in wide.items()}
    out = []
    seen: set[frozenset[str]] = set()
    for cost, moves, ids2 in dp.get(need, []):
        if ids2 not in seen:
            seen.add(ids2)
            out.append((cost, moves, ids2))
    return out


def _lower_bound(options: list[Options], need: int) -> float:
    """A bound no move set of the leaf can beat: each component's best cost per freed node, filled greedily (the
    relaxation where a component can be freed fractionally). Leaves whose bound is not below the best plan found
    are skipped without their exact programme."""
    items = []
    for opts in options:
        ratio = min((alts[0][0] / f for f, alts in opts.items() if f), default=None)
        if ratio is not None:
            items.append((ratio, max(opts)))
    items.sort()
    left, lb = need, 0.0
    for ratio, cap in items:
        take = min(left, cap)
        lb += take * ratio
        left -= take
        if not left:
            return lb
    return float("inf")


def _destinations(moved: Iterable[RunningJob], states: Mapping[str, NodeState], reserved: set[str],
                  all_jobs_on: Mapping[str, list[RunningJob]], moved_ids: frozenset[str]
                  ) -> dict[str, tuple[str, ...]] | None:
    """First fit of every moved job on nodes outside the target (GPUs freed by the other moves count): None when
    one has nowhere to go now."""
    free: dict[str, int] = {}
    for n, st in states.items():
        if n in reserved or not st.healthy or st.state in ("down", "drained", "draining"):
            continue
        back = sum(j.gpus.get(n, 0) for j in all_jobs_on.get(n, []) if j.job_id in moved_ids)
        free[n] = st.free_gpus + back
    out: dict[str, tuple[str, ...]] = {}
    for j in sorted(moved, key=lambda j: -j.total_gpus):
        want = sorted(j.gpus.values(), reverse=True)
        got: list[str] = []
        for g in want:
            spot = next((x for x in free if x not in got and free[x] >= g), None)
            if spot is None:
                return None
            free[spot] -= g
            got.append(spot)
        out[j.job_id] = tuple(got)
    return out


def _realise(topo: PlacementTopology, li: int, members: Sequence[str], ids: frozenset[str], cost: float,
             states: Mapping[str, NodeState], jobs_on: Mapping[str, list[RunningJob]],
             by_id: Mapping[str, RunningJob], target: Target, exact: bool) -> DefragPlan | None:
    """The target's nodes and the moved jobs' destinations for one move set in one leaf (None: a moved job has
    nowhere to go now)."""
    moved = [by_id[i] for i in sorted(ids)]
    serving = [n for n in members if n in states and _serves(
        states[n], sum(j.gpus.get(n, 0) for j in jobs_on.get(n, []) if j.job_id not in ids),
        len([j for j in jobs_on.get(n, []) if j.job_id not in ids]), target)]
    # prefer nodes whose freeing needed a move (the free ones stay free for others), then leaf order
    order = {n: i for i, n in enumerate(members)}
    serving.sort(key=lambda n: (not any(j.job_id in ids for j in jobs_on.get(n, [])), order[n]))
    chosen = tuple(sorted(serving[:target.nodes], key=order.__getitem__))
    dest = _destinations(moved, states, set(chosen), jobs_on, ids)
    if dest is None:
        return None
    moves = tuple(Move(j.job_id, j.cost, tuple(n for n in chosen if n in j.gpus), dest[j.job_id]) for j in moved)
    return DefragPlan(topo.leaf_names[li], chosen, moves, cost, exact=exact)


def plan_defrag(topo: PlacementTopology, states: Mapping[str, NodeState], jobs: Sequence[RunningJob],
                target: Target) -> Verdict:
    """The verdict and, when the target is blocked by fragmentation, the cheapest move set (module docstring)."""
    jobs_on: dict[str, list[RunningJob]] = {}
    for j in jobs:
        for n in j.gpus:
            jobs_on.setdefault(n, []).append(j)
    by_id = {j.job_id: j for j in jobs}
    # already placeable on one leaf without moving anything?
    for leaf, members in zip(topo.leaf_names, topo.leaf_nodes, strict=True):
        ok = [n for n in members if n in states and _serves(
            states[n], sum(j.gpus.get(n, 0) for j in jobs_on.get(n, [])), len(jobs_on.get(n, [])), target)]
        if len(ok) >= target.nodes:
            return Verdict(False, f"not blocked: {leaf} can take it now ({len(ok)} node(s) free)")
    if not any(len(m) >= target.nodes for m in topo.leaf_nodes):
        return Verdict(False, f"no {topo.unit} has {target.nodes} node(s): no move can help")
    free_total = sum(1 for n, st in states.items() if _serves(
        st, sum(j.gpus.get(n, 0) for j in jobs_on.get(n, [])), len(jobs_on.get(n, [])), target))
    candidates: list[tuple[tuple[float, int, int], DefragPlan]] = []
    inexact = False
    leaves = []
    for li, members in enumerate(topo.leaf_nodes):
        if len(members) < target.nodes:
            continue
        opts, alls = [], []
        for comp_nodes, comp_jobs in _components(list(members), jobs_on):
            o, every, exact = _options(comp_nodes, comp_jobs, states, target, jobs_on)
            inexact |= not exact
            if o:
                opts.append(o)
            if every:
                alls.append(every)
        lb = _lower_bound(opts, target.nodes)
        if lb != float("inf"):
            leaves.append((lb, li, members, opts, alls))
    leaves.sort(key=lambda x: (x[0], x[1]))
    for lb, li, members, opts, alls in leaves:
        if candidates and lb > candidates[0][0][0]:
            break  # every later leaf is bound to cost more than the plan found
        cands = _knapsack(opts, target.nodes)  # the cheapest move set of this leaf
        for widen in (False, True):
            if widen:  # the cheapest had a moved job with nowhere to go: the runners-up
                cands = _knapsack(alls, target.nodes, keep=WIDE_KEEP)
            done = False
            for cost, _m, ids in cands:
                if candidates and (cost, len(ids), li) >= candidates[0][0]:
                    done = True  # no better than a leaf already planned (cands are cheapest first)
                    break
                plan = _realise(topo, li, members, ids, cost, states, jobs_on, by_id, target, not inexact)
                if plan is not None:
                    candidates.append(((cost, len(ids), li), plan))
                    candidates.sort(key=lambda c: c[0])
                    done = True
                    break
            if done or not cands:
                break
    if not candidates:
        stuck = sorted({j.job_id for j in jobs if not j.movable})
        return Verdict(True, "blocked, and no set of movable jobs frees a whole "
                       f"{topo.unit} for it" + (f" (not movable: {', '.join(stuck[:5])})" if stuck else ""))
    candidates.sort(key=lambda c: c[0])
    best = candidates[0][1]
    why = ("blocked by fragmentation: " + (f"{free_total} node(s) free in all, but not {target.nodes} on one "
                                           f"{topo.unit}" if free_total >= target.nodes else
                                           "not enough free nodes on one leaf; movable jobs hold the rest"))
    notes = () if best.exact else ("a component with more than "
                                   f"{MAX_COMPONENT_JOBS} movable jobs was planned greedily",)
    return Verdict(True, why, best, notes)


# ---------------------------------------------------------------------------------------------- planning with ends


@dataclass(frozen=True)
class Hold:
    """Where and from when to reserve for a target when moves alone cannot free a leaf now: ``start`` is when the
    jobs on ``nodes`` that may not move have all reached their end times; ``moves`` are the movable jobs expected to
    still run there then (moved at ``start``), ``cost`` their cost as of now (an estimate of the cost then)."""

    leaf: str
    nodes: tuple[str, ...]
    start: float
    waits_for: tuple[str, ...]
    moves: tuple[str, ...]
    cost: float


def _blocks_until(j: RunningJob, ends: Mapping[str, float], movable_from: Mapping[str, float]) -> float:
    """Until when job ``j`` keeps its GPUs from a target without a move it may make: now for a movable job, else its
    end time or the time it may move (``movable_from``), whichever is first; ``inf`` when neither is known."""
    inf = float("inf")
    return min(ends.get(j.job_id, inf), movable_from.get(j.job_id, inf))


def clear_at(node: NodeState, here: Sequence[RunningJob], ends: Mapping[str, float], target: Target,
             now: float, movable_from: Mapping[str, float] | None = None) -> float:
    """When ``node`` serves the target if every movable job on it is moved and every other job runs to its end time
    (``ends``, e.g. from the time limits) or until it may move (``movable_from``); ``inf`` when never (a job that may
    not move has no end time, or the node is down or too small)."""
    inf = float("inf")
    mf = movable_from or {}
    if not _serves(node, 0, 0, target):
        return inf
    stay = [j for j in here if not j.movable]
    for t in sorted({now} | {max(now, _blocks_until(j, ends, mf)) for j in stay}):
        left = [j for j in stay if _blocks_until(j, ends, mf) > t]
        if _serves(node, sum(j.gpus.get(node.name, 0) for j in left), len(left), target):
            return t
    return inf


def plan_reservation(topo: PlacementTopology, states: Mapping[str, NodeState], jobs: Sequence[RunningJob],
                     ends: Mapping[str, float], target: Target, now: float, horizon_s: float = float("inf"),
                     max_moves: int | None = None, movable_from: Mapping[str, float] | None = None) -> Hold | None:
    """The leaf that can serve the target first when the movable jobs may be moved and the others run to their end
    times, or None when none can within ``horizon_s``. A job that may not move *now* but may later (one protected
    after a move) is passed as not movable with that time in ``movable_from``.

    Why: on a busy cluster the jobs that may not move (no checkpoint, or larger than a leaf) hold part of nearly every
    leaf, so moves alone rarely free one (bench/README.md, issue 26); but some leaf's unmovable jobs end soon. Slurm
    keeps such a leaf for the target once it is reserved from that time: "As the reservation time approaches, only jobs
    that can complete by the reservation time will be initiated" (doc/html/reservations.shtml, 22.05 and 24.11; in
    src/slurmctld/reservation.c job_test_resv a job outside the reservation loses its nodes when the reservation starts
    before the job's time limit would end), and Flags=IGNORE_JOBS lets the reservation cover the movable jobs still
    running there (scontrol(1)).

    The order: earliest start, then least cost of the expected moves, then fewest moves, then leaf order. Exact for
    the start time (brute-force tested); inside the leaf the nodes are chosen by their clear time, then by the cost of
    the jobs to move on them, then node order; the moves themselves are planned again at the start by
    :func:`plan_defrag` on that leaf (the state by then is not known now)."""
    inf = float("inf")
    mf = movable_from or {}
    jobs_on: dict[str, list[RunningJob]] = {}
    for j in jobs:
        for n in j.gpus:
            jobs_on.setdefault(n, []).append(j)
    best: tuple[tuple[float, float, int, int], Hold] | None = None
    for li, members in enumerate(topo.leaf_nodes):
        if len(members) < target.nodes:
            continue
        clear = {n: clear_at(states[n], jobs_on.get(n, []), ends, target, now, mf) for n in members if n in states}
        times = sorted(clear.values())
        if len(times) < target.nodes or times[target.nodes - 1] == inf:
            continue
        t = times[target.nodes - 1]
        if t - now > horizon_s:
            continue
        order = {n: i for i, n in enumerate(members)}

        def still(n: str, t: float = t) -> list[RunningJob]:  # running there at t, and movable by then
            return [j for j in jobs_on.get(n, []) if ends.get(j.job_id, inf) > t
                    and (j.movable or mf.get(j.job_id, inf) <= t)]

        ready = sorted((n for n, c in clear.items() if c <= t),
                       key=lambda n: (clear[n], sum(j.cost for j in still(n)), order[n]))
        chosen = tuple(sorted(ready[:target.nodes], key=order.__getitem__))
        moved = {j.job_id: j for n in chosen for j in still(n)}
        if max_moves is not None and len(moved) > max_moves:
            continue
        waits = sorted({j.job_id for n in chosen for j in jobs_on.get(n, [])
                        if not j.movable and now < _blocks_until(j, ends, mf) <= t})
        cost = sum(j.cost for j in moved.values())
        key = (t, cost, len(moved), li)
        if best is None or key < best[0]:
            best = (key, Hold(topo.leaf_names[li], chosen, t, tuple(waits), tuple(sorted(moved)), cost))
    return best[1] if best is not None else None


def hold_note(hold: Hold, unit: str, now: float) -> str:
    """One clause for a blocked job's line: which leaf comes free of jobs that may not move, when, and what a
    reservation from then would need (``scontrol create reservation ... StartTime=... Flags=IGNORE_JOBS``; ``defrag
    watch`` creates it, slurmkit/defrag/watch.py ``_create_hold``)."""
    from datetime import datetime

    from slurmkit import hostlist

    if hold.start <= now:
        return f"{hold.leaf} holds only jobs that may move"
    when = datetime.fromtimestamp(hold.start).strftime("%Y-%m-%dT%H:%M:%S")
    wait = f"{(hold.start - now) / 3600:.1f} h"
    waits = f" (job(s) {', '.join(hold.waits_for)} end by their time limits or may move by then)" if hold.waits_for else ""
    moves = (f", then moving {', '.join(hold.moves)} ({hold.cost:.0f} GPU-s as of now)" if hold.moves
             else ", with nothing to move")
    return (f"{hold.leaf} ({hostlist.fold(hold.nodes)}) is the first {unit} it can have: at {when}, in {wait}{waits}"
            f"{moves}; a reservation of those nodes from then (StartTime={when} Flags=IGNORE_JOBS) keeps jobs "
            f"that would run past it off them")
