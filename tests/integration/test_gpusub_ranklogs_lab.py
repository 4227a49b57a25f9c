"""Logs a researcher reads, on the real lab (issue 34 item 6): a 2-node srun job whose every output line carries its
rank (srun --label), and a 2-node torchrun DDP job checkpointed and requeued by the preemption signal whose log ends
with gpusub's one line instead of torchrun's ChildFailedError report, and whose `gpusub status` says "requeued after
checkpoint at step N".

The jobs use the test venv's torch (gloo, CPU), as tests/integration/test_gpusub_lab.py; the fake GPUs only make
Slurm hand out GRES. Its fixtures and helpers are reused here.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from slurmkit.backend.cli import CLIBackend
from slurmkit.jobs import JobSpec, follow, submit_job
from tests.integration.test_gpusub_lab import _gpusub, _wait_for, backend, env  # noqa: F401 - fixtures

pytestmark = [pytest.mark.lab, pytest.mark.releases]

# each task prints its rank and host, on stdout and stderr, several lines
TALK = """#!/bin/bash
for i in 1 2 3; do echo "task RANK=$RANK line $i on $(hostname -s)"; done
echo "task RANK=$RANK on stderr" >&2
printf 'task RANK=%s no newline at the end' "$RANK"
"""


def _job_lines(log: str) -> list[str]:
    """The step's lines: everything but the batch shell's own ("gpusub: ...")."""
    return [line for line in log.splitlines() if line and not line.startswith("gpusub: ")]


def test_srun_job_on_2_nodes_labels_every_line_with_its_rank(env: dict[str, str], backend: CLIBackend,  # noqa: F811
                                                            tmp_path: Path) -> None:
    script = tmp_path / "talk.sh"
    script.write_text(TALK)
    script.chmod(0o755)
    spec = JobSpec(script=str(script), nodes=2, gpus_per_node=2, launcher="srun", time="5:00",
                   run_dir=str(tmp_path / "run"))
    job_id, run_dir = submit_job(spec, backend, environ=env)
    st = follow(job_id, backend, io.StringIO(), environ=env, cap=1.0)
    log = (Path(run_dir) / "logs" / f"{job_id}.r0.log").read_text()
    assert st.state == "COMPLETED", log[-3000:]
    lines = _job_lines(log)
    assert len(lines) == 4 * 5, lines  # 4 tasks x (3 + stderr + the unterminated one)
    for line in lines:
        m = re.match(r"^ *(\d+): task RANK=(\d+) ", line)
        assert m and m.group(1) == m.group(2), line  # srun's label is the task's rank
    hosts = {line.rsplit(" on ", 1)[1] for line in lines if " line " in line}
    assert len(hosts) == 2, hosts

    off = JobSpec(script=str(script), nodes=2, gpus_per_node=2, launcher="srun", time="5:00", label=False,
                  run_dir=str(tmp_path / "run-off"))
    off_id, off_dir = submit_job(off, backend, environ=env)
    assert follow(off_id, backend, io.StringIO(), environ=env, cap=1.0).state == "COMPLETED"
    plain = _job_lines((Path(off_dir) / "logs" / f"{off_id}.r0.log").read_text())
    assert len(plain) >= 16 and all(line.startswith("task RANK=") for line in plain), plain


# 2 nodes x 2 gloo ranks. On the preemption signal (Slurm's SIGUSR2 to every rank) rank 0 saves, records the step in
# $GPUSUB_CHECKPOINT_STEP_FILE and leaves at once; the other ranks are in an all-reduce and die of "Connection closed
# by peer": the uneven end of a real job, which left torchrun's ChildFailedError report at the end of the log and
# "step exit 1" in `gpusub status`. The requeued attempt resumes from the save and finishes 5 steps later.
UNEVEN = """\
import json, os, signal, sys, time
import torch
import torch.distributed as dist
got = []
signal.signal(signal.SIGUSR2, lambda s, f: got.append(s))
dist.init_process_group("gloo")
rank = dist.get_rank()
run = os.environ["GPUSUB_RUN_DIR"]
restart = int(os.environ["GPUSUB_RESTART_COUNT"])
ck = os.path.join(os.environ["GPUSUB_CHECKPOINT_DIR"], "state.json")
step = start = json.load(open(ck))["step"] if os.path.exists(ck) else 0
print(f"rank {rank} restart {restart} from step {step}", flush=True)
open(os.path.join(run, f"running.r{restart}.rank{rank}"), "w").close()
t = torch.ones(1)
while True:
    if rank == 0 and (got or os.path.exists(os.environ["GPUSUB_PREEMPT_FILE"])):
        with open(ck + ".tmp", "w") as f:
            json.dump({"step": step}, f)
        os.replace(ck + ".tmp", ck)
        if not os.environ.get("NO_RECORD"):
            with open(os.environ["GPUSUB_CHECKPOINT_STEP_FILE"], "w") as f:
                f.write(f"{step}\\n")
        print(f"rank 0 saved step {step}", flush=True)
        os._exit(0)
    if restart > 0 and step >= start + 5:
        if rank == 0:
            with open(os.path.join(run, "result.json"), "w") as f:
                json.dump({"resumed_from": start, "final": step}, f)
        dist.destroy_process_group()
        break
    dist.all_reduce(t)
    step += 1
    time.sleep(0.05)
"""


def test_torchrun_checkpoint_and_requeue_ends_with_one_line_and_status_names_the_step(
        env: dict[str, str], backend: CLIBackend, tmp_path: Path) -> None:  # noqa: F811
    script = tmp_path / "uneven.py"
    script.write_text(UNEVEN)
    run_dir = tmp_path / "run"
    spec = JobSpec(script=str(script), nodes=2, gpus_per_node=2, max_restarts=1, run_dir=str(run_dir),
                   time="10:00")
    job_id, _ = submit_job(spec, backend, environ=env)
    _wait_for(lambda: len(list(run_dir.glob("running.r0.rank*"))) == 4, 150, "4 ranks of the first attempt")
    backend.cancel(job_id, signal="USR2", batch=True)  # what --signal=B:USR2@GRACE does before the time limit
    _wait_for(lambda: backend.job(job_id).restarts >= 1, 120, "the requeue")
    st = follow(job_id, backend, io.StringIO(), environ=env, cap=1.0)
    r0 = (run_dir / "logs" / f"{job_id}.r0.log").read_text()
    assert st.state == "COMPLETED", r0[-3000:]
    step = int((run_dir / "attempts" / f"{job_id}.r0.checkpoint").read_text())
    assert json.loads((run_dir / "checkpoints" / "state.json").read_text())["step"] == step
    assert json.loads((run_dir / "result.json").read_text()) == {"resumed_from": step, "final": step + 5}
    # no torchrun report, no c10d C++ stack trace; one line says what happened
    for bad in ("ChildFailedError", "Root Cause", "frame #", "Exception raised from"):
        assert bad not in r0, r0[-4000:]
    assert r0.rstrip("\n").splitlines()[-1] == f"gpusub: checkpointed at step {step}, requeued: attempt 1 resumes from it"
    # the ranks' lines carry their global rank
    for rank in range(4):
        assert f"{rank}: rank {rank} restart 0 from step 0\n" in r0, r0[-4000:]
    assert f"0: rank 0 saved step {step}\n" in r0
    tracebacks = [line for line in r0.splitlines() if "Traceback" in line]
    assert all(re.match(r"^[123]: ", line) for line in tracebacks), tracebacks  # a dying peer's own, labelled
    # each rank's own files, per node, in the run dir
    per_rank = list((run_dir / "logs").glob(f"{job_id}.r0.ranks/*/*/attempt_0/*/stdout.log"))
    assert len(per_rank) == 4, per_rank
    # gpusub status and its --json
    res = _gpusub(env, "status", job_id)
    assert res.returncode == 0, res.stderr
    assert f"note='requeued after checkpoint at step {step} (SIGUSR2; restart 1 of at most 1)'" in res.stdout, res.stdout
    assert "step exit" not in res.stdout
    row = json.loads(_gpusub(env, "status", "--json", job_id).stdout)[0]
    assert row["checkpoint_step"] == step and row["note"].startswith(f"requeued after checkpoint at step {step}")


def test_a_signalled_torchrun_job_that_recorded_no_checkpoint_keeps_its_report_and_exit(
        env: dict[str, str], backend: CLIBackend, tmp_path: Path) -> None:  # noqa: F811
    """The same uneven end without the record: nothing says the work was saved, so torchrun's report stays and
    `gpusub status` gives the step's real exit (--max-restarts 0: the job ends FAILED)."""
    script = tmp_path / "uneven.py"
    script.write_text(UNEVEN)
    run_dir = tmp_path / "run"
    spec = JobSpec(script=str(script), nodes=2, gpus_per_node=2, max_restarts=0, run_dir=str(run_dir),
                   time="10:00", env=(("NO_RECORD", "1"),))
    job_id, _ = submit_job(spec, backend, environ=env)
    _wait_for(lambda: len(list(run_dir.glob("running.r0.rank*"))) == 4, 150, "4 ranks")
    backend.cancel(job_id, signal="USR2", batch=True)
    st = follow(job_id, backend, io.StringIO(), environ=env, cap=1.0)
    r0 = (run_dir / "logs" / f"{job_id}.r0.log").read_text()
    assert st.state == "FAILED", r0[-3000:]
    assert "ChildFailedError" in r0 and "after the checkpoint" not in r0, r0[-3000:]
    assert not (run_dir / "attempts" / f"{job_id}.r0.checkpoint").exists()
    res = _gpusub(env, "status", job_id)
    assert "note='preempted (SIGUSR2): step exit 1, not requeued: --max-restarts 0 reached'" in res.stdout, res.stdout
    assert "exit=1:0" in res.stdout and "requeued after checkpoint" not in res.stdout, res.stdout
