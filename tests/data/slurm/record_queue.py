"""Record the pending queue and reservations as placement reads them (tests/unit/test_liveplace.py), from a lab:

    python tests/data/slurm/record_queue.py --dir /tmp/lab-x [--out tests/data/slurm/24.11]

The lab must be up and idle (4+ nodes). Scene: node[1-2] busy (an exclusive job), a pending job pinned to
node[1-2], a held unpinned job, a job pending on a dependency, a pending array; a reservation active now on node4
and a FLEX one starting in 30 minutes on node3. Writes squeue_pending.txt and scontrol_show_reservation.txt, then
cancels the jobs and deletes the reservations.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from pathlib import Path

from slurmkit.backend.parse import PENDING_FORMAT
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

    wrap = ["--wrap", "sleep 300", "--parsable", "-t", "10"]
    busy = sh("sbatch", "-N2", "-w", "node[1-2]", "--exclusive", "-J", "busy", *wrap).strip()
    time.sleep(2)
    sh("sbatch", "-N2", "-w", "node[1-2]", "--exclusive", "-J", "pinned", *wrap)
    sh("sbatch", "-N1", "--hold", "-J", "held", *wrap)
    sh("sbatch", "-N1", f"--dependency=afterok:{busy}", "-J", "dep", *wrap)
    sh("sbatch", "-N1", "--array=1-3", "--hold", "-J", "arr", *wrap)
    sh("scontrol", "create", "reservation", "ReservationName=now4", "StartTime=now", "Duration=60", "Nodes=node4",
       "Users=root")
    sh("scontrol", "create", "reservation", "ReservationName=later3", "StartTime=now+30minutes", "Duration=60",
       "Nodes=node3", "Users=root", "Flags=FLEX")
    time.sleep(1)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "squeue_pending.txt").write_text(sh("squeue", "-h", "-t", "PD", "-o", PENDING_FORMAT))
    (out / "scontrol_show_reservation.txt").write_text(sh("scontrol", "-o", "show", "reservation"))
    sh("scancel", "-u", "root")
    for r in ("now4", "later3"):
        sh("scontrol", "delete", f"reservation={r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
