"""Pure parts of `slurmkit nodes add|remove`: the inventory edits, the path per release, the lab's port lists,
and bad input refused with exit 2 before anything changes."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from slurmkit.elastic import edit, path
from slurmkit.errors import UsageError
from slurmkit.lab.inventory import lab_inventory
from slurmkit.lab.lab import _port_list
from slurmkit.model.load import load_cluster_dict

ROOT = Path(__file__).resolve().parents[2]


def _inv(nodes: int = 4) -> dict:
    return lab_inventory(nodes, 8, "h100", 4)


def test_add_to_existing_group_grows_it_and_adds_a_leaf_under_a_new_spine() -> None:
    inv = _inv()
    e = edit.add_hosts(inv, ["node5", "node6", "node7", "node8"], "h100")
    assert e.data["node_groups"][0]["hosts"] == "node[1-8]"
    assert e.data["topology"]["switches"] == [
        {"name": "leaf1", "nodes": "node[1-4]"}, {"name": "leaf2", "nodes": "node[5-8]"},
        {"name": "spine", "switches": "leaf[1-2]"}]
    assert inv == _inv()  # the input is not changed
    load_cluster_dict(e.data)  # and the loader accepts the result


def test_add_new_group_copies_the_shape_and_joins_its_partitions() -> None:
    inv = _inv(8)
    inv["node_groups"][0]["hosts"] = "node[1-8]"
    e = edit.add_hosts(inv, ["node9", "node10"], "h100b")
    g = e.data["node_groups"][1]
    assert g["name"] == "h100b" and g["hosts"] == "node[9-10]" and g["gpus"] == inv["node_groups"][0]["gpus"]
    assert e.data["partitions"][0]["groups"] == ["h100", "h100b"]
    assert {"name": "leaf3", "nodes": "node[9-10]"} in e.data["topology"]["switches"]
    assert {"name": "spine", "switches": "leaf[1-3]"} in e.data["topology"]["switches"]
    c = load_cluster_dict(e.data)
    assert [x.name for x in c.node_groups] == ["h100", "h100b"]


def test_add_into_a_named_existing_leaf() -> None:
    e = edit.add_hosts(_inv(), ["node5"], "h100", switch="leaf1")
    assert e.data["topology"]["switches"] == [{"name": "leaf1", "nodes": "node[1-5]"}]


@pytest.mark.parametrize(("hosts", "group", "kw", "msg"), [
    (["node3"], "h100", {}, "HOSTS: node3 already in node group 'h100'"),
    (["node9"], "x", {"like": "nope"}, "--like: no node group 'nope'"),
    (["node9"], "h100", {"like": "h100"}, "--like: node group 'h100' exists already"),
    (["node9"], "h100", {"switch": "spine"}, None),
])
def test_add_refuses_bad_input(hosts: list[str], group: str, kw: dict, msg: str | None) -> None:
    inv = _inv(8)
    if msg is None:  # an upper switch cannot take nodes
        msg = "--switch: 'spine' is an upper-level switch"
    with pytest.raises(UsageError, match=msg.replace("[", r"\[")):
        edit.add_hosts(inv, hosts, group, **kw)


def test_add_new_group_needs_like_when_several() -> None:
    inv = _inv()
    inv = edit.add_hosts(inv, ["node5"], "b").data
    with pytest.raises(UsageError, match="--like: 'c' is a new node group; name the group it copies"):
        edit.add_hosts(inv, ["node6"], "c")


def test_block_topology_is_refused_with_the_reason() -> None:
    inv = lab_inventory(4, 8, "h100", 4, topology="block")
    with pytest.raises(UsageError, match="topology.blocks"):
        edit.add_hosts(inv, ["node5"], "h100")


def test_remove_drops_empty_group_leaf_and_partition_references() -> None:
    inv = edit.add_hosts(_inv(), ["node5", "node6"], "b").data
    inv["partitions"].append({"name": "bonly", "groups": ["b"]})
    e = edit.remove_hosts(inv, ["node5", "node6"])
    assert [g["name"] for g in e.data["node_groups"]] == ["h100"]
    assert [p["name"] for p in e.data["partitions"]] == ["gpu"] and e.data["partitions"][0]["groups"] == ["h100"]
    assert e.data["topology"]["switches"] == [{"name": "leaf1", "nodes": "node[1-4]"},
                                              {"name": "spine", "switches": "leaf1"}]
    load_cluster_dict(e.data)
    partial = edit.remove_hosts(inv, ["node6"])
    assert partial.data["node_groups"][1]["hosts"] == "node5"


def test_remove_refuses_unknown_or_everything() -> None:
    with pytest.raises(UsageError, match=r"HOSTS: node9 not in any node group"):
        edit.remove_hosts(_inv(), ["node9"])
    with pytest.raises(UsageError, match="every node"):
        edit.remove_hosts(_inv(), [f"node{i}" for i in range(1, 5)])


@pytest.mark.parametrize(("version", "adding", "kind"), [
    ("22.05", True, "restart-ctld"), ("23.11", True, "restart-ctld"), ("24.05", False, "restart-ctld"),
    ("24.11", True, "reconfigure"), ("24.11", False, "reconfigure"), ("25.05", True, "reconfigure"),
])
def test_path_per_release_cites_its_source(version: str, adding: bool, kind: str) -> None:
    p = path.choose(version, adding)
    assert p.kind == kind
    assert "faq.shtml (24.11)" in p.why
    assert ("sufficient on Slurm 24.11 and newer" in p.why) == (kind == "reconfigure")
    assert "dynamic_nodes.shtml" in p.statement("add")


def test_port_list_is_a_slurm_hostlist_of_ports() -> None:
    assert _port_list([29001]) == "29001"
    assert _port_list([29001, 29002, 29003, 29004]) == "[29001-29004]"
    assert _port_list([29001, 29002, 29005]) == "[29001-29002,29005]"


def test_cli_bad_input_exits_2_and_changes_nothing(tmp_path: Path) -> None:
    inv = _inv()
    (tmp_path / "slurmkit.yaml").write_text(yaml.safe_dump(inv, sort_keys=False))
    (tmp_path / "slurm.conf").write_text("ClusterName=lab\n")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    env = {**os.environ, "SLURM_CONF": str(tmp_path / "slurm.conf")}
    for argv, msg in [
        (["add", "node3", "--group", "h100"], "HOSTS: node3 already in node group 'h100'"),
        (["add", "node[5-", "--group", "h100"], "HOSTS: invalid hostlist"),
        (["remove", "node9"], "HOSTS: node9 not in any node group"),
    ]:
        res = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "nodes", *argv], capture_output=True,
                             text=True, env=env, cwd=ROOT, timeout=60)
        assert res.returncode == 2, res.stderr
        assert msg in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    assert copy.deepcopy(inv) == yaml.safe_load((tmp_path / "slurmkit.yaml").read_text())
