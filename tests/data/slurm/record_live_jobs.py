"""Record the exporter's compact job query beside `scontrol -o show job` of the same jobs, from a lab:

    python tests/data/slurm/record_live_jobs.py --dir /tmp/lab-x [--out tests/data/slurm/24.11]

The lab must be up and idle (2+ nodes of 4+ GPUs). Scene, every way a job asks for GPUs: running --gres=gpu:2,
--gpus=1 (TresPerJob) and -N2 --gpus-per-node=1 (TresPerNode x nodes); pending --gpus-per-task=1 -n8 and a held
--gres=gpu:h100:4, a CPU-only job. Writes squeue_live_jobs.txt (`squeue --all -h -t PENDING,RUNNING -O
<SQUEUE_JOB_FORMAT>`) and scontrol_show_job_live.txt, then cancels the jobs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from pathlib import Path

from slurmkit.backend.parse import SQUEUE_JOB_FORMAT
from slurmkit.lab import Lab


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent))
    a = ap.parse_args()
    lab = Lab.load(a.dir)
    env = {**os.environ, **lab.env}

    def sh(*argv: str) -> str:
        return subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=30, check=True,
                              cwd="/tmp").stdout

    wrap = ["--wrap", "sleep 300", "--parsable", "-t", "10", "-o", "/dev/null"]
    sh("sbatch", "-N1", "--gres=gpu:2", "-J", "gres2", *wrap)
    sh("sbatch", "-N1", "--gpus=1", "-J", "gpus1", *wrap)
    sh("sbatch", "-N2", "--gpus-per-node=1", "-J", "gpn1", *wrap)
    sh("sbatch", "-n8", "--gpus-per-task=1", "-J", "gpt1", *wrap)
    sh("sbatch", "-N1", "--gres=gpu:h100:4", "--hold", "-J", "held4", *wrap)
    sh("sbatch", "-N1", "-n1", "-J", "cpu", *wrap)
    time.sleep(3)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "squeue_live_jobs.txt").write_text(sh("squeue", "--all", "-h", "-t", "PENDING,RUNNING", "-O",
                                                 SQUEUE_JOB_FORMAT))
    (out / "scontrol_show_job_live.txt").write_text(sh("scontrol", "-o", "show", "job"))
    sh("scancel", "-u", "root")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
