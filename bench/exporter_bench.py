#!/usr/bin/env python3
"""One `slurmkit exporter` scrape of a 4,096-node cluster, from recorded Slurm output.

    python bench/exporter_bench.py [--runs 5] [--jobs 20000]

The state is built from the lab's recorded `scontrol -o -d show node` / `scontrol -o show job` lines
(tests/data/slurm/), one per node of examples/fat-tree-4096.yaml (128 leaves of 32 nodes) with a random mix of
states (seed 1), and N jobs (60% running, 40% pending with Resources/Priority/AssocGrpGRES, 10 accounts, 200
users); the same jobs as the exporter's compact `squeue -O` query prints them (the field layout of the recorded
22.05/24.11 lines in tests/data/slurm/squeue_live_jobs_*.txt). Timed: what the exporter does between Slurm's answer
and the HTTP reply -- parse both outputs and render the exposition text (the queries themselves are slurmctld's
time, bounded by --timeout), once with the squeue jobs (what the exporter runs) and once with `scontrol show job`
(before). Prints a table; asserts nothing.
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

from slurmkit.backend.parse import (  # noqa: E402
    SQUEUE_JOB_FIELDS,
    parse_nodes_json,
    parse_scontrol_jobs,
    parse_scontrol_nodes,
    parse_scontrol_records,
    parse_squeue_jobs,
)
from slurmkit.model.load import load_cluster  # noqa: E402
from slurmkit.monitor.exporter import render  # noqa: E402


def as_squeue(job_text: str) -> str:
    """The same jobs as `squeue -h -O <SQUEUE_JOB_FORMAT>` prints them (every field followed by "|")."""
    out = []
    for r in parse_scontrol_records(job_text):
        r["UserId"] = r.get("UserId", "").split("(")[0]
        out.append("".join(f"{r.get(k) or 'N/A'}|" for _, k in SQUEUE_JOB_FIELDS))
    return "\n".join(out) + "\n"


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
    squeue_text = as_squeue(job_text)
    now = time.time()
    rows: dict[str, list[float]] = {}
    size = 0
    texts = {}
    for _ in range(a.runs):
        for how, parse_jobs, text_in in (("squeue -O", parse_squeue_jobs, squeue_text),
                                         ("scontrol show job", parse_scontrol_jobs, job_text)):
            t0 = time.process_time()  # CPU time: the 2-core dev VM is shared, wall time there measures the neighbours
            nodes = parse_scontrol_nodes(node_text)
            t1 = time.process_time()
            jobs = parse_jobs(text_in)
            t2 = time.process_time()
            text = render(cluster, nodes, jobs, now)
            t3 = time.process_time()
            for name, v in ((f"{how}: parse nodes", t1 - t0), (f"{how}: parse jobs", t2 - t1),
                            (f"{how}: render", t3 - t2), (f"**{how}: scrape total**", t3 - t0)):
                rows.setdefault(name, []).append(v)
            texts[how] = text
            size = len(text)
    # 24.11 (scontrol --json, the backend's choice there): the recorded 24.11 node JSON, one per node
    import copy
    import json

    rec = json.loads((ROOT / "tests/data/slurm/24.11/scontrol_show_node.json").read_text())
    rec["nodes"] = [{**copy.deepcopy(rec["nodes"][0]), "name": f"gpu{i:04d}"} for i in range(1, 4097)]
    node_json = json.dumps(rec)
    for _ in range(a.runs):
        t0 = time.process_time()
        parse_nodes_json(node_json)
        rows.setdefault("24.11: parse nodes from scontrol --json", []).append(time.process_time() - t0)
    same = texts["squeue -O"] == texts["scontrol show job"]
    print(f"4096 nodes, {a.jobs} jobs, {len(cluster.topology.switches)} switches; {size} bytes of metrics; "
          f"Python {sys.version.split()[0]}; squeue and scontrol give the same metrics: {same}\n")
    print("| step | median CPU s | max CPU s |")
    print("|---|---:|---:|")
    for name, xs in rows.items():
        print(f"| {name} | {statistics.median(xs):.3f} | {max(xs):.3f} |")


if __name__ == "__main__":
    main()
