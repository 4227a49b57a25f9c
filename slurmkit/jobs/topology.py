"""--topology auto|off|strict through the placement engine (slurmkit.placement): pure.

* ``auto``: the engine places the job on the nodes this job can have now (live node states, less what
  jobs/liveplace.py removes: excluded, reserved, featureless nodes, and nodes promised to pending pinned jobs).
  When every node it chose is idle right now and nothing else may take them first (no pending job that could take
  any free node, no --begin/--hold, the job's reservation active), those nodes are pinned (``--nodelist``): the
  engine's best fit, on as few leaves as possible, keeping whole leaves free. Otherwise (nodes partly used, a
  competitor in the queue, or no live states) gpusub asks Slurm for the same number of leaf switches
  (``--switches=K@5:00``) rather than pin nodes that may not be free. After the submission gpusub checks the pin
  once more (jobs/submit.py check_pin): when an earlier job took the nodes meanwhile it moves the pin to free nodes
  no other job is pinned to (and checks again), or clears it where none are free.
* ``strict``: the job must get the engine's ideal span (the fewest leaves it can occupy on an empty cluster).
  When a placement with that span exists now its nodes are pinned (``--nodelist``: the engine's best fit,
  which keeps whole leaves for big jobs); otherwise the job waits for that span (``--switches=K@<limit>``,
  which Slurm caps at SchedulerParameters=max_switch_wait, 300 s by default).
* ``off``: nothing is added; Slurm places the job.

A ``--nodelist`` is right only at the moment it is computed, so it is used only for a single submission that can
start now: an array (its tasks would queue one after another on the same pinned nodes), or a job with a
``--dependency`` (it starts after another job ends, on whatever is free then), gets ``--switches`` (tree) or
nothing instead. A pinned job is requeued after a preemption: its batch script clears the pin
(``scontrol update ReqNodeList=``) right after ``scontrol requeue``, so the next attempt is placed afresh instead
of waiting for a node that was drained meanwhile (``pinned`` tells the template to do so).

``--switches`` exists only with topology/tree; with topology/block (23.11+) the engine's plan is printed but no
directive is added (``--segment`` is for the block plugin and depends on the site's BlockSizes).
"""

from __future__ import annotations

from dataclasses import dataclass

from slurmkit.errors import UsageError
from slurmkit.jobs.spec import ClusterFacts, JobSpec

SWITCH_WAIT = "05:00"  # Slurm's own default wait for --switches; the engine already found the span possible


@dataclass(frozen=True)
class TopologyPlan:
    directives: tuple[str, ...]
    summary: str

    @property
    def pinned(self) -> bool:
        return any(d.startswith("--nodelist=") for d in self.directives)


def _topology(facts: ClusterFacts):  # type: ignore[no-untyped-def]
    from slurmkit.placement import PlacementTopology

    if facts.topo_placement is not None:
        topo = facts.topo_placement
    elif facts.topo_model is not None and (facts.topo_model.switches or facts.topo_model.blocks):
        topo = PlacementTopology.from_model(facts.topo_model)
    elif facts.topo_records:
        topo = PlacementTopology.from_records(facts.topo_records)
    else:
        return None
    # the partition's nodes only (a partition may be a subset of the fabric)
    return topo.restrict(n for n, _ in facts.node_gpus) if facts.node_gpus else topo


def plan_topology(spec: JobSpec, facts: ClusterFacts, gpus: int) -> TopologyPlan:
    if spec.topology == "off":
        return TopologyPlan((), "topology: off")
    topo = _topology(facts)
    if topo is None:
        if spec.topology == "strict":
            raise UsageError("--topology strict: the cluster reports no switch topology")
        return TopologyPlan((), "topology: none known, Slurm places the nodes")
    if spec.nodes > len(topo.nodes):
        raise UsageError(f"--nodes {spec.nodes}: the partition has {len(topo.nodes)} node(s) in its topology")
    from slurmkit.jobs.liveplace import live_view
    from slurmkit.placement import NodeState, Request, ideal_span, place
    from slurmkit.placement.state import engine_state

    view = live_view(spec, facts)
    if facts.live_nodes:
        states = [NodeState(n, engine_state(s, fl), min(free, total), total) for n, s, fl, free, total in facts.live_nodes
                  if n in topo.node_index]
        live = ""
    else:  # no live node states (a dry run with --no-query, or Slurm not answering): plan against an empty cluster
        states = [NodeState(n, "idle", g, g) for n, g in facts.node_gpus if n in topo.node_index]
        live = " (no live node states: planned on an idle cluster; nothing pinned)"
    # what this job cannot use now: excluded, reserved, lacking a feature, outside its reservation -> down; nodes
    # promised to earlier pending pinned jobs -> busy (jobs/liveplace.py)
    for i, st in enumerate(states):
        if st.name in view.unusable or (view.allowed is not None and st.name not in view.allowed):
            states[i] = NodeState(st.name, "down", 0, st.total_gpus)
        elif st.name in view.promised:
            states[i] = NodeState(st.name, "allocated", 0, st.total_gpus)
    request = Request(nodes=spec.nodes, gpus_per_node=gpus, exclusive=spec.exclusive)
    ideal = ideal_span(topo, spec.nodes)
    if ideal is None:
        raise UsageError(f"--nodes {spec.nodes} do not fit under any one switch (the fabrics are not connected)")
    ideal_level, ideal_leaves = ideal
    p = place(topo, states, request)
    tree = topo.kind == "tree"
    # a pin is valid only now: never for an array or a job that waits for another (module docstring), nor where
    # the live view cannot promise the nodes (jobs/liveplace.py)
    single = not spec.array and not spec.dependency
    why_not = "; ".join(x for x in (
        "" if single else f"{'an array' if spec.array else 'a dependent job'} starts later",
        view.pin_blocker, "" if facts.live_nodes else "no live node states") if x)
    later = f" (not pinned: {why_not})" if why_not else ""
    notes = "".join(f"; {n}" for n in view.notes)
    if spec.nodelist:  # the user's own pin: placement adds nothing
        return TopologyPlan((), f"placement: the nodes given by --nodelist {spec.nodelist}; Slurm places within them"
                            + live)
    if spec.topology == "strict":
        if not why_not and p is not None and len(p.leaves) <= ideal_leaves and p.level <= ideal_level:
            return TopologyPlan((f"--nodelist={p.nodelist}",),
                                f"placement (strict): {p.summary()}; pinned --nodelist={p.nodelist}{notes}{live}")
        wait = _long_wait(spec, facts)
        directive = (f"--switches={ideal_leaves}@{wait}",) if tree else ()
        what = "is not free now" if single else "is asked for when the job becomes eligible"
        return TopologyPlan(directive, f"placement (strict): the ideal span ({ideal_leaves} leaf/leaves) {what}: "
                                       f"waiting for it" + (f" (--switches={ideal_leaves}@{wait})" if tree else "")
                            + later + notes + live)
    if p is None:
        directive = (f"--switches={ideal_leaves}@{SWITCH_WAIT}",) if tree else ()
        return TopologyPlan(directive, f"placement: not enough free nodes now; asking for the ideal span of "
                                       f"{ideal_leaves} leaf/leaves" + notes + live)
    idle_now = bool(facts.live_nodes) and all(s.state == "idle" for s in states if s.name in set(p.nodes))
    if spec.nodes > 1 and idle_now and not why_not:
        directive = (f"--nodelist={p.nodelist}",)
    elif tree and spec.nodes > 1:
        directive = (f"--switches={len(p.leaves)}@{SWITCH_WAIT}",)
        if not later and not idle_now:
            later = " (not pinned: the nodes are partly in use)"
    else:
        directive = ()
    return TopologyPlan(directive, f"placement: {p.summary()}" + (f"; {directive[0]}" if directive else "") + later
                        + notes + live)


def _long_wait(spec: JobSpec, facts: ClusterFacts) -> str:
    wait = spec.time or facts.max_time or "1-00:00:00"
    return "1-00:00:00" if wait.upper() in ("UNLIMITED", "INFINITE") else wait
