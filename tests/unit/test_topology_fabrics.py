"""Rail-optimized fabrics (issue 20 item 8) and the 26.05 ring/torus3d topologies (issue 21 item 4) in the
inventory and the generated topology files."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from slurmkit.errors import InventoryError
from slurmkit.generate.slurmconf import generate
from slurmkit.lab.inventory import lab_from_preset, lab_inventory, preset_shape
from slurmkit.model import load_cluster, load_cluster_dict

ROOT = Path(__file__).resolve().parents[2]


def inv(topology: dict, nodes: int = 8, version: str = "24.11", nics: int = 0) -> dict:
    d = lab_inventory(nodes, nodes_per_leaf=4)
    d["slurm_version"] = version
    d["topology"] = topology
    if nics:
        d["node_groups"][0]["nics"] = [{"name": f"mlx5_{i}", "kind": "ib", "rate_gbps": 400} for i in range(nics)]
    return d


def _topology_file(files: dict[str, str]) -> str:
    return files.get("topology.conf") or files["topology.yaml"]


def test_superpod_preset_is_one_switch_per_su_with_its_rails_said():
    """NVIDIA's SU: 32 nodes on 8 rail leaves, every node on every leaf, so Slurm sees one switch per SU (the old
    preset had 4 leaves of 8 nodes, which is not how a SuperPOD is cabled)."""
    c = load_cluster(ROOT / "examples" / "dgx-h100-superpod-su.yaml")
    assert [(s.name, s.nodes) for s in c.topology.switches] == [("su01", "dgx[001-032]")]
    assert [(u.name, u.rails) for u in c.topology.rail_units] == [("su01", 8)]
    for v in ("24.11", "26.05"):
        text = _topology_file(generate(c, version=v))
        assert "# SU su01: dgx[001-032] on 8 rail leaves" in text
        assert "rail-optimized fabric" in text


def test_several_sus_sit_under_one_spine_in_tree_and_are_blocks_in_block():
    units = [{"name": "su1", "nodes": "node[1-4]", "rails": 2}, {"name": "su2", "nodes": "node[5-8]", "rails": 2}]
    tree = load_cluster_dict(inv({"rail_optimized": {"units": units, "spine": "core"}}, nics=2))
    assert generate(tree)["topology.conf"].splitlines()[-3:] == [
        "SwitchName=su1 Nodes=node[1-4]", "SwitchName=su2 Nodes=node[5-8]", "SwitchName=core Switches=su[1-2]"]
    block = load_cluster_dict(inv({"rail_optimized": {"plugin": "block", "units": units, "block_sizes": [4, 8]}}))
    assert block.topology.kind == "block"
    assert generate(block)["topology.conf"].splitlines()[-3:] == [
        "BlockName=su1 Nodes=node[1-4]", "BlockName=su2 Nodes=node[5-8]", "BlockSizes=4,8"]
    assert "TopologyPlugin=topology/block" in generate(block)["slurm.conf"]
    y = yaml.safe_load(generate(block, version="25.11")["topology.yaml"])
    assert y[0]["block"]["blocks"] == [{"block": "su1", "nodes": "node[1-4]"}, {"block": "su2", "nodes": "node[5-8]"}]
    assert "one block here" in generate(block, version="25.11")["topology.yaml"]


@pytest.mark.parametrize(
    "topology, nics, key, words",
    [
        ({"rail_optimized": {"units": [{"name": "su1", "nodes": "node[1-8]", "rails": 8}]}}, 4,
         "topology.rail_optimized.units[0].rails", "8 rails, but host 'node1' has 4 compute HCAs"),
        ({"rail_optimized": {"units": [{"name": "su1", "nodes": "node[1-4]"}, {"name": "su2", "nodes": "node[4-8]"}]}},
         0, "topology.rail_optimized.units[1].nodes", "in both 'su1' and 'su2'"),
        ({"rail_optimized": {"units": [{"name": "su1", "nodes": "node[1-4]"}]}}, 0, "topology.rail_optimized.units",
         "node[5-8] are in no leaf switch"),
        ({"rail_optimized": {"units": [{"name": "su1", "nodes": "node[1-4]"}, {"name": "su2", "nodes": "node[5-9]"}]}},
         0, "topology.rail_optimized.units[1].nodes", "'node9' is not in any node group"),
        ({"rail_optimized": {"plugin": "block", "units": [{"name": "su1", "nodes": "node[1-4]"},
                                                          {"name": "su1", "nodes": "node[5-8]"}]}},
         0, "topology.rail_optimized.units[1].name", "'su1' is already defined"),
        ({"blocks": [{"name": "b1", "nodes": "node[1-4]"}, {"name": "b1", "nodes": "node[5-8]"}]}, 0,
         "topology.blocks[1].name", "Block (b1) has already been defined"),
        ({"rail_optimized": {"plugin": "block", "units": [{"name": "su1", "nodes": "node[1-8]"}], "block_sizes": "8"}},
         0, "topology.rail_optimized.block_sizes", "expected a list"),
        ({"rail_optimized": {"units": [{"name": "su1", "nodes": "node[1-8]"}], "block_sizes": [8]}}, 0,
         "topology.rail_optimized.block_sizes", "needs plugin: block"),
        ({"rail_optimized": {"units": [{"name": "su1", "nodes": "node[1-8]"}]}, "switches": [{"name": "a", "nodes": "node1"}]},
         0, "topology", "not switches and rail_optimized"),
        ({"rings": [{"name": "r1", "nodes": "node[1-8]"}, {"name": "r2", "nodes": "node8"}]}, 0,
         "topology.rings[1].nodes", "'node8' is in both 'r1' and 'r2'"),
        ({"toruses": [{"name": "t", "dims": [2, 2, 3], "nodes": "node[1-8]", "placements": [[2, 2, 2]]}]}, 0,
         "topology.toruses[0].nodes", "8 nodes, but dims 2x2x3 need 12"),
        ({"toruses": [{"name": "t", "dims": [2, 2, 2], "nodes": "node[1-8]", "placements": []}]}, 0,
         "topology.toruses[0].placements", "never allocated"),
        ({"toruses": [{"name": "t", "dims": [2, 2, 2], "nodes": "node[1-8]", "placements": [[1, 1, 4]]}]}, 0,
         "topology.toruses[0].placements[0]", "exceeds the torus 2x2x2"),
    ],
)
def test_bad_fabric_names_the_key(topology, nics, key, words):
    with pytest.raises(InventoryError) as e:
        load_cluster_dict(inv(topology, nics=nics))
    assert str(e.value).startswith(key + ":") and words in str(e.value), str(e.value)


def test_a_ring_is_at_most_16_nodes():
    # ring_record.c at slurm-26-05-3-1: fatal("Ring (%s) is bigger than %d") with MAX_RING_SIZE 16
    with pytest.raises(InventoryError, match=r"topology.rings\[0\].nodes: 17 nodes; topology/ring takes at most 16"):
        load_cluster_dict(inv({"rings": [{"name": "r", "nodes": "node[1-17]"}]}, nodes=17, version="26.05"))


def test_ring_keeps_the_order_written_and_needs_2605():
    d = inv({"rings": [{"name": "r1", "nodes": ["node3", "node1", "node2", "node4"]},
                       {"name": "r2", "nodes": "node[5-8]"}]}, version="26.05")
    files = generate(load_cluster_dict(d))
    assert "topology.conf" not in files and "TopologyPlugin=topology/ring" in files["slurm.conf"]
    y = yaml.safe_load(files["topology.yaml"])
    assert y == [{"topology": "default", "cluster_default": True,
                  "ring": {"rings": [{"ring": "r1", "nodes": "node3,node1,node2,node4"},
                                     {"ring": "r2", "nodes": "node5,node6,node7,node8"}]}}]
    with pytest.raises(InventoryError, match=r"topology.rings: topology/ring needs Slurm >= 26.05 .*target is 25.11"):
        generate(load_cluster_dict(dict(d, slurm_version="25.11")))


def test_torus3d_topology_yaml():
    d = inv({"toruses": [{"name": "t1", "dims": {"x": 2, "y": 2, "z": 2}, "nodes": "node[1-8]",
                          "placements": [[1, 1, 1], [2, 2, 1], [2, 2, 2]]}]}, version="26.05")
    files = generate(load_cluster_dict(d))
    assert "TopologyPlugin=topology/torus3d" in files["slurm.conf"]
    xyz = {"x": 2, "y": 2, "z": 1}
    assert yaml.safe_load(files["topology.yaml"])[0]["torus3d"] == {"toruses": [{
        "name": "t1", "dims": {"x": 2, "y": 2, "z": 2}, "nodes": "node[1-8]",
        "placements": [{"dims": {"x": 1, "y": 1, "z": 1}}, {"dims": xyz}, {"dims": {"x": 2, "y": 2, "z": 2}}]}]}
    with pytest.raises(InventoryError, match=r"topology.toruses: topology/torus3d needs Slurm >= 26.05"):
        generate(load_cluster_dict(dict(d, slurm_version="24.11")))


def test_lab_from_a_rail_optimized_block_preset_keeps_the_unit_names():
    preset = inv({"rail_optimized": {"plugin": "block", "units": [{"name": "su1", "nodes": "node[1-4]"},
                                                                   {"name": "su2", "nodes": "node[5-8]"}]}})
    assert preset_shape(preset)[3] == "block"
    lab = lab_from_preset(preset, 8, 4, slurm_version="24.11")
    assert [b["name"] for b in lab["topology"]["blocks"]] == ["su1", "su2"]


def test_static_check_reads_rings_and_tori_in_topology_yaml():
    """`conf validate` without a 26.05 judge: a hand-edited topology.yaml naming unknown nodes, a node in two
    rings, or a ring of 17 is found statically (each fatal or an error to slurmctld 26.05)."""
    from slurmkit.generate.validate import static_check

    d = inv({"rings": [{"name": "r1", "nodes": "node[1-4]"}, {"name": "r2", "nodes": "node[5-8]"}]}, version="26.05")
    files = generate(load_cluster_dict(d))
    assert static_check(files).errors == []
    bad = files["topology.yaml"].replace("node5,node6,node7,node8", "node4,node6,node7,ghost1")
    errors = static_check(dict(files, **{"topology.yaml": bad})).errors
    assert any("r2 names nodes ghost1 that slurm.conf does not define" in e for e in errors), errors
    assert any("nodes node4 are in both r1 and r2" in e for e in errors), errors
    d17 = inv({"rings": [{"name": "r1", "nodes": "node[1-16]"}, {"name": "r2", "nodes": "node17"}]}, nodes=17,
              version="26.05")
    f17 = generate(load_cluster_dict(d17))
    big = f17["topology.yaml"].replace("node16\n", "node16,node17\n").replace("nodes: node17\n", "nodes: node16\n")
    errors = static_check(dict(f17, **{"topology.yaml": big})).errors
    assert any("ring r1 has 17 nodes; topology/ring takes at most 16" in e for e in errors), (errors, big)
    t = inv({"toruses": [{"name": "t1", "dims": [2, 2, 2], "nodes": "node[1-8]", "placements": [[2, 2, 2]]}]},
            version="26.05")
    tf = generate(load_cluster_dict(t))
    assert static_check(tf).errors == []
    errors = static_check(dict(tf, **{"topology.yaml": tf["topology.yaml"].replace("node[1-8]", "node[1-9]")})).errors
    assert any("t1 names nodes node9" in e for e in errors), errors
