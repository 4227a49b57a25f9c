"""Placement on the real lab (8 nodes x 8 GPUs, leaf1=node[1-4], leaf2=node[5-8] under a spine).

* `slurmkit report fragmentation --json` counts what Slurm really reports after real jobs and a real drain.
* gpusub puts a 3-node job on one leaf when node2 and node7 are busy (one free node short of a whole leaf on
  each side): Slurm's own choice there without a topology plugin is node[3-5], across both leaves
  (shared/reference/slurm-lab.md, last table). We assert the allocation Slurm made and SLURM_TOPOLOGY_ADDR
  inside the job. (A 4-node job cannot fit in one leaf once each leaf has a busy node, hence 3 nodes.)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from slurmkit.backend.cli import CLIBackend
from slurmkit.lab import Lab
from slurmkit.release import release_key
from tests.conftest import ROOT, lab_run

pytestmark = pytest.mark.lab


def _env(lab: Lab, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SLURMKIT_INVENTORY"}
    return {**env, **lab.env, "PYTHONPATH": str(ROOT), **extra}


def _wait(pred, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _states(b: CLIBackend) -> dict[str, str]:
    return {n.name: n.state + "".join(f"+{f}" for f in sorted(n.flags)) for n in b.nodes()}


def _occupy(lab: Lab, jobs: list[str], argv: list[str]) -> str:
    r = lab_run(lab, ["sbatch", "--parsable", "-o", "/dev/null", "-J", "sk-busy", *argv, "--wrap", "sleep 600"])
    jobs.append(r.stdout.strip().split(";")[0])
    return jobs[-1]


@pytest.fixture
def busy(lab: Lab) -> Iterator[list[str]]:
    """Job ids to cancel at the end (and wait for: the next test must see idle nodes)."""
    jobs: list[str] = []
    yield jobs
    b = CLIBackend(env=lab.env)
    if jobs:
        lab_run(lab, ["scancel", *jobs], check=False)
    _wait(lambda: all(s == "idle" for s in _states(b).values()), 60, "every lab node idle again")


def test_report_fragmentation_json_on_the_lab(lab: Lab, busy: list[str], tmp_path: Path):
    b = CLIBackend(env=lab.env)
    # the lab's inventory sits beside SLURM_CONF, where report finds it (slurmkit.siteinv); this one has no topology,
    # so the report reads Slurm's own (scontrol show topology)
    inv = yaml.safe_load((lab.etc / "slurmkit.yaml").read_text())
    del inv["topology"]
    (tmp_path / "no-topology.yaml").write_text(yaml.safe_dump(inv))
    _occupy(lab, busy, ["-N1", "-w", "node1", "--exclusive"])
    _occupy(lab, busy, ["-N1", "-w", "node5", "--exclusive"])
    _occupy(lab, busy, ["-N1", "-n1", "-w", "node8", "--gres=gpu:h100:2"])  # 6 GPUs left, node no longer whole
    lab_run(lab, ["scontrol", "update", "nodename=node3", "state=drain", "reason=sk-test report"])
    try:
        want = {"node1": "allocated", "node3": "idle+DRAIN", "node5": "allocated", "node8": "mixed"}
        _wait(lambda: all(_states(b)[n] == s for n, s in want.items()), 30, f"node states {want}")
        r = subprocess.run([sys.executable, "-m", "slurmkit", "report", "fragmentation", "--json", "-p", "gpu"],
                           env=_env(lab, SLURMKIT_INVENTORY=str(tmp_path / "no-topology.yaml")),
                           capture_output=True, text=True, timeout=60, cwd=ROOT)
        beside = subprocess.run([sys.executable, "-m", "slurmkit", "report", "fragmentation", "--json", "-p", "gpu"],
                                env=_env(lab), capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
    finally:
        lab_run(lab, ["scontrol", "update", "nodename=node3", "state=resume"], check=False)
    assert (doc["topology"], doc["kind"], doc["nodes"], doc["gpus"]) == ("slurm", "tree", 8, 64)
    # the inventory found beside SLURM_CONF describes the same tree: the same numbers
    other = json.loads(beside.stdout)
    assert other.pop("topology") == f"inventory {lab.etc / 'slurmkit.yaml'}"
    assert {k: v for k, v in doc.items() if k != "topology"} == other
    # free whole nodes: node2, node4 (leaf1); node6, node7 (leaf2)
    assert (doc["free_nodes"], doc["free_leaves"]) == (4, 0)
    assert (doc["free_gpus"], doc["stranded_gpus"]) == (4 * 8 + 6, 6)
    assert (doc["largest_job_one_leaf_nodes"], doc["largest_job_anywhere_nodes"]) == (2, 4)
    assert doc["fragmentation_index"] == 0.5  # 1 - (2*2/4 + 2*2/4) / 4
    assert [(x["name"], x["free_nodes"], x["free_gpus"]) for x in doc["per_leaf"]] == [
        ("leaf1", 2, 16), ("leaf2", 2, 22)
    ]


SCRIPT = """#!/bin/bash
echo "$(hostname) $SLURM_TOPOLOGY_ADDR" > "$OUT_DIR/$(hostname).txt"
"""


def _gpusub(lab: Lab, tmp_path: Path, topology: str, **env: str) -> tuple[str, str]:
    """Submit a 3-node exclusive job through gpusub; -> (job id, gpusub's stdout)."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    script = tmp_path / "where.sh"
    script.write_text(SCRIPT)
    script.chmod(0o755)
    r = subprocess.run(
        [sys.executable, "-m", "slurmkit.cli.gpusub", "-N3", "--exclusive", "--gpus-per-node", "1",
         "--launcher", "srun", "--time", "5", "--topology", topology, "--env", f"OUT_DIR={out}",
         "--run-dir", str(tmp_path / f"run-{topology}"), str(script)],
        env=_env(lab, **env), capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    m = re.search(r"logs/(\d+)\.r0\.log", r.stdout)
    assert m, r.stdout
    return m.group(1), r.stdout


def test_gpusub_keeps_a_3_node_job_inside_one_leaf(lab: Lab, busy: list[str], tmp_path: Path):
    b = CLIBackend(env=lab.env)
    _occupy(lab, busy, ["-N1", "-w", "node2", "--exclusive"])
    _occupy(lab, busy, ["-N1", "-w", "node7", "--exclusive"])
    _wait(lambda: _states(b)["node2"] == _states(b)["node7"] == "allocated", 30, "node2 and node7 allocated")
    job_id, out = _gpusub(lab, tmp_path, "auto")
    busy.append(job_id)
    assert "placement: 3 nodes on leaf1 (1 leaf)" in out
    job = _wait(lambda: (j := b.job(job_id)).finished and j, 60, f"job {job_id} to finish")
    assert job.state == "COMPLETED", out
    raw = lab_run(lab, ["scontrol", "show", "job", job_id]).stdout
    assert re.search(r"^\s*NodeList=node\[1,3-4\]\s*$", raw, re.M), raw  # the allocation Slurm made
    where = {p.stem: p.read_text().split() for p in (tmp_path / "out").iterdir()}
    assert where == {n: [n, f"spine.leaf1.{n}"] for n in ("node1", "node3", "node4")}


def _restart_ctld_without_topology(lab: Lab) -> None:
    """Slurm without our placement: TopologyPlugin=topology/none. `scontrol reconfigure` keeps the tree plugin
    loaded in 22.05 (measured), so the controller is restarted on the changed config; jobs survive (state save)."""
    conf = lab.conf.read_text()
    lab.conf.write_text(conf.replace("TopologyPlugin=topology/tree", "TopologyPlugin=topology/none"))
    yaml_file = lab.etc / "topology.yaml"
    if yaml_file.exists():  # 25.05+: topology.yaml, where present, wins over TopologyPlugin (topology.yaml(5))
        yaml_file.rename(lab.etc / "topology.yaml.off")
    pid = int((lab.run_dir / "slurmctld.pid").read_text())
    lab_run(lab, ["scontrol", "shutdown", "slurmctld"])

    def gone() -> bool:  # the lab's daemons are reaped lazily: a zombie counts as gone
        try:
            return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
        except OSError:
            return True

    _wait(gone, 30, "slurmctld to stop")
    subprocess.run(["slurmctld", "-f", str(lab.conf)], env=_env(lab), check=True, timeout=20)
    _wait(lambda: "UP" in lab_run(lab, ["scontrol", "ping"], check=False).stdout, 20, "slurmctld up")
    lab_run(lab, ["scontrol", "reconfigure"])  # makes every slurmd register again (nodes leave UNKNOWN)
    b = CLIBackend(env=lab.env)
    _wait(lambda: "unknown" not in {n.state for n in b.nodes()}, 30, "nodes registered")
    shown = lab_run(lab, ["scontrol", "show", "topology"], check=False)
    if release_key(lab.release) < (23, 11):
        # 22.05 src/api/topo_info.c:113: the client says so for any plugin without switch records
        assert "No topology information" in shown.stderr
    else:
        # 24.11 moved that message into topology/tree and topology/block (topology_tree.c:638); topology/default
        # (what "none" loads) prints nothing at all
        assert shown.stdout.strip() == "" and "tree" not in shown.stderr


def test_gpusub_one_leaf_where_slurm_without_topology_spans_two(make_lab, tmp_path: Path):
    """Own lab (its controller is restarted on topology/none): the contrast the issue asks for."""
    lab = make_lab()
    _restart_ctld_without_topology(lab)
    b = CLIBackend(env=lab.env)
    jobs: list[str] = []
    try:
        _occupy(lab, jobs, ["-N1", "-w", "node2", "--exclusive"])
        _occupy(lab, jobs, ["-N1", "-w", "node7", "--exclusive"])
        _wait(lambda: _states(b)["node2"] == _states(b)["node7"] == "allocated", 30, "node2 and node7 allocated")
        # Slurm's own choice for the same request
        own = lab_run(lab, ["sbatch", "--test-only", "-N3", "--exclusive", "--wrap", "true"]).stderr
        assert "on nodes node[3-5]" in own, own
        # gpusub with the inventory's topology, default --topology auto: the three nodes of leaf1 are idle now,
        # so it pins them (--switches alone would be ignored by Slurm without topology/tree)
        job_id, out = _gpusub(lab, tmp_path, "auto", SLURMKIT_INVENTORY=str(lab.etc / "slurmkit.yaml"))
        jobs.append(job_id)
        assert "3 nodes on leaf1 (1 leaf)" in out and "--nodelist=node[1,3-4]" in out, out
        job = _wait(lambda: (j := b.job(job_id)).finished and j, 60, f"job {job_id} to finish")
        assert job.state == "COMPLETED", out
        raw = lab_run(lab, ["scontrol", "show", "job", job_id]).stdout
        assert re.search(r"^\s*NodeList=node\[1,3-4\]\s*$", raw, re.M), raw
        # SLURM_TOPOLOGY_ADDR comes from slurmd. 22.05: its tree plugin stays loaded (only the controller, which
        # chooses nodes, was restarted), so it shows that every task ran under leaf1. 23.11+: `scontrol reconfigure`
        # restarts the slurmds too (scontrol.1 of 23.11: "creating new processes for the daemons"), now on
        # topology/none: the bare node name
        where = {p.stem: p.read_text().split() for p in (tmp_path / "out").iterdir()}
        addr = (lambda n: f"spine.leaf1.{n}") if release_key(lab.release) < (23, 11) else (lambda n: n)
        assert where == {n: [n, addr(n)] for n in ("node1", "node3", "node4")}
    finally:
        lab_run(lab, ["scancel", *jobs], check=False)
