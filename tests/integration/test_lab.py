"""The lab is a real Slurm: real daemons, real jobs across nodes, real failures."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmkit.backend.base import SubmitRequest
from slurmkit.backend.cli import CLIBackend
from slurmkit.errors import LabError, SlurmkitError
from slurmkit.lab import Lab, LabSpec
from tests.conftest import lab_run

pytestmark = [pytest.mark.lab, pytest.mark.releases]  # tests/run.sh: run on every release


def wait_job(backend: CLIBackend, job_id: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        j = backend.job(job_id)
        if j.finished:
            return j.state
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} did not finish in {timeout}s: {backend.job(job_id)}")


def test_every_node_idle_with_gpus_and_topology(lab: Lab):
    b = CLIBackend(env=lab.env)
    # the session's lab: jobs of tests that ran before this one may still be completing (a partial pass such as
    # tests/run.sh's `-m "lab and releases"` orders files differently); idle within a minute is the check
    deadline = time.monotonic() + 60
    while True:
        nodes = b.nodes()
        if all(n.state == "idle" and not n.flags for n in nodes) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert [n.name for n in nodes] == [f"node{i}" for i in range(1, 9)]
    assert all(n.state == "idle" and not n.flags and n.total_gpus == 8 for n in nodes), [
        (n.name, n.state, sorted(n.flags)) for n in nodes]
    # the release the lab was asked for (SLURMKIT_TEST_SLURM, default the host's) is what answers, clients included
    assert b.version().startswith(lab.release + ".")
    assert f"Version={lab.release}." in lab_run(lab, ["scontrol", "-o", "show", "node", "node3"]).stdout
    topo = {s.name: s for s in b.topology()}
    assert topo["leaf1"].nodes == ["node1", "node2", "node3", "node4"] and topo["spine"].level == 1


def test_multinode_batch_job_runs_on_every_node(lab: Lab, tmp_path):
    """A 4-node batch job: one task per node reports its hostname, GPUs and switch path."""
    out = tmp_path / "out"
    out.mkdir()
    os.chmod(tmp_path, 0o777)
    os.chmod(out, 0o777)
    script = "\n".join(
        [
            "#!/bin/bash",
            "set -euo pipefail",
            f'srun --ntasks-per-node=1 bash -c \'echo "$(hostname) $CUDA_VISIBLE_DEVICES $SLURM_TOPOLOGY_ADDR $SLURM_PROCID" > {out}/$(hostname).txt\'',
            "",
        ]
    )
    b = CLIBackend(env=lab.env)
    req = SubmitRequest(script=script, argv=("-N4", "--exclusive", "--gres=gpu:h100:8", "-o", str(tmp_path / "job.log"), "-J", "lab-smoke"))
    job_id = b.submit(req)
    assert wait_job(b, job_id) == "COMPLETED", (tmp_path / "job.log").read_text()
    job = b.job(job_id)
    assert len(job.nodes) == 4
    lines = {p.stem: p.read_text().split() for p in out.iterdir()}
    assert sorted(lines) == sorted(job.nodes)  # each node wrote its own file, under its own hostname
    for node, (host, gpus, topo, _rank) in lines.items():
        assert host == node and gpus == "0,1,2,3,4,5,6,7"
        assert topo.startswith("spine.leaf") and topo.endswith("." + node)
    assert sorted(int(v[3]) for v in lines.values()) == [0, 1, 2, 3]


def test_node_names_resolve_inside_jobs(lab: Lab):
    r = lab_run(lab, ["srun", "-N2", "-w", "node5,node6", "bash", "-c", "getent hosts node1 | head -1; hostname"])
    assert "127.0.0.1" in r.stdout and {"node5", "node6"} <= set(r.stdout.split())


def test_refuses_second_lab_in_same_dir(lab: Lab):
    again = Lab(LabSpec(dir=str(lab.dir), port_base=lab.spec.port_base + 50))
    with pytest.raises(LabError, match="already up"):
        again.up()
    assert lab.is_up()  # the refusal changed nothing


def test_refuses_ports_in_use(tmp_path, lab: Lab):
    spec = LabSpec(dir=str(tmp_path / "other"), port_base=lab.spec.port_base)
    with pytest.raises(LabError, match="ports in use"):
        Lab(spec).up()
    assert not (tmp_path / "other").exists()


def test_cli_lab_status_env_and_down_of_nothing(lab: Lab, tmp_path):
    st = subprocess.run([sys.executable, "-m", "slurmkit", "lab", "status", "--dir", str(lab.dir)], capture_output=True, text=True)
    assert st.returncode == 0 and "node8" in st.stdout and "slurmctld[" in st.stdout
    env = subprocess.run([sys.executable, "-m", "slurmkit", "lab", "env", "--dir", str(lab.dir)], capture_output=True, text=True)
    want = [f"export SLURM_CONF={lab.conf}", f"export SLURMKIT_LAB_DIR={lab.dir}"] + (
        [f"export PATH={shlex.quote(lab.env['PATH'])}"] if lab.foreign else [])
    assert env.stdout.splitlines() == want
    nothing = subprocess.run([sys.executable, "-m", "slurmkit", "lab", "down", "--dir", str(tmp_path / "none")], capture_output=True, text=True)
    assert nothing.returncode == 0 and "nothing running" in nothing.stdout


def test_slurmctld_down_is_one_line_error_and_down_reaps_escaped_processes(make_lab):
    small = make_lab(nodes=2, gpus_per_node=2, nodes_per_leaf=2)
    b = CLIBackend(env=small.env, timeout=8)
    # a job whose child escapes with setsid (linuxproc cannot track it): `down` must still reap it
    marker = f"slurmkit-escapee-{os.getpid()}"
    job = b.submit(SubmitRequest(script=f"#!/bin/bash\nsetsid bash -c 'exec -a {marker} sleep 600' &\nsleep 1\n", argv=("-N1", "-o", "/dev/null")))
    wait_job(b, job)
    assert marker in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    os.kill(small.running_pids()["slurmctld"], 15)
    deadline = time.monotonic() + 10
    while "slurmctld" in small.running_pids() and time.monotonic() < deadline:
        time.sleep(0.05)
    with pytest.raises(SlurmkitError) as ei:
        b.nodes()
    msg = ei.value.one_line()
    assert "scontrol" in msg and "\n" not in msg
    small.down()
    time.sleep(0.2)
    assert marker not in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert not small.is_up()


def test_accounting_lab_records_jobs_in_sacct(make_lab):
    acct = make_lab(nodes=2, gpus_per_node=2, nodes_per_leaf=2, accounting=True)
    b = CLIBackend(env=acct.env)
    job = b.submit(SubmitRequest(script="#!/bin/bash\nsrun hostname\n", argv=("-N2", "--gres=gpu:1", "-o", "/dev/null")))
    assert wait_job(b, job) == "COMPLETED"
    deadline = time.monotonic() + 30  # slurmctld sends job records to slurmdbd asynchronously
    rows: list[str] = []
    while time.monotonic() < deadline:
        r = lab_run(acct, ["sacct", "-a", "-X", "-P", "-n", "-j", job, "-o", "JobID,State,NodeList,AllocTRES"], check=False)
        rows = [line for line in r.stdout.splitlines() if line.startswith(job + "|")]
        if rows and rows[0].split("|")[1:3] == ["COMPLETED", "node[1-2]"]:
            break
        time.sleep(0.5)
    assert rows, "sacct never showed the job"
    jid, state, nodes, tres = rows[0].split("|")
    assert state == "COMPLETED" and nodes == "node[1-2]" and "gres/gpu=2" in tres


def test_preflight_refuses_non_root_and_missing_binaries(monkeypatch, tmp_path):
    lab_ = Lab(LabSpec(dir=str(tmp_path / "x"), port_base=23000))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(LabError, match="needs root"):
        lab_.preflight()
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    import slurmkit.lab.lab as labmod

    monkeypatch.setattr(labmod.shutil, "which", lambda name: None if name == "slurmd" else "/usr/bin/" + name)
    monkeypatch.setattr(labmod.Path, "exists", lambda self: False if self.name == "slurmd" else True)
    with pytest.raises(LabError, match="apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge"):
        lab_.preflight()
    monkeypatch.undo()
    assert not (tmp_path / "x").exists()


def test_stale_pid_file_never_signals_an_unrelated_process(tmp_path):
    """A pid file left by a crash may name a PID the kernel reused: `down` must leave that process alone."""
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        lab_ = Lab(LabSpec(dir=str(tmp_path / "stale"), port_base=23100))
        (lab_.run_dir).mkdir(parents=True)
        (lab_.run_dir / "slurmctld.pid").write_text(f"{bystander.pid}\n")
        assert lab_.running_pids() == {} and not lab_.is_up()
        lab_.down()
        assert bystander.poll() is None  # still running
    finally:
        bystander.kill()
        bystander.wait()


def test_a_lab_that_fails_to_start_keeps_its_logs(tmp_path, monkeypatch):
    """The harness must not reuse (and wipe) the dir of a lab that failed: it moves it aside and says where."""
    from tests.conftest import lab_release, start_lab

    # a failure after the config is written (a bad --fake-nvml is refused before that, in preflight)
    def munged_fails(self: Lab) -> None:
        raise LabError("munged did not start (injected by the test)")

    monkeypatch.setattr(Lab, "_start_munged", munged_fails)
    d = tmp_path / "broken"
    spec = LabSpec(dir=str(d), nodes=1, gpus_per_node=1, port_base=_free_base(), hooks=True, slurm=lab_release())
    with pytest.raises(LabError) as ei:
        start_lab(spec)
    kept = tmp_path / "broken.failed-1"
    assert f"kept in {kept}" in str(ei.value) and "munged did not start" in str(ei.value)
    assert (kept / "etc" / "slurm.conf").is_file() and not d.exists()
    assert not Lab(LabSpec(dir=str(kept))).is_up()


def _free_base() -> int:
    return int(os.environ.get("SLURMKIT_TEST_LAB_PORT_BASE", "17817")) + 150


def test_image_build_offline_is_one_line_and_leaves_nothing(tmp_path):
    """A real debootstrap against a mirror that cannot be reached (the offline case): one line naming what could
    not be downloaded, no half-built root left behind, the cached roots untouched."""
    env = {**os.environ, "SLURMKIT_IMAGE_DIR": str(tmp_path / "roots")}
    r = subprocess.run([sys.executable, "-m", "slurmkit", "lab", "image", "build", "24.11", "--mirror", "http://127.0.0.1:9/debian"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last == ("slurmkit: error: debootstrap trixie failed: could not download "
                    "http://127.0.0.1:9/debian/dists/trixie/Release (offline, or the mirror lacks it)")
    assert list((tmp_path / "roots").iterdir()) == []


def test_block_topology_is_refused_where_the_release_lacks_it(tmp_path):
    """--topology block needs BlockSizes (24.05+): on an older release the lab refuses before touching anything."""
    lab_ = Lab(LabSpec(dir=str(tmp_path / "b"), port_base=23100, topology="block", slurm="22.05"))
    lab_._host_release = "22.05"
    with pytest.raises(LabError, match=r"--topology block needs Slurm 24.05 or later \(BlockSizes\); this lab runs 22.05"):
        lab_.preflight()
    assert not (tmp_path / "b").exists()
    odd = Lab(LabSpec(dir=str(tmp_path / "c"), port_base=23100, topology="block", slurm="24.11", nodes=6, nodes_per_leaf=4))
    odd._host_release = "22.05"
    with pytest.raises(LabError, match=r"multiple of --nodes-per-leaf"):
        odd.preflight()


def test_a_release_view_leaves_no_mount_on_the_host(tmp_path):
    """A view of another release's root (lab/view.py mount_view) mounts only below its own directory: the root's
    etc/localtime symlink once made mount(8) bind the host's /etc/localtime onto the host's own zoneinfo file, one
    leaked mount per lab, and after a day of labs the host's job_container/tmpfs failed every job. Cost: ~1 s."""
    from slurmkit.backend.roots import find, list_images
    from slurmkit.lab.view import VIEWS, mount_view, unmount_view
    from tests.conftest import lab_release

    img = find(lab_release()) if lab_release() else next(iter(list_images()), None)
    if img is None:
        pytest.skip("no cached root of another release (tests/run.sh builds them)")

    def host_mounts() -> list[str]:
        targets = [ln.split()[4] for ln in Path("/proc/self/mountinfo").read_text().splitlines()]
        return sorted(t for t in targets if not t.startswith(str(VIEWS)))

    before = host_mounts()
    lab_dir = tmp_path / "viewlab"
    lab_dir.mkdir()
    try:
        view = mount_view(img, lab_dir)
        assert (view / "etc" / "localtime").exists()  # the time zone still resolves inside the view
        assert host_mounts() == before
    finally:
        unmount_view(lab_dir)
    assert host_mounts() == before
