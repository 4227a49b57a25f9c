"""Spare capacity now against the plan (issue 39 item 2; `slurmkit report reserve`): per node group, the nodes that
could take a peak or a maintenance swap this minute -- healthy (no drain, not down, responding, no slurmkit health
reason) and idle, powered up or powered down (``idle~``: Slurm resumes such a node for a job, slurm.conf(5)
SuspendProgram/ResumeProgram) -- against ``capacity.reserve_pct`` of the group's nodes (default 15 %).

Pure: node records in, counts out (the CLI asks slurmctld once, ``scontrol show node``)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from slurmkit.model.cluster import Cluster

# flags that make an idle node no spare (it cannot take work now, or is about to go); POWERED_DOWN is not one of them.
# BLOCKED (24.11+, IDLE+BLOCKED): sinfo(1) at slurm-24-11-5-1 and slurm-26-05-3-1 "The node has been blocked by
# exclusive topo job" -- no other job lands on it while that job runs
_NOT_SPARE = frozenset({"DRAIN", "NOT_RESPONDING", "FAIL", "INVALID_REG", "MAINTENANCE", "REBOOT_REQUESTED",
                        "REBOOT_ISSUED", "POWERING_DOWN", "POWER_DOWN", "COMPLETING", "POWERING_UP", "PLANNED",
                        "RESERVED", "BLOCKED"})


@dataclass(frozen=True)
class GroupReserve:
    group: str
    nodes: int  # the group's nodes Slurm knows
    idle_up: int  # healthy, idle, powered
    idle_down: int  # healthy, idle, powered down (resumed for a job)
    planned: int  # ceil(reserve_pct x nodes)

    @property
    def spare(self) -> int:
        return self.idle_up + self.idle_down

    @property
    def below_plan(self) -> bool:
        return self.spare < self.planned

    def to_json(self) -> dict[str, object]:
        return {"group": self.group, "nodes": self.nodes, "spare": self.spare, "idle_powered_up": self.idle_up,
                "idle_powered_down": self.idle_down, "planned": self.planned, "below_plan": self.below_plan}


class NodeLike(Protocol):
    """What backend.parse.NodeInfo gives: name, base state (lower case), flags, reason."""

    @property
    def name(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def flags(self) -> frozenset[str]: ...
    @property
    def reason(self) -> str: ...


def is_spare(n: NodeLike) -> bool:
    if n.state != "idle" or n.flags & _NOT_SPARE:
        return False
    from slurmkit.placement.state import HEALTH_REASON_PREFIX

    return not (n.reason or "").startswith(HEALTH_REASON_PREFIX)


def reserve(cluster: Cluster | None, nodes: Iterable[NodeLike], reserve_pct: float | None = None) -> list[GroupReserve]:
    """Per node group of the inventory (nodes no group names go to "(other)"), or one group "all" without one."""
    pct = reserve_pct if reserve_pct is not None else (cluster.capacity.reserve_pct if cluster else 15.0)
    group_of: dict[str, str] = {}
    order: list[str] = []
    if cluster is not None:
        for ng in cluster.node_groups:
            order.append(ng.name)
            for h in ng.hostnames:
                group_of[h] = ng.name
    counts: dict[str, list[int]] = {}
    for n in nodes:
        g = group_of.get(n.name, "(other)" if cluster is not None else "all")
        c = counts.setdefault(g, [0, 0, 0])
        c[0] += 1
        if is_spare(n):
            c[2 if "POWERED_DOWN" in n.flags else 1] += 1
    names = [g for g in order if g in counts] + sorted(g for g in counts if g not in order)
    return [GroupReserve(g, counts[g][0], counts[g][1], counts[g][2], planned(counts[g][0], pct)) for g in names]


def planned(nodes: int, pct: float) -> int:
    """The plan rounds up: a 15 % reserve of 4 nodes is 1 node, not 0.6."""
    return math.ceil(pct / 100 * nodes - 1e-9)


def plan_change(before: Cluster, after: Cluster) -> list[str]:
    """What `slurmkit nodes add|remove` does to each group's planned reserve (a line per group whose size changes)."""
    pct = after.capacity.reserve_pct
    b = {g.name: len(g.hostnames) for g in before.node_groups}
    a = {g.name: len(g.hostnames) for g in after.node_groups}
    out = []
    for name in [*a, *(n for n in b if n not in a)]:
        nb, na = b.get(name, 0), a.get(name, 0)
        if nb != na:
            out.append(f"reserve of group {name}: {nb} -> {na} node(s), planned spare {planned(nb, pct)} -> "
                       f"{planned(na, pct)} (capacity.reserve_pct {pct:g}%, rounded up; `slurmkit report reserve` "
                       "counts the spare now)")
    return out


def table(rows: list[GroupReserve], pct: float) -> Iterator[str]:
    yield f"spare capacity now, plan {pct:g}% of each group's nodes"
    yield f"{'group':<20} {'nodes':>6} {'spare':>6} {'up':>5} {'down~':>6} {'planned':>8}"
    for r in rows:
        yield (f"{r.group[:20]:<20} {r.nodes:>6} {r.spare:>6} {r.idle_up:>5} {r.idle_down:>6} {r.planned:>8}"
               f"{'  below plan' if r.below_plan else ''}")
    yield "spare: healthy idle nodes, powered up or down (idle~: resumed for a job); planned: capacity.reserve_pct"
    if any(r.idle_down for r in rows):
        # power saving keeps a spare a spare but makes it cold: slurmctld resumes it for the job that needs it, and
        # that job starts once the node has booted and registered, within the group's ResumeTimeout
        # (slurm.conf(5) ResumeTimeout; power.resume_timeout in the inventory)
        yield "down~ spares are powered off by power saving: a job on one waits for its boot (up to ResumeTimeout)"
