"""Elastic capacity on the lab: time from `slurmkit nodes add node[5-8]` to the four new nodes idle, against the
manual path (new slurm.conf everywhere, restart every daemon) on the same lab; and autoscaling: time from the
submission of a job that needs powered-down nodes to the job running.

    python bench/elastic_bench.py [--slurm 22.05 --slurm 24.11] [--reps 3] [--port-base 30800]

Needs root and the lab's packages (like `slurmkit lab up`). Prints one markdown table; bench/README.md has the
numbers. A job runs across every change (checked: it is still RUNNING on the same nodes afterwards).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slurmkit.backend.cli import CLIBackend  # noqa: E402
from slurmkit.lab import Lab, LabSpec  # noqa: E402

NEW = ["node5", "node6", "node7", "node8"]


def _sh(lab: Lab, *argv: str) -> str:
    return subprocess.run(list(argv), capture_output=True, text=True, env={**os.environ, **lab.env}, timeout=120,
                          check=True).stdout


def _sk(lab: Lab, *args: str) -> None:
    res = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", *args], capture_output=True, text=True,
                         env={**os.environ, **lab.env}, cwd=ROOT, timeout=600)
    if res.returncode != 0:
        raise SystemExit(f"slurmkit {' '.join(args)} failed: {res.stderr.strip()[-500:]}")


def _wait(pred, timeout: float = 300) -> float:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if pred():
                return time.monotonic()
        except Exception:  # noqa: BLE001 - a restarting controller answers nothing for a moment
            pass
        time.sleep(0.05)
    raise SystemExit("timed out")


def _idle(be: CLIBackend, names: list[str]) -> bool:
    st = {n.name: n for n in be.nodes(names)}
    return all(n in st and st[n].state == "idle" and st[n].responding for n in names)


def _usable(lab: Lab) -> bool:
    """A job step really runs on all four new nodes (a node recovered from slurmctld's saved state can read idle
    before its slurmd has registered)."""
    res = subprocess.run([lab.exe("srun"), "-N4", "-w", "node[5-8]", "--immediate=5", "true"], capture_output=True,
                         env={**os.environ, **lab.env}, timeout=60)
    return res.returncode == 0


def _long_job(lab: Lab, be: CLIBackend) -> str:
    jid = _sh(lab, lab.exe("sbatch"), "--parsable", "-N4", "-o", "/dev/null", "--wrap", "sleep 3000").strip()
    _wait(lambda: be.job(jid).state == "RUNNING")
    return jid


def add_vs_manual(release: str | None, port: int, reps: int) -> list[tuple[str, str, list[float]]]:
    d = f"/tmp/slurmkit-bench-elastic-{release or 'host'}"
    lab = Lab(LabSpec(dir=d, nodes=4, spare=4, port_base=port, slurm=release))
    lab.up()
    be = CLIBackend(env=lab.env)
    add, manual = [], []
    try:
        jid = _long_job(lab, be)
        for _ in range(reps):
            t0 = time.monotonic()
            _sk(lab, "nodes", "add", "node[5-8]", "--group", "h100b", "--no-real-parse")
            _wait(lambda: _idle(be, NEW))
            add.append(_wait(lambda: _usable(lab)) - t0)
            with_new = {p.name: p.read_text() for p in lab.etc.iterdir() if p.is_file()}
            _sk(lab, "nodes", "remove", "node[5-8]", "--no-real-parse")
            # the manual path on the same lab: the same new files everywhere, then every daemon restarted
            t0 = time.monotonic()
            for name, body in with_new.items():
                (lab.etc / name).write_text(body)
            lab.restart_slurmctld()
            olds = ["node1", "node2", "node3", "node4"]
            lab.stop_slurmds(olds)
            lab.start_slurmds(olds + NEW)
            _wait(lambda: _idle(be, NEW))
            manual.append(_wait(lambda: _usable(lab)) - t0)
            _sk(lab, "nodes", "remove", "node[5-8]", "--no-real-parse")
        j = be.job(jid)
        assert j.state == "RUNNING" and len(j.nodes) == 4, j
    finally:
        lab.down()
    rel = lab.release
    return [(rel, "slurmkit nodes add node[5-8] (command start -> a step runs on all 4)", add),
            (rel, "manual: new files, restart slurmctld + every slurmd (-> a step runs on all 4)", manual)]


def autoscale(release: str | None, port: int, reps: int) -> list[tuple[str, str, list[float]]]:
    d = f"/tmp/slurmkit-bench-power-{release or 'host'}"
    lab = Lab(LabSpec(dir=d, nodes=4, power=2, suspend_time=5, port_base=port, slurm=release))
    lab.up()
    be = CLIBackend(env=lab.env)
    run_lat, up_lat = [], []
    try:
        for _ in range(reps):
            _wait(lambda: all("POWERED_DOWN" in n.flags and "POWERING_DOWN" not in n.flags
                              for n in be.nodes(["node3", "node4"])))
            t0 = time.monotonic()
            jid = _sh(lab, lab.exe("sbatch"), "--parsable", "-N4", "-o", "/dev/null", "--wrap", "sleep 1").strip()
            up_lat.append(_wait(lambda: all(n.responding and "POWERING_UP" not in n.flags and "POWERED_DOWN" not in n.flags
                                            for n in be.nodes(["node3", "node4"]))) - t0)
            run_lat.append(_wait(lambda j=jid: be.job(j).state in ("RUNNING", "COMPLETED")) - t0)
            _wait(lambda j=jid: be.job(j).finished)
    finally:
        lab.down()
    rel = lab.release
    return [(rel, "autoscaling: submit -> both powered-down nodes up (slurmd registered)", up_lat),
            (rel, "autoscaling: submit -> the 4-node job running", run_lat)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--slurm", action="append", default=None)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--port-base", type=int, default=30800)
    ap.add_argument("--only", choices=["add", "power"], default=None)
    a = ap.parse_args()
    rows = []
    for i, rel in enumerate(a.slurm or [None, "24.11"]):
        if a.only in (None, "add"):
            rows += add_vs_manual(rel, a.port_base + 400 * i, a.reps)
        if a.only in (None, "power"):
            rows += autoscale(rel, a.port_base + 400 * i + 200, a.reps)
    print(f"{a.reps} runs each; python {sys.version.split()[0]}; {os.cpu_count()} CPUs\n")
    print("| Slurm | what | median s | min s | max s |")
    print("|---|---|---:|---:|---:|")
    for rel, what, xs in rows:
        print(f"| {rel} | {what} | {statistics.median(xs):.1f} | {min(xs):.1f} | {max(xs):.1f} |")


if __name__ == "__main__":
    main()
