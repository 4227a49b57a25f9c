"""Dynamic-node sites (issue 19): a slurm.conf with MaxNodeCount and no (or few) NodeName lines, whose nodes register
with ``slurmd -Z --conf ...`` and join partitions by Nodes=ALL or by a NodeSet's Feature (dynamic_nodes.shtml of
22.05 and 24.11). Import carries it as ``dynamic_nodes``, generate writes it back, the round trip is empty, the loader
names bad values by key path, and validate judges it per release."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from slurmkit.adopt.importer import import_site
from slurmkit.errors import InventoryError
from slurmkit.generate.rollout import semantic_diff
from slurmkit.generate.slurmconf import generate
from slurmkit.generate.validate import static_check
from slurmkit.model import yamlio
from slurmkit.model.load import load_cluster_dict, load_cluster_text

ROOT = Path(__file__).resolve().parents[2]
RELEASES = ("22.05", "24.11")

DYNAMIC = """\
ClusterName=dyn
SlurmctldHost=head1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
MaxNodeCount=64
TreeWidth=65533
Nodeset=ns_h100 Feature=h100
Nodeset=ns_a100 Feature=a100
PartitionName=all Nodes=ALL Default=yes MaxTime=1-00:00:00
PartitionName=h100 Nodes=ns_h100
PartitionName=gpu Nodes=ns_h100,ns_a100
"""
FILES = {"slurm.conf": DYNAMIC, "gres.conf": "AutoDetect=nvml\n"}


@pytest.mark.parametrize("release", RELEASES)
def test_a_site_without_node_lines_imports_and_round_trips(release: str) -> None:
    res = import_site(FILES, release)
    assert res.lost == [], res.lost
    inv = res.inventory
    assert inv["dynamic_nodes"] == {"max_node_count": 64} and "node_groups" not in inv
    assert "MaxNodeCount" not in inv["slurm_conf"]  # one place for it
    files = generate(load_cluster_text(yamlio.dump(inv)), version=release)
    assert "MaxNodeCount=64\n" in files["slurm.conf"]
    assert semantic_diff(FILES, files, release) == []
    assert static_check(FILES, release).errors == []


def test_cli_import_and_diff_exit_0(tmp_path: Path) -> None:
    d = tmp_path / "etc"
    d.mkdir()
    for name, body in FILES.items():
        (d / name).write_text(body)
    site = tmp_path / "site.yaml"

    def sk(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "slurmkit.cli.main", *args], capture_output=True, text=True,
                              cwd=ROOT, timeout=120)

    imp = sk("conf", "import", str(d), "-o", str(site), "--slurm-version", "24.11")
    assert imp.returncode == 0, imp.stderr
    diff = sk("conf", "diff", str(site), "--against", str(d), "--exit-code")
    assert diff.returncode == 0 and "nothing to do" in diff.stdout, diff.stdout + diff.stderr


def test_static_nodes_beside_room_for_dynamic_ones() -> None:
    conf = DYNAMIC.replace("MaxNodeCount=64\n", "MaxNodeCount=64\nNodeName=gpu[1-2] CPUs=8 RealMemory=1000\n")
    res = import_site({"slurm.conf": conf}, "24.11")
    assert res.lost == [] and res.inventory["dynamic_nodes"] == {"max_node_count": 64}
    assert [g["hosts"] for g in res.inventory["node_groups"]] == ["gpu[1-2]"]
    # MaxNodeCount not above the NodeName nodes makes no room (slurm.conf(5): "ignored if less than the number of
    # nodes found in the slurm.conf"): an ordinary key, carried as written
    res = import_site({"slurm.conf": conf.replace("MaxNodeCount=64", "MaxNodeCount=2")}, "24.11")
    assert "dynamic_nodes" not in res.inventory and res.inventory["slurm_conf"]["MaxNodeCount"] == "2"


def test_no_node_lines_and_no_max_node_count_is_named() -> None:
    res = import_site({"slurm.conf": DYNAMIC.replace("MaxNodeCount=64\n", "")}, "24.11")
    assert any(line.startswith("slurm.conf:1: no NodeName lines and no MaxNodeCount") for line in res.lost), res.lost


def inv(**kw: object) -> dict:
    base: dict = {"cluster": "dyn", "adopted": True, "dynamic_nodes": {"max_node_count": 8},
                  "partitions": [{"name": "all", "nodes": "ALL"}]}
    base.update(kw)
    return {k: v for k, v in base.items() if v is not None}


@pytest.mark.parametrize(("data", "path", "message"), [
    (inv(dynamic_nodes={"max_node_count": "8"}), "dynamic_nodes.max_node_count", "expected an integer"),
    (inv(dynamic_nodes={"max_node_count": 0}), "dynamic_nodes.max_node_count", "must be >= 1"),
    (inv(dynamic_nodes={"max_node_count": 1 << 32}), "dynamic_nodes.max_node_count", "32-bit"),
    (inv(dynamic_nodes={"max_nodes": 8}), "dynamic_nodes.max_nodes", "did you mean 'max_node_count'"),
    (inv(dynamic_nodes=[8]), "dynamic_nodes", "expected a mapping"),
    (inv(slurm_conf={"MaxNodeCount": "8"}), "slurm_conf.MaxNodeCount", "dynamic_nodes.max_node_count"),
    (inv(dynamic_nodes=None), "node_groups", "required key is missing"),
    (inv(dynamic_nodes={"max_node_count": 2},
         node_groups=[{"name": "g", "hosts": "n[1-2]", "cpu": {"sockets": 1, "cores_per_socket": 2,
                                                                 "threads_per_core": 1}, "memory_mb": 1000}]),
     "dynamic_nodes.max_node_count", "not more than the 2 nodes"),
])
def test_loader_names_the_key_path(data: dict, path: str, message: str) -> None:
    with pytest.raises(InventoryError) as ei:
        load_cluster_dict(data)
    assert ei.value.path == path and message in str(ei.value), str(ei.value)


def test_an_inventory_from_scratch_may_have_dynamic_nodes_too() -> None:
    data = yamlio.load((ROOT / "examples" / "lab.yaml").read_text())
    data["dynamic_nodes"] = {"max_node_count": 64}
    files = generate(load_cluster_dict(data))
    assert "MaxNodeCount=64\n" in files["slurm.conf"]


TREE = "GresTypes=gpu\nTopologyPlugin=topology/tree\nNodeName=gpu1 CPUs=8 RealMemory=1000\n"


@pytest.mark.parametrize(("change", "release", "errors", "warnings"), [
    # src/slurmctld/node_mgr.c create_dynamic_reg_node(): "Node creation only compatible with select/cons_tres";
    # 22.05's default SelectType is select/linear (read_config.h), 24.11's select/cons_tres
    ({"SelectType=select/cons_tres\nSelectTypeParameters=CR_Core_Memory\n": ""}, "22.05",
     ["only with select/cons_tres (SelectType is select/linear"], []),
    ({"SelectType=select/cons_tres\nSelectTypeParameters=CR_Core_Memory\n": ""}, "24.11", [], []),
    # dynamic_nodes.shtml 22.05: TreeWidth=65533; gone from 23.11's
    ({"TreeWidth=65533\n": ""}, "22.05", [], ["need TreeWidth=65533"]),
    ({"TreeWidth=65533\n": ""}, "24.11", [], []),
    # 22.05 Limitations: topology plugins not supported; 24.11: dynamic nodes must be added to topology.conf
    ({"GresTypes=gpu\n": TREE}, "22.05", [], ["not supported on Slurm 22.05"]),
    ({"GresTypes=gpu\n": TREE}, "24.11", [],
     ["each must be added to the topology"]),
])
def test_validate_judges_a_dynamic_site_per_release(change: dict, release: str, errors: list, warnings: list) -> None:
    conf = DYNAMIC
    for old, new in change.items():
        assert old in conf
        conf = conf.replace(old, new)
    files = {"slurm.conf": conf}
    if "topology/tree" in conf:
        files["topology.conf"] = "SwitchName=s1 Nodes=gpu1\n"
    rep = static_check(files, release)
    dyn = [w for w in rep.warnings if "dynamic nodes" in w]
    assert len(rep.errors) == len(errors) and all(any(e in x for x in rep.errors) for e in errors), rep.errors
    assert len(dyn) == len(warnings) and all(any(w in x for x in dyn) for w in warnings), rep.warnings


def test_a_new_inventorys_partition_over_all_or_nodesets_keeps_its_nodes() -> None:
    """A partition given by ``nodes:`` (ALL, NodeSet names: how dynamic nodes join partitions) in an inventory written
    from scratch was wrapped in a NodeSet of group hosts, which rendered ``NodeSet=ns_all Nodes=`` (empty)."""
    data = yamlio.load((ROOT / "examples" / "lab.yaml").read_text())
    data["dynamic_nodes"] = {"max_node_count": 64}
    data["nodesets"] = {"ns_h100": {"Feature": "h100"}}
    data["partitions"] = [{"name": "all", "nodes": "ALL", "default": True}, {"name": "h100", "nodes": "ns_h100"}]
    conf = generate(load_cluster_dict(data))["slurm.conf"]
    lines = [ln for ln in conf.splitlines() if ln.startswith(("NodeSet=", "PartitionName="))]
    assert lines[0] == "NodeSet=ns_h100 Feature=h100", lines
    assert lines[1].startswith("PartitionName=all Nodes=ALL Default=YES "), lines
    assert lines[2].startswith("PartitionName=h100 Nodes=ns_h100 Default=NO "), lines
    assert not any(ln.rstrip().endswith("Nodes=") or " Nodes= " in ln for ln in lines), lines
