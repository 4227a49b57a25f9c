"""``slurmkit defrag watch``: the policy service beside slurmctld (issue 26 item 3).

One pass: outside the inventory's quiet hours and within its rate limit, take the pending jobs the policy acts for
(its partitions and QOS, waiting for room -- Reason Resources or Priority -- for at least ``min_wait_s``), highest
Slurm priority first, and plan each (slurmkit.defrag.plan) with the jobs moved in the last ``protect_h`` hours made
unmovable (a moved job is never moved again soon: it would starve); the first with a plan of at most
``max_moves_per_job`` moves that fits the hour's budget is carried out by the same code as ``defrag run``
(slurmkit.defrag.run.carry_out: reservation, checkpoint-keeping moves, reservation always removed). At most one
blocked job per pass; the service repeats passes every ``--interval`` seconds.

When no move set frees a leaf now, the pass *holds* the leaf that comes free first of the jobs that may not move
(plan_reservation): a reservation from then (``_create_hold``), at most ``max_holds`` at once, kept in the state
file. Each later pass tends the holds first (``hold_status``): released when the job leaves the queue, runs, or has
not started ``hold_grace_s`` after the start; carried out when due (``_execute_hold``: the moves planned again on
those nodes, then carry_out with the hold's reservation).

The state file (JSON, written atomically) keeps the moves of the last hours (the rate limits) and the counters the
metrics textfile reports, so a restart forgets neither. Every pass says in one line what it did or why it did
nothing; every action (reserve, move, release) is one line.

The pure parts (quiet hours, rate budget, protection, candidates, the wait-saved estimate, the metrics text, the
decision) take their inputs as arguments; ``run_pass`` is the edge that reads Slurm and acts.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from slurmkit.backend.jobjson import JobRecord, job_table
from slurmkit.defrag.gather import Policy
from slurmkit.defrag.plan import RunningJob, Target, Verdict, _serves
from slurmkit.errors import SlurmkitError

if TYPE_CHECKING:
    from slurmkit.placement.engine import NodeState
    from slurmkit.placement.topology import PlacementTopology

# a pending job waits for room with these reasons (squeue(1) JOB REASON CODES, 22.05 and 24.11: "Resources: The
# job is waiting for resources to become available", "Priority: One or more higher priority jobs exist"); a held
# job, a dependency, a begin time or a QOS/association limit is not helped by moving anything
WAITING_REASONS = frozenset({"Resources", "Priority"})
STATE_VERSION = 1
COUNTERS = (
    # name, help: the textfile (node_exporter's textfile collector reads *.prom; one atomic rename per write)
    ("slurmkit_defrag_moves_total", "Jobs moved (checkpoint and requeue) by slurmkit defrag watch."),
    ("slurmkit_defrag_gpu_seconds_lost_total",
     "GPU-seconds the moves cost: work since each moved job's last checkpoint plus its restart time."),
    ("slurmkit_defrag_wait_saved_seconds_total",
     "Seconds the unblocked jobs started earlier than the running jobs' time limits would have let them."),
    ("slurmkit_defrag_unblocked_total", "Jobs blocked by fragmentation that defrag watch started."),
    ("slurmkit_defrag_failed_total", "Defrag actions rolled back (the blocked job did not start in time)."),
    ("slurmkit_defrag_holds_total",
     "Future reservations (holds) created for blocked jobs that moves alone could not start."),
    ("slurmkit_defrag_holds_released_total",
     "Holds given up: their job left the queue, started elsewhere, or did not start within defrag.hold_grace_s."),
)
HOLD_PREFIX = "slurmkit-hold-"
HOLD_KEYS = frozenset({"name", "job", "user", "leaf", "nodes", "start", "waits_for"})
METRICS_FILE = "slurmkit_defrag.prom"


# ---------------------------------------------------------------------------------------------- state file


@dataclass
class WatchState:
    moves: list[dict[str, Any]] = field(default_factory=list)  # {"t": epoch, "job": id, "for": blocked id}
    counters: dict[str, float] = field(default_factory=lambda: {n: 0.0 for n, _ in COUNTERS})
    # the future reservations kept for blocked jobs: {"name", "job", "user", "leaf", "nodes": [...], "start": epoch,
    # "waits_for": [...], "created": epoch}
    holds: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def load(cls, path: str) -> WatchState:
        """The state file, or a fresh state when there is none. A file that is not ours is an error (one line):
        starting over would forget the rate limits."""
        try:
            with open(path) as f:
                d = json.load(f)
        except FileNotFoundError:
            return cls()
        except (OSError, ValueError) as exc:
            raise SlurmkitError(f"{path}: unreadable defrag watch state ({exc}); move it away to start over") from exc
        if not isinstance(d, dict) or d.get("version") != STATE_VERSION or not isinstance(d.get("moves"), list):
            raise SlurmkitError(f"{path}: not a defrag watch state (version {STATE_VERSION}); move it away to start over")
        st = cls()
        st.moves = [m for m in d["moves"] if isinstance(m, dict) and "t" in m and "job" in m]
        st.counters.update({k: float(v) for k, v in (d.get("counters") or {}).items() if k in st.counters})
        st.holds = [h for h in d.get("holds") or [] if isinstance(h, dict) and HOLD_KEYS <= h.keys()]
        return st

    def save(self, path: str, now: float, keep_s: float) -> None:
        """Atomically (the old file or the new one, never half). A write that fails -- a full or read-only state
        disk -- is one StateWriteError line, and the temp file is gone (health.state.atomic_write)."""
        from slurmkit.health.state import atomic_write

        self.moves = [m for m in self.moves if now - float(m["t"]) < keep_s]
        try:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            atomic_write(path, json.dumps({"version": STATE_VERSION, "moves": self.moves, "counters": self.counters,
                                                     "holds": self.holds},
                                          indent=1, sort_keys=True) + "\n")
        except OSError as exc:
            raise StateWriteError(path, exc) from None

    def record_move(self, path: str, now: float, keep_s: float, job: str, blocked: str, cost: float) -> None:
        """Record a move before it is sent (carry_out's before_move): saved, or StateWriteError and the state as it
        was -- the caller then sends nothing. A move recorded whose send then fails stays counted: the rate limits
        err towards moving less."""
        entry = {"t": now, "job": job, "for": blocked}
        before = dict(self.counters)
        self.moves.append(entry)
        self.counters["slurmkit_defrag_moves_total"] += 1
        self.counters["slurmkit_defrag_gpu_seconds_lost_total"] += cost
        try:
            self.save(path, now, keep_s)
        except StateWriteError:
            self.moves.remove(entry)
            self.counters = before
            raise


class StateWriteError(SlurmkitError):
    """The defrag watch state could not be written (ENOSPC, EROFS, EIO ...): one line; the pass stops before it
    sends a move it could not record."""

    def __init__(self, path: str, exc: OSError):
        self.errno = exc.errno
        super().__init__(f"{path}: cannot write defrag watch state ({exc.strerror or exc}); no job moved: free the "
                         "disk, the next pass tries again")


# ---------------------------------------------------------------------------------------------- pure policy


def quiet_now(policy: Policy, minute_of_day: int) -> str | None:
    """The quiet-hours range ("22:00-06:00") the local minute falls in, else None. A range whose end is before its
    start wraps midnight; the end minute itself is no longer quiet."""
    for a, b in policy.quiet_hours:
        inside = a <= minute_of_day < b if a <= b else (minute_of_day >= a or minute_of_day < b)
        if inside:
            return f"{a // 60:02d}:{a % 60:02d}-{b // 60:02d}:{b % 60:02d}"
    return None


def moves_last_hour(state: WatchState, now: float) -> int:
    return sum(1 for m in state.moves if 0 <= now - float(m["t"]) < 3600)


def _last_moved(state: WatchState) -> dict[str, float]:
    last: dict[str, float] = {}
    for m in state.moves:
        last[str(m["job"])] = max(last.get(str(m["job"]), 0.0), float(m["t"]))
    return last


def movable_again(jobs: Sequence[RunningJob], state: WatchState, policy: Policy, now: float) -> dict[str, float]:
    """When each job that ``protect`` made unmovable may move again (its protection ends): plan_reservation's
    ``movable_from``."""
    last = _last_moved(state)
    return {j.job_id: last[j.job_id] + policy.protect_h * 3600 for j in jobs
            if not j.movable and j.job_id in last and now - last[j.job_id] < policy.protect_h * 3600
            and j.why_not.startswith("moved by")}


def protect(jobs: Sequence[RunningJob], state: WatchState, policy: Policy, now: float) -> list[RunningJob]:
    """Jobs moved within ``protect_h`` hours become unmovable, saying until when."""
    last = _last_moved(state)
    out = []
    for j in jobs:
        t = last.get(j.job_id)
        if j.movable and t is not None and now - t < policy.protect_h * 3600:
            until = datetime.fromtimestamp(t + policy.protect_h * 3600).strftime("%Y-%m-%dT%H:%M")
            j = replace(j, movable=False, why_not=f"moved by defrag watch, protected until {until}")
        out.append(j)
    return out


@dataclass(frozen=True)
class Pending:
    job_id: str
    partition: str
    qos: str
    user: str
    waited_s: float
    priority: int
    reason: str


def _epoch(v: str) -> float | None:
    try:
        return datetime.fromisoformat(v).timestamp()
    except ValueError:
        return None


def pending_jobs(details: str | Sequence[JobRecord], now: float) -> list[Pending]:
    """Every pending job of ``scontrol -o -d show job`` with how long it has been eligible (EligibleTime, else
    SubmitTime) and why it waits."""
    out = []
    for rec in job_table(details):
        if rec.get("JobState") != "PENDING" or "JobId" not in rec:
            continue
        since = _epoch(rec.get("EligibleTime", "")) or _epoch(rec.get("SubmitTime", "")) or now
        try:
            prio = int(rec.get("Priority", "0"))
        except ValueError:
            prio = 0
        out.append(Pending(rec["JobId"], rec.get("Partition", ""), rec.get("QOS", ""),
                           rec.get("UserId", "").split("(", 1)[0], max(0.0, now - since), prio,
                           rec.get("Reason", "")))
    return out


def candidates(pending: Iterable[Pending], policy: Policy) -> tuple[list[Pending], str]:
    """The pending jobs the policy acts for, highest priority (then longest wait) first, and a note of how many
    were left out and why (for the pass's line when nothing is done)."""
    out, skipped = [], {"partition": 0, "QOS": 0, "reason": 0, "wait": 0}
    for p in pending:
        if policy.partitions and not set(p.partition.split(",")) & policy.partitions:
            skipped["partition"] += 1
        elif policy.qos and p.qos not in policy.qos:
            skipped["QOS"] += 1
        elif p.reason not in WAITING_REASONS:
            skipped["reason"] += 1
        elif p.waited_s < policy.min_wait_s:
            skipped["wait"] += 1
        else:
            out.append(p)
    out.sort(key=lambda p: (-p.priority, -p.waited_s, p.job_id))
    words = {"partition": "other partition", "QOS": "other QOS", "reason": "not waiting for resources",
             "wait": f"waited < {policy.min_wait_s:.0f} s"}
    note = ", ".join(f"{n} {words[k]}" for k, n in skipped.items() if n)
    return out, note


def natural_start(topo: PlacementTopology, states: Mapping[str, NodeState], jobs: Sequence[RunningJob],
                  ends: Mapping[str, float], target: Target, now: float) -> float | None:
    """When the target could start without moves, if nothing else started first: the earliest time some leaf has
    ``target.nodes`` nodes that serve it, each node serving once the jobs on it reach their end time (their time
    limit). None when a job on every candidate node has no end time (UNLIMITED)."""
    on: dict[str, list[RunningJob]] = {}
    for j in jobs:
        for n in j.gpus:
            on.setdefault(n, []).append(j)
    best: float | None = None
    for members in topo.leaf_nodes:
        times = []
        for n in members:
            st = states.get(n)
            if st is None or not _serves(st, 0, 0, target):
                continue  # down, or too few GPUs even when empty
            here = on.get(n, [])
            if _serves(st, sum(j.gpus.get(n, 0) for j in here), len(here), target):
                times.append(now)
                continue
            t = max((ends.get(j.job_id, float("inf")) for j in here), default=now)
            if t != float("inf"):
                times.append(max(now, t))
        if len(times) >= target.nodes:
            t = sorted(times)[target.nodes - 1]
            best = t if best is None else min(best, t)
    return best


def job_ends(details: str | Sequence[JobRecord]) -> dict[str, float]:
    out = {}
    for rec in job_table(details):
        if rec.get("JobState") == "RUNNING" and "JobId" in rec:
            t = _epoch(rec.get("EndTime", ""))
            if t is not None:
                out[rec["JobId"]] = t
    return out


def hold_status(hold: Mapping[str, Any], details: str | Sequence[JobRecord], now: float, grace_s: float) -> tuple[str, str]:
    """What a kept hold needs this pass, and why: ``gone`` (its job left the queue), ``started`` (it runs: on the
    held nodes or elsewhere), ``overrun`` (still pending ``grace_s`` after the start), ``due`` (the start has come,
    or every job it waited for has ended: carry it out) or ``wait``."""
    from slurmkit import hostlist

    recs: dict[str, dict[str, str]] = {r["JobId"]: r for r in job_table(details) if "JobId" in r}
    job = str(hold["job"])
    rec = recs.get(job)
    state = rec.get("JobState", "") if rec else ""
    if rec is not None and state == "RUNNING":
        on = set(hostlist.expand(rec.get("NodeList", "")))
        where = "on the held nodes" if on and on <= set(hold["nodes"]) else f"elsewhere ({rec.get('NodeList', '')})"
        return "started", f"job {job} runs {where}"
    if state != "PENDING":
        return "gone", f"job {job} left the queue" + (f" ({state})" if state else "")
    if now > float(hold["start"]) + grace_s:
        return "overrun", (f"job {job} still pending {now - float(hold['start']):.0f} s after the hold's start "
                           f"(defrag.hold_grace_s {grace_s:.0f})")
    if now >= float(hold["start"]):
        return "due", "the hold's start has come"
    left = [w for w in hold["waits_for"] if recs.get(str(w), {}).get("JobState") == "RUNNING"]
    if not left:
        return "due", "the job(s) it waited for have ended"
    return "wait", f"waits for job(s) {', '.join(map(str, left))}"


@dataclass(frozen=True)
class Decision:
    act_for: Pending | None
    target: Target | None
    verdict: Verdict | None
    said: str  # the pass's line when it does nothing; the reason it acts otherwise


def decide(policy: Policy, state: WatchState, now: float, minute_of_day: int,
           pending: Callable[[], list[Pending]],
           plan_for: Callable[[Pending], tuple[Target, Verdict]]) -> Decision:
    """What one pass does. ``pending`` and ``plan_for`` are called only when quiet hours and the rate limit allow
    a move at all (a quiet pass reads nothing from Slurm)."""
    q = quiet_now(policy, minute_of_day)
    if q is not None:
        return Decision(None, None, None, f"quiet hours {q} (local time {minute_of_day // 60:02d}:"
                                          f"{minute_of_day % 60:02d}): nothing done")
    used = moves_last_hour(state, now)
    left = policy.max_moves_per_hour - used
    if left <= 0:
        return Decision(None, None, None, f"rate limit: {used} job(s) moved in the last hour "
                                          f"(defrag.max_moves_per_hour {policy.max_moves_per_hour}): nothing done")
    cands, note = candidates(pending(), policy)
    if not cands:
        return Decision(None, None, None, "no pending job to act for" + (f" ({note})" if note else "")
                        + ": nothing done")
    why: list[str] = []
    for p in cands:
        target, verdict = plan_for(p)
        if verdict.plan is None:
            why.append(f"job {p.job_id}: {verdict.reason}")
            continue
        n = len(verdict.plan.moves)
        if n > policy.max_moves_per_job:
            why.append(f"job {p.job_id}: the plan moves {n} job(s) (defrag.max_moves_per_job "
                       f"{policy.max_moves_per_job})")
            continue
        if n > left:
            why.append(f"job {p.job_id}: rate limit: the plan moves {n} job(s), {used} moved in the last hour "
                       f"(defrag.max_moves_per_hour {policy.max_moves_per_hour})")
            continue
        return Decision(p, target, verdict, f"job {p.job_id} ({p.partition}, QOS {p.qos}) waited "
                                            f"{p.waited_s:.0f} s: {verdict.reason}")
    shown = "; ".join(why[:3]) + (f"; and {len(why) - 3} more" if len(why) > 3 else "")
    return Decision(None, None, None, f"{shown}: nothing done")


def metrics_text(counters: Mapping[str, float], now: float) -> str:
    lines = []
    for name, help_ in COUNTERS:
        v = counters.get(name, 0.0)
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} counter", f"{name} {v:.17g}"]
    lines += ["# HELP slurmkit_defrag_last_pass_timestamp_seconds When defrag watch last finished a pass.",
              "# TYPE slurmkit_defrag_last_pass_timestamp_seconds gauge",
              f"slurmkit_defrag_last_pass_timestamp_seconds {now:.3f}"]
    return "\n".join(lines) + "\n"


def write_metrics(metrics_dir: str, counters: Mapping[str, float], now: float) -> None:
    from slurmkit.health.state import atomic_write

    target = os.path.join(metrics_dir, METRICS_FILE)
    try:
        atomic_write(target, metrics_text(counters, now), durable=False)
    except OSError as exc:
        raise SlurmkitError(f"{target}: cannot write the defrag metrics ({exc.strerror or exc})") from None


# ---------------------------------------------------------------------------------------------- the pass (edge)


@dataclass(frozen=True)
class Snapshot:
    details: str | Sequence[JobRecord]  # CLIBackend.job_details() (text: hand-written records, tests only)
    states: Mapping[str, NodeState]
    topo: PlacementTopology
    partitions: list[dict[str, str]]  # scontrol -o show partition records


def run_pass(snapshot: Callable[[], Snapshot], backend: Any, policy: Policy, state_path: str,
             metrics_dir: str | None, log: Callable[[str], None], timeout: float = 300.0, dry_run: bool = False,
             now: Callable[[], float] = time.time, minute_of_day: int | None = None) -> bool:
    """One pass; False when an action was rolled back. The state file is locked for the pass: a second watch (or
    a ``--once`` beside the service) says so and does nothing."""
    from slurmkit import hostlist
    from slurmkit.defrag.gather import running_jobs
    from slurmkit.defrag.plan import Hold, hold_note, plan_defrag, plan_reservation
    from slurmkit.health.state import LockTimeout, locked
    from slurmkit.placement.state import partition_nodes

    try:  # the state dir and the lock file, before anything is read or done: a disk that cannot take them is one line
        os.makedirs(os.path.dirname(state_path) or ".", exist_ok=True)
        os.close(os.open(state_path + ".lock", os.O_RDWR | os.O_CREAT, 0o644))
    except OSError as exc:
        raise StateWriteError(state_path + ".lock", exc) from None
    try:
        with locked(state_path + ".lock", timeout=0):
            t0 = now()
            minute = minute_of_day if minute_of_day is not None else (lambda d: d.hour * 60 + d.minute)(
                datetime.fromtimestamp(t0))
            state = WatchState.load(state_path)
            keep = max(3600.0, policy.protect_h * 3600)
            snap: list[Snapshot] = []

            def get_snap() -> Snapshot:
                if not snap:
                    snap.append(snapshot())
                return snap[0]

            def pending() -> list[Pending]:
                return pending_jobs(get_snap().details, t0)

            held = {str(h["job"]): h for h in state.holds}
            found: dict[str, tuple[Pending, Hold]] = {}

            def plan_for(p: Pending) -> tuple[Target, Verdict]:
                from slurmkit.defrag.gather import target_of

                s = get_snap()
                target, part = target_of(s.details, p.job_id)
                if p.job_id in held:  # its hold is carried out when due (the tending above)
                    h = held[p.job_id]
                    return target, Verdict(True, f"waits for its hold {h['name']} ({hostlist.fold(h['nodes'])} from "
                                                 f"{_when(float(h['start']))})")
                topo = s.topo.restrict(partition_nodes(s.partitions, part.split(",")[0])) if part else s.topo
                # the held nodes are neither a target nor a moved job's destination: the hold's reservation would
                # refuse another reservation there and a job that runs past its start
                taken = {n for h in state.holds for n in h["nodes"]}
                topo = topo.restrict(n for members in topo.leaf_nodes for n in members if n not in taken)
                states = {n: st for n, st in s.states.items() if n not in taken}
                jobs = protect(running_jobs(s.details, policy, now=t0), state, policy, t0)
                v = plan_defrag(topo, states, jobs, target)
                if v.blocked and v.plan is None:  # when a leaf comes free of what may not move: a hold from then
                    hold = plan_reservation(topo, states, jobs, job_ends(s.details), target, t0,
                                            max_moves=policy.max_moves_per_job,
                                            movable_from=movable_again(jobs, state, policy, t0))
                    if hold is not None:
                        v = replace(v, reason=f"{v.reason}; {hold_note(hold, topo.unit, t0)}")
                        found.setdefault(p.job_id, (p, hold))
                return target, v

            ok = True
            if state.holds:
                acted, ok = _tend_holds(get_snap, backend, policy, state, state_path, keep, log, timeout, t0, now,
                                        minute, dry_run)
                if acted:  # one action per pass: the next pass reads Slurm afresh
                    state.save(state_path, now(), keep)
                    if metrics_dir:
                        write_metrics(metrics_dir, state.counters, now())
                    return ok
            d = decide(policy, state, t0, minute, pending, plan_for)
            if d.act_for is None or d.verdict is None or d.verdict.plan is None or d.target is None:
                log(d.said)
                new = next(((p, h) for p, h in found.values() if h.start > t0), None)
                if new is not None and len(state.holds) < policy.max_holds:
                    if dry_run:
                        log(f"would hold {hostlist.fold(new[1].nodes)} for job {new[0].job_id} from "
                            f"{_when(new[1].start)}: dry run, nothing done")
                    else:
                        ok = _create_hold(new[0], new[1], backend, policy, state, log, timeout,
                                          lambda: state.save(state_path, now(), keep)) and ok
            elif dry_run:
                p = d.verdict.plan
                log(f"{d.said}; would move {', '.join(p.job_ids)} to free {p.leaf} ({p.cost:.0f} GPU-s): dry run, "
                    "nothing done")
            else:
                ok = _act(d, get_snap(), backend, policy, state, state_path, keep, log, timeout, t0, now)
            state.save(state_path, now(), keep)
            if metrics_dir:
                write_metrics(metrics_dir, state.counters, now())
            return ok
    except LockTimeout:
        log(f"another defrag watch pass holds {state_path}.lock: nothing done")
        return True


def _act(d: Decision, s: Snapshot, backend: Any, policy: Policy, state: WatchState, state_path: str, keep: float,
         log: Callable[[str], None], timeout: float, t0: float, now: Callable[[], float]) -> bool:
    from slurmkit import hostlist
    from slurmkit.defrag.gather import job_run_dir, running_jobs
    from slurmkit.defrag.run import DefragError, carry_out

    assert d.act_for is not None and d.verdict is not None and d.verdict.plan is not None and d.target is not None
    plan, blocked = d.verdict.plan, d.act_for.job_id
    log(f"{d.said}; moving {', '.join(plan.job_ids)} ({plan.cost:.0f} GPU-s) to free {plan.leaf} "
        f"({hostlist.fold(plan.nodes)})")
    recs: dict[str, dict[str, str]] = {r["JobId"]: r for r in job_table(s.details) if "JobId" in r}
    gpusub_jobs = {j for j in plan.job_ids if job_run_dir(recs.get(j, {}))}
    natural = natural_start(s.topo, s.states, running_jobs(s.details, policy, now=t0), job_ends(s.details),
                            d.target, t0)
    cost = {m.job_id: m.cost for m in plan.moves}

    def moving(job_id: str) -> None:  # recorded before the move is sent: a crash after it still counts it, and a
        # state disk that cannot take the record stops the move (StateWriteError, carry_out rolls back)
        state.record_move(state_path, now(), keep, job_id, blocked, cost.get(job_id, 0.0))

    try:
        nodes = carry_out(plan, blocked, d.act_for.user, gpusub_jobs, backend, log=log, timeout=timeout,
                          before_move=moving)
    except DefragError as exc:
        state.counters["slurmkit_defrag_failed_total"] += 1
        log(exc.one_line())
        return False
    started = now()
    state.counters["slurmkit_defrag_unblocked_total"] += 1
    saved = max(0.0, natural - started) if natural is not None else 0.0
    state.counters["slurmkit_defrag_wait_saved_seconds_total"] += saved
    log(f"job {blocked} started on {nodes}; " + (f"{saved:.0f} s before the time limits would have freed a "
                                                  f"{s.topo.unit}" if natural is not None else
                                                  "no time limit bounds its wait: no wait saved counted"))
    return True


# ---------------------------------------------------------------------------------------------- holds (edge)


def _when(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%dT%H:%M:%S")


def _create_hold(p: Pending, hold: Any, backend: Any, policy: Policy, state: WatchState, log: Callable[[str], None],
                 timeout: float, save: Callable[[], None]) -> bool:
    """Reserve the hold's nodes for the job's user from the hold's start. Why this keeps the leaf: Slurm starts a
    job outside a reservation on its nodes only when the job's time limit ends before the reservation starts
    (src/slurmctld/reservation.c job_test_resv, 22.05 and 24.11; doc/html/reservations.shtml "only jobs that can
    complete by the reservation time will be initiated"); IGNORE_JOBS lets it cover jobs that still run there
    (scontrol(1)). The job is not put into the reservation yet, so it may still start elsewhere earlier. The
    reservation lasts the grace period plus the start timeout (and 5 minutes): a watch that dies leaves nothing
    behind for long."""
    import math

    from slurmkit import hostlist

    name = HOLD_PREFIX + p.job_id
    start = math.ceil(hold.start)
    minutes = math.ceil((policy.hold_grace_s + timeout) / 60) + 5
    nodes = hostlist.fold(hold.nodes)
    # recorded first, then created: a state disk that cannot take the record stops it (StateWriteError, no
    # reservation made); a watch that dies in between finds a hold with no reservation and drops it (_tend_holds)
    entry = {"name": name, "job": p.job_id, "user": p.user, "leaf": hold.leaf, "nodes": list(hold.nodes),
             "start": float(start), "waits_for": list(hold.waits_for), "created": time.time()}
    state.holds.append(entry)
    try:
        save()
    except StateWriteError:
        state.holds.remove(entry)
        raise
    try:
        backend.create_reservation(ReservationName=name, StartTime=_when(start), Duration=str(minutes), Nodes=nodes,
                                   Users=p.user, Flags="IGNORE_JOBS")
    except SlurmkitError as exc:
        state.holds.remove(entry)
        log(f"could not hold {nodes} for job {p.job_id}: {exc.one_line()}")
        state.counters["slurmkit_defrag_failed_total"] += 1
        return False
    state.counters["slurmkit_defrag_holds_total"] += 1
    waits = f", after job(s) {', '.join(hold.waits_for)}" if hold.waits_for else ""
    log(f"reserved {nodes} ({hold.leaf}) as {name} from {_when(start)} for {minutes} min for job {p.job_id} "
        f"(user {p.user}){waits}: jobs that would run past {_when(start)} stay off those nodes")
    return True


def _release_hold(h: Mapping[str, Any], backend: Any, log: Callable[[str], None], why: str) -> bool:
    """Delete a hold's reservation (never the job's: it was not put into it). True when it is gone (also when it
    was already gone: ``Requested reservation is invalid``, src/common/slurm_errno.c ESLURM_RESERVATION_INVALID,
    22.05 and 24.11)."""
    try:
        backend.delete_reservation(str(h["name"]))
    except SlurmkitError as exc:
        msg = exc.one_line()
        if "invalid" not in msg.lower() and "not found" not in msg.lower():
            log(f"could not release {h['name']} ({why}): {msg}; tried again next pass")
            return False
    log(f"released {h['name']}: {why}")
    return True


def _tend_holds(get_snap: Callable[[], Snapshot], backend: Any, policy: Policy, state: WatchState, state_path: str,
                keep: float, log: Callable[[str], None], timeout: float, t0: float, now: Callable[[], float],
                minute: int, dry_run: bool) -> tuple[bool, bool]:
    """Each kept hold: released when its job is gone, runs, or overran the grace period; carried out when due.
    -> (carried one out, ok)."""
    from slurmkit import hostlist

    s = get_snap()
    ok = True
    for h in list(state.holds):
        what, why = hold_status(h, s.details, t0, policy.hold_grace_s)
        if dry_run:
            log(f"hold {h['name']} for job {h['job']}: {what} ({why}): dry run, nothing done")
            continue
        if what in ("gone", "started", "overrun"):
            inside = what == "started" and "elsewhere" not in why
            if inside:  # only after a watch died inside carry_out: a reservation in use is not deleted (run.py)
                try:
                    backend.update_job(str(h["job"]), ReservationName="")
                except SlurmkitError as exc:
                    log(f"could not clear job {h['job']}'s reservation: {exc.one_line()}")
            if _release_hold(h, backend, log, why):
                state.holds.remove(h)
                state.counters["slurmkit_defrag_holds_released_total"] += 0 if inside else 1
                if what == "overrun":
                    state.counters["slurmkit_defrag_failed_total"] += 1
                    ok = False
        elif what == "wait":
            log(f"hold {h['name']} ({hostlist.fold(h['nodes'])} from {_when(float(h['start']))}) for job {h['job']}: "
                f"{why}")
        else:
            return _execute_hold(h, why, s, backend, policy, state, state_path, keep, log, timeout, t0, now, minute)
    return False, ok


def _execute_hold(h: dict[str, Any], why: str, s: Snapshot, backend: Any, policy: Policy, state: WatchState,
                  state_path: str, keep: float, log: Callable[[str], None], timeout: float, t0: float,
                  now: Callable[[], float], minute: int) -> tuple[bool, bool]:
    """The hold is due: plan the moves on its nodes again (the state now, not the one at its creation), within the
    policy's limits, and carry them out through ``defrag run``'s path with the hold's reservation; the job then
    starts in it and the reservation is removed (carry_out). Moves that the limits forbid now, or a job that may not
    move still there, keep the hold for a later pass (until the grace period ends)."""
    from slurmkit import hostlist
    from slurmkit.defrag.gather import job_run_dir, running_jobs, target_of
    from slurmkit.defrag.plan import DefragPlan, plan_defrag
    from slurmkit.defrag.run import DefragError, carry_out

    job, name = str(h["job"]), str(h["name"])
    target, _part = target_of(s.details, job)
    jobs = protect(running_jobs(s.details, policy, now=t0), state, policy, t0)
    v = plan_defrag(s.topo.restrict(h["nodes"]), s.states, jobs, target)
    if not v.blocked and v.reason.startswith("not blocked"):
        plan = DefragPlan(str(h["leaf"]), tuple(h["nodes"]), (), 0.0)
    elif v.plan is None:
        log(f"hold {name} for job {job}: due ({why}), but {v.reason}; kept until "
            f"{_when(float(h['start']) + policy.hold_grace_s)}")
        return False, True
    else:
        plan = v.plan
        n, used = len(plan.moves), moves_last_hour(state, t0)
        q = quiet_now(policy, minute)
        limit = (f"quiet hours {q}" if q else
                 f"the plan moves {n} job(s) (defrag.max_moves_per_job {policy.max_moves_per_job})"
                 if n > policy.max_moves_per_job else
                 f"rate limit: {used} job(s) moved in the last hour (defrag.max_moves_per_hour "
                 f"{policy.max_moves_per_hour})" if used + n > policy.max_moves_per_hour else "")
        if limit:
            log(f"hold {name} for job {job}: due ({why}), {limit}; kept until "
                f"{_when(float(h['start']) + policy.hold_grace_s)}")
            return False, True
    if float(h["start"]) > t0:  # the jobs it waited for ended early: start the reservation now (not yet ACTIVE, so
        # its StartTime may change: scontrol(1) 22.05 and 24.11)
        try:
            backend.update_reservation(name, StartTime="now")
        except SlurmkitError as exc:
            log(f"hold {name} for job {job}: due ({why}), but its start could not be moved to now: "
                f"{exc.one_line()}; kept")
            return False, True
        log(f"{name} starts now ({why})")
    moves = f"moving {', '.join(plan.job_ids)} ({plan.cost:.0f} GPU-s)" if plan.moves else "nothing to move"
    log(f"hold {name} for job {job} is due ({why}): {moves}, then job {job} runs in it on {hostlist.fold(plan.nodes)}")
    recs: dict[str, dict[str, str]] = {r["JobId"]: r for r in job_table(s.details) if "JobId" in r}
    gpusub_jobs = {j for j in plan.job_ids if job_run_dir(recs.get(j, {}))}
    cost = {m.job_id: m.cost for m in plan.moves}

    def moving(job_id: str) -> None:  # recorded before it is sent, as in _act
        state.record_move(state_path, now(), keep, job_id, job, cost.get(job_id, 0.0))

    state.holds.remove(h)  # carry_out removes the reservation whatever happens
    try:
        nodes = carry_out(plan, job, str(h["user"]), gpusub_jobs, backend, log=log, timeout=timeout,
                          before_move=moving, reservation=name)
    except DefragError as exc:
        state.counters["slurmkit_defrag_failed_total"] += 1
        log(exc.one_line())
        return True, False
    state.counters["slurmkit_defrag_unblocked_total"] += 1
    log(f"job {job} started on {nodes} (held since {_when(float(h.get('created', t0)))})")
    return True, True
