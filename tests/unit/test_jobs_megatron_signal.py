"""--launcher megatron: a preemption is a save in Megatron-LM (issue 34 item 1).

Megatron-LM saves on a signal only with --exit-signal-handler, and only on its exit signal (SIGTERM unless
--exit-signal); Slurm's warning signal is SIGUSR2, which Megatron does not handle. Here the megatron launcher's own
torchrun agent and rank wrapper (what render() puts in the script) run 2 gloo ranks of a Megatron-shaped loop around
Megatron-LM's own DistributedSignalHandler (tests/data/megatron/train_signal.py, megatron-core's file), and the
signal arrives as Slurm delivers it: to the agent alone (proctrack/cgroup signals slurmstepd's children only; SIGUSR2
from the batch shell through srun, or Slurm's SIGTERM at a requeue), or to every process of the step
(proctrack/linuxproc). Each must end in a checkpoint and exit 0.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmkit.jobs import megatron
from slurmkit.jobs.render import explain, rank_wrapper, render
from slurmkit.jobs.spec import ClusterFacts, JobSpec
from slurmkit.jobs.torchcompat import forwarding_agent

TRAIN = Path(__file__).resolve().parents[1] / "data" / "megatron" / "train_signal.py"
FACTS = ClusterFacts(partition="gpu", gpus_per_node=2, gpu_type="h100", source="inventory:test")


def _tree(pid: int) -> list[int]:
    """pid and its descendants (what proctrack/linuxproc signals: kill_proc_tree)."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(Path(f"/proc/{d}/stat").read_text().rpartition(")")[2].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


def _kill_tree(pid: int) -> None:
    for p in _tree(pid):
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _launch(tmp_path: Path, extra: tuple[str, ...] = ()) -> tuple[subprocess.Popen, Path, tuple[str, ...]]:
    import importlib.util

    mspec = importlib.util.find_spec("megatron")
    assert mspec is not None and any((Path(p) / "training" / "dist_signal_handler.py").exists()
                                     for p in mspec.submodule_search_locations or ()), (
        "megatron-core >= 0.17 (it ships megatron/training/dist_signal_handler.py): tests/setup-env.sh installs it")
    save = tmp_path / "ckpt"
    spec = JobSpec(script=str(TRAIN), nodes=1, gpus_per_node=2, launcher="megatron", cpu_bind=False,
                   args=("--save", str(save), "--save-interval", "100000", "--train-iters", "100000", *extra))
    job = render(spec, FACTS, str(tmp_path / "run"))
    args = job.script_args
    sig = megatron.exit_signal(args)
    agent, wrapper = forwarding_agent(sig), rank_wrapper("megatron", False, sig)
    # what the script runs: the agent string and the rank wrapper, both as rendered
    assert shlex.quote(agent) in job.request.script
    # torchrun runs a .py under its own interpreter; a wrapper with --no-python, which then names the interpreter
    prog = ["--no-python", "bash", "-c", wrapper, "gpusub-rank", sys.executable, "-u"] if wrapper else []
    if wrapper:
        assert f"--no-python bash -c {shlex.quote(wrapper)} gpusub-rank" in job.request.script
    port = _port()
    env = {**os.environ, "SLURM_NODEID": "0", "PET_RDZV_CONF": "is_host=1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(port), "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "-c", agent, "--nnodes=1", "--nproc-per-node=2", "--rdzv-backend=gpusub",
            f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=t1", "--max-restarts=0",
            *prog, str(TRAIN), *args]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=tmp_path, start_new_session=True)
    return proc, save, args


def _wait_running(proc: subprocess.Popen, save: Path) -> None:
    end = time.monotonic() + 120
    while time.monotonic() < end:
        if all((save / "ranks" / f"{r}.running").exists() for r in (0, 1)):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    out = proc.communicate(timeout=10)[0] if proc.poll() is not None else ""
    pytest.fail(f"the ranks did not start training: {out[-3000:]}")


@pytest.mark.parametrize("sig,to", [("USR2", "agent"), ("TERM", "agent"), ("USR2", "tree")])
def test_the_signal_slurm_sends_is_a_megatron_save_and_a_clean_exit(tmp_path: Path, sig: str, to: str) -> None:
    proc, save, args = _launch(tmp_path)
    assert "--exit-signal-handler" in args  # the launcher adds Megatron's flag
    try:
        _wait_running(proc, save)
        time.sleep(0.3)
        for pid in (_tree(proc.pid) if to == "tree" else [proc.pid]):
            try:
                os.kill(pid, getattr(signal, f"SIG{sig}"))
            except ProcessLookupError:
                pass
        out = proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:
            _kill_tree(proc.pid)  # the ranks are in sessions of their own (torch's Popen start_new_session)
            out = proc.communicate()[0]
    assert proc.returncode == 0, out[-3000:]
    saved = json.loads((save / "latest.json").read_text())
    ranks = [json.loads((save / "ranks" / f"{r}.json").read_text()) for r in (0, 1)]
    assert saved["iteration"] > 0 and saved["world"] == 2
    assert all(r["signal"] and r["end"] == saved["iteration"] for r in ranks), (ranks, out[-2000:])
    assert out.count("exiting program after receiving SIGTERM") == 2, out[-3000:]


def test_exit_signal_sigusr2_is_delivered_as_sigusr2(tmp_path: Path) -> None:
    """--exit-signal SIGUSR2 (Megatron-LM core_v0.16+): the ranks keep SIGUSR2 for Megatron's handler."""
    proc, save, args = _launch(tmp_path, ("--exit-signal", "SIGUSR2"))
    try:
        _wait_running(proc, save)
        os.kill(proc.pid, signal.SIGTERM)  # Slurm's requeue SIGTERM to the agent
        out = proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:
            _kill_tree(proc.pid)  # the ranks are in sessions of their own (torch's Popen start_new_session)
            out = proc.communicate()[0]
    assert proc.returncode == 0, out[-3000:]
    assert out.count("exiting program after receiving SIGUSR2") == 2, out[-3000:]


# --- what the arguments say ------------------------------------------------------------------------------------

def _findings(*args: str) -> list[tuple[str, str]]:
    job = render(JobSpec(script="/m/pretrain_gpt.py", launcher="megatron", args=args), FACTS, "/r")
    return [(f.level, f.message) for f in job.findings]


def test_flag_added_once_and_signal_read_from_the_arguments() -> None:
    job = render(JobSpec(script="/m/p.py", launcher="megatron", args=("--save", "/c")), FACTS, "/r")
    assert job.script_args.count("--exit-signal-handler") == 1
    job = render(JobSpec(script="/m/p.py", launcher="megatron", args=("--exit-signal-handler", "--save", "/c")),
                 FACTS, "/r")
    assert job.script_args.count("--exit-signal-handler") == 1
    assert megatron.exit_signal(("--exit-signal=SIGUSR1",)) == "SIGUSR1"
    assert "signal.SIGUSR1)" in render(JobSpec(script="/m/p.py", launcher="megatron",
                                               args=("--save", "/c", "--exit-signal", "SIGUSR1")), FACTS,
                                       "/r").request.script
    assert not [f for f in _findings("--save", "/c") if f[0] != "info"]
    line = next(x for x in explain(job) if x.startswith("preemption:"))
    assert "SIGTERM once to each Megatron rank" in line and "added by gpusub" not in line, line


def test_arguments_that_disable_the_save_are_warned_about() -> None:
    found = _findings("--save", "/c", "--exit-signal-handler-for-training")
    assert any(lvl == "warning" and "_graceful_shutdown" in m for lvl, m in found), found
    assert not any("_graceful_shutdown" in m for _, m in _findings("--save", "/c", "--exit-signal-handler-for-training",
                                                                   "--exit-signal", "SIGUSR1"))
    found = _findings("--num-layers", "2")
    assert any(lvl == "warning" and "no --save" in m for lvl, m in found), found
    found = _findings("--save", "/c", "--exit-signal", "SIGKILL")
    assert any(lvl == "error" and "--exit-signal SIGKILL" in m for lvl, m in found), found


def test_torchrun_launcher_keeps_its_no_op_agent() -> None:
    from slurmkit.jobs.torchcompat import AGENT

    job = render(JobSpec(script="/t.py", nodes=1, gpus_per_node=2, cpu_bind=False), FACTS, "/r")
    assert "os.kill" not in job.request.script and 'trap ""' not in job.request.script
    assert "lambda *_: got.append(1)" in AGENT and "--exit-signal-handler" not in job.script_args
