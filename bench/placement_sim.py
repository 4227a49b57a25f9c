"""Replay a synthetic GPU-cluster job trace under five node-selection policies and compare placement.

Cluster: fat trees of 512..16,384 nodes, 32 nodes (256 GPUs) per leaf, 16 leaves per spine, a core above
the spines (bench/placement_common.py). Every job takes whole nodes (8 GPUs each, ``--exclusive``), as
multi-node training does; GPU utilisation is therefore allocated nodes / all nodes.

Trace (seeded, the same trace for every policy):
- sizes in nodes, heavy-tailed as on LLM clusters: 1 (60%); 2 (7%), 3 (2%), 4 (6%), 6 (2%), 8 (6%),
  12 (2%), 16 (4%), 24 (2%); 32 (3%), 48 (1%), 64 (2.5%), 128 (1.5%), 256 (1%); capped at half the cluster.
  Jobs of >= 32 nodes are 9% of jobs and about three quarters of the node-hours.
- durations: lognormal, median 1 h, sigma 1.5 (mean about 3 h), clipped to [1 min, 72 h], independent of size.
- arrivals: Poisson, rate set so the offered load is ``--load`` (default 0.9) of the cluster:
  rate = load * nodes / mean(size * duration).

Scheduler: FCFS with EASY backfill (the head job gets a reservation from the running jobs' end times;
later jobs, up to 100 deep, start now if they fit and do not delay it), like Slurm's sched/backfill with
exact runtime estimates. A job starts when enough nodes are free; every policy below can use any free
nodes (one core connects all leaves), so *when* a job starts depends on the policy only through
``--span-penalty``: a job placed on more leaves than it needs (more than ceil(size/32)) runs that much
longer (0.1 = 10%; congestion on oversubscribed spines). With the default 0 the schedules are identical
and only the placement differs.

Policies:
- ``ours``: slurmkit.placement.plan (lowest level, fewest leaves, best fit).
- ``slurm-tree``: Slurm's topology/tree as its documentation describes it: the lowest-level switch with
  enough free nodes (the tightest one of that level), then leaves under it, repeatedly the tightest leaf
  that holds the remainder, else the largest leaf (select/cons_tres ``_eval_nodes_topo``).
- ``slurm-none``: Slurm without a topology plugin, select/cons_tres ``_eval_nodes_consec``: runs of
  consecutive free nodes in index order; the tightest run that holds the job, else the largest run, taken
  from its start, repeated. This reproduces rows 1 and 3 of the 22.05 lab table in
  ../shared/reference/slurm-lab.md (node[6-8]; node[3-5]); for row 2 it picks node[4-7] where the lab
  picked node[5-8].
- ``first-fit``: the lowest-numbered free nodes.
- ``random``: free nodes drawn uniformly (seeded).

Metrics per policy: mean and 95th-percentile leaves spanned per multi-node job; share of multi-node jobs
inside one leaf; cross-leaf jobs of <= 32 nodes (could have fitted one leaf) relative to first-fit; mean
extra leaves beyond ceil(size/32); mean wait of jobs >= 32 nodes; GPU utilisation and goodput (work at
un-penalised speed) over the arrival window. The first 20% of jobs (the cluster filling up from empty)
are left out of every metric.

Defragmentation (``--defrag``, issue 26): jobs of exactly one leaf (32 nodes) must run inside one leaf
(gpusub --topology strict); the head of the queue, when it is such a job, holds the leaf that drains first
(backfill keeps off it unless it ends before). Each policy runs without and with ``defrag watch`` (class Defrag:
the same rules -- minimum wait, moves per hour and per blocked job, moved jobs protected, only checkpointing jobs,
moved jobs must fit elsewhere now -- and the cost model of slurmkit.defrag.plan; ``--check N`` runs the real
planner on the first N passes and stops if its cost differs). A move loses the work since the job's last periodic
checkpoint (``--ckpt``) plus ``--restart``; the moved job restarts at once elsewhere. Metrics: waits of leaf jobs,
all jobs' mean wait, utilisation, goodput (less the lost work), wait of jobs larger than a leaf, moves, GPU-hours
lost / all jobs' GPU-hours. A third run per policy, ``+defrag-resv``, plans with end times
(slurmkit.defrag.plan.plan_reservation; ``--check`` compares its start too): for a waiting leaf job it takes the
leaf that can be freed first, counting the time limits of the jobs on it that may not move, reserves it from then (Slurm starts on reserved
nodes only jobs that end before the reservation starts) and at that time moves only the jobs still running there.

Usage: python bench/placement_sim.py [--sizes 512,2048,8192,16384] [--jobs N] [--load 0.9]
       [--span-penalty 0.0] [--seed 1] [--policies ours,slurm-tree,slurm-none,first-fit,random]
       [--defrag [--min-wait 600] [--moves-per-hour 32] [--moves-per-job 16] [--protect-h 6] [--ckpt 1800]
        [--restart 120] [--movable 1.0] [--movable-max 31] [--check 20] [--horizon-h 24] [--max-held 1]]
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import math
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from placement_common import GPUS_PER_NODE, NODES_PER_LEAF, fat_tree  # noqa: E402

from slurmkit.placement import PlacementTopology, plan  # noqa: E402

SIZE_DIST = (
    (1, 0.60), (2, 0.07), (3, 0.02), (4, 0.06), (6, 0.02), (8, 0.06), (12, 0.02), (16, 0.04), (24, 0.02),
    (32, 0.03), (48, 0.01), (64, 0.025), (128, 0.015), (256, 0.01),
)
DUR_MEDIAN_S = 3600.0
DUR_SIGMA = 1.5
DUR_MIN_S, DUR_MAX_S = 60.0, 72 * 3600.0
BACKFILL_DEPTH = 100
WARMUP = 0.2  # the first 20% of jobs fill the empty cluster; metrics and the utilisation window skip them
POLICIES = ("ours", "slurm-tree", "slurm-none", "first-fit", "random")


@dataclass
class Job:
    jid: int
    size: int
    arrival: float
    duration: float  # at full speed; also the user's runtime estimate
    start: float = -1.0
    end: float = -1.0
    leaves: int = 0


def make_trace(nodes: int, jobs: int, load: float, rng: random.Random) -> list[Job]:
    sizes = [s for s, _ in SIZE_DIST]
    weights = [w for _, w in SIZE_DIST]
    cap = nodes // 2
    drawn = [min(s, cap) for s in rng.choices(sizes, weights, k=jobs)]
    mu = math.log(DUR_MEDIAN_S)
    durs = [min(DUR_MAX_S, max(DUR_MIN_S, rng.lognormvariate(mu, DUR_SIGMA))) for _ in range(jobs)]
    rate = load * nodes / (sum(s * d for s, d in zip(drawn, durs, strict=True)) / jobs)
    t = 0.0
    out = []
    for i in range(jobs):
        t += rng.expovariate(rate)
        out.append(Job(i, drawn[i], t, durs[i]))
    return out


# ---------------------------------------------------------------------- cluster state


@dataclass
class State:
    """Free nodes per leaf (sorted ids), a busy byte per node, and the free total."""

    topo: PlacementTopology
    nodes: int
    free: list[list[int]] = field(init=False)
    busy: bytearray = field(init=False)
    nfree: int = field(init=False)

    def __post_init__(self) -> None:
        self.free = [list(range(i * NODES_PER_LEAF, (i + 1) * NODES_PER_LEAF)) for i in range(self.nodes // NODES_PER_LEAF)]
        self.busy = bytearray(self.nodes)
        self.nfree = self.nodes

    def take(self, ids: list[int]) -> None:
        for i in ids:
            self.free[i // NODES_PER_LEAF].remove(i)
            self.busy[i] = 1
        self.nfree -= len(ids)

    def give(self, ids: list[int]) -> None:
        for i in ids:
            bisect.insort(self.free[i // NODES_PER_LEAF], i)
            self.busy[i] = 0
        self.nfree += len(ids)


# ---------------------------------------------------------------------- policies: (state, n, rng) -> ids


def pick_ours(s: State, n: int, rng: random.Random) -> list[int]:
    p = plan(s.topo, [len(f) for f in s.free], n)
    assert p is not None
    return [i for leaf, k in p.takes for i in s.free[leaf][:k]]


def pick_first_fit(s: State, n: int, rng: random.Random) -> list[int]:
    out: list[int] = []
    for f in s.free:
        out.extend(f[: n - len(out)])
        if len(out) == n:
            break
    return out


def pick_random(s: State, n: int, rng: random.Random) -> list[int]:
    pool = [i for f in s.free for i in f]
    return rng.sample(pool, n)


def pick_slurm_tree(s: State, n: int, rng: random.Random) -> list[int]:
    topo = s.topo
    counts = [len(f) for f in s.free]
    leaves: tuple[int, ...] | None = None
    fitting = [(c, i) for i, c in enumerate(counts) if c >= n]
    if fitting:
        leaves = (min(fitting)[1],)
    else:
        for level in topo.levels:
            best = None
            for j in topo.switches_by_level[level]:
                total = sum(counts[leaf] for leaf in topo.switch_leaves[j])
                if total >= n and (best is None or total < best[0]):
                    best = (total, j)
            if best is not None:
                leaves = topo.switch_leaves[best[1]]
                break
    assert leaves is not None
    avail = {leaf: counts[leaf] for leaf in leaves if counts[leaf]}
    out: list[int] = []
    rem = n
    while rem:
        fits = [(c, leaf) for leaf, c in avail.items() if c >= rem]
        if fits:
            _, leaf = min(fits)
        else:
            leaf = max(avail, key=lambda x: (avail[x], -x))
        k = min(rem, avail.pop(leaf))
        out.extend(s.free[leaf][:k])
        rem -= k
    return out


def pick_slurm_none(s: State, n: int, rng: random.Random) -> list[int]:
    busy, size = s.busy, s.nodes
    runs: list[tuple[int, int]] = []  # (start, length)
    i = busy.find(0)
    while i != -1:
        j = busy.find(1, i)
        if j == -1:
            j = size
        runs.append((i, j - i))
        i = busy.find(0, j)
    out: list[int] = []
    rem = n
    while rem:
        best = -1
        for k, (_, length) in enumerate(runs):
            if length == 0:
                continue
            if best == -1:
                best = k
                continue
            bl = runs[best][1]
            # Slurm: first sufficient set, a tighter sufficient set, or while none suffices the biggest
            if (length >= rem and bl < rem) or (length >= rem and length < bl) or (bl < rem and length > bl):
                best = k
        start, length = runs[best]
        k = min(rem, length)
        out.extend(range(start, start + k))
        runs[best] = (start, 0)
        rem -= k
    return out


PICK: dict[str, Callable[[State, int, random.Random], list[int]]] = {
    "ours": pick_ours,
    "slurm-tree": pick_slurm_tree,
    "slurm-none": pick_slurm_none,
    "first-fit": pick_first_fit,
    "random": pick_random,
}


# ---------------------------------------------------------------------- simulation


@dataclass
class Result:
    policy: str
    jobs: list[Job]
    util: float
    goodput: float
    seconds: float
    moves: int = 0
    lost_gpu_s: float = 0.0  # GPU-seconds lost to moves (work since the last checkpoint + restart), all jobs
    work_gpu_s: float = 0.0  # GPU-seconds of the jobs' own work, all jobs
    checked: int = 0  # defrag passes cross-checked against slurmkit.defrag.plan
    why: dict[str, int] = field(default_factory=dict)  # leaves a pass found no plan on, by reason


@dataclass(frozen=True)
class Defrag:
    """``slurmkit defrag watch`` in the simulator: for the oldest leaf job that has waited ``min_wait_s`` and cannot
    start, free the leaf whose jobs cost least to move (GPU-seconds since each one's last checkpoint plus its
    restart), if every job on it checkpoints, none was moved in the last ``protect_s``, the moved jobs fit elsewhere
    now, the plan moves at most ``per_job`` jobs and the last hour's moves stay within ``per_hour``; then the moved
    jobs restart elsewhere and the leaf job starts on the freed leaf (the reservation of ``defrag run``)."""

    min_wait_s: float = 600.0
    per_hour: int = 32
    per_job: int = 16
    protect_s: float = 6 * 3600.0
    ckpt_s: float = 1800.0  # periodic checkpoint interval: a move loses the work since the last one
    restart_s: float = 120.0  # requeue, scheduling, loading the checkpoint
    movable: float = 1.0  # share of the jobs that checkpoint (the rest are never moved)
    movable_max: int = NODES_PER_LEAF - 1  # jobs larger than this are never moved (leaf jobs themselves never)
    check: int = 0  # cross-check the first N plans against slurmkit.defrag.plan.plan_defrag
    ends: bool = False  # plan with end times: reserve the leaf that comes free first, counting ends (see ends_pass)
    horizon_s: float = 24 * 3600.0  # ends: reserve a leaf at most this far ahead
    max_held: int = 1  # ends: leaves reserved at once


def simulate(topo: PlacementTopology, nodes: int, trace: list[Job], policy: str, penalty: float, seed: int,
             strict_leaf: bool = False, defrag: Defrag | None = None) -> Result:
    """``strict_leaf``: a job of exactly one leaf's size must run inside one leaf (gpusub --topology strict,
    ``--switches=1``); it waits until a whole leaf is free. Other jobs take any free nodes."""
    t_wall = time.perf_counter()
    jobs = [Job(j.jid, j.size, j.arrival, j.duration) for j in trace]
    rng = random.Random(seed)
    mrng = random.Random(seed + 7)
    movable = {j.jid for j in jobs
               if defrag is not None and j.size <= defrag.movable_max and j.size != NODES_PER_LEAF
               and mrng.random() < defrag.movable}
    pick = PICK[policy]
    st = State(topo, nodes)
    nleaves = nodes // NODES_PER_LEAF
    leaf_jobs: list[set[int]] = [set() for _ in range(nleaves)]
    events: list[tuple[float, int, int]] = [(j.arrival, 1, j.jid) for j in jobs]  # kind 0 end, 1 arrival, 2 tick
    heapq.heapify(events)
    queue: list[Job] = []
    # jid -> (end, size, ids, useful share, attempt start)
    running: dict[int, tuple[float, int, list[int], float, float]] = {}
    w0, w1 = jobs[int(len(jobs) * WARMUP)].arrival, jobs[-1].arrival
    busy_nodes = 0
    useful_nodes = 0.0
    busy_int = useful_int = 0.0
    lost_in_window = 0.0
    last = 0.0
    moved_at: dict[int, float] = {}
    move_times: list[float] = []
    stats = {"moves": 0, "lost": 0.0, "checked": 0}
    resv: dict[int, tuple[float, int]] = {}  # leaf -> (start, leaf job): defrag's reservations (defrag.ends)
    resv_of: dict[int, int] = {}  # leaf job -> its reserved leaf
    why: dict[str, int] = {}  # per leaf, why a pass could not free it (the README's explanation)

    def leaf_job(job: Job) -> bool:
        return strict_leaf and job.size == NODES_PER_LEAF

    def held(now: float, dur: float) -> set[int]:
        """Leaves reserved for a leaf job (``defrag.ends``) from a time before ``now + dur``: a job that would still
        run then may not start there (reservations.shtml: "As the reservation time approaches, only jobs that can
        complete by the reservation time will be initiated")."""
        return {leaf for leaf, (t, _) in resv.items() if t < now + dur}

    def whole_free(hidden: set[int] | frozenset[int]) -> int:
        return next((i for i in range(nleaves) if i not in hidden and len(st.free[i]) == NODES_PER_LEAF), -1)

    def fits(job: Job, hidden: set[int] | frozenset[int] = frozenset()) -> bool:
        if leaf_job(job):
            return whole_free(hidden) >= 0
        return job.size <= st.nfree - sum(len(st.free[h]) for h in hidden)

    def place(job: Job, hidden: set[int] | frozenset[int]) -> list[int]:
        if leaf_job(job):
            return list(st.free[whole_free(hidden)])
        if not hidden:
            return pick(st, job.size, rng)
        kept = {h: st.free[h] for h in hidden}
        for h, ids in kept.items():
            st.free[h] = []
            st.nfree -= len(ids)
            for i in ids:
                st.busy[i] = 1
        try:
            return pick(st, job.size, rng)
        finally:
            for h, ids in kept.items():
                for i in ids:
                    st.busy[i] = 0
                st.free[h] = ids
                st.nfree += len(ids)

    def run(job: Job, now: float, ids: list[int], remaining: float, first: bool) -> None:
        nonlocal busy_nodes, useful_nodes
        st.take(ids)
        leaves = {i // NODES_PER_LEAF for i in ids}
        for leaf in leaves:
            leaf_jobs[leaf].add(job.jid)
        slow = 1.0 + (penalty if len(leaves) > -(-job.size // NODES_PER_LEAF) else 0.0)
        if first:
            job.leaves = len(leaves)
            job.start = now
        job.end = now + remaining * slow
        running[job.jid] = (job.end, job.size, ids, 1.0 / slow, now)
        busy_nodes += job.size
        useful_nodes += job.size / slow
        heapq.heappush(events, (job.end, 0, job.jid))

    def stop(jid: int) -> tuple[float, int, list[int], float, float]:
        nonlocal busy_nodes, useful_nodes
        r = running.pop(jid)
        st.give(r[2])
        for leaf in {i // NODES_PER_LEAF for i in r[2]}:
            leaf_jobs[leaf].discard(jid)
        busy_nodes -= r[1]
        useful_nodes -= r[1] * r[3]
        return r

    def start(job: Job, now: float, hidden: set[int] | frozenset[int] = frozenset()) -> None:
        run(job, now, place(job, hidden | held(now, job.duration)), job.duration, first=True)
        if job.jid in resv_of:  # it started elsewhere before its reserved leaf came free: the reservation goes
            del resv[resv_of.pop(job.jid)]

    def schedule(now: float) -> None:
        while queue and fits(queue[0], held(now, queue[0].duration)):
            start(queue.pop(0), now)
        if len(queue) < 2 or min(j.size for j in queue[1 : BACKFILL_DEPTH + 1]) > st.nfree:
            return
        head = queue[0]
        hidden: set[int] = set()
        if leaf_job(head):  # it waits for the leaf that drains first; others may use that leaf until then
            if head.jid in resv_of:
                leaf = resv_of[head.jid]
                shadow, hidden = resv[leaf][0], {leaf}
            else:
                drain = [(max((running[j][0] for j in leaf_jobs[i]), default=now), i) for i in range(nleaves)
                         if i not in resv]
                if drain:
                    shadow, h = min(drain)
                    hidden = {h}
                else:
                    shadow = math.inf
            extra = 0
        else:
            avail = st.nfree
            shadow, extra = math.inf, 0
            for end, size, _, _, _ in sorted(running.values(), key=lambda r: r[0]):
                avail += size
                if avail >= head.size:
                    shadow, extra = end, avail - head.size
                    break
        k = 1
        while k < len(queue) and k <= BACKFILL_DEPTH:
            job = queue[k]
            mine = held(now, job.duration)
            if fits(job, mine):
                ends_before = now + job.duration <= shadow
                if ends_before:
                    start(queue.pop(k), now)
                    continue
                if hidden and fits(job, hidden | mine):
                    start(queue.pop(k), now, hidden)
                    continue
                if not hidden and job.size <= extra:
                    extra -= job.size
                    start(queue.pop(k), now)
                    continue
            k += 1

    def lost_of(jid: int, now: float) -> float:
        assert defrag is not None
        since = now - running[jid][4]
        return since % defrag.ckpt_s  # the work since the last periodic checkpoint of this attempt

    def defrag_pass(now: float) -> None:
        nonlocal lost_in_window
        assert defrag is not None
        while move_times and move_times[0] <= now - 3600:
            move_times.pop(0)
        budget = min(defrag.per_job, defrag.per_hour - len(move_times))
        if budget <= 0:
            if move_times:
                heapq.heappush(events, (move_times[0] + 3600, 2, -1))
            return
        if defrag.ends:
            ends_pass(now, budget)
            return
        job = next((j for j in queue if leaf_job(j) and now - j.arrival >= defrag.min_wait_s), None)
        if job is None or fits(job):
            return
        best = None
        free_outside_total = st.nfree
        seen: list[str] = []
        for leaf in range(nleaves):
            js = leaf_jobs[leaf]
            if not js or len(js) > budget:
                seen.append("more jobs than the move caps")
                continue
            if any(j not in movable for j in js):
                seen.append("a job that cannot move (no checkpoint, or a leaf or more)")
                continue
            if any(now - moved_at.get(j, -math.inf) < defrag.protect_s for j in js):
                seen.append("a job moved in the last protect hours")
                continue
            need = sum(running[j][1] for j in js)
            back = sum(1 for j in js for i in running[j][2] if i // NODES_PER_LEAF != leaf)
            if need > free_outside_total - len(st.free[leaf]) + back:
                seen.append("no room elsewhere for the moved jobs")
                continue  # the moved jobs would have nowhere to go now
            seen.append("movable")
            cost = sum(running[j][1] * GPUS_PER_NODE * (lost_of(j, now) + defrag.restart_s) for j in js)
            key = (cost, len(js), leaf)
            if best is None or key < best[0]:
                best = (key, leaf)
        if stats["checked"] < defrag.check:
            check_plan(now, job, best, budget)
        if best is None:
            for w in set(seen):
                why[w] = why.get(w, 0) + seen.count(w)
            return
        move_and_start(now, best[1], job)

    def move_and_start(now: float, leaf: int, job: Job) -> None:
        nonlocal lost_in_window
        assert defrag is not None
        rest = []
        for j in sorted(leaf_jobs[leaf]):
            lost = lost_of(j, now)
            _end, size, _ids, _share, _t = stop(j)
            rest.append((j, size, _end - now, lost))
        for j, size, remaining, lost in rest:
            ids = place(Job(j, size, 0.0, 0.0), {leaf} | held(now, remaining + lost + defrag.restart_s))
            run(jobs[j], now, ids, remaining + lost + defrag.restart_s, first=False)
            moved_at[j] = now
            move_times.append(now)
            stats["moves"] += 1
            g = size * GPUS_PER_NODE * (lost + defrag.restart_s)
            stats["lost"] += g
            if w0 <= now <= w1:
                lost_in_window += g
        queue.remove(job)
        run(job, now, list(st.free[leaf]), job.duration, first=True)

    def room_for(leaf: int, js: set[int], now: float) -> bool:
        """The jobs on ``leaf`` fit elsewhere now, off every reserved leaf (the moved ones restart at once)."""
        need = sum(running[j][1] for j in js)
        back = sum(1 for j in js for i in running[j][2] if i // NODES_PER_LEAF != leaf)
        off = {leaf} | set(resv)
        return need <= st.nfree - sum(len(st.free[h]) for h in off) + back

    def unblocked_at(j: int, now: float) -> float:
        """When running job j stops keeping a leaf from a leaf job without a move it may not make: at once if it may
        move now, else at its end (a job that may never move) or when its protection ends, whichever is first."""
        assert defrag is not None
        end = running[j][0]
        if j not in movable:
            return end
        return max(now, min(end, moved_at.get(j, -math.inf) + defrag.protect_s))

    def ends_pass(now: float, budget: int) -> None:
        """Planning with end times (slurmkit.defrag.plan.plan_reservation; ``defrag watch`` creates the same
        reservation, a hold): a leaf whose jobs that may not move all end (by their time limits) within
        ``horizon_s`` needs no move for them; reserve it for the leaf job from then, and move only the jobs still
        running there at that time."""
        assert defrag is not None
        for leaf, (t, jid) in sorted(resv.items()):  # reservations that are due: move what is left, start the job
            js = leaf_jobs[leaf]
            if now < t or any(unblocked_at(j, now) > now for j in js):
                continue
            if len(js) > budget or not room_for(leaf, js, now):
                why["due, waiting for the move caps or room"] = why.get("due, waiting for the move caps or room", 0) + 1
                if len(js) > budget and move_times:
                    heapq.heappush(events, (move_times[0] + 3600, 2, -1))
                continue
            del resv[leaf]
            resv_of.pop(jid)
            budget -= len(js)
            move_and_start(now, leaf, jobs[jid])
        for job in list(queue):  # move_and_start takes the job out of the queue
            if len(resv) >= defrag.max_held:
                return
            if not leaf_job(job) or job.jid in resv_of or now - job.arrival < defrag.min_wait_s:
                continue
            if fits(job, held(now, job.duration)):
                continue  # the scheduler starts it
            best = None
            for leaf in range(nleaves):
                if leaf in resv:
                    continue
                js = leaf_jobs[leaf]
                t = max((unblocked_at(j, now) for j in js), default=now)
                if t - now > defrag.horizon_s:
                    continue
                stay = {j for j in js if running[j][0] > t}  # still running at t: moved then
                if len(stay) > defrag.per_job:
                    continue
                if t == now and (len(stay) > budget or not room_for(leaf, stay, now)):
                    continue
                cost = sum(running[j][1] * GPUS_PER_NODE * ((t - running[j][4]) % defrag.ckpt_s + defrag.restart_s)
                           for j in stay)
                key = (t, cost, len(stay), leaf)
                if best is None or key < best:
                    best = key
            if stats["checked"] < defrag.check and not resv:
                check_hold(now, best)
            if best is None:
                continue
            t, _, _, leaf = best
            if t == now:
                move_and_start(now, leaf, job)
                budget -= best[2]
                continue
            resv[leaf] = (t, job.jid)
            resv_of[job.jid] = leaf
            heapq.heappush(events, (t, 2, -1))

    def check_hold(now: float, best: tuple[float, float, int, int] | None) -> None:
        """The simulator's reservation start equals slurmkit.defrag.plan.plan_reservation's on the same state."""
        from slurmkit.defrag.plan import RunningJob, Target, plan_reservation
        from slurmkit.placement.engine import NodeState

        assert defrag is not None
        stats["checked"] += 1
        names = [n for leaf in topo.leaf_nodes for n in leaf]
        rjobs, ends, again = [], {}, {}
        for j, r in running.items():
            free_now = j in movable and unblocked_at(j, now) == now
            rjobs.append(RunningJob(str(j), {names[i]: GPUS_PER_NODE for i in r[2]}, movable=free_now,
                                    cost=r[1] * GPUS_PER_NODE * (lost_of(j, now) + defrag.restart_s)))
            ends[str(j)] = r[0]
            if j in movable and not free_now:  # protected after a move: may move again when that ends
                again[str(j)] = moved_at[j] + defrag.protect_s
        states = {n: NodeState(n, "allocated" if st.busy[i] else "idle", 0 if st.busy[i] else GPUS_PER_NODE,
                               GPUS_PER_NODE) for i, n in enumerate(names)}
        h = plan_reservation(topo, states, rjobs, ends, Target(NODES_PER_LEAF, GPUS_PER_NODE), now,
                             horizon_s=defrag.horizon_s, max_moves=defrag.per_job, movable_from=again)
        if h is not None and h.start == now and (best is None or best[0] != now):
            return  # a leaf free now whose moved jobs have no room now: the simulator skips it, the planner does not
        ok = (h is None and best is None) or (h is not None and best is not None and h.start == best[0])
        if not ok:
            raise SystemExit(f"reservation check failed at t={now:.0f}: planner {h}, simulator {best}")

    def check_plan(now: float, job: Job, best: tuple[tuple[float, int, int], int] | None, budget: int) -> None:
        """The simulator's leaf choice equals slurmkit.defrag.plan's on the same state and cost model."""
        from slurmkit.defrag.plan import RunningJob, Target, plan_defrag
        from slurmkit.placement.engine import NodeState

        assert defrag is not None
        stats["checked"] += 1
        names = [n for leaf in topo.leaf_nodes for n in leaf]
        rjobs = [RunningJob(str(j), {names[i]: GPUS_PER_NODE for i in r[2]},
                            movable=j in movable and now - moved_at.get(j, -math.inf) >= defrag.protect_s,
                            cost=r[1] * GPUS_PER_NODE * (lost_of(j, now) + defrag.restart_s))
                 for j, r in running.items()]
        states = {n: NodeState(n, "allocated" if st.busy[i] else "idle", 0 if st.busy[i] else GPUS_PER_NODE,
                               GPUS_PER_NODE) for i, n in enumerate(names)}
        v = plan_defrag(topo, states, rjobs, Target(NODES_PER_LEAF, GPUS_PER_NODE))
        p = v.plan
        if p is not None and len(p.moves) > budget:
            return  # over the move cap: the simulator skips such leaves, the planner does not know the cap
        ok = (p is None and best is None) or (p is not None and best is not None and abs(p.cost - best[0][0]) < 1e-6 * max(1.0, p.cost))
        if not ok:
            raise SystemExit(f"defrag check failed at t={now:.0f}: planner {p}, simulator {best}")

    while events:
        now = events[0][0]
        lo, hi = max(last, w0), min(now, w1)
        if hi > lo:
            busy_int += busy_nodes * (hi - lo)
            useful_int += useful_nodes * (hi - lo)
        last = now
        while events and events[0][0] == now:
            _, kind, jid = heapq.heappop(events)
            if kind == 0:
                if jid in running and running[jid][0] == now:
                    stop(jid)
            elif kind == 1:
                queue.append(jobs[jid])
                if defrag is not None and leaf_job(jobs[jid]):
                    heapq.heappush(events, (now + defrag.min_wait_s, 2, jid))
        schedule(now)
        if defrag is not None and queue:
            defrag_pass(now)
    span = (w1 - w0) * nodes
    measured = jobs[int(len(jobs) * WARMUP):]
    name = policy + ("" if defrag is None else "+defrag-resv" if defrag.ends else "+defrag")
    work = sum(j.size * GPUS_PER_NODE * j.duration for j in jobs)
    return Result(name, measured, busy_int / span, useful_int / span - lost_in_window / GPUS_PER_NODE / span,
                  time.perf_counter() - t_wall, stats["moves"], stats["lost"], work, stats["checked"], why)


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))] if s else float("nan")


def report(nodes: int, results: list[Result]) -> list[str]:
    base = next((r for r in results if r.policy == "first-fit"), None)

    def crossing(r: Result) -> int:
        return sum(1 for j in r.jobs if 1 < j.size <= NODES_PER_LEAF and j.leaves > 1)

    lines = [
        "| nodes | policy | leaves/multi-node job mean | p95 | in one leaf | cross-leaf jobs <=32 (vs first-fit) "
        "| extra leaves mean | wait >=32 nodes mean h | GPU util | goodput | sim s |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        multi = [j for j in r.jobs if j.size > 1]
        spans = [j.leaves for j in multi]
        one = sum(1 for j in multi if j.leaves == 1) / len(multi)
        extra = sum(j.leaves - -(-j.size // NODES_PER_LEAF) for j in multi) / len(multi)
        big = [j.start - j.arrival for j in r.jobs if j.size >= 32]
        cross = crossing(r)
        rel = f" ({cross / crossing(base) - 1:+.0%})" if base is not None and crossing(base) else ""
        lines.append(
            f"| {nodes} | {r.policy} | {sum(spans) / len(spans):.2f} | {pct(spans, 0.95):.0f} | {one:.1%} | "
            f"{cross}{rel} | {extra:.2f} | {sum(big) / len(big) / 3600:.2f} | {r.util:.1%} | {r.goodput:.1%} | "
            f"{r.seconds:.1f} |"
        )
    return lines


def report_defrag(nodes: int, results: list[Result]) -> list[str]:
    lines = [
        "| nodes | policy | leaf jobs | leaf-job wait mean h | p95 h | all jobs wait mean h | GPU util | goodput "
        "| wait > leaf mean h | moves | GPU-h lost to moves | sim s |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        leaf = [j.start - j.arrival for j in r.jobs if j.size == NODES_PER_LEAF]
        allw = [j.start - j.arrival for j in r.jobs]
        big = [j.start - j.arrival for j in r.jobs if j.size > NODES_PER_LEAF]
        lost = f"{r.lost_gpu_s / r.work_gpu_s:.2%}" if r.moves else "-"
        lines.append(
            f"| {nodes} | {r.policy} | {len(leaf)} | {sum(leaf) / len(leaf) / 3600:.2f} | {pct(leaf, 0.95) / 3600:.2f} "
            f"| {sum(allw) / len(allw) / 3600:.2f} | {r.util:.1%} | {r.goodput:.1%} | {sum(big) / len(big) / 3600:.2f} "
            f"| {r.moves} | {lost} "
            f"| {r.seconds:.1f} |"
        )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="512,2048,8192,16384", help="cluster sizes in nodes, comma-separated")
    ap.add_argument("--jobs", type=int, default=0, help="jobs per cluster size (default max(10000, 3*nodes))")
    ap.add_argument("--load", type=float, default=0.9, help="offered load as a share of the cluster")
    ap.add_argument("--span-penalty", type=float, default=0.0, help="runtime increase of a job on more leaves than needed")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--defrag", action="store_true",
                    help="leaf-sized jobs must run in one leaf; each policy without and with defrag watch")
    ap.add_argument("--min-wait", type=float, default=Defrag.min_wait_s, help="defrag: seconds a leaf job waits first")
    ap.add_argument("--moves-per-hour", type=int, default=Defrag.per_hour)
    ap.add_argument("--moves-per-job", type=int, default=Defrag.per_job)
    ap.add_argument("--protect-h", type=float, default=Defrag.protect_s / 3600)
    ap.add_argument("--ckpt", type=float, default=Defrag.ckpt_s, help="defrag: checkpoint interval, seconds")
    ap.add_argument("--restart", type=float, default=Defrag.restart_s, help="defrag: restart time of a moved job, s")
    ap.add_argument("--movable", type=float, default=Defrag.movable,
                    help="defrag: share of the jobs smaller than a leaf that checkpoint")
    ap.add_argument("--movable-max", type=int, default=Defrag.movable_max,
                    help="defrag: jobs of more nodes than this are never moved")
    ap.add_argument("--horizon-h", type=float, default=Defrag.horizon_s / 3600)
    ap.add_argument("--max-held", type=int, default=Defrag.max_held)
    ap.add_argument("--check", type=int, default=20, help="defrag: cross-check this many plans with slurmkit's planner")
    args = ap.parse_args()
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    for p in policies:
        if p not in PICK:
            raise SystemExit(f"unknown policy {p!r}; choose from {', '.join(POLICIES)}")
    print(f"load {args.load}, span penalty {args.span_penalty}, seed {args.seed}, "
          f"backfill depth {BACKFILL_DEPTH}, Python {sys.version.split()[0]}")
    print()
    header_done = False
    for nodes in (int(x) for x in args.sizes.split(",")):
        jobs = args.jobs or max(10000, 3 * nodes)
        trace = make_trace(nodes, jobs, args.load, random.Random(args.seed * 1_000_003 + nodes))
        topo = fat_tree(nodes)
        if args.defrag:
            d = Defrag(args.min_wait, args.moves_per_hour, args.moves_per_job, args.protect_h * 3600, args.ckpt,
                       args.restart, args.movable, args.movable_max, args.check, False, args.horizon_h * 3600,
                       args.max_held)
            de = replace(d, ends=True)
            results = [simulate(topo, nodes, trace, p, args.span_penalty, args.seed, strict_leaf=True, defrag=dd)
                       for p in policies for dd in (None, d, de)]
            lines = report_defrag(nodes, results)
            for r in results:
                if r.policy.endswith("-resv"):
                    print(f"{nodes} {r.policy}: passes where a reserved leaf was due but its moves waited for the "
                          f"move caps or room elsewhere: {sum(r.why.values())}", file=sys.stderr)
                elif r.why:
                    total = sum(r.why.values())
                    print(f"{nodes} {r.policy}: leaves not freed in passes without a plan: " + ", ".join(
                        f"{k} {v / total:.0%}" for k, v in sorted(r.why.items(), key=lambda kv: -kv[1])),
                        file=sys.stderr)
            checked = sum(r.checked for r in results)
            if checked:
                print(f"({checked} defrag plans and reservation starts at {nodes} nodes equal slurmkit.defrag.plan's)",
                      file=sys.stderr)
        else:
            results = [simulate(topo, nodes, trace, p, args.span_penalty, args.seed) for p in policies]
            lines = report(nodes, results)
        print("\n".join(lines if not header_done else lines[2:]), flush=True)
        header_done = True


if __name__ == "__main__":
    main()
