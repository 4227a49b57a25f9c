"""gpusub leftovers of issue 10: OpenMP threads per rank, per-GPU CPUs/memory no node can give, the real --time vs
--signal-grace rule, per-GPU flags without GPUs, and a Slurm-initiated requeue of a pinned job."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmkit.backend.parse import node_from_scontrol, parse_scontrol_records
from slurmkit.cli import gpusub_cmds as gpusub  # the click commands (gpusub.py is the entry point)
from slurmkit.errors import UsageError
from slurmkit.jobs.facts import from_cluster, node_shape
from slurmkit.jobs.render import explain, render
from slurmkit.jobs.spec import JobSpec, earliest_signal_s
from slurmkit.jobs.submit import PreflightError, prepare
from slurmkit.model.load import load_cluster
from tests.unit.test_gpusub_cli import CLUSTER_KEY, FakeBackend
from tests.unit.test_jobs_render import facts, live
from tests.unit.test_jobs_runtime import LAB_INV, env, script  # noqa: F401 - fixtures

STUB_SRUN = """#!/bin/bash
while [ $# -gt 0 ] && [ "${1#--}" != "$1" ]; do shift; done
exec "$@"
"""
# KILL_FIRST_SHOW / KILL_FIRST_UPDATE: Slurm's SIGTERM lands while that call is in flight, on the call alone or, with
# KILL_GROUP, on every process of the step (the test's session: the batch shell too, whose TERM trap then runs).
# SHOW_DELAY: a slurmctld that takes that long to answer a job query; SHOW_PLAN: see below; SHOW_WARN: a line on
# stderr before the record (the shell captures both), then a blank line.
STUB_SCONTROL = """#!/bin/bash
echo "scontrol $*" >> "$SCONTROL_LOG"
_term() { if [ -n "${KILL_GROUP:-}" ]; then kill -TERM 0; else kill -TERM $$; fi; }
case "$*" in
  *"show node"*) echo "NodeName=node1 NodeAddr=127.0.0.1" ;;
  *"show job"*) sleep "${SHOW_DELAY:-0}"
                if [ -n "${SHOW_PLAN:-}" ]; then  # what the Nth job query does: ok, kill (SIGTERM lands on it), fail
                  n=$(( $(cat "$SCONTROL_LOG.n" 2>/dev/null || echo 0) + 1 )); echo "$n" >"$SCONTROL_LOG.n"
                  IFS=, read -r -a plan <<<"$SHOW_PLAN"
                  case "${plan[$((n - 1))]:-ok}" in
                    kill) _term ;;
                    fail) echo "slurm_load_jobs error: Socket timed out on send/recv operation" >&2; exit 1 ;;
                  esac
                fi
                if [ -n "${KILL_FIRST_SHOW:-}" ] && [ ! -e "$KILL_FIRST_SHOW" ]; then
                  : >"$KILL_FIRST_SHOW"; _term  # as Slurm's SIGTERM to every process of the step
                fi
                if [ -n "${SHOW_WARN:-}" ]; then echo "$SHOW_WARN" >&2; echo; fi  # stderr first, a blank line
                if [ -n "${PENDING:-}" ]; then echo "JobId=77 JobState=PENDING Restarts=1"
                else echo "JobId=77 JobState=${JOBSTATE:-COMPLETING} Restarts=0"; fi ;;
  *"update"*) echo "SLURM_JOBID=${SLURM_JOBID:-unset}" >> "$SCONTROL_LOG"
              if [ -n "${KILL_FIRST_UPDATE:-}" ] && [ ! -e "$KILL_FIRST_UPDATE" ]; then
                : >"$KILL_FIRST_UPDATE"; _term; sleep 1  # the signal's exit, not the update's
              fi
              [ -n "${PENDING:-}" ] || { echo "Job is no longer pending execution" >&2; exit 1; } ;;
esac
exit 0
"""


def _run_batch(tmp_path: Path, job, extra_env: dict[str, str] | None = None,  # type: ignore[no-untyped-def]
               ready: Path | None = None, send: int | None = None) -> subprocess.Popen:
    """Run a rendered batch script for real on this host, with stub srun (runs the task in place) and scontrol."""
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    for name, text in (("srun", STUB_SRUN), ("scontrol", STUB_SCONTROL)):
        (bin_ / name).write_text(text)
        (bin_ / name).chmod(0o755)
    (tmp_path / "job.sh").write_text(job.request.script)
    penv = {"PATH": f"{bin_}:{Path(sys.executable).parent}:/usr/bin:/bin", "SLURM_JOB_ID": "77",
           "SLURM_JOB_NODELIST": "node1", "SLURMD_NODENAME": "node1", "SLURM_NODEID": "0",
           "SCONTROL_LOG": str(tmp_path / "scontrol.log"), "HOME": str(tmp_path), **(extra_env or {})}
    # Own session, so a test can kill the whole job (the task outlives a batch shell killed by a signal).
    proc = subprocess.Popen(["bash", str(tmp_path / "job.sh")], env=penv, cwd=tmp_path, start_new_session=True)
    if ready is not None:
        end = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < end and proc.poll() is None:
            time.sleep(0.05)
        assert ready.exists(), "the task never started"
    if send is not None:
        proc.send_signal(send)
    return proc



def _ended(proc: subprocess.Popen, timeout: float = 30) -> int:
    """The batch shell's exit status; its whole session is killed afterwards (the task, run in place by the stub
    srun, outlives a shell that a signal ended, and must not outlive the test)."""
    try:
        return proc.wait(timeout=timeout)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)

# --- 1: OMP_NUM_THREADS = the CPUs each rank gets -----------------------------------------------------------------

OMP_WORKER = """import json, os, sys
rank = os.environ.get("LOCAL_RANK", "0")
with open(os.path.join(sys.argv[1], f"omp{rank}.json"), "w") as f:
    json.dump(os.environ.get("OMP_NUM_THREADS"), f)
"""


def test_torchrun_workers_get_the_cpus_per_gpu_as_omp_threads_not_one(tmp_path: Path) -> None:
    """Real torchrun (the test venv's torch) under the rendered script: without gpusub's export, torchrun's
    config_from_args sets OMP_NUM_THREADS=1 in both workers (nproc_per_node 2 > 1)."""
    worker = tmp_path / "omp.py"
    worker.write_text(OMP_WORKER)
    out = tmp_path / "out"
    out.mkdir()
    job = render(JobSpec(script=str(worker), args=(str(out),), gpus_per_node=2, python=sys.executable,
                         signal_grace=0), facts(cpus_per_gpu=6, mem_per_gpu_mb=1000), str(tmp_path / "run"))
    assert job.request.script.count("export OMP_NUM_THREADS") == 1  # one export, in the per-task environment
    proc = _run_batch(tmp_path, job)
    assert proc.wait(timeout=300) == 0, (tmp_path / "run" / "logs" / "77.r0.log").read_text()[-3000:]
    got = sorted(json.loads(p.read_text()) for p in out.glob("omp*.json"))
    assert got == ["6", "6"], got


def test_omp_threads_from_the_users_environment_or_env_flag_win(tmp_path: Path) -> None:
    worker = tmp_path / "w.sh"
    worker.write_text('#!/bin/bash\necho "$OMP_NUM_THREADS" > "$OUT"\n')
    worker.chmod(0o755)
    f = facts(cpus_per_gpu=6, mem_per_gpu_mb=1000)
    job = render(JobSpec(script=str(worker), gpus_per_node=2, launcher="srun", signal_grace=0), f, str(tmp_path / "r"))
    for given, want in ((None, "6"), ("3", "3")):
        out = tmp_path / f"out-{given}"
        extra = {"OUT": str(out), **({"OMP_NUM_THREADS": given} if given else {})}
        assert _run_batch(tmp_path, job, extra).wait(timeout=60) == 0
        assert out.read_text().strip() == want
    flag = render(JobSpec(script="/t.py", gpus_per_node=2, env=(("OMP_NUM_THREADS", "2"),)), f, "/r")
    assert "export OMP_NUM_THREADS=2" in flag.request.script and "OMP_NUM_THREADS:-" not in flag.request.script


def test_explain_says_why_omp_threads_is_set_or_not() -> None:
    job = render(JobSpec(script="/t.py", nodes=2, gpus_per_node=4), facts(cpus_per_gpu=8), "/r")
    line = next(x for x in explain(job) if x.strip().startswith("OMP_NUM_THREADS"))
    assert "${OMP_NUM_THREADS:-8}" in line and "--cpus-per-task=32 shared by 4 rank(s)" in line
    assert "torch/distributed/run.py" in line
    unknown = render(JobSpec(script="/t.py", nodes=2, gpus_per_node=4), facts(cpus_per_gpu=0, mem_per_gpu_mb=0), "/r")
    line = next(x for x in explain(unknown) if x.strip().startswith("OMP_NUM_THREADS"))
    assert "not set" in line and "--cpus-per-gpu" in line
    assert "OMP_NUM_THREADS" not in unknown.request.script


# --- 2: --cpus-per-gpu / --mem-per-gpu that no node can give -------------------------------------------------------

@pytest.mark.parametrize("kw,flag", [({"cpus_per_gpu": 2}, "--cpus-per-gpu 2"),
                                     ({"mem_per_gpu_mb": 5000}, "--mem-per-gpu 5000M")])
def test_per_gpu_share_larger_than_any_node_is_refused(kw: dict[str, int], flag: str) -> None:
    # lab inventory: 8 GPUs, 8 CPUs and 32000 - 1000 MB per node: 8 x 2 CPUs or 8 x 5000 MB fit nowhere
    f = from_cluster(load_cluster(LAB_INV), None, "inventory:lab")
    spec = JobSpec(script=str(LAB_INV), nodes=2, gpus_per_node=8, run_dir="/tmp/r", **kw)  # type: ignore[arg-type]
    with pytest.raises(PreflightError) as e:
        prepare(spec, facts=f)
    msg = e.value.one_line()
    assert flag in msg and "largest: node1, 8 CPUs and 31000 MB usable, 8 GPUs" in msg and "\n" not in msg
    half = JobSpec(script=str(LAB_INV), nodes=2, gpus_per_node=4, run_dir="/tmp/r", **kw)  # type: ignore[arg-type]
    if "cpus_per_gpu" in kw:
        prepare(half, facts=f)  # 4 GPUs x 2 CPUs = 8: fits


def test_shapes_from_node_records_and_a_partial_fit() -> None:
    text = ("NodeName=g1 CPUTot=64 ThreadsPerCore=2 RealMemory=512000 CoreSpecCount=2 MemSpecLimit=16000 "
            "Gres=gpu:h100:8 State=IDLE\n"
            "NodeName=g2 CPUTot=32 ThreadsPerCore=1 RealMemory=256000 Gres=gpu:h100:8 State=IDLE\n")
    nodes = [node_from_scontrol(r) for r in parse_scontrol_records(text)]
    assert [node_shape(n) for n in nodes] == [("g1", 60, 496000), ("g2", 32, 256000)]
    f = facts(node_gpus=(("g1", 8), ("g2", 8)), node_shapes=tuple(node_shape(n) for n in nodes), topo_model=None)
    spec = JobSpec(script=str(LAB_INV), nodes=2, gpus_per_node=8, cpus_per_gpu=6, run_dir="/tmp/r")
    with pytest.raises(PreflightError, match=r"--cpus-per-gpu 6: 8 GPU\(s\) x 6 = 48 CPUs per node, only 1 node"):
        prepare(spec, facts=f)
    prepare(JobSpec(script=str(LAB_INV), nodes=1, gpus_per_node=8, cpus_per_gpu=6, run_dir="/tmp/r"), facts=f)


def test_dry_run_refuses_a_share_no_node_has_exit_2_nothing_submitted(env: dict[str, str], script: Path,  # noqa: F811
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeBackend()
    monkeypatch.setattr(gpusub, "_backend", lambda: fake)
    for extra in (["--dry-run"], []):
        res = CliRunner().invoke(gpusub.submit_cmd, [str(script), "-N", "2", "--gpus-per-node", "8",
                                                     "--mem-per-gpu", "64G", *extra])
        assert res.exit_code == 2, res.output
        lines = res.output.strip().splitlines()
        assert len(lines) == 1 and "--mem-per-gpu 65536M" in lines[0]
    assert fake.submitted == []


# --- 3: --time vs --signal-grace, as Slurm rounds and signals -----------------------------------------------------

@pytest.mark.parametrize("time,grace,earliest", [
    ("2:30", 120, 0),    # rounded up to 3 min; the signal may come 60 s early: at the start (accepted before)
    ("3", 120, 0),       # accepted before: 180 s > 120
    ("3:01", 120, 60),   # rounded up to 4 min
    ("4", 120, 60),
    ("10", 0, 540),
    ("UNLIMITED", 120, None),
])
def test_earliest_signal_follows_slurms_rounding_and_its_60s_resolution(time: str, grace: int,
                                                                         earliest: int | None) -> None:
    assert earliest_signal_s(time, grace) == earliest
    if earliest is not None and earliest <= 0 and grace:
        with pytest.raises(UsageError, match="up to 60 s early"):
            JobSpec(script="/t.py", time=time, signal_grace=grace)
    else:
        JobSpec(script="/t.py", time=time, signal_grace=grace)


# --- 4: per-GPU flags without GPUs ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kw,flag", [({"cpus_per_gpu": 4}, "--cpus-per-gpu"), ({"mem_per_gpu_mb": 4096}, "--mem-per-gpu")])
def test_per_gpu_flags_without_gpus_are_refused_not_dropped(kw: dict[str, int], flag: str) -> None:
    with pytest.raises(UsageError) as e:
        render(JobSpec(script="/t.sh", gpus_per_node=0, launcher="srun", **kw), facts(), "/r")  # type: ignore[arg-type]
    assert e.value.one_line().startswith(f"{flag}: ") and "--gpus-per-node 0" in e.value.one_line()
    render(JobSpec(script="/t.sh", gpus_per_node=0, launcher="srun"), facts(), "/r")  # no flag: still fine


# --- 5: a requeue by Slurm itself clears the pin ------------------------------------------------------------------

HOLD = """#!/bin/bash
touch "$READY"
while :; do sleep 0.1; done
"""


def test_a_requeue_query_killed_by_slurms_sigterm_is_asked_again(tmp_path: Path) -> None:
    """Slurm requeued the job (a node failed) before its step started: srun fails at once ("Job is pending
    execution") and Slurm's SIGTERM, which reaches every process of the batch step, kills the shell's `scontrol show
    job` in flight. Seen on the 24.11 lab: the shell read no Restarts, took the job for an ending one and kept the pin
    to the down node, so the next attempt waited for it forever. A query killed by a signal is asked again."""
    failing = tmp_path / "fail.sh"
    failing.write_text("#!/bin/bash\nexit 1\n")
    failing.chmod(0o755)
    job = render(JobSpec(script=str(failing), nodes=2, gpus_per_node=1, launcher="srun"),
                 facts(live_nodes=live(set())), str(tmp_path / "run"))
    assert job.topology.pinned
    proc = _run_batch(tmp_path, job, {"PENDING": "1", "KILL_FIRST_SHOW": str(tmp_path / "killed")})
    try:
        proc.wait(timeout=30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    log = (tmp_path / "run" / "logs" / "77.r0.log").read_text()
    assert (tmp_path / "killed").exists()  # the first query did die of SIGTERM
    assert "requeued by Slurm" in log and "cleared the node pin" in log, log
    assert "scontrol update JobId=77 ReqNodeList=" in (tmp_path / "scontrol.log").read_text()
    assert (tmp_path / "run" / "attempts" / "77.r0.unpinned").exists()  # a pin on attempt 1 is then a person's


@pytest.mark.parametrize("killed", ["query", "update"])
def test_slurms_sigterm_during_the_final_check_clears_the_pin_once(tmp_path: Path, killed: str) -> None:
    """The step failed at once (Slurm requeued the job as it started) and Slurm's SIGTERM reaches the shell and its
    scontrol in flight during the final Restarts check. On the query: the TERM trap (run inside the query) clears the
    pin, and the check must not send the update a second time. On the update: the shell had read Restarts just
    before the signal; the killed update must be sent again, else the pin stays (the trap takes the job for handled)
    and the next attempt waits for the lost node."""
    failing = tmp_path / "fail.sh"
    failing.write_text("#!/bin/bash\nexit 1\n")
    failing.chmod(0o755)
    job = render(JobSpec(script=str(failing), nodes=2, gpus_per_node=1, launcher="srun"),
                 facts(live_nodes=live(set())), str(tmp_path / "run"))
    flag = "KILL_FIRST_SHOW" if killed == "query" else "KILL_FIRST_UPDATE"
    proc = _run_batch(tmp_path, job, {"PENDING": "1", "KILL_GROUP": "1", flag: str(tmp_path / "killed")})
    assert _ended(proc) == 1
    assert (tmp_path / "killed").exists()
    log = (tmp_path / "run" / "logs" / "77.r0.log").read_text()
    updates = (tmp_path / "scontrol.log").read_text().count("scontrol update JobId=77 ReqNodeList=")
    assert "SIGTERM received" in log and "requeued by Slurm (SIGTERM)" in log, log
    assert log.count("cleared the node pin") == 1 and "could not clear" not in log, log
    assert updates == (1 if killed == "query" else 2)


def test_the_term_traps_own_query_does_not_answer_for_the_query_it_interrupted(tmp_path: Path) -> None:
    """After SIGUSR2 the step has ended and the shell asks JobState; Slurm's SIGTERM kills that query, the TERM trap
    asks Restarts (0: not requeued), and the JobState query asked again fails. The shell must read no state, not the
    trap's Restarts value as the state (it read "the job is ending (0)"; the same clobber of PreemptTime reads as a
    preemption Slurm requeues by itself, and the shell would not requeue the job)."""
    hold = tmp_path / "hold.sh"
    hold.write_text(HOLD.replace("touch", "trap 'exit 0' USR2; touch"))
    hold.chmod(0o755)
    job = render(JobSpec(script=str(hold), nodes=2, gpus_per_node=1, launcher="srun"),
                 facts(live_nodes=live(set())), str(tmp_path / "run"))
    # queries: Restarts after the step, JobState (killed), the trap's Restarts, JobState again (fails)
    extra = {"READY": str(tmp_path / "ready"), "KILL_GROUP": "1", "SHOW_PLAN": "ok,kill,ok,fail"}
    proc = _run_batch(tmp_path, job, extra, ready=tmp_path / "ready", send=signal.SIGUSR2)
    assert _ended(proc) == 0
    log = (tmp_path / "run" / "logs" / "77.r0.log").read_text()
    assert "SIGUSR2 received" in log and "SIGTERM received; the step was already asked" in log, log
    assert "the job is ending (state unknown) after SIGTERM: not requeued" in log, log


@pytest.mark.parametrize("pending", [True, False])
def test_the_steps_exit_status_survives_a_slow_query_in_the_term_trap(tmp_path: Path, pending: bool) -> None:
    """The step checkpoints and exits 0 while the TERM trap still waits for slurmctld's answer (a busy controller):
    the trap's own commands reap it, and the interrupted `wait` returned 143. The batch script exits with the step's
    status (0) and records it, not the signal's: an ending job read "exit 143, the checkpoint may be incomplete"."""
    hold = tmp_path / "hold.sh"
    hold.write_text(HOLD.replace("touch", "trap 'exit 0' USR2; touch"))
    hold.chmod(0o755)
    job = render(JobSpec(script=str(hold), nodes=2, gpus_per_node=1, launcher="srun"),
                 facts(live_nodes=live(set())), str(tmp_path / "run"))
    extra = {"READY": str(tmp_path / "ready"), "SHOW_DELAY": "2", **({"PENDING": "1"} if pending else {})}
    proc = _run_batch(tmp_path, job, extra, ready=tmp_path / "ready", send=signal.SIGTERM)
    try:
        rc = proc.wait(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    log = (tmp_path / "run" / "logs" / "77.r0.log").read_text()
    assert rc == 0, log
    assert (tmp_path / "run" / "attempts" / "77.r0.exit").read_text().strip() == "0"
    assert "step exited with 0" in log and "may be incomplete" not in log, log


def test_the_pin_goes_at_sigterm_not_only_when_the_step_has_ended(tmp_path: Path) -> None:
    """Slurm requeued the job and its step does not end (it ignores the checkpoint request): slurmd SIGKILLs the
    batch shell KillWait seconds after SIGTERM, so the shell clears the pin when SIGTERM arrives, not after the step."""
    hold = tmp_path / "hold.sh"
    hold.write_text(HOLD.replace("touch", "trap '' USR2 TERM; touch"))
    hold.chmod(0o755)
    job = render(JobSpec(script=str(hold), nodes=2, gpus_per_node=1, launcher="srun"),
                 facts(live_nodes=live(set())), str(tmp_path / "run"))
    proc = _run_batch(tmp_path, job, {"READY": str(tmp_path / "ready"), "PENDING": "1"}, ready=tmp_path / "ready",
                      send=signal.SIGTERM)
    calls = tmp_path / "scontrol.log"
    try:
        end = time.monotonic() + 20
        while "ReqNodeList=" not in calls.read_text() and time.monotonic() < end:
            time.sleep(0.05)
        assert proc.poll() is None  # the step still runs, and with it the shell: Slurm's SIGKILL would come now
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    assert "scontrol update JobId=77 ReqNodeList=" in calls.read_text()
    log = (tmp_path / "run" / "logs" / "77.r0.log").read_text()
    assert "cleared the node pin" in log and "step exited" not in log, log


@pytest.mark.parametrize("pending", [True, False])
def test_sigterm_to_a_pinned_job_clears_the_pin_only_when_slurm_requeued_it(tmp_path: Path, pending: bool) -> None:
    """SIGTERM: Slurm requeued the job (Restarts grew: scontrol requeue, preemption) or is ending it (scancel, time
    limit: COMPLETING). The step is asked to checkpoint (SIGUSR2), the shell waits for it and then clears the pin only
    in the first case, without SLURM_JOBID (no resize lookup of a pending job); never its own requeue."""
    hold = tmp_path / "hold.sh"
    hold.write_text(HOLD.replace("touch", "trap 'echo task: checkpoint; exit 0' USR2; touch"))
    hold.chmod(0o755)
    job = render(JobSpec(script=str(hold), nodes=2, gpus_per_node=1, launcher="srun"),
                 facts(live_nodes=live(set())), str(tmp_path / "run"))
    assert job.topology.pinned
    extra = {"READY": str(tmp_path / "ready"), "SLURM_JOBID": "77", **({"PENDING": "1"} if pending else {})}
    proc = _run_batch(tmp_path, job, extra, ready=tmp_path / "ready", send=signal.SIGTERM)
    try:
        rc = proc.wait(timeout=30)
        log_ = tmp_path / "run" / "logs" / "77.r0.log"
        assert rc == 0, (log_.read_text() if log_.exists() else "no log", proc.stdout.read() if proc.stdout else "")
    finally:  # the task (hold.sh under the stub srun) outlives the batch shell: it must not outlive the test
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    calls = (tmp_path / "scontrol.log").read_text()
    log = (tmp_path / "run" / "logs" / "77.r0.log").read_text()
    reason = (tmp_path / "run" / "attempts" / "77.r0.reason").read_text()
    assert "task: checkpoint" in log and "SIGTERM received" in log
    assert "scontrol requeue" not in calls
    if pending:
        assert "scontrol update JobId=77 ReqNodeList=" in calls and "SLURM_JOBID=unset" in calls
        assert "cleared the node pin" in log and reason.startswith("requeued by Slurm (SIGTERM)")
    else:  # a normal end or a cancel: no update slurmctld would refuse ("Invalid node name specified")
        assert "update" not in calls
        assert "not requeued" in reason and "COMPLETING" in reason
    free = render(JobSpec(script=str(hold), nodes=2, gpus_per_node=1, launcher="srun", array="0-1"),
                  facts(live_nodes=live(set())), "/r").request.script
    assert "_gpusub_unpin" not in free


def test_sigterm_while_the_job_still_runs_is_a_grace_notice_and_the_shell_requeues(tmp_path: Path) -> None:
    """SIGTERM with the job still RUNNING: a QOS GraceTime notice without send_user_signal (preempt.c
    _job_check_grace_internal sends SIGCONT+SIGTERM and only requeues at the grace's end; 22.05 does not requeue a
    job that ends inside it). The checkpoint is taken and the shell requeues the job itself."""
    hold = tmp_path / "hold.sh"
    hold.write_text(HOLD.replace("touch", "trap 'echo task: checkpoint; exit 0' USR2; touch"))
    hold.chmod(0o755)
    job = render(JobSpec(script=str(hold), nodes=1, gpus_per_node=1, launcher="srun"), facts(), str(tmp_path / "run"))
    extra = {"READY": str(tmp_path / "ready"), "JOBSTATE": "RUNNING"}
    proc = _run_batch(tmp_path, job, extra, ready=tmp_path / "ready", send=signal.SIGTERM)
    assert _ended(proc) == 0
    assert "scontrol requeue 77" in (tmp_path / "scontrol.log").read_text()
    assert "preempted (SIGTERM): step exit 0, requeued" in (tmp_path / "run" / "attempts" / "77.r0.reason").read_text()


# --- 6: the hot path: a cached ClusterFacts, one git call --------------------------------------------------------

def test_facts_cache_hit_renders_the_same_job_without_the_inventory_model(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from slurmkit.jobs import facts as factsmod

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    inv = tmp_path / "slurmkit.yaml"
    shutil.copy(LAB_INV, inv)
    miss = factsmod.load_inventory_facts(None, str(inv))
    assert miss is not None and miss.topo_model is not None

    def boom(*a: object, **k: object) -> None:
        raise AssertionError("the inventory was read again")

    monkeypatch.setattr(factsmod, "from_cluster", boom)
    hit = factsmod.load_inventory_facts(None, str(inv))
    assert hit is not None and hit.topo_model is None and hit.topo_placement is not None
    spec = JobSpec(script="/t.py", nodes=3, gpus_per_node=8)
    for kw in ({}, {"live_nodes": live({"node1"})}):
        from dataclasses import replace

        a, b = render(spec, replace(miss, **kw), "/r"), render(spec, replace(hit, **kw), "/r")  # type: ignore[arg-type]
        assert a.request.script == b.request.script and a.plan_line() == b.plan_line()
    # an edited inventory is read again
    inv.write_text(inv.read_text().replace("memory_mb: 32000", "memory_mb: 64000"))
    with pytest.raises(AssertionError, match="read again"):
        factsmod.load_inventory_facts(None, str(inv))


def test_git_state_is_one_git_call_and_none_outside_a_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from slurmkit.backend import run as runmod
    from slurmkit.jobs.rundir import git_state

    if shutil.which("git") is None:
        pytest.fail("git is needed (tests/run.sh installs it)")
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    train = repo / "src" / "train.py"
    train.write_text("print(1)\n")
    g = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
         "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    for argv in (["init", "-q"], ["add", "."], ["commit", "-qm", "x"]):
        subprocess.run(["git", "-C", str(repo), *argv], env=g, check=True)
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    calls: list[list[str]] = []
    real = runmod.run

    def counted(argv, *a, **k):  # type: ignore[no-untyped-def]
        calls.append(list(argv))
        return real(argv, *a, **k)

    monkeypatch.setattr(runmod, "run", counted)
    assert git_state(str(train)) == {"repo": str(repo), "sha": head, "dirty": False}
    train.write_text("print(2)\n")
    assert git_state(str(train)) == {"repo": str(repo), "sha": head, "dirty": True}
    assert len(calls) == 2  # one per state
    outside = tmp_path / "plain" / "t.py"
    outside.parent.mkdir()
    outside.write_text("")
    monkeypatch.delenv("GIT_DIR", raising=False)
    monkeypatch.delenv("GIT_WORK_TREE", raising=False)
    assert git_state(str(outside)) == {} and len(calls) == 2  # no git process at all


# --- end to end on the lab: job ids repeat across clusters, the run-dir index must not win over slurmctld ---------

def test_a_live_jobs_run_dir_comes_from_slurmctld_not_a_stale_index(env: dict[str, str], tmp_path: Path,  # noqa: F811
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace as dc_replace

    from slurmkit.jobs.monitor import find_run_dir, statuses

    fake = FakeBackend(states=("RUNNING",))
    real_jobs = fake.jobs
    ours = tmp_path / "ours"

    def jobs(job_ids=None):  # type: ignore[no-untyped-def]
        return [dc_replace(j, stdout=f"{ours}/logs/slurm-42.out") for j in real_jobs(job_ids)]

    monkeypatch.setattr(fake, "jobs", jobs)
    idx = Path(env["SLURMKIT_STATE_DIR"]) / "jobs" / CLUSTER_KEY
    idx.mkdir(parents=True)
    (idx / "42").write_text(str(tmp_path / "another-clusters-job-42"))  # same id: a re-created cluster's older job
    assert statuses(["42"], fake, env)[0].run_dir == str(ours)
    assert find_run_dir("42", fake, env) == str(ours)
    assert find_run_dir("42", None, env) == str(tmp_path / "another-clusters-job-42")  # forgotten: the index


@pytest.mark.parametrize("user_pin,restarts,req,noted", [
    (None, 1, "node[1-2]", True),          # gpusub's pin kept across a requeue: named, with the command that frees it
    ("node[1-2]", 1, "node[1-2]", False),  # the user's own -w: theirs
    (None, 0, "node[1-2]", False),         # never started yet: the pin is the plan, not a leftover
    (None, 1, "(null)", False),            # cleared by the batch shell
])
def test_status_names_a_pin_no_batch_shell_cleared(tmp_path: Path, user_pin: str | None, restarts: int, req: str,
                                                   noted: bool) -> None:
    """The batch host itself failed (no shell left to clear the pin; Slurm keeps ReqNodeList across a requeue): the
    job waits for the lost node. `gpusub status` says so and gives the one command that lets Slurm place it."""
    import json

    from slurmkit.backend.parse import JobInfo
    from slurmkit.jobs.monitor import _Index, _live

    rd = tmp_path / "run"
    rd.mkdir()
    (rd / "submit.json").write_text(json.dumps({"spec": {"nodes": 2, "nodelist": user_pin}}))
    (rd / "script.sh").write_text("#!/bin/bash\n#SBATCH --nodelist=node[1-2]\n#\necho\n")
    j = JobInfo("4", "PENDING", reason="ReqNodeNotAvail", restarts=restarts, stdout=str(rd / "logs" / "slurm-4.out"),
                raw={"ReqNodeList": req})
    st = _live("4", j, _Index({}, None))
    assert ("scontrol update JobId=4 ReqNodeList=" in st.note) == noted, st.note
    if noted:
        assert "pinned to node[1-2]" in st.line()


def test_only_the_records_line_is_read_not_a_warning_before_it(tmp_path: Path) -> None:
    """scontrol's stderr is captured with the record: a warning holding `Restarts=9` must not read as a requeue by
    Slurm, and the blank line after it must not stop the shell (bash before 4.4: an empty array is unbound under
    set -u). Only the record's line (JobId= first) is read: the job is taken for an ending one, pin kept."""
    hold = tmp_path / "hold.sh"
    hold.write_text(HOLD.replace("touch", "trap 'echo task: checkpoint; exit 0' USR2; touch"))
    hold.chmod(0o755)
    job = render(JobSpec(script=str(hold), nodes=2, gpus_per_node=1, launcher="srun"),
                 facts(live_nodes=live(set())), str(tmp_path / "run"))
    extra = {"READY": str(tmp_path / "ready"), "SHOW_WARN": "scontrol: warning: Restarts=9 JobState=PENDING"}
    proc = _run_batch(tmp_path, job, extra, ready=tmp_path / "ready", send=signal.SIGTERM)
    assert _ended(proc) == 0
    log = (tmp_path / "run" / "logs" / "77.r0.log").read_text()
    assert "the job is ending (COMPLETING) after SIGTERM: not requeued" in log, log
    assert "update" not in (tmp_path / "scontrol.log").read_text()


class _RequeuedPinned:
    """Scripted polls of a job whose batch host was lost: pending on gpusub's own pin after a requeue, then (once
    unpinned) running elsewhere and completed. Records every scontrol update."""

    env = None

    def __init__(self, rd: Path, polls: list[tuple[str, int, str]]):
        self.rd, self.polls, self.updates = rd, list(polls), []  # type: ignore[var-annotated]

    def jobs(self, job_ids=None):  # type: ignore[no-untyped-def]
        from slurmkit.backend.parse import JobInfo

        state, restarts, req = self.polls.pop(0) if len(self.polls) > 1 else self.polls[0]
        return [JobInfo("4", state, restarts=restarts, exit_code="0:0", stdout=str(self.rd / "logs" / "slurm-4.out"),
                        raw={"ReqNodeList": req})]

    def update_job(self, job_id: str, **fields: str) -> None:
        self.updates.append((job_id, fields))


@pytest.mark.parametrize("user_pin", [None, "node[1-2]"])
def test_follow_and_wait_clear_a_pin_no_batch_shell_cleared(tmp_path: Path, user_pin: str | None,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    """The batch host failed: Slurm requeued the job and kept gpusub's submit-time --nodelist (job_mgr.c
    _job_requeue_op), so it would wait for the lost node forever. `gpusub --follow` and Job.wait() clear it once per
    attempt, as the batch shell would have; the user's own -w is theirs and stays."""
    import io

    from slurmkit.jobs.api import Job
    from slurmkit.jobs.monitor import follow

    rd = tmp_path / "run"
    (rd / "logs").mkdir(parents=True)
    (rd / "submit.json").write_text(json.dumps({"spec": {"nodes": 2, "nodelist": user_pin}}))
    (rd / "script.sh").write_text("#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --nodelist=node[1-2]\n#\necho\n")
    polls = [("RUNNING", 0, "node[1-2]"), ("PENDING", 1, "node[1-2]"), ("PENDING", 1, "node[1-2]"),
             ("RUNNING", 1, "(null)"), ("COMPLETED", 1, "(null)")]
    fake = _RequeuedPinned(rd, polls)
    out = io.StringIO()
    st = follow("4", fake, out, run_dir=str(rd), environ={}, sleep=lambda s: None)  # type: ignore[arg-type]
    assert st.state == "COMPLETED"
    if user_pin:
        assert fake.updates == [] and "pin cleared" not in out.getvalue()
    else:
        assert fake.updates == [("4", {"ReqNodeList": ""})], fake.updates  # once, though seen twice
        assert "requeued still pinned to node[1-2]" in out.getvalue() and "pin cleared" in out.getvalue()

    fake = _RequeuedPinned(rd, polls)
    job = Job("4", str(rd), fake, environ={})  # type: ignore[arg-type]
    with caplog.at_level("WARNING", logger="slurmkit.jobs"):
        assert job.wait(poll_cap=0.01).state == "COMPLETED"
    assert fake.updates == ([] if user_pin else [("4", {"ReqNodeList": ""})])
    assert ("pin cleared" in caplog.text) == (not user_pin), caplog.text  # a warning of the library's logger


@pytest.mark.parametrize("script_pin, req", [
    (None, "node7"),  # gpusub pinned nothing (an array, a job that could not start at once): the pin is a person's
    ("node[1-2]", "node[5-6]"),  # gpusub's pin, then re-pinned elsewhere by hand (scontrol update) after the requeue
    ("node[1-2]", "same"),  # the shell cleared gpusub's pin (attempts/4.r0.unpinned), a person set the same one again
])
def test_a_pin_gpusub_did_not_set_is_left_alone(tmp_path: Path, script_pin: str | None, req: str) -> None:
    """Only gpusub's own submit-time pin (the script's #SBATCH --nodelist, what the batch shell clears) is cleared
    by a follower: a requeued job that a user or admin pinned by hand with `scontrol update ReqNodeList=` keeps it,
    and `gpusub status` does not call it a pin no batch shell could clear."""
    import io

    from slurmkit.jobs.api import Job
    from slurmkit.jobs.monitor import follow, statuses

    rd = tmp_path / "run"
    (rd / "logs").mkdir(parents=True)
    (rd / "submit.json").write_text(json.dumps({"spec": {"nodes": 2, "nodelist": None}}))
    pin_line = f"#SBATCH --nodelist={script_pin}\n" if script_pin else ""
    (rd / "script.sh").write_text(f"#!/bin/bash\n#SBATCH --nodes=2\n{pin_line}#\necho\n")
    restarts = 1
    if req == "same":  # a batch shell cleared gpusub's pin at the first requeue; then a person pinned the same nodes
        req, restarts = "node[1-2]", 2  # again by hand, and that attempt's batch host was lost too
        (rd / "attempts").mkdir()
        (rd / "attempts" / "4.r0.unpinned").touch()
    polls = [("RUNNING", 0, ""), ("PENDING", restarts, req), ("PENDING", restarts, req), ("RUNNING", restarts, req),
             ("COMPLETED", restarts, req)]
    fake = _RequeuedPinned(rd, polls)
    out = io.StringIO()
    assert follow("4", fake, out, run_dir=str(rd), environ={}, sleep=lambda s: None).state == "COMPLETED"  # type: ignore[arg-type]
    assert fake.updates == [] and "pinned" not in out.getvalue(), (fake.updates, out.getvalue())
    fake = _RequeuedPinned(rd, polls[1:2])
    st = statuses(["4"], fake, {})[0]  # type: ignore[arg-type]
    assert st.state == "PENDING" and st.kept_pin == "" and "pinned" not in st.note, st
    fake = _RequeuedPinned(rd, polls)
    assert Job("4", str(rd), fake, environ={}).wait(poll_cap=0.01).state == "COMPLETED"  # type: ignore[arg-type]
    assert fake.updates == []


def test_a_failed_unpin_is_tried_again_on_a_later_poll(tmp_path: Path) -> None:
    """A busy slurmctld that times out the follower's `scontrol update ReqNodeList=` once must not leave the job
    waiting for the lost nodes while `gpusub --follow` / Job.wait() go on watching: the clear is tried again on the
    next polls of the same attempt (three tries at most, each failure said with the command that frees it)."""
    import io

    from slurmkit.errors import SlurmTimeout
    from slurmkit.jobs.api import Job
    from slurmkit.jobs.monitor import follow

    class Busy(_RequeuedPinned):
        def __init__(self, rd: Path, polls: list[tuple[str, int, str]], fail: int):
            super().__init__(rd, polls)
            self.fail = fail

        def update_job(self, job_id: str, **fields: str) -> None:
            self.updates.append((job_id, fields))
            if len(self.updates) <= self.fail:
                raise SlurmTimeout(["scontrol", "update", f"JobId={job_id}", "ReqNodeList="], 20.0)
            self.polls = [p if p[0] != "PENDING" else ("PENDING", p[1], "(null)") for p in self.polls]

    rd = tmp_path / "run"
    (rd / "logs").mkdir(parents=True)
    (rd / "submit.json").write_text(json.dumps({"spec": {"nodes": 2, "nodelist": None}}))
    (rd / "script.sh").write_text("#!/bin/bash\n#SBATCH --nodelist=node[1-2]\n#\necho\n")
    polls = [("RUNNING", 0, "node[1-2]")] + [("PENDING", 1, "node[1-2]")] * 6 + [("COMPLETED", 1, "(null)")]
    fake = Busy(rd, polls, fail=1)
    out = io.StringIO()
    assert follow("4", fake, out, run_dir=str(rd), environ={}, sleep=lambda s: None).state == "COMPLETED"  # type: ignore[arg-type]
    assert len(fake.updates) == 2, (fake.updates, out.getvalue())
    assert "clearing the pin failed" in out.getvalue() and "pin cleared" in out.getvalue()
    fake = Busy(rd, polls, fail=99)  # never answers: three tries, then the user has the command
    out = io.StringIO()
    follow("4", fake, out, run_dir=str(rd), environ={}, sleep=lambda s: None)  # type: ignore[arg-type]
    assert len(fake.updates) == 3 and out.getvalue().count("clearing the pin failed") == 3, out.getvalue()
    fake = Busy(rd, polls, fail=1)
    assert Job("4", str(rd), fake, environ={}).wait(poll_cap=0.01).state == "COMPLETED"  # type: ignore[arg-type]
    assert len(fake.updates) == 2
