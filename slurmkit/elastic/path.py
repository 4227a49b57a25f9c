"""How a release takes nodes that join or leave: the least disruptive path, with the documents that say so.

Pure: the release and the topology in, a ``Path`` out (what will be done, and why, in words the command prints
before it does anything).
"""

from __future__ import annotations

from dataclasses import dataclass

from slurmkit.generate.rollout import RECONFIGURE, rule

RESTART_CTLD = "restart-ctld"

# Why not dynamic nodes (`slurmd -Z`): they are not in slurm.conf, so the inventory and the generated files would
# stop describing the cluster; and with a topology they save nothing. dynamic_nodes.shtml of slurm-24-11-5-1,
# Limitations: "When non-default topology options are in use ... Dynamic nodes must be added to topology.conf; The
# slurmctld must be restarted or reconfigured". 22.05's page requires "TreeWidth=65533" (no fan-out) and
# MaxNodeCount, and measured on 22.05 (issue 14) a dynamic node under any topology plugin cannot be scheduled
# ("Requested node configuration is not available"); 22.05 also refuses Port= in `slurmd --conf`.
WHY_NOT_DYNAMIC = ("static NodeName lines, not dynamic nodes (slurmd -Z): the inventory stays the description of the "
                   "cluster, and with a topology dynamic nodes must be in topology.conf and need the same "
                   "reconfigure or restart anyway (dynamic_nodes.shtml, Limitations)")
# From 25.11 dynamic nodes join topologies at run time (dynamic_nodes.shtml of slurm-25-11-0-1, "Topology": "Nodes
# can be dynamically added to and removed from topologies as described in the Topology Guide"; `scontrol update
# NodeName=... Topology=`), so only the first reason holds there. scontrol(1) at slurm-25-11-0-1: "Topology=
# <topology_name>:<topology_unit>[,...] Where <topology_unit> is the block name or the name of a leaf switch";
# at slurm-26-05-3-1 also a ring with the node's position ("Topology=topo-ring:ring1:2"). Checked for 26.05 too.
WHY_NOT_DYNAMIC_2511 = ("static NodeName lines, not dynamic nodes (slurmd -Z): the inventory stays the description "
                        "of the cluster and the generated files describe every node (from 25.11 a dynamic node "
                        "could join the topology at run time, dynamic_nodes.shtml, Topology)")


def why_not_dynamic(version: str) -> str:
    from slurmkit.release import release_key

    return WHY_NOT_DYNAMIC_2511 if release_key(version) >= (25, 11) else WHY_NOT_DYNAMIC


@dataclass(frozen=True)
class ChangePath:
    kind: str  # "reconfigure" | "restart-ctld"
    version: str
    why: str  # the rule and its source
    steps: tuple[str, ...]

    def statement(self, verb: str) -> str:
        """What the command prints before doing anything."""
        how = ("scontrol reconfigure" if self.kind == RECONFIGURE
               else "a controller restart with its state kept, then scontrol reconfigure for the slurmds")
        return f"path: {how} on Slurm {self.version} to {verb} nodes, because {self.why}; {why_not_dynamic(self.version)}"


def choose(version: str, adding: bool) -> ChangePath:
    """The path for nodes joining (``adding``) or leaving on ``version``.

    24.11+: static lines + ``scontrol reconfigure`` (rollout.RULES_24_11 "node+"/"node-": the 24.11 FAQ's "sufficient
    on Slurm 24.11 and newer ... Run scontrol reconfigure"). Before 24.11 the FAQ says stop slurmctld, update every
    node's slurm.conf, restart the slurmds, restart slurmctld (rollout.RULES_22_05); scontrol(1) 22.05 reconfigure:
    "The slurmctld daemon and all slurmd daemons must also be restarted if nodes are added to or removed from the
    cluster", and a reconfigure that changes the node count stops 22.05's slurmctld ("node count has changed ... You
    have to restart slurmctld", measured). The least disruptive form of that: slurmctld is stopped with SIGTERM
    (it saves its state) and started again without -c (state recovered: running jobs keep their nodes), and then,
    the controller's node count now matching the files, ``scontrol reconfigure`` makes every slurmd re-read
    slurm.conf instead of restarting it (slurm.conf(5) NODE CONFIGURATION: "All slurmd daemons must know each node
    in the system to forward messages in support of hierarchical communications")."""
    r = rule(version, "node+" if adding else "node-")
    if r.action == RECONFIGURE or r.scope == "reconfigure":
        return ChangePath(RECONFIGURE, version, r.doc, ("write the files and the inventory copy as one set",
                                                  "scontrol reconfigure"))
    return ChangePath(RESTART_CTLD, version, r.doc, ("write the files and the inventory copy as one set",
                                               "stop slurmctld (SIGTERM: it saves its state)",
                                               "start slurmctld on the new files, state recovered",
                                               "scontrol reconfigure (every slurmd re-reads slurm.conf)"))
