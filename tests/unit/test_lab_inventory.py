"""`lab up --gpu-type a100:2,h100:2` (issue 24 item 6): a lab of several GPU types, one node group and one partition
per type beside `gpu`, loaded by the one loader. On a real slurmctld:
tests/integration/test_tenants_lab.py::test_two_gpu_types_typed_quotas_against_slurmctld."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from slurmkit.errors import LabError
from slurmkit.generate import generate
from slurmkit.lab import LabSpec
from slurmkit.lab.inventory import gpu_types, lab_inventory
from slurmkit.model import load_cluster_text


def test_gpu_types_spec():
    assert gpu_types("h100", 4) == [("h100", 4)]
    assert gpu_types("a100:2,h100:2", 4) == [("a100", 2), ("h100", 2)]
    for bad, words in (("a100:2,h100:1", "names 3 nodes, the lab has 4"), ("a100:x", "not TYPE:NODES"),
                       ("a100:2,a100:2", "given twice"), ("a100:0,h100:4", "not TYPE:NODES"),
                       ("a100:²,h100:2", "not TYPE:NODES"), ("a100:\u0662,h100:2", "not TYPE:NODES"),
                       ("A100:2,a100:2", "given twice"), ("a b:2,h100:2", "not a GPU type name"),
                       ("x=y", "not a GPU type name"), ("", "not a GPU type name"),
                       ("gpu:2,h100:2", "second partition 'gpu'")):
        with pytest.raises(ValueError, match=words):
            gpu_types(bad, 4)


def test_lab_up_refuses_a_bad_gpu_type_in_one_line_before_anything_starts(tmp_path):
    import subprocess
    import sys

    for bad in ("a100:²", "gpu:2,h100:2,a b:1", "a100:0"):
        r = subprocess.run([sys.executable, "-m", "slurmkit", "lab", "up", "--dir", str(tmp_path / "lab"),
                            "--gpu-type", bad], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "--gpu-type" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "lab").exists()


def test_two_type_lab_inventory_loads_and_renders_both_types():
    inv = lab_inventory(4, 2, "a100:2,h100:2", 2, accounting=True, submit_policy=True, slurm_version="24.11")
    assert [(g["name"], g["hosts"], g["gpus"]["type"]) for g in inv["node_groups"]] == [
        ("a100", "node[1-2]", "a100"), ("h100", "node[3-4]", "h100")]
    assert [(p["name"], p["groups"]) for p in inv["partitions"]] == [
        ("gpu", ["a100", "h100"]), ("a100", ["a100"]), ("h100", ["h100"]), ("gpu-short", ["a100", "h100"])]
    text = yaml.safe_dump(inv, sort_keys=False)
    assert "&id" not in text  # no YAML anchors in the lab's inventory copy
    files = generate(load_cluster_text(text, source="lab"), version="24.11")
    nodes = [ln for ln in files["slurm.conf"].splitlines() if ln.startswith("NodeName=")]
    assert "Gres=gpu:a100:2" in nodes[0] and "Gres=gpu:h100:2" in nodes[1]
    assert "Type=a100" in files["gres.conf"] and "Type=h100" in files["gres.conf"]
    with pytest.raises(ValueError, match="--power takes a lab of one GPU type"):
        lab_inventory(4, 2, "a100:2,h100:2", 2, power_nodes=1)


def test_spec_node_types_and_refusals():
    s = LabSpec(nodes=3, gpu_type="a100:1,h100:2", spare=1)
    assert [s.node_gpu_type(n) for n in s.all_node_names] == ["a100", "h100", "h100", "h100"]
    with pytest.raises(LabError, match="names 2 nodes, the lab has 3"):
        _ = LabSpec(nodes=3, gpu_type="a100:1,h100:1").gpu_types


def test_lab_up_help_says_the_gpu_type_form_and_the_accounting_ports():
    r = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "lab", "up", "--help"], capture_output=True,
                       text=True, check=True)
    text = " ".join(r.stdout.split())
    assert "TYPE:NODES" in text and "a100:2,h100:2" in text
    assert "--port-base+1000 (slurmdbd) and +1001 (MariaDB)" in text
    assert "ephemeral range" in text
