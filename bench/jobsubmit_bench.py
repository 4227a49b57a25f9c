"""Per-submission cost of the generated job_submit.lua: raw `sbatch --parsable` against two labs of one shape, one
with `--submit-policy` (JobSubmitPlugins=lua) and one without, submissions interleaved so load on the host hits
both alike; plus the script alone, in-process through lupa's Lua 5.1 (the Lua work slurmctld adds per job).

    python bench/jobsubmit_bench.py [--n 200] [--slurm 24.11] [--port-base 25400]

Jobs are submitted held (`--hold`: they still pass job_submit, and never run), then cancelled.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slurmkit.lab import Lab, LabSpec  # noqa: E402

ARGV = ["sbatch", "--parsable", "--hold", "-o", "/dev/null", "--gres=gpu:1", "-t", "10", "-N2", "--wrap", "true"]


def submit(lab: Lab) -> float:
    t0 = time.perf_counter()
    subprocess.run(ARGV, env={**os.environ, **lab.env}, check=True, capture_output=True)
    return (time.perf_counter() - t0) * 1000


def lua_alone(lab: Lab, n: int) -> float:
    """Microseconds per slurm_job_submit call of the lab's own script, in lupa's Lua 5.1."""
    from lupa.lua51 import LuaRuntime

    lua = LuaRuntime()
    slurm = lua.table_from({"SUCCESS": 0, "NO_VAL": 0xFFFFFFFE, "NO_VAL16": 0xFFFE, "ESLURM_ACCESS_DENIED": 2002,
                            "ESLURM_MISSING_TIME_LIMIT": 2051})
    slurm["user_msg"] = lambda m: None
    lua.globals()["slurm"] = slurm
    lua.execute((lab.etc / "job_submit.lua").read_text())
    run = lua.eval("""function(n)
      for i = 1, n do
        local d = {tres_per_node = "gres:gpu:1", time_limit = 10, min_nodes = 2, req_switch = slurm.NO_VAL,
                   wait4switch = slurm.NO_VAL, cpus_per_task = slurm.NO_VAL16}
        slurm_job_submit(d, {}, 0)
      end
    end""")
    t0 = time.perf_counter()
    run(n)
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--slurm", default=None)
    ap.add_argument("--port-base", type=int, default=25400)
    a = ap.parse_args()
    labs = {
        "without": Lab(LabSpec(dir="/tmp/sk-bench-js-off", port_base=a.port_base, nodes=4, nodes_per_leaf=2,
                               gpus_per_node=2, slurm=a.slurm)),
        "with": Lab(LabSpec(dir="/tmp/sk-bench-js-on", port_base=a.port_base + 100, nodes=4, nodes_per_leaf=2,
                            gpus_per_node=2, slurm=a.slurm, submit_policy=True)),
    }
    times: dict[str, list[float]] = {k: [] for k in labs}
    try:
        for lab in labs.values():
            lab.up()
        for lab in labs.values():  # warm-up
            for _ in range(5):
                submit(lab)
        for _ in range(a.n):
            for k, lab in labs.items():
                times[k].append(submit(lab))
        lua_us = lua_alone(labs["with"], 100_000)
        release = labs["with"].release
    finally:
        for lab in labs.values():
            if lab.is_up():
                lab.down()
    print(f"Slurm {release}, {a.n} submissions each, interleaved: `{' '.join(ARGV)}`")
    print("| plugin | median ms | p90 ms | mean ms |")
    print("|---|---|---|---|")
    for k, ts in times.items():
        ts.sort()
        print(f"| {k} | {statistics.median(ts):.2f} | {ts[int(len(ts) * 0.9)]:.2f} | {statistics.fmean(ts):.2f} |")
    d = statistics.median(times["with"]) - statistics.median(times["without"])
    print(f"median difference: {d:+.2f} ms per submission; the script alone in lupa's Lua 5.1: {lua_us:.1f} us per call")


if __name__ == "__main__":
    main()
