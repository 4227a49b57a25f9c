"""Isolation in the kernel, proven on the lab's cgroup mode (`lab up --cgroups`: proctrack/cgroup, task/cgroup with
ConstrainRAMSpace, ConstrainDevices, ConstrainCores on cgroup v1, each node in its own cgroup namespace).

On a host without what the mode needs, `lab up --cgroups` refuses and these tests fail (they are never skipped).
Runs on 22.05 and, in tests/run.sh's second pass, on 24.11.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmkit.backend.cli import CLIBackend
from slurmkit.lab import Lab, LabSpec
from slurmkit.lab import cgroups as cg
from tests.conftest import _base, _root_dir, lab_release, lab_run, release_under_test, start_lab
from tests.integration.test_placement_lab import _states, _wait

pytestmark = pytest.mark.lab
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def clab(make_lab) -> Lab:  # type: ignore[no-untyped-def]
    # 2 nodes x 2 GPUs; the nodes have this host's cores, gpu0 bound to the first socket, gpu1 to the second
    return make_lab(cgroups=True, nodes=2, gpus_per_node=2, nodes_per_leaf=2)


@pytest.fixture
def jobs(clab: Lab) -> Iterator[list[str]]:
    ids: list[str] = []
    yield ids
    if ids:
        lab_run(clab, ["scancel", *ids], check=False)
    b = CLIBackend(env=clab.env)
    _wait(lambda: all(s == "idle" for s in _states(b).values()), 60, "every node idle again")


def _sbatch(lab: Lab, jobs: list[str], *argv: str) -> str:
    r = lab_run(lab, ["sbatch", "--parsable", *argv])
    jobs.append(r.stdout.strip().split(";")[0])
    return jobs[-1]


def _field(lab: Lab, job: str, key: str) -> str:
    m = re.search(rf"\b{key}=(\S*)", lab_run(lab, ["scontrol", "show", "job", job]).stdout)
    return m.group(1) if m else ""


def _until_state(lab: Lab, job: str, states: tuple[str, ...], timeout: float = 90) -> str:
    return _wait(lambda: (s if (s := _field(lab, job, "JobState")) in states else None), timeout,
                 f"job {job} to reach {'/'.join(states)}")


def _until_file(p: Path, text: str, timeout: float = 60) -> str:
    return _wait(lambda: (t if p.exists() and text in (t := p.read_text()) else None), timeout, f"{text!r} in {p}")


def test_the_lab_runs_cgroup_plugins(clab: Lab):
    conf = clab.conf.read_text().splitlines()
    assert "ProctrackType=proctrack/cgroup" in conf and "TaskPlugin=task/cgroup,task/affinity" in conf
    cgconf = (clab.etc / "cgroup.conf").read_text().splitlines()
    for line in ("CgroupPlugin=cgroup/v1", "ConstrainRAMSpace=yes", "ConstrainDevices=yes", "ConstrainCores=yes"):
        assert line in cgconf
    # every node's tree lives under the lab's own group on the host
    roots = cg.recorded(clab.dir)
    assert set(roots) == set(cg.CONTROLLERS)
    for n in clab.spec.node_names:
        assert (roots["memory"] / n / f"slurm_{n}").is_dir()


def test_a_job_over_its_memory_is_oom_killed_in_its_cgroup_while_its_neighbour_completes(
        clab: Lab, jobs: list[str], tmp_path: Path):
    tmp_path.chmod(0o755)
    go = tmp_path / "go"
    nb_out = tmp_path / "neighbour.out"
    # the neighbour starts first and holds on until the hog is dead, so both share node1 the whole time
    neighbour = _sbatch(clab, jobs, "-w", "node1", "-c1", "--mem=100M", "-t", "5", "-o", str(nb_out), "--wrap",
                        f"echo started; while [ ! -e {go} ]; do sleep 0.2; done; "
                        "python3 -c 'x = b\"\\1\" * (30 << 20); print(\"neighbour ok\", len(x))'")
    _until_file(nb_out, "started")
    hog_out = tmp_path / "hog.out"
    hog = _sbatch(clab, jobs, "-w", "node1", "-c1", "--mem=100M", "-t", "5", "-o", str(hog_out), "--wrap",
                  "python3 -c 'x = b\"\\1\" * (400 << 20); print(\"hog survived\", len(x))'")
    assert _until_state(clab, hog, ("OUT_OF_MEMORY", "COMPLETED", "FAILED")) == "OUT_OF_MEMORY"
    assert _field(clab, neighbour, "JobState") == "RUNNING"
    assert _field(clab, hog, "NodeList") == _field(clab, neighbour, "NodeList") == "node1"
    out = hog_out.read_text()
    assert "hog survived" not in out
    # slurmstepd's own count of OOM kills in the step's memory cgroup (22.05 "oom-kill event(s)", 24.11 "oom_kill")
    assert re.search(r"Detected 1 oom[-_]kill event", out), out
    go.touch()
    assert _until_state(clab, neighbour, ("COMPLETED", "FAILED", "OUT_OF_MEMORY")) == "COMPLETED"
    assert "neighbour ok" in nb_out.read_text()


PROBE = """#!/bin/bash
echo "gpus=$SLURM_JOB_GPUS"
echo "cpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)"
for dev in {devdir}/nvidia*; do
  python3 -c 'import os, sys
try:
    os.close(os.open(sys.argv[1], os.O_RDWR)); print("open", sys.argv[1], 0)
except OSError as e:
    print("open", sys.argv[1], e.errno)' "$dev"
done
echo done
{wait}
"""


def _probe(tmp_path: Path, lab: Lab, name: str, wait: str = "") -> Path:
    p = tmp_path / f"{name}.sh"
    p.write_text(PROBE.format(devdir=lab.dir / "dev", wait=wait))
    p.chmod(0o755)
    return p


def _parse(text: str) -> tuple[int, str, dict[int, int]]:
    gpus = re.search(r"^gpus=(\d+)$", text, re.M)
    cpus = re.search(r"^cpus=(\S+)$", text, re.M)
    assert gpus and cpus, text
    opened = {int(m.group(1)): int(m.group(2)) for m in re.finditer(r"^open \S*nvidia(\d+) (\d+)$", text, re.M)}
    return int(gpus.group(1)), cpus.group(1), opened


def _gres_cores(lab: Lab) -> dict[int, str]:
    out = {}
    for line in (lab.etc / "gres.conf").read_text().splitlines():
        m = re.search(r"File=\S*nvidia(\d+) Cores=(\S+)", line)
        if m:
            out[int(m.group(1))] = m.group(2)
    return out


def test_one_gpu_cannot_open_the_other_and_binding_follows_gres_cores(clab: Lab, jobs: list[str], tmp_path: Path):
    """Two jobs of one GPU each on node1 get both GPUs; each opens only its own device file (the fake device has no
    driver: ENXIO, 6) and is refused the other by the devices cgroup (EPERM, 1), and runs on the cores gres.conf
    binds its GPU to (--gres-flags=enforce-binding)."""
    tmp_path.chmod(0o755)
    go = tmp_path / "go"
    cores = _gres_cores(clab)
    assert len(set(cores.values())) == 2, cores  # the two GPUs are bound to different sockets
    first_out, second_out = tmp_path / "first.out", tmp_path / "second.out"
    common = ["-w", "node1", "--gres=gpu:1", "--gres-flags=enforce-binding", "--mem=100M", "-t", "5"]
    _sbatch(clab, jobs, *common, "-o", str(first_out),
            str(_probe(tmp_path, clab, "first", f"while [ ! -e {go} ]; do sleep 0.2; done")))
    _until_file(first_out, "done")
    _sbatch(clab, jobs, *common, "-o", str(second_out), str(_probe(tmp_path, clab, "second")))
    _until_file(second_out, "done")
    go.touch()
    seen = set()
    for out in (first_out, second_out):
        gpu, cpus, opened = _parse(out.read_text())
        seen.add(gpu)
        assert cpus == cores[gpu], (out.read_text(), cores)
        assert opened[gpu] == 6, out.read_text()  # ENXIO: allowed by the cgroup, no driver behind it
        assert all(err == 1 for i, err in opened.items() if i != gpu), out.read_text()  # EPERM
        assert set(opened) == {0, 1}
    assert seen == {0, 1}


def test_lab_down_leaves_no_cgroup_behind(tmp_path: Path):
    """A lab of its own, with a node that joins by `slurmkit nodes add` (it gets its own tree under the lab's group,
    like the first) and a job that forks a process into the background, taken down: every group the lab made under
    the host's controllers is gone (Slurm's slurm_<node> trees included)."""
    spec = LabSpec(dir=f"{_root_dir()}-cgdown", port_base=_base() + 150, slurm=lab_release(), cgroups=True,
                   nodes=1, gpus_per_node=1, nodes_per_leaf=1, spare=1)
    lab_ = start_lab(spec)
    try:
        roots = cg.recorded(lab_.dir)
        assert set(roots) == set(cg.CONTROLLERS) and all(r.is_dir() for r in roots.values())
        # from another process (another cgroup than `up`'s): the new node joins the recorded roots
        add = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "nodes", "add", "node2", "--group", "extra"],
                             capture_output=True, text=True, cwd=ROOT, env={**os.environ, **lab_.env}, timeout=600)
        if release_under_test() >= "24.11":  # refused up front there (lab/elastic.py LabSite.check_add)
            assert add.returncode == 2 and "not on a --cgroups lab on Slurm 24.11" in add.stderr, add.stderr
            assert "slurmd-node2" not in lab_.running_pids()
        else:
            assert add.returncode == 0, add.stdout + add.stderr
            assert cg.recorded(lab_.dir) == roots
            pid = lab_.running_pids()["slurmd-node2"]
            for c in cg.CONTROLLERS:  # in node2's own tree (Slurm may have moved it into a group of its own there)
                assert any(str(pid) in f.read_text().split() for f in (roots[c] / "node2").rglob("cgroup.procs")), c
            assert _states(CLIBackend(env=lab_.env)) == {"node1": "idle", "node2": "idle"}
        tmp_path.chmod(0o755)
        out = tmp_path / "bg.out"
        lab_run(lab_, ["sbatch", "-o", str(out), "--mem=50M", "--wrap", "(setsid sleep 600 &); echo forked; sleep 600"])
        _until_file(out, "forked")
        step_dirs = list(roots["memory"].glob("node1/slurm_node1/uid_*/job_*"))
        assert step_dirs, list(roots["memory"].rglob("*"))
    finally:
        lab_.down()
    for r in roots.values():
        assert not r.exists(), f"{r} left behind"
    assert not (Path(spec.dir) / cg.STATE_FILE).exists()


RANK_PROBE = """#!/bin/bash
r="${LOCAL_RANK:-$SLURM_LOCALID}"
echo "$SLURMD_NODENAME $r $(awk '/^Cpus_allowed_list/ {print $2}' /proc/self/status)" \
  >"$GPUSUB_RUN_DIR/rank.$SLURMD_NODENAME.$r"
"""


@pytest.mark.parametrize("launcher", ["srun", "torchrun"])
def test_each_rank_runs_on_its_gpus_cores(clab: Lab, tmp_path: Path, launcher: str):
    """Issue 25 item 9: a 2-node x 2-GPU gpusub job on the cgroup lab (ConstrainCores: each task's cpuset is what
    Slurm gave it): the rank of GPU i runs on the cores gres.conf binds GPU i to, read from each rank's own
    Cpus_allowed_list, for one srun task per GPU and for torchrun's workers. Unbound (--no-cpu-bind) torchrun's
    workers share their task's two CPUs (an srun task then has what Slurm's own task binding gave it)."""
    tmp_path.chmod(0o755)
    probe = tmp_path / "probe.sh"
    probe.write_text(RANK_PROBE)
    probe.chmod(0o755)
    cores = _gres_cores(clab)
    env = {**os.environ, **clab.env, "SLURMKIT_INVENTORY": str(clab.etc / "slurmkit.yaml"),
           "SLURMKIT_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(ROOT)}
    for bind, run in (("--cpu-bind", tmp_path / "bound"), ("--no-cpu-bind", tmp_path / "free")):
        r = subprocess.run([sys.executable, "-m", "slurmkit.cli.gpusub", str(probe), "-N", "2", "--gpus-per-node", "2",
                            "--launcher", launcher, "--time", "5", "--run-dir", str(run), bind, "--explain"],
                           env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "cpu binding: " + ("each rank on the cores" if bind == "--cpu-bind" else "off") in r.stdout
        job = r.stdout.split("submitted job ", 1)[1].split()[0]
        assert _until_state(clab, job, ("COMPLETED", "FAILED", "CANCELLED")) == "COMPLETED", \
            "".join(p.read_text() for p in (run / "logs").iterdir())
        got = {p.name.split(".", 1)[1]: p.read_text().split()[2] for p in run.glob("rank.*")}
        assert sorted(got) == ["node1.0", "node1.1", "node2.0", "node2.1"], got
        for key, cpus in got.items():
            if bind == "--cpu-bind":
                assert cpus == cores[int(key.split(".")[1])], (got, cores)
            elif launcher == "torchrun":
                assert cpus == "0-1", got


TERM_CKPT = """\
import json, os, signal, sys, time
ck = os.path.join(os.environ["GPUSUB_CHECKPOINT_DIR"], "state.json")
step = json.load(open(ck))["step"] if os.path.exists(ck) else 0
restart = int(os.environ["GPUSUB_RESTART_COUNT"])
print(f"start restart={restart} from step={step}", flush=True)
stop = []
for s in (signal.SIGUSR2, signal.SIGTERM):
    signal.signal(s, lambda n, f: stop.append(signal.Signals(n).name))
last = 0
while True:
    if stop or os.path.exists(os.environ["GPUSUB_PREEMPT_FILE"]):
        json.dump({"step": step}, open(ck + ".tmp", "w"))
        os.replace(ck + ".tmp", ck)
        print(f"checkpointed at step {step} on {stop or ['file']}", flush=True)
        sys.exit(0)
    if step - last >= 50:  # a periodic checkpoint every 50 steps: the SIGTERM one must beat it
        json.dump({"step": step}, open(ck + ".tmp", "w"))
        os.replace(ck + ".tmp", ck)
        last = step
    if restart and step >= json.load(open(ck))["step"] + 5:
        print(f"done at step {step}", flush=True)
        sys.exit(0)
    step += 1
    time.sleep(0.05)
"""


def test_scontrol_requeue_gives_the_job_a_last_checkpoint(clab: Lab, tmp_path: Path):
    """Issue 25 item 4, on the cgroup lab (proctrack/cgroup, as `conf generate` writes it): `scontrol requeue` of a
    running gpusub job sends SIGTERM; within KillWait (the lab: 5 s) the training process saves, and the requeued
    attempt resumes from that step, not from the last periodic checkpoint."""
    tmp_path.chmod(0o755)
    script = tmp_path / "term_ckpt.py"
    script.write_text(TERM_CKPT)
    run = tmp_path / "run"
    env = {**os.environ, **clab.env, "SLURMKIT_INVENTORY": str(clab.etc / "slurmkit.yaml"),
           "SLURMKIT_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "slurmkit.cli.gpusub", str(script), "-N", "1", "--gpus-per-node", "1",
                        "--launcher", "srun", "--time", "10", "--run-dir", str(run)],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    job = r.stdout.split("submitted job ", 1)[1].split()[0]
    try:
        log0 = run / "logs" / f"{job}.r0.log"
        _until_file(log0, "start restart=0", timeout=60)
        deadline = time.monotonic() + 60
        while json.loads((run / "checkpoints" / "state.json").read_text()).get("step", 0) < 50 \
                if (run / "checkpoints" / "state.json").exists() else True:
            assert time.monotonic() < deadline, log0.read_text()
            time.sleep(0.2)
        time.sleep(1.5)  # ~30 steps past the periodic checkpoint at 50
        lab_run(clab, ["scontrol", "requeue", job])
        log1 = run / "logs" / f"{job}.r1.log"
        _until_file(log1, "done at step", timeout=120)
        r0, r1 = log0.read_text(), log1.read_text()
        saved = int(r0.split("checkpointed at step ", 1)[1].split()[0])
        assert saved > 60, r0  # the SIGTERM checkpoint, well past the periodic one at 50
        assert f"start restart=1 from step={saved}" in r1, r1
        assert "SIGTERM" in r0 or "file" in r0
    finally:
        lab_run(clab, ["scancel", job], check=False)


def test_megatron_ranks_save_on_scontrol_requeue(clab: Lab, tmp_path: Path):
    """Issue 34 item 1, on the cgroup lab: proctrack/cgroup signals only slurmstepd's children, i.e. torchrun's agent,
    never the Megatron ranks. `scontrol requeue` (the path preemption with PreemptMode=REQUEUE takes) sends SIGTERM
    to the agent and the batch shell; the megatron launcher's agent passes it to each rank as Megatron-LM's exit
    signal, Megatron's own DistributedSignalHandler (tests/data/megatron/train_signal.py) saves within KillWait, and
    the requeued attempt starts from that save. Before, the ranks never heard of it and were SIGKILLed unsaved."""
    tmp_path.chmod(0o755)
    train = ROOT / "tests" / "data" / "megatron" / "train_signal.py"
    run, save = tmp_path / "run", tmp_path / "ckpt"
    env = {**os.environ, **clab.env, "SLURMKIT_INVENTORY": str(clab.etc / "slurmkit.yaml"),
           "SLURMKIT_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "slurmkit.cli.gpusub", str(train), "-N", "1", "--gpus-per-node", "2",
                        "--launcher", "megatron", "--time", "10", "--run-dir", str(run), "--",
                        "--save", str(save), "--train-iters", "100000", "--iter-seconds", "0.05"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    job = r.stdout.split("submitted job ", 1)[1].split()[0]
    try:
        log0 = run / "logs" / f"{job}.r0.log"
        _wait(lambda: all((save / "ranks" / f"{i}.running").exists() for i in (0, 1)), 150, "the ranks to train")
        time.sleep(1.0)
        lab_run(clab, ["scontrol", "requeue", job])
        log1 = run / "logs" / f"{job}.r1.log"
        _until_file(log1, "rank 0/2: start at iteration", timeout=150)
        r0, r1 = log0.read_text(), log1.read_text()
        assert r0.count("exiting program after receiving SIGTERM") == 2, r0[-3000:]
        saved = json.loads((save / "ranks" / "0.json").read_text())["end"]
        assert saved > 0 and f"start at iteration {saved}," in r1, (saved, r1[-2000:])
    finally:
        lab_run(clab, ["scancel", job], check=False)
