"""Issue 32 item 6 on a real lab (proctrack/linuxproc, the lab's default: slurmkit/lab/config.py): a process of
the attacker outside any job claims the victim's running job through SLURM_JOB_ID in its own environment and sits
on the GPU of the attacker's ending job. The epilog must kill it (it is that user's leftover, not another job's)
and never touch the victim's process beside it."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.integration.test_health_lab import hook_records, job_fields, wait_for
from tests.security.conftest import ATTACKER, VICTIM, as_user

pytestmark = pytest.mark.lab


def _sleeper(user: str, env: dict[str, str]) -> subprocess.Popen:
    pw = pwd.getpwnam(user)
    return subprocess.Popen(["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups", "--",
                             "sleep", "300"], env={"PATH": "/usr/bin:/bin", **env}, stdin=subprocess.DEVNULL,
                            start_new_session=True)


def test_a_leftover_claiming_the_victims_running_job_dies_in_the_epilog(sec_lab):
    lab = sec_lab
    conf = Path(lab.dir) / "etc" / "slurm.conf"
    assert "ProctrackType=proctrack/linuxproc" in conf.read_text()
    node = "node2"
    fx = lab.fake_nvml_file(node)
    original = fx.read_text()
    work = Path(tempfile.mkdtemp(prefix="slurmkit-sec-procs-lab-"))
    work.chmod(0o777)
    ready = work / "ready"
    victim_job = attacker_job = None
    procs: list[subprocess.Popen] = []
    try:
        victim_job = as_user(VICTIM, ["sbatch", "--parsable", "-w", "node1", "-n1", "--mem=100M", f"--chdir={work}",
                                      "-o", "/dev/null", "--wrap", "exec sleep 300"], env=lab.env
                             ).stdout.strip().split(";")[0]
        attacker_job = as_user(ATTACKER, [
            "sbatch", "--parsable", "-w", node, "-n1", "--mem=100M", "--gres=gpu:1", f"--chdir={work}",
            "-o", "/dev/null", "--wrap",
            f"echo ${{SLURM_JOB_GPUS:-0}} > {ready}.tmp && mv {ready}.tmp {ready}; "
            f"while [ -e {ready} ]; do sleep 0.2; done"], env=lab.env).stdout.strip().split(";")[0]
        wait_for(lambda: job_fields(lab, victim_job).get("JobState") == "RUNNING", 60, f"job {victim_job} to run",
                 lambda: str(job_fields(lab, victim_job)))
        wait_for(lambda: ready.exists() and ready.read_text().strip(), 60, f"job {attacker_job} to start",
                 lambda: f"{job_fields(lab, attacker_job)}\n{hook_records(lab, node)}")
        gpu = int(ready.read_text().split(",")[0])
        # the attacker, outside any job, claiming the victim's running job; the victim's own process beside it
        leftover = _sleeper(ATTACKER, {"SLURM_JOB_ID": victim_job})
        victims = _sleeper(VICTIM, {"SLURM_JOB_ID": attacker_job})
        procs += [leftover, victims]
        state = json.loads(original)
        state["devices"][gpu]["compute_processes"] = [{"pid": leftover.pid, "used_memory": 1 << 30},
                                                      {"pid": victims.pid, "used_memory": 1 << 30}]
        tmp = fx.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, fx)
        ready.unlink()  # the attacker's job ends; its epilog finds both processes on its GPU
        last = Path(lab.dir) / "hookstate" / node / "last-epilog.json"

        def epilog():
            r = json.loads(last.read_text()) if last.exists() else {}
            return r if r.get("job_id") == attacker_job else None
        rec = wait_for(epilog, 60, f"job {attacker_job}'s epilog record", lambda: hook_records(lab, node))
        procs_check = next(c for c in rec["checks"] if c["check"] == "gpu_procs")
        # before: the leftover was filed under the victim's running job ("held") and survived the epilog
        assert not rec["cleanup"]["held"], (rec["cleanup"], procs_check)
        assert [k["pid"] for k in rec["cleanup"]["killed"]] == [leftover.pid], rec["cleanup"]
        assert leftover.wait(timeout=10) == -9
        assert victims.poll() is None and [f["pid"] for f in rec["cleanup"]["foreign"]] == [victims.pid], rec["cleanup"]
        assert job_fields(lab, victim_job)["JobState"] == "RUNNING"
    finally:
        ready.unlink(missing_ok=True)
        fx.write_text(original)
        for j in (attacker_job, victim_job):
            if j:
                subprocess.run(["scancel", j], env={**os.environ, **lab.env}, capture_output=True, timeout=30)
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(work, ignore_errors=True)
