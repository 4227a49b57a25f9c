"""Hostile arguments through every launcher: render, run the script with stub srun/torchrun/python3/scontrol,
and check the program receives every argument byte for byte and nothing else runs."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from slurmkit.jobs.render import render
from slurmkit.jobs.spec import ClusterFacts, JobSpec
from slurmkit.jobs.torchcompat import AGENT, forwarding_agent

HOSTILE = (
    "plain",
    "it's",
    'double "quoted"',
    "$(touch {canary}.dollar)",
    "`touch {canary}.backtick`",
    "; touch {canary}.semicolon",
    "a\nb\n; touch {canary}.newline",
    "ünïcødé ✓ 日本",
    "$HOME ${PATH} $1 $@ \\ \\n",
    "--flag=value with spaces",
    "*",
    "' ; touch {canary}.quote ; '",
    "",
    "-",
    "&& touch {canary}.and",
    "| touch {canary}.pipe",
    "> {canary}.redirect",
)

# The stubs record their argv as JSON (argv[1:]), then run what follows the launcher options, like the real ones.
STUB_SRUN = r"""#!/usr/bin/env python3
import json, os, sys
args = sys.argv[1:]
while args and args[0].startswith("--"):
    args.pop(0)
env = dict(os.environ, SLURM_PROCID="0", SLURM_NTASKS="2", SLURM_LOCALID="0", SLURM_NODEID="0",
           SLURM_NTASKS_PER_NODE="2")
os.execvpe(args[0], args, env)
"""
STUB_RECORD = r"""#!/usr/bin/env python3
import json, os, sys
if len(sys.argv) > 2 and sys.argv[2].startswith("import sys, time; from torch.distributed import TCPStore"):
    sys.exit(0)  # the batch shell's rendezvous store (torchrun launchers): not the program
with open(os.environ["STUB_OUT"], "w", encoding="utf-8", errors="surrogateescape") as f:
    json.dump({"argv": sys.argv[1:], "env": {k: os.environ.get(k) for k in
              ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "NCCL_DEBUG", "USER_VAR",
               "TRITON_CACHE_DIR", "CUDA_DEVICE_MAX_CONNECTIONS")}}, f)
"""
STUB_SCONTROL = """#!/bin/sh
case "$*" in
  *"show node"*) echo "NodeName=node1 Arch=x86_64 NodeAddr=10.1.2.3 NodeHostName=node1" ;;
  *) echo "scontrol $*" >> "$STUB_OUT.scontrol" ;;
esac
"""


def _stub(d: Path, name: str, text: str) -> None:
    p = d / name
    p.write_text(text)
    p.chmod(p.stat().st_mode | stat.S_IEXEC | stat.S_IXGRP | stat.S_IXOTH)


@pytest.fixture()
def stubs(tmp_path: Path) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    _stub(d, "srun", STUB_SRUN.replace("/usr/bin/env python3", sys.executable))
    for name in ("torchrun", "python3"):
        _stub(d, name, STUB_RECORD.replace("/usr/bin/env python3", sys.executable))
    _stub(d, "scontrol", STUB_SCONTROL)
    return d


def _facts() -> ClusterFacts:
    return ClusterFacts(partition="gpu", gpus_per_node=2, gpu_type="h100", gpu_memory_mb=81559)


@pytest.mark.parametrize("launcher", ["torchrun", "srun", "megatron"])
def test_hostile_arguments_reach_the_program_byte_for_byte(launcher: str, tmp_path: Path, stubs: Path) -> None:
    canary = str(tmp_path / "pwned")
    args = tuple(a.replace("{canary}", canary) for a in HOSTILE)
    script = tmp_path / "my train's $(x).py"
    script.write_text("")
    run_dir = tmp_path / "run"
    spec = JobSpec(script=str(script), args=args, nodes=1, launcher=launcher,
                   env=(("USER_VAR", f"$(touch {canary}.env)'\"`x`\n"),))
    job = render(spec, _facts(), str(run_dir))
    out = tmp_path / "out.json"
    env = {
        "PATH": f"{stubs}:/usr/bin:/bin", "STUB_OUT": str(out), "HOME": str(tmp_path),
        "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "node1", "SLURMD_NODENAME": "node1",
        "SLURM_RESTART_COUNT": "0", "LANG": "C.UTF-8",
    }
    (tmp_path / "job.sh").write_text(job.request.script)
    res = subprocess.run(["bash", str(tmp_path / "job.sh")], env=env, capture_output=True, timeout=30, cwd=tmp_path)
    log = (run_dir / "logs" / "4242.r0.log").read_text()
    assert res.returncode == 0, log
    got = json.loads(out.read_text(encoding="utf-8"))
    argv = got["argv"]
    if launcher == "srun":
        assert argv[:2] == ["-u", str(script)]
        received = argv[2:]
        assert got["env"]["RANK"] == "0" and got["env"]["WORLD_SIZE"] == "2" and got["env"]["LOCAL_RANK"] == "0"
    else:
        i = argv.index(str(script))
        # torchrun's agent, run by the pinned interpreter (python3 here); megatron's passes a preemption on as SIGTERM
        assert argv[:2] == ["-c", forwarding_agent("SIGTERM") if launcher == "megatron" else AGENT]
        assert "--rdzv-id=4242" in argv[:i]
        assert "--rdzv-endpoint=10.1.2.3:24242" in argv[:i]
        assert not any(a.startswith("--signals-to-handle") for a in argv[:i])
        received = argv[i + 1:]
    if launcher == "megatron":
        assert received[: len(args)] == list(args)
        assert received[len(args):] == ["--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "1",
                                        "--context-parallel-size", "1", "--expert-model-parallel-size", "1",
                                        "--exit-signal-handler"]
        assert got["env"]["TRITON_CACHE_DIR"] == "/tmp/triton_cache_4242_0"
    else:
        assert received == list(args)
    assert got["env"]["USER_VAR"] == f"$(touch {canary}.env)'\"`x`\n"
    assert got["env"]["MASTER_ADDR"] == "10.1.2.3" and got["env"]["MASTER_PORT"] == "24242"
    assert got["env"]["NCCL_DEBUG"] == "WARN"
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith("pwned")]
    assert leftovers == [], f"hostile input ran a command: {leftovers}"
    calls = Path(str(out) + ".scontrol").read_text() if os.path.exists(str(out) + ".scontrol") else ""
    assert "requeue" not in calls and "update" not in calls, "no requeue, no unpin without a signal"
    assert (run_dir / "attempts" / "4242.r0.exit").read_text().strip() == "0"
