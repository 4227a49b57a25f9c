"""topology/block for real: a lab of two 4-node blocks (NVL72-style domains) on a release that has it.

Slurm's block plugin keeps a job that fits in a block inside one; gpusub's placement and the fragmentation report
must see the same blocks (from the inventory, or from `scontrol show topology` without one).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from slurmkit.backend.cli import CLIBackend
from slurmkit.lab import Lab
from slurmkit.release import release_key
from tests.conftest import ROOT, lab_run, release_under_test
from tests.integration.test_placement_lab import SCRIPT, _occupy, _states, _wait

pytestmark = [
    pytest.mark.lab,
    pytest.mark.releases,  # tests/run.sh runs `lab and releases` on 24.11 and 26.05: these run there
    # topology.conf.5 of slurm-24-05-8-1: BlockSizes (what the lab and the generator write) came in 24.05; 23.11 had
    # BlockLevels and 22.05 no topology/block at all.
    pytest.mark.skipif(
        release_key(release_under_test()) < (24, 5),
        reason="topology/block with BlockSizes needs Slurm 24.05+; the 24.11 and 26.05 passes of tests/run.sh run this",
    ),
]


@pytest.fixture(scope="module")
def blab(make_lab) -> Lab:  # type: ignore[no-untyped-def]
    return make_lab(topology="block", nodes=8, nodes_per_leaf=4, gpus_per_node=2)


@pytest.fixture
def jobs(blab: Lab):  # type: ignore[no-untyped-def]
    ids: list[str] = []
    yield ids
    if ids:
        lab_run(blab, ["scancel", *ids], check=False)
    b = CLIBackend(env=blab.env)
    _wait(lambda: all(s == "idle" for s in _states(b).values()), 60, "every node idle again")


def _topology_file(lab: Lab) -> str:
    """topology.conf, or topology.yaml where it replaces it (25.05+)."""
    conf = lab.etc / "topology.conf"
    return conf.read_text() if conf.exists() else (lab.etc / "topology.yaml").read_text()


def _env(lab: Lab, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SLURMKIT_INVENTORY"}
    return {**env, **lab.env, "PYTHONPATH": str(ROOT), **extra}


def test_block_lab_loads_its_blocks(blab: Lab):
    conf = _topology_file(blab)
    assert ("BlockName=b1 Nodes=node[1-4]" in conf or re.search(r"block: b1\s+nodes: node\[1-4\]", conf)), conf
    assert re.search(r"BlockSizes=4,8|block_sizes:\s*\n\s*- 4\s*\n\s*- 8", conf), conf
    assert "TopologyPlugin=topology/block" in blab.conf.read_text()
    shown = lab_run(blab, ["scontrol", "show", "topology"]).stdout
    assert re.search(r"^BlockName=b1 .*Nodes=node\[1-4\]", shown, re.M), shown
    assert re.search(r"^BlockName=b2 .*Nodes=node\[5-8\]", shown, re.M), shown
    recs = CLIBackend(env=blab.env).blocks()
    assert [(r.name, r.nodes, r.size, r.aggregated) for r in recs if not r.aggregated] == [
        ("b1", [f"node{i}" for i in range(1, 5)], 4, False), ("b2", [f"node{i}" for i in range(5, 9)], 4, False)]
    assert CLIBackend(env=blab.env).topology() == []  # no switches


def test_two_busy_nodes_in_different_blocks(blab: Lab, jobs: list[str], tmp_path: Path):
    """node2 (b1) and node7 (b2) busy: 3 free nodes in each block. Slurm and gpusub keep a 3-node job in one
    block; the report counts no free block and 3 nodes as the largest one-block job."""
    b = CLIBackend(env=blab.env)
    _occupy(blab, jobs, ["-N1", "-w", "node2", "--exclusive"])
    _occupy(blab, jobs, ["-N1", "-w", "node7", "--exclusive"])
    _wait(lambda: _states(b)["node2"] == _states(b)["node7"] == "allocated", 30, "node2 and node7 allocated")
    # Slurm's own choice: inside one block
    own = lab_run(blab, ["sbatch", "--test-only", "-N3", "--exclusive", "--wrap", "true"]).stderr
    assert re.search(r"on nodes node\[(1,3-4|5-6,8)\]", own), own
    # gpusub with the inventory's blocks
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    script = tmp_path / "where.sh"
    script.write_text(SCRIPT)
    script.chmod(0o755)
    r = subprocess.run(
        [sys.executable, "-m", "slurmkit.cli.gpusub", "-N3", "--exclusive", "--gpus-per-node", "1", "--launcher", "srun",
         "--time", "5", "--env", f"OUT_DIR={out_dir}", "--run-dir", str(tmp_path / "run"), str(script)],
        env=_env(blab, SLURMKIT_INVENTORY=str(blab.etc / "slurmkit.yaml")), capture_output=True, text=True,
        timeout=120, cwd=tmp_path,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "placement: 3 nodes on b1 (1 block)" in r.stdout, r.stdout
    job_id = re.search(r"logs/(\d+)\.r0\.log", r.stdout).group(1)  # type: ignore[union-attr]
    jobs.append(job_id)
    job = _wait(lambda: (j := b.job(job_id)).finished and j, 60, f"job {job_id} to finish")
    assert job.state == "COMPLETED", r.stdout
    assert sorted(p.stem for p in out_dir.iterdir()) == ["node1", "node3", "node4"]
    # the fragmentation report, from the inventory and from Slurm's own block records
    for extra in ({"SLURMKIT_INVENTORY": str(blab.etc / "slurmkit.yaml")}, {}):
        rep = subprocess.run([sys.executable, "-m", "slurmkit", "report", "fragmentation", "--json", "-p", "gpu"],
                             env=_env(blab, **extra), capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert rep.returncode == 0, rep.stderr
        doc = json.loads(rep.stdout)
        assert doc["kind"] == "block" and (doc["free_nodes"], doc["free_leaves"]) == (6, 0), doc
        assert (doc["largest_job_one_leaf_nodes"], doc["largest_job_anywhere_nodes"]) == (3, 6)
        assert [(x["name"], x["free_nodes"]) for x in doc["per_leaf"]] == [("b1", 3), ("b2", 3)]


@pytest.fixture(scope="module")
def gblab(make_lab) -> Lab:  # type: ignore[no-untyped-def]
    """The GB200 NVL72 preset (targets 24.11) scaled to the lab: 2 of its NVLink-domain blocks, 4 trays each."""
    return make_lab(preset=str(ROOT / "examples" / "gb200-nvl72.yaml"), nodes=8, nodes_per_leaf=4)


def test_gb200_preset_loads_and_the_report_counts_free_blocks(gblab: Lab):
    # the preset's node group as it is: 2 x 72 cores, 4 GB200, its reserve, its partition
    nodes = lab_run(gblab, ["sinfo", "-h", "-N", "-o", "%N|%t|%c|%G|%P"]).stdout.split()
    assert [n.split("|")[0] for n in nodes] == [f"node{i}" for i in range(1, 9)], nodes
    assert all(n.split("|")[1:] == ["idle", "144", "gpu:gb200:4(S:0-1)", "batch*"] for n in nodes), nodes
    spec = lab_run(gblab, ["scontrol", "show", "node", "node1"]).stdout
    assert "CoreSpecCount=2" in spec and "MemSpecLimit=24576" in spec, spec
    # its blocks, by its names, cut to 4 trays; BlockSizes scaled with them
    assert re.search(r"BlockSizes=4,8|block_sizes:\s*\n\s*- 4\s*\n\s*- 8", _topology_file(gblab))
    shown = lab_run(gblab, ["scontrol", "show", "topology"]).stdout
    assert re.search(r"^BlockName=nvl01 .*Nodes=node\[1-4\]", shown, re.M), shown
    assert re.search(r"^BlockName=nvl02 .*Nodes=node\[5-8\]", shown, re.M), shown
    b = CLIBackend(env=gblab.env)
    jobs: list[str] = []
    try:
        _occupy(gblab, jobs, ["-N1", "-w", "node6", "--exclusive"])
        _wait(lambda: _states(b)["node6"] == "allocated", 30, "node6 allocated")
        # one block (nvl01) is wholly free, nvl02 has 3 free trays: from the inventory and from Slurm's records
        for extra in ({"SLURMKIT_INVENTORY": str(gblab.etc / "slurmkit.yaml")}, {}):
            rep = subprocess.run([sys.executable, "-m", "slurmkit", "report", "fragmentation", "--json", "-p", "batch"],
                                 env=_env(gblab, **extra), capture_output=True, text=True, timeout=60, cwd=ROOT)
            assert rep.returncode == 0, rep.stderr
            doc = json.loads(rep.stdout)
            assert (doc["kind"], doc["unit"], doc["leaves"], doc["free_leaves"]) == ("block", "block", 2, 1), doc
            assert [(x["name"], x["free_nodes"], x["free_gpus"]) for x in doc["per_leaf"]] == [
                ("nvl01", 4, 16), ("nvl02", 3, 12)], doc
            assert (doc["largest_job_one_leaf_nodes"], doc["largest_job_anywhere_nodes"]) == (4, 7), doc
        text = subprocess.run([sys.executable, "-m", "slurmkit", "report", "fragmentation", "-p", "batch"],
                              env=_env(gblab), capture_output=True, text=True, timeout=60, cwd=ROOT).stdout
        assert re.search(r"free whole blocks\s+1 / 2", text), text
    finally:
        lab_run(gblab, ["scancel", *jobs], check=False)
        _wait(lambda: all(s == "idle" for s in _states(b).values()), 60, "every node idle again")
