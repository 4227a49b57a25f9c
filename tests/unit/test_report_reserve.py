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


def test_nodes_add_and_remove_say_what_they_do_to_the_plan() -> None:
    """`slurmkit nodes add|remove` print a line per resized group: its nodes and planned spare before and after."""
    from slurmkit.elastic.edit import add_hosts, remove_hosts
    from slurmkit.elastic.reserve import plan_change, table

    inv = yaml.safe_load((ROOT / "examples" / "lab.yaml").read_text())
    before = load_cluster_dict(inv)
    g = before.node_groups[0]
    n = len(g.hostnames)
    grown = add_hosts(inv, [f"extra{i}" for i in range(1, 9)], g.name).data
    lines = plan_change(before, load_cluster_dict(grown))
    assert lines == [f"reserve of group {g.name}: {n} -> {n + 8} node(s), planned spare {-(-n * 15 // 100)} -> "
                     f"{-(-(n + 8) * 15 // 100)} (capacity.reserve_pct 15%, rounded up; `slurmkit report reserve` "
                     "counts the spare now)"], lines
    new_group = add_hosts(inv, ["gx1", "gx2"], "h200", like=g.name).data
    assert plan_change(before, load_cluster_dict(new_group)) == [
        "reserve of group h200: 0 -> 2 node(s), planned spare 0 -> 1 (capacity.reserve_pct 15%, rounded up; "
        "`slurmkit report reserve` counts the spare now)"]
    shrunk = remove_hosts(inv, [g.hostnames[-1]]).data
    assert plan_change(before, load_cluster_dict(shrunk))[0].startswith(f"reserve of group {g.name}: {n} -> {n - 1} ")
    assert plan_change(before, before) == []
    # power saving: a powered-down spare is a spare, and the table says it is cold
    rows = reserve(before, [node(h, flags=("POWERED_DOWN",)) for h in g.hostnames])
    assert rows[0].spare == n and "a job on one waits for its boot (up to ResumeTimeout)" in "\n".join(table(rows, 15))
    assert "waits for its boot" not in "\n".join(table(reserve(before, [node(h) for h in g.hostnames]), 15))


def test_states_as_scontrol_prints_them() -> None:
    """The State= of `scontrol -o show node` (node_state_string_complete, src/common/slurm_protocol_defs.c of 22.05,
    24.11, 26.05: base, then +FLAG per flag): which of them are spares. IDLE+BLOCKED (24.11+: "blocked by exclusive
    topo job", sinfo(1)) takes no job, so it is none."""
    from slurmkit.backend.parse import parse_scontrol_nodes

    def spare(state: str) -> bool:
        rec = f"NodeName=n1 CPUTot=8 State={state} Reason=(null)\n"
        return is_spare(parse_scontrol_nodes(rec)[0])

    for s in ("IDLE", "IDLE+CLOUD", "IDLE+POWERED_DOWN", "IDLE+CLOUD+POWERED_DOWN", "IDLE~", "IDLE+DYNAMIC_NORM"):
        assert spare(s), s
    for s in ("IDLE+BLOCKED", "IDLE+DRAIN", "MIXED", "DOWN*", "DOWN+NOT_RESPONDING", "IDLE+RESERVED", "IDLE+PLANNED",
              "IDLE+MAINTENANCE", "IDLE+INVALID_REG", "FUTURE", "IDLE*", "IDLE+NOT_RESPONDING+POWERED_DOWN",
              "IDLE+DRAIN+POWERED_DOWN", "IDLE+POWERING_DOWN", "IDLE+COMPLETING", "IDLE+FAIL", "UNKNOWN"):
        assert not spare(s), s
