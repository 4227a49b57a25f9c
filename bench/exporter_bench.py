#!/usr/bin/env python3
"""One `slurmkit exporter` scrape of a 4,096-node cluster, from recorded Slurm output.

    python bench/exporter_bench.py [--runs 5] [--jobs 20000]

The state is built from the lab's recorded `scontrol -o -d show node` / `scontrol -o show job` lines
(tests/data/slurm/), one per node of examples/fat-tree-4096.yaml (128 leaves of 32 nodes) with a random mix of
states (seed 1), and N jobs (60% running, 40% pending with Resources/Priority/AssocGrpGRES, 10 accounts, 200
users). Timed: what the exporter does between Slurm's answer and the HTTP reply -- parse both outputs and render
the exposition text (the queries themselves are slurmctld's time, bounded by --timeout). Prints a table; asserts
nothing.
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slurmkit.backend.parse import parse_scontrol_jobs, parse_scontrol_nodes  # noqa: E402
from slurmkit.model.load import load_cluster  # noqa: E402
from slurmkit.monitor.exporter import render  # noqa: E402


def state(n_jobs: int) -> tuple[str, str]:
    rnd = random.Random(1)
    node_tpl = (ROOT / "tests/data/slurm/scontrol_show_node.txt").read_text().splitlines()[0]
    job_tpl = (ROOT / "tests/data/slurm/scontrol_show_job.txt").read_text().splitlines()[0]
    nodes = []
    for i in range(1, 4097):
        st, used, flags = rnd.choice([("ALLOCATED", 8, ""), ("ALLOCATED", 8, ""), ("MIXED", 4, ""), ("IDLE", 0, ""),
                                      ("IDLE", 0, "+DRAIN"), ("DOWN", 0, "*")])
        line = re.sub(r"NodeName=\S+", f"NodeName=gpu{i:04d}", node_tpl)
        line = re.sub(r"State=\S+", f"State={st}{flags}", line)
        line = re.sub(r"GresUsed=\S+", f"GresUsed=gpu:h100:{used}(IDX:{'0-' + str(used - 1) if used else 'N/A'})",
                      line)
        nodes.append(line.replace("Partitions=gpu", "Partitions=batch"))
    jobs = []
    for j in range(1, n_jobs + 1):
        running = rnd.random() < 0.6
        line = re.sub(r"JobId=\S+", f"JobId={j}", job_tpl)
        line = re.sub(r"JobState=\S+", f"JobState={'RUNNING' if running else 'PENDING'}", line)
        reason = "None" if running else rnd.choice(["Resources", "Priority", "AssocGrpGRES"])
        line = re.sub(r"Reason=\S+", f"Reason={reason}", line)
        line = re.sub(r"Account=\S+", f"Account=acct{rnd.randrange(10)}", line)
        line = re.sub(r"UserId=\S+", f"UserId=user{rnd.randrange(200)}({1000 + j % 200})", line)
        line = re.sub(r"NumNodes=\S+", f"NumNodes={rnd.choice([1, 1, 2, 4, 8, 32])}", line)
        line = line.replace("NodeList=node[5-6]", "NodeList=gpu[0001-0002]" if running else "NodeList=(null)")
        jobs.append(line + " TresPerNode=gres:gpu:h100:8")
    return "\n".join(nodes) + "\n", "\n".join(jobs) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=20000)
    a = ap.parse_args()
    cluster = load_cluster(ROOT / "examples" / "fat-tree-4096.yaml")
    node_text, job_text = state(a.jobs)
    parse_s, render_s, total_s = [], [], []
    size = 0
    for _ in range(a.runs):
        t0 = time.process_time()  # CPU time: the 2-core dev VM is shared, wall time there measures the neighbours
        nodes = parse_scontrol_nodes(node_text)
        jobs = parse_scontrol_jobs(job_text)
        t1 = time.process_time()
        text = render(cluster, nodes, jobs, time.time())
        t2 = time.process_time()
        parse_s.append(t1 - t0)
        render_s.append(t2 - t1)
        total_s.append(t2 - t0)
        size = len(text)
    print(f"4096 nodes, {a.jobs} jobs, {len(cluster.topology.switches)} switches; {size} bytes of metrics; "
          f"Python {sys.version.split()[0]}\n")
    print("| step | median CPU s | max CPU s |")
    print("|---|---:|---:|")
    for name, xs in (("parse scontrol nodes + jobs", parse_s), ("render", render_s), ("scrape total", total_s)):
        print(f"| {name} | {statistics.median(xs):.3f} | {max(xs):.3f} |")


if __name__ == "__main__":
    main()
