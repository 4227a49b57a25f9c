"""Logs a researcher reads (issue 34 item 6): a rank on every line of the step's output, no torchrun ChildFailedError
report or c10d C++ stack trace after a clean checkpoint-and-requeue, and `gpusub status` saying "requeued after
checkpoint at step N" instead of "step exit 1" (a real failure keeps its real exit).

The batch scripts run for real here (bash, the test venv's torch), with the stub srun/scontrol of
test_gpusub_leftovers; tests/integration/test_gpusub_ranklogs_lab.py runs the same on real Slurm."""

from __future__ import annotations

import json
import re
import signal
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmkit.backend.parse import JobInfo
from slurmkit.cli import gpusub_cmds as gpusub
from slurmkit.jobs.monitor import JobStatus, statuses
from slurmkit.jobs.render import explain, render
from slurmkit.jobs.spec import JobSpec
from tests.unit.test_gpusub_cli import CLUSTER_KEY
from tests.unit.test_gpusub_leftovers import _ended, _run_batch
from tests.unit.test_jobs_render import facts, live
from tests.unit.test_jobs_runtime import LAB_INV, env, script  # noqa: F401 - fixtures


def _srun_line(job) -> str:  # type: ignore[no-untyped-def]
    return next(line for line in job.request.script.splitlines() if line.startswith("srun "))


# --- rendering ------------------------------------------------------------------------------------------------------

def test_srun_launcher_labels_each_tasks_lines_unless_told_not_to() -> None:
    job = render(JobSpec(script="/t.sh", nodes=2, gpus_per_node=2, launcher="srun"), facts(), "/r")
    assert " --label " in _srun_line(job)
    assert "log lines: each starts with its task's rank" in "\n".join(explain(job))
    off = render(JobSpec(script="/t.sh", nodes=2, gpus_per_node=2, launcher="srun", label=False), facts(), "/r")
    assert "--label" not in _srun_line(off)
    assert "log lines: as the program prints them (--no-label)" in explain(off)


@pytest.mark.parametrize("launcher", ["torchrun", "megatron"])
def test_torchrun_ranks_are_teed_behind_their_global_rank_into_a_log_dir_per_node(launcher: str) -> None:
    kw = {"args": ("--save", "/ck")} if launcher == "megatron" else {}
    job = render(JobSpec(script="/t.py", nodes=2, gpus_per_node=2, launcher=launcher, **kw), facts(), "/r")  # type: ignore[arg-type]
    text = job.request.script
    names = {v.name: v for v in job.env.vars}
    assert names["PET_TEE"].value == "3" and names["PET_TEE"].kind == "batch"
    # ${rank} is torch's placeholder (string.Template), never the shell's: single-quoted in the script
    assert "export TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='${rank}: '" in text
    # per node, evaluated in each task (_gpusub_task_env): <run dir>/logs/<job>.r<attempt>.ranks/<node>
    assert '  export PET_LOG_DIR="$GPUSUB_RANK_LOGS/$SLURMD_NODENAME"' in text
    assert 'export GPUSUB_RANK_LOGS="$GPUSUB_RUN_DIR/logs/${_gpusub_id}.r${GPUSUB_RESTART_COUNT}.ranks"' in text
    assert "--label" not in _srun_line(job)  # one label per line: the rank's, not also srun's node index
    off = render(JobSpec(script="/t.py", nodes=2, gpus_per_node=2, launcher=launcher, label=False, **kw),  # type: ignore[arg-type]
                 facts(), "/r")
    assert not {"PET_TEE", "PET_LOG_DIR", "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"} & {v.name for v in off.env.vars}
    assert any(n == "PET_TEE" and "--no-label" in why for n, why in off.env.not_set)


def test_a_prefix_template_the_user_exported_is_kept() -> None:
    job = render(JobSpec(script="/t.py", nodes=1, gpus_per_node=2), facts(), "/r",
                 environ={"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[${role_name}${local_rank}]:"})
    var = {v.name: v for v in job.env.vars}["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"]
    assert var.origin == "env" and var.value == "[${role_name}${local_rank}]:"


def test_no_label_flag_reaches_the_script(env: dict[str, str], script: Path) -> None:  # noqa: F811
    on = CliRunner().invoke(gpusub.submit_cmd, [str(script), "-N", "2", "--launcher", "srun", "--dry-run",
                                                "--no-query"])
    off = CliRunner().invoke(gpusub.submit_cmd, [str(script), "-N", "2", "--launcher", "srun", "--dry-run",
                                                 "--no-query", "--no-label"])
    assert on.exit_code == 0 and off.exit_code == 0, (on.output, off.output)
    assert " --label " in on.output and "--label" not in off.output.split("#!/bin/bash", 1)[1].split("# sbatch")[0]
    assert "--label / --no-label" in CliRunner().invoke(gpusub.submit_cmd, ["--help"]).output


# --- the batch shell: a checkpoint the program recorded, and a real failure ----------------------------------------

# srun launcher: on the checkpoint request (SIGUSR2 through srun, or the preempt file), save, record the step, and
# exit 1 as a rank whose peer had gone would
SAVER = """#!/bin/bash
step=0
trap 'echo "saving at step $step"; [ -n "$RECORD" ] && echo "$step" >"$GPUSUB_CHECKPOINT_STEP_FILE"; exit 1' USR2
touch "$READY"
while :; do step=$((step + 1)); [ -e "$GPUSUB_PREEMPT_FILE" ] && kill -USR2 $$; sleep 0.05; done
"""


def _saver(tmp_path: Path) -> Path:
    p = tmp_path / "saver.sh"
    p.write_text(SAVER)
    p.chmod(0o755)
    return p


def _job(tmp_path: Path, **kw):  # type: ignore[no-untyped-def]
    return render(JobSpec(script=str(_saver(tmp_path)), nodes=1, gpus_per_node=1, launcher="srun", **kw),
                  facts(live_nodes=live(set())), str(tmp_path / "run"))


def test_a_recorded_checkpoint_ends_the_log_and_the_reason_with_its_step(tmp_path: Path) -> None:
    job = _job(tmp_path)
    proc = _run_batch(tmp_path, job, {"READY": str(tmp_path / "ready"), "RECORD": "1", "JOBSTATE": "RUNNING"},
                      ready=tmp_path / "ready", send=signal.SIGUSR2)
    assert _ended(proc) == 0
    run = tmp_path / "run"
    log = (run / "logs" / "77.r0.log").read_text()
    step = int((run / "attempts" / "77.r0.checkpoint").read_text())
    assert step > 0 and f"saving at step {step}" in log
    assert "may be incomplete" not in log, log
    assert f"gpusub: the step exited 1 after the checkpoint at step {step}" in log, log
    assert log.rstrip("\n").splitlines()[-1] == f"gpusub: checkpointed at step {step}, requeued: attempt 1 resumes from it"
    reason = (run / "attempts" / "77.r0.reason").read_text().strip()
    assert reason == f"requeued after checkpoint at step {step} (SIGUSR2; restart 1 of at most 3)"
    assert "scontrol requeue 77" in (tmp_path / "scontrol.log").read_text()


def test_a_step_that_recorded_no_checkpoint_keeps_its_exit(tmp_path: Path) -> None:
    job = _job(tmp_path)
    proc = _run_batch(tmp_path, job, {"READY": str(tmp_path / "ready"), "JOBSTATE": "RUNNING"},
                      ready=tmp_path / "ready", send=signal.SIGUSR2)
    assert _ended(proc) == 0
    run = tmp_path / "run"
    log = (run / "logs" / "77.r0.log").read_text()
    assert not (run / "attempts" / "77.r0.checkpoint").exists()
    assert "gpusub: the step exited 1 after SIGUSR2: the checkpoint may be incomplete" in log, log
    assert "checkpointed" not in log
    assert (run / "attempts" / "77.r0.reason").read_text().strip() == "preempted (SIGUSR2): step exit 1, requeued"


@pytest.mark.parametrize("record", ["7\n", "", "not a number\n"])
def test_slurms_own_requeue_after_a_recorded_checkpoint(tmp_path: Path, record: str) -> None:
    """scontrol requeue / preemption: SIGTERM, Restarts grew (PENDING). A record without a number still counts as a
    checkpoint (the Python API writes an empty one), without a step."""
    (tmp_path / "record").write_text(record)
    hold = tmp_path / "hold.sh"
    hold.write_text(f"#!/bin/bash\ntrap 'cp {tmp_path}/record \"$GPUSUB_CHECKPOINT_STEP_FILE\"; exit 0' USR2\n"
                    "touch \"$READY\"\nwhile :; do sleep 0.05; done\n")
    hold.chmod(0o755)
    job = render(JobSpec(script=str(hold), nodes=1, gpus_per_node=1, launcher="srun"),
                 facts(live_nodes=live(set())), str(tmp_path / "run"))
    proc = _run_batch(tmp_path, job, {"READY": str(tmp_path / "ready"), "PENDING": "1"}, ready=tmp_path / "ready",
                      send=signal.SIGTERM)
    assert _ended(proc) == 0
    at = " at step 7" if record.strip() == "7" else ""
    log = (tmp_path / "run" / "logs" / "77.r0.log").read_text()
    assert log.rstrip("\n").splitlines()[-1] == (f"gpusub: checkpointed{at}, requeued by Slurm (SIGTERM): attempt 1 "
                                                  "resumes from it"), log
    assert (tmp_path / "run" / "attempts" / "77.r0.reason").read_text().strip() == (
        f"requeued after checkpoint{at} (requeued by Slurm, SIGTERM)")


# --- torchrun for real: the ranks end unevenly after the save ------------------------------------------------------

# Two gloo ranks. When the preemption file appears (the batch shell's request; the stub srun delivers no signal to
# the ranks), rank 0 saves, records the step (RECORD=1) and leaves at once; rank 1 is still in its all_reduce and dies
# of "Connection closed by peer": the uneven end that left torchrun's ChildFailedError report in the log.
UNEVEN = """\
import os, sys, time
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
print(f"rank {rank} up", flush=True)
print(f"rank {rank} warns on stderr", file=sys.stderr, flush=True)
open(os.path.join(os.environ["GPUSUB_RUN_DIR"], f"up{rank}"), "w").close()
step = 0
t = torch.ones(1)
while True:
    if rank == 0 and os.path.exists(os.environ["GPUSUB_PREEMPT_FILE"]):
        if os.environ.get("RECORD"):
            with open(os.environ["GPUSUB_CHECKPOINT_STEP_FILE"], "w") as f:
                f.write(f"{step}\\n")
        print(f"rank 0 saved step {step}", flush=True)
        os._exit(0)
    dist.all_reduce(t)
    step += 1
    time.sleep(0.02)
"""


def _uneven(tmp_path: Path, record: bool) -> tuple[str, Path]:
    worker = tmp_path / "uneven.py"
    worker.write_text(UNEVEN)
    run = tmp_path / "run"
    job = render(JobSpec(script=str(worker), nodes=1, gpus_per_node=2, python=sys.executable, cpu_bind=False),
                 facts(), str(run))
    extra = {"JOBSTATE": "RUNNING", **({"RECORD": "1"} if record else {})}
    proc = _run_batch(tmp_path, job, extra, ready=run / "up1", send=signal.SIGUSR2)
    assert _ended(proc, timeout=120) == 0
    return (run / "logs" / "77.r0.log").read_text(), run


def test_torchrun_after_a_recorded_checkpoint_ends_with_one_line_not_childfailederror(tmp_path: Path) -> None:
    log, run = _uneven(tmp_path, record=True)
    step = int((run / "attempts" / "77.r0.checkpoint").read_text())
    assert "ChildFailedError" not in log and "Root Cause" not in log, log
    assert "frame #" not in log and "Exception raised from" not in log, log  # no c10d C++ stack trace
    assert f"gpusub: on node1, rank 1 exit 1 after the checkpoint at step {step} (a peer had gone" in log, log
    assert log.rstrip("\n").splitlines()[-1] == f"gpusub: checkpointed at step {step}, requeued: attempt 1 resumes from it"
    assert (run / "attempts" / "77.r0.reason").read_text().startswith(f"requeued after checkpoint at step {step} ")
    # every line of the ranks' output carries its global rank, stdout and stderr alike (torch's own excepthook adds
    # "[rank1]: " inside rank 1's traceback)
    assert "0: rank 0 up\n" in log and "1: rank 1 up\n" in log and "1: rank 1 warns on stderr\n" in log, log
    assert f"0: rank 0 saved step {step}\n" in log
    tb = [line for line in log.splitlines() if "Traceback" in line or "Connection closed by peer" in line]
    assert tb and all(line.startswith("1: ") for line in tb), tb
    # and each rank's own files, per node, in the run dir
    outs = sorted(p.relative_to(run / "logs") for p in (run / "logs").glob("77.r0.ranks/node1/*/attempt_0/*/stdout.log"))
    assert [p.parts[-2] for p in outs] == ["0", "1"], outs
    assert "rank 1 up" in (run / "logs" / outs[1]).read_text()


def test_torchrun_failure_without_a_checkpoint_keeps_torchruns_report(tmp_path: Path) -> None:
    log, run = _uneven(tmp_path, record=False)
    assert "ChildFailedError" in log and "Root Cause" in log, log[-3000:]
    assert "after the checkpoint" not in log
    assert (run / "attempts" / "77.r0.reason").read_text().strip() == "preempted (SIGUSR2): step exit 1, requeued"


# --- gpusub status --------------------------------------------------------------------------------------------------

class _Backend:
    env = None

    def __init__(self, state: str, restarts: int, exit_code: str = "0:0"):
        self.info = JobInfo(job_id="77", state=state, nodes=("node1",), exit_code=exit_code, restarts=restarts)

    def jobs(self, job_ids=None):  # type: ignore[no-untyped-def]
        return [self.info]


def _run_dir(tmp_path: Path, env: dict[str, str], reason: str, step: str | None) -> Path:  # noqa: F811
    rd = tmp_path / "r"
    (rd / "attempts").mkdir(parents=True)
    (rd / "attempts" / "77.r0.exit").write_text("1\n")
    (rd / "attempts" / "77.r0.reason").write_text(reason + "\n")
    if step is not None:
        (rd / "attempts" / "77.r0.checkpoint").write_text(step)
    idx = Path(env["SLURMKIT_STATE_DIR"]) / "jobs" / CLUSTER_KEY
    idx.mkdir(parents=True)
    (idx / "77").write_text(str(rd))
    return rd


def test_status_of_a_requeued_job_says_requeued_after_checkpoint_at_step_n(
        env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    _run_dir(tmp_path, env, "requeued after checkpoint at step 42 (SIGUSR2; restart 1 of at most 3)", "42\n")
    for state in ("PENDING", "RUNNING", "COMPLETED"):
        backend = _Backend(state, 1)
        monkeypatch.setattr(gpusub, "_backend", lambda b=backend: b)
        row = statuses(["77"], backend, env)[0]  # type: ignore[arg-type]
        assert row.checkpoint_step == 42 and "step exit" not in row.line()
        assert "note='requeued after checkpoint at step 42 (SIGUSR2; restart 1 of at most 3)'" in row.line(), row
        res = CliRunner().invoke(gpusub.status_cmd, ["--json", "77"])
        got = json.loads(res.output)[0]
        assert got["note"].startswith("requeued after checkpoint at step 42") and got["checkpoint_step"] == 42, got


def test_status_of_a_real_failure_keeps_the_real_exit(env: dict[str, str], tmp_path: Path,  # noqa: F811
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("slurmkit.jobs.monitor._sacct", lambda ids, backend: {})
    _run_dir(tmp_path, env, "preempted (SIGUSR2): step exit 1, requeued", None)

    class Forgot(_Backend):
        def jobs(self, job_ids=None):  # type: ignore[no-untyped-def]
            return []

    row = statuses(["77"], Forgot("COMPLETED", 0), env)[0]  # type: ignore[arg-type]
    assert row.source == "run dir" and row.state == "FAILED" and row.exit_code == "1"
    assert row.note == "preempted (SIGUSR2): step exit 1, requeued" and row.checkpoint_step is None
    assert re.search(r"\bexit=1\b", row.line())


def test_a_remote_status_row_carries_the_checkpoint_step() -> None:
    from dataclasses import asdict

    from slurmkit.jobs.remote import job_status

    st = JobStatus("77", "RUNNING", "slurmctld", restarts=1, note="requeued after checkpoint at step 5 (SIGUSR2)",
                   checkpoint_step=5)
    assert job_status(json.loads(json.dumps(asdict(st)))) == st


def test_megatrons_own_tracker_file_is_the_checkpoint_record(tmp_path: Path) -> None:
    """--launcher megatron: the script writes no $GPUSUB_CHECKPOINT_STEP_FILE; Megatron-LM's tracker of its latest
    save (<--save>/latest_checkpointed_iteration.txt) moved during the attempt is the record. The stand-in trainer
    around Megatron's own DistributedSignalHandler writes it as Megatron's save_checkpoint does."""
    train = Path(__file__).resolve().parents[1] / "data" / "megatron" / "train_signal.py"
    save, run = tmp_path / "ckpt", tmp_path / "run"
    save.mkdir()
    (save / "latest_checkpointed_iteration.txt").write_text("3")  # an earlier attempt's save, resumed from
    (save / "latest.json").write_text(json.dumps({"iteration": 3, "world": 2}))
    job = render(JobSpec(script=str(train), nodes=1, gpus_per_node=2, launcher="megatron", cpu_bind=False,
                         python=sys.executable, args=("--save", str(save), "--train-iters", "100000",
                                                      "--iter-seconds", "0.05")), facts(), str(run))
    assert f"_gpusub_tracker={save}/latest_checkpointed_iteration.txt" in job.request.script
    proc = _run_batch(tmp_path, job, {"JOBSTATE": "RUNNING"}, ready=save / "ranks" / "1.running",
                      send=signal.SIGUSR2)
    assert _ended(proc, timeout=120) == 0
    log = (run / "logs" / "77.r0.log").read_text()
    step = int((save / "latest_checkpointed_iteration.txt").read_text())
    assert step > 3 and (run / "attempts" / "77.r0.checkpoint").read_text() == f"{step}\n", log
    assert f"0: rank 0: exiting program after receiving SIGTERM at iteration {step}" in log, log
    assert log.rstrip("\n").splitlines()[-1] == f"gpusub: checkpointed at step {step}, requeued: attempt 1 resumes from it"
    relative = render(JobSpec(script=str(train), nodes=1, gpus_per_node=2, launcher="megatron",
                              args=("--save", "ckpt")), facts(), str(run))
    assert "_gpusub_tracker" not in relative.request.script  # the ranks' working directory's: not guessed


CLEAN_SAVER = SAVER.replace("; exit 1' USR2", "; exit 0' USR2")


def test_an_ending_job_and_the_last_restart_name_the_checkpoint_not_the_exit(
        tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """scancel / time limit (SIGTERM, the job not RUNNING): not requeued, the checkpoint named. --max-restarts
    reached: the run stops unfinished (exit 75, FAILED for `afterok`), the checkpoint named, in the run dir's status
    too."""
    saver = tmp_path / "clean.sh"
    saver.write_text(CLEAN_SAVER)
    saver.chmod(0o755)
    ending = render(JobSpec(script=str(saver), nodes=1, gpus_per_node=1, launcher="srun"),
                    facts(live_nodes=live(set())), str(tmp_path / "a"))
    proc = _run_batch(tmp_path, ending, {"READY": str(tmp_path / "ready"), "RECORD": "1", "JOBSTATE": "CANCELLED"},
                      ready=tmp_path / "ready", send=signal.SIGTERM)
    assert _ended(proc) == 0
    step = int((tmp_path / "a" / "attempts" / "77.r0.checkpoint").read_text())
    assert (tmp_path / "a" / "attempts" / "77.r0.reason").read_text().strip() == (
        f"ended by Slurm (SIGTERM, CANCELLED): checkpoint at step {step}, not requeued")
    last = render(JobSpec(script=str(saver), nodes=1, gpus_per_node=1, launcher="srun", max_restarts=0),
                  facts(live_nodes=live(set())), str(tmp_path / "b"))
    (tmp_path / "ready").unlink()
    proc = _run_batch(tmp_path, last, {"READY": str(tmp_path / "ready"), "RECORD": "1", "JOBSTATE": "RUNNING"},
                      ready=tmp_path / "ready", send=signal.SIGUSR2)
    assert _ended(proc) == 75
    run = tmp_path / "b"
    step = int((run / "attempts" / "77.r0.checkpoint").read_text())
    log = (run / "logs" / "77.r0.log").read_text()
    assert log.rstrip("\n").splitlines()[-1] == (f"gpusub: stopped after a checkpoint at step {step}, not requeued: "
                                                  "--max-restarts 0 reached; exit 75"), log
    monkeypatch.setattr("slurmkit.jobs.monitor._sacct", lambda ids, backend: {})
    idx = Path(env["SLURMKIT_STATE_DIR"]) / "jobs" / CLUSTER_KEY
    idx.mkdir(parents=True)
    (idx / "77").write_text(str(run))

    class Forgot(_Backend):
        def jobs(self, job_ids=None):  # type: ignore[no-untyped-def]
            return []

    row = statuses(["77"], Forgot("COMPLETED", 0), env)[0]  # type: ignore[arg-type]
    assert (row.state, row.exit_code, row.checkpoint_step) == ("FAILED", "75", step), row
    assert row.note == f"preempted (SIGUSR2): checkpoint at step {step}, not requeued: --max-restarts 0 reached"


def test_the_rendezvous_store_outlives_slurms_sigterm_and_goes_with_sigkill(tmp_path: Path) -> None:
    """With proctrack/linuxproc Slurm's SIGTERM at a requeue reaches the batch shell's store too; a store that died of
    it left every client printing c10d's C++ stack trace while the ranks still saved."""
    import socket
    import subprocess
    import time
    from datetime import timedelta

    from torch.distributed import TCPStore

    from slurmkit.jobs.torchcompat import STORE

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-c", STORE, "127.0.0.1", str(port)], stderr=subprocess.PIPE, text=True)
    try:
        client = None
        end = time.monotonic() + 60
        while client is None:
            try:
                client = TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=5))
            except RuntimeError:
                assert time.monotonic() < end and proc.poll() is None, "the store never listened"
                time.sleep(0.1)
        client.set("ckpt", "42")
        for sig in (signal.SIGTERM, signal.SIGUSR2):
            proc.send_signal(sig)
        time.sleep(0.5)
        assert proc.poll() is None and client.get("ckpt") == b"42"
        proc.kill()
        assert proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
