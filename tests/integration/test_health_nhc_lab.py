"""The site checks NHC sites write (issue 35 item 5) through slurmd's own HealthCheckProgram on the real Slurm lab: a
site file test that fails drains exactly the node it names with a reason saying which file, and the node is resumed
once the file is there; a site command (run by root from the root-owned inventory, no shell) that fails drains the
nodes, and they come back when it passes.

Run alone without clashing with another suite:
    SLURMKIT_TEST_LAB_DIR=/tmp/sk-nhc-lab SLURMKIT_TEST_LAB_PORT_BASE=18000 python -m pytest -m lab \
        tests/integration/test_health_nhc_lab.py
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.integration.test_health_lab import NVML, hook_records, scontrol_node, set_policy, wait_for

pytestmark = [pytest.mark.lab, pytest.mark.releases]

INTERVAL = 5


@pytest.fixture(scope="module")
def nlab(make_lab):
    return make_lab(nodes=2, nodes_per_leaf=2, hooks=True, healthcheck_interval=INTERVAL,
                    fake_nvml_template=str(NVML / "healthy-h100x8.json"))


def _resume_all(lab) -> None:
    for node in lab.spec.node_names:
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], env={**os.environ, **lab.env},
                       capture_output=True, timeout=30)


def _last_health(lab, node: str) -> dict:
    return json.loads((Path(lab.dir) / "hookstate" / node / "last-health.json").read_text())


def test_site_file_test_drains_the_node_it_names_and_resolves(nlab):
    flags = Path(nlab.dir) / "site-ok"
    flags.mkdir(exist_ok=True)
    (flags / "node2").write_text("ok\n")  # node2's site file is there, node1's is not
    set_policy(nlab, {"resume_after_passes": 2, "files": {"tests": [{"path": f"{flags}/%n", "test": "file"}]}})
    try:
        want = f"slurmkit: file {flags}/node1 missing"
        st = wait_for(lambda: s if "DRAIN" in (s := scontrol_node(nlab, "node1"))["flags"] else None, 8 * INTERVAL,
                      "the health check to drain node1", lambda: hook_records(nlab, "node1"))
        assert st["reason"] == want, st
        rec = _last_health(nlab, "node1")
        files = next(c for c in rec["checks"] if c["check"] == "files")
        assert files["status"] == "FAIL" and files["findings"] == [f"file {flags}/node1 missing"], files
        node2 = scontrol_node(nlab, "node2")
        assert "DRAIN" not in node2["flags"], node2  # its own file is there: the %n path is per node
        assert next(c for c in _last_health(nlab, "node2")["checks"] if c["check"] == "files")["status"] == "OK"

        (flags / "node1").write_text("ok\n")
        wait_for(lambda: "DRAIN" not in scontrol_node(nlab, "node1")["flags"], 10 * INTERVAL,
                 "node1 to be resumed once its file is there", lambda: hook_records(nlab, "node1"))
        history = Path(nlab.dir) / "hookstate" / "node1" / "history.jsonl"
        resumed = wait_for(lambda: [json.loads(x) for x in history.read_text().splitlines() if '"resume"' in x],
                           30, "the health run's resume record", lambda: hook_records(nlab, "node1"))
        assert resumed[-1]["hook"] == "health" and resumed[-1]["slurm"]["before"]["reason"] == want
    finally:
        set_policy(nlab, {})
        _resume_all(nlab)


def test_site_command_fails_drains_and_resolves(nlab):
    marker = Path(nlab.dir) / "gpfs-healthy"
    marker.unlink(missing_ok=True)
    # argv, no shell: the command is the site's own program; only a root-owned inventory may name one
    cmd = {"name": "gpfs", "argv": ["/usr/bin/test", "-e", str(marker)], "timeout_s": 1}
    set_policy(nlab, {"resume_after_passes": 2, "commands": {"run": [cmd], "timeout_s": 2}})
    inv = Path(nlab.dir) / "etc" / "slurmkit.yaml"
    assert inv.stat().st_uid == os.geteuid() and not inv.stat().st_mode & 0o022
    try:
        for node in nlab.spec.node_names:
            st = wait_for(lambda n=node: s if "DRAIN" in (s := scontrol_node(nlab, n))["flags"] else None,
                          8 * INTERVAL, f"the health check to drain {node}", lambda n=node: hook_records(nlab, n))
            assert st["reason"] == "slurmkit: cmd gpfs exit 1", st
        rec = _last_health(nlab, "node1")
        c = next(c for c in rec["checks"] if c["check"] == "commands")
        assert c["evidence"]["commands"][0]["argv"] == cmd["argv"] and c["evidence"]["source"] == str(inv), c
        marker.write_text("")
        for node in nlab.spec.node_names:
            wait_for(lambda n=node: "DRAIN" not in scontrol_node(nlab, n)["flags"], 10 * INTERVAL,
                     f"{node} to be resumed once the command passes", lambda n=node: hook_records(nlab, n))
        ok = next(c for c in _last_health(nlab, "node1")["checks"] if c["check"] == "commands")
        assert ok["status"] == "OK" and ok["summary"] == "1 site command(s) pass: gpfs", ok
    finally:
        set_policy(nlab, {})
        _resume_all(nlab)


def test_a_process_of_a_user_without_a_job_drains_and_resolves(nlab):
    """unauth_procs on the real /proc: a process of uid 4242 (no job of that uid anywhere) started outside Slurm
    drains the nodes (the lab's nodes share this host's /proc) with the uid and pid in the reason; once it is gone the
    health check resumes them. Jobs here run as root or system users, below min_uid."""
    set_policy(nlab, {"resume_after_passes": 2, "unauth_procs": {"enabled": True, "min_uid": 4242}})
    stray = subprocess.Popen(["setpriv", "--reuid=4242", "--regid=4242", "--clear-groups", "sleep", "300"])
    try:
        want = f"slurmkit: user uid4242 pid {stray.pid} without a job"
        st = wait_for(lambda: s if "DRAIN" in (s := scontrol_node(nlab, "node1"))["flags"] else None, 8 * INTERVAL,
                      "the health check to drain node1", lambda: hook_records(nlab, "node1"))
        assert st["reason"] == want, st
        stray.kill()
        stray.wait(10)
        for node in nlab.spec.node_names:
            wait_for(lambda n=node: "DRAIN" not in scontrol_node(nlab, n)["flags"], 10 * INTERVAL,
                     f"{node} to be resumed once the process is gone", lambda n=node: hook_records(nlab, n))
        ok = next(c for c in _last_health(nlab, "node1")["checks"] if c["check"] == "unauth_procs")
        assert ok["status"] == "OK", ok
    finally:
        if stray.poll() is None:
            stray.kill()
        set_policy(nlab, {})
        _resume_all(nlab)
