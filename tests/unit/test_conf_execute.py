"""`conf apply --execute` (issue 20 item 1) on a model cluster: exactly the printed plan, step by step, each checked;
a controller that dies is named with its log; a run killed before any step is finished by the next run."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from slurmkit.backend.parse import NodeInfo
from slurmkit.elastic import execute as ex
from slurmkit.generate import generate
from slurmkit.generate import rollout as ro
from slurmkit.model.load import load_cluster_dict
from slurmkit.model.yamlio import load as yload

ROOT = Path(__file__).resolve().parents[2]
LAB = yload((ROOT / "examples" / "lab.yaml").read_text())


def files_for(inv: dict, version: str) -> dict[str, str]:
    inv = {**copy.deepcopy(inv), "slurm_version": version}
    return generate(load_cluster_dict(inv), version=version, conf_dir="/etc/slurm")


class Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs (not an Exception, so no handler catches it)."""


class Model:
    """slurmctld, slurmd per node and the config each runs, as a log of what was done to them."""

    def __init__(self, conf_dir: Path, hosts: list[str], log: Path) -> None:
        self.conf_dir, self.hosts, self.logfile = conf_dir, hosts, log
        self.ctld_up = True
        self.ctld_conf = (conf_dir / "slurm.conf").read_text()
        self.slurmd_conf = {h: self.ctld_conf for h in hosts}
        self.drained: dict[str, str] = {}
        self.ops: list[str] = []
        self.die_on_start = False


class FakeSite:
    def __init__(self, m: Model) -> None:
        self.m = m

    def stop_slurmctld(self) -> None:
        self.m.ops.append("stop-ctld")
        self.m.ctld_up = False

    def start_slurmctld(self) -> None:
        self.m.ops.append("start-ctld")
        if self.m.die_on_start:
            self.m.logfile.write_text("slurmctld: error: x\nslurmctld: fatal: MaxNodeCount has changed (4->3)\n")
            return
        self.m.ctld_up = True
        self.m.ctld_conf = (self.m.conf_dir / "slurm.conf").read_text()

    def can_restart_slurmds(self) -> bool:
        return True

    def restart_slurmds(self, names: list[str]) -> None:
        self.m.ops.append(f"restart-slurmd {len(names)}")
        for h in names:
            self.m.slurmd_conf[h] = (self.m.conf_dir / "slurm.conf").read_text()

    def restart_slurmdbd(self) -> None:
        self.m.ops.append("restart-slurmdbd")

    def ctld_log_tail(self, n: int = 5) -> tuple[str, list[str]]:
        from slurmkit.backend.run import log_tail

        return str(self.m.logfile), log_tail(self.m.logfile, n)


class FakeBackend:
    def __init__(self, m: Model) -> None:
        self.m = m

    def ping(self) -> bool:
        return self.m.ctld_up

    def _need(self) -> None:
        from slurmkit.errors import SlurmCommandError

        if not self.m.ctld_up:
            raise SlurmCommandError(["scontrol"], 1, "Unable to contact slurm controller")

    def nodes(self, names: list[str] | None = None) -> list[NodeInfo]:
        self._need()
        return [NodeInfo(h, "idle", frozenset({"DRAIN"}) if h in self.m.drained else frozenset(), self.m.drained.get(h, ""))
                for h in self.m.hosts if names is None or h in names]

    def jobs(self) -> list:
        self._need()
        return []

    def drain(self, nodes: str, reason: str) -> None:
        from slurmkit import hostlist

        self._need()
        self.m.ops.append(f"drain {nodes}")
        self.m.drained.update(dict.fromkeys(hostlist.expand(nodes), reason))

    def resume(self, nodes: str) -> None:
        from slurmkit import hostlist

        self._need()
        self.m.ops.append(f"resume {nodes}")
        for h in hostlist.expand(nodes):
            self.m.drained.pop(h, None)

    def reconfigure(self) -> None:
        self._need()
        self.m.ops.append("reconfigure")
        self.m.ctld_conf = (self.m.conf_dir / "slurm.conf").read_text()


def setup(tmp_path: Path, old: dict[str, str], new: dict[str, str], version: str):
    d = tmp_path / "etc"
    ro.write_files(old, d, backup=False)
    m = Model(d, [f"node{i}" for i in range(1, 9)], tmp_path / "slurmctld.log")
    steps = ro.plan_steps(ro.semantic_diff(old, new, version), version)
    journal = ex.new_journal(steps, new, ro.read_dir(d), version)
    return d, m, steps, journal


def executor(d: Path, m: Model, new: dict[str, str]) -> ex.Executor:
    e = ex.Executor(FakeSite(m), FakeBackend(m), d, new, timeout=1.0)
    e._alive_after = lambda when, settle=2.0: None if m.ctld_up else (_ for _ in ()).throw(e._dead(when))  # type: ignore[method-assign]
    return e


def _removed_node8() -> dict:
    inv = copy.deepcopy(LAB)
    inv["node_groups"][0]["hosts"] = "node[1-7]"
    inv["topology"]["switches"][1]["nodes"] = "node[5-7]"
    return inv


def test_a_node_count_change_on_22_05_is_carried_by_restarts_never_a_reconfigure(tmp_path: Path) -> None:
    """The issue's case: 22.05 slurmctld dies on a reconfigure that changes the node count. The plan stops
    slurmctld, writes, restarts every slurmd, starts slurmctld, and --execute does exactly that."""
    old, new = files_for(LAB, "22.05"), files_for(_removed_node8(), "22.05")
    d, m, steps, journal = setup(tmp_path, old, new, "22.05")
    assert [s.kind for s in steps] == ["drain", "stop-ctld", "write", "restart-slurmd", "start-ctld", "verify"]
    m.hosts = [f"node{i}" for i in range(1, 9)]
    executor(d, m, new).run(journal)
    assert "reconfigure" not in m.ops
    assert m.ops == ["drain node8", "stop-ctld", "restart-slurmd 7", "start-ctld"]
    assert m.ctld_conf == new["slurm.conf"] and ex.load_journal(d) is None


@pytest.mark.parametrize("kill_at", range(1, 7))
def test_a_run_killed_before_any_step_is_finished_by_the_next(tmp_path: Path, kill_at: int) -> None:
    old, new = files_for(LAB, "22.05"), files_for(_removed_node8(), "22.05")
    d, m, steps, journal = setup(tmp_path, old, new, "22.05")
    e = executor(d, m, new)

    def step(i: int, s: ro.Step) -> None:
        if i == kill_at:
            raise Killed

    e._step = step  # type: ignore[method-assign]
    with pytest.raises(Killed):
        e.run(journal)
    pending = ex.load_journal(d)
    assert pending is not None and pending["done"] == kill_at - 1
    executor(d, m, new).run(pending)  # the next `apply --execute` with the same inventory
    assert m.ctld_up and m.ctld_conf == new["slurm.conf"] and ro.read_dir(d)["slurm.conf"] == new["slurm.conf"]
    assert all(m.slurmd_conf[f"node{i}"] == new["slurm.conf"] for i in range(1, 8))
    assert ex.load_journal(d) is None and "reconfigure" not in m.ops


def test_a_controller_that_dies_on_start_is_named_with_its_log(tmp_path: Path) -> None:
    old, new = files_for(LAB, "22.05"), files_for(_removed_node8(), "22.05")
    d, m, steps, journal = setup(tmp_path, old, new, "22.05")
    m.die_on_start = True
    with pytest.raises(ex.RolloutError) as err:
        executor(d, m, new).run(journal)
    msg = err.value.one_line()
    assert msg.startswith("step 5 of 6 (start slurmctld) failed: slurmctld is not answering after it was started")
    assert "fatal: MaxNodeCount has changed (4->3)" in msg and str(m.logfile) in msg
    assert msg.endswith("steps 5-6 of 6 remain (start slurmctld; verify); rerun with --execute to carry on from "
                        "there (or apply the previous inventory to go back)")
    assert ex.load_journal(d)["done"] == 4  # type: ignore[index]


def test_a_controller_dead_before_a_step_is_detected(tmp_path: Path) -> None:
    old = files_for(LAB, "22.05")
    inv = copy.deepcopy(LAB)
    inv["node_groups"][0]["weight"] = 5
    new = files_for(inv, "22.05")
    d, m, steps, journal = setup(tmp_path, old, new, "22.05")
    assert [s.kind for s in steps] == ["write", "reconfigure", "verify"]
    m.ctld_up = False
    m.logfile.write_text("slurmctld: fatal: something\n")
    with pytest.raises(ex.RolloutError, match=r"slurmctld is not answering before step 1 of 3 .*fatal: something"):
        executor(d, m, new).run(journal)
    assert ro.read_dir(d)["slurm.conf"] == old["slurm.conf"]  # nothing was done


def test_plan_lines_fold_hostlists_once(tmp_path: Path) -> None:
    """Issue 20 item 8: 'inf[01-04],inf[01-04]' in a plan line."""
    ch = [ro.Change("gres.conf", "NodeName=inf[01-04]", "a", "b", ro.DRAIN, "x", "inf[01-04]"),
          ro.Change("slurm.conf", "NodeName=inf[01-04] realmemory", "1", "2", ro.DRAIN, "y", "inf[01-02]")]
    steps = ro.plan_steps(ch, "22.05")
    assert steps[0].nodes == "inf[01-04]" and "inf[01-04]," not in steps[0].text


def test_backups_keep_the_newest(tmp_path: Path) -> None:
    d = tmp_path / "etc"
    for i in range(6):
        ro.write_files({"slurm.conf": f"# {i}\n"}, d, keep=3)
    kept = sorted(p.name for p in (d / ro.BACKUP_DIR).iterdir())
    assert len(kept) == 3
    assert (d / ro.BACKUP_DIR / kept[-1] / "slurm.conf").read_text() == "# 4\n"


def test_reconfigure_is_refused_where_the_plan_needs_restarts(tmp_path: Path) -> None:
    """Issue 20 item 1: `apply --allow-disruptive --reconfigure` ran `scontrol reconfigure` although its own plan
    said stop/restart/start; now it refuses before writing anything."""
    import subprocess
    import sys

    import yaml

    d = tmp_path / "etc"
    ro.write_files(files_for(LAB, "22.05"), d, backup=False)
    inv = tmp_path / "new.yaml"
    inv.write_text(yaml.safe_dump({**_removed_node8(), "slurm_version": "22.05"}, sort_keys=False))
    before = ro.read_dir(d)
    res = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "conf", "apply", str(inv), "--to", str(d),
                          "--no-real-parse", "--allow-disruptive", "--reconfigure"], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert res.returncode == 3, res.stdout + res.stderr
    assert "refusing: --reconfigure cannot carry this plan (step 2: stop slurmctld" in res.stderr
    assert ro.read_dir(d) == before and ex.load_journal(d) is None


class StampedBackend(FakeBackend):
    """22.05's text `scontrol -o show node`: the reason ends with " [user@time]"."""

    def nodes(self, names: list[str] | None = None) -> list[NodeInfo]:
        return [NodeInfo(n.name, n.state, n.flags, f"{n.reason} [root@2026-12-01T20:06:05]" if n.reason else "")
                for n in super().nodes(names)]


def test_the_nodes_a_22_05_drain_took_are_resumed(tmp_path: Path) -> None:
    """Issue 20 item 2 (found by tests/integration/test_rollout_lab.py): on 22.05 every drained apply left the nodes
    drained -- the resume step compared the stamped reason with "slurmkit: config change (conf apply)"."""
    old = files_for(LAB, "22.05")
    inv = copy.deepcopy(LAB)
    inv["node_groups"][0]["memory_mb"] = 30000
    new = files_for(inv, "22.05")
    d, m, steps, journal = setup(tmp_path, old, new, "22.05")
    assert steps[0].kind == "drain" and steps[-1].kind == "resume"
    e = ex.Executor(FakeSite(m), StampedBackend(m), d, new, timeout=1.0)
    e._alive_after = lambda when, settle=2.0: None  # type: ignore[method-assign]
    e.run(journal)
    assert m.ops[-1] == "resume node[1-8]" and not m.drained, m.ops


def test_job_container_change_drains_restarts_slurmd_and_resumes_on_22_05(tmp_path: Path) -> None:
    """Seen on the 22.05 lab: the resume step compared the stamped reason with the one it set and left every node
    drained ("done: all 6 steps carried out", sinfo: drain)."""
    rt = {"tmpfs": {"base_path": "/var/spool/slurmd/job_tmpfs"}}
    old = files_for(dict(LAB, runtime=rt), "22.05")
    new = files_for(dict(LAB, runtime={"tmpfs": {"base_path": "/local/job_tmpfs"}}), "22.05")
    d, m, steps, journal = setup(tmp_path, old, new, "22.05")
    assert [s.kind for s in steps] == ["drain", "write", "restart-slurmd", "verify", "resume"]
    e = ex.Executor(FakeSite(m), StampedBackend(m), d, new, timeout=1.0)
    e._alive_after = lambda when, settle=2.0: None  # type: ignore[method-assign]
    e.run(journal)
    assert m.ops == ["drain node[1-8]", "restart-slurmd 8", "resume node[1-8]"]
    assert not m.drained


def test_slurmdbd_conf_change_restarts_slurmdbd_only(tmp_path: Path) -> None:
    acct = {"host": "localhost", "storage": {"user": "slurm"}}
    old = files_for(dict(LAB, accounting=acct), "22.05")
    new = files_for(dict(LAB, accounting=dict(acct, purge={"jobs": "6month"})), "22.05")
    d, m, steps, journal = setup(tmp_path, old, new, "22.05")
    assert [s.kind for s in steps] == ["write", "restart-slurmdbd", "verify"]
    executor(d, m, new).run(journal)
    assert m.ops == ["restart-slurmdbd"]
    assert (d / "slurmdbd.conf").read_text() == new["slurmdbd.conf"]
    assert (d / "slurmdbd.conf").stat().st_mode & 0o777 == 0o600
