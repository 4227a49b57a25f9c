"""`slurmkit acceptance run` inside a maintenance window on a lab with accounting (issue 24 item 7): every measurement
job runs in the reservation, charged to the account and QOS asked for, as slurmctld and slurmdbd record them; nodes
outside the window are skipped with the flag that would test them; the report says which tool measured each level.

4 nodes x 2 GPUs, leaves node[1-2] and node[3-4], `lab up --accounting` (team-a may use QOS normal and high). The
window: `scontrol create reservation Flags=MAINT` on node[1-3] for root, as an admin opens one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.lab

SLURMKIT = str(Path(sys.executable).with_name("slurmkit"))


def sh(lab, argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(argv, env={**os.environ, **lab.env}, capture_output=True, text=True, timeout=60,
                          check=check, cwd="/tmp")


@pytest.fixture(scope="module")
def wlab(make_lab):
    lab = make_lab(nodes=4, gpus_per_node=2, nodes_per_leaf=2, accounting=True)
    # the admin running acceptance is a user of team-a (slurmdbd knows root only in account root)
    sh(lab, ["sacctmgr", "-i", "add", "user", "root", "account=team-a"])
    sh(lab, ["scontrol", "create", "reservation", "ReservationName=maint", "StartTime=now", "Duration=120",
             "Nodes=node[1-3]", "Users=root", "Flags=MAINT,IGNORE_JOBS"])
    # sacct names a job's reservation only when the job started in a later second than the reservation's record:
    # "t3.time_start < t1.time_start" (as_mysql_jobacct_process.c, 22.05 line 567, 24.11 549, 26.05 585). A job
    # started in the window's first second reads Reservation '' with its ReservationId set (measured on the 22.05
    # lab; one CI run). An admin does not open a window and fill it within a second: let that second pass.
    opened = int(time.time())
    while int(time.time()) <= opened:
        time.sleep(0.05)
    yield lab
    sh(lab, ["scontrol", "delete", "reservation=maint"], check=False)


def acceptance(lab, tmp: Path, *args: str, timeout: float = 1500) -> tuple[dict, str]:
    env = {**os.environ, **lab.env}
    p = subprocess.run([SLURMKIT, "acceptance", "run", "--json", "--out", str(tmp / "acc"), *args], cwd=tmp, env=env,
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout), p.stderr


def sacct(lab, jobs: list[str]) -> dict[str, dict[str, str]]:
    """JobID -> Reservation, Account, QOS, NodeList as slurmdbd recorded them (once every job is there)."""
    fields = ["JobID", "Reservation", "ReservationId", "Account", "QOS", "NodeList", "State", "Start"]
    deadline = time.monotonic() + 120
    while True:
        r = sh(lab, ["sacct", "-n", "-X", "-P", "-j", ",".join(jobs), "-o", ",".join(fields)], check=False)
        rows = {ln.split("|")[0]: dict(zip(fields, ln.split("|"), strict=False)) for ln in r.stdout.splitlines() if ln}
        if set(jobs) <= set(rows) or time.monotonic() > deadline:
            return rows
        time.sleep(2)


def test_acceptance_runs_every_job_in_the_window_with_account_and_qos(wlab, tmp_path: Path) -> None:
    doc, err = acceptance(wlab, tmp_path, "--reservation", "maint", "--account", "team-a", "--qos", "high",
                          "--levels", "node,pair")
    assert doc["complete"] and doc["outliers"] == [], doc["outliers"]
    assert doc["nodes"] == ["node1", "node2", "node3"]  # the window's nodes, node4 is not in it
    assert (doc["reservation"], doc["account"], doc["qos"]) == ("maint", "team-a", "high")
    jobs = sorted({m["job_id"] for m in doc["measurements"]})
    assert jobs and all(m["busbw"] for m in doc["measurements"]), doc["measurements"]
    rows = sacct(wlab, jobs)
    assert set(jobs) <= set(rows), (jobs, rows)
    from slurmkit import hostlist

    resv = sh(wlab, ["sacctmgr", "-n", "-P", "show", "reservation", "format=Name,ID,TimeStart"]).stdout
    resv_id = next(ln.split("|")[1] for ln in resv.splitlines() if ln.startswith("maint|"))
    for j in jobs:
        row = rows[j]
        assert (row["Reservation"], row["Account"], row["QOS"]) == ("maint", "team-a", "high"), (row, resv)
        assert row["ReservationId"] == resv_id, (row, resv)
        assert set(hostlist.expand(row["NodeList"])) <= {"node1", "node2", "node3"}, row
    # the report says which tool measured each level (no nccl-tests, no GPU here: torch over gloo)
    assert {lv["level"]: lv["tool"] for lv in doc["measured_by"]} == {"node": "torch-gloo", "pair": "torch-gloo"}
    assert "torch" in err


def test_outside_the_window_its_nodes_are_skipped_with_the_flag_that_tests_them(wlab, tmp_path: Path) -> None:
    doc, err = acceptance(wlab, tmp_path, "--levels", "node", "--account", "team-a")
    assert doc["nodes"] == ["node4"], doc["nodes"]
    assert "node1 (in reservation maint: --reservation maint tests it)" in doc["skipped"], doc["skipped"]
    row = sacct(wlab, [doc["measurements"][0]["job_id"]])
    assert next(iter(row.values()))["Reservation"] in ("", "(null)")


def test_a_qos_the_account_may_not_use_is_refused_before_any_job(wlab, tmp_path: Path) -> None:
    env = {**os.environ, **wlab.env}
    p = subprocess.run([SLURMKIT, "acceptance", "run", "--out", str(tmp_path / "acc"), "--reservation", "maint",
                        "--account", "team-a", "--qos", "scavenger", "--levels", "node"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert "scavenger" in p.stderr, p.stderr
    assert not (tmp_path / "acc" / "report.json").exists()  # refused before anything was written or submitted


def test_hca_level_names_the_bad_port_with_a_fake_perftest(wlab, tmp_path: Path) -> None:
    """No HCA here: ib_write_bw on PATH is tests/data/acceptance/fake_ib_write_bw, which prints recorded perftest
    output, ten times slower for node3's mlx5_1 (FAKE_IB_SLOW). The real server/client pairs run as Slurm jobs in the
    window (now all four nodes), and the report names the port, not only the node."""
    sh(wlab, ["scontrol", "update", "reservation=maint", "nodes=node[1-4]"])
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "ib_write_bw").symlink_to(Path(__file__).resolve().parents[1] / "data" / "acceptance" / "fake_ib_write_bw")
    # on PATH before the lab's own (a 24.11 lab puts its release's wrappers there)
    path = wlab.env.get("PATH", os.environ["PATH"])
    env = {**os.environ, **wlab.env, "PATH": f"{bindir}:{path}", "FAKE_IB_SLOW": "node3:mlx5_1"}
    p = subprocess.run([SLURMKIT, "acceptance", "run", "--out", str(tmp_path / "acc"), "--reservation", "maint",
                        "--account", "team-a", "--levels", "hca", "--hcas", "mlx5_0,mlx5_1"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=1500)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "OUTLIER port node3 port mlx5_1:1: hca level: node3 port mlx5_1:1 (bad port or cable)" in p.stdout, p.stdout
    assert "measured by, hca level: ib_write_bw" in p.stdout
    doc = json.loads((tmp_path / "acc" / "report.json").read_text())
    assert [(o["kind"], o["nodes"], o["port"]) for o in doc["outliers"]] == [("port", ["node3"], "mlx5_1:1")]
    assert doc["suspects"] == []
    jobs = sorted({m["job_id"] for m in doc["measurements"].values()})
    assert len(jobs) == 8  # 4 pairs (two matchings of 4 nodes) x 2 ports
    assert all(r["Reservation"] == "maint" for r in sacct(wlab, jobs).values())
