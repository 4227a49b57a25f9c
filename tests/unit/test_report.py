"""`slurmkit report fragmentation` against a fake scontrol serving output recorded from the lab.

The fake is an executable on PATH, so the command goes through the real CLIBackend and run() choke point.
Recorded state (tests/data/slurm): node1 mixed (2 of 8 GPUs used), node2-4 idle, node5-6 allocated,
node7 drained by an admin, node8 drained by slurmkit; leaves node[1-4], node[5-8] under a spine.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from slurmkit.lab.inventory import lab_inventory
from tests.conftest import DATA, ROOT, needs

FAKE_SCONTROL = """#!/bin/sh
# serves recorded output; logs each call so tests can count Slurm calls
echo "$*" >> "$FAKE_LOG"
case "$*" in
  "-o -d show node") cat "$FAKE_DATA/scontrol_show_node.txt" ;;
  "-o show partition") cat "$FAKE_DATA/scontrol_show_partition.txt" ;;
  "show topology")
    if [ -n "$FAKE_TOPOLOGY" ]; then cat "$FAKE_TOPOLOGY"; else echo "No topology information available"; exit 1; fi ;;
  *) echo "fake scontrol: unexpected $*" >&2; exit 9 ;;
esac
"""

FAKE_SINFO = """#!/bin/sh
case "$*" in
  --version) echo "slurm 22.05.8" ;;
  *) echo "fake sinfo: unexpected $*" >&2; exit 9 ;;
esac
"""


@pytest.fixture
def fake(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "scontrol"
    exe.write_text(FAKE_SCONTROL)
    exe.chmod(0o755)
    # the recorded text is 22.05's: the fake's release too, whatever Slurm the host has (CLIBackend.version() asks
    # `sinfo --version`; a 24.11 host's answer would make the product ask `scontrol --json`, rightly)
    ver = bin_dir / "sinfo"
    ver.write_text(FAKE_SINFO)
    ver.chmod(0o755)
    return {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "FAKE_DATA": str(DATA / "slurm"),
        "FAKE_LOG": str(tmp_path / "calls.log"),
        "FAKE_TOPOLOGY": str(DATA / "slurm" / "scontrol_show_topology.txt"),
        "PYTHONPATH": str(ROOT),
    }


def report(env: dict[str, str], *args: str, extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k != "SLURMKIT_INVENTORY"}
    full.update(env)
    full.update(extra or {})
    return subprocess.run([sys.executable, "-m", "slurmkit", "report", "fragmentation", *args],
                          env=full, capture_output=True, text=True, timeout=60, cwd=ROOT)


def calls(env: dict[str, str]) -> list[str]:
    p = Path(env["FAKE_LOG"])
    return p.read_text().splitlines() if p.exists() else []


def test_json_numbers_from_recorded_cluster(fake):
    r = report(fake, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["topology"] == "slurm" and doc["kind"] == "tree" and doc["partition"] is None
    assert (doc["nodes"], doc["gpus"], doc["leaves"]) == (8, 64, 2)
    assert (doc["free_gpus"], doc["stranded_gpus"]) == (30, 6)  # node2-4 whole + 6 on node1
    assert (doc["free_nodes"], doc["free_leaves"]) == (3, 0)
    assert (doc["largest_job_one_leaf_nodes"], doc["largest_job_anywhere_nodes"]) == (3, 3)
    assert doc["largest_single_node_gpus"] == 8
    # all 3 free nodes sit in leaf1 (size 4): F = 1 - (3*3/4)/3 = 0.25
    assert doc["fragmentation_index"] == 0.25
    assert [(leaf["name"], leaf["free_nodes"], leaf["free_gpus"]) for leaf in doc["per_leaf"]] == [
        ("leaf1", 3, 30), ("leaf2", 0, 0)
    ]
    # one node query, one topology query, no partition query without --partition
    assert calls(fake) == ["-o -d show node", "show topology"]


def test_table(fake):
    r = report(fake, "--partition", "gpu")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "fragmentation of partition gpu: 8 nodes, 64 GPUs, topology from slurm"
    assert "free GPUs                  30 / 64  (6 stranded on partly busy nodes)" in lines
    assert "free whole leaves          0 / 2" in lines
    assert "largest job now, one leaf  3 nodes" in lines
    assert any(line.startswith("fragmentation index        0.25") for line in lines)
    assert "leaf1      4           3      30/32" in lines
    assert "leaf2      4           0       0/32  full" in lines
    assert calls(fake) == ["-o -d show node", "show topology", "-o show partition"]


def test_inventory_topology_is_used_without_asking_slurm(fake, tmp_path):
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump(lab_inventory()))
    r = report(fake, "--json", extra={"SLURMKIT_INVENTORY": str(inv)})
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["topology"] == f"inventory {inv}" and doc["free_nodes"] == 3
    assert calls(fake) == ["-o -d show node"]


def test_no_topology_plugin_gives_one_flat_leaf(fake):
    r = report(fake, "--json", extra={"FAKE_TOPOLOGY": ""})
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert (doc["kind"], doc["leaves"], doc["largest_job_one_leaf_nodes"]) == ("flat", 1, 3)
    assert doc["fragmentation_index"] == pytest.approx(1 - 3 / 8, abs=1e-4)


def test_unknown_partition_is_one_line_exit_2(fake):
    r = report(fake, "--partition", "nope")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == "slurmkit: error: partition 'nope' does not exist (partitions: gpu)\n"


def test_topology_naming_unknown_nodes_is_one_line_exit_2(fake, tmp_path):
    topo = tmp_path / "topo.txt"
    topo.write_text("SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=node[1-4]\n"
                    "SwitchName=leaf2 Level=0 LinkSpeed=1 Nodes=node[5-9]\n")
    r = report(fake, extra={"FAKE_TOPOLOGY": str(topo)})
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == "slurmkit: error: topology: leaf switch 'leaf2' names unknown node(s) node9\n"


def test_inventory_topology_naming_unknown_nodes(fake, tmp_path):
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump(lab_inventory(nodes=12)))  # node9-12 do not exist in Slurm
    r = report(fake, "--inventory", str(inv))
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1
    assert "names unknown node(s) node[9-12]" in r.stderr


def test_png_without_matplotlib_writes_nothing(fake, tmp_path):
    # a matplotlib.py first on the path that fails to import, as on an install without the plot extra
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "matplotlib.py").write_text("raise ImportError('No module named matplotlib')\n")
    out = tmp_path / "frag.png"
    r = report(fake, "--png", str(out), extra={"PYTHONPATH": f"{blocker}{os.pathsep}{ROOT}"})
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == (
        "slurmkit: error: --png needs matplotlib, which is not installed: pip install 'slurmkit[plot]'\n"
    )
    assert not out.exists() and calls(fake) == []  # failed before asking Slurm anything


@needs(importlib.util.find_spec("matplotlib") is not None, "needs the 'plot' extra (matplotlib)")
def test_png_is_written(fake, tmp_path):
    out = tmp_path / "frag.png"
    r = report(fake, "--png", str(out), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["png"] == str(out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".frag.png")] == []  # no temp file left


@needs(importlib.util.find_spec("matplotlib") is not None, "needs the 'plot' extra (matplotlib)")
def test_png_into_missing_directory_is_one_line(fake, tmp_path):
    r = report(fake, "--png", str(tmp_path / "no" / "such" / "frag.png"))
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "cannot write there" in r.stderr


def test_tree_layout_puts_switches_over_their_leaves():
    from slurmkit.backend import parse
    from slurmkit.placement import PlacementTopology
    from slurmkit.placement.render import tree_layout

    topo = PlacementTopology.from_records(parse.parse_topology((DATA / "slurm" / "scontrol_show_topology.txt").read_text()))
    lay = tree_layout(topo)
    assert lay["leaves"] == [("leaf1", 0.0), ("leaf2", 1.0)]
    assert lay["switches"] == [("spine", 1, 0.5)]
    assert sorted(lay["edges"]) == [((0.0, 0.0), (0.5, 1.0)), ((1.0, 0.0), (0.5, 1.0))]


def test_report_takes_the_topology_from_the_inventory_beside_slurm_conf(fake: dict[str, str], tmp_path: Path) -> None:
    # issue 9 item 17: slurmkit.siteinv's lookup, as gpusub uses it
    site = tmp_path / "site-etc"
    site.mkdir()
    (site / "slurm.conf").write_text("ClusterName=lab\n")
    (site / "slurmkit.yaml").write_text(yaml.safe_dump(lab_inventory()))
    r = report(fake, "--json", extra={"SLURM_CONF": str(site / "slurm.conf")})
    assert r.returncode == 0, r.stderr
    assert f'"topology": "inventory {site / "slurmkit.yaml"}"' in r.stdout
    assert calls(fake) == ["-o -d show node"]  # no `scontrol show topology`: the inventory had it
