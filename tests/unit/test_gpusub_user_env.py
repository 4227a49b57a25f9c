"""The user's environment wins (issue 34 item 4): a value exported in the submitting shell for a variable gpusub
manages reaches the job unchanged, --explain says whose value won and why, and gpusub warns only where the value is
known to break the job.

The job inherits the submitting environment (sbatch --export=ALL, Slurm's default): the script runs here with that
environment, under stub srun/python3/scontrol, and the program records what it sees.
"""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from slurmkit.jobs.render import explain, render
from slurmkit.jobs.spec import ClusterFacts, JobSpec
from slurmkit.jobs.submit import prepare

NAMES = ("NCCL_DEBUG", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME",
         "RANK", "OMP_NUM_THREADS", "PYTHONUNBUFFERED")
STUB_SRUN = r"""#!PY
import os, sys
args = sys.argv[1:]
while args and args[0].startswith("--"):
    args.pop(0)
env = dict(os.environ, SLURM_PROCID="0", SLURM_NTASKS="1", SLURM_LOCALID="0", SLURM_NODEID="0",
           SLURM_NTASKS_PER_NODE="1")
os.execvpe(args[0], args, env)
"""
STUB_PYTHON = r"""#!PY
import json, os
with open(os.environ["STUB_OUT"], "w") as f:
    json.dump({k: os.environ.get(k) for k in NAMES}, f)
"""
STUB_SCONTROL = """#!/bin/sh
case "$*" in *"show node"*) echo "NodeName=node1 NodeAddr=10.1.2.3" ;; esac
"""
FACTS = ClusterFacts(partition="gpu", gpus_per_node=1, gpu_type="h100", source="inventory:test", cpus_per_gpu=4)
# what the issue found: each replaced or dropped
MINE = {"NCCL_DEBUG": "INFO", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "0", "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1",
        "OMP_NUM_THREADS": "3"}


def _stubs(d: Path) -> Path:
    d.mkdir()
    for name, text in (("srun", STUB_SRUN), ("python3", STUB_PYTHON), ("scontrol", STUB_SCONTROL)):
        p = d / name
        p.write_text(text.replace("#!PY", f"#!{sys.executable}").replace("NAMES", repr(NAMES)))
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return d


def _run(tmp_path: Path, spec: JobSpec, mine: dict[str, str]) -> dict[str, str | None]:
    """Render with the submitting environment ``mine``, run the script with it (as the job inherits it)."""
    stubs = _stubs(tmp_path / "bin")
    run_dir = tmp_path / "run"
    job = render(spec, FACTS, str(run_dir), environ=mine)
    (tmp_path / "job.sh").write_text(job.request.script)
    out = tmp_path / "seen.json"
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "STUB_OUT": str(out), "HOME": str(tmp_path), "SLURM_JOB_ID": "77",
           "SLURM_JOB_NODELIST": "node1", "SLURMD_NODENAME": "node1", "SLURM_RESTART_COUNT": "0", **mine}
    res = subprocess.run(["bash", str(tmp_path / "job.sh")], env=env, capture_output=True, timeout=30, cwd=tmp_path)
    assert res.returncode == 0, (run_dir / "logs" / "77.r0.log").read_text()[-2000:]
    return json.loads(out.read_text())


def test_exported_values_reach_the_job_unchanged(tmp_path: Path) -> None:
    seen = _run(tmp_path, JobSpec(script="/t.py", launcher="srun", gpus_per_node=1), MINE)
    assert {k: seen[k] for k in MINE} == MINE  # before: WARN, 3, (removed), 4


def test_without_exported_values_slurmkit_defaults_apply(tmp_path: Path) -> None:
    seen = _run(tmp_path, JobSpec(script="/t.py", launcher="srun", gpus_per_node=1), {})
    assert seen["NCCL_DEBUG"] == "WARN" and seen["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"
    assert seen["NCCL_IB_HCA"] is None and seen["OMP_NUM_THREADS"] == "4"


def test_the_job_wiring_stays_gpusubs_and_env_flag_beats_the_shell(tmp_path: Path) -> None:
    spec = JobSpec(script="/t.py", launcher="srun", gpus_per_node=1, env=(("NCCL_DEBUG", "TRACE"),))
    seen = _run(tmp_path, spec, {"RANK": "5", "NCCL_DEBUG": "INFO"})
    assert seen["RANK"] == "0"  # SLURM_PROCID: a RANK exported in the shell would make every rank rank 5
    assert seen["NCCL_DEBUG"] == "TRACE"  # --env on the command line is the most explicit


def test_socket_ifname_of_the_shell_is_kept_explained_and_drives_gloo(tmp_path: Path) -> None:
    job = render(JobSpec(script="/t.py", nodes=2, gpus_per_node=1), FACTS, "/r", environ={"NCCL_SOCKET_IFNAME": "eth"})
    lines = explain(job)
    line = next(x for x in lines if x.strip().startswith("NCCL_SOCKET_IFNAME"))
    assert "= eth" in line and "yours, kept" in line and "left unset" in line, line  # before: "not set"
    assert not any("NCCL_SOCKET_IFNAME" in x and "not set" in x for x in lines)
    assert "export NCCL_SOCKET_IFNAME=eth" in job.request.script
    assert "local spec=eth " in job.request.script  # gloo's exact name is resolved from the user's selection
    assert any(x.strip().startswith("GLOO_SOCKET_IFNAME") for x in lines)
    # the site's value gives way, and --explain names it
    site = render(JobSpec(script="/t.py", nodes=2, gpus_per_node=1), FACTS.__class__(**{**FACTS.__dict__,
                  "socket_ifname": "ib0"}), "/r", environ={"NCCL_SOCKET_IFNAME": "eth"})
    line = next(x for x in explain(site) if x.strip().startswith("NCCL_SOCKET_IFNAME"))
    assert "= eth" in line and "NCCL_SOCKET_IFNAME=ib0" in line and "site" in line, line


def test_explain_says_which_value_won_and_why() -> None:
    mine = render(JobSpec(script="/t.py", gpus_per_node=1), FACTS, "/r", environ={"NCCL_DEBUG": "INFO"})
    line = next(x for x in explain(mine) if x.strip().startswith("NCCL_DEBUG"))
    assert "= INFO" in line and "yours, kept" in line and "NCCL_DEBUG=WARN" in line, line
    default = render(JobSpec(script="/t.py", gpus_per_node=1), FACTS, "/r", environ={})
    line = next(x for x in explain(default) if x.strip().startswith("NCCL_DEBUG"))
    assert "= WARN" in line and "slurmkit's default:" in line, line


def test_warns_only_where_the_value_is_known_to_break(tmp_path: Path) -> None:
    script = tmp_path / "t.py"
    script.write_text("")

    def warnings(env: dict[str, str], **kw: object) -> tuple[str, ...]:
        spec = JobSpec(script=str(script), gpus_per_node=1, run_dir=str(tmp_path / "r"), **kw)  # type: ignore[arg-type]
        return prepare(spec, None, environ={"HOME": str(tmp_path), **env}, cwd=str(tmp_path)).warnings

    assert warnings(MINE, nodes=2) == ()  # INFO, 0, an HCA list, a thread count: choices, not breakage
    assert warnings({"NCCL_SOCKET_IFNAME": "eth0"}, nodes=2) == ()
    lo = warnings({"NCCL_SOCKET_IFNAME": "lo"}, nodes=2)
    assert len(lo) == 1 and "loopback" in lo[0] and "NCCL env docs" in lo[0], lo
    assert warnings({"NCCL_SOCKET_IFNAME": "lo"}, nodes=1) == ()  # one node: loopback is fine
    assert warnings({"NCCL_SOCKET_IFNAME": "^lo,docker"}, nodes=2) == ()  # an exclusion
    tilde = warnings({"NCCL_DEBUG_FILE": "~/nccl.%h.%p"})
    assert len(tilde) == 1 and "'~'" in tilde[0], tilde
    fsdp = warnings({"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, launcher="megatron", args=("--use-megatron-fsdp",
                                                                                     "--save", "/c"))
    assert any("CUDA_DEVICE_MAX_CONNECTIONS=1" in w and "refuses to start" in w for w in fsdp), fsdp


@pytest.mark.parametrize("launcher", ["torchrun", "megatron"])
def test_kept_values_in_torchrun_launchers_too(launcher: str) -> None:
    job = render(JobSpec(script="/t.py", gpus_per_node=2, launcher=launcher, args=("--save", "/c")), FACTS, "/r",
                 environ={**MINE, "PET_RDZV_CONF": "is_host=1"})
    text = job.request.script
    for k, v in MINE.items():
        assert f"export {k}={v}" in text or f"export {k}='{v}'" in text, k
    assert "export NCCL_IB_HCA=\"$_v\"" not in text  # no per-node computation that would drop it
    assert 'export PET_RDZV_CONF="is_host=' in text  # the rendezvous wiring is gpusub's


def test_a_hostile_exported_value_reaches_the_job_byte_for_byte_and_runs_nothing(tmp_path: Path) -> None:
    canary = tmp_path / "pwned"
    value = f"$(touch {canary})'\"`touch {canary}`\n; touch {canary}"
    seen = _run(tmp_path, JobSpec(script="/t.py", launcher="srun", gpus_per_node=1), {"NCCL_DEBUG": value})
    assert seen["NCCL_DEBUG"] == value and not canary.exists()
