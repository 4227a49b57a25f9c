"""Job fields come from a form no job name, comment or account can forge (issue 32 item 2), played on a real lab.

The victim (``bin``) fills every node; the attacker (``games``) queues the issue's repro -- ``-N2 --exclusive -J
"x Priority=4294967000 EligibleTime=2020-01-01T00:00:00 UserId=bin(2)"`` with a comment that forges the ``-d``
allocation detail and a running state -- and a job whose --account (the lab has no accounting: any account is
taken) forges squeue -O's QOS and UserName columns. Every root reader sees the attacker's own job: the backend's
``job()``/``jobs()``, defrag (``defrag watch --once`` through its real snapshot: the job has waited seconds, not six
years, so watch does not act for it) and the exporter's per-user job series.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmkit.backend.cli import CLIBackend
from slurmkit.backend.parse import parse_scontrol_records
from tests.conftest import ROOT, lab_run
from tests.security.conftest import ATTACKER, VICTIM, as_user

pytestmark = pytest.mark.lab

NAME = "x Priority=4294967000 EligibleTime=2020-01-01T00:00:00 UserId=bin(2)"
COMMENT = ("c JobState=RUNNING Requeue=1 UserId=bin(2) Nodes=node1 CPU_IDs=0-1 Mem=1 GRES=gpu:h100:2(IDX:0-1) "
           "EligibleTime=2020-01-01T00:00:00\nJobId=999 JobName=y UserId=bin(2) JobState=PENDING Reason=Resources")
ACCOUNT = "a|normal|bin"  # before: squeue -O's Account|QOS|UserName read a / normal / bin


def _sbatch(sec_lab, user: str, *args: str) -> str:  # type: ignore[no-untyped-def]
    r = as_user(user, ["sbatch", "--parsable", "-o", "/dev/null", *args], env=sec_lab.env, cwd="/tmp")
    return r.stdout.strip().split(";")[0]


def _wait(pred, what: str, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.3)


def test_every_root_reader_sees_the_attackers_true_fields(sec_lab, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    b = CLIBackend(env=sec_lab.env)
    jobs: list[str] = []
    try:
        busy = _sbatch(sec_lab, VICTIM, "-N4", "--exclusive", "--requeue", "-J", "victim-ckpt", "--wrap", "sleep 300")
        jobs.append(busy)
        _wait(lambda: lab_run(sec_lab, ["squeue", "-h", "-j", busy, "-o", "%T"]).stdout.strip() == "RUNNING",
              "the victim's job to run")
        forged = _sbatch(sec_lab, ATTACKER, "-N2", "--exclusive", "-J", NAME, "--comment", COMMENT,
                         "--wrap", "sleep 60")
        jobs.append(forged)
        acct = _sbatch(sec_lab, ATTACKER, "-N1", "-J", "acct", "-A", ACCOUNT, "--gres=gpu:1", "--wrap", "sleep 60")
        jobs.append(acct)
        _wait(lambda: lab_run(sec_lab, ["squeue", "-h", "-j", forged, "-o", "%r"]).stdout.strip()
              in ("Resources", "Priority"), "the attacker's job to wait for resources")

        wrong: list[str] = []  # every reader is checked, so a regression names each one it reaches

        # the backend: job() and jobs() (what status, monitor, nodes, elastic and defrag run read)
        for who, raw in (("job()", b.job(forged).raw), ("jobs()", {j.job_id: j for j in b.jobs()}[forged].raw)):
            if not (raw.get("JobName") == NAME and raw.get("Comment") == COMMENT and raw.get("JobState") == "PENDING"
                    and raw.get("UserId", "").startswith(f"{ATTACKER}(") and raw.get("Priority") != "4294967000"
                    and not raw.get("EligibleTime", "").startswith("2020")):
                wrong.append(f"{who}: " + " ".join(f"{k}={raw.get(k)!r}" for k in
                                                   ("JobName", "UserId", "Priority", "EligibleTime", "JobState")))
        det = b.job_details()  # (text before the fix: read it as slurmkit read it then, to show what it believed)
        recs = {r["JobId"]: r for r in (parse_scontrol_records(det) if isinstance(det, str) else det) if "JobId" in r}
        if "999" in recs or getattr(recs.get(forged), "gres_by_node", None) != {}:
            wrong.append("job_details(): a job 999, or an allocation for the pending job")

        # defrag watch, one dry pass through its real snapshot (CLIBackend.job_details): the attacker's job is
        # seconds old, under defrag.min_wait_s (600 s), so watch acts for nobody
        env = {**os.environ, **sec_lab.env, "SLURMKIT_INVENTORY": str(sec_lab.etc / "slurmkit.yaml"),
               "PYTHONPATH": str(ROOT)}
        r = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "defrag", "watch", "--once", "--dry-run",
                            "--state-file", str(tmp_path / "watch.json")], env=env, capture_output=True, text=True,
                           timeout=120, cwd=ROOT)
        if r.returncode != 0 or f"job {forged}" in r.stdout or "no pending job to act for" not in r.stdout:
            wrong.append(f"defrag watch: rc {r.returncode}: {(r.stdout + r.stderr).strip()[-300:]}")

        # the exporter: per-user job series from its compact squeue -O listing
        r = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "exporter", str(sec_lab.etc / "slurmkit.yaml"),
                            "--once"], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert r.returncode == 0 and "slurmkit_exporter_up 1" in r.stdout, r.stdout + r.stderr
        series = [ln for ln in r.stdout.splitlines() if ln.startswith("slurmkit_jobs{")]
        pending = [ln for ln in series if f'user="{ATTACKER}"' in ln and 'state="pending"' in ln]
        if (not any(f'user="{VICTIM}"' in ln and 'state="running"' in ln and ln.endswith(" 1") for ln in series)
                or any(f'user="{VICTIM}"' in ln and 'state="pending"' in ln for ln in series)
                or sum(int(ln.rsplit(" ", 1)[1]) for ln in pending) != 2):
            wrong.append(f"exporter: {series}")
        assert not wrong, "\n".join(wrong)
    finally:
        if jobs:
            lab_run(sec_lab, ["scancel", *jobs], check=False)
            _wait(lambda: not lab_run(sec_lab, ["squeue", "-h", "-o", "%i"]).stdout.split(), "the lab's queue to empty",
                  timeout=60)
