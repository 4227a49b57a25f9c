"""Inventory loading: valid inventories load; every bad one is a one-line error naming the key path."""

from pathlib import Path

import pytest
import yaml

from slurmkit.errors import InventoryError
from slurmkit.lab.inventory import lab_inventory
from slurmkit.model import load_cluster, load_cluster_dict, load_cluster_text

ROOT = Path(__file__).resolve().parents[2]


def base() -> dict:
    return lab_inventory()


def test_examples_lab_yaml_is_the_lab_default():
    """examples/lab.yaml documents exactly what `slurmkit lab up` renders by default."""
    assert yaml.safe_load((ROOT / "examples" / "lab.yaml").read_text()) == lab_inventory()


def test_load_lab():
    c = load_cluster(ROOT / "examples" / "lab.yaml")
    g = c.node_groups[0]
    assert g.hostnames == [f"node{i}" for i in range(1, 9)]
    assert g.cpu.cores == 8 and g.gpus is not None and g.gpus.file_list[-1] == "/dev/nvidia7"
    assert c.topology.kind == "tree" and c.default_partition.name == "gpu"
    assert len(c.source_sha256) == 64
    assert c.group_of("node3") is g and c.group_of("nope") is None


def mutate(fn) -> dict:
    d = base()
    fn(d)
    return d


@pytest.mark.parametrize(
    "change,path,words",
    [
        (lambda d: d["node_groups"][0]["cpu"].update(core_per_socket=4), "node_groups[0].cpu.core_per_socket", "did you mean 'cores_per_socket'"),
        (lambda d: d["node_groups"][0]["gpus"].update(count=4), "node_groups[0].gpus.files", "names 8 device files but count is 4"),
        (lambda d: d["node_groups"][0]["gpus"]["cores"].__setitem__(0, "0-99"), "node_groups[0].gpus.cores[0]", "inside the node's 8 cores"),
        (lambda d: d["node_groups"].append({**d["node_groups"][0], "name": "dup"}), "node_groups[1].hosts", "already in group"),
        (lambda d: d["partitions"][0].update(groups=["h10"]), "partitions[0].groups[0]", "did you mean 'h100'"),
        (lambda d: d["topology"]["switches"][1].update(nodes="node[4-8]"), "topology.switches[1].nodes", "in both 'leaf1' and 'leaf2'"),
        (lambda d: d["topology"]["switches"][0].update(nodes="node[1-4],ghost1"), "topology.switches[0].nodes", "'ghost1' is not in any node group"),
        (lambda d: d.update(slurm_version="21.08"), "slurm_version", "unsupported Slurm version"),
        (lambda d: d["node_groups"][0].update(memory_mb="lots"), "node_groups[0].memory_mb", "expected an integer"),
        (lambda d: d["node_groups"][0].pop("cpu"), "node_groups[0].cpu", "required key is missing"),
        (lambda d: d["node_groups"][0]["reserve"].update(memory_mb=40000), "node_groups[0].reserve.memory_mb", ">= memory_mb"),
        (lambda d: d["topology"]["switches"][2].update(switches="leaf[1-3]"), "topology.switches[2].switches", "unknown switch 'leaf3'"),
        (lambda d: d["node_groups"][0].update(hosts="node[1-"), "node_groups[0].hosts", "invalid hostlist"),
    ],
)
def test_bad_inventory_names_the_key_path(change, path, words):
    with pytest.raises(InventoryError) as ei:
        load_cluster_dict(mutate(change), source="inv.yaml")
    msg = ei.value.one_line()
    assert msg.startswith(f"inv.yaml: {path}: "), msg
    assert words in msg and "\n" not in str(ei.value)
    assert ei.value.exit_code == 2


def test_block_sizes_larger_than_the_blocks():
    d = base()
    d["slurm_version"] = "24.05"
    d["topology"] = {"blocks": [{"name": "b1", "nodes": "node[1-4]"}], "block_sizes": [4, 8]}
    with pytest.raises(InventoryError, match=r"topology.block_sizes: 8 is larger than all 4 nodes in blocks"):
        load_cluster_dict(d)


def test_yaml_syntax_error_names_line():
    with pytest.raises(InventoryError) as ei:
        load_cluster_text("cluster: a\nnode_groups: [\n", source="x.yaml")
    assert "x.yaml: line" in str(ei.value)


def test_hostlist_folding_is_canonical():
    d = base()
    d["node_groups"][0]["hosts"] = ["node3", "node1", "node2", "node4", "node5", "node6", "node7", "node8"]
    c = load_cluster_dict(d)
    assert c.node_groups[0].hosts == "node[1-8]"


def test_slurm_words_stay_strings_and_empty_values_unset():
    """YAML 1.1 would read OFF/NO as false and an empty value as None; slurm.conf must get what the admin wrote."""
    from slurmkit.generate import generate

    text = yaml.safe_dump(base()).replace("partitions:\n", "partitions:\n", 1) + (
        "slurm_conf:\n  PreemptMode: OFF\n  SuspendTime:\n  SchedulerParameters: bf_continue\n"
    )
    text = text.replace("max_time: 1-00:00:00", "max_time: 1-00:00:00\n  extra: {OverSubscribe: NO, AllowGroups: }")
    c = load_cluster_text(text)
    assert dict(c.slurm_conf)["PreemptMode"] == "OFF" and dict(c.partitions[0].extra)["OverSubscribe"] == "NO"
    conf = generate(c)["slurm.conf"]
    assert "PreemptMode=OFF\n" in conf and "SuspendTime" not in conf and "None" not in conf
    assert "OverSubscribe=NO" in conf and "AllowGroups" not in conf


def test_yes_is_not_a_boolean_and_env_needs_a_value():
    with pytest.raises(InventoryError, match=r"hooks.prolog: expected true or false, got 'yes'"):
        load_cluster_text(yaml.safe_dump(base()) + "hooks: {prolog: yes}\n")
    with pytest.raises(InventoryError, match=r"site.env.FOO: expected a value"):
        load_cluster_text(yaml.safe_dump(base()) + "site:\n  env:\n    FOO:\n")


def test_per_gpu_share_follows_reserve_and_threads():
    """DGX H100 preset: 2 x 56 cores x 2 threads, 4 cores reserved, 8 GPUs -> 108 cores / 8 = 13 whole cores
    = 26 CPUs per GPU (27, the thread share, rounds up to 14 cores per GPU under CR_Core: 8 GPUs no longer fit)."""
    g = load_cluster(ROOT / "examples" / "dgx-h100-superpod-su.yaml").node_groups[0]
    assert g.usable_cpus == (g.cpu.cores - g.reserve.cores) * g.cpu.threads_per_core
    assert g.cpus_per_gpu == (g.cpu.cores - g.reserve.cores) // 8 * g.cpu.threads_per_core == 26
    assert g.mem_per_gpu_mb == (g.memory_mb - g.reserve.memory_mb) // 8
    cpu_only = load_cluster(ROOT / "examples" / "compose.yaml").node_groups[0]
    assert cpu_only.gpu_count == 0 and cpu_only.cpus_per_gpu == 0 and cpu_only.mem_per_gpu_mb == 0
