"""On-demand power on a real lab: `lab up --nodes 4 --power 2` makes node[3-4] a group powered by slurmkit's `lab`
provider (their slurmd stops when suspended, starts on resume), through the generated slurmkit-suspend/-resume/
-resume-fail programs that slurmctld runs.

One lab for the module; the tests run in order on it. Waits are on states, with generous timeouts: after SuspendTime
(5 s) idle, node[3-4] are powered down; a 4-node job resumes them, runs, and they are powered down again; a resume
that fails (a fault file, like the fake NVML ones) leaves the node DOWN with a slurmkit reason and the job requeued.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator

import pytest

from slurmkit.backend.cli import CLIBackend
from slurmkit.errors import SlurmCommandError
from slurmkit.lab import Lab, LabSpec
from slurmkit.power.providers import FAULT_DIR
from tests.conftest import _base, _root_dir, lab_release, start_lab

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def plab() -> Iterator[Lab]:
    # its own ports, clear of the session lab, of make_lab's (base + 200 k) and of test_nodes_lab's (base + 3000)
    spec = LabSpec(dir=f"{_root_dir()}-power", port_base=_base() + 3200, nodes=4, power=2, suspend_time=5,
                   slurm=lab_release())
    the_lab = start_lab(spec)
    try:
        yield the_lab
    finally:
        the_lab.down()


@pytest.fixture(scope="module")
def backend(plab: Lab) -> CLIBackend:
    return CLIBackend(env=plab.env)


def wait_for(pred, timeout: float, what: str):  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        try:
            last = pred()
        except SlurmCommandError as exc:
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}; last={last!r}")


def submit(lab: Lab, *args: str) -> str:
    if "-o" not in args:  # never into the working directory
        args = ("-o", str(lab.dir / "log" / "job-%j.out"), *args)
    out = subprocess.run([lab.exe("sbatch"), "--parsable", *args], capture_output=True, text=True,
                         env={**os.environ, **lab.env}, timeout=30, check=True).stdout
    return out.strip().split(";")[0]


def powered_down(backend: CLIBackend, names: list[str]) -> bool:
    nodes = {n.name: n for n in backend.nodes(names)}
    return all(n in nodes and "POWERED_DOWN" in nodes[n].flags and "POWERING_DOWN" not in nodes[n].flags
               for n in names)


def log_lines(lab: Lab) -> list[str]:
    p = lab.dir / "log" / "power.log"
    return p.read_text().splitlines() if p.exists() else []


def test_idle_nodes_are_suspended_a_job_resumes_them_and_they_are_suspended_again(plab: Lab, backend: CLIBackend) -> None:
    burst = ["node3", "node4"]
    wait_for(lambda: powered_down(backend, burst), 120, "node[3-4] to be powered down after SuspendTime")
    assert "slurmd-node3" not in plab.running_pids() and "slurmd-node4" not in plab.running_pids()
    states = {n.name: n for n in backend.nodes(["node1", "node2"])}
    assert not any("POWERED_DOWN" in n.flags for n in states.values())  # SuspendExcNodes: the always-on group
    out = plab.dir / "log" / "resume-job.out"
    jid = submit(plab, "-N4", "-o", str(out), "--wrap", "srun hostname | sort")
    state = wait_for(lambda: backend.job(jid).finished and backend.job(jid).state, 240, f"job {jid} to end")
    assert state == "COMPLETED", backend.job(jid)
    assert out.read_text().split() == ["node1", "node2", "node3", "node4"]
    lines = log_lines(plab)
    assert any(" resume node3 provider=lab: ok" in ln for ln in lines), lines
    assert any(" resume node4 provider=lab: ok" in ln for ln in lines), lines
    n_suspends = sum(" suspend node3 provider=lab: ok" in ln for ln in lines)
    wait_for(lambda: powered_down(backend, burst), 120, "node[3-4] to be powered down again")
    assert sum(" suspend node3 provider=lab: ok" in ln for ln in log_lines(plab)) > n_suspends


def test_a_failed_resume_leaves_the_node_down_with_the_reason_and_the_job_queued(plab: Lab, backend: CLIBackend) -> None:
    wait_for(lambda: powered_down(backend, ["node4"]), 120, "node4 to be powered down")
    fault = plab.dir / FAULT_DIR / "node4"
    fault.parent.mkdir(exist_ok=True)
    fault.write_text("")
    try:
        jid = submit(plab, "-N1", "-w", "node4", "--requeue", "--wrap", "hostname")

        def down() -> bool:
            n = backend.node("node4")
            return n.state == "down" and n.reason.startswith("slurmkit: resume failed: lab: power-on fault injected")

        wait_for(down, 120, "node4 DOWN with slurmkit's reason")
        j = wait_for(lambda: (j := backend.job(jid)).state == "PENDING" and j, 60, f"job {jid} back in the queue")
        assert j.restarts >= 1
        assert any(" resume node4 provider=lab: FAILED" in ln and "setting the node DOWN" in ln for ln in log_lines(plab))
        # Slurm ends its own power-up attempt at ResumeTimeout (30 s in the lab): DOWN and powered down, and it
        # runs ResumeFailProgram, which powers the node off (nothing to do here: it never came up)
        wait_for(lambda: powered_down(backend, ["node4"]) and backend.node("node4").state == "down", 120,
                 "Slurm's ResumeTimeout to power node4 down")
        wait_for(lambda: any(" resume-fail node4 provider=lab: ok" in ln for ln in log_lines(plab)), 60,
                 "the resume-fail program's line")
        # Slurm's ResumeTimeout reason replaced slurmkit's on 22.05 (24.11 appends to it): resume-fail re-states the
        # cause from power.log, so on both releases `sinfo -R` still says why
        cause = "slurmkit: resume failed: lab: power-on fault injected"
        wait_for(lambda: backend.node("node4").reason.startswith(cause), 60, "node4's reason to say why, again")
        assert "ResumeTimeout reached" in backend.node("node4").reason
    finally:
        fault.unlink()
    # the fault gone, the admin resumes the node: it is powered on for the job, which runs
    subprocess.run([plab.exe("scontrol"), "update", "nodename=node4", "state=resume"], env={**os.environ, **plab.env},
                   check=True, timeout=30)
    state = wait_for(lambda: backend.job(jid).finished and backend.job(jid).state, 240, f"job {jid} to end")
    assert state == "COMPLETED", backend.job(jid)
