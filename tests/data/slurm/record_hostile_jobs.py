"""Record real job listings holding hostile job names, comments and accounts (issue 32 item 2), for
tests/unit/test_jobrecords.py, from a lab of the given release.

    python tests/data/slurm/record_hostile_jobs.py --slurm 24.11 --port-base 6500 --dir /tmp/record-lab

Brings up a 4-node x 2-GPU lab; root fills every node with one job (-N4 --exclusive, requeueable); the ordinary user
``games`` then submits pending jobs whose name, --comment and --account (the lab has no accounting, so any account
is taken) hold what a forger would write: other fields' keys, ``=``, ``|``, spaces and a newline. Writes
jobs_hostile_<release>.{txt,json,squeue.json,squeue_O.txt,extra.txt} to tests/data/slurm/ and takes the lab down.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from slurmkit.backend.parse import SQUEUE_JOB_FORMAT
from slurmkit.lab import Lab, LabSpec
from slurmkit.release import job_listing, scontrol_json

HERE = Path(__file__).resolve().parent
ATTACKER = "games"
# the repro name, a comment that forges the -d allocation detail and a whole second record, and accounts
# that forge squeue -O columns and lines
NAME = "x Priority=4294967000 EligibleTime=2020-01-01T00:00:00 UserId=bin(2)"
COMMENT = ("c JobState=RUNNING Requeue=1 UserId=bin(2) Nodes=node1 CPU_IDs=0-1 Mem=1 GRES=gpu:h100:2(IDX:0-1) "
           "StdOut=/tmp/run/logs/slurm-1.out")
NEWLINE_NAME = "n\nJobId=999 JobName=y UserId=bin(2) Priority=4294967000 JobState=PENDING Reason=Resources"
PIPE_ACCOUNT = "a|PENDING|normal|bin|2020-01-01T00:00:00"
NEWLINE_ACCOUNT = "b\n999|PENDING|acct|normal|bin|2020-01-01T00:00:00|1|1|N/A|N/A|N/A|Priority"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--slurm", default=None, help="release (default: the host's)")
    ap.add_argument("--port-base", type=int, default=6500)
    ap.add_argument("--dir", default="/tmp/slurmkit-record-lab")
    a = ap.parse_args()
    lab = Lab(LabSpec(dir=a.dir, port_base=a.port_base, slurm=a.slurm, nodes=4, gpus_per_node=2, nodes_per_leaf=2))
    lab.up(progress=lambda m: print("lab:", m, file=sys.stderr))
    env = {**os.environ, **lab.env}
    rel = lab.release

    def sh(*argv: str, user: str | None = None, check: bool = True) -> str:
        cmd = ["runuser", "-u", user, "--", *argv] if user else list(argv)
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30, check=False, cwd="/tmp")
        if check and r.returncode:
            raise SystemExit(f"{argv}: rc {r.returncode}: {r.stderr.strip()}")
        return r.stdout

    def save(name: str, text: str) -> None:
        (HERE / name).write_text(text)
        print(f"wrote {HERE / name} ({len(text)} bytes)", file=sys.stderr)

    try:
        sh("sbatch", "--parsable", "-J", "busy", "-N4", "--exclusive", "--requeue", "--gres=gpu:2", "-o", "/dev/null",
           "--wrap", "sleep 600")
        deadline = time.monotonic() + 30
        while sh("squeue", "-h", "-t", "R", "-o", "%i").split() != ["1"] and time.monotonic() < deadline:
            time.sleep(0.2)
        sub = ["sbatch", "--parsable", "-N2", "--exclusive", "-o", "/dev/null", "--wrap", "sleep 60"]
        sh(*sub, "-J", NAME, "--comment", COMMENT, user=ATTACKER)
        sh(*sub, "-J", NEWLINE_NAME, "--comment", "a=b c=d\nJobId=998 UserId=bin(2)", user=ATTACKER)
        sh(*sub, "-J", "acct-pipe", "-A", PIPE_ACCOUNT, user=ATTACKER, check=False)
        sh(*sub, "-J", "acct-newline", "-A", NEWLINE_ACCOUNT, user=ATTACKER, check=False)
        time.sleep(2)
        save(f"jobs_hostile_{rel}.txt", sh("scontrol", "-o", "-d", "show", "job"))
        save(f"jobs_hostile_{rel}.squeue.json", sh("squeue", "--json"))
        if scontrol_json(rel):
            save(f"jobs_hostile_{rel}.json", sh("scontrol", "--json", "show", "job"))
        listing = job_listing(rel)
        if listing.extra_argv:
            save(f"jobs_hostile_{rel}.extra.txt", sh(*listing.extra_argv))
        save(f"jobs_hostile_{rel}.squeue_O.txt",
             sh("squeue", "--all", "-h", "-t", "PENDING,RUNNING", "-O", SQUEUE_JOB_FORMAT))
    finally:
        lab.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
