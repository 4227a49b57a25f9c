"""What the cluster looks like to *this* job right now, for placement to decide on (pure).

A ``--nodelist`` pin is a promise that the job can start on exactly those nodes: sbatch(1) (22.05 and 24.11)
says the job "will contain *all* of these hosts", so a pin on a node that cannot be had leaves the job pending
while other nodes stay idle. Node states alone do not make that promise true:

* a job submitted a moment ago is still PENDING (reason None) and its nodes still read IDLE until the next
  scheduling pass: when it is pinned, its nodes are *promised* and this job treats them as busy; when it is not
  pinned, it may take any free node of its partitions, so nothing can be promised to this job (no pin: Slurm
  places it, with ``--switches`` on a tree);
* a reservation owns its nodes from its StartTime to its EndTime: a job that does not run in it cannot use those
  nodes if its time limit reaches into the reservation (an active one, or one that starts before the job would
  end), and a job that asks for a reservation may use only its nodes (scontrol(1) reservation flags: not with
  ``FLEX``, which lets a job use nodes outside; ``ANY_NODES`` reserves licenses/burst buffers, not nodes), and
  cannot start before it does;
* ``--exclude`` and ``--constraint`` remove nodes; ``--nodelist`` is the user's own choice and is never replaced.

Pending jobs waiting for something other than nodes (a dependency, a begin time, a hold, an association or QOS
limit, a partition that is down) take no node now and are not counted (the reason strings of
src/common/slurm_protocol_defs.c job_state_reason_string, 22.05 and 24.11); an unknown reason counts as waiting
for nodes, which can only mean "no pin", never a pin on a node that is not free.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from slurmkit.errors import UsageError
from slurmkit.jobs.spec import ClusterFacts, JobSpec, parse_time_minutes

# pending reasons that take no node now: prefixes of Slurm's reason strings
_NOT_WAITING_FOR_NODES = (
    "Dependency", "BeginTime", "JobHeld", "Assoc", "QOS", "Partition", "InvalidAccount", "InvalidQOS",
    "AccountingPolicy", "BadConstraints", "JobArrayTaskLimit", "Reservation", "Licenses", "launch failed",
    "MaxRequeue", "DependencyNeverSatisfied",
)
_FEATURE = r"[A-Za-z0-9_.:+-]+"
_AND = re.compile(rf"^{_FEATURE}(?:&{_FEATURE})*$")
_OR = re.compile(rf"^{_FEATURE}(?:\|{_FEATURE})+$")


@dataclass(frozen=True)
class LiveView:
    unusable: dict[str, str]  # node -> why this job cannot run there now
    promised: dict[str, str]  # node -> the pending job pinned to it (busy for placement)
    allowed: frozenset[str] | None  # the only nodes the job may use (its reservation), None: no such limit
    pin_blocker: str  # why no pin may be placed ("" when a pin is fine)
    notes: tuple[str, ...] = ()


def waits_for_nodes(reason: str) -> bool:
    return not reason.startswith(_NOT_WAITING_FOR_NODES)


def job_seconds(spec: JobSpec, facts: ClusterFacts) -> float | None:
    """The time limit the job will get (seconds): --time, else the partition's DefaultTime, else its MaxTime
    (slurm.conf(5) DefaultTime: "If not set, MaxTime is used"); None: no limit."""
    for t in (spec.time, facts.default_time, facts.max_time):
        if t:
            minutes = parse_time_minutes(t)
            return None if minutes is None else minutes * 60.0
    return None


def _when(epoch: float) -> str:
    return datetime.fromtimestamp(epoch).strftime("%Y-%m-%dT%H:%M:%S")


def live_view(spec: JobSpec, facts: ClusterFacts, own_job: str | None = None) -> LiveView:
    """The nodes this job cannot use now, the nodes promised to earlier pending jobs, and whether a pin may be
    placed at all. ``own_job``: the job itself, once submitted (its own pending record is not a competitor;
    only jobs submitted before it count)."""
    unusable: dict[str, str] = {}
    promised: dict[str, str] = {}
    blockers: list[str] = []
    notes: list[str] = []
    allowed: frozenset[str] | None = None
    now = facts.live_at
    own_number = int(own_job.split("_", 1)[0]) if own_job and own_job.split("_", 1)[0].isdigit() else None

    if spec.exclude:
        from slurmkit import hostlist

        for n in hostlist.expand(spec.exclude, "--exclude"):
            unusable[n] = "--exclude"
    if spec.nodelist:
        blockers.append("the nodes are the user's --nodelist")
    if spec.begin:
        blockers.append("--begin: the job starts later")
    if spec.hold:
        blockers.append("--hold: the job starts when released")
    if not spec.pass_through_neutral:
        blockers.append("an --sbatch-arg may change which nodes fit")

    if spec.constraint:
        feats = dict(facts.node_features)
        if _AND.match(spec.constraint):
            need = set(spec.constraint.split("&"))
            for n, have in feats.items():
                if not need <= set(have):
                    unusable.setdefault(n, f"lacks --constraint {spec.constraint}")
        elif _OR.match(spec.constraint):
            anyof = set(spec.constraint.split("|"))
            for n, have in feats.items():
                if not anyof & set(have):
                    unusable.setdefault(n, f"lacks --constraint {spec.constraint}")
        else:
            blockers.append(f"--constraint {spec.constraint} is beyond what placement reads (counts, brackets)")

    # reservations (scontrol(1) of slurm-22-05-8-1 and slurm-24-11-5-1: CREATING A RESERVATION, Flags)
    seconds = job_seconds(spec, facts)
    job_end = float("inf") if seconds is None else now + seconds
    mine = None
    if spec.reservation:
        mine = next((r for r in facts.reservations if r.name == spec.reservation), None)
        if mine is None and facts.live_at:
            known = ", ".join(sorted(r.name for r in facts.reservations)) or "none"
            raise UsageError(f"--reservation: {spec.reservation!r} does not exist (reservations: {known})")
        if mine is not None and not mine.flags & {"FLEX", "ANY_NODES"}:
            allowed = frozenset(mine.nodes)
            if mine.start > now:
                blockers.append(f"reservation {mine.name} starts at {_when(mine.start)}")
    for r in facts.reservations:
        if r is mine or "ANY_NODES" in r.flags or r.end <= now or r.start >= job_end:
            continue
        why = (f"in reservation {r.name} (until {_when(r.end)})" if r.start <= now
               else f"reservation {r.name} starts {_when(r.start)}, before the job's time limit would end")
        for n in r.nodes:
            unusable.setdefault(n, why)

    contenders: list[str] = []
    ours = frozenset(n for n, _ in facts.node_gpus) or None
    by_name = {r.name: r for r in facts.reservations}
    for job, may in facts.pending:
        if own_job is not None and (job.job_id == own_job or (own_number is not None and job.number >= own_number)):
            continue  # itself, or submitted after it: this job was there first
        if not waits_for_nodes(job.reason):
            continue
        theirs = by_name.get(job.reservation)
        if theirs is not None and not theirs.flags & {"FLEX", "ANY_NODES"}:
            may = may & frozenset(theirs.nodes)  # a job in a reservation runs on its nodes only
        if ours is not None:
            may = may & ours
        if allowed is not None:
            may = may & allowed
        if not may:
            continue  # it cannot take any node this job could use
        if job.req_nodes:
            for n in job.req_nodes:
                promised.setdefault(n, job.job_id)
        else:
            contenders.append(job.job_id)
    if contenders:
        shown = ", ".join(contenders[:3]) + (f" (+{len(contenders) - 3})" if len(contenders) > 3 else "")
        blockers.append(f"pending job(s) {shown} may take any free node first")
    if promised:
        jobs = sorted(set(promised.values()))
        notes.append(f"nodes promised to pending pinned job(s) {', '.join(jobs[:3])} are left to them")
    return LiveView(unusable=unusable, promised=promised, allowed=allowed, pin_blocker="; ".join(blockers),
                    notes=tuple(notes))


def pin_conflicts(spec: JobSpec, facts: ClusterFacts, own_job: str, pin: frozenset[str], gpus_per_node: int,
                  *, any_order: bool = False) -> list[str]:
    """Why the queued job ``own_job``, pinned to ``pin``, may not get its nodes (one entry each; [] when the pin
    holds). ``facts``: read after the job was queued.

    * a pinned node is busy (not idle, or mixed without room for the job's GPUs or with ``--exclusive``);
    * another pending job is pinned to one of them: one submitted before this job (it has the higher priority and
      keeps them), or with ``any_order`` any other (this job moved its pin after its submission: a job queued
      meanwhile saw the old pin, not the new one, when it checked its own);
    * a pending job submitted before this one that waits for nodes without a pin may take any of them first: Slurm
      schedules it first and places it without regard to this pin (seen on the lab: the later job of two racing
      -N 4 runs cleared its pin, took the leaf a -N 2 job had pinned meanwhile, and that job waited with a whole
      leaf idle)."""
    from slurmkit.placement.state import engine_state

    out: list[str] = []
    for name, state, flags, free, _total in facts.live_nodes:
        if name not in pin:
            continue
        st = engine_state(state, flags)
        if st not in ("idle", "mixed") or (st == "mixed" and spec.exclusive) or free < gpus_per_node:
            out.append(f"{name} (busy)")
    own_number = int(own_job.split("_", 1)[0]) if own_job.split("_", 1)[0].isdigit() else None
    by_name = {r.name: r for r in facts.reservations}
    for job, may in facts.pending:
        if job.job_id == own_job or not waits_for_nodes(job.reason):
            continue
        earlier = own_number is not None and job.number < own_number
        theirs = by_name.get(job.reservation)
        if theirs is not None and not theirs.flags & {"FLEX", "ANY_NODES"}:
            may = may & frozenset(theirs.nodes)
        hit = sorted(pin & may)
        if not hit:
            continue
        if job.req_nodes and (earlier or any_order):
            out += [f"{n} (pinned by job {job.job_id})" for n in hit if n in job.req_nodes]
        elif not job.req_nodes and earlier:
            out.append(f"job {job.job_id}, queued earlier without a pin, may take {','.join(hit)}")
    return out
