"""`slurmkit acceptance run` against a real Slurm lab: healthy, then with node3 really slowed (a cgroup v1 CPU quota
on its slurmd and jobs, `slurmkit lab slow`). The measurements are real gloo all-reduces run as Slurm jobs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurmkit.lab import slow as slowmod

pytestmark = pytest.mark.lab

SLURMKIT = str(Path(sys.executable).with_name("slurmkit"))


@pytest.fixture(scope="module")
def alab(make_lab):
    lab = make_lab()  # 8 nodes, leaves node[1-4] and node[5-8]
    yield lab
    slowmod.restore(lab)


def acceptance(lab, tmp: Path, *args: str, timeout: float = 1500) -> tuple[dict, str]:
    env = {**os.environ, **lab.env}
    p = subprocess.run([SLURMKIT, "acceptance", "run", "--json", "--out", str(tmp / "acc"), *args], cwd=tmp, env=env,
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout), p.stderr


def node_reasons(lab) -> dict[str, str]:
    from slurmkit.backend.cli import CLIBackend

    return {n.name: n.reason for n in CLIBackend(env=lab.env).nodes() if n.drained}


def outlier_nodes(doc: dict) -> set[str]:
    return {n for o in doc["outliers"] for n in o["nodes"]}


def test_healthy_lab_has_no_outlier(alab, tmp_path: Path) -> None:
    doc, err = acceptance(alab, tmp_path, "--levels", "node,pair,leaf")
    assert doc["outliers"] == [], doc["outliers"]
    assert doc["complete"] and doc["transport"] == "gloo"
    ms = doc["measurements"]
    assert {m["level"] for m in ms} == {"node", "pair", "leaf"}
    assert all(m["busbw"] and m["busbw"] > 0 and m["points"] for m in ms), [m for m in ms if not m["busbw"]]
    # gloo moves CPU buffers: the lab inventory's h100 NVLink (450 GB/s) is no expectation for it
    assert all(m["expected"] is None and m["verdict"] != "below-expected" for m in ms), [
        (m["key"], m["expected"], m["verdict"]) for m in ms if m["expected"] is not None]
    # every level's rule is in the report with its threshold, a passing one too
    assert {j["level"] for j in doc["judged"]} == {"node", "pair", "leaf"}
    assert all(j["threshold"] > 0 and j["margin"] for j in doc["judged"]), doc["judged"]
    # the leaf runs (a noisy healthy lab may also bisect a leaf; confirmation then keeps it out of the outliers)
    assert {tuple(m["leaves"]) for m in ms if m["level"] == "leaf" and m["step"] == "measure"} == {("leaf1",) * 4,
                                                                                            ("leaf2",) * 4}
    assert Path(doc["png"]).stat().st_size > 10_000  # the picture, from CI's run
    assert "done" in err  # progress on stderr
    assert node_reasons(alab) == {}


def test_slow_node3_is_named_alone_in_fewer_jobs_than_all_pairs_and_drained_only_with_drain(alab, tmp_path: Path):
    subprocess.run([SLURMKIT, "lab", "slow", "--dir", str(alab.dir), "node3"], check=True, capture_output=True)
    assert slowmod.slowed(alab) == {"node3": 0.1}
    try:
        doc, err = acceptance(alab, tmp_path)  # the contract: default levels, the cluster $SLURM_CONF points at
        assert outlier_nodes(doc) == {"node3"}, (doc["outliers"], doc["suspects"],
                                                 [(m["key"], m["busbw"], m["verdict"]) for m in doc["measurements"]])
        assert doc["jobs"] < 8 * 7 // 2, doc["jobs"]
        assert "node3" in err  # the suspect shows in the progress
        assert node_reasons(alab) == {}  # without --drain nothing changes
        slow = [m for m in doc["measurements"] if m["verdict"] == "slow"]
        assert slow and all("node3" in m["nodes"] for m in slow)

        doc2, _ = acceptance(alab, tmp_path, "--levels", "node", "--drain")
        assert outlier_nodes(doc2) == {"node3"}, [(m["key"], m["busbw"], m["verdict"]) for m in doc2["measurements"]]
        reasons = node_reasons(alab)
        assert list(reasons) == ["node3"]
        assert reasons["node3"].startswith("slurmkit: acceptance node:") and "GB/s" in reasons["node3"]
        assert [d["node"] for d in doc2["drained"] if d["action"] == "drained"] == ["node3"]
    finally:
        slowmod.restore(alab)
        subprocess.run(["scontrol", "update", "nodename=node3", "state=resume"], env={**os.environ, **alab.env},
                       capture_output=True)
