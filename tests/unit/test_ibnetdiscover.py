"""`slurmkit discover --ibnetdiscover`: the fabric from recorded ibnetdiscover outputs of real clusters
(tests/data/ibnetdiscover/README.md says where each comes from) into the inventory's topology."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from slurmkit import hostlist
from slurmkit.discover import ibnet
from slurmkit.errors import InventoryError, UsageError
from slurmkit.generate.slurmconf import generate
from slurmkit.lab.inventory import lab_inventory
from slurmkit.model import load_cluster_dict

DATA = Path(__file__).resolve().parents[1] / "data" / "ibnetdiscover"
DGX = r"[ab]\d\d-p1-dgx-\d\d-c\d\d"


def _topograph(match: str | None = DGX) -> ibnet.FabricTopology:
    return ibnet.infer(ibnet.parse((DATA / "topograph-example.out").read_text()), match=match)


def test_parse_reads_every_switch_and_hca_with_their_links():
    f = ibnet.parse((DATA / "topograph-example.out").read_text())
    assert len(f.switches()) == 40 and sum(n.kind == "ca" for n in f.nodes.values()) == 582
    leaf = f.nodes["2c5eab0300b87b40"]
    assert leaf.desc == "MF0;A09-P1-IBLEAF-04-04:MQM9701/U1"
    assert leaf.links[1] == ("e09d7303007a4bd8", 1) and leaf.links[35] == ("2c5eab0300c26280", 32)
    assert f.nodes["e09d7303007a4bd8"].desc == "a08-p1-dgx-04-c01 mlx5_5"


def test_rail_optimized_sus_of_a_real_dgx_fabric():
    """Each compute tray's 4 HCAs go to the 4 rail leaves IBLEAF-01..04-<su> of its SU, so the SU is one unit of
    4 rails; the spines join all eight."""
    t = _topograph()
    assert t.rail_optimized and t.switches == 40 and t.spines == 9
    by_leaves = {u.leaves[0].rsplit("-", 1)[1]: u for u in t.units}
    assert sorted(by_leaves) == [f"{i:02d}" for i in range(1, 9)]
    su3 = by_leaves["03"]
    assert hostlist.fold(su3.hosts) == "a07-p1-dgx-03-c[01-18]" and su3.complete
    assert su3.leaves == tuple(f"A09-P1-IBLEAF-0{r}-03" for r in range(1, 5))
    # the recording lacks leaf IBLEAF-03-01 (39 of 40 leaves+spines are listed with hosts or uplinks)
    assert len(by_leaves["01"].leaves) == 3
    assert t.uppers == (("spine", tuple(u.name for u in t.units)),)
    assert sum(len(u.hosts) for u in t.units) == 119
    assert any(n.startswith("left out (no --match): B11-P1-CUFM-02,ubuntu") for n in t.notes)
    assert any(re.match(r"\d+ HCA\(s\) name no host", n) for n in t.notes)


def test_without_match_the_ufm_hosts_break_their_su_and_it_says_so():
    t = _topograph(match=None)
    note = next(n for n in t.notes if "not on all" in n)
    assert "B11-P1-CUFM-02,ubuntu not on all 4 rail leaves" in note
    assert "localhost" not in {h for u in t.units for h in u.hosts}  # an unset hostname names no host


def test_fragment_loads_and_generates_one_switch_per_su():
    t = _topograph()
    frag = yaml.safe_load(ibnet.render(t, "example.out"))
    hosts = sorted(h for u in t.units for h in u.hosts)
    d = lab_inventory(len(hosts), nodes_per_leaf=len(hosts))
    d["slurm_version"] = "24.11"
    d["node_groups"][0]["hosts"] = hostlist.fold(hosts)
    d["topology"] = frag["topology"]
    c = load_cluster_dict(d)
    assert len(c.topology.rail_units) == 8 and c.topology.rail_units[2].rails == 4
    lines = generate(c)["topology.conf"].splitlines()
    assert "SwitchName=su03 Nodes=a07-p1-dgx-03-c[01-18]" in lines
    assert lines[-1] == "SwitchName=spine Switches=su[01-08]"
    # the rails are checked against the nodes' compute HCAs: each tray has 4 (HCA-1, -2, -5, -6), one per rail
    # leaf; su01's fourth leaf is missing from the recording, so its 3 rails are refused for 4-HCA nodes
    d["node_groups"][0]["nics"] = [{"name": f"mlx5_{i}", "kind": "ib", "rate_gbps": 400} for i in range(4)]
    with pytest.raises(InventoryError, match=r"topology.rail_optimized.units\[0\].rails: 3 rails, but host "
                                             r"'a05-p1-dgx-01-c01' has 4 compute HCAs"):
        load_cluster_dict(d)
    d["topology"]["rail_optimized"]["units"][0]["rails"] = 4
    assert load_cluster_dict(d).topology.rail_units[0].rails == 4


def test_a_qdr_fabric_with_a_name_map_finds_the_sites_own_leaves():
    """PSMN's X5: leaves and spines, no rails; the NodeDescriptions are adapter defaults, so host names come
    from the site's GUID map. The leaves are those of the topology.conf the site derived itself."""
    f = ibnet.parse((DATA / "psmn-x5.topofile").read_text())
    names = ibnet.parse_name_map((DATA / "psmn-x5.map").read_text())
    t = ibnet.infer(f, names)
    assert not t.rail_optimized and t.switches == 11
    ours = {hostlist.fold(u.hosts) for u in t.units}
    theirs = set()
    for line in (DATA / "psmn-x5.topology.conf").read_text().splitlines():
        m = re.match(r"SwitchName=\S+ Nodes=(\S+)", line)
        if m:  # the site's file lists HCAs it could not name as H-<guid>: ours leaves them out (a note says so)
            theirs.add(hostlist.fold(h for h in hostlist.expand(m.group(1)) if not h.startswith("H-")))
    assert ours == theirs
    assert t.uppers == (("spine", tuple(u.name for u in t.units)),)
    assert "3 HCA(s) name no host" in t.notes[0]
    with pytest.raises(UsageError, match="no HCA names a host"):
        ibnet.infer(f)


def _sw(guid: str, desc: str, ports: list[str]) -> str:
    return f'Switch\t8 "S-{guid}"\t\t# "{desc}" enhanced port 0 lid 1 lmc 0\n' + "".join(
        f'[{i}]\t{p}\t\t# "x" lid 2 4xHDR\n' for i, p in enumerate(ports, 1)) + "\n"


def test_pods_under_a_core_become_three_levels_of_switches():
    """A made-up three-tier fabric (the recorded ones have one spine layer): leaves l1,l2 under spine p1, l3,l4
    under p2, both spines under core c1. Units sharing a spine are one pod; pods get a core switch above them."""
    text = (_sw("01", "l1", ['"H-a1"[1](a1)', '"S-11"[1]']) + _sw("02", "l2", ['"H-a2"[1](a2)', '"S-11"[2]'])
            + _sw("03", "l3", ['"H-a3"[1](a3)', '"S-12"[1]']) + _sw("04", "l4", ['"H-a4"[1](a4)', '"S-12"[2]'])
            + _sw("11", "p1", ['"S-01"[2]', '"S-02"[2]', '"S-21"[1]']) + _sw("12", "p2", ['"S-03"[2]', '"S-04"[2]', '"S-21"[2]'])
            + _sw("21", "c1", ['"S-11"[3]', '"S-12"[3]'])
            + "".join(f'Ca\t1 "H-a{i}"\t\t# "n{i} mlx5_0"\n[1](a{i})\t"S-0{i}"[1]\t\t# lid 3 lmc 0 "l{i}" lid 1 4xHDR\n\n'
                      for i in range(1, 5)))
    t = ibnet.infer(ibnet.parse(text))
    assert not t.rail_optimized and [u.name for u in t.units] == ["l1", "l2", "l3", "l4"]
    assert t.uppers == (("pod01", ("l1", "l2")), ("pod02", ("l3", "l4")), ("core", ("pod01", "pod02")))
    assert t.inventory()["switches"][-1] == {"name": "core", "switches": "pod[01-02]"}


@pytest.mark.parametrize("desc, host", [
    ("node018 HCA-1", "node018"), ("a08-p1-dgx-04-c01 mlx5_5", "a08-p1-dgx-04-c01"), ("gpu01.example.org mlx5_0", "gpu01"),
    ("MT4129 ConnectX7   Mellanox Technologies", None), ("Mellanox Technologies Aggregation Node", None),
    ("localhost mlx5_0", None), ("x5570comp1", "x5570comp1"), ("", None),
])
def test_host_of_a_node_description(desc, host):
    assert ibnet.host_of(desc) == host


def test_bad_input_names_the_line():
    with pytest.raises(UsageError, match=r"x.out: line 2: a port link outside any Switch/Ca record"):
        ibnet.parse('vendid=0x2c9\n[1]\t"H-0002c90300293e1e"[1]\n', "x.out")
    with pytest.raises(UsageError, match=r"x.out: line 2: not a port link"):
        ibnet.parse('Switch\t36 "S-0002c9020046c588"\n[1] garbage\n', "x.out")
    with pytest.raises(UsageError, match="no Switch or Ca records"):
        ibnet.parse("hello\n", "x.out")
    with pytest.raises(UsageError, match=r"map: line 1: expected '<guid> <name>'"):
        ibnet.parse_name_map("nonsense\n", "map")


def test_cli_prints_the_fragment_and_refuses_options_without_a_file():
    from slurmkit.cli.conf import discover

    r = CliRunner().invoke(discover, ["--ibnetdiscover", str(DATA / "psmn-x5.topofile"),
                                      "--node-name-map", str(DATA / "psmn-x5.map")])
    assert r.exit_code == 0, r.output
    assert yaml.safe_load(r.output)["topology"]["switches"][-1]["name"] == "spine"
    r = CliRunner().invoke(discover, ["--match", "x"])
    assert isinstance(r.exception, UsageError) and "go with --ibnetdiscover" in str(r.exception)
