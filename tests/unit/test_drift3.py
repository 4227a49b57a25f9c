"""Three-way drift (issue 20 item 3): inventory, files on disk and the running cluster, each finding naming which of
the three differs; recorded scontrol output of 22.05 and 24.11 as the cluster's side."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmkit.backend import parse
from slurmkit.generate.drift import compare, hash_mismatch, view_of_cluster, view_of_conf

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"

CONF = """ClusterName=lab
SlurmctldHost=h
NodeName=node[1-8] CPUs=8 Sockets=2 CoresPerSocket=4 ThreadsPerCore=1 RealMemory=32000 Gres=gpu:h100:8 Feature=nvlink,h100 Weight=10
NodeSet=ns_gpu Nodes=node[1-8]
PartitionName=gpu Nodes=ns_gpu Default=YES MaxTime=1-0 State=UP
"""


def _cluster(release: str) -> object:
    sub = DATA / release if release != "22.05" else DATA
    if release == "22.05":
        nodes = parse.parse_scontrol_nodes((sub / "scontrol_show_node.txt").read_text())
    else:
        nodes = parse.parse_nodes_json((sub / "scontrol_show_node.json").read_text())
    parts = [r for r in parse.parse_scontrol_records((sub / "scontrol_show_partition.txt").read_text())
             if "PartitionName" in r]
    return view_of_cluster(nodes, parts)


@pytest.mark.parametrize("release", ["22.05", "24.11"])
def test_recorded_lab_matches_its_config(release: str) -> None:
    """The recorded lab (8 x 8 H100, partition gpu with MaxTime=1-00:00:00) reads the same as its slurm.conf, where
    slurm.conf spells MaxTime 1-0, Features in another order and Default in the partition line."""
    running = _cluster(release)
    conf = view_of_conf(CONF)
    assert running.nodes["node1"]["Weight"] == "10"
    assert compare(conf, conf, running) == []


def test_each_verdict_names_the_source_that_differs() -> None:
    inv = view_of_conf(CONF)
    hand = view_of_conf(CONF.replace("Weight=10", "Weight=77"))
    (f,) = compare(inv, inv, hand)
    assert (f.what, f.field, f.inventory, f.files, f.cluster) == ("node[1-8]", "Weight", "10", "10", "77")
    assert "the cluster differs from its files" in f.line()
    (f,) = compare(hand, inv, inv)
    assert "not applied yet" in f.verdict
    (f,) = compare(inv, hand, inv)
    assert "the files differ" in f.verdict
    (f,) = compare(inv, hand, view_of_conf(CONF.replace("Weight=10", "Weight=5")))
    assert f.verdict == "all three differ"
    (f,) = compare(inv, None, hand)
    assert f.line() == "node[1-8]: Weight: inventory 10, cluster 77 (the cluster differs from the inventory)"


def test_partitions_made_or_changed_by_hand() -> None:
    inv = view_of_conf(CONF)
    extra = view_of_conf(CONF + "PartitionName=handmade Nodes=node1 State=DOWN\n")
    (f,) = compare(inv, inv, extra)
    assert f.line().startswith("partition handmade: defined: inventory -, files -, cluster yes")
    down = view_of_conf(CONF.replace("State=UP", "State=DOWN").replace("MaxTime=1-0", "MaxTime=120"))
    got = {(f.field, f.inventory, f.cluster) for f in compare(inv, inv, down)}
    assert got == {("State", "UP", "DOWN"), ("MaxTime", "1-00:00:00", "02:00:00")}
    # a node that is in the cluster only, and one missing from it
    fewer = view_of_conf(CONF.replace("node[1-8]", "node[1-7]"))
    lines = [f.line() for f in compare(inv, inv, fewer)]
    assert any(ln.startswith("node8: defined: inventory yes, files yes, cluster -") for ln in lines), lines


def test_hash_val_says_whether_slurmctld_loaded_the_file() -> None:
    # recorded: "HASH_VAL = Match" (22.05 and 24.11); config_info.c's other form
    for f in (DATA / "scontrol_show_config.txt", DATA / "24.11" / "scontrol_show_config.txt"):
        assert hash_mismatch(f.read_text()) is None
    text = "Configuration data as of 2026-12-01T15:51:40\nHASH_VAL                = Different Ours=0x1 Slurmctld=0x2\n"
    assert hash_mismatch(text) == "Different Ours=0x1 Slurmctld=0x2"
