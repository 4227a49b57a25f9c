"""`slurmkit nodes add|remove` on a real lab that has room for more nodes (`lab up --nodes 4 --spare 4`).

One lab for the module, taken down at its end; the tests run in order on it: a change the cluster refuses is
rolled back (files, inventory, cluster as they were), and so is one whose new slurmd never registers; node[5-8]
join while a 4-node job runs; node7 and node8 leave by two concurrent commands (the second waits for the
first's lock; one job waited for); node6 leaves with its job requeued, after a refusal naming a job pinned there. 22.05 takes the change by a controller restart with its
state kept, 24.11 by `scontrol reconfigure` (slurmkit/elastic/path.py); the job must survive either way.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from slurmkit.backend.cli import CLIBackend
from slurmkit.elastic import change, edit, path
from slurmkit.errors import SlurmCommandError
from slurmkit.lab import Lab, LabSpec
from slurmkit.lab.elastic import LabSite, lab_for_conf
from tests.conftest import _base, _root_dir, lab_release, release_under_test, start_lab

pytestmark = [pytest.mark.lab, pytest.mark.releases]  # tests/run.sh: run on every release
ROOT = Path(__file__).resolve().parents[2]
RESTART = release_under_test() < "24.11"  # 22.05 .. 24.05: controller restart; 24.11+: reconfigure


@pytest.fixture(scope="module")
def elab() -> Iterator[Lab]:
    # its own ports, clear of the session lab (base..base+nodes, base+1000/1001) and of make_lab's (which keep out of
    # conftest._RESERVED_OFFSETS), and below the host's ephemeral range where the base is (`lab up` refuses
    # ports inside it)
    spec = LabSpec(dir=f"{_root_dir()}-nodes", port_base=_base() + 180, nodes=4, spare=4, slurm=lab_release())
    the_lab = start_lab(spec)
    try:
        yield the_lab
    finally:
        the_lab.down()


def sk(lab: Lab, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slurmkit.cli.main", *args], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, **lab.env}, timeout=600)


def sh(lab: Lab, *argv: str) -> str:
    return subprocess.run(list(argv), capture_output=True, text=True, env={**os.environ, **lab.env}, timeout=30,
                          check=True).stdout


def wait_for(pred, timeout: float, what: str):  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        try:
            last = pred()
        except SlurmCommandError as exc:  # a controller restarting answers nothing for a moment
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}; last={last!r}")


def submit(lab: Lab, *args: str) -> str:
    if "-o" not in args:  # never into the working directory
        args = ("-o", str(lab.dir / "log" / "job-%j.out"), *args)
    return sh(lab, lab.exe("sbatch"), "--parsable", *args).strip().split(";")[0]


def job(backend: CLIBackend, jid: str):  # type: ignore[no-untyped-def]
    return backend.job(jid)


@pytest.fixture(scope="module")
def backend(elab: Lab) -> CLIBackend:
    return CLIBackend(env=elab.env)


@pytest.fixture(scope="module")
def long_job(elab: Lab, backend: CLIBackend) -> str:
    """A 4-node job that runs across every change of the module."""
    jid = submit(elab, "-N4", "--wrap", "sleep 3000")
    wait_for(lambda: job(backend, jid).state == "RUNNING", 60, f"job {jid} to run")
    return jid


def _leaf(lab: Lab, name: str) -> str | None:
    """The nodes of leaf switch ``name`` as the lab's topology file writes them: topology.conf, or topology.yaml
    where it replaces topology.conf (25.05+, release.SlurmFeatures.topology_yaml)."""
    conf = lab.etc / "topology.conf"
    if conf.exists():
        m = re.search(rf"^SwitchName={name} Nodes=(\S+)", conf.read_text(), re.M)
        return m.group(1) if m else None
    doc = yaml.safe_load((lab.etc / "topology.yaml").read_text())
    for topo in doc:
        for sw in (topo.get("tree") or {}).get("switches") or []:
            if sw.get("switch") == name:
                return sw.get("nodes")
    return None


def _files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()}


def _slurmds(lab: Lab) -> list[str]:
    return sorted(k for k in lab.running_pids() if k.startswith("slurmd-"))


class _ReconfigureFailsOnce(CLIBackend):
    """The real backend, except that the first `scontrol reconfigure` fails as a controller would that refuses it."""

    failed = False

    def reconfigure(self) -> None:
        if not self.failed:
            self.failed = True
            raise SlurmCommandError(["scontrol", "reconfigure"], 1, "slurm_reconfigure error: injected by the test")
        super().reconfigure()


def test_a_refused_change_leaves_files_inventory_and_cluster_as_they_were(elab: Lab, backend: CLIBackend,
                                                                          long_job: str) -> None:
    lab = lab_for_conf(elab.conf)
    assert lab is not None and lab.dir == elab.dir
    site = LabSite(lab)
    before = _files(elab.etc)
    nodes_before = sorted(n.name for n in backend.nodes())
    e = edit.add_hosts(change.load_inventory(elab.etc), ["node5", "node6"], "h100")
    p = path.choose(release_under_test(), adding=True)
    assert p.kind == ("restart-ctld" if RESTART else "reconfigure")
    with pytest.raises(change.ElasticError, match="rolled back: the files, the inventory and the cluster are as they were"):
        change.apply_edit(site, _ReconfigureFailsOnce(env=elab.env), e, p, version=release_under_test())
    assert _files(elab.etc) == before  # slurm.conf, topology.conf, slurmkit.yaml, lab-overrides.yaml: byte for byte
    assert sorted(n.name for n in backend.nodes()) == nodes_before == ["node1", "node2", "node3", "node4"]
    assert job(backend, long_job).state == "RUNNING"


def test_a_new_node_whose_slurmd_never_registers_rolls_everything_back(elab: Lab, backend: CLIBackend,
                                                                      long_job: str) -> None:
    """node5's slurmd port is taken, so its slurmd exits at start ("Unable to bind listen port", 22.05 and 24.11
    slurmd.c _create_msg_socket) and node5 never registers: after --timeout the command stops the slurmd it
    started (node6's) and puts files, inventory and cluster back."""
    before = _files(elab.etc)
    busy = socket.socket()
    busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past a TIME_WAIT; slurmd still cannot bind it
    try:
        busy.bind(("0.0.0.0", elab.spec.slurmd_port(5)))
        busy.listen()
        res = sk(elab, "nodes", "add", "node[5-6]", "--group", "h100", "--timeout", "20")
    finally:
        busy.close()
    assert res.returncode == 1, res.stdout + res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("slurmkit: error: timed out after 20s waiting for node[5-6] to register: no slurmd "
                           "registered for node5 (node5 "), res.stderr
    assert last.endswith("rolled back: the files, the inventory and the cluster are as they were"), res.stderr
    assert "wrote " in res.stderr and "lab: stopping slurmd of node5, node6" in res.stderr
    assert _files(elab.etc) == before  # slurm.conf, topology.conf, slurmkit.yaml, lab-overrides.yaml: byte for byte
    nodes = sh(elab, elab.exe("scontrol"), "-o", "show", "nodes")
    assert sorted(line.split()[0] for line in nodes.splitlines()) == [f"NodeName=node{i}" for i in range(1, 5)]
    # a reconfigure makes each slurmd fork a new process that takes over and writes the pid file anew
    # (src/slurmd/slurmd/slurmd.c _try_to_reconfig, slurm-24-11-5-1 and slurm-26-05-3-1): for a moment the file names
    # the old, exiting one (seen on 26.05); the old nodes' slurmds must be back within seconds
    deadline = time.monotonic() + 15
    while _slurmds(elab) != [f"slurmd-node{i}" for i in range(1, 5)] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _slurmds(elab) == [f"slurmd-node{i}" for i in range(1, 5)]
    assert job(backend, long_job).state == "RUNNING"


def test_add_four_nodes_while_a_4_node_job_runs(elab: Lab, backend: CLIBackend, long_job: str) -> None:
    res = sk(elab, "nodes", "add", "node[5-8]", "--group", "h100b")
    assert res.returncode == 0, res.stdout + res.stderr
    err = res.stderr
    # the path is stated (with its source) before anything is written
    assert err.index("path: ") < err.index("wrote ")
    assert ("controller restart with its state kept" if RESTART else "path: scontrol reconfigure") in err
    assert "faq.shtml (24.11) #add_nodes" in err
    assert "added node[5-8] to group h100b" in res.stdout
    # what the new group does to the planned reserve (capacity.reserve_pct 15 %: 1 of 4), said before the change
    assert ("reserve of group h100b: 0 -> 4 node(s), planned spare 0 -> 1 (capacity.reserve_pct 15%" in err
            and err.index("reserve of group h100b") < err.index("wrote ")), err
    states = {n.name: n.state for n in backend.nodes()}
    assert all(states[f"node{i}"] == "idle" for i in range(5, 9)), states
    j = job(backend, long_job)
    assert j.state == "RUNNING" and sorted(j.nodes) == ["node1", "node2", "node3", "node4"]
    inv = yaml.safe_load((elab.etc / "slurmkit.yaml").read_text())
    assert [g["name"] for g in inv["node_groups"]] == ["h100", "h100b"]
    assert inv["partitions"][0]["groups"] == ["h100", "h100b"]
    assert _leaf(elab, "leaf2") == "node[5-8]"
    # the new nodes run a 4-node job (with a step on every node) next to the old one
    out = elab.dir / "log" / "new-nodes.out"
    jid = submit(elab, "-N4", "-w", "node[5-8]", "-o", str(out), "--wrap", "srun hostname | sort")
    assert wait_for(lambda: job(backend, jid).finished and job(backend, jid).state, 120, "job on node[5-8]") == "COMPLETED"
    assert out.read_text().split() == ["node5", "node6", "node7", "node8"]
    assert job(backend, long_job).state == "RUNNING"


def test_two_concurrent_removes_take_turns_and_both_land(elab: Lab, backend: CLIBackend, long_job: str) -> None:
    """`nodes remove node7` (waiting for a job on node7) holds the lock; `nodes remove node8` started meanwhile
    waits for it, then reads the inventory the first one wrote: both changes land (without the lock the second
    wrote node7 back)."""
    go = elab.dir / "log" / "remove-go"
    go.unlink(missing_ok=True)
    short = submit(elab, "-N1", "-w", "node7", "--wrap", f"while [ ! -e {go} ]; do sleep 0.2; done")
    wait_for(lambda: job(backend, short).state == "RUNNING", 60, f"job {short} to run")
    env = {**os.environ, **elab.env}
    argv = [sys.executable, "-m", "slurmkit.cli.main", "nodes", "remove"]
    logs = [elab.dir / "log" / f"remove-{n}.err" for n in ("node7", "node8")]
    with logs[0].open("w") as e1, logs[1].open("w") as e2:
        first = subprocess.Popen([*argv, "node7"], stdout=subprocess.PIPE, stderr=e1, text=True, cwd=ROOT, env=env)
        try:
            wait_for(lambda: f"waiting for job(s) {short}" in logs[0].read_text(), 120, "the first to wait for its job")
            second = subprocess.Popen([*argv, "node8", "--lock-wait", "300"], stdout=subprocess.PIPE, stderr=e2,
                                      text=True, cwd=ROOT, env=env)
            try:
                want = f"waiting up to 300s for pid {first.pid} (slurmkit nodes remove node7)"
                wait_for(lambda: want in logs[1].read_text(), 120, "the second to wait for the lock")
                assert first.poll() is None and second.poll() is None
                go.touch()
                out1, _ = first.communicate(timeout=300)
                out2, _ = second.communicate(timeout=300)
            finally:
                second.kill()
        finally:
            first.kill()
    err1, err2 = logs[0].read_text(), logs[1].read_text()
    assert first.returncode == 0 and "removed node7" in out1, err1
    assert second.returncode == 0 and "removed node8" in out2, err2
    assert "drained node7" in err1 and "drained node8" in err2
    assert job(backend, short).state == "COMPLETED"  # waited for, not killed
    assert sorted(n.name for n in backend.nodes()) == [f"node{i}" for i in range(1, 7)]
    j = job(backend, long_job)
    assert j.state == "RUNNING" and sorted(j.nodes) == ["node1", "node2", "node3", "node4"]
    assert _slurmds(elab) == [f"slurmd-node{i}" for i in range(1, 7)]
    inv = yaml.safe_load((elab.etc / "slurmkit.yaml").read_text())
    assert [g["hosts"] for g in inv["node_groups"]] == ["node[1-4]", "node[5-6]"]
    assert _leaf(elab, "leaf2") == "node[5-6]"
    assert not (elab.etc / change.LOCK_NAME).exists()


def test_remove_with_requeue_moves_the_job(elab: Lab, backend: CLIBackend, long_job: str) -> None:
    # kept off node[1-5] so that it lands on node6; the exclusion is lifted once node6 is gone
    moved = submit(elab, "-N1", "--exclusive", "-x", "node[1-5]", "--requeue", "--wrap", "sleep 3000")
    wait_for(lambda: job(backend, moved).state == "RUNNING", 60, f"job {moved} to run")
    assert job(backend, moved).nodes == ("node6",)
    # a job pinned to node6 (-w) would end NODE_FAIL once node6 is gone: refused, naming it, nothing changed
    pinned = submit(elab, "-N1", "-w", "node6", "--wrap", "true")
    wait_for(lambda: job(backend, pinned).state == "PENDING", 60, f"job {pinned} to be queued")
    res = sk(elab, "nodes", "remove", "node6", "--requeue")
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.strip().splitlines()[-1].startswith(
        f"slurmkit: error: HOSTS: queued job(s) that Slurm would fail without node6 (job {pinned}: pending, "
        "requires node6 (-w, ReqNodeList=node6))"), res.stderr
    assert job(backend, moved).state == "RUNNING" and not backend.node("node6").drained
    assert sorted(n.name for n in backend.nodes()) == [f"node{i}" for i in range(1, 7)]
    res = sk(elab, "nodes", "remove", "node6", "--requeue", "--cancel-stranded")
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"requeued job(s) {moved}" in res.stderr and f"cancelled job(s) {pinned}" in res.stderr
    assert job(backend, pinned).state == "CANCELLED"
    assert sorted(n.name for n in backend.nodes()) == [f"node{i}" for i in range(1, 6)]
    m = job(backend, moved)
    assert m.state == "PENDING" and m.restarts >= 1, m
    sh(elab, elab.exe("scontrol"), "update", f"jobid={moved}", "ExcNodeList=")
    wait_for(lambda: job(backend, moved).state == "RUNNING", 120, f"requeued job {moved} to run again")
    assert job(backend, moved).nodes == ("node5",)
    j = job(backend, long_job)
    assert j.state == "RUNNING" and sorted(j.nodes) == ["node1", "node2", "node3", "node4"]


class _StopFails(LabSite):
    """The lab, except that stopping a slurmd fails (as a site's `systemctl stop slurmd` that times out would)."""

    def stop_nodes(self, names: list[str], progress: change.Progress) -> None:
        raise OSError("injected by the test: slurmd did not stop")


def test_remove_whose_slurmd_does_not_stop_is_rolled_back(elab: Lab, backend: CLIBackend, long_job: str) -> None:
    """Issue 24 item 8: the change landed, then stopping node5's slurmd failed: before, the command ended there
    (node5 gone from the files and the cluster, its slurmd still running, drained); now the previous files are
    brought back and node5 resumed: files, inventory and cluster as they were."""
    lab = lab_for_conf(elab.conf)
    assert lab is not None
    for jid in change.jobs_on(backend, ["node5"]):  # the job the requeue test moved there
        backend.cancel(jid)
    wait_for(lambda: not change.jobs_on(backend, ["node5"]), 60, "node5's jobs to end")
    before = _files(elab.etc)
    nodes_before = sorted(n.name for n in backend.nodes())
    assert "node5" in nodes_before
    e = edit.remove_hosts(change.load_inventory(elab.etc), ["node5"])
    p = path.choose(release_under_test(), adding=False)
    drained = change.drain_and_wait(backend, ["node5"], requeue=False, timeout=60)
    assert drained == ["node5"] and backend.node("node5").drained
    with pytest.raises(change.ElasticError, match=r"^stopping slurmd on node5 failed \(injected by the test: slurmd "
                                                  r"did not stop\); rolled back: the files, the inventory and the "
                                                  r"cluster are as they were"):
        change.remove_nodes(_StopFails(lab), backend, e, p, ["node5"], drained, version=release_under_test())
    assert _files(elab.etc) == before
    assert sorted(n.name for n in backend.nodes()) == nodes_before
    change.wait_registered(backend, ["node5"], 60, in_service=True)  # resumed, responding
    assert "slurmd-node5" in _slurmds(elab)
    assert job(backend, long_job).state == "RUNNING"
