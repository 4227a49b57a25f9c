"""gpusub end to end on the real lab (8 nodes x 8 fake H100, leaves node[1-4] / node[5-8]).

Needs torch in the interpreter that runs the jobs: the test venv (``pip install torch==2.13.0`` gives the CPU
build here), or ``GPUSUB_TEST_PYTHON=/path/to/venv/bin/python`` pointing at one that has it. The jobs use
gloo on the CPU; the fake GPUs only make Slurm hand out GRES.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmkit.backend.cli import CLIBackend
from slurmkit.errors import SlurmkitError
from slurmkit.jobs import JobSpec, follow, submit_job
from slurmkit.jobs.monitor import statuses
from slurmkit.lab import Lab

pytestmark = [pytest.mark.lab, pytest.mark.releases]  # tests/run.sh: run on every release
ROOT = Path(__file__).resolve().parents[2]

DDP = """\
import json, os, socket, sys
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
with open(os.path.join(sys.argv[1], f"rank{rank}.json"), "w") as f:
    json.dump({"rank": rank, "world": world, "sum": t.item(), "host": socket.gethostname(),
               "local_rank": int(os.environ["LOCAL_RANK"]), "args": sys.argv[2:]}, f)
dist.destroy_process_group()
"""

# The checkpoint contract from the worker's side: SIGUSR2 (or $GPUSUB_PREEMPT_FILE) -> save and exit;
# a restart (GPUSUB_RESTART_COUNT > 0) resumes from the checkpoint.
CKPT = """\
import json, os, signal, sys, time
ck = os.path.join(os.environ["GPUSUB_CHECKPOINT_DIR"], "state.json")
step = json.load(open(ck))["step"] if os.path.exists(ck) else 0
start = step
restart = int(os.environ["GPUSUB_RESTART_COUNT"])
print(f"start restart={restart} from step={step}", flush=True)
stop = []
signal.signal(signal.SIGUSR2, lambda s, f: stop.append(s))
open(os.path.join(os.environ["GPUSUB_RUN_DIR"], f"running.r{restart}"), "w").close()
while True:
    if stop or os.path.exists(os.environ["GPUSUB_PREEMPT_FILE"]):
        with open(ck + ".tmp", "w") as f:
            json.dump({"step": step}, f)
        os.replace(ck + ".tmp", ck)
        print(f"checkpointed at step {step} signal={bool(stop)}", flush=True)
        sys.exit(0)
    if restart > 0 and step >= start + 5:
        with open(os.path.join(os.environ["GPUSUB_RUN_DIR"], "result.json"), "w") as f:
            json.dump({"resumed_from": start, "restart": restart, "final": step}, f)
        print(f"done at step {step}", flush=True)
        break
    step += 1
    time.sleep(0.1)
"""

SLEEPER = "#!/bin/bash\necho \"sleeper on $(hostname)\"\nsleep 300\n"


def _python() -> str:
    return os.environ.get("GPUSUB_TEST_PYTHON") or sys.executable


@pytest.fixture(scope="module")
def env(lab, tmp_path_factory) -> dict[str, str]:  # type: ignore[no-untyped-def]
    py = _python()
    probe = subprocess.run([py, "-c", "import torch, torch.distributed as d; assert d.is_gloo_available()"],
                           capture_output=True, text=True)
    assert probe.returncode == 0, (
        f"{py} has no torch with gloo: `pip install torch==2.13.0` in the test venv or set GPUSUB_TEST_PYTHON "
        f"({probe.stderr.strip().splitlines()[-1:] if probe.stderr else ''})"
    )
    state = tmp_path_factory.mktemp("gpusub-state")
    return {
        **lab.env,
        "PATH": f"{Path(py).parent}:{lab.env.get('PATH') or os.environ.get('PATH', '/usr/bin:/bin')}",  # lab.env's PATH: the lab's Slurm release
        "SLURMKIT_INVENTORY": str(lab.etc / "slurmkit.yaml"),
        "SLURMKIT_STATE_DIR": str(state),
        "GPUSUB_RUN_ROOT": str(state / "runs"),
        "PYTHONPATH": str(ROOT),
    }


@pytest.fixture()
def backend(env: dict[str, str]) -> CLIBackend:
    # the job inherits the submitting environment (sbatch --export=ALL): PATH reaches torchrun
    return CLIBackend(env=env)


def _gpusub(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slurmkit.cli.gpusub", *args], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=timeout)


def _wait_for(pred, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_torchrun_ddp_4_nodes_x_2_processes(env: dict[str, str], backend: CLIBackend, tmp_path: Path) -> None:
    script = tmp_path / "ddp.py"
    script.write_text(DDP)
    out = tmp_path / "out"
    out.mkdir()
    spec = JobSpec(script=str(script), args=(str(out), "it's a $(test)"), nodes=4, gpus_per_node=2,
                   exclusive=True, time="10:00")
    job_id, run_dir = submit_job(spec, backend, environ=env)
    log = io.StringIO()
    st = follow(job_id, backend, log, environ=env, cap=1.0)
    assert st.state == "COMPLETED", log.getvalue()[-3000:]
    ranks = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]
    assert len(ranks) == 8, log.getvalue()[-3000:]
    assert {r["world"] for r in ranks} == {8}
    assert all(r["sum"] == 36.0 for r in ranks)  # sum of rank+1 over 8 ranks
    assert sorted(r["rank"] for r in ranks) == list(range(8))
    assert len({r["host"] for r in ranks}) == 4
    assert all(r["args"] == ["it's a $(test)"] for r in ranks)
    # the exclusive 4-node job fits one leaf of idle nodes: the placement engine pinned that leaf
    nodes = (Path(run_dir) / "attempts" / f"{job_id}.r0.nodes").read_text().strip()
    assert nodes in ("node[1-4]", "node[5-8]"), nodes
    meta = json.loads((Path(run_dir) / "submit.json").read_text())
    assert meta["job_id"] == job_id
    assert f"#SBATCH --nodelist={nodes}" in (Path(run_dir) / "script.sh").read_text()
    # CPUs and memory in proportion to the GPUs (lab: 8 cores, 31000 MB usable, 8 GPUs per node), not 1 CPU per node
    rec = backend.job(job_id).raw
    assert rec["CPUs/Task"] == "2", rec
    if "MinMemoryNode" in rec:  # 22.05
        assert rec["MinMemoryNode"] == "7750M", rec
    else:  # 24.11 shows the same request per GPU (MinMemoryTRES=3875M, MemPerTres=gpu:3875; measured): the total
        assert "mem=31000M" in rec["ReqTRES"], rec  # 4 nodes x 7750M


def test_usr2_checkpoint_requeue_resume(env: dict[str, str], backend: CLIBackend, tmp_path: Path) -> None:
    script = tmp_path / "ckpt.py"
    script.write_text(CKPT)
    run_dir = tmp_path / "run"
    spec = JobSpec(script=str(script), nodes=1, gpus_per_node=1, max_restarts=1, run_dir=str(run_dir), time="10:00")
    job_id, _ = submit_job(spec, backend, environ=env)
    _wait_for(lambda: (run_dir / "running.r0").exists(), 120, "the first attempt's worker")
    time.sleep(0.5)
    backend.cancel(job_id, signal="USR2", batch=True)  # what --signal=B:USR2@GRACE does before the time limit
    _wait_for(lambda: backend.job(job_id).restarts >= 1, 60, "the requeue")
    # Slurm holds a requeued batch job for AuthInfo's cred_expire (the lab sets 10 s); releasing it earlier with
    # StartTime=now races the node's revoked credential ("Killing non-startable batch job")
    log = io.StringIO()
    st = follow(job_id, backend, log, environ=env, cap=1.0)
    text = log.getvalue()
    assert st.state == "COMPLETED", text[-3000:]
    r0 = (run_dir / "logs" / f"{job_id}.r0.log").read_text()
    r1 = (run_dir / "logs" / f"{job_id}.r1.log").read_text()
    assert "SIGUSR2 received" in r0 and "signal=True" in r0 and "requeueing (restart 1 of at most 1)" in r0
    saved = json.loads((run_dir / "checkpoints" / "state.json").read_text())["step"]
    assert saved > 0
    result = json.loads((run_dir / "result.json").read_text())
    assert result == {"resumed_from": saved, "restart": 1, "final": saved + 5}
    assert f"start restart=1 from step={saved}" in r1
    assert (run_dir / "preempt" / f"{job_id}.r0").exists()
    assert backend.job(job_id).restarts == 1


def _cluster_key(env: dict[str, str]) -> str:
    """The index key of the lab as the running slurmctld names it (``scontrol show config``), not as gpusub reads it
    from the lab's slurm.conf: the two must agree."""
    from slurmkit.jobs.rundir import _key, show_config_identity

    cfg = subprocess.run(["scontrol", "show", "config"], env={**os.environ, **env}, capture_output=True, text=True,
                         timeout=30, check=True)
    key = _key(*show_config_identity(cfg.stdout))
    assert key and key.startswith("lab@"), cfg.stdout[:200]
    return key


def test_status_logs_cancel_cli(env: dict[str, str], backend: CLIBackend, tmp_path: Path) -> None:
    script = tmp_path / "sleeper.sh"
    script.write_text(SLEEPER)
    script.chmod(0o755)
    res = _gpusub(env, str(script), "-N", "2", "--gpus-per-node", "1", "--launcher", "srun", "--time", "5:00")
    assert res.returncode == 0, res.stderr
    job_id = res.stdout.split("submitted job ", 1)[1].split()[0]
    assert "plan: 2 node(s) x 1 GPU(s)" in res.stdout and f"logs/{job_id}.r0.log" in res.stdout
    _wait_for(lambda: backend.job(job_id).state == "RUNNING", 30, "RUNNING")
    st = _gpusub(env, "status", job_id)
    assert st.returncode == 0 and f"{job_id} RUNNING" in st.stdout and "[slurmctld]" in st.stdout, st.stdout
    run_dir = st.stdout.split("run_dir=", 1)[1].strip()
    # the index entry is under the cluster the running slurmctld names (issue 25)
    assert (Path(env["SLURMKIT_STATE_DIR"]) / "jobs" / _cluster_key(env) / job_id).read_text().strip() == run_dir
    _wait_for(lambda: "sleeper on" in (Path(run_dir) / "logs" / f"{job_id}.r0.log").read_text(), 30, "output")
    follower = subprocess.Popen([sys.executable, "-m", "slurmkit.cli.gpusub", "logs", "-f", job_id],
                                env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    cancel = _gpusub(env, "cancel", job_id)
    assert cancel.returncode == 0 and f"cancelled job {job_id}" in cancel.stdout
    out, err = follower.communicate(timeout=60)
    # the job did not complete: the follower ends with the job's own code (ExitCode=0:15 -> 143), never 0
    from slurmkit.jobs.monitor import JobStatus, exit_status

    rec = backend.job(job_id)
    assert follower.returncode == exit_status(JobStatus(job_id, rec.state, "slurmctld", exit_code=rec.exit_code)), err
    assert follower.returncode != 0, err
    assert "sleeper on node" in out and f"job {job_id} CANCELLED" in err
    st2 = _gpusub(env, "status", job_id)
    assert f"{job_id} CANCELLED" in st2.stdout


def test_status_of_forgotten_job_uses_run_dir_without_sacct(env: dict[str, str], tmp_path: Path) -> None:
    """No accounting in this lab: a job slurmctld forgot is answered from the run dir record of THIS cluster's
    index; the same id under another cluster (another lab is also called `lab`: another controller) or in an index
    entry from before the per-cluster keys is UNKNOWN, never that other job's COMPLETED (issue 25)."""
    jobs = Path(env["SLURMKIT_STATE_DIR"]) / "jobs"
    entries = {jobs / _cluster_key(env) / "999999": tmp_path / "ours",
               jobs / "lab@elsewhere:6817" / "999997": tmp_path / "other-lab",
               jobs / "999996": tmp_path / "old-index"}
    for entry, rd in entries.items():
        (rd / "attempts").mkdir(parents=True)
        (rd / "logs").mkdir()
        (rd / "attempts" / f"{entry.name}.r2.exit").write_text("0\n")
        (rd / "logs" / f"{entry.name}.r2.log").write_text(f"log of {rd.name}\n")
        entry.parent.mkdir(parents=True, exist_ok=True)
        entry.write_text(f"{rd}\n")
    st = _gpusub(env, "status", "999999", "999998", "999997", "999996")
    lines = st.stdout.splitlines()
    assert lines[0].startswith("999999 COMPLETED") and "[run dir]" in lines[0] and "restarts=2" in lines[0]
    assert [ln.split()[:2] for ln in lines[1:]] == [["999998", "UNKNOWN"], ["999997", "UNKNOWN"],
                                                    ["999996", "UNKNOWN"]], st.stdout
    assert "other-lab" not in st.stdout and "is from an older gpusub" in lines[3]
    assert st.returncode == 1
    assert _gpusub(env, "logs", "999999").stdout == "log of ours\n"
    other = _gpusub(env, "logs", "999997")
    assert other.returncode == 1 and other.stdout == "" and other.stderr.count("\n") == 1, other.stderr
    assert other.stderr.startswith("gpusub: error: job 999997: not known to slurmctld")


def test_slurmctld_down_one_line_error_no_duplicate(lab, env: dict[str, str], backend: CLIBackend,  # type: ignore[no-untyped-def]
                                                    tmp_path: Path) -> None:
    script = tmp_path / "t.sh"
    script.write_text("#!/bin/bash\ntrue\n")
    script.chmod(0o755)
    before = {j.job_id for j in backend.jobs()}
    pid = lab.running_pids()["slurmctld"]
    os.kill(pid, 19)  # SIGSTOP: the controller stops answering (as when it is down or hung)
    try:
        res = _gpusub({**env}, str(script), "-N", "1", "--gpus-per-node", "1", "--launcher", "srun", timeout=120)
    finally:
        os.kill(pid, 18)  # SIGCONT
    assert res.returncode != 0
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gpusub: error:"), res.stderr
    assert "Traceback" not in res.stderr
    _wait_for(lambda: backend.ping(), 30, "slurmctld back")
    after = {j.job_id for j in backend.jobs()}
    assert after == before, f"a job was submitted while the controller was down: {after - before}"
    rows = statuses(sorted(before)[:1], backend, env) if before else []
    assert all(r.source == "slurmctld" for r in rows)


# --- preemption through torchrun: the checkpoint gets the promised grace, SIGUSR2 once per rank ----------------------

# A DDP (gloo) trainer: every rank notes SIGUSR2, the ranks agree on it with an all-reduce, rank 0 saves a checkpoint
# that takes SAVE_S seconds (longer than torchrun's default 30 s shutdown), all ranks record how many SIGUSR2 they got.
DDP_CKPT = """\
import json, os, signal, sys, time
import torch
import torch.distributed as dist
got = []
signal.signal(signal.SIGUSR2, lambda s, f: got.append(time.time()))
dist.init_process_group("gloo")
rank = dist.get_rank()
run = os.environ["GPUSUB_RUN_DIR"]
restart = int(os.environ["GPUSUB_RESTART_COUNT"])
ck = os.path.join(os.environ["GPUSUB_CHECKPOINT_DIR"], "state.json")
step = json.load(open(ck))["step"] if os.path.exists(ck) else 0
start = step
save_s = float(sys.argv[1]) if restart == 0 else 0.5
open(os.path.join(run, f"running.r{restart}.rank{rank}"), "w").close()
while True:
    flag = torch.tensor([1.0 if got else 0.0])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    if flag.item():
        if rank == 0:
            time.sleep(save_s)  # a slow checkpoint
            with open(ck + ".tmp", "w") as f:
                json.dump({"step": step}, f)
            os.replace(ck + ".tmp", ck)
        dist.barrier()
        with open(os.path.join(run, f"sig.r{restart}.rank{rank}.json"), "w") as f:
            json.dump({"signals": len(got), "step": step, "host": os.uname().nodename}, f)
        print(f"rank {rank}: checkpointed at step {step}", flush=True)
        dist.destroy_process_group()
        sys.exit(0)
    if restart > 0 and step >= start + 5:
        if rank == 0:
            with open(os.path.join(run, "result.json"), "w") as f:
                json.dump({"resumed_from": start, "final": step}, f)
        dist.destroy_process_group()
        break
    step += 1
    time.sleep(0.1)
"""


def _running(run_dir: Path, restart: int, ranks: int) -> bool:
    return len(list(run_dir.glob(f"running.r{restart}.rank*"))) == ranks


def test_ddp_checkpoint_longer_than_30s_gets_the_grace_and_resumes_elsewhere(
        env: dict[str, str], backend: CLIBackend, tmp_path: Path) -> None:
    """torchrun job, 2 nodes x 2 ranks, pinned (single submission, idle nodes): a 45 s save under --signal-grace 120
    completes (torchrun's own shutdown would SIGKILL at 30 s), each rank sees SIGUSR2 exactly once, the job requeues,
    the pin is cleared so the next attempt avoids a node drained meanwhile, and training resumes from the save."""
    script = tmp_path / "ddp_ckpt.py"
    script.write_text(DDP_CKPT)
    run_dir = tmp_path / "run"
    spec = JobSpec(script=str(script), args=("45",), nodes=2, gpus_per_node=2, exclusive=True, max_restarts=1,
                   signal_grace=120, run_dir=str(run_dir), time="10:00")
    job_id, _ = submit_job(spec, backend, environ=env)
    text = (run_dir / "script.sh").read_text()
    assert "#SBATCH --nodelist=" in text and "ReqNodeList=" in text  # pinned, and unpinned at requeue
    _wait_for(lambda: _running(run_dir, 0, 4), 90, "4 ranks of the first attempt")
    first = set(backend.job(job_id).nodes)
    drained = sorted(first)[0]
    backend.drain(drained, "gpusub-test: drained while the job checkpoints")
    try:
        backend.cancel(job_id, signal="USR2", batch=True)  # what --signal=B:USR2@GRACE does before the time limit
        _wait_for(lambda: backend.job(job_id).restarts >= 1, 150, "the requeue")
        _wait_for(lambda: backend.job(job_id).finished, 180, "the second attempt (pin cleared, drained node avoided)")
        log = io.StringIO()
        st = follow(job_id, backend, log, environ=env, cap=1.0)
        r0 = (run_dir / "logs" / f"{job_id}.r0.log").read_text()
        assert st.state == "COMPLETED", log.getvalue()[-3000:]
    finally:
        backend.resume(drained)
    sigs = [json.loads(p.read_text()) for p in sorted(run_dir.glob("sig.r0.rank*.json"))]
    assert len(sigs) == 4, r0[-3000:]
    assert [s["signals"] for s in sigs] == [1, 1, 1, 1], sigs  # once per rank (the agent forwarded a second one)
    assert "SignalException" not in r0 and "Traceback" not in r0, r0[-3000:]
    assert (run_dir / "attempts" / f"{job_id}.r0.exit").read_text().strip() == "0"
    assert "requeued" in (run_dir / "attempts" / f"{job_id}.r0.reason").read_text()
    saved = json.loads((run_dir / "checkpoints" / "state.json").read_text())["step"]
    result = json.loads((run_dir / "result.json").read_text())
    assert result == {"resumed_from": saved, "final": saved + 5}
    second = set((run_dir / "attempts" / f"{job_id}.r1.nodes").read_text().split())
    from slurmkit import hostlist

    second_nodes = set(hostlist.expand(next(iter(second))))
    assert drained not in second_nodes, (drained, second_nodes)


# --- placement that stays valid: arrays and dependencies are not pinned --------------------------------------------

HOLD = "#!/bin/bash\necho \"hold on $(hostname)\"\nwhile [ ! -e \"$GATE\" ]; do sleep 0.2; done\n"


def _hold_script(tmp_path: Path) -> Path:
    p = tmp_path / "hold.sh"
    p.write_text(HOLD)
    p.chmod(0o755)
    return p


def test_array_tasks_are_not_pinned_and_run_side_by_side(env: dict[str, str], backend: CLIBackend,
                                                         tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    spec = JobSpec(script=str(_hold_script(tmp_path)), nodes=2, gpus_per_node=8, launcher="srun", array="0-2",
                   time="5:00", run_dir=str(tmp_path / "run"), env=(("GATE", str(gate)),))
    job_id, run_dir = submit_job(spec, backend, environ=env)

    def running() -> list[str]:
        return [j.job_id for j in backend.jobs() if j.raw.get("ArrayJobId") == job_id and j.state == "RUNNING"]

    try:
        assert "--nodelist" not in (Path(run_dir) / "script.sh").read_text()
        # 3 tasks x 2 whole-GPU nodes on 8 idle nodes: all at once (pinned, they queued behind each other)
        _wait_for(lambda: len(running()) == 3, 60, "3 array tasks running side by side")
    except BaseException:
        backend.cancel(job_id)  # leave the lab free for the next test
        raise
    finally:
        gate.touch()
    _wait_for(lambda: not [j for j in backend.jobs() if j.raw.get("ArrayJobId") == job_id and not j.finished],
              60, "the array to finish")


def test_dependent_job_is_placed_when_it_starts_not_when_submitted(env: dict[str, str], backend: CLIBackend,
                                                                   tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    hold = _hold_script(tmp_path)
    a = JobSpec(script=str(hold), nodes=2, gpus_per_node=8, launcher="srun", time="5:00",
                run_dir=str(tmp_path / "a"), env=(("GATE", str(gate)),))
    a_id, _ = submit_job(a, backend, environ=env)
    _wait_for(lambda: backend.job(a_id).state == "RUNNING", 60, "job A running")
    a_nodes = set(backend.job(a_id).nodes)
    done = tmp_path / "b.sh"
    done.write_text("#!/bin/bash\necho b ran\n")
    done.chmod(0o755)
    b = JobSpec(script=str(done), nodes=2, gpus_per_node=8, launcher="srun", time="5:00",
                run_dir=str(tmp_path / "b"), dependency=f"afterok:{a_id}")
    b_id, b_dir = submit_job(b, backend, environ=env)
    others = sorted(n.name for n in backend.nodes() if n.name not in a_nodes)
    from slurmkit import hostlist

    drained = hostlist.fold(others)
    backend.drain(drained, "gpusub-test: only A's nodes stay usable")
    try:
        assert "--nodelist" not in (Path(b_dir) / "script.sh").read_text()
        gate.touch()  # A ends; B can only run on A's nodes now (a pin chosen at submit would wait forever)
        _wait_for(lambda: backend.job(b_id).finished, 90, "job B to run after A on A's nodes")
        assert backend.job(b_id).state == "COMPLETED"
        assert set(backend.job(b_id).nodes) == a_nodes
    finally:
        gate.touch()
        for jid in (a_id, b_id):
            if not backend.job(jid).finished:
                backend.cancel(jid)
        backend.resume(drained)


# --- gloo gets an exact interface name from the site's NCCL-style socket_ifname ------------------------------------

@pytest.mark.parametrize("ifname", ["^docker0,lo", "eth"])
def test_ddp_with_nccl_style_socket_ifname(lab, env: dict[str, str], backend: CLIBackend, tmp_path: Path,  # type: ignore[no-untyped-def]
                                           ifname: str) -> None:
    import yaml

    from slurmkit.model.yamlio import load as load_yaml

    inv = load_yaml((lab.etc / "slurmkit.yaml").read_text())
    inv.setdefault("site", {})["socket_ifname"] = ifname
    path = tmp_path / "slurmkit.yaml"
    path.write_text(yaml.safe_dump(inv))
    e = {**env, "SLURMKIT_INVENTORY": str(path)}
    script = tmp_path / "ddp.py"
    script.write_text(DDP)
    out = tmp_path / "out"
    out.mkdir()
    spec = JobSpec(script=str(script), args=(str(out),), nodes=2, gpus_per_node=2, time="5:00")
    job_id, run_dir = submit_job(spec, CLIBackend(env=e), environ=e)
    log = io.StringIO()
    st = follow(job_id, backend, log, environ=e, cap=1.0)
    assert st.state == "COMPLETED", log.getvalue()[-3000:]
    assert len(list(out.glob("rank*.json"))) == 4
    assert f"NCCL_SOCKET_IFNAME={ifname}" in (Path(run_dir) / "env.txt").read_text()


# --- the interpreter is pinned: no venv on PATH, the job still finds torch -----------------------------------------

def test_job_runs_under_the_interpreter_gpusub_ran_under(lab: Lab, env: dict[str, str], backend: CLIBackend,
                                                        tmp_path: Path) -> None:
    script = tmp_path / "ddp.py"
    script.write_text(DDP)
    out = tmp_path / "out"
    out.mkdir()
    # no venv: torchrun is not on PATH (the lab's Slurm wrappers stay: a 24.11 lab's clients are not the host's)
    bare = {**env, "PATH": ":".join([*([str(lab.bin_dir)] if lab.foreign else []), "/usr/sbin:/usr/bin:/sbin:/bin"])}
    py = _python()
    res = subprocess.run([py, "-m", "slurmkit.cli.gpusub", str(script), "-N", "2", "--gpus-per-node", "1",
                          "--time", "5:00", "--", str(out)], env=bare, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    job_id = res.stdout.split("submitted job ", 1)[1].split()[0]
    log = io.StringIO()
    st = follow(job_id, backend, log, environ=bare, cap=1.0)
    assert st.state == "COMPLETED", log.getvalue()[-3000:]
    assert len(list(out.glob("rank*.json"))) == 2


# --- Slurm's own requeue of a pinned job: the pin must not outlive the nodes it named --------------------------------

@pytest.mark.parametrize("how", ["requeue", "requeue-at-start", "node-down"])
def test_slurm_requeue_of_a_pinned_job_is_placed_afresh(env: dict[str, str], backend: CLIBackend, tmp_path: Path,
                                                        how: str) -> None:
    """A pinned job requeued by Slurm itself, not by its batch script: `scontrol requeue` (the code path preemption
    with PreemptMode=REQUEUE takes: job_mgr.c _job_requeue_op) or a node going DOWN (kill_running_job_by_node_name).
    One of its nodes is drained first: with the submit-time --nodelist kept, the next attempt waited for it forever
    (ReqNodeNotAvail); the batch shell clears the pin when Slurm has made the job pending again.
    requeue-at-start: `scontrol requeue` as soon as the attempt's log exists, while the shell is still starting its
    step (srun then fails, "Job is pending execution", and Slurm's SIGTERM meets whatever the shell runs)."""
    gate = tmp_path / "gate"
    spec = JobSpec(script=str(_hold_script(tmp_path)), nodes=2, gpus_per_node=2, launcher="srun", time="5:00",
                   run_dir=str(tmp_path / "run"), env=(("GATE", str(gate)),))
    job_id, run_dir = submit_job(spec, backend, environ=env)
    lost = ""
    try:
        assert "#SBATCH --nodelist=" in (Path(run_dir) / "script.sh").read_text()
        _wait_for(lambda: backend.job(job_id).state == "RUNNING", 90, "the first attempt")
        _wait_for(lambda: (Path(run_dir) / "logs" / f"{job_id}.r0.log").exists(), 60, "the first attempt's log")
        if how != "requeue-at-start":  # the step runs (HOLD prints "hold on NODE" from each task)
            _wait_for(lambda: "hold on" in (Path(run_dir) / "logs" / f"{job_id}.r0.log").read_text(), 60, "the step")
        first = backend.job(job_id)
        lost = sorted(first.nodes)[-1]
        backend.drain(lost, "gpusub-test: lost while the job ran")
        if how.startswith("requeue"):
            backend.requeue(job_id)
        else:  # drained first, so ReturnToService=2 cannot bring it back when its slurmd answers
            subprocess.run(["scontrol", "update", f"NodeName={lost}", "State=DOWN", "Reason=gpusub-test"], env=env,
                           check=True, capture_output=True, timeout=30)
        _wait_for(lambda: backend.job(job_id).restarts >= 1, 60, "Slurm's requeue")
        _wait_for(lambda: backend.job(job_id).state == "RUNNING", 180, "the next attempt on other nodes")
        again = backend.job(job_id)
        assert lost not in again.nodes, (lost, again.nodes)
        assert again.raw.get("ReqNodeList") in (None, "", "(null)"), again.raw.get("ReqNodeList")
        assert "cleared the node pin" in (Path(run_dir) / "logs" / f"{job_id}.r0.log").read_text()
        assert (Path(run_dir) / "attempts" / f"{job_id}.r0.unpinned").exists()  # a later pin is a person's
    finally:
        gate.touch()
        if not backend.job(job_id).finished:
            backend.cancel(job_id)
        if lost:
            backend.resume(lost)


def test_follow_clears_the_pin_when_the_batch_host_is_lost(lab: Lab, env: dict[str, str], backend: CLIBackend,
                                                           tmp_path: Path) -> None:
    """The batch host is drained, dies with its slurmd, batch shell and step (every process of that node,
    SIGKILLed), then goes DOWN: Slurm requeues the job and keeps its --nodelist (job_mgr.c _job_requeue_op touches no req_nodes, 22.05 to
    26.05), and no batch shell is left to clear it, so the job would wait for the dead node forever.
    `gpusub --follow` (monitor.follow, here in a thread) sees the requeued job pending on gpusub's own pin, clears
    it, and the next attempt runs on other nodes to COMPLETED. ~60 s."""
    import threading

    from slurmkit.lab.slow import _node_pids

    gate = tmp_path / "gate"
    spec = JobSpec(script=str(_hold_script(tmp_path)), nodes=2, gpus_per_node=2, launcher="srun", time="5:00",
                   run_dir=str(tmp_path / "run"), env=(("GATE", str(gate)),))
    job_id, run_dir = submit_job(spec, backend, environ=env)
    log = io.StringIO()
    result: list[object] = []
    follower = threading.Thread(target=lambda: result.append(follow(job_id, backend, log, environ=env, cap=1.0)),
                                daemon=True)
    lost = ""
    try:
        assert "#SBATCH --nodelist=" in (Path(run_dir) / "script.sh").read_text()
        follower.start()
        _wait_for(lambda: backend.job(job_id).state == "RUNNING", 90, "the first attempt")
        _wait_for(lambda: (Path(run_dir) / "logs" / f"{job_id}.r0.log").exists()
                  and "hold on" in (Path(run_dir) / "logs" / f"{job_id}.r0.log").read_text(), 60, "the step")
        lost = backend.job(job_id).raw["BatchHost"]
        pids = _node_pids(lab, lost)
        if len(pids) < 2:
            pytest.skip(f"{lost}'s processes share the host's UTS namespace here: its batch shell cannot be told "
                        "from the other nodes' processes")
        # drained first: with ReturnToService=2 a DOWN node returns to service when slurmctld credits it with any
        # answer, and one still in flight from the killed slurmd did so 0.6 s after the DOWN on the 24.11 lab
        # ("node_did_resp: node node1 returned to service"): the unpinned job went back to the dead node
        backend.drain(lost, "gpusub-test: host lost")
        for sig in (signal.SIGSTOP, signal.SIGKILL):  # stopped first: no process of the node reacts to the others'
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
        subprocess.run(["scontrol", "update", f"NodeName={lost}", "State=DOWN", "Reason=gpusub-test: host lost"],
                       env=env, check=True, capture_output=True, timeout=30)
        _wait_for(lambda: backend.job(job_id).restarts >= 1, 90, "Slurm's requeue")
        _wait_for(lambda: backend.job(job_id).state == "RUNNING", 180, "the next attempt on other nodes")
        again = backend.job(job_id)
        assert lost not in again.nodes, (lost, again.nodes)
        assert "pin cleared" in log.getvalue(), log.getvalue()[-2000:]
        assert "cleared the node pin" not in (Path(run_dir) / "logs" / f"{job_id}.r0.log").read_text()  # no shell did
        assert not (Path(run_dir) / "attempts" / f"{job_id}.r0.unpinned").exists()
        gate.touch()
        follower.join(120)
        assert result and getattr(result[0], "state", "") == "COMPLETED", (result, log.getvalue()[-2000:])
    finally:
        gate.touch()
        if not backend.job(job_id).finished:
            backend.cancel(job_id)
        if lost:  # the node comes back for the module's other tests: its slurmd again, resumed unless it came idle
            lab.start_slurmds([lost])

            def back() -> bool:
                n = backend.node(lost)
                if n.state.lower() == "down" or n.drained:
                    with contextlib.suppress(SlurmkitError):  # "Invalid node state" once ReturnToService did it
                        backend.resume(lost)
                return n.state.lower() == "idle" and not n.flags

            _wait_for(back, 90, f"{lost} back, idle and responding")


# --- Megatron-LM keeps its work (issue 34 item 1) ----------------------------------------------------------------

def test_megatron_rank_saves_on_slurms_signal_and_the_requeue_resumes(env: dict[str, str], backend: CLIBackend,
                                                                     tmp_path: Path) -> None:
    """--launcher megatron, 2 gloo ranks of a Megatron-shaped loop around Megatron-LM's own DistributedSignalHandler
    (tests/data/megatron/train_signal.py): the signal Slurm sends before the time limit (--signal=B:USR2, here
    `scancel --signal=USR2 --batch`) must end in Megatron's save and exit 0, the requeue, and a resume from that
    save. Before: SIGUSR2 reached the ranks (proctrack/linuxproc), which Megatron does not handle: they died
    (exitcode -12), nothing saved, the requeue restarted from iteration 0."""
    train = ROOT / "tests" / "data" / "megatron" / "train_signal.py"
    run_dir, save = tmp_path / "run", tmp_path / "ckpt"
    spec = JobSpec(script=str(train), nodes=1, gpus_per_node=2, launcher="megatron", max_restarts=1,
                   run_dir=str(run_dir), time="10:00",
                   args=("--save", str(save), "--train-iters", "100", "--iter-seconds", "0.2"))
    job_id, _ = submit_job(spec, backend, environ=env)
    _wait_for(lambda: all((save / "ranks" / f"{r}.running").exists() for r in (0, 1)), 150, "the ranks to train")
    backend.cancel(job_id, signal="USR2", batch=True)
    _wait_for(lambda: backend.job(job_id).restarts >= 1, 90, "the requeue")
    log = io.StringIO()
    st = follow(job_id, backend, log, environ=env, cap=1.0)
    r0 = (run_dir / "logs" / f"{job_id}.r0.log").read_text()
    assert st.state == "COMPLETED", r0[-3000:] + log.getvalue()[-2000:]
    assert r0.count("exiting program after receiving SIGTERM") == 2, r0[-3000:]
    assert "requeueing (restart 1 of at most 1)" in r0 and "exitcode" not in r0, r0[-3000:]
    ranks = [json.loads((save / "ranks" / f"{r}.json").read_text()) for r in (0, 1)]
    assert all(r["restart"] == 1 and 0 < r["start"] < 100 and r["end"] == 100 for r in ranks), ranks
    r1 = (run_dir / "logs" / f"{job_id}.r1.log").read_text()
    assert f"start at iteration {ranks[0]['start']}" in r1
