"""Defragmentation on a real lab of each release (issue 26's Done-when): 4 nodes, 2 leaves of 2; two checkpointing
gpusub jobs of one node each on different leaves; a 2-node job that must stay on one leaf pends; `slurmkit defrag
run --for JOB` makes it run on one leaf within a minute, the moved job resumes from its checkpoint on the other leaf,
and no reservation is left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmkit import hostlist
from slurmkit.backend.cli import CLIBackend
from slurmkit.lab import Lab
from tests.conftest import ROOT, lab_run

pytestmark = pytest.mark.lab

STEPPER = """\
import json, os, signal, sys, time
ck = os.path.join(os.environ["GPUSUB_CHECKPOINT_DIR"], "state.json")
step = json.load(open(ck))["step"] if os.path.exists(ck) else 0
restart = int(os.environ["GPUSUB_RESTART_COUNT"])
rank = int(os.environ.get("SLURM_PROCID", "0"))  # one task per GPU: rank 0 alone writes the checkpoint
if rank:
    signal.signal(signal.SIGUSR2, lambda s, f: sys.exit(0))
    signal.signal(signal.SIGTERM, lambda s, f: sys.exit(0))
    while not os.path.exists(os.environ["GPUSUB_PREEMPT_FILE"]):
        time.sleep(0.1)
    sys.exit(0)
print(f"start restart={restart} from step={step} on {os.environ['SLURMD_NODENAME']}", flush=True)
stop = []
signal.signal(signal.SIGUSR2, lambda s, f: stop.append(s))
signal.signal(signal.SIGTERM, lambda s, f: stop.append(s))
while True:
    if stop or os.path.exists(os.environ["GPUSUB_PREEMPT_FILE"]):
        with open(ck + ".tmp", "w") as f:
            json.dump({"step": step}, f)
        os.replace(ck + ".tmp", ck)
        print(f"checkpointed at step {step}", flush=True)
        sys.exit(0)
    step += 1
    if step % 10 == 0:  # a periodic checkpoint too: the plan reads its age
        with open(ck + ".tmp", "w") as f:
            json.dump({"step": step}, f)
        os.replace(ck + ".tmp", ck)
    time.sleep(0.1)
"""


@pytest.fixture(scope="module")
def dlab(make_lab) -> Lab:  # type: ignore[no-untyped-def]
    return make_lab(nodes=4, nodes_per_leaf=2)


def _wait(pred, timeout: float, what: str):  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.3)


def test_defrag_run_frees_a_leaf_and_the_moved_job_resumes(dlab: Lab, tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    script = tmp_path / "stepper.py"
    script.write_text(STEPPER)
    env = {**os.environ, **dlab.env, "SLURMKIT_INVENTORY": str(dlab.etc / "slurmkit.yaml"),
           "SLURMKIT_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(ROOT)}
    b = CLIBackend(env=dlab.env)
    jobs: list[str] = []

    def gpusub(*args: str) -> str:
        r = subprocess.run([sys.executable, "-m", "slurmkit.cli.gpusub", *args], env=env, capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        jobs.append(r.stdout.split("submitted job ", 1)[1].split()[0])
        return jobs[-1]

    def nodes_of(jid: str) -> set[str]:
        j = b.job(jid)
        return set(j.nodes) if j.state == "RUNNING" else set()

    try:
        # A on leaf1, B on leaf2: node2 drained while B is placed, so the two leaves each keep one free node
        a = gpusub(str(script), "-N", "1", "--launcher", "srun", "--gpus-per-node", "8", "--time", "10",
                   "--run-dir", str(tmp_path / "a"))
        got_a = _wait(lambda: nodes_of(a), 30, "job A running")
        leaf_of = {"node1": 1, "node2": 1, "node3": 2, "node4": 2}
        same_leaf = [n for n in leaf_of if leaf_of[n] == leaf_of[next(iter(got_a))] and n not in got_a]
        b.drain(same_leaf[0], "defrag-test: keep B off A's leaf")
        bj = gpusub(str(script), "-N", "1", "--launcher", "srun", "--gpus-per-node", "8", "--time", "10",
                    "--run-dir", str(tmp_path / "b"))
        got_b = _wait(lambda: nodes_of(bj), 30, "job B running")
        b.resume(same_leaf[0])
        assert leaf_of[next(iter(got_a))] != leaf_of[next(iter(got_b))]
        time.sleep(1.5)  # both write a periodic checkpoint
        # C: 2 whole nodes on one leaf; two nodes are free, on different leaves: it pends
        c = gpusub(str(script), "-N", "2", "--launcher", "srun", "--gpus-per-node", "8", "--time", "10",
                   "--topology", "strict", "--run-dir", str(tmp_path / "c"))
        time.sleep(3)
        logs = "".join(p.read_text() for d in ("a", "b") for p in (tmp_path / d / "logs").glob("*.log"))
        assert b.job(c).state == "PENDING", (b.job(c).nodes, got_a, got_b, logs)
        plan = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "defrag", "plan", "--for", c, "--json"],
                              env=env, capture_output=True, text=True, timeout=60)
        assert plan.returncode == 0, plan.stdout + plan.stderr
        doc = json.loads(plan.stdout)
        assert doc["blocked"] and len(doc["plan"]["moves"]) == 1, doc
        moved = doc["plan"]["moves"][0]["job"]
        assert moved in (a, bj)
        t0 = time.monotonic()
        run = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "defrag", "run", "--for", c,
                              "--timeout", "120"], env=env, capture_output=True, text=True, timeout=180)
        assert run.returncode == 0, run.stdout + run.stderr
        took = time.monotonic() - t0
        c_nodes = nodes_of(c)
        assert len({leaf_of[n] for n in c_nodes}) == 1 and len(c_nodes) == 2, run.stdout
        assert took < 60, (took, run.stdout)
        assert "released slurmkit-defrag-" in run.stdout
        shown = lab_run(dlab, ["scontrol", "show", "reservation"], check=False)
        assert "slurmkit-defrag" not in shown.stdout, shown.stdout
        # the moved job restarts from its checkpoint on the other leaf
        mdir = tmp_path / ("a" if moved == a else "b")
        _wait(lambda: b.job(moved).state == "RUNNING" and b.job(moved).restarts >= 1, 90, "the moved job running again")
        new_nodes = set(b.job(moved).nodes)
        assert not new_nodes & c_nodes
        log = "".join(p.read_text() for p in sorted((mdir / "logs").glob(f"{moved}.r1.log")))
        _wait(lambda: "start restart=1" in "".join(p.read_text() for p in (mdir / "logs").glob(f"{moved}.r1.log")),
              30, "the resumed attempt's log")
        log = "".join(p.read_text() for p in (mdir / "logs").glob(f"{moved}.r1.log"))
        resumed_from = int(log.split("start restart=1 from step=", 1)[1].split()[0])
        assert resumed_from > 0, log
        assert hostlist.fold(sorted(new_nodes)) in log
    finally:
        if jobs:
            lab_run(dlab, ["scancel", *jobs], check=False)
