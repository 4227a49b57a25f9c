"""The reserve now (slurmkit/elastic/reserve.py): which nodes count as spare, per node group against
capacity.reserve_pct rounded up; the lab test (test_utilisation_lab.py's neighbour, test_reserve_lab) reads a real
slurmctld's nodes."""

from __future__ import annotations

import yaml

from slurmkit.backend.parse import NodeInfo
from slurmkit.elastic.reserve import is_spare, reserve
from slurmkit.model.load import load_cluster_dict
from tests.conftest import ROOT


def node(name: str, state: str = "idle", flags: tuple[str, ...] = (), reason: str = "") -> NodeInfo:
    return NodeInfo(name=name, state=state, flags=frozenset(flags), reason=reason, gres="gpu:h100:8")


def test_spare_is_healthy_and_idle_powered_up_or_down() -> None:
    assert is_spare(node("a"))
    assert is_spare(node("a", flags=("POWERED_DOWN",)))  # idle~: Slurm resumes it for a job
    assert not is_spare(node("a", "mixed"))
    assert not is_spare(node("a", flags=("DRAIN",)))
    assert not is_spare(node("a", flags=("NOT_RESPONDING",)))
    assert not is_spare(node("a", flags=("POWERING_DOWN",)))
    assert not is_spare(node("a", flags=("POWERING_UP",)))
    assert not is_spare(node("a", "down"))
    assert not is_spare(node("a", reason="slurmkit: ecc: nvidia3@17:00.0 3 uncorrectable"))  # its health verdict


def test_per_group_against_the_plan_rounded_up() -> None:
    inv = yaml.safe_load((ROOT / "examples" / "lab.yaml").read_text())
    inv["capacity"] = {"reserve_pct": 20}
    c = load_cluster_dict(inv)
    names = [h for g in c.node_groups for h in g.hostnames]
    nodes = [node(names[0]), node(names[1], flags=("POWERED_DOWN",)), *(node(n, "allocated") for n in names[2:])]
    nodes.append(node("stray1"))
    rows = {r.group: r for r in reserve(c, nodes)}
    g = c.node_groups[0].name
    assert rows[g].nodes == len(names) and rows[g].spare == 2 and rows[g].idle_down == 1
    assert rows[g].planned == -(-len(names) * 20 // 100)  # ceil
    assert rows[g].below_plan == (2 < rows[g].planned)
    assert rows["(other)"].nodes == 1 and rows["(other)"].spare == 1
    alone = reserve(None, nodes)
    assert [r.group for r in alone] == ["all"] and alone[0].planned == -(-(len(names) + 1) * 15 // 100)
