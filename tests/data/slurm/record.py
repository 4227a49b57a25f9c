"""Record real Slurm output for the parser tests (tests/unit/test_parse.py), from a lab of the given release.

    python tests/data/slurm/record.py --slurm 24.11 --port-base 6500 --dir /tmp/record-lab

Brings up an 8-node lab, makes the scene the tests expect (job "two node" on node[5-6], job "gpu2" with 2 GPUs on
node1, node7 and node8 drained with a reason, a --test-only estimate), writes every output kind the backend parses
to tests/data/slurm/<release>/ and takes the lab down. The 22.05 recordings in tests/data/slurm/ came from the same
scene by hand (before this script).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from slurmkit.backend.parse import SINFO_NODE_FORMAT, SQUEUE_FORMAT
from slurmkit.lab import Lab, LabSpec

HERE = Path(__file__).resolve().parent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--slurm", default=None, help="release (default: the host's)")
    ap.add_argument("--port-base", type=int, default=6500)
    ap.add_argument("--dir", default="/tmp/slurmkit-record-lab")
    a = ap.parse_args()
    lab = Lab(LabSpec(dir=a.dir, port_base=a.port_base, slurm=a.slurm))
    lab.up(progress=lambda m: print("lab:", m, file=sys.stderr))
    out = HERE / lab.release
    out.mkdir(exist_ok=True)
    env = {**__import__("os").environ, **lab.env}

    def sh(*argv: str, stderr: bool = False) -> str:
        r = subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=30, check=True, cwd="/tmp")
        return r.stderr if stderr else r.stdout

    def save(name: str, text: str) -> None:
        (out / name).write_text(text)
        print(f"wrote {out / name} ({len(text)} bytes)", file=sys.stderr)

    try:
        sh("scontrol", "update", "nodename=node7", "state=drain", "reason=admin maintenance")
        sh("scontrol", "update", "nodename=node8", "state=drain", "reason=slurmkit: gpu3 xid79 fell off the bus")
        save("sbatch_parsable.txt", sh("sbatch", "--parsable", "-J", "two node", "-N2", "--exclusive", "-w", "node[5-6]",
                                       "-o", "/dev/null", "--wrap", "sleep 600"))
        sh("sbatch", "--parsable", "-J", "gpu2", "-N1", "-w", "node1", "--gres=gpu:2", "-o", "/dev/null", "--wrap", "sleep 600")
        deadline = time.monotonic() + 30
        while sh("squeue", "-h", "-t", "R", "-o", "%i").split() != ["1", "2"] and time.monotonic() < deadline:
            time.sleep(0.2)
        save("sbatch_test_only.txt", sh("sbatch", "--test-only", "-N2", "--wrap", "true", stderr=True))
        save("sinfo_version.txt", sh("sinfo", "--version"))
        save("scontrol_show_node.txt", sh("scontrol", "-o", "-d", "show", "node"))
        save("scontrol_show_job.txt", sh("scontrol", "-o", "show", "job"))
        save("scontrol_show_partition.txt", sh("scontrol", "-o", "show", "partition"))
        save("scontrol_show_topology.txt", sh("scontrol", "show", "topology"))
        save("sinfo_nodes.txt", sh("sinfo", "-N", "-h", "-o", SINFO_NODE_FORMAT))
        save("squeue.txt", sh("squeue", "-h", "-o", SQUEUE_FORMAT))
        save("sinfo.json", sh("sinfo", "--json"))
        save("squeue.json", sh("squeue", "--json"))
        save("scontrol_show_node.json", sh("scontrol", "--json", "show", "node"))
        sh("scontrol", "update", "nodename=node6", "state=drain", "reason=rack 4 | PDU swap a=b")
        save("sinfo_node_pipe_reason.txt", sh("sinfo", "-N", "-h", "-n", "node6", "-o", SINFO_NODE_FORMAT))
        save("scontrol_show_node_equals_reason.txt", sh("scontrol", "-o", "show", "node", "node6"))
    finally:
        lab.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
