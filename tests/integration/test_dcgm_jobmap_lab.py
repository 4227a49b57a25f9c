"""dcgm-exporter's HPC job mapping on the real Slurm lab: the lab's prolog (slurmd runs it for a real job) writes the
job's id into the file of each of its GPUs, named by DCGM's GPU id (the NVML index, here deliberately not the
/dev/nvidia minor), and its epilog removes them when the job ends.

    SLURMKIT_TEST_LAB_DIR=/tmp/lab-x SLURMKIT_TEST_LAB_PORT_BASE=... python -m pytest -m lab \
        tests/integration/test_dcgm_jobmap_lab.py
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import yaml

from slurmkit.indexlist import expand_ints
from tests.conftest import lab_run
from tests.integration.test_health_lab import NVML, wait_for

pytestmark = [pytest.mark.lab]


def mapping(d: Path) -> dict[str, list[str]]:
    """What dcgm-exporter reads (internal/pkg/transformation/hpc.go): the files whose name is an integer, one job id
    per line."""
    if not d.is_dir():
        return {}
    return {f.name: f.read_text().split() for f in d.iterdir() if f.name.isdigit() and f.is_file()}


@pytest.fixture(scope="module")
def dlab(make_lab):
    lab = make_lab(nodes=2, nodes_per_leaf=2, hooks=True, fake_nvml_template=str(NVML / "healthy-h100x8.json"))
    inv_path = Path(lab.dir) / "etc" / "slurmkit.yaml"
    inv = yaml.safe_load(inv_path.read_text())
    inv["monitoring"] = {**(inv.get("monitoring") or {}), "dcgm_exporter": "node1",
                         "dcgm_job_mapping_dir": f"{lab.dir}/dcgm-map/%n"}
    inv_path.write_text(yaml.safe_dump(inv, sort_keys=False))  # the hooks read it on every run
    # NVML enumerates node1's boards in the reverse order of their minors: DCGM's GPU id (the index) is not the minor
    p = Path(lab.dir) / "fake-nvml" / "node1.json"
    state = json.loads(p.read_text())
    n = len(state["devices"])
    for d in state["devices"]:
        d["minor"] = n - 1 - d["index"]
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, p)
    return lab


def test_prolog_writes_and_epilog_removes_the_jobs_gpu_mapping(dlab):
    d = Path(dlab.dir) / "dcgm-map" / "node1"
    flag = Path(dlab.dir) / "dcgm-release"
    jid = lab_run(dlab, ["sbatch", "--parsable", "-w", "node1", "-n1", "--mem=100M", "--gres=gpu:2",
                         "-o", "/dev/null", "--wrap", f"while [ ! -e {flag} ]; do sleep 0.5; done"]
                  ).stdout.strip().split(";")[0]

    def running() -> dict[str, str] | None:
        rec = lab_run(dlab, ["scontrol", "-d", "-o", "show", "job", jid]).stdout
        return rec if "JobState=RUNNING" in rec else None  # type: ignore[return-value]

    rec = wait_for(running, 90, f"job {jid} to run", lambda: lab_run(dlab, ["squeue"]).stdout)
    # the job's gres indices as slurmctld gave them (GRES=gpu:h100:2(IDX:0-1)); minors = indices (File= order)
    m = re.search(r"GRES=\S*\(IDX:([0-9,-]+)\)", str(rec))
    assert m, rec
    minors = expand_ints(m.group(1))
    n = 8
    want = {str(n - 1 - mi): [jid] for mi in minors}  # the NVML index of each minor (reversed above)
    assert len(want) == 2
    got = wait_for(lambda: mapping(d) or None, 30, f"the mapping files in {d}", lambda: str(list(d.parent.glob("*"))))
    assert got == want, (got, want, minors)
    for f in d.iterdir():
        assert f.stat().st_mode & 0o777 == 0o644 and not f.is_symlink()
    assert not (Path(dlab.dir) / "dcgm-map" / "node2").exists()  # dcgm-exporter does not run there
    flag.write_text("")
    wait_for(lambda: mapping(d) == {}, 60, "the epilog to remove the job's mapping", lambda: str(mapping(d)))
    assert [f.name for f in d.iterdir()] == []  # no temp file left
