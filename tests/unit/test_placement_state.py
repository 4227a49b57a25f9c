"""Slurm node records -> placement NodeState, on output recorded from the lab and on every state Slurm prints."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from slurmkit.backend import parse
from slurmkit.errors import UsageError
from slurmkit.placement import PlacementTopology, Request, fragmentation, place
from slurmkit.placement.state import engine_state, node_state, node_states, partition_nodes
from tests.conftest import DATA

SLURM = DATA / "slurm"


def recorded_scontrol() -> dict[str, object]:
    return node_states(parse.parse_scontrol_nodes((SLURM / "scontrol_show_node.txt").read_text()))


def test_recorded_scontrol_nodes_map_to_engine_states():
    """The lab recording: node1 runs a 2-GPU job, node5-6 exclusive jobs, node7 admin drain, node8 our drain."""
    st = recorded_scontrol()
    got = {n: (s.state, s.free_gpus, s.total_gpus, s.healthy) for n, s in st.items()}
    assert got == {
        "node1": ("mixed", 6, 8, True),
        "node2": ("idle", 8, 8, True),
        "node3": ("idle", 8, 8, True),
        "node4": ("idle", 8, 8, True),
        "node5": ("allocated", 0, 8, True),
        "node6": ("allocated", 0, 8, True),
        "node7": ("drained", 0, 8, True),  # "admin maintenance": drained, but not our health verdict
        "node8": ("drained", 0, 8, False),  # "slurmkit: gpu3 xid79 ...": our hooks drained it
    }


def test_recorded_sinfo_json_agrees_with_scontrol():
    from_json = node_states(parse.parse_sinfo_json((SLURM / "sinfo.json").read_text()))
    assert from_json == recorded_scontrol()


def test_recorded_sinfo_text_states_agree():
    """sinfo -o has no GresUsed (free GPUs unknown there), but the states must map the same way."""
    text = node_states(parse.parse_sinfo_nodes((SLURM / "sinfo_nodes.txt").read_text()))
    assert {n: s.state for n, s in text.items()} == {n: s.state for n, s in recorded_scontrol().items()}


def test_recorded_cluster_fragmentation_and_placement():
    """The recorded states through the engine: drained and busy nodes are never used."""
    topo = PlacementTopology.from_records(
        parse.parse_topology((SLURM / "scontrol_show_topology.txt").read_text()), known_nodes=recorded_scontrol()
    )
    st = recorded_scontrol()
    f = fragmentation(topo, st)
    # free whole nodes: node2-4 (leaf1); leaf2 has none (node5-6 busy, node7-8 drained)
    assert (f.free_nodes, f.free_leaves, f.largest_job_one_leaf, f.largest_job_anywhere) == (3, 0, 3, 3)
    assert (f.free_gpus, f.stranded_gpus) == (3 * 8 + 6, 6)
    p = place(topo, st, Request(nodes=3, gpus_per_node=8))
    assert p is not None and p.nodes == ("node2", "node3", "node4")
    assert place(topo, st, Request(nodes=4, gpus_per_node=8)) is None


@pytest.mark.parametrize(
    ("slurm_state", "expected"),
    [
        # what `scontrol -o show node` prints (State=...), through the backend's own parser
        ("IDLE", "idle"),
        ("MIXED", "mixed"),
        ("ALLOCATED", "allocated"),
        ("COMPLETING", "allocated"),
        ("IDLE+COMPLETING", "allocated"),
        ("IDLE+DRAIN", "drained"),
        ("MIXED+DRAIN", "draining"),
        ("ALLOCATED+DRAIN", "draining"),
        ("ALLOCATED+DRAIN+COMPLETING", "draining"),
        ("IDLE+DRAIN+COMPLETING", "draining"),
        ("IDLE*", "down"),
        ("MIXED*", "down"),
        ("DOWN", "down"),
        ("DOWN*+DRAIN", "down"),
        ("DOWN+DRAIN+NOT_RESPONDING", "down"),
        ("UNKNOWN", "down"),
        ("FUTURE", "down"),
        ("IDLE+MAINTENANCE", "down"),
        ("IDLE+REBOOT_REQUESTED", "down"),
        ("IDLE+INVALID_REG", "down"),
        ("IDLE+POWERED_DOWN", "idle"),  # cloud node: Slurm powers it up for a job
        ("IDLE+POWERING_UP", "allocated"),
        ("IDLE+POWERING_DOWN", "down"),
        ("IDLE+PLANNED", "allocated"),
        # sinfo's short forms (%t)
        ("idle", "idle"),
        ("mix", "mixed"),
        ("alloc", "allocated"),
        ("comp", "allocated"),
        ("drain", "drained"),
        ("drng", "draining"),
        ("drained", "drained"),
        ("draining", "draining"),
        ("idle~", "idle"),
        ("idle#", "allocated"),
        ("alloc$", "down"),
        ("mix-", "allocated"),
        ("down*", "down"),
        ("unk*", "down"),
        ("maint", "down"),
        ("fail", "down"),
    ],
)
def test_every_slurm_state(slurm_state: str, expected: str):
    base, flags = parse.split_state(slurm_state)
    assert engine_state(base, flags) == expected


def test_unknown_state_is_never_usable():
    assert engine_state("frobnicated", ()) == "down"


@dataclass(frozen=True)
class Rec:
    """A duck-typed record: anything with these attributes works (no backend import needed)."""

    name: str
    state: str
    flags: frozenset[str]
    free_gpus: int
    total_gpus: int


def test_free_gpus_only_on_idle_and_mixed():
    # an --exclusive job without --gres: ALLOCATED but GresUsed=gpu:h100:0 -> nothing is free there
    assert node_state(Rec("n1", "allocated", frozenset(), 8, 8)).free_gpus == 0
    assert node_state(Rec("n1", "mixed", frozenset(), 3, 8)).free_gpus == 3
    assert node_state(Rec("n1", "idle", frozenset({"DRAIN"}), 8, 8)).free_gpus == 0
    # a record whose used count exceeds the total (GRES reconfigured under a running job) is clamped
    assert node_state(Rec("n1", "mixed", frozenset(), 12, 8)).free_gpus == 8
    assert node_state(Rec("n1", "idle", frozenset(), 0, 0)).total_gpus == 0


def test_health_verdict_from_our_reason_prefix():
    @dataclass(frozen=True)
    class WithReason(Rec):
        reason: str = ""

    ours = node_state(WithReason("n1", "mixed", frozenset({"DRAIN"}), 4, 8, "slurmkit: xid 79"))
    foreign = node_state(WithReason("n1", "mixed", frozenset({"DRAIN"}), 4, 8, "admin: PSU"))
    assert (ours.state, ours.healthy) == ("draining", False)
    assert (foreign.state, foreign.healthy) == ("draining", True)
    assert node_state(Rec("n1", "idle", frozenset(), 8, 8)).healthy  # no reason attribute at all
    # our reason left on a resumed node (24.11 without accounting storage keeps it): stale, the node is healthy
    assert node_state(WithReason("n1", "idle", frozenset(), 0, 8, "slurmkit: gpu1 ecc-unc=2")).healthy


def test_partition_nodes_expands_and_names_known_partitions():
    parts = parse.parse_scontrol_records((SLURM / "scontrol_show_partition.txt").read_text())
    assert partition_nodes(parts, "gpu") == [f"node{i}" for i in range(1, 9)]
    with pytest.raises(UsageError, match=r"partition 'cpu' does not exist \(partitions: gpu\)"):
        partition_nodes(parts, "cpu")
    with pytest.raises(UsageError, match="has no nodes"):
        partition_nodes([{"PartitionName": "empty", "Nodes": "(null)"}], "empty")
