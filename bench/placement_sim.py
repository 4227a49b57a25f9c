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

Usage: python bench/placement_sim.py [--sizes 512,2048,8192,16384] [--jobs N] [--load 0.9]
       [--span-penalty 0.0] [--seed 1] [--policies ours,slurm-tree,slurm-none,first-fit,random]
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
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from placement_common import NODES_PER_LEAF, fat_tree  # noqa: E402

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


def simulate(topo: PlacementTopology, nodes: int, trace: list[Job], policy: str, penalty: float, seed: int) -> Result:
    t_wall = time.perf_counter()
    jobs = [Job(j.jid, j.size, j.arrival, j.duration) for j in trace]
    rng = random.Random(seed)
    pick = PICK[policy]
    st = State(topo, nodes)
    events: list[tuple[float, int, int]] = [(j.arrival, 1, j.jid) for j in jobs]  # kind 0 = end, 1 = arrival
    heapq.heapify(events)
    queue: list[Job] = []
    running: dict[int, tuple[float, int, list[int], float]] = {}  # jid -> (end, size, ids, useful share)
    w0, w1 = jobs[int(len(jobs) * WARMUP)].arrival, jobs[-1].arrival
    busy_nodes = 0
    useful_nodes = 0.0
    busy_int = useful_int = 0.0
    last = 0.0

    def start(job: Job, now: float) -> None:
        nonlocal busy_nodes, useful_nodes
        ids = pick(st, job.size, rng)
        st.take(ids)
        job.leaves = len({i // NODES_PER_LEAF for i in ids})
        slow = 1.0 + (penalty if job.leaves > -(-job.size // NODES_PER_LEAF) else 0.0)
        job.start = now
        job.end = now + job.duration * slow
        running[job.jid] = (job.end, job.size, ids, 1.0 / slow)
        busy_nodes += job.size
        useful_nodes += job.size / slow
        heapq.heappush(events, (job.end, 0, job.jid))

    def schedule(now: float) -> None:
        while queue and queue[0].size <= st.nfree:
            start(queue.pop(0), now)
        if len(queue) < 2 or min(j.size for j in queue[1 : BACKFILL_DEPTH + 1]) > st.nfree:
            return
        head = queue[0]
        avail = st.nfree
        shadow, extra = math.inf, 0
        for end, size, _, _ in sorted(running.values(), key=lambda r: r[0]):
            avail += size
            if avail >= head.size:
                shadow, extra = end, avail - head.size
                break
        k = 1
        while k < len(queue) and k <= BACKFILL_DEPTH:
            job = queue[k]
            if job.size <= st.nfree:
                ends_before = now + job.duration <= shadow
                if ends_before or job.size <= extra:
                    if not ends_before:
                        extra -= job.size
                    start(queue.pop(k), now)
                    continue
            k += 1

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
                _, size, ids, share = running.pop(jid)
                st.give(ids)
                busy_nodes -= size
                useful_nodes -= size * share
            else:
                queue.append(jobs[jid])
        schedule(now)
    span = (w1 - w0) * nodes
    measured = jobs[int(len(jobs) * WARMUP):]
    return Result(policy, measured, busy_int / span, useful_int / span, time.perf_counter() - t_wall)


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="512,2048,8192,16384", help="cluster sizes in nodes, comma-separated")
    ap.add_argument("--jobs", type=int, default=0, help="jobs per cluster size (default max(10000, 3*nodes))")
    ap.add_argument("--load", type=float, default=0.9, help="offered load as a share of the cluster")
    ap.add_argument("--span-penalty", type=float, default=0.0, help="runtime increase of a job on more leaves than needed")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--policies", default=",".join(POLICIES))
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
        results = [simulate(topo, nodes, trace, p, args.span_penalty, args.seed) for p in policies]
        lines = report(nodes, results)
        print("\n".join(lines if not header_done else lines[2:]), flush=True)
        header_done = True


if __name__ == "__main__":
    main()
